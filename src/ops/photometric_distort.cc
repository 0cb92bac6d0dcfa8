// RandomPhotometricDistort: torchvision.transforms.v2's (the SSD recipe's
// photometric distortion): brightness, contrast, saturation and hue each
// applied with probability p at a factor drawn in its range, contrast before
// or after the colour changes (a coin), then, with probability p, the
// channels permuted. On PIL images, as ColorJitter's kernels.
#include "ops/color_factors.h"
#include "ops/op.h"

namespace nostall {
namespace {

class RandomPhotometricDistortOp : public ImageOp, public ColorFactors {
 public:
  double p = 0.5;

  void Apply(const ImageView& img, Philox& rng, OpScratch& scratch,
             nlohmann::json* trace) const override {
    // torchvision's make_params, in its order: a factor per adjustment (or
    // none), the contrast's place, the permutation (or none).
    bool use[4];
    double factor[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; ++k) {
      use[k] = rng.Uniform() < p && on[k];
      if (use[k]) factor[k] = rng.Uniform(lo[k], hi[k]);
    }
    const bool contrast_before = rng.Uniform() < 0.5;
    int perm[3] = {0, 1, 2};
    const bool permute = rng.Uniform() < p;
    if (permute) {
      for (int i = img.c - 1; i > 0; --i) std::swap(perm[i], perm[rng.Below(i + 1)]);
    }
    if (trace) {
      nlohmann::json t = {{"op", "RandomPhotometricDistort"}, {"contrast_before", contrast_before}};
      for (int k = 0; k < 4; ++k) {
        t[kColorFactorNames[k]] = use[k] ? nlohmann::json(factor[k]) : nlohmann::json();
      }
      t["permutation"] = permute ? nlohmann::json(std::vector<int>(perm, perm + img.c)) : nlohmann::json();
      trace->push_back(t);
    }
    if (img.data == nullptr) return;
    if (use[0]) ApplyColorFactor(img, 0, factor[0]);
    if (use[1] && contrast_before) ApplyColorFactor(img, 1, factor[1]);
    if (use[2]) ApplyColorFactor(img, 2, factor[2]);
    if (use[3]) ApplyColorFactor(img, 3, factor[3]);
    if (use[1] && !contrast_before) ApplyColorFactor(img, 1, factor[1]);
    if (permute && img.c == 3) {
      for (size_t i = 0; i < img.bytes(); i += 3) {
        const uint8_t px[3] = {img.data[i], img.data[i + 1], img.data[i + 2]};
        for (int k = 0; k < 3; ++k) img.data[i + k] = px[perm[k]];
      }
    }
    (void)scratch;
  }
};

ArgSchema Factor(const char* name, double center, double lo, double hi, double dmin, double dmax) {
  ArgSchema a = RangeArg(name, center, lo, hi,
                         "(lo, hi): the factor's range; a number x: [max(0, 1 - x), 1 + x] "
                         "(hue: [-x, x])");
  a.def = nlohmann::json::array({dmin, dmax});
  return a;
}

}  // namespace

const OpSchema& RandomPhotometricDistortSchema() {
  static const OpSchema s = {
      "RandomPhotometricDistort",
      "torchvision.transforms.v2's photometric distortion (SSD's): brightness, contrast, "
      "saturation and hue each with probability p, contrast before or after the colour "
      "changes, then, with probability p, the channels permuted.",
      {Factor("brightness", 1, 0, 1e9, 0.875, 1.125), Factor("contrast", 1, 0, 1e9, 0.5, 1.5),
       Factor("saturation", 1, 0, 1e9, 0.5, 1.5), Factor("hue", 0, -0.5, 0.5, -0.05, 0.05),
       FloatArg("p", 0.5, 0, 1, "the probability of each adjustment, and of the permutation")}};
  return s;
}

Result<std::shared_ptr<const ImageOp>> MakeRandomPhotometricDistort(OpArgs& args) {
  auto op = std::make_shared<RandomPhotometricDistortOp>();
  NOSTALL_RETURN_IF_ERROR(op->Read(args));
  NOSTALL_RETURN_IF_ERROR(args.Double("p", &op->p));
  return std::shared_ptr<const ImageOp>(op);
}

}  // namespace nostall
