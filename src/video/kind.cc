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

std::vector<int64_t> ClipIndices(const Spec& spec, int64_t frames, Philox& rng) {
  const int64_t span = static_cast<int64_t>(spec.num_frames - 1) * spec.step + 1;
  int64_t start = 0;
  if (frames > span) {
    start = spec.sampling == Sampling::kRandom ? rng.Between(0, frames - span) : (frames - span) / 2;
  }
  std::vector<int64_t> out(static_cast<size_t>(spec.num_frames));
  for (int t = 0; t < spec.num_frames; ++t) out[t] = std::min(start + int64_t{t} * spec.step, frames - 1);
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
  if (spec.resize_short > 0) {
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
                         (spec.resize_short > 0 || spec.resize_h > 0 ? "resized " : "") + "frame (" +
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

Status Prepare(const Spec& spec, const uint8_t* data, size_t size, const SampleKey& key, DType dtype, void* dst,
               Scratch* scratch, ClipDraw* draw) {
  NOSTALL_ASSIGN_OR_RETURN(const Backend* backend, GetBackend());
  NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<Decoder> decoder, backend->Open(data, size));
  const StreamInfo& info = decoder->info();
  Philox rng = key.Stream(SampleStream::kVideo);
  ClipDraw local;
  ClipDraw* d = draw != nullptr ? draw : &local;
  d->indices = ClipIndices(spec, info.frames, rng);
  NOSTALL_RETURN_IF_ERROR(DrawBox(spec, info.width, info.height, rng, d));
  const size_t plane = static_cast<size_t>(spec.out_h) * spec.out_w;
  const bool f32 = dtype == DType::kFloat32;
  const float* a = spec.normalize ? spec.mul : nullptr;
  const float* b = spec.normalize ? spec.add : nullptr;
  const float unit[3] = {1.0f / 255, 1.0f / 255, 1.0f / 255}, zero[3] = {0, 0, 0};
  if (f32 && a == nullptr) {  // float32 without Normalize: x / 255, as ToTensor
    a = unit;
    b = zero;
  }
  const int t_count = spec.num_frames;
  const Philox ops_rng = key.Stream(SampleStream::kPixelOps);  // one draw: each frame starts from it
  auto sink = [&](int k, const Frame& f) -> Status {
    // Frame k's planes: (C, T, H, W) puts them T x H x W apart.
    const size_t first = spec.tchw ? static_cast<size_t>(k) * 3 * plane : static_cast<size_t>(k) * plane;
    const size_t stride = spec.tchw ? plane : plane * t_count;
    float* out_f = f32 ? static_cast<float*>(dst) + first : nullptr;
    uint8_t* out_u8 = f32 ? nullptr : static_cast<uint8_t*>(dst) + first;
    if (spec.ops.empty()) {  // resampled straight into the planes
      ResampleBoxPlanar(f.rgb, f.width, f.height, f.stride, 3, d->x, d->y, d->w, d->h, spec.out_w, spec.out_h,
                        d->flip, a, b, out_f, out_u8, &scratch->resample, stride);
      return Status::OK();
    }
    scratch->frame.resize(plane * 3 + 4);  // (+ the byte InterleavedToPlanes reads past the last pixel)
    ResampleBox(f.rgb, f.width, f.height, f.stride, 3, d->x, d->y, d->w, d->h, scratch->frame.data(), spec.out_w,
                spec.out_h, &scratch->resample, d->flip);
    const ImageView img{scratch->frame.data(), spec.out_h, spec.out_w, 3};
    Philox rng = ops_rng;
    for (const Transform& t : spec.ops) t.op->Apply(img, rng, scratch->ops, nullptr);
    InterleavedToPlanes(scratch->frame.data(), spec.out_w, spec.out_h, a, b, out_f, out_u8, stride);
    return Status::OK();
  };
  return decoder->Decode(d->indices.data(), t_count, sink, &d->decoded);
}

namespace {

struct VideoScratch : KindScratch {
  std::unique_ptr<Scratch, ScratchDeleter> video = NewScratch();
};

class VideoKind final : public SampleKind {
 public:
  explicit VideoKind(std::shared_ptr<const Spec> spec) : spec_(std::move(spec)) {}
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
    return Status::OK();
  }
  int channels(const PrepSpec&) const override { return 3; }
  bool FixedOutputSize(const PrepSpec&, int* height, int* width) const override {
    *height = spec_->out_h;
    *width = spec_->out_w;
    return true;
  }
  std::vector<int64_t> SampleShape(const PrepSpec&, int, int) const override { return spec_->Shape(); }
  size_t SampleBytes(const PrepSpec& prep, int, int) const override { return spec_->SampleBytes(prep.dtype); }
  Status Prepare(const PrepSpec& prep, const SampleInput& in, const SampleKey& key, const SampleOutput& out,
                 PrepScratch* scratch) const override {
    return video::Prepare(*spec_, in.data, in.size, key, prep.dtype, out.dst,
                          KindScratchOf<VideoScratch>(scratch).video.get());
  }
  nlohmann::json ToJson() const override { return spec_->resolved; }

 private:
  std::shared_ptr<const Spec> spec_;
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
