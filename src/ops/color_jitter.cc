// ColorJitter: brightness, contrast, saturation and hue factors drawn
// uniformly, applied in a random order (torchvision's get_params: randperm(4),
// then one factor per adjustment that is set).
#include "kernels/functional.h"
#include "ops/op.h"

namespace nostall {
namespace {

class ColorJitterOp : public ImageOp {
 public:
  double lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};
  bool on[4] = {false, false, false, false};

  void Apply(const ImageView& img, Philox& rng, OpScratch& scratch,
             nlohmann::json* trace) const override {
    int order[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; --i) std::swap(order[i], order[rng.Below(i + 1)]);  // Fisher-Yates
    double factor[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; ++k) {
      if (on[k]) factor[k] = rng.Uniform(lo[k], hi[k]);
    }
    if (trace) {
      static const char* kNames[4] = {"brightness", "contrast", "saturation", "hue"};
      nlohmann::json t = {{"op", "ColorJitter"}, {"order", nlohmann::json::array()}};
      for (int k : order) {
        if (!on[k]) continue;
        t["order"].push_back(kNames[k]);
        t[kNames[k]] = factor[k];
      }
      trace->push_back(t);
    }
    if (img.data == nullptr) return;
    for (int k : order) {
      if (!on[k]) continue;
      switch (k) {
        case 0: AdjustBrightness(img, factor[k]); break;
        case 1: AdjustContrast(img, factor[k]); break;
        case 2: AdjustSaturation(img, factor[k]); break;
        case 3: AdjustHue(img, factor[k]); break;
      }
    }
  }
};

}  // namespace

Result<std::shared_ptr<const ImageOp>> MakeColorJitter(OpArgs& args) {
  auto op = std::make_shared<ColorJitterOp>();
  constexpr double kInf = 1e9;
  NOSTALL_RETURN_IF_ERROR(args.Range("brightness", 1, 0, kInf, &op->lo[0], &op->hi[0], &op->on[0]));
  NOSTALL_RETURN_IF_ERROR(args.Range("contrast", 1, 0, kInf, &op->lo[1], &op->hi[1], &op->on[1]));
  NOSTALL_RETURN_IF_ERROR(args.Range("saturation", 1, 0, kInf, &op->lo[2], &op->hi[2], &op->on[2]));
  NOSTALL_RETURN_IF_ERROR(args.Range("hue", 0, -0.5, 0.5, &op->lo[3], &op->hi[3], &op->on[3]));
  return std::shared_ptr<const ImageOp>(op);
}

}  // namespace nostall
