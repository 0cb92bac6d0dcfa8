// Geometry of the transforms, composed symbolically.
//
// The state is "the current image is the source rectangle R resampled to
// cur_w x cur_h". A crop of the current image maps back to a smaller R; a
// resize only changes cur_w x cur_h. After the last transform, one resample
// of R to the output size does the work of the whole chain.
#include <cmath>
#include <string>

#include "common/philox.h"
#include "common/sample_key.h"
#include "nostall/transforms.h"
#include "ops/op.h"
#include "ops/plan.h"
#include "ops/sample_kind.h"

namespace nostall {

namespace {
// A crop, resize or flip's own arguments.
Status CheckGeometry(const Transform& t, const std::string& where) {
  switch (t.kind) {
    case TransformKind::kRandomResizedCrop:
      if (t.height <= 0 || t.width <= 0) return InvalidArgument(where + "size must be positive");
      if (!(t.scale_min > 0 && t.scale_min <= t.scale_max && t.scale_max <= 1.0)) {
        return InvalidArgument(where + "scale must satisfy 0 < min <= max <= 1");
      }
      if (!(t.ratio_min > 0 && t.ratio_min <= t.ratio_max)) {
        return InvalidArgument(where + "ratio must satisfy 0 < min <= max");
      }
      return Status::OK();
    case TransformKind::kResize:
      if (t.short_side <= 0 && (t.height <= 0 || t.width <= 0)) {
        return InvalidArgument(where + "Resize needs a positive size");
      }
      return Status::OK();
    case TransformKind::kCenterCrop:
      if (t.height <= 0 || t.width <= 0) return InvalidArgument(where + "size must be positive");
      return Status::OK();
    case TransformKind::kRandomHorizontalFlip:
      if (!(t.p >= 0 && t.p <= 1)) return InvalidArgument(where + "p must be in [0, 1]");
      return Status::OK();
    default:
      return Status::OK();
  }
}

}  // namespace

Status ValidateImageSpec(const PrepSpec& spec) {
  std::vector<ListEntry> list;
  for (const Transform& t : spec.transforms) {
    list.push_back({&t, &SchemaOf(t)});
    NOSTALL_RETURN_IF_ERROR(CheckGeometry(t, "transform #" + std::to_string(list.size() - 1) + ": "));
  }
  NOSTALL_RETURN_IF_ERROR(CheckTransformList(list, spec.dtype, spec.channels(), /*geometry_first=*/true,
                                             [](size_t i) { return "transform #" + std::to_string(i) + ": "; }));
  if (spec.max_pixels <= 0) return InvalidArgument("max_pixels must be positive");
  return Status::OK();
}

bool ImageFixedOutputSize(const PrepSpec& spec, int* height, int* width) {
  bool fixed = false;
  for (const Transform& t : spec.transforms) {
    if (t.kind == TransformKind::kRandomResizedCrop || t.kind == TransformKind::kCenterCrop ||
        (t.kind == TransformKind::kResize && t.short_side <= 0)) {
      *height = t.height;
      *width = t.width;
      fixed = true;
    } else if (t.kind == TransformKind::kResize) {
      fixed = false;
    }
  }
  return fixed;
}

const SampleKind& PrepSpec::sample_kind() const { return kind ? *kind : ImageKind(); }

Status PrepSpec::Validate() const { return sample_kind().Validate(*this); }

int PrepSpec::channels() const { return sample_kind().channels(*this); }

bool PrepSpec::FixedOutputSize(int* height, int* width) const {
  return sample_kind().FixedOutputSize(*this, height, width);
}

CropDraw DrawResizedCrop(Philox& rng, int cur_w, int cur_h, double scale_min, double scale_max,
                         double ratio_min, double ratio_max) {
  // torchvision.transforms.RandomResizedCrop.get_params.
  const double area = static_cast<double>(cur_w) * cur_h;
  const double log_lo = std::log(ratio_min), log_hi = std::log(ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng.Uniform(scale_min, scale_max);
    const double aspect = std::exp(rng.Uniform(log_lo, log_hi));
    const int w = static_cast<int>(std::lround(std::sqrt(target * aspect)));
    const int h = static_cast<int>(std::lround(std::sqrt(target / aspect)));
    if (w > 0 && h > 0 && w <= cur_w && h <= cur_h) {
      const int top = static_cast<int>(rng.Between(0, cur_h - h));
      const int left = static_cast<int>(rng.Between(0, cur_w - w));
      return {left, top, w, h};
    }
  }
  // Fallback: a central crop at the clamped ratio.
  const double in_ratio = static_cast<double>(cur_w) / cur_h;
  int w = cur_w, h = cur_h;
  if (in_ratio < ratio_min) {
    h = static_cast<int>(std::lround(w / ratio_min));
  } else if (in_ratio > ratio_max) {
    w = static_cast<int>(std::lround(h * ratio_max));
  }
  return {(cur_w - w) / 2, (cur_h - h) / 2, w, h};
}

Status ShortSideSize(int cur_w, int cur_h, int short_side, int max_size, int* out_w, int* out_h) {
  // torchvision's _compute_resized_output_size.
  const bool w_short = cur_w <= cur_h;
  const int short_edge = w_short ? cur_w : cur_h, long_edge = w_short ? cur_h : cur_w;
  int new_short = short_side;
  int new_long = static_cast<int>(static_cast<int64_t>(new_short) * long_edge / short_edge);
  if (max_size > 0 && new_long > max_size) {
    new_short = static_cast<int>(static_cast<int64_t>(max_size) * new_short / new_long);
    new_long = max_size;
  }
  if (new_short <= 0 || new_long <= 0) return DataError("image is too thin to resize");
  *out_w = w_short ? new_short : new_long;
  *out_h = w_short ? new_long : new_short;
  return Status::OK();
}

Status PlanSample(const PrepSpec& spec, int src_w, int src_h, uint64_t seed, int64_t epoch,
                  int64_t sample_index, SamplePlan* plan) {
  Philox rng = SampleKey{seed, epoch, sample_index}.Stream(SampleStream::kGeometry);
  double rx = 0, ry = 0, rw = src_w, rh = src_h;  // R, in source pixels
  int cur_w = src_w, cur_h = src_h;
  bool flip = false;
  bool resampled = false;  // a resize has run: the current image is not source pixels
  int clip_x0 = 0, clip_y0 = 0, clip_x1 = src_w, clip_y1 = src_h;
  auto crop = [&](int left, int top, int w, int h) {
    // After a flip, the current image's column c is R's column cur_w - 1 - c.
    if (flip) left = cur_w - left - w;
    double sx = rw / cur_w, sy = rh / cur_h;
    rx += left * sx;
    ry += top * sy;
    rw = w * sx;
    rh = h * sy;
    if (!resampled) {  // whole source pixels: the crop is all the image has now
      clip_x0 = static_cast<int>(rx), clip_y0 = static_cast<int>(ry);
      clip_x1 = static_cast<int>(rx + rw), clip_y1 = static_cast<int>(ry + rh);
    }
  };
  auto resize_to = [&](int w, int h) {
    resampled = resampled || w != cur_w || h != cur_h;
    cur_w = w;
    cur_h = h;
  };
  for (const Transform& t : spec.transforms) {
    // The geometry ends at the first op: what follows runs on pixels
    // (PrepareSample), from a stream of its own.
    if (t.kind == TransformKind::kOp) break;
    switch (t.kind) {
      case TransformKind::kRandomResizedCrop: {
        const CropDraw c = DrawResizedCrop(rng, cur_w, cur_h, t.scale_min, t.scale_max, t.ratio_min, t.ratio_max);
        crop(c.left, c.top, c.w, c.h);
        resize_to(t.width, t.height);
        break;
      }
      case TransformKind::kResize: {
        if (t.short_side > 0) {
          int w = 0, h = 0;
          NOSTALL_RETURN_IF_ERROR(ShortSideSize(cur_w, cur_h, t.short_side, t.max_size, &w, &h));
          resize_to(w, h);
        } else {
          resize_to(t.width, t.height);
        }
        break;
      }
      case TransformKind::kCenterCrop: {
        if (t.width > cur_w || t.height > cur_h) {
          return DataError("image (" + std::to_string(cur_w) + "x" + std::to_string(cur_h) +
                           " after earlier transforms) is smaller than CenterCrop(" +
                           std::to_string(t.height) + ", " + std::to_string(t.width) + ")");
        }
        // Python's round() rounds half to even, as nearbyint does.
        int top = static_cast<int>(std::nearbyint((cur_h - t.height) / 2.0));
        int left = static_cast<int>(std::nearbyint((cur_w - t.width) / 2.0));
        crop(left, top, t.width, t.height);
        cur_w = t.width;
        cur_h = t.height;
        break;
      }
      case TransformKind::kRandomHorizontalFlip:
        if (rng.Uniform() < t.p) flip = !flip;
        break;
      case TransformKind::kNormalize:
      case TransformKind::kOp:
        break;
    }
  }
  // Crops after a flip were mirrored into R above; the pixels are mirrored
  // once, when the output is written.
  *plan = SamplePlan{rx, ry, rw, rh, cur_w, cur_h, flip, clip_x0, clip_y0, clip_x1, clip_y1};
  return Status::OK();
}

}  // namespace nostall
