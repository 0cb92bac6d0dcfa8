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

namespace {

std::string Shown(const json& j) { return j.dump().substr(0, 80); }

Status SizeArg(const json& t, const char* name, int* h, int* w) {
  const json& s = t.contains("size") ? t["size"] : json();
  if (s.is_number_integer() && s.get<int64_t>() > 0 && s.get<int64_t>() <= 16384) {
    *h = *w = s.get<int>();
    return Status::OK();
  }
  if (s.is_array() && s.size() == 2 && s[0].is_number_integer() && s[1].is_number_integer() && s[0].get<int64_t>() > 0 &&
      s[1].get<int64_t>() > 0 && s[0].get<int64_t>() <= 16384 && s[1].get<int64_t>() <= 16384) {
    *h = s[0].get<int>();
    *w = s[1].get<int>();
    return Status::OK();
  }
  return InvalidArgument(std::string("video ") + name + ": size must be a positive int or (h, w), not " + Shown(s));
}

Status PairArg(const json& t, const char* key, double* lo, double* hi) {
  if (!t.contains(key)) return Status::OK();
  const json& v = t[key];
  if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number()) {
    return InvalidArgument(std::string("video RandomResizedCrop: ") + key + " must be (lo, hi), not " + Shown(v));
  }
  *lo = v[0].get<double>();
  *hi = v[1].get<double>();
  if (!(*lo > 0 && *lo <= *hi)) return InvalidArgument(std::string("video RandomResizedCrop: ") + key + " must be 0 < lo <= hi");
  return Status::OK();
}

Status ClipFromJson(const json& t, Spec* s) {
  for (auto it = t.begin(); it != t.end(); ++it) {
    const std::string& k = it.key();
    if (k != "type" && k != "num_frames" && k != "step" && k != "sampling" && k != "layout") {
      return InvalidArgument("video Clip has no argument '" + k + "' (num_frames, step, sampling, layout)");
    }
  }
  const json n = t.value("num_frames", json(16)), step = t.value("step", json(1));
  if (!n.is_number_integer() || n.get<int64_t>() < 1 || n.get<int64_t>() > 4096) {
    return InvalidArgument("video Clip: num_frames must be an int in [1, 4096], not " + Shown(n));
  }
  if (!step.is_number_integer() || step.get<int64_t>() < 1 || step.get<int64_t>() > 1000) {
    return InvalidArgument("video Clip: step must be an int in [1, 1000], not " + Shown(step));
  }
  s->num_frames = n.get<int>();
  s->step = step.get<int>();
  const std::string sampling = t.value("sampling", std::string("random"));
  if (sampling != "random" && sampling != "uniform") {
    return InvalidArgument("video Clip: sampling is \"random\" or \"uniform\", not \"" + sampling + "\"");
  }
  s->sampling = sampling == "random" ? Sampling::kRandom : Sampling::kUniform;
  const std::string layout = t.value("layout", std::string("CTHW"));
  if (layout != "CTHW" && layout != "TCHW") {
    return InvalidArgument("video Clip: layout is \"CTHW\" or \"TCHW\", not \"" + layout + "\"");
  }
  s->tchw = layout == "TCHW";
  return Status::OK();
}

// An op of the image registry on the clip's pixels: one that works on the
// resampled uint8 RGB pixels in place (its schema's role "pixels"), keeps
// three channels and needs no float32 image.
Status PixelOpFromJson(const json& t, size_t position, Spec* s) {
  Result<Transform> op = TransformFromJson(t, position);
  if (!op.ok()) {
    return InvalidArgument("a video list takes Clip, Resize, RandomCrop, CenterCrop, RandomResizedCrop, "
                           "RandomHorizontalFlip, ops on the pixels (ColorJitter, ...) and Normalize: " +
                           op.status().message());
  }
  const Transform& tr = op.value();
  if (tr.kind != TransformKind::kOp || SchemaOf(tr).role != OpRole::kPixels || tr.op == nullptr ||
      tr.op->output_channels() > 0 || !tr.op->needs_float32().empty()) {
    return InvalidArgument("video clips take ops on the pixels that keep 3 channels (ColorJitter, RandomGrayscale, "
                           "RandomPosterize, ...), not " + Shown(t));
  }
  s->ops.push_back(tr);
  return Status::OK();
}

// The transforms after the Clip, in their one order.
Status StepFromJson(const json& t, size_t position, int* stage, Spec* s) {
  const std::string type = t.value("type", std::string());
  const int order = type == "Resize" ? 1 : type == "RandomCrop" || type == "CenterCrop" || type == "RandomResizedCrop" ? 2
                    : type == "RandomHorizontalFlip" ? 3 : type == "Normalize" ? 5 : 4;
  if (order <= *stage && !(order == 4 && *stage == 4)) {
    return InvalidArgument("video transforms go in the order Clip, Resize, a crop, RandomHorizontalFlip, ops on "
                           "the pixels, Normalize, each but the ops at most once: " + type + " is out of place");
  }
  *stage = order;
  if (order == 4) return PixelOpFromJson(t, position, s);
  if (type == "Resize") {
    const json& size = t.contains("size") ? t["size"] : json();
    if (size.is_number_integer() && size.get<int64_t>() > 0 && size.get<int64_t>() <= 16384) {
      s->resize_short = size.get<int>();
      const json m = t.value("max_size", json());
      if (m.is_number_integer()) s->max_size = m.get<int>();
      return Status::OK();
    }
    return SizeArg(t, "Resize", &s->resize_h, &s->resize_w);
  }
  if (order == 2) {
    s->crop = type == "RandomCrop" ? CropKind::kRandom : type == "CenterCrop" ? CropKind::kCenter : CropKind::kRandomResized;
    NOSTALL_RETURN_IF_ERROR(SizeArg(t, type.c_str(), &s->crop_h, &s->crop_w));
    NOSTALL_RETURN_IF_ERROR(PairArg(t, "scale", &s->scale_min, &s->scale_max));
    NOSTALL_RETURN_IF_ERROR(PairArg(t, "ratio", &s->ratio_min, &s->ratio_max));
    if (s->scale_max > 1) return InvalidArgument("video RandomResizedCrop: scale must be within (0, 1]");
    return Status::OK();
  }
  if (order == 3) {
    const json p = t.value("p", json(0.5));
    if (!p.is_number() || p.get<double>() < 0 || p.get<double>() > 1) {
      return InvalidArgument("video RandomHorizontalFlip: p must be in [0, 1], not " + Shown(p));
    }
    s->flip_p = p.get<double>();
    return Status::OK();
  }
  const json mean = t.value("mean", json()), std = t.value("std", json());
  if (!mean.is_array() || !std.is_array() || mean.size() != 3 || std.size() != 3) {
    return InvalidArgument("video Normalize: mean and std are three numbers each (RGB), not " + Shown(t));
  }
  for (int k = 0; k < 3; ++k) {
    if (!mean[k].is_number() || !std[k].is_number() || !(std[k].get<double>() > 0)) {
      return InvalidArgument("video Normalize: mean and std are numbers, std > 0: " + Shown(t));
    }
    s->mul[k] = static_cast<float>(1.0 / (255.0 * std[k].get<double>()));
    s->add[k] = static_cast<float>(-mean[k].get<double>() / std[k].get<double>());
  }
  s->normalize = true;
  return Status::OK();
}

}  // namespace

std::vector<int64_t> Spec::Shape() const {
  if (tchw) return {num_frames, 3, out_h, out_w};
  return {3, num_frames, out_h, out_w};
}

size_t Spec::SampleBytes(DType dtype) const {
  return static_cast<size_t>(3) * num_frames * out_h * out_w * (dtype == DType::kFloat32 ? 4 : 1);
}

Result<std::shared_ptr<const Spec>> SpecFromJson(const json& list) {
  if (!list.is_array() || list.empty() || !list[0].is_object() || list[0].value("type", std::string()) != "Clip") {
    return InvalidArgument("a video list starts with a Clip (nostall.video.Clip(num_frames=16, step=4)), not " +
                           Shown(list));
  }
  auto s = std::make_shared<Spec>();
  NOSTALL_RETURN_IF_ERROR(ClipFromJson(list[0], s.get()));
  int stage = 0;
  for (size_t i = 1; i < list.size(); ++i) {
    if (!list[i].is_object()) return InvalidArgument("a video transform is an object, not " + Shown(list[i]));
    NOSTALL_RETURN_IF_ERROR(StepFromJson(list[i], i, &stage, s.get()));
  }
  if (s->crop != CropKind::kNone) {
    s->out_h = s->crop_h;
    s->out_w = s->crop_w;
  } else if (s->resize_h > 0) {
    s->out_h = s->resize_h;
    s->out_w = s->resize_w;
  } else {
    return InvalidArgument("a video list needs a crop or Resize((h, w)) that gives every clip one frame size "
                           "(e.g. Resize(128), RandomCrop(112))");
  }
  if (s->SampleBytes(DType::kFloat32) > (size_t{1} << 31)) {
    return InvalidArgument("a video clip over 2 GiB (num_frames x 3 x h x w x 4 bytes)");
  }
  s->resolved = list;
  return std::shared_ptr<const Spec>(std::move(s));
}

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
