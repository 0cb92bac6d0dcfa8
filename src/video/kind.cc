// A clip from a video's bytes, and video clips as a kind of sample.
#include "video/kind.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/resample.h"
#include "ops/op.h"
#include "ops/plan.h"
#include "ops/prep.h"
#include "video/backend.h"

namespace nostall::video {

using nlohmann::json;

Result<std::vector<int64_t>> ClipIndices(const Spec& spec, int64_t frames, double fps, int c, Philox& rng) {
  int64_t positions = frames;
  double per_position = 1;  // source frames per position
  if (spec.frame_rate > 0) {
    if (!(fps > 0)) {
      return DataError("the video states no frame rate: Clip(frame_rate=...) needs one");
    }
    per_position = fps / spec.frame_rate;
    // torchvision's VideoClips: floor(frames * frame_rate / fps) positions.
    positions = std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(frames) / per_position)));
  }
  const int64_t span = static_cast<int64_t>(spec.num_frames - 1) * spec.step + 1;
  int64_t start = 0;
  if (positions > span) {
    const int64_t last = positions - span;  // the last start with the whole clip inside
    if (spec.sampling == Sampling::kRandom) {
      start = rng.Between(0, last);
    } else if (spec.clips <= 1) {
      start = last / 2;
    } else {
      start = static_cast<int64_t>(c) * last / (spec.clips - 1);
    }
  }
  std::vector<int64_t> out(static_cast<size_t>(spec.num_frames));
  for (int t = 0; t < spec.num_frames; ++t) {
    const int64_t p = std::min(start + int64_t{t} * spec.step, positions - 1);
    const int64_t frame = spec.frame_rate > 0 ? static_cast<int64_t>(std::floor(static_cast<double>(p) * per_position)) : p;
    out[t] = std::min(frame, frames - 1);
  }
  return out;
}

std::vector<int64_t> ClipIndicesAtTimes(const Spec& spec, const std::vector<double>& times, double end, int c,
                                        Philox& rng) {
  const double s = spec.seconds_between_frames;
  const double begin = times.front();
  // torchcodec's clip duration: the last frame's time plus one frame.
  const double one_frame = times.size() > 1 ? (end - begin) / static_cast<double>(times.size()) : 0;
  const double room = end - begin - ((spec.num_frames - 1) * s + one_frame);  // the starts' range
  double start = begin;
  if (room > 0) {
    if (spec.sampling == Sampling::kRandom) {
      start = begin + rng.Uniform() * room;
    } else if (spec.clips <= 1) {
      start = begin + room / 2;
    } else {
      start = begin + room * c / (spec.clips - 1);
    }
  }
  std::vector<int64_t> out(static_cast<size_t>(spec.num_frames));
  for (int t = 0; t < spec.num_frames; ++t) {
    const double at = start + t * s + 1e-9;  // (a time a frame starts at shows that frame)
    const auto it = std::upper_bound(times.begin(), times.end(), at);
    out[t] = std::max<int64_t>(0, static_cast<int64_t>(it - times.begin()) - 1);
  }
  return out;
}

struct Scratch {
  ResampleScratch resample;
  OpScratch ops;
  std::vector<uint8_t> frame;  // a frame resampled, interleaved, when ops run on it
};
void ScratchDeleter::operator()(Scratch* s) const { delete s; }
std::unique_ptr<Scratch, ScratchDeleter> NewScratch() { return std::unique_ptr<Scratch, ScratchDeleter>(new Scratch); }

namespace {

// The box of the source frame (w x h) the clip's output is resampled from.
Status DrawBox(const Spec& spec, int w, int h, Philox& rng, ClipDraw* d) {
  int rw = w, rh = h;  // the frame after Resize
  if (spec.resize_min > 0) {  // torchvision v2's RandomResize: randint(min, max), then the short side
    const int side = static_cast<int>(rng.Between(spec.resize_min, spec.resize_max - 1));
    NOSTALL_RETURN_IF_ERROR(ShortSideSize(w, h, side, 0, &rw, &rh));
  } else if (spec.resize_short > 0) {
    NOSTALL_RETURN_IF_ERROR(ShortSideSize(w, h, spec.resize_short, spec.max_size, &rw, &rh));
  } else if (spec.resize_h > 0) {
    rw = spec.resize_w;
    rh = spec.resize_h;
  }
  const double sx = static_cast<double>(w) / rw, sy = static_cast<double>(h) / rh;
  int left = 0, top = 0, cw = rw, ch = rh;
  switch (spec.crop) {
    case CropKind::kNone: break;
    case CropKind::kRandom:
    case CropKind::kCenter:
      cw = spec.crop_w;
      ch = spec.crop_h;
      if (cw > rw || ch > rh) {
        return DataError("the crop (" + std::to_string(ch) + " x " + std::to_string(cw) + ") is larger than the " +
                         (spec.resize_short > 0 || spec.resize_h > 0 || spec.resize_min > 0 ? "resized " : "") + "frame (" +
                         std::to_string(rh) + " x " + std::to_string(rw) + ")");
      }
      if (spec.crop == CropKind::kRandom) {
        top = static_cast<int>(rng.Between(0, rh - ch));
        left = static_cast<int>(rng.Between(0, rw - cw));
      } else {  // torchvision's CenterCrop: int(round((h - th) / 2))
        top = static_cast<int>(std::lround((rh - ch) / 2.0));
        left = static_cast<int>(std::lround((rw - cw) / 2.0));
      }
      break;
    case CropKind::kRandomResized: {
      const CropDraw c = DrawResizedCrop(rng, rw, rh, spec.scale_min, spec.scale_max, spec.ratio_min, spec.ratio_max);
      left = c.left;
      top = c.top;
      cw = c.w;
      ch = c.h;
      break;
    }
  }
  d->x = left * sx;
  d->y = top * sy;
  d->w = cw * sx;
  d->h = ch * sy;
  d->flip = spec.flip_p > 0 && rng.Uniform() < spec.flip_p;
  return Status::OK();
}

}  // namespace

namespace {

// A clip's stream for the ops on its pixels, `salt` apart from the sample's.
Philox ClipStream(const SampleKey& key, uint64_t salt) {
  SampleKey k = key;
  k.seed ^= salt;
  return k.Stream(SampleStream::kPixelOps);
}

// Clip c's pixel ops draw from a stream of their own (clip 0's is the
// sample's, as with one clip).
Philox ClipOpsStream(const SampleKey& key, int c) {
  return ClipStream(key, 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(c));
}

// Clip c's RandomErasing: each one's box drawn once (by the image op, on
// the clip's frame size) and erased in every frame and channel of the clip
// starting at `base` (its elements, `f32` or uint8, laid out as the spec says).
void EraseClip(const Spec& spec, const SampleKey& key, int c, bool f32, void* base) {
  Philox rng = ClipStream(key, 0xE7A5E0C1D3B2A190ULL * static_cast<uint64_t>(c + 1));
  const size_t plane = static_cast<size_t>(spec.out_h) * spec.out_w;
  for (const Spec::Erase& e : spec.erase) {
    nlohmann::json trace = nlohmann::json::array();
    e.op->ApplyOutput(OutputView{nullptr, f32, true, spec.out_h, spec.out_w, 3}, rng, &trace);
    if (trace.empty() || !trace.back().value("applied", false)) continue;
    const nlohmann::json& box = trace.back()["box"];
    const int top = box[0].get<int>(), left = box[1].get<int>(), h = box[2].get<int>(), w = box[3].get<int>();
    for (int t = 0; t < spec.num_frames; ++t) {
      for (int ch = 0; ch < 3; ++ch) {
        const size_t first = (spec.tchw ? static_cast<size_t>(t) * 3 + ch : static_cast<size_t>(ch) * spec.num_frames + t) * plane;
        const double fixed = e.value.empty() ? 0.0 : e.value[e.value.size() == 1 ? 0 : ch];
        for (int y = top; y < top + h; ++y) {
          for (int x = left; x < left + w; ++x) {
            const double v = e.random ? rng.Normal() : fixed;
            const size_t at = first + static_cast<size_t>(y) * spec.out_w + x;
            if (f32) {
              static_cast<float*>(base)[at] = static_cast<float>(v);
            } else {
              static_cast<uint8_t*>(base)[at] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
            }
          }
        }
      }
    }
  }
}

}  // namespace

std::shared_ptr<const Scanned> ScanCache::Get(int64_t item) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = at_.find(item);
  if (it == at_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void ScanCache::Put(int64_t item, std::shared_ptr<const Scanned> scanned) {
  if (scanned == nullptr || scanned->bytes > limit_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = at_.find(item); it != at_.end()) {
    bytes_ -= it->second->second->bytes;
    lru_.erase(it->second);
    at_.erase(it);
  }
  bytes_ += scanned->bytes;
  lru_.emplace_front(item, std::move(scanned));
  at_[item] = lru_.begin();
  while (bytes_ > limit_) {
    bytes_ -= lru_.back().second->bytes;
    at_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

size_t ScanCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

Status Prepare(const Spec& spec, const Bytes& bytes, const SampleKey& key, DType dtype, void* dst, float* audio,
               Scratch* scratch, ScanCache* scans, std::vector<ClipDraw>* draws, int64_t* decoded) {
  NOSTALL_ASSIGN_OR_RETURN(const Backend* backend, GetBackend());
  std::shared_ptr<const Scanned> known = scans != nullptr ? scans->Get(key.index) : nullptr;
  NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<Decoder> decoder, backend->Open(bytes, known));
  if (scans != nullptr && decoder->scanned() != known) scans->Put(key.index, decoder->scanned());
  const StreamInfo& info = decoder->info();
  const int n_clips = spec.ClipCount(), t_count = spec.num_frames;
  std::vector<ClipDraw> local;
  std::vector<ClipDraw>& d = draws != nullptr ? *draws : local;
  d.assign(static_cast<size_t>(n_clips), ClipDraw{});
  // Each clip's frames, then its geometry, from the one stream: clip 0's
  // draws are those of a list without `clips`.
  Philox rng = key.Stream(SampleStream::kVideo);
  std::vector<std::pair<int64_t, int>> order;  // (frame, clip * T + t), decoded in frame order
  order.reserve(static_cast<size_t>(n_clips) * t_count);
  std::vector<double> times;  // by time: each frame's
  if (spec.seconds_between_frames > 0) {
    for (int64_t i = 0; i < info.frames; ++i) times.push_back(decoder->FrameTime(i));
  }
  for (int c = 0; c < n_clips; ++c) {
    if (times.empty()) {
      NOSTALL_ASSIGN_OR_RETURN(d[c].indices, ClipIndices(spec, info.frames, info.fps, c, rng));
    } else {
      d[c].indices = ClipIndicesAtTimes(spec, times, times.front() + info.duration, c, rng);
    }
    d[c].time = decoder->FrameTime(d[c].indices.front());
    NOSTALL_RETURN_IF_ERROR(DrawBox(spec, info.width, info.height, rng, &d[c]));
    for (int t = 0; t < t_count; ++t) order.push_back({d[c].indices[t], c * t_count + t});
  }
  std::stable_sort(order.begin(), order.end());
  std::vector<int64_t> wanted(order.size());
  for (size_t i = 0; i < order.size(); ++i) wanted[i] = order[i].first;
  const size_t plane = static_cast<size_t>(spec.out_h) * spec.out_w;
  const size_t clip_elems = plane * 3 * static_cast<size_t>(t_count);
  const bool f32 = dtype == DType::kFloat32;
  const float* a = spec.normalize ? spec.mul : nullptr;
  const float* b = spec.normalize ? spec.add : nullptr;
  const float unit[3] = {1.0f / 255, 1.0f / 255, 1.0f / 255}, zero[3] = {0, 0, 0};
  if (f32 && a == nullptr) {  // float32 without Normalize: x / 255, as ToTensor
    a = unit;
    b = zero;
  }
  auto sink = [&](int k, const Frame& f) -> Status {
    const int c = order[k].second / t_count, t = order[k].second % t_count;
    const ClipDraw& cd = d[c];
    // Frame t's planes: (C, T, H, W) puts them T x H x W apart.
    const size_t first = c * clip_elems + (spec.tchw ? static_cast<size_t>(t) * 3 * plane : static_cast<size_t>(t) * plane);
    const size_t stride = spec.tchw ? plane : plane * t_count;
    float* out_f = f32 ? static_cast<float*>(dst) + first : nullptr;
    uint8_t* out_u8 = f32 ? nullptr : static_cast<uint8_t*>(dst) + first;
    if (spec.ops.empty()) {  // resampled straight into the planes
      ResampleBoxPlanar(f.rgb, f.width, f.height, f.stride, 3, cd.x, cd.y, cd.w, cd.h, spec.out_w, spec.out_h,
                        cd.flip, a, b, out_f, out_u8, &scratch->resample, stride);
      return Status::OK();
    }
    scratch->frame.resize(plane * 3 + 4);  // (+ the byte InterleavedToPlanes reads past the last pixel)
    ResampleBox(f.rgb, f.width, f.height, f.stride, 3, cd.x, cd.y, cd.w, cd.h, scratch->frame.data(), spec.out_w,
                spec.out_h, &scratch->resample, cd.flip);
    const ImageView img{scratch->frame.data(), spec.out_h, spec.out_w, 3};
    Philox ops = ClipOpsStream(key, c);  // one draw per clip: each frame starts from it
    for (const Transform& tr : spec.ops) tr.op->Apply(img, ops, scratch->ops, nullptr);
    InterleavedToPlanes(scratch->frame.data(), spec.out_w, spec.out_h, a, b, out_f, out_u8, stride);
    return Status::OK();
  };
  int64_t produced = 0;
  NOSTALL_RETURN_IF_ERROR(decoder->Decode(wanted.data(), static_cast<int>(wanted.size()), sink, &produced));
  if (decoded != nullptr) *decoded = produced;
  for (int c = 0; c < n_clips && !spec.erase.empty(); ++c) {
    const size_t at = c * clip_elems;
    EraseClip(spec, key, c, f32, f32 ? static_cast<void*>(static_cast<float*>(dst) + at)
                                     : static_cast<void*>(static_cast<uint8_t*>(dst) + at));
  }
  if (spec.audio() && audio != nullptr) {
    const size_t per_clip = static_cast<size_t>(spec.audio_channels) * static_cast<size_t>(spec.audio_samples);
    for (int c = 0; c < n_clips; ++c) {
      NOSTALL_RETURN_IF_ERROR(decoder->DecodeAudio(d[c].time, spec.audio_rate, spec.audio_channels,
                                                   spec.audio_samples, audio + c * per_clip));
    }
  }
  return Status::OK();
}

namespace {

struct VideoScratch : KindScratch {
  std::unique_ptr<Scratch, ScratchDeleter> video = NewScratch();
};

class VideoKind final : public SampleKind {
 public:
  explicit VideoKind(std::shared_ptr<const Spec> spec) : spec_(std::move(spec)) {}
  // The files' scans this kind's loader keeps: 64 MB (a 10 s clip's is ~5 KB,
  // an hour at 30 frames/s ~2 MB).
  static constexpr size_t kScanCacheBytes = size_t{64} << 20;
  const Spec& spec() const { return *spec_; }

  const char* name() const override { return "video"; }
  const char* unit() const override { return "clips"; }
  Status Validate(const PrepSpec& prep) const override {
    if (!prep.transforms.empty()) {
      return InvalidArgument("a video batch takes its transforms from \"video\"; \"transforms\" (image "
                             "transforms) must be empty");
    }
    if (spec_->normalize && prep.dtype != DType::kFloat32) {
      return InvalidArgument("video Normalize gives float32 clips (dtype \"float32\")");
    }
    for (const Spec::Erase& e : spec_->erase) {
      if (e.random && prep.dtype != DType::kFloat32) return InvalidArgument("video " + e.op->needs_float32());
    }
    return Status::OK();
  }
  int channels(const PrepSpec&) const override { return 3; }
  std::optional<WrittenField> written_field() const override {
    return spec_->audio() ? std::optional<WrittenField>(WrittenField::kClipAudio) : std::nullopt;
  }
  bool FixedOutputSize(const PrepSpec&, int* height, int* width) const override {
    *height = spec_->out_h;
    *width = spec_->out_w;
    return true;
  }
  std::vector<int64_t> SampleShape(const PrepSpec&, int, int) const override { return spec_->Shape(); }
  size_t SampleBytes(const PrepSpec& prep, int, int) const override { return spec_->SampleBytes(prep.dtype); }
  Status Prepare(const PrepSpec& prep, const SampleInput& in, const SampleKey& key, const SampleOutput& out,
                 PrepScratch* scratch) const override {
    float* audio = nullptr;
    if (spec_->audio()) {
      if (out.targets == nullptr || out.targets_room < spec_->AudioBytes()) {
        return Internal("the clip_audio field has no room for the clip's audio");
      }
      audio = reinterpret_cast<float*>(out.targets);  // (4-byte aligned: the room is floats)
      *out.targets_len = static_cast<int64_t>(spec_->AudioBytes());
    }
    Bytes bytes{in.data, in.size, in.size, {}};
    if (in.file != nullptr) {  // a long file: its first bytes here, the rest read where the demuxer wants it
      bytes.size = in.file->size();
      bytes.read = [file = in.file](uint64_t offset, size_t n, uint8_t* to) { return file->ReadAt(offset, n, to); };
    }
    return video::Prepare(*spec_, bytes, key, prep.dtype, out.dst, audio,
                          KindScratchOf<VideoScratch>(scratch).video.get(), scans_.get());
  }
  bool ReadsPart() const override { return true; }
  nlohmann::json ToJson() const override { return spec_->resolved; }

 private:
  std::shared_ptr<const Spec> spec_;
  std::unique_ptr<ScanCache> scans_ = std::make_unique<ScanCache>(kScanCacheBytes);
};

}  // namespace

std::shared_ptr<const SampleKind> MakeKind(std::shared_ptr<const Spec> spec) {
  return std::make_shared<VideoKind>(std::move(spec));
}

const Spec* SpecOf(const PrepSpec& prep) {
  const auto* kind = dynamic_cast<const VideoKind*>(prep.kind.get());
  return kind != nullptr ? &kind->spec() : nullptr;
}

}  // namespace nostall::video
