// RandomRotation and RandomAffine (torchvision's get_params and F.rotate /
// F.affine on PIL images; no expand: the batch's size is fixed).
#include <cmath>

#include "kernels/functional.h"
#include "ops/motion.h"
#include "ops/op.h"

namespace nostall {
namespace {

Status Degrees(OpArgs& args, const char* key, double* lo, double* hi) {
  const nlohmann::json* v = nullptr;
  NOSTALL_RETURN_IF_ERROR(args.Raw(key, &v));  // required: never null here
  *lo = *hi = 0;
  if (v->is_number()) {
    const double d = v->get<double>();
    if (!(d >= 0) || !std::isfinite(d)) {
      return args.Error(std::string(key) + " as a single number must be finite and non-negative");
    }
    *lo = -d;
    *hi = d;
  } else if (v->is_array() && v->size() == 2 && (*v)[0].is_number() && (*v)[1].is_number()) {
    *lo = (*v)[0].get<double>();
    *hi = (*v)[1].get<double>();
    if (!std::isfinite(*lo) || !std::isfinite(*hi)) {
      return args.Error(std::string(key) + " must be finite, not " + v->dump());
    }
    if (!(*lo <= *hi)) return args.Error(std::string(key) + " must be [min, max] with min <= max");
  } else {
    return args.Error(std::string(key) + " must be a number or [min, max], not " + v->dump());
  }
  args.Record(key, nlohmann::json::array({*lo, *hi}));
  return Status::OK();
}

Status Center(OpArgs& args, bool* has, double center[2]) {
  const nlohmann::json* v = nullptr;
  NOSTALL_RETURN_IF_ERROR(args.Raw("center", &v));
  *has = false;
  if (v == nullptr) {
    args.Record("center", nullptr);
    return Status::OK();
  }
  if (!(v->is_array() && v->size() == 2 && (*v)[0].is_number() && (*v)[1].is_number())) {
    return args.Error("center must be [x, y] in pixels, not " + v->dump());
  }
  center[0] = (*v)[0].get<double>();
  center[1] = (*v)[1].get<double>();
  if (!std::isfinite(center[0]) || !std::isfinite(center[1])) {
    return args.Error("center must be finite, not " + v->dump());
  }
  *has = true;
  args.Record("center", *v);
  return Status::OK();
}

ArgSchema DegreesArg(const char* doc) {
  return Required(AnyArg("degrees", nullptr, "float | tuple[float, float]", doc));
}

ArgSchema CenterArg() {
  return AnyArg("center", nullptr, "tuple[float, float] | None",
                "(x, y) in pixels to turn about (None: the image's middle)");
}

ArgSchema InterpolationArg() {
  return ChoiceArg("interpolation", "nearest", {"nearest", "bilinear"},
                   "NEAREST (the default) or BILINEAR");
}

ArgSchema FillArgument() {
  return FillArg("fill", 0, "the area the map uncovers: a number or one per channel, 0-255");
}

class RandomRotationOp : public ImageOp {
 public:
  double lo = 0, hi = 0, center[2] = {0, 0};
  bool has_center = false, bilinear = false;
  std::vector<double> fill;

  void Apply(const ImageView& img, Philox& rng, OpScratch& scratch,
             nlohmann::json* trace) const override {
    const double angle = rng.Uniform(lo, hi);
    if (trace) trace->push_back({{"op", "RandomRotation"}, {"angle", angle}});
    scratch.Moved(RotationMotion(img.w, img.h, angle, has_center ? center : nullptr));
    if (img.data) Rotate(img, angle, has_center ? center : nullptr, bilinear, fill, scratch);
  }
};

class RandomAffineOp : public ImageOp {
 public:
  double deg_lo = 0, deg_hi = 0;
  bool has_translate = false, has_scale = false, has_center = false, bilinear = false;
  double translate[2] = {0, 0}, scale_lo = 1, scale_hi = 1, center[2] = {0, 0};
  std::vector<double> shear;  // 0, 2 or 4 values: x range, then y range
  std::vector<double> fill;

  void Apply(const ImageView& img, Philox& rng, OpScratch& scratch,
             nlohmann::json* trace) const override {
    const double angle = rng.Uniform(deg_lo, deg_hi);
    double tx = 0, ty = 0;
    if (has_translate) {
      const double max_dx = translate[0] * img.w, max_dy = translate[1] * img.h;
      tx = std::nearbyint(rng.Uniform(-max_dx, max_dx));
      ty = std::nearbyint(rng.Uniform(-max_dy, max_dy));
    }
    const double scale = has_scale ? rng.Uniform(scale_lo, scale_hi) : 1.0;
    double sx = 0, sy = 0;
    if (shear.size() >= 2) sx = rng.Uniform(shear[0], shear[1]);
    if (shear.size() == 4) sy = rng.Uniform(shear[2], shear[3]);
    if (trace) {
      trace->push_back({{"op", "RandomAffine"}, {"angle", angle}, {"translate", {tx, ty}},
                        {"scale", scale}, {"shear", {sx, sy}}});
    }
    double m[6];
    InverseAffineMatrix(has_center ? center[0] : img.w * 0.5, has_center ? center[1] : img.h * 0.5,
                        angle, tx, ty, scale, sx, sy, m);
    scratch.Moved(ForwardOf(m));
    if (img.data == nullptr) return;
    AffineTransform(img, m, bilinear, fill, scratch);
  }
};

}  // namespace

const OpSchema& RandomRotationSchema() {
  static const OpSchema s = {
      "RandomRotation",
      "Rotate by an angle drawn uniformly per sample, as torchvision's RandomRotation.",
      {DegreesArg("d: angles in [-d, d]; (lo, hi): that range"), InterpolationArg(),
       AcceptedOnly(BoolArg("expand", false,
                            "expand=True changes the image size, and a batch has one size: crop "
                            "or resize after rotating instead")),
       CenterArg(), FillArgument()},
      OpRole::kPixels, true};
  return s;
}

const OpSchema& RandomAffineSchema() {
  static const OpSchema s = {
      "RandomAffine",
      "Rotation, translation, scale and shear drawn per sample, as torchvision's RandomAffine.",
      {DegreesArg("rotation: d gives [-d, d]; (lo, hi) that range"),
       AnyArg("translate", nullptr, "tuple[float, float] | None",
              "(a, b): largest shift as fractions of the width and height, in [0, 1]"),
       AnyArg("scale", nullptr, "tuple[float, float] | None", "(lo, hi): the scale's range"),
       AnyArg("shear", nullptr, "float | Sequence[float] | None",
              "degrees: s, (lo, hi) along x, or (xlo, xhi, ylo, yhi)"),
       InterpolationArg(), FillArgument(), CenterArg()},
      OpRole::kPixels, true};
  return s;
}

Result<std::shared_ptr<const ImageOp>> MakeRandomRotation(OpArgs& args) {
  auto op = std::make_shared<RandomRotationOp>();
  NOSTALL_RETURN_IF_ERROR(Degrees(args, "degrees", &op->lo, &op->hi));
  NOSTALL_RETURN_IF_ERROR(args.Interpolation("interpolation", &op->bilinear));
  NOSTALL_RETURN_IF_ERROR(Center(args, &op->has_center, op->center));
  NOSTALL_RETURN_IF_ERROR(args.Fill("fill", &op->fill));
  return std::shared_ptr<const ImageOp>(op);
}

Result<std::shared_ptr<const ImageOp>> MakeRandomAffine(OpArgs& args) {
  auto op = std::make_shared<RandomAffineOp>();
  NOSTALL_RETURN_IF_ERROR(Degrees(args, "degrees", &op->deg_lo, &op->deg_hi));
  const nlohmann::json* t = nullptr;
  NOSTALL_RETURN_IF_ERROR(args.Raw("translate", &t));
  if (t != nullptr) {
    if (!(t->is_array() && t->size() == 2 && (*t)[0].is_number() && (*t)[1].is_number() &&
          (*t)[0].get<double>() >= 0 && (*t)[0].get<double>() <= 1 && (*t)[1].get<double>() >= 0 &&
          (*t)[1].get<double>() <= 1)) {
      return args.Error("translate must be [a, b] with values in [0, 1], not " + t->dump());
    }
    op->has_translate = true;
    op->translate[0] = (*t)[0].get<double>();
    op->translate[1] = (*t)[1].get<double>();
    args.Record("translate", *t);
  } else {
    args.Record("translate", nullptr);
  }
  const nlohmann::json* sc = nullptr;
  NOSTALL_RETURN_IF_ERROR(args.Raw("scale", &sc));
  if (sc != nullptr) {
    if (!(sc->is_array() && sc->size() == 2 && (*sc)[0].is_number() && (*sc)[1].is_number() &&
          (*sc)[0].get<double>() >= 1e-6 && (*sc)[0].get<double>() <= (*sc)[1].get<double>() &&
          (*sc)[1].get<double>() <= 1e6)) {
      return args.Error("scale must be [min, max] with 1e-06 <= min <= max <= 1e6, not " +
                        sc->dump());
    }
    op->scale_lo = (*sc)[0].get<double>();
    op->scale_hi = (*sc)[1].get<double>();
    op->has_scale = true;
    args.Record("scale", nlohmann::json::array({op->scale_lo, op->scale_hi}));
  } else {
    args.Record("scale", nullptr);
  }
  const nlohmann::json* s = nullptr;
  NOSTALL_RETURN_IF_ERROR(args.Raw("shear", &s));
  if (s != nullptr) {
    if (s->is_number()) {
      if (!(s->get<double>() >= 0) || !std::isfinite(s->get<double>())) {
        return args.Error("shear as a single number must be finite and non-negative");
      }
      op->shear = {-s->get<double>(), s->get<double>()};
    } else if (s->is_array() && (s->size() == 2 || s->size() == 4)) {
      for (const auto& x : *s) {
        if (!x.is_number() || !std::isfinite(x.get<double>())) {
          return args.Error("shear must hold finite numbers, not " + s->dump());
        }
        op->shear.push_back(x.get<double>());
      }
    } else {
      return args.Error("shear must be a number, [min, max] or [xmin, xmax, ymin, ymax], not " +
                        s->dump());
    }
    args.Record("shear", op->shear);
  } else {
    args.Record("shear", nullptr);
  }
  NOSTALL_RETURN_IF_ERROR(args.Interpolation("interpolation", &op->bilinear));
  NOSTALL_RETURN_IF_ERROR(args.Fill("fill", &op->fill));
  NOSTALL_RETURN_IF_ERROR(Center(args, &op->has_center, op->center));
  return std::shared_ptr<const ImageOp>(op);
}

}  // namespace nostall
