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
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/json_fields.h"  // Shown
#include "common/philox.h"
#include "geometry/affine.h"
#include "kernels/image.h"
#include "nostall/status.h"
#include "nostall/transforms.h"
#include "ops/schema.h"

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
  // Non-empty when the op cannot write a uint8 output (the reason).
  virtual std::string needs_float32() const { return ""; }
  // The channel count the op makes (0: whatever it is given). The batch's
  // channels are fixed by `mode`: a pipeline whose mode gives others is
  // refused when the loader is made.
  virtual int output_channels() const { return 0; }
  // Ops whose schema's role is OpRole::kTensor (after Normalize): run
  // instead of Apply.
  virtual void ApplyOutput(const OutputView& out, Philox& rng, nlohmann::json* trace) const {}
};

// Reads a transform's arguments from its spec entry through its schema
// (ops/schema.h: types, torchvision's defaults, ranges), the one place they
// are checked, and records the resolved values (the spec round-trips with
// every default spelled out). Errors name the transform and the argument.
class OpArgs {
 public:
  OpArgs(const nlohmann::json& j, std::string where, const OpSchema& schema)
      : j_(j), where_(std::move(where)), schema_(schema) {}

  Status Double(const char* key, double* out);
  Status Int(const char* key, int* out);
  Status Bool(const char* key, bool* out);
  // kRange: a number x gives [center - x, center + x] (clamped at lo), as
  // ColorJitter's brightness=0.4 gives [0.6, 1.4]; a pair is taken as given.
  // Either must lie in [lo, hi]. Writes {0, 0} and *present = false when
  // absent, null or just the center.
  Status Range(const char* key, double* min, double* max, bool* present);
  // kPair: [min, max] with lo <= min <= max <= hi.
  Status Pair(const char* key, double* min, double* max);
  // kFill: a number or one per channel, 0-255.
  Status Fill(const char* key, std::vector<double>* out);
  // kChoice "interpolation": "nearest" or "bilinear".
  Status Interpolation(const char* key, bool* bilinear);
  Status String(const char* key, std::string* out);
  // kAny: an argument the transform parses itself (then Record it); null
  // when absent (a required one absent is an error here).
  Status Raw(const char* key, const nlohmann::json** out);
  void Record(const char* key, nlohmann::json value) { resolved_[key] = std::move(value); }

  Status Error(const std::string& msg) const;
  const std::string& where() const { return where_; }
  // Keys the schema does not name are an error listing the ones it does;
  // the schema's accepted-only arguments are checked here.
  Status CheckNoOthers() const;
  nlohmann::json resolved() const { return resolved_; }

 private:
  // The schema's entry for `key` of type `type`, and the value given (null:
  // absent); a read the schema does not declare is an internal error.
  Status Arg(const char* key, ArgType type, const ArgSchema** arg, const nlohmann::json** v);

  const nlohmann::json& j_;
  std::string where_;
  const OpSchema& schema_;
  nlohmann::json resolved_ = nlohmann::json::object();
};

using OpFactory = Result<std::shared_ptr<const ImageOp>> (*)(OpArgs& args);

// Every op, by its torchvision name. X(Name) declares its factory,
// `Result<std::shared_ptr<const ImageOp>> MakeName(OpArgs&)`, and its schema,
// `const OpSchema& NameSchema()` (what it does, its arguments), both in the
// op's own file. Adding an op is that file and one line here.
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
  X(RandomAdjustSharpness)   \
  X(RandomPhotometricDistort)

#define NOSTALL_DECLARE_IMAGE_OP(name)                              \
  Result<std::shared_ptr<const ImageOp>> Make##name(OpArgs& args); \
  const OpSchema& name##Schema();
NOSTALL_IMAGE_OPS(NOSTALL_DECLARE_IMAGE_OP)
#undef NOSTALL_DECLARE_IMAGE_OP

// The schemas of the transforms that are not ops: the geometry
// (RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip) and
// Normalize (transform_json.cc).
std::vector<OpSchema> GeometrySchemas();
// The transforms that need boxes (RandomZoomOut, RandomIoUCrop,
// SanitizeBoundingBoxes, ClampBoundingBoxes): a detection spec's only
// (src/detect), their schemas here with the others' (box_schemas.cc).
std::vector<OpSchema> BoxSchemas();
bool IsBoxTransform(const std::string& type);

// The arguments the resizes and crops share, declared once for the geometry
// transforms and the detection ones (box_schemas.cc): a required "size"
// (an int or (height, width)), and interpolation / antialias accepted with
// torchvision's PIL defaults only. ReadSize reads "size" (one number: the
// smaller edge when `one_is_short_side`, else a square).
// A side in [1, kMaxSide], as every resize and crop takes them.
inline constexpr int64_t kMaxSide = 1 << 16;
bool IsSide(const nlohmann::json& v);
ArgSchema SizeArg(const char* doc);
ArgSchema Bilinear();
ArgSchema Antialias();
Status ReadSize(OpArgs& args, bool one_is_short_side, Transform* t);

// A spec's transform entry (at `position` of the list) read through its
// schema, and written back with every default spelled out.
Result<Transform> TransformFromJson(const nlohmann::json& j, size_t position);
// A transform's name ("RandomResizedCrop", an op's) and schema.
const std::string& TransformName(const Transform& t);
const OpSchema& SchemaOf(const Transform& t);
// The rules every transform list keeps, image or detection, from each
// entry's schema role: the geometry and the pixel ops, then Normalize (once,
// dtype float32, a mean and std per channel), then the ops on the tensor;
// box-only steps anywhere; each op given the dtype and channels it needs.
// With `geometry_first`, crops and resizes come before the pixel ops too
// (the image pipeline resamples once, before them). where(i) starts the
// errors about entry i.
struct ListEntry {
  const Transform* transform;  // null for a box-only step
  const OpSchema* schema;
};
Status CheckTransformList(const std::vector<ListEntry>& list, DType dtype, int channels,
                          bool geometry_first, const std::function<std::string(size_t)>& where);
Status CheckOp(const Transform& t, const std::string& where, DType dtype, int channels);
// The dtype a transform list (a spec's "transforms" or its detection
// transforms; anything else counts as empty) gives when the spec names
// none: float32 when it holds Normalize (torchvision's ToTensor +
// Normalize), else uint8. The one home of that rule: the spec reader and
// the single-sample functions of nostall.detection ask it.
DType DefaultDType(const nlohmann::json& transforms);
// Whether it works on the laid-out tensor (its role is OpRole::kTensor).
inline bool OnTensor(const Transform& t) { return SchemaOf(t).role == OpRole::kTensor; }
nlohmann::json TransformToJson(const Transform& t);

// Finds the op named `type`; null when there is none.
OpFactory FindImageOp(const std::string& type);
// The registered names, comma-separated (for error messages).
std::string ImageOpNames();
// ImageOpDoc (what an op does): nostall/transforms.h.

}  // namespace nostall

#endif  // NOSTALL_OPS_OP_H_
