// The ops that apply one fixed adjustment with probability p (torchvision:
// `if torch.rand(1) < p`), and Grayscale. One draw per sample each.
#include <functional>

#include "kernels/functional.h"
#include "ops/op.h"

namespace nostall {
namespace {

class RandomApplyOp : public ImageOp {
 public:
  RandomApplyOp(const char* name, double p, std::function<void(const ImageView&, OpScratch&)> fn,
                int output_channels = 0, std::function<Affine(int, int)> motion = nullptr)
      : name_(name), p_(p), fn_(std::move(fn)), output_channels_(output_channels),
        motion_(std::move(motion)) {}
  int output_channels() const override { return output_channels_; }

  void Apply(const ImageView& img, Philox& rng, OpScratch& scratch,
             nlohmann::json* trace) const override {
    const bool apply = rng.Uniform() < p_;
    if (trace) trace->push_back({{"op", name_}, {"applied", apply}});
    if (apply && motion_) scratch.Moved(motion_(img.w, img.h));
    if (apply && img.data != nullptr) fn_(img, scratch);
  }

 private:
  const char* name_;
  double p_;
  std::function<void(const ImageView&, OpScratch&)> fn_;
  int output_channels_;
  std::function<Affine(int, int)> motion_;  // ops that move pixels: where
};

Result<std::shared_ptr<const ImageOp>> Make(OpArgs& args, const char* name, double default_p,
                                            std::function<void(const ImageView&, OpScratch&)> fn,
                                            std::function<Affine(int, int)> motion = nullptr) {
  double p = 0;
  NOSTALL_RETURN_IF_ERROR(args.Double("p", default_p, 0, 1, &p));
  return std::shared_ptr<const ImageOp>(
      std::make_shared<RandomApplyOp>(name, p, std::move(fn), 0, std::move(motion)));
}

}  // namespace

Result<std::shared_ptr<const ImageOp>> MakeRandomGrayscale(OpArgs& args) {
  return Make(args, "RandomGrayscale", 0.1, [](const ImageView& img, OpScratch&) { ToGrayscale(img); });
}

Result<std::shared_ptr<const ImageOp>> MakeGrayscale(OpArgs& args) {
  int n = 0;
  NOSTALL_RETURN_IF_ERROR(args.Int("num_output_channels", 1, 1, 3, &n));
  if (n == 2) return args.Error("num_output_channels must be 1 or 3");
  // torchvision's default, 1, as in every face; the batch's channel count
  // is `mode`'s, so one channel needs mode="L" (checked with the pipeline).
  return std::shared_ptr<const ImageOp>(std::make_shared<RandomApplyOp>(
      "Grayscale", 1.0, [](const ImageView& img, OpScratch&) { ToGrayscale(img); }, n));
}

Result<std::shared_ptr<const ImageOp>> MakeRandomVerticalFlip(OpArgs& args) {
  return Make(
      args, "RandomVerticalFlip", 0.5, [](const ImageView& img, OpScratch&) { FlipVertical(img); },
      [](int, int h) { return Affine::FlipY(h); });
}

Result<std::shared_ptr<const ImageOp>> MakeRandomInvert(OpArgs& args) {
  return Make(args, "RandomInvert", 0.5, [](const ImageView& img, OpScratch&) { Invert(img); });
}

Result<std::shared_ptr<const ImageOp>> MakeRandomAutocontrast(OpArgs& args) {
  return Make(args, "RandomAutocontrast", 0.5, [](const ImageView& img, OpScratch&) { Autocontrast(img); });
}

Result<std::shared_ptr<const ImageOp>> MakeRandomEqualize(OpArgs& args) {
  return Make(args, "RandomEqualize", 0.5, [](const ImageView& img, OpScratch&) { Equalize(img); });
}

Result<std::shared_ptr<const ImageOp>> MakeRandomPosterize(OpArgs& args) {
  int bits = 0;
  if (args.Raw("bits") == nullptr) return args.Error("needs bits (0-8)");
  NOSTALL_RETURN_IF_ERROR(args.Int("bits", 8, 0, 8, &bits));
  return Make(args, "RandomPosterize", 0.5, [bits](const ImageView& img, OpScratch&) { Posterize(img, bits); });
}

Result<std::shared_ptr<const ImageOp>> MakeRandomSolarize(OpArgs& args) {
  double threshold = 0;
  if (args.Raw("threshold") == nullptr) return args.Error("needs threshold (0-255)");
  NOSTALL_RETURN_IF_ERROR(args.Double("threshold", 128, 0, 255, &threshold));
  return Make(args, "RandomSolarize", 0.5,
              [threshold](const ImageView& img, OpScratch&) { Solarize(img, threshold); });
}

Result<std::shared_ptr<const ImageOp>> MakeRandomAdjustSharpness(OpArgs& args) {
  double factor = 0;
  if (args.Raw("sharpness_factor") == nullptr) return args.Error("needs sharpness_factor (>= 0)");
  NOSTALL_RETURN_IF_ERROR(args.Double("sharpness_factor", 1, 0, 1e9, &factor));
  return Make(args, "RandomAdjustSharpness", 0.5, [factor](const ImageView& img, OpScratch& s) {
    AdjustSharpness(img, factor, s);
  });
}

}  // namespace nostall
