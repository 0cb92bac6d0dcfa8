// GaussianBlur(kernel_size, sigma=(0.1, 2.0)): sigma uniform in the range per
// sample, the same for x and y; kernel_size (x, y) odd and positive.
#include "kernels/functional.h"
#include "ops/op.h"

namespace nostall {
namespace {

class GaussianBlurOp : public ImageOp {
 public:
  int kx = 0, ky = 0;
  double sigma_min = 0, sigma_max = 0;

  void Apply(const ImageView& img, Philox& rng, OpScratch& scratch,
             nlohmann::json* trace) const override {
    const double sigma = rng.Uniform(sigma_min, sigma_max);
    if (trace) trace->push_back({{"op", "GaussianBlur"}, {"sigma", sigma}});
    if (img.data == nullptr) return;
    // torch's reflect padding needs the pad smaller than the side; a larger
    // kernel on a tiny image reflects again (torch would refuse).
    GaussianBlur(img, kx, ky, sigma, sigma, scratch);
  }
};

}  // namespace

const OpSchema& GaussianBlurSchema() {
  static const OpSchema s = {
      "GaussianBlur",
      "Blur with a Gaussian kernel, sigma drawn uniformly per sample, edges reflected, as "
      "torchvision's GaussianBlur.",
      {Required(AnyArg("kernel_size", nullptr, "int | tuple[int, int]",
                       "odd, in [1, 255]: one for both axes, or (x, y)")),
       AnyArg("sigma", nlohmann::json::array({0.1, 2.0}), "float | tuple[float, float]",
              "a number, or (min, max) to draw from")}};
  return s;
}

Result<std::shared_ptr<const ImageOp>> MakeGaussianBlur(OpArgs& args) {
  auto op = std::make_shared<GaussianBlurOp>();
  const nlohmann::json* k = nullptr;
  NOSTALL_RETURN_IF_ERROR(args.Raw("kernel_size", &k));
  auto odd = [](const nlohmann::json& v) {
    return v.is_number_integer() && v.get<int64_t>() > 0 && v.get<int64_t>() % 2 == 1 &&
           v.get<int64_t>() <= 255;
  };
  if (odd(*k)) {
    op->kx = op->ky = k->get<int>();
  } else if (k->is_array() && k->size() == 2 && odd((*k)[0]) && odd((*k)[1])) {
    op->kx = (*k)[0].get<int>();
    op->ky = (*k)[1].get<int>();
  } else {
    return args.Error("kernel_size must be an odd integer in [1, 255] or [x, y] of them, not " +
                      k->dump());
  }
  args.Record("kernel_size", nlohmann::json::array({op->kx, op->ky}));
  const nlohmann::json* s = nullptr;
  NOSTALL_RETURN_IF_ERROR(args.Raw("sigma", &s));
  const nlohmann::json given = s != nullptr ? *s : GaussianBlurSchema().Find("sigma")->def;
  if (given.is_number()) {
    op->sigma_min = op->sigma_max = given.get<double>();
  } else if (given.is_array() && given.size() == 2 && given[0].is_number() && given[1].is_number()) {
    op->sigma_min = given[0].get<double>();
    op->sigma_max = given[1].get<double>();
  } else {
    return args.Error("sigma must be a number or [min, max], not " + given.dump());
  }
  if (!(op->sigma_min > 0 && op->sigma_min <= op->sigma_max && op->sigma_max <= 1e6)) {
    return args.Error("sigma must be positive, with min <= max, not " + given.dump());
  }
  args.Record("sigma", nlohmann::json::array({op->sigma_min, op->sigma_max}));
  return std::shared_ptr<const ImageOp>(op);
}

}  // namespace nostall
