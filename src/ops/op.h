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
#include "nostall/status.h"

namespace nostall {

// An interleaved 8-bit image, rows contiguous (w * c bytes apart). data may
// be null: the op then only draws (and records) its parameters.
struct ImageView {
  uint8_t* data = nullptr;
  int h = 0, w = 0, c = 0;
  size_t bytes() const { return static_cast<size_t>(h) * w * c; }
};

// The laid-out output of one sample (after Normalize), for ops that work on
// the tensor as torchvision's RandomErasing does.
struct OutputView {
  void* data = nullptr;  // may be null: draw only
  bool float32 = false;
  bool nchw = true;
  int h = 0, w = 0, c = 0;
};

// Per-thread buffers an op may use; reused from sample to sample.
struct OpScratch {
  std::vector<uint8_t> tmp, tmp2;
  std::vector<float> ftmp;
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

// Every op, by its torchvision name. X(Name) declares
// `Result<std::shared_ptr<const ImageOp>> MakeName(OpArgs&)`.
#define NOSTALL_IMAGE_OPS(X) \
  X(ColorJitter)             \
  X(Grayscale)               \
  X(RandomGrayscale)         \
  X(GaussianBlur)            \
  X(RandomErasing)           \
  X(TrivialAugmentWide)      \
  X(RandAugment)             \
  X(AutoAugment)             \
  X(RandomRotation)          \
  X(RandomAffine)            \
  X(RandomVerticalFlip)      \
  X(RandomInvert)            \
  X(RandomPosterize)         \
  X(RandomSolarize)          \
  X(RandomAutocontrast)      \
  X(RandomEqualize)          \
  X(RandomAdjustSharpness)

#define NOSTALL_DECLARE_IMAGE_OP(name) Result<std::shared_ptr<const ImageOp>> Make##name(OpArgs&);
NOSTALL_IMAGE_OPS(NOSTALL_DECLARE_IMAGE_OP)
#undef NOSTALL_DECLARE_IMAGE_OP

// Finds the op named `type`; null when there is none.
OpFactory FindImageOp(const std::string& type);
// The registered names, comma-separated (for error messages).
std::string ImageOpNames();

}  // namespace nostall

#endif  // NOSTALL_OPS_OP_H_
