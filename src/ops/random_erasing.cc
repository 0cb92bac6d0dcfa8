// RandomErasing(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0): on the
// laid-out tensor, after Normalize, as torchvision's: with probability p, up
// to ten tries for a box of area scale x image and aspect ratio (log-uniform)
// that fits strictly inside, placed uniformly; value 0, one per channel, or
// "random" (standard normal per element).
#include <algorithm>
#include <cmath>

#include "ops/op.h"

namespace nostall {
namespace {

class RandomErasingOp : public ImageOp {
 public:
  double p = 0.5, scale_min = 0.02, scale_max = 0.33, ratio_min = 0.3, ratio_max = 3.3;
  bool random = false;
  std::vector<double> value;  // empty: 0

  std::string needs_float32() const override {
    return random ? "value=\"random\" erases with standard normal values, which need a float32 "
                    "output (add Normalize)"
                  : "";
  }

  void ApplyOutput(const OutputView& out, Philox& rng, nlohmann::json* trace) const override {
    const bool apply = rng.Uniform() < p;
    int top = 0, left = 0, eh = 0, ew = 0;
    if (apply) {
      const double area = static_cast<double>(out.h) * out.w;
      const double log_lo = std::log(ratio_min), log_hi = std::log(ratio_max);
      for (int attempt = 0; attempt < 10; ++attempt) {
        const double erase = area * rng.Uniform(scale_min, scale_max);
        const double aspect = std::exp(rng.Uniform(log_lo, log_hi));
        const int h = static_cast<int>(std::lround(std::sqrt(erase * aspect)));
        const int w = static_cast<int>(std::lround(std::sqrt(erase / aspect)));
        if (!(h < out.h && w < out.w)) continue;
        top = static_cast<int>(rng.Between(0, out.h - h));
        left = static_cast<int>(rng.Between(0, out.w - w));
        eh = h;
        ew = w;
        break;
      }
    }
    if (trace) {
      trace->push_back({{"op", "RandomErasing"}, {"applied", apply && eh > 0},
                        {"box", {top, left, eh, ew}}});
    }
    if (out.data == nullptr || eh == 0) return;
    auto at = [&](int y, int x, int k) -> size_t {
      return out.nchw ? (static_cast<size_t>(k) * out.h + y) * out.w + x
                      : (static_cast<size_t>(y) * out.w + x) * out.c + k;
    };
    for (int y = top; y < top + eh; ++y) {
      for (int x = left; x < left + ew; ++x) {
        for (int k = 0; k < out.c; ++k) {
          double v = value.empty() ? 0.0 : value[value.size() == 1 ? 0 : k];
          if (random) v = rng.Normal();
          if (out.float32) {
            static_cast<float*>(out.data)[at(y, x, k)] = static_cast<float>(v);
          } else {
            static_cast<uint8_t*>(out.data)[at(y, x, k)] =
                static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
          }
        }
      }
    }
  }
};

}  // namespace

const OpSchema& RandomErasingSchema() {
  static const OpSchema s = {
      "RandomErasing",
      "With probability p, erase a random box of the output tensor, after Normalize, as "
      "torchvision's RandomErasing.",
      {FloatArg("p", 0.5, 0, 1, "the probability a sample is erased"),
       PairArg("scale", 0.02, 0.33, 0, 1, "the box's area, as a fraction of the image's"),
       PairArg("ratio", 0.3, 3.3, 1e-6, 1e6, "the box's aspect ratio"),
       AnyArg("value", 0, "float | Sequence[float] | str",
              "0, one value per channel, or \"random\" (normal noise; needs float32)"),
       Ignored(BoolArg("inplace", false,
                            "accepted as torchvision's; batches are written once either way"))},
      OpRole::kTensor};
  return s;
}

Result<std::shared_ptr<const ImageOp>> MakeRandomErasing(OpArgs& args) {
  auto op = std::make_shared<RandomErasingOp>();
  NOSTALL_RETURN_IF_ERROR(args.Double("p", &op->p));
  NOSTALL_RETURN_IF_ERROR(args.Pair("scale", &op->scale_min, &op->scale_max));
  NOSTALL_RETURN_IF_ERROR(args.Pair("ratio", &op->ratio_min, &op->ratio_max));
  const nlohmann::json* v = nullptr;
  NOSTALL_RETURN_IF_ERROR(args.Raw("value", &v));
  if (v != nullptr && v->is_string()) {
    if (v->get<std::string>() != "random") {
      return args.Error("value must be a number, one per channel, or \"random\", not " + v->dump());
    }
    op->random = true;
    args.Record("value", "random");
  } else if (v != nullptr) {
    if (v->is_number()) {
      op->value.push_back(v->get<double>());
    } else if (v->is_array() && (v->size() == 1 || v->size() == 3)) {
      for (const auto& x : *v) {
        if (!x.is_number()) return args.Error("value must hold numbers, not " + v->dump());
        op->value.push_back(x.get<double>());
      }
    } else {
      return args.Error("value must be a number, one per channel, or \"random\", not " + v->dump());
    }
    args.Record("value", op->value.size() == 1 ? nlohmann::json(op->value[0]) : nlohmann::json(op->value));
  } else {
    args.Record("value", 0);
  }
  return std::shared_ptr<const ImageOp>(op);
}

}  // namespace nostall
