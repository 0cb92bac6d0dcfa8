// ColorJitter: brightness, contrast, saturation and hue factors drawn
// uniformly, applied in a random order (torchvision's get_params: randperm(4),
// then one factor per adjustment that is set).
#include "kernels/functional.h"
#include "ops/color_factors.h"
#include "ops/op.h"

namespace nostall {

Status ColorFactors::Read(OpArgs& args) {
  for (int k = 0; k < 4; ++k) {
    NOSTALL_RETURN_IF_ERROR(args.Range(kColorFactorNames[k], &lo[k], &hi[k], &on[k]));
  }
  return Status::OK();
}

void ApplyColorFactor(const ImageView& img, int k, double factor) {
  switch (k) {
    case 0: AdjustBrightness(img, factor); break;
    case 1: AdjustContrast(img, factor); break;
    case 2: AdjustSaturation(img, factor); break;
    case 3: AdjustHue(img, factor); break;
  }
}

namespace {

class ColorJitterOp : public ImageOp, public ColorFactors {
 public:
  void Apply(const ImageView& img, Philox& rng, OpScratch& scratch,
             nlohmann::json* trace) const override {
    int order[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; --i) std::swap(order[i], order[rng.Below(i + 1)]);  // Fisher-Yates
    double factor[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; ++k) {
      if (on[k]) factor[k] = rng.Uniform(lo[k], hi[k]);
    }
    if (trace) {
      nlohmann::json t = {{"op", "ColorJitter"}, {"order", nlohmann::json::array()}};
      for (int k : order) {
        if (!on[k]) continue;
        t["order"].push_back(kColorFactorNames[k]);
        t[kColorFactorNames[k]] = factor[k];
      }
      trace->push_back(t);
    }
    if (img.data == nullptr) return;
    for (int k : order) {
      if (on[k]) ApplyColorFactor(img, k, factor[k]);
    }
  }
};

}  // namespace

const OpSchema& ColorJitterSchema() {
  static const OpSchema s = {
      "ColorJitter",
      "Brightness, contrast, saturation and hue factors drawn per sample and applied in a random "
      "order, as torchvision's ColorJitter on PIL images.",
      {RangeArg("brightness", 1, 0, 1e9, "x: factors in [max(0, 1 - x), 1 + x]; (lo, hi): that range"),
       RangeArg("contrast", 1, 0, 1e9, "x: factors in [max(0, 1 - x), 1 + x]; (lo, hi): that range"),
       RangeArg("saturation", 1, 0, 1e9, "x: factors in [max(0, 1 - x), 1 + x]; (lo, hi): that range"),
       RangeArg("hue", 0, -0.5, 0.5, "x <= 0.5: shifts in [-x, x]; (lo, hi) within [-0.5, 0.5]")}};
  return s;
}

Result<std::shared_ptr<const ImageOp>> MakeColorJitter(OpArgs& args) {
  auto op = std::make_shared<ColorJitterOp>();
  NOSTALL_RETURN_IF_ERROR(op->Read(args));
  return std::shared_ptr<const ImageOp>(op);
}

}  // namespace nostall
