// A spec's "detection" object read and checked (detect.h).
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "common/json_fields.h"
#include "detect/detect.h"
#include "ops/op.h"

namespace nostall::detect {
namespace {

using json = nlohmann::json;

// The multi-scale recipes' steps: ScaleJitter, RandomShortestSize,
// RandomResize, FixedSizeCrop.
Status ReadScaleStep(OpArgs& args, const std::string& type, Step* step) {
  if (type == "FixedSizeCrop") {
    step->kind = StepKind::kFixedSizeCrop;
    Transform size;
    NOSTALL_RETURN_IF_ERROR(ReadSize(args, false, &size));
    step->height = size.height, step->width = size.width;
    args.Record("size", {step->height, step->width});
    return args.Fill("fill", &step->fill);
  }
  if (type == "RandomResize") {
    step->kind = StepKind::kRandomResize;
    NOSTALL_RETURN_IF_ERROR(args.Int("min_size", &step->resize_min));
    NOSTALL_RETURN_IF_ERROR(args.Int("max_size", &step->resize_max));
    if (step->resize_min >= step->resize_max) return args.Error("min_size must be below max_size (drawn from [min_size, max_size))");
    return Status::OK();
  }
  const json* v = nullptr;
  if (type == "ScaleJitter") {
    step->kind = StepKind::kScaleJitter;
    NOSTALL_RETURN_IF_ERROR(args.Raw("target_size", &v));
    if (!v->is_array() || v->size() != 2 || !IsSide((*v)[0]) || !IsSide((*v)[1])) {
      return args.Error("target_size must be [height, width], each in [1, " + std::to_string(kMaxSide) + "], not " + Shown(*v));
    }
    step->target_h = (*v)[0].get<int>(), step->target_w = (*v)[1].get<int>();
    args.Record("target_size", *v);
    NOSTALL_RETURN_IF_ERROR(args.Pair("scale_range", &step->jitter_min, &step->jitter_max));
    if (step->jitter_min > step->jitter_max) return args.Error("scale_range's first is over its second");
    return Status::OK();
  }
  step->kind = StepKind::kShortestSize;
  NOSTALL_RETURN_IF_ERROR(args.Raw("min_size", &v));
  if (IsSide(*v)) {
    step->min_sizes = {v->get<int>()};
  } else if (v->is_array() && !v->empty() && std::all_of(v->begin(), v->end(), IsSide)) {
    for (const json& s : *v) step->min_sizes.push_back(s.get<int>());
  } else {
    return args.Error("min_size must be an integer or a non-empty list of them in [1, " + std::to_string(kMaxSide) + "], not " + Shown(*v));
  }
  args.Record("min_size", step->min_sizes);
  NOSTALL_RETURN_IF_ERROR(args.Raw("max_size", &v));
  if (v != nullptr && !v->is_null()) {
    if (!IsSide(*v)) return args.Error("max_size must be an integer in [1, " + std::to_string(kMaxSide) + "] or None, not " + Shown(*v));
    step->max_size = v->get<int>();
  }
  args.Record("max_size", step->max_size > 0 ? json(step->max_size) : json());
  return Status::OK();
}

Status ReadBoxStep(const json& e, size_t i, const std::string& type, Step* step, json* resolved) {
  const OpSchema* schema = FindTransformSchema(type);
  if (schema == nullptr) return InvalidArgument("detection transform " + type + " has no schema");
  OpArgs args(e, "detection.transforms[" + std::to_string(i) + "] (" + type + "): ", *schema);
  step->name = type;
  if (type == "RandomZoomOut") {
    step->kind = StepKind::kZoomOut;
    NOSTALL_RETURN_IF_ERROR(args.Fill("fill", &step->fill));
    NOSTALL_RETURN_IF_ERROR(args.Pair("side_range", &step->side_min, &step->side_max));
    NOSTALL_RETURN_IF_ERROR(args.Double("p", &step->p));
  } else if (type == "RandomIoUCrop") {
    step->kind = StepKind::kIoUCrop;
    NOSTALL_RETURN_IF_ERROR(args.Double("min_scale", &step->min_scale));
    NOSTALL_RETURN_IF_ERROR(args.Double("max_scale", &step->max_scale));
    NOSTALL_RETURN_IF_ERROR(args.Double("min_aspect_ratio", &step->min_aspect));
    NOSTALL_RETURN_IF_ERROR(args.Double("max_aspect_ratio", &step->max_aspect));
    NOSTALL_RETURN_IF_ERROR(args.Int("trials", &step->trials));
    const json* opts = nullptr;
    NOSTALL_RETURN_IF_ERROR(args.Raw("sampler_options", &opts));
    step->options = {0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0};
    if (opts != nullptr && !opts->is_null()) {
      if (!opts->is_array() || opts->empty()) {
        return args.Error("sampler_options must be a non-empty list of numbers");
      }
      step->options.clear();
      for (const json& v : *opts) {
        if (!v.is_number() || !std::isfinite(v.get<double>())) {
          return args.Error("sampler_options must be a non-empty list of numbers");
        }
        step->options.push_back(v.get<double>());
      }
      args.Record("sampler_options", *opts);
    } else {
      args.Record("sampler_options", nullptr);
    }
    if (step->min_scale > step->max_scale) return args.Error("min_scale is over max_scale");
    if (step->min_aspect > step->max_aspect) return args.Error("min_aspect_ratio is over max_aspect_ratio");
  } else if (type == "ScaleJitter" || type == "RandomShortestSize" || type == "RandomResize" ||
             type == "FixedSizeCrop") {
    NOSTALL_RETURN_IF_ERROR(ReadScaleStep(args, type, step));
  } else if (type == "SanitizeBoundingBoxes") {
    step->kind = StepKind::kSanitize;
    NOSTALL_RETURN_IF_ERROR(args.Double("min_size", &step->min_size));
    NOSTALL_RETURN_IF_ERROR(args.Double("min_area", &step->min_area));
  } else {
    step->kind = StepKind::kClamp;
  }
  NOSTALL_RETURN_IF_ERROR(args.CheckNoOthers());
  *resolved = args.resolved();
  (*resolved)["type"] = type;
  return Status::OK();
}

}  // namespace

namespace {

// The step an image transform is in a detection spec (boxes and masks
// follow the geometry; an op that moves pixels otherwise is refused).
Status StepOf(const Transform& t, const std::string& where, Step* step) {
  switch (t.kind) {
    case TransformKind::kRandomResizedCrop:
      step->kind = StepKind::kResizedCrop;
      step->height = t.height, step->width = t.width;
      step->scale_min = t.scale_min, step->scale_max = t.scale_max;
      step->ratio_min = t.ratio_min, step->ratio_max = t.ratio_max;
      break;
    case TransformKind::kResize:
      step->kind = StepKind::kResize;
      step->height = t.height, step->width = t.width;
      step->short_side = t.short_side, step->max_size = t.max_size;
      break;
    case TransformKind::kCenterCrop:
      step->kind = StepKind::kCenterCrop;
      step->height = t.height, step->width = t.width;
      break;
    case TransformKind::kRandomHorizontalFlip:
      step->kind = StepKind::kHFlip;
      step->p = t.p;
      break;
    case TransformKind::kNormalize:
      step->kind = StepKind::kNormalize;
      break;
    case TransformKind::kOp:
      if (t.op_name == "RandomVerticalFlip") {
        step->kind = StepKind::kVFlip;
        step->p = json::parse(t.op_args).value("p", 0.5);
      } else if (SchemaOf(t).moves_pixels) {
        return InvalidArgument(where + " (" + t.op_name +
                               "): it moves pixels, and boxes and masks do not follow it in a "
                               "detection spec; use RandomZoomOut, RandomIoUCrop, "
                               "RandomResizedCrop, Resize, CenterCrop or the flips");
      } else {
        step->kind = StepKind::kPixelOp;
      }
      break;
  }
  return Status::OK();
}

// The output size the steps end at (0 x 0: each sample its own), and a
// bound on each side of it (0: none; the same as the size when fixed).
void OutputSize(const std::vector<Step>& steps, int* h, int* w, int64_t* bound_h, int64_t* bound_w) {
  *h = *w = 0;
  *bound_h = *bound_w = 0;
  auto bound = [&](double bh, double bw) {
    *bound_h = static_cast<int64_t>(std::ceil(bh));
    *bound_w = static_cast<int64_t>(std::ceil(bw));
  };
  for (const Step& s : steps) {
    if (s.kind == StepKind::kResizedCrop || s.kind == StepKind::kCenterCrop ||
        s.kind == StepKind::kFixedSizeCrop || (s.kind == StepKind::kResize && s.short_side <= 0)) {
      *h = s.height, *w = s.width;
      bound(s.height, s.width);
      continue;
    }
    if (s.kind != StepKind::kResize && s.kind != StepKind::kZoomOut && s.kind != StepKind::kScaleJitter &&
        s.kind != StepKind::kShortestSize && s.kind != StepKind::kRandomResize) {
      continue;  // (an IoU crop or a flip: within what came before)
    }
    *h = *w = 0;
    if ((s.kind == StepKind::kResize || s.kind == StepKind::kShortestSize) && s.max_size > 0) {
      bound(s.max_size, s.max_size);  // the longer side, either way round
    } else if (s.kind == StepKind::kScaleJitter) {
      // (The height is scaled to target_size[1] at most, the width to [0]:
      // v2's pairing, geometry.cc; one pixel more for float32's rounding.)
      bound(s.target_w * s.jitter_max + 1, s.target_h * s.jitter_max + 1);
    } else if (s.kind == StepKind::kZoomOut && *bound_h > 0) {
      bound(static_cast<double>(*bound_h) * s.side_max, static_cast<double>(*bound_w) * s.side_max);
    } else {
      *bound_h = *bound_w = 0;
    }
  }
}

// The rules every transform list keeps (ops/order.cc); a step of its own
// (the box steps) is checked by its role alone.
Status CheckRules(const Spec& spec, const PrepSpec& prep) {
  std::vector<ListEntry> entries;
  for (const Step& s : spec.steps) {
    const bool own = IsBoxTransform(s.name);
    entries.push_back({own ? nullptr : &s.transform, FindTransformSchema(s.name)});
  }
  return CheckTransformList(
      entries, prep.dtype, prep.channels(), /*geometry_first=*/false,
      [](size_t i) { return "detection.transforms[" + std::to_string(i) + "]: "; });
}

// RandomZoomOut and FixedSizeCrop paint the canvas outside the image: one
// colour for all of it.
Status CheckOneFill(const Spec& spec) {
  const Step* first = nullptr;
  for (const Step& s : spec.steps) {
    if (s.kind != StepKind::kZoomOut && s.kind != StepKind::kFixedSizeCrop) continue;
    if (first != nullptr && s.fill != first->fill) {
      return InvalidArgument("detection.transforms: " + first->name + " and " + s.name +
                             " paint one canvas: give them the same fill");
    }
    if (first == nullptr) first = &s;
  }
  return Status::OK();
}

}  // namespace

Result<std::shared_ptr<const Spec>> SpecFromJson(const json& j, const PrepSpec& prep, bool fixed) {
  if (!j.is_object()) {
    return InvalidArgument("\"detection\" must be an object {\"transforms\": [...], \"box_format\": "
                           "\"XYXY\", \"masks\": false}, not " + Shown(j));
  }
  NOSTALL_RETURN_IF_ERROR(CheckKeys(j, "\"detection\"", {"transforms", "box_format", "masks", "size_divisible"}));
  auto spec = std::make_shared<Spec>();
  std::string format = "XYXY";
  NOSTALL_RETURN_IF_ERROR(GetString(j, "detection.", "box_format", &format));
  Result<annotations::BoxFormat> f = annotations::BoxFormatFromName(format);
  if (!f.ok()) return InvalidArgument("detection.box_format: " + f.status().message());
  spec->box_format = *f;
  NOSTALL_RETURN_IF_ERROR(GetBool(j, "detection.", "masks", &spec->masks));
  if (j.contains("size_divisible")) {
    const json& d = j["size_divisible"];
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > 1024) {
      return InvalidArgument("detection.size_divisible must be an integer from 1 to 1024, not " + Shown(d));
    }
    spec->size_divisible = d.get<int>();
  }
  const json list = j.value("transforms", json::array());
  if (!list.is_array()) return InvalidArgument("detection.transforms must be a list");
  json resolved = json::array();
  for (size_t i = 0; i < list.size(); ++i) {
    const json& e = list[i];
    const std::string where = "detection.transforms[" + std::to_string(i) + "]";
    if (!e.is_object() || !e.contains("type") || !e["type"].is_string()) {
      return InvalidArgument(where + " must be an object with a \"type\", not " + Shown(e));
    }
    const std::string type = e["type"].get<std::string>();
    Step step;
    json r;
    if (IsBoxTransform(type)) {
      NOSTALL_RETURN_IF_ERROR(ReadBoxStep(e, i, type, &step, &r));
    } else {
      NOSTALL_ASSIGN_OR_RETURN(Transform t, TransformFromJson(e, i));
      r = TransformToJson(t);
      step.name = type;
      NOSTALL_RETURN_IF_ERROR(StepOf(t, where, &step));
      step.transform = t;
    }
    step.moves_pixels = FindTransformSchema(type)->moves_pixels;
    resolved.push_back(r);
    spec->steps.push_back(std::move(step));
  }
  // The output size: one for every sample, or a bound on each side, which
  // a loader's batch needs (its samples padded per batch to their largest).
  int h = 0, w = 0;
  int64_t bound_h = 0, bound_w = 0;
  OutputSize(spec->steps, &h, &w, &bound_h, &bound_w);
  if (fixed && (h <= 0 || w <= 0)) {
    if (bound_h <= 0 || bound_w <= 0) {
      return InvalidArgument(
          "detection.transforms must bound the size of every sample, for the batch's memory: give "
          "RandomShortestSize or Resize(int) a max_size (the longer side at most), or end the geometry "
          "with Resize((h, w)), RandomResizedCrop, CenterCrop or FixedSizeCrop (RandomResize and a "
          "Resize(int) without max_size bound no side)");
    }
    const int64_t m = spec->size_divisible;
    bound_h = (bound_h + m - 1) / m * m;
    bound_w = (bound_w + m - 1) / m * m;
    if (bound_h > kMaxSide || bound_w > kMaxSide) {
      return InvalidArgument("detection.transforms bound a sample to " + std::to_string(bound_w) + "x" +
                             std::to_string(bound_h) + ", over the largest side of " + std::to_string(kMaxSide));
    }
    spec->ragged = true;
    h = static_cast<int>(bound_h);
    w = static_cast<int>(bound_w);
  }
  spec->out_h = h;
  spec->out_w = w;
  NOSTALL_RETURN_IF_ERROR(CheckRules(*spec, prep));
  NOSTALL_RETURN_IF_ERROR(CheckOneFill(*spec));
  spec->resolved = {{"transforms", resolved},
                    {"box_format", annotations::BoxFormatName(spec->box_format)},
                    {"masks", spec->masks}};
  if (j.contains("size_divisible")) spec->resolved["size_divisible"] = spec->size_divisible;
  return std::shared_ptr<const Spec>(std::move(spec));
}

size_t TargetsRoom(const Spec& spec, uint32_t max_count, int out_h, int out_w) {
  return annotations::OutputBytes(max_count, spec.masks ? static_cast<uint32_t>(out_h) : 0,
                                  spec.masks ? static_cast<uint32_t>(out_w) : 0);
}

}  // namespace nostall::detect
