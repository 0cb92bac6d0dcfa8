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

Result<std::shared_ptr<const ImageOp>> MakeGaussianBlur(OpArgs& args) {
  auto op = std::make_shared<GaussianBlurOp>();
  const nlohmann::json* k = args.Raw("kernel_size");
  if (k == nullptr) return args.Error("needs kernel_size (an odd integer or [x, y])");
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
  const nlohmann::json* s = args.Raw("sigma");
  if (s != nullptr && s->is_number()) {
    op->sigma_min = op->sigma_max = s->get<double>();
    if (!(op->sigma_min > 0)) return args.Error("sigma must be positive");
    args.Record("sigma", nlohmann::json::array({op->sigma_min, op->sigma_max}));
  } else {
    NOSTALL_RETURN_IF_ERROR(args.Pair("sigma", 0.1, 2.0, 1e-9, 1e6, &op->sigma_min, &op->sigma_max));
  }
  return std::shared_ptr<const ImageOp>(op);
}

}  // namespace nostall
