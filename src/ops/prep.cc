#include "ops/prep.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "codecs/decode.h"
#include "kernels/functional.h"
#include "kernels/resample.h"
#include "ops/plan.h"
#include "ops/sample_kind.h"

namespace nostall {
namespace {

// Writes the resampled HWC image to `dst` with flip, layout and dtype; the
// choices are template parameters so the inner loops carry no branches.
template <typename Out, bool kFlip, bool kNchw>
void WriteOutImpl(const uint8_t* src, int h, int w, int c, const float* a, const float* b,
                  Out* dst) {
  const size_t plane = static_cast<size_t>(h) * w;
  auto value = [&](uint8_t v, int k) -> Out {
    if constexpr (std::is_same_v<Out, float>) {
      return v * a[k] + b[k];
    } else {
      return v;
    }
  };
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = src + static_cast<size_t>(y) * w * c;
    if constexpr (kNchw) {
      for (int k = 0; k < c; ++k) {
        Out* out = dst + k * plane + static_cast<size_t>(y) * w;
        for (int x = 0; x < w; ++x) out[x] = value(row[(kFlip ? w - 1 - x : x) * c + k], k);
      }
    } else {
      Out* out = dst + static_cast<size_t>(y) * w * c;
      for (int x = 0; x < w; ++x) {
        const uint8_t* px = row + (kFlip ? w - 1 - x : x) * c;
        for (int k = 0; k < c; ++k) out[x * c + k] = value(px[k], k);
      }
    }
  }
}

template <typename Out>
void WriteOut(const uint8_t* src, int h, int w, int c, bool flip, bool nchw, const float* a,
              const float* b, Out* dst) {
  if (flip && nchw) WriteOutImpl<Out, true, true>(src, h, w, c, a, b, dst);
  if (flip && !nchw) WriteOutImpl<Out, true, false>(src, h, w, c, a, b, dst);
  if (!flip && nchw) WriteOutImpl<Out, false, true>(src, h, w, c, a, b, dst);
  if (!flip && !nchw) WriteOutImpl<Out, false, false>(src, h, w, c, a, b, dst);
}

size_t FirstOp(const PrepSpec& spec) {
  for (size_t i = 0; i < spec.transforms.size(); ++i) {
    if (spec.transforms[i].kind == TransformKind::kOp) return i;
  }
  return spec.transforms.size();
}

// Whether pixels are transformed between the resample and the write-out.
bool HasPixelStage(const PrepSpec& spec) {
  for (size_t i = FirstOp(spec); i < spec.transforms.size(); ++i) {
    const Transform& t = spec.transforms[i];
    if (t.kind == TransformKind::kRandomHorizontalFlip) return true;
    if (t.kind == TransformKind::kOp && !OnTensor(t)) return true;
  }
  return false;
}

// The ops on pixels, in order; a flip among them is drawn here.
void PixelOps(const PrepSpec& spec, const ImageView& img, Philox& rng, OpScratch& scratch,
              nlohmann::json* trace) {
  for (size_t i = FirstOp(spec); i < spec.transforms.size(); ++i) {
    const Transform& t = spec.transforms[i];
    if (t.kind == TransformKind::kRandomHorizontalFlip) {
      const bool flip = rng.Uniform() < t.p;
      if (trace) trace->push_back({{"op", "RandomHorizontalFlip"}, {"applied", flip}});
      if (flip) scratch.Moved(Affine::FlipX(img.w));
      if (flip && img.data) FlipHorizontal(img);
    } else if (t.kind == TransformKind::kOp && !OnTensor(t)) {
      t.op->Apply(img, rng, scratch, trace);
    }
  }
}

void OutputOps(const PrepSpec& spec, const OutputView& out, Philox& rng, nlohmann::json* trace) {
  for (size_t i = FirstOp(spec); i < spec.transforms.size(); ++i) {
    const Transform& t = spec.transforms[i];
    if (t.kind == TransformKind::kOp && OnTensor(t)) t.op->ApplyOutput(out, rng, trace);
  }
}

// Narrows the decoded pixels to the plan's clip window (a crop made before
// any resize), so the resampler clamps at the crop's edges as torchvision's
// crop-then-resize does, instead of reading pixels the crop left out. The
// window is mapped into the buffer as the box was (the decoder may have
// scaled and offset it); whole pixels, widened outward when scaled.
void ClipRegion(const SamplePlan& plan, DecodedRegion* r) {
  if (plan.w <= 0 || plan.h <= 0) return;
  const double sx = r->w / plan.w, sy = r->h / plan.h;
  auto lo = [](double v, int limit) {
    return std::clamp(static_cast<int>(std::floor(v + 1e-6)), 0, limit);
  };
  auto hi = [](double v, int limit) {
    return std::clamp(static_cast<int>(std::ceil(v - 1e-6)), 0, limit);
  };
  const int x0 = lo(r->x + (plan.clip_x0 - plan.x) * sx, r->width);
  const int y0 = lo(r->y + (plan.clip_y0 - plan.y) * sy, r->height);
  const int x1 = hi(r->x + (plan.clip_x1 - plan.x) * sx, r->width);
  const int y1 = hi(r->y + (plan.clip_y1 - plan.y) * sy, r->height);
  if (x1 <= x0 || y1 <= y0) return;  // nothing sensible to narrow to
  r->pixels += static_cast<size_t>(y0) * r->stride + static_cast<size_t>(x0) * r->channels;
  r->width = x1 - x0;
  r->height = y1 - y0;
  r->x -= x0;
  r->y -= y0;
}

}  // namespace

Status TraceSample(const PrepSpec& spec, int src_w, int src_h, const SampleKey& key,
                   nlohmann::json* out) {
  SamplePlan plan;
  NOSTALL_RETURN_IF_ERROR(
      PlanSample(spec, src_w, src_h, key.seed, key.epoch, key.index, &plan));
  nlohmann::json ops = nlohmann::json::array();
  Philox rng = key.Stream(SampleStream::kPixelOps);
  OpScratch scratch;
  // The geometry: the box onto the output, the leading flip, then each op
  // that moves pixels.
  Affine geometry = Affine::CropResize(plan.x, plan.y, plan.w, plan.h, plan.out_w, plan.out_h);
  if (plan.flip) geometry = Affine::FlipX(plan.out_w).After(geometry);
  scratch.motion = &geometry;
  ImageView img{nullptr, plan.out_h, plan.out_w, spec.channels()};
  PixelOps(spec, img, rng, scratch, &ops);
  OutputView o{nullptr, spec.dtype == DType::kFloat32, spec.layout == Layout::kNCHW, plan.out_h,
               plan.out_w, spec.channels()};
  OutputOps(spec, o, rng, &ops);
  const auto& m = geometry.m;
  *out = {{"box", {plan.x, plan.y, plan.w, plan.h}},
          {"size", {plan.out_h, plan.out_w}},
          {"flip", plan.flip},
          {"ops", ops},
          {"matrix", {{m[0], m[1], m[2]}, {m[3], m[4], m[5]}}}};
  return Status::OK();
}

size_t SampleBytes(const PrepSpec& spec, int out_h, int out_w) {
  return spec.sample_kind().SampleBytes(spec, out_h, out_w);
}

Status ProbeImageSize(const uint8_t* data, size_t size, int* width, int* height) {
  ImageInfo info;
  NOSTALL_RETURN_IF_ERROR(ImageReadInfo(SniffFormat(data, size), data, size, &info));
  *width = info.width;
  *height = info.height;
  return Status::OK();
}

Status PrepareSample(const PrepSpec& spec, const uint8_t* data, size_t size, const SampleKey& key,
                     int out_h, int out_w, void* dst, PrepScratch* scratch) {
  return spec.sample_kind().Prepare(spec, {data, size}, key, {dst, out_h, out_w}, scratch);
}

namespace {

// The sample's plan on its image (size read from the header, checked
// against max_pixels and the batch's size).
Status PlanImage(const PrepSpec& spec, const uint8_t* data, size_t size, const SampleKey& key, int out_h, int out_w,
                 SamplePlan* plan) {
  int src_w = 0, src_h = 0;
  NOSTALL_RETURN_IF_ERROR(ProbeImageSize(data, size, &src_w, &src_h));
  if (src_w <= 0 || src_h <= 0) return DataError("image has zero width or height");
  if (static_cast<int64_t>(src_w) * src_h > spec.max_pixels) {
    return DataError("image is " + std::to_string(src_w) + "x" + std::to_string(src_h) +
                     " pixels, over the limit of " + std::to_string(spec.max_pixels) +
                     " (max_pixels)");
  }
  NOSTALL_RETURN_IF_ERROR(PlanSample(spec, src_w, src_h, key.seed, key.epoch, key.index, plan));
  if (plan->out_w != out_w || plan->out_h != out_h) {
    return DataError("image gives a " + std::to_string(plan->out_w) + "x" +
                     std::to_string(plan->out_h) + " sample but the batch is " +
                     std::to_string(out_w) + "x" + std::to_string(out_h) +
                     "; add a crop or Resize((h, w)) so all samples have one size");
  }
  return Status::OK();
}

// The pixels the plan needs: a JPEG's region (DCT-scaled toward the output
// size), any other format whole; the region clipped as the plan says.
Status DecodePlanned(const PrepSpec& spec, const uint8_t* data, size_t size, const SamplePlan& plan, int c,
                     PrepScratch* scratch, DecodedRegion* region) {
  const ImageFormat format = SniffFormat(data, size);
  if (format == ImageFormat::kJpeg) {
    NOSTALL_RETURN_IF_ERROR(JpegDecodeRegion(data, size, c, plan.x, plan.y, plan.w, plan.h,
                                             spec.dct_scaling ? plan.out_w : 0,
                                             spec.dct_scaling ? plan.out_h : 0, &scratch->decoded,
                                             region));
  } else {
    // The pixels the resample may read: a WebP's (and a few around them:
    // region->x, y say where they start), a PNG's rows down to them.
    *region = DecodedRegion{};
    if (format == ImageFormat::kWebp) {
      NOSTALL_RETURN_IF_ERROR(WebpDecodeRegion(data, size, c, plan.clip_x0, plan.clip_y0, plan.clip_x1,
                                               plan.clip_y1, &scratch->decoded, region));
    } else if (format == ImageFormat::kPng) {
      NOSTALL_RETURN_IF_ERROR(PngDecodeRows(data, size, c, static_cast<uint32_t>(std::max(plan.clip_y1, 1)),
                                            &scratch->decoded, region));
    } else {
      NOSTALL_RETURN_IF_ERROR(DecodeWhole(format, data, size, c, &scratch->decoded, region));
    }
    region->x += plan.x;  // (0 but for a WebP's region)
    region->y += plan.y;
    region->w = plan.w;
    region->h = plan.h;
  }
  ClipRegion(plan, region);
  return Status::OK();
}

// Normalize as out = v * a + b per channel (v in 0..255); else v / 255.
void NormalizeCoefficients(const PrepSpec& spec, int c, float a[3], float b[3]) {
  for (int k = 0; k < 3; ++k) {
    a[k] = 1.0f / 255;
    b[k] = 0;
  }
  for (const Transform& t : spec.transforms) {
    if (t.kind != TransformKind::kNormalize) continue;
    for (int k = 0; k < c; ++k) {
      a[k] = static_cast<float>(1.0 / (255.0 * t.std[k]));
      b[k] = static_cast<float>(-t.mean[k] / t.std[k]);
    }
  }
}

Status PrepareImage(const PrepSpec& spec, const uint8_t* data, size_t size, const SampleKey& key,
                    int out_h, int out_w, void* dst, PrepScratch* scratch) {
  SamplePlan plan;
  NOSTALL_RETURN_IF_ERROR(PlanImage(spec, data, size, key, out_h, out_w, &plan));
  const int c = spec.channels();
  DecodedRegion region;
  NOSTALL_RETURN_IF_ERROR(DecodePlanned(spec, data, size, plan, c, scratch, &region));
  const bool nchw = spec.layout == Layout::kNCHW;
  const bool pixel_stage = HasPixelStage(spec);
  // Without pixel ops, a flip costs nothing: the write-out reads rows
  // backwards. Before pixel ops, it is done on the pixels first.
  const bool flip_on_write = plan.flip && !pixel_stage;
  const bool direct = spec.dtype == DType::kUint8 && !nchw && !flip_on_write;
  float a[3], b[3];
  NormalizeCoefficients(spec, c, a, b);
  Philox rng = key.Stream(SampleStream::kPixelOps);
  const OutputView out{dst, spec.dtype == DType::kFloat32, nchw, out_h, out_w, c};
  // Nothing between the resample and the layout: resample straight into the
  // planes, normalised and flipped on the way (pixels written once).
  if (!pixel_stage && nchw &&
      ResampleBoxPlanar(region.pixels, region.width, region.height, region.stride, c, region.x,
                        region.y, region.w, region.h, out_w, out_h, plan.flip, a, b,
                        out.float32 ? static_cast<float*>(dst) : nullptr,
                        out.float32 ? nullptr : static_cast<uint8_t*>(dst), &scratch->resample)) {
    OutputOps(spec, out, rng, nullptr);
    return Status::OK();
  }
  uint8_t* resized = static_cast<uint8_t*>(dst);
  if (!direct) {
    // (+4: InterleavedToPlanes reads a byte past the last pixel)
    scratch->resized.resize(static_cast<size_t>(out_h) * out_w * c + 4);
    resized = scratch->resized.data();
  }
  const bool whole_pixels = region.x == std::floor(region.x) && region.y == std::floor(region.y);
  bool flipped = false;  // the flip a pixel stage needs first, done by the resampler
  if (whole_pixels && region.w == out_w && region.h == out_h) {
    for (int y = 0; y < out_h; ++y) {
      std::memcpy(resized + static_cast<size_t>(y) * out_w * c,
                  region.pixels + static_cast<size_t>(region.y + y) * region.stride +
                      static_cast<size_t>(region.x) * c,
                  static_cast<size_t>(out_w) * c);
    }
  } else {
    flipped = pixel_stage && plan.flip;
    ResampleBox(region.pixels, region.width, region.height, region.stride, c, region.x, region.y,
                region.w, region.h, resized, out_w, out_h, &scratch->resample, flipped);
  }
  if (pixel_stage) {
    const ImageView img{resized, out_h, out_w, c};
    if (plan.flip && !flipped) FlipHorizontal(img);
    PixelOps(spec, img, rng, scratch->ops, nullptr);
  }
  if (direct) {
    OutputOps(spec, out, rng, nullptr);
    return Status::OK();
  }
  if (nchw && c == 3 && !flip_on_write) {
    InterleavedToPlanes(scratch->resized.data(), out_w, out_h, a, b,
                        out.float32 ? static_cast<float*>(dst) : nullptr,
                        out.float32 ? nullptr : static_cast<uint8_t*>(dst));
    OutputOps(spec, out, rng, nullptr);
    return Status::OK();
  }
  if (spec.dtype == DType::kFloat32) {
    WriteOut(scratch->resized.data(), out_h, out_w, c, flip_on_write, nchw, a, b,
             static_cast<float*>(dst));
  } else {
    WriteOut(scratch->resized.data(), out_h, out_w, c, flip_on_write, nchw, a, b,
             static_cast<uint8_t*>(dst));
  }
  OutputOps(spec, out, rng, nullptr);
  return Status::OK();
}

class ImageKindImpl final : public SampleKind {
 public:
  const char* name() const override { return "image"; }
  Status Validate(const PrepSpec& spec) const override { return ValidateImageSpec(spec); }
  int channels(const PrepSpec& spec) const override { return spec.mode == ColorMode::kRGB ? 3 : 1; }
  bool FixedOutputSize(const PrepSpec& spec, int* height, int* width) const override {
    return ImageFixedOutputSize(spec, height, width);
  }
  std::vector<int64_t> SampleShape(const PrepSpec& spec, int out_h, int out_w) const override {
    const int64_t c = channels(spec);
    if (spec.layout == Layout::kNCHW) return {c, out_h, out_w};
    return {out_h, out_w, c};
  }
  size_t SampleBytes(const PrepSpec& spec, int out_h, int out_w) const override {
    return static_cast<size_t>(out_h) * out_w * channels(spec) * (spec.dtype == DType::kFloat32 ? 4 : 1);
  }
  Status Prepare(const PrepSpec& spec, const SampleInput& in, const SampleKey& key, const SampleOutput& out,
                 PrepScratch* scratch) const override {
    return PrepareImage(spec, in.data, in.size, key, out.out_h, out.out_w, out.dst, scratch);
  }
  nlohmann::json ToJson() const override { return nullptr; }
};

}  // namespace

const SampleKind& ImageKind() {
  static const ImageKindImpl kind;
  return kind;
}

Result<std::string> TraceSampleJson(const PrepSpec& spec, int src_w, int src_h, uint64_t seed,
                                    int64_t epoch, int64_t index) {
  NOSTALL_RETURN_IF_ERROR(spec.Validate());
  nlohmann::json out;
  NOSTALL_RETURN_IF_ERROR(TraceSample(spec, src_w, src_h, SampleKey{seed, epoch, index}, &out));
  return out.dump();
}

}  // namespace nostall
