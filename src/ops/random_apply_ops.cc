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

Result<std::shared_ptr<const ImageOp>> Make(OpArgs& args, const char* name,
                                            std::function<void(const ImageView&, OpScratch&)> fn,
                                            std::function<Affine(int, int)> motion = nullptr) {
  double p = 0;
  NOSTALL_RETURN_IF_ERROR(args.Double("p", &p));
  return std::shared_ptr<const ImageOp>(
      std::make_shared<RandomApplyOp>(name, p, std::move(fn), 0, std::move(motion)));
}

ArgSchema P(double def) { return FloatArg("p", def, 0, 1, "the probability it is applied"); }

}  // namespace

const OpSchema& RandomGrayscaleSchema() {
  static const OpSchema s = {
      "RandomGrayscale",
      "With probability p, the sample in gray as Grayscale, in as many channels as the batch has.",
      {P(0.1)}};
  return s;
}

const OpSchema& GrayscaleSchema() {
  static const OpSchema s = {
      "Grayscale", "Gray as PIL's convert(\"L\") (0.299 R + 0.587 G + 0.114 B).",
      {IntArg("num_output_channels", 1, 1, 3,
              "1 (load with mode=\"L\") or 3 (RGB batches, the gray value in each channel)")}};
  return s;
}

const OpSchema& RandomVerticalFlipSchema() {
  static const OpSchema s = {"RandomVerticalFlip", "Flip the sample top to bottom with probability p.",
                             {P(0.5)}, OpRole::kPixels, true};
  return s;
}

const OpSchema& RandomInvertSchema() {
  static const OpSchema s = {"RandomInvert", "With probability p, invert every channel: 255 - x.",
                             {P(0.5)}};
  return s;
}

const OpSchema& RandomAutocontrastSchema() {
  static const OpSchema s = {
      "RandomAutocontrast",
      "With probability p, stretch each channel to the full 0-255 range, as PIL's "
      "ImageOps.autocontrast.",
      {P(0.5)}};
  return s;
}

const OpSchema& RandomEqualizeSchema() {
  static const OpSchema s = {
      "RandomEqualize",
      "With probability p, equalize each channel's histogram, as PIL's ImageOps.equalize.",
      {P(0.5)}};
  return s;
}

const OpSchema& RandomPosterizeSchema() {
  static const OpSchema s = {
      "RandomPosterize", "With probability p, keep only the top bits of each channel.",
      {Required(IntArg("bits", 8, 0, 8, "the bits kept, 0-8")), P(0.5)}};
  return s;
}

const OpSchema& RandomSolarizeSchema() {
  static const OpSchema s = {
      "RandomSolarize", "With probability p, invert the channels at or above threshold.",
      {Required(FloatArg("threshold", 128, 0, 255, "0-255 for uint8 pixels")), P(0.5)}};
  return s;
}

const OpSchema& RandomAdjustSharpnessSchema() {
  static const OpSchema s = {
      "RandomAdjustSharpness",
      "With probability p, sharpen or blur as PIL's ImageEnhance.Sharpness.",
      {Required(FloatArg("sharpness_factor", 1, 0, 1e9,
                         "> 1 sharpens, < 1 blurs, 1 leaves the image as it is")),
       P(0.5)}};
  return s;
}

Result<std::shared_ptr<const ImageOp>> MakeRandomGrayscale(OpArgs& args) {
  return Make(args, "RandomGrayscale", [](const ImageView& img, OpScratch&) { ToGrayscale(img); });
}

Result<std::shared_ptr<const ImageOp>> MakeGrayscale(OpArgs& args) {
  int n = 0;
  NOSTALL_RETURN_IF_ERROR(args.Int("num_output_channels", &n));
  if (n == 2) return args.Error("num_output_channels must be 1 or 3");
  // torchvision's default, 1, as in every face; the batch's channel count
  // is `mode`'s, so one channel needs mode="L" (checked with the pipeline).
  return std::shared_ptr<const ImageOp>(std::make_shared<RandomApplyOp>(
      "Grayscale", 1.0, [](const ImageView& img, OpScratch&) { ToGrayscale(img); }, n));
}

Result<std::shared_ptr<const ImageOp>> MakeRandomVerticalFlip(OpArgs& args) {
  return Make(
      args, "RandomVerticalFlip", [](const ImageView& img, OpScratch&) { FlipVertical(img); },
      [](int, int h) { return Affine::FlipY(h); });
}

Result<std::shared_ptr<const ImageOp>> MakeRandomInvert(OpArgs& args) {
  return Make(args, "RandomInvert", [](const ImageView& img, OpScratch&) { Invert(img); });
}

Result<std::shared_ptr<const ImageOp>> MakeRandomAutocontrast(OpArgs& args) {
  return Make(args, "RandomAutocontrast", [](const ImageView& img, OpScratch&) { Autocontrast(img); });
}

Result<std::shared_ptr<const ImageOp>> MakeRandomEqualize(OpArgs& args) {
  return Make(args, "RandomEqualize", [](const ImageView& img, OpScratch&) { Equalize(img); });
}

Result<std::shared_ptr<const ImageOp>> MakeRandomPosterize(OpArgs& args) {
  int bits = 0;
  NOSTALL_RETURN_IF_ERROR(args.Int("bits", &bits));
  return Make(args, "RandomPosterize", [bits](const ImageView& img, OpScratch&) { Posterize(img, bits); });
}

Result<std::shared_ptr<const ImageOp>> MakeRandomSolarize(OpArgs& args) {
  double threshold = 0;
  NOSTALL_RETURN_IF_ERROR(args.Double("threshold", &threshold));
  return Make(args, "RandomSolarize",
              [threshold](const ImageView& img, OpScratch&) { Solarize(img, threshold); });
}

Result<std::shared_ptr<const ImageOp>> MakeRandomAdjustSharpness(OpArgs& args) {
  double factor = 0;
  NOSTALL_RETURN_IF_ERROR(args.Double("sharpness_factor", &factor));
  return Make(args, "RandomAdjustSharpness", [factor](const ImageView& img, OpScratch& s) {
    AdjustSharpness(img, factor, s);
  });
}

}  // namespace nostall
