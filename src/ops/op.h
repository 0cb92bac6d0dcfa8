// The op interface: a transform that works on pixels after the geometry
// (crops, resizes, a leading flip) has been resampled to the output size.
//
// Adding an op is one file in src/ops/ (a class deriving from ImageOp and a
// `Result<std::shared_ptr<const ImageOp>> MakeFoo(OpArgs&)` factory), one
// line in NOSTALL_IMAGE_OPS below, and its test in ops_test.cc and
// tests/python/test_ops.py. Each op draws its random parameters from the
// sample's Philox stream in a fixed order, so a sample's augmentation depends
// on (seed, epoch, index) alone, never on the thread that runs it.
#ifndef NOSTALL_OPS_OP_H_
#define NOSTALL_OPS_OP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/philox.h"
#include "geometry/affine.h"
#include "kernels/image.h"
#include "nostall/status.h"

namespace nostall {

// The laid-out output of one sample (after Normalize), for ops that work on
// the tensor as torchvision's RandomErasing does.
struct OutputView {
  void* data = nullptr;  // may be null: draw only
  bool float32 = false;
  bool nchw = true;
  int h = 0, w = 0, c = 0;
};

// Per-thread buffers an op may use; reused from sample to sample.
struct OpScratch : KernelScratch {
  // When set, an op that moves pixels (a flip, a rotation, an affine map)
  // composes where it moves them onto *motion (Moved), drawn or not: the
  // sample's geometry, for the fields that follow the image.
  Affine* motion = nullptr;
  void Moved(const Affine& op) {
    if (motion != nullptr) *motion = op.After(*motion);
  }
};

class ImageOp {
 public:
  virtual ~ImageOp() = default;
  // Draws this sample's parameters from `rng` and transforms `img` in place
  // (its size does not change). When `trace` is not null, appends the drawn
  // parameters to it as JSON (nostall.transforms.sample_params).
  virtual void Apply(const ImageView& img, Philox& rng, OpScratch& scratch,
                     nlohmann::json* trace) const {}
  // True for ops on the laid-out tensor (after Normalize): ApplyOutput runs
  // instead of Apply.
  virtual bool on_output() const { return false; }
  // Non-empty when the op cannot write a uint8 output (the reason).
  virtual std::string needs_float32() const { return ""; }
  // The channel count the op makes (0: whatever it is given). The batch's
  // channels are fixed by `mode`: a pipeline whose mode gives others is
  // refused when the loader is made.
  virtual int output_channels() const { return 0; }
  virtual void ApplyOutput(const OutputView& out, Philox& rng, nlohmann::json* trace) const {}
};

// Reads an op's arguments from its spec entry, applying torchvision's
// defaults, and records the resolved values (the spec round-trips with every
// default spelled out). Errors name the transform and the argument.
class OpArgs {
 public:
  OpArgs(const nlohmann::json& j, std::string where) : j_(j), where_(std::move(where)) {}

  Status Double(const char* key, double def, double lo, double hi, double* out);
  Status Int(const char* key, int64_t def, int64_t lo, int64_t hi, int* out);
  Status Bool(const char* key, bool def, bool* out);
  // A number x gives [center - x, center + x] (clamped at `lo`), as
  // ColorJitter's brightness=0.4 gives [0.6, 1.4]; a pair is taken as given.
  // Either must lie in [lo, hi]. Writes {0, 0} and *present = false when
  // the key is absent or null.
  Status Range(const char* key, double center, double lo, double hi, double* min, double* max,
               bool* present);
  // A pair [min, max] with lo <= min <= max <= hi; `def` when absent.
  Status Pair(const char* key, double def_min, double def_max, double lo, double hi, double* min,
              double* max);
  // Fill value(s) for uncovered pixels: a number or one per channel, 0-255.
  Status Fill(const char* key, std::vector<double>* out);
  // "nearest" (torchvision's default for these ops) or "bilinear".
  Status Interpolation(const char* key, bool* bilinear);
  Status String(const char* key, const char* def, std::initializer_list<const char*> allowed,
                std::string* out);
  // Takes an argument the op parsed itself (recorded as given).
  const nlohmann::json* Raw(const char* key);
  void Record(const char* key, nlohmann::json value) { resolved_[key] = std::move(value); }

  Status Error(const std::string& msg) const;
  const std::string& where() const { return where_; }
  // Unknown keys are an error listing the known ones.
  Status CheckNoOthers() const;
  nlohmann::json resolved() const { return resolved_; }

 private:
  const nlohmann::json& j_;
  std::string where_;
  nlohmann::json resolved_ = nlohmann::json::object();
  std::vector<std::string> known_ = {"type"};
};

using OpFactory = Result<std::shared_ptr<const ImageOp>> (*)(OpArgs& args);

// Every op, by its torchvision name, with what it does (the text Python's
// nostall.transforms.NAME.__doc__ starts with). X(Name, doc) declares
// `Result<std::shared_ptr<const ImageOp>> MakeName(OpArgs&)`.
#define NOSTALL_IMAGE_OPS(X)                                                                   \
  X(ColorJitter,            "Brightness, contrast, saturation and hue factors drawn per sample and applied in a random order, as torchvision's ColorJitter on PIL images. A number x gives the factor range [max(0, 1 - x), 1 + x] (hue: [-x, x], x <= 0.5); a pair (lo, hi) gives the range itself.") \
  X(Grayscale,              "Gray as PIL's convert(\"L\") (0.299 R + 0.587 G + 0.114 B). num_output_channels as torchvision's: 1 (the default; load with mode=\"L\") or 3 (RGB batches, the gray value in each channel).") \
  X(RandomGrayscale,        "With probability p (default 0.1), the sample in gray as Grayscale, in as many channels as the batch has.") \
  X(GaussianBlur,           "Blur with a Gaussian kernel of kernel_size (odd; an int or (x, y)) and sigma drawn uniformly in sigma (a number, or (min, max); default (0.1, 2.0)) per sample, edges reflected, as torchvision's GaussianBlur.") \
  X(RandomErasing,          "With probability p, erase a random box of scale (fraction of the area) and ratio (aspect) of the output tensor, after Normalize: value 0 (default), one value per channel, or \"random\" (normal noise), as torchvision's RandomErasing. inplace is accepted and changes nothing (batches are written once).") \
  X(TrivialAugmentWide,     "One of torchvision's TrivialAugmentWide ops per sample, at a magnitude drawn from num_magnitude_bins (default 31); interpolation NEAREST (default) or BILINEAR, fill for the area uncovered by geometric ops.") \
  X(RandAugment,            "num_ops (default 2) ops drawn per sample from torchvision's RandAugment list at magnitude (default 9 of num_magnitude_bins 31); interpolation NEAREST or BILINEAR, fill for uncovered area.") \
  X(AutoAugment,            "A sub-policy of torchvision's AutoAugmentPolicy (IMAGENET, CIFAR10 or SVHN) drawn per sample, each op applied with its probability and magnitude; interpolation NEAREST or BILINEAR, fill for uncovered area.") \
  X(RandomRotation,         "Rotate by an angle drawn uniformly in degrees (a number d means [-d, d]) about center (default: the middle), interpolation NEAREST (default) or BILINEAR, uncovered area fill (default 0). expand=True is not supported.") \
  X(RandomAffine,           "Rotation (degrees), translation (translate: max fractions of width and height), scale (a range) and shear (degrees) drawn per sample, as torchvision's RandomAffine; interpolation NEAREST (default) or BILINEAR, uncovered area fill (default 0).") \
  X(RandomVerticalFlip,     "Flip the sample top to bottom with probability p (default 0.5).") \
  X(RandomInvert,           "With probability p (default 0.5), invert every channel: 255 - x.") \
  X(RandomPosterize,        "With probability p (default 0.5), keep only the top bits (1-8) of each channel.") \
  X(RandomSolarize,         "With probability p (default 0.5), invert the channels at or above threshold (0-255 for uint8 pixels).") \
  X(RandomAutocontrast,     "With probability p (default 0.5), stretch each channel to the full 0-255 range, as PIL's ImageOps.autocontrast.") \
  X(RandomEqualize,         "With probability p (default 0.5), equalize each channel's histogram, as PIL's ImageOps.equalize.") \
  X(RandomAdjustSharpness,  "With probability p (default 0.5), sharpen (sharpness_factor > 1) or blur (< 1) as PIL's ImageEnhance.Sharpness; 1 leaves the image as it is.")

#define NOSTALL_DECLARE_IMAGE_OP(name, doc) Result<std::shared_ptr<const ImageOp>> Make##name(OpArgs&);
NOSTALL_IMAGE_OPS(NOSTALL_DECLARE_IMAGE_OP)
#undef NOSTALL_DECLARE_IMAGE_OP

// Finds the op named `type`; null when there is none.
OpFactory FindImageOp(const std::string& type);
// The registered names, comma-separated (for error messages).
std::string ImageOpNames();
// ImageOpDoc (what an op does): nostall/transforms.h.

}  // namespace nostall

#endif  // NOSTALL_OPS_OP_H_
