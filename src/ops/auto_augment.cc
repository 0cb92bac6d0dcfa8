// TrivialAugmentWide, RandAugment and AutoAugment: torchvision's augmentation
// spaces (magnitudes as torch.linspace in float32), op choice and signs, and
// its _apply_op on PIL images (nearest by default, fill 0).
#include <cmath>
#include <string>

#include "kernels/functional.h"
#include "ops/motion.h"
#include "ops/op.h"

namespace nostall {
namespace {

enum class Aug {
  kIdentity, kShearX, kShearY, kTranslateX, kTranslateY, kRotate, kBrightness, kColor, kContrast,
  kSharpness, kPosterize, kSolarize, kAutoContrast, kEqualize, kInvert,
};
const char* const kAugNames[] = {"Identity", "ShearX", "ShearY", "TranslateX", "TranslateY",
                                 "Rotate", "Brightness", "Color", "Contrast", "Sharpness",
                                 "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert"};

// torch.linspace(start, end, steps)[i] in float32 (torch fills from both ends).
double Linspace(double start, double end, int steps, int i) {
  if (steps == 1) return static_cast<float>(start);
  const float step = static_cast<float>((end - start) / (steps - 1));
  const int half = steps / 2;
  return i < half ? static_cast<float>(start) + step * i
                  : static_cast<float>(end) - step * (steps - i - 1);
}

// 8 - (arange(n) / ((n - 1) / levels)).round().int()
double PosterizeBits(int bins, double levels, int i) {
  const float q = static_cast<float>(i) / static_cast<float>((bins - 1) / levels);
  return 8 - static_cast<int>(std::nearbyint(q));
}

struct Space {
  // Per op: has magnitudes, their end value (linspace(0, end)), signed.
  // Posterize and Solarize are special-cased.
  double shear, translate_x, translate_y, rotate, enhance, posterize_levels;
  bool translate_relative;  // RandAugment/AutoAugment: 150/331 of the size
};

double Magnitude(Aug op, const Space& s, int bins, int i, int width, int height) {
  switch (op) {
    case Aug::kShearX:
    case Aug::kShearY: return Linspace(0, s.shear, bins, i);
    case Aug::kTranslateX:
      return Linspace(0, s.translate_relative ? 150.0 / 331.0 * width : s.translate_x, bins, i);
    case Aug::kTranslateY:
      return Linspace(0, s.translate_relative ? 150.0 / 331.0 * height : s.translate_y, bins, i);
    case Aug::kRotate: return Linspace(0, s.rotate, bins, i);
    case Aug::kBrightness:
    case Aug::kColor:
    case Aug::kContrast:
    case Aug::kSharpness: return Linspace(0, s.enhance, bins, i);
    case Aug::kPosterize: return PosterizeBits(bins, s.posterize_levels, i);
    case Aug::kSolarize: return Linspace(255.0, 0.0, bins, i);
    default: return 0.0;
  }
}

bool HasMagnitudes(Aug op) {
  return !(op == Aug::kIdentity || op == Aug::kAutoContrast || op == Aug::kEqualize ||
           op == Aug::kInvert);
}
bool Signed(Aug op) { return op >= Aug::kShearX && op <= Aug::kSharpness; }

// The inverse matrix of a geometric op (false: the op moves no pixel).
bool AugInverse(Aug op, double m, int w, int h, double mat[6]) {
  switch (op) {
    case Aug::kShearX:
      InverseAffineMatrix(0, 0, 0, 0, 0, 1, std::atan(m) * 180.0 / M_PI, 0, mat);
      return true;
    case Aug::kShearY:
      InverseAffineMatrix(0, 0, 0, 0, 0, 1, 0, std::atan(m) * 180.0 / M_PI, mat);
      return true;
    case Aug::kTranslateX:
    case Aug::kTranslateY: {
      const double t = static_cast<int>(m);  // int(magnitude)
      InverseAffineMatrix(w * 0.5, h * 0.5, 0, op == Aug::kTranslateX ? t : 0,
                          op == Aug::kTranslateY ? t : 0, 1, 0, 0, mat);
      return true;
    }
    default: return false;
  }
}

// torchvision.transforms.autoaugment._apply_op.
void ApplyAug(const ImageView& img, Aug op, double m, bool bilinear,
              const std::vector<double>& fill, OpScratch& scratch) {
  double mat[6];
  if (AugInverse(op, m, img.w, img.h, mat)) return AffineTransform(img, mat, bilinear, fill, scratch);
  switch (op) {
    case Aug::kRotate: Rotate(img, m, nullptr, bilinear, fill, scratch); break;
    case Aug::kBrightness: AdjustBrightness(img, 1.0 + m); break;
    case Aug::kColor: AdjustSaturation(img, 1.0 + m); break;
    case Aug::kContrast: AdjustContrast(img, 1.0 + m); break;
    case Aug::kSharpness: AdjustSharpness(img, 1.0 + m, scratch); break;
    case Aug::kPosterize: Posterize(img, static_cast<int>(m)); break;
    case Aug::kSolarize: Solarize(img, m); break;
    case Aug::kAutoContrast: Autocontrast(img); break;
    case Aug::kEqualize: Equalize(img); break;
    case Aug::kInvert: Invert(img); break;
    default: break;
  }
}

// Where op moves a point of a w x h image (identity for the ops on colors).
Affine AugMotion(Aug op, double m, int w, int h) {
  double mat[6];
  if (AugInverse(op, m, w, h, mat)) return ForwardOf(mat);
  if (op == Aug::kRotate) return RotationMotion(w, h, m, nullptr);
  return Affine{};
}

class AugmentBase : public ImageOp {
 public:
  bool bilinear = false;
  std::vector<double> fill;

 protected:
  void Run(const ImageView& img, Aug op, double m, OpScratch& scratch, const char* name,
           nlohmann::json* trace) const {
    if (trace) {
      trace->push_back({{"op", name}, {"aug", kAugNames[static_cast<int>(op)]}, {"magnitude", m}});
    }
    scratch.Moved(AugMotion(op, m, img.w, img.h));
    if (img.data) ApplyAug(img, op, m, bilinear, fill, scratch);
  }
};

class TrivialAugmentWideOp : public AugmentBase {
 public:
  int bins = 31;
  void Apply(const ImageView& img, Philox& rng, OpScratch& scratch,
             nlohmann::json* trace) const override {
    static constexpr Space kSpace = {0.99, 32.0, 32.0, 135.0, 0.99, 6.0, false};
    const Aug op = static_cast<Aug>(rng.Below(14));  // Identity .. Equalize
    double m = 0;
    if (HasMagnitudes(op)) m = Magnitude(op, kSpace, bins, static_cast<int>(rng.Below(bins)), img.w, img.h);
    if (Signed(op) && rng.Below(2)) m = -m;
    Run(img, op, m, scratch, "TrivialAugmentWide", trace);
  }
};

class RandAugmentOp : public AugmentBase {
 public:
  int num_ops = 2, magnitude = 9, bins = 31;
  void Apply(const ImageView& img, Philox& rng, OpScratch& scratch,
             nlohmann::json* trace) const override {
    static constexpr Space kSpace = {0.3, 0, 0, 30.0, 0.9, 4.0, true};
    for (int n = 0; n < num_ops; ++n) {
      const Aug op = static_cast<Aug>(rng.Below(14));
      double m = HasMagnitudes(op) ? Magnitude(op, kSpace, bins, magnitude, img.w, img.h) : 0.0;
      if (Signed(op) && rng.Below(2)) m = -m;
      Run(img, op, m, scratch, "RandAugment", trace);
    }
  }
};

struct SubPolicy {
  Aug op;
  double p;
  int magnitude_id;  // -1: none
};
using Policy = std::vector<std::pair<SubPolicy, SubPolicy>>;

// torchvision's AutoAugmentPolicy tables (torchvision/transforms/autoaugment.py).
const Policy& ImagenetPolicy() {
  using A = Aug;
  static const Policy policy = {
      {{A::kPosterize, 0.4, 8}, {A::kRotate, 0.6, 9}},
      {{A::kSolarize, 0.6, 5}, {A::kAutoContrast, 0.6, -1}},
      {{A::kEqualize, 0.8, -1}, {A::kEqualize, 0.6, -1}},
      {{A::kPosterize, 0.6, 7}, {A::kPosterize, 0.6, 6}},
      {{A::kEqualize, 0.4, -1}, {A::kSolarize, 0.2, 4}},
      {{A::kEqualize, 0.4, -1}, {A::kRotate, 0.8, 8}},
      {{A::kSolarize, 0.6, 3}, {A::kEqualize, 0.6, -1}},
      {{A::kPosterize, 0.8, 5}, {A::kEqualize, 1.0, -1}},
      {{A::kRotate, 0.2, 3}, {A::kSolarize, 0.6, 8}},
      {{A::kEqualize, 0.6, -1}, {A::kPosterize, 0.4, 6}},
      {{A::kRotate, 0.8, 8}, {A::kColor, 0.4, 0}},
      {{A::kRotate, 0.4, 9}, {A::kEqualize, 0.6, -1}},
      {{A::kEqualize, 0.0, -1}, {A::kEqualize, 0.8, -1}},
      {{A::kInvert, 0.6, -1}, {A::kEqualize, 1.0, -1}},
      {{A::kColor, 0.6, 4}, {A::kContrast, 1.0, 8}},
      {{A::kRotate, 0.8, 8}, {A::kColor, 1.0, 2}},
      {{A::kColor, 0.8, 8}, {A::kSolarize, 0.8, 7}},
      {{A::kSharpness, 0.4, 7}, {A::kInvert, 0.6, -1}},
      {{A::kShearX, 0.6, 5}, {A::kEqualize, 1.0, -1}},
      {{A::kColor, 0.4, 0}, {A::kEqualize, 0.6, -1}},
      {{A::kEqualize, 0.4, -1}, {A::kSolarize, 0.2, 4}},
      {{A::kSolarize, 0.6, 5}, {A::kAutoContrast, 0.6, -1}},
      {{A::kInvert, 0.6, -1}, {A::kEqualize, 1.0, -1}},
      {{A::kColor, 0.6, 4}, {A::kContrast, 1.0, 8}},
      {{A::kEqualize, 0.8, -1}, {A::kEqualize, 0.6, -1}},
  };
  return policy;
}

const Policy& Cifar10Policy() {
  using A = Aug;
  static const Policy policy = {
      {{A::kInvert, 0.1, -1}, {A::kContrast, 0.2, 6}},
      {{A::kRotate, 0.7, 2}, {A::kTranslateX, 0.3, 9}},
      {{A::kSharpness, 0.8, 1}, {A::kSharpness, 0.9, 3}},
      {{A::kShearY, 0.5, 8}, {A::kTranslateY, 0.7, 9}},
      {{A::kAutoContrast, 0.5, -1}, {A::kEqualize, 0.9, -1}},
      {{A::kShearY, 0.2, 7}, {A::kPosterize, 0.3, 7}},
      {{A::kColor, 0.4, 3}, {A::kBrightness, 0.6, 7}},
      {{A::kSharpness, 0.3, 9}, {A::kBrightness, 0.7, 9}},
      {{A::kEqualize, 0.6, -1}, {A::kEqualize, 0.5, -1}},
      {{A::kContrast, 0.6, 7}, {A::kSharpness, 0.6, 5}},
      {{A::kColor, 0.7, 7}, {A::kTranslateX, 0.5, 8}},
      {{A::kEqualize, 0.3, -1}, {A::kAutoContrast, 0.4, -1}},
      {{A::kTranslateY, 0.4, 3}, {A::kSharpness, 0.2, 6}},
      {{A::kBrightness, 0.9, 6}, {A::kColor, 0.2, 8}},
      {{A::kSolarize, 0.5, 2}, {A::kInvert, 0.0, -1}},
      {{A::kEqualize, 0.2, -1}, {A::kAutoContrast, 0.6, -1}},
      {{A::kEqualize, 0.2, -1}, {A::kEqualize, 0.6, -1}},
      {{A::kColor, 0.9, 9}, {A::kEqualize, 0.6, -1}},
      {{A::kAutoContrast, 0.8, -1}, {A::kSolarize, 0.2, 8}},
      {{A::kBrightness, 0.1, 3}, {A::kColor, 0.7, 0}},
      {{A::kSolarize, 0.4, 5}, {A::kAutoContrast, 0.9, -1}},
      {{A::kTranslateY, 0.9, 9}, {A::kTranslateY, 0.7, 9}},
      {{A::kAutoContrast, 0.9, -1}, {A::kSolarize, 0.8, 3}},
      {{A::kEqualize, 0.8, -1}, {A::kInvert, 0.1, -1}},
      {{A::kTranslateY, 0.7, 9}, {A::kAutoContrast, 0.9, -1}},
  };
  return policy;
}

const Policy& SvhnPolicy() {
  using A = Aug;
  static const Policy policy = {
      {{A::kShearX, 0.9, 4}, {A::kInvert, 0.2, -1}},
      {{A::kShearY, 0.9, 8}, {A::kInvert, 0.7, -1}},
      {{A::kEqualize, 0.6, -1}, {A::kSolarize, 0.6, 6}},
      {{A::kInvert, 0.9, -1}, {A::kEqualize, 0.6, -1}},
      {{A::kEqualize, 0.6, -1}, {A::kRotate, 0.9, 3}},
      {{A::kShearX, 0.9, 4}, {A::kAutoContrast, 0.8, -1}},
      {{A::kShearY, 0.9, 8}, {A::kInvert, 0.4, -1}},
      {{A::kShearY, 0.9, 5}, {A::kSolarize, 0.2, 6}},
      {{A::kInvert, 0.9, -1}, {A::kAutoContrast, 0.8, -1}},
      {{A::kEqualize, 0.6, -1}, {A::kRotate, 0.9, 3}},
      {{A::kShearX, 0.9, 4}, {A::kSolarize, 0.3, 3}},
      {{A::kShearY, 0.8, 8}, {A::kInvert, 0.7, -1}},
      {{A::kEqualize, 0.9, -1}, {A::kTranslateY, 0.6, 6}},
      {{A::kInvert, 0.9, -1}, {A::kEqualize, 0.6, -1}},
      {{A::kContrast, 0.3, 3}, {A::kRotate, 0.8, 4}},
      {{A::kInvert, 0.8, -1}, {A::kTranslateY, 0.0, 2}},
      {{A::kShearY, 0.7, 6}, {A::kSolarize, 0.4, 8}},
      {{A::kInvert, 0.6, -1}, {A::kRotate, 0.8, 4}},
      {{A::kShearY, 0.3, 7}, {A::kTranslateX, 0.9, 3}},
      {{A::kShearX, 0.1, 6}, {A::kInvert, 0.6, -1}},
      {{A::kSolarize, 0.7, 2}, {A::kTranslateY, 0.6, 7}},
      {{A::kShearY, 0.8, 4}, {A::kInvert, 0.8, -1}},
      {{A::kShearX, 0.7, 9}, {A::kTranslateY, 0.8, 3}},
      {{A::kShearY, 0.8, 5}, {A::kAutoContrast, 0.7, -1}},
      {{A::kShearX, 0.7, 2}, {A::kInvert, 0.1, -1}},
  };
  return policy;
}

const Policy& PolicyFor(const std::string& name) {
  if (name == "cifar10") return Cifar10Policy();
  if (name == "svhn") return SvhnPolicy();
  return ImagenetPolicy();
}

class AutoAugmentOp : public AugmentBase {
 public:
  const Policy* policy = nullptr;
  void Apply(const ImageView& img, Philox& rng, OpScratch& scratch,
             nlohmann::json* trace) const override {
    static constexpr Space kSpace = {0.3, 0, 0, 30.0, 0.9, 4.0, true};
    const auto& sub = (*policy)[rng.Below(policy->size())];
    const double probs[2] = {rng.Uniform(), rng.Uniform()};
    const bool negate[2] = {rng.Below(2) == 0, rng.Below(2) == 0};
    const SubPolicy* parts[2] = {&sub.first, &sub.second};
    for (int i = 0; i < 2; ++i) {
      if (!(probs[i] <= parts[i]->p)) continue;
      const Aug op = parts[i]->op;
      double m = parts[i]->magnitude_id >= 0
                     ? Magnitude(op, kSpace, 10, parts[i]->magnitude_id, img.w, img.h)
                     : 0.0;
      if (Signed(op) && negate[i]) m = -m;
      Run(img, op, m, scratch, "AutoAugment", trace);
    }
  }
};

Status Common(OpArgs& args, AugmentBase* op) {
  NOSTALL_RETURN_IF_ERROR(args.Interpolation("interpolation", &op->bilinear));
  return args.Fill("fill", &op->fill);
}

ArgSchema Interpolation() {
  return ChoiceArg("interpolation", "nearest", {"nearest", "bilinear"},
                   "NEAREST (the default) or BILINEAR, for the geometric ops");
}

ArgSchema Fill() {
  return FillArg("fill", nullptr, "the area a geometric op uncovers: a number or one per channel, "
                                  "0-255 (None: 0)");
}

ArgSchema Bins() {
  return IntArg("num_magnitude_bins", 31, 2, 1000, "the magnitudes' grid");
}

}  // namespace

const OpSchema& TrivialAugmentWideSchema() {
  static const OpSchema s = {
      "TrivialAugmentWide",
      "One of torchvision's TrivialAugmentWide ops per sample, at a magnitude drawn from the "
      "grid.",
      {Bins(), Interpolation(), Fill()},
      OpRole::kPixels, true};
  return s;
}

const OpSchema& RandAugmentSchema() {
  static const OpSchema s = {
      "RandAugment", "num_ops ops drawn per sample from torchvision's RandAugment list.",
      {IntArg("num_ops", 2, 0, 100, "ops per sample"),
       IntArg("magnitude", 9, 0, 999, "the magnitude, below num_magnitude_bins"), Bins(),
       Interpolation(), Fill()},
      OpRole::kPixels, true};
  return s;
}

const OpSchema& AutoAugmentSchema() {
  static const OpSchema s = {
      "AutoAugment",
      "A sub-policy of torchvision's AutoAugmentPolicy drawn per sample, each op applied with "
      "its probability and magnitude.",
      {ChoiceArg("policy", "imagenet", {"imagenet", "cifar10", "svhn"},
                 "AutoAugmentPolicy: IMAGENET, CIFAR10 or SVHN"),
       Interpolation(), Fill()},
      OpRole::kPixels, true};
  return s;
}

Result<std::shared_ptr<const ImageOp>> MakeTrivialAugmentWide(OpArgs& args) {
  auto op = std::make_shared<TrivialAugmentWideOp>();
  NOSTALL_RETURN_IF_ERROR(args.Int("num_magnitude_bins", &op->bins));
  NOSTALL_RETURN_IF_ERROR(Common(args, op.get()));
  return std::shared_ptr<const ImageOp>(op);
}

Result<std::shared_ptr<const ImageOp>> MakeRandAugment(OpArgs& args) {
  auto op = std::make_shared<RandAugmentOp>();
  NOSTALL_RETURN_IF_ERROR(args.Int("num_ops", &op->num_ops));
  NOSTALL_RETURN_IF_ERROR(args.Int("num_magnitude_bins", &op->bins));
  NOSTALL_RETURN_IF_ERROR(args.Int("magnitude", &op->magnitude));
  if (op->magnitude > op->bins - 1) {
    return args.Error("magnitude must be in [0, num_magnitude_bins - 1 = " +
                      std::to_string(op->bins - 1) + "], not " + std::to_string(op->magnitude));
  }
  NOSTALL_RETURN_IF_ERROR(Common(args, op.get()));
  return std::shared_ptr<const ImageOp>(op);
}

Result<std::shared_ptr<const ImageOp>> MakeAutoAugment(OpArgs& args) {
  auto op = std::make_shared<AutoAugmentOp>();
  std::string policy;
  NOSTALL_RETURN_IF_ERROR(args.String("policy", &policy));
  op->policy = &PolicyFor(policy);
  NOSTALL_RETURN_IF_ERROR(Common(args, op.get()));
  return std::shared_ptr<const ImageOp>(op);
}

}  // namespace nostall
