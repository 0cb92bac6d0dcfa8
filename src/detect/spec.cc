// A spec's "detection" object read and checked (detect.h).
#include <algorithm>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "common/json_fields.h"
#include "detect/detect.h"
#include "ops/op.h"

namespace nostall::detect {
namespace {

using json = nlohmann::json;

// Ops that move pixels: the boxes would have to follow them, which they
// do not yet.
const std::set<std::string>& MovingOps() {
  static const std::set<std::string> s = {"RandomRotation", "RandomAffine", "TrivialAugmentWide",
                                          "RandAugment", "AutoAugment"};
  return s;
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

bool Geometric(StepKind k) {
  return k == StepKind::kZoomOut || k == StepKind::kIoUCrop || k == StepKind::kResizedCrop ||
         k == StepKind::kResize || k == StepKind::kCenterCrop || k == StepKind::kHFlip ||
         k == StepKind::kVFlip;
}

}  // namespace

Result<std::shared_ptr<const Spec>> SpecFromJson(const json& j, const PrepSpec& prep, bool fixed) {
  if (!j.is_object()) {
    return InvalidArgument("\"detection\" must be an object {\"transforms\": [...], \"box_format\": "
                           "\"XYXY\", \"masks\": false}, not " + Shown(j));
  }
  NOSTALL_RETURN_IF_ERROR(CheckKeys(j, "\"detection\"", {"transforms", "box_format", "masks"}));
  auto spec = std::make_shared<Spec>();
  std::string format = "XYXY";
  NOSTALL_RETURN_IF_ERROR(GetString(j, "detection.", "box_format", &format));
  Result<annotations::BoxFormat> f = annotations::BoxFormatFromName(format);
  if (!f.ok()) return InvalidArgument("detection.box_format: " + f.status().message());
  spec->box_format = *f;
  NOSTALL_RETURN_IF_ERROR(GetBool(j, "detection.", "masks", &spec->masks));
  const json list = j.value("transforms", json::array());
  if (!list.is_array()) return InvalidArgument("detection.transforms must be a list");
  json resolved = json::array();
  int normalize_at = -1, output_op_at = -1;
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
      switch (t.kind) {
        case TransformKind::kRandomResizedCrop:
          step.kind = StepKind::kResizedCrop;
          step.height = t.height, step.width = t.width;
          step.scale_min = t.scale_min, step.scale_max = t.scale_max;
          step.ratio_min = t.ratio_min, step.ratio_max = t.ratio_max;
          break;
        case TransformKind::kResize:
          step.kind = StepKind::kResize;
          step.height = t.height, step.width = t.width;
          step.short_side = t.short_side, step.max_size = t.max_size;
          break;
        case TransformKind::kCenterCrop:
          step.kind = StepKind::kCenterCrop;
          step.height = t.height, step.width = t.width;
          break;
        case TransformKind::kRandomHorizontalFlip:
          step.kind = StepKind::kHFlip;
          step.p = t.p;
          break;
        case TransformKind::kNormalize:
          step.kind = StepKind::kNormalize;
          break;
        case TransformKind::kOp:
          if (MovingOps().count(t.op_name) != 0) {
            return InvalidArgument(where + " (" + t.op_name +
                                   "): it moves pixels, and boxes and masks do not follow it in a "
                                   "detection spec; use RandomZoomOut, RandomIoUCrop, "
                                   "RandomResizedCrop, Resize, CenterCrop or the flips");
          }
          if (t.op_name == "RandomVerticalFlip") {
            step.kind = StepKind::kVFlip;
            step.p = json::parse(t.op_args).value("p", 0.5);
          } else {
            step.kind = StepKind::kPixelOp;
          }
          break;
      }
      step.transform = t;
    }
    if (step.kind == StepKind::kNormalize) {
      if (normalize_at >= 0) return InvalidArgument(where + ": Normalize is given twice");
      normalize_at = static_cast<int>(i);
    }
    const bool on_output = step.kind == StepKind::kPixelOp && step.transform.op->on_output();
    if (on_output && output_op_at < 0) output_op_at = static_cast<int>(i);
    if (normalize_at >= 0 && static_cast<int>(i) > normalize_at && !on_output &&
        step.kind != StepKind::kSanitize && step.kind != StepKind::kClamp) {
      return InvalidArgument(where + " (" + type + ") must come before Normalize, which gives the "
                             "float32 tensor");
    }
    if (output_op_at >= 0 && static_cast<int>(i) > output_op_at && (Geometric(step.kind) ||
        step.kind == StepKind::kNormalize || (step.kind == StepKind::kPixelOp && !on_output))) {
      return InvalidArgument(where + " (" + type + ") must come before " +
                             list[output_op_at]["type"].get<std::string>() +
                             ", which works on the tensor");
    }
    resolved.push_back(r);
    spec->steps.push_back(std::move(step));
  }
  // The output size, which the batch needs fixed.
  int h = 0, w = 0;
  for (const Step& s : spec->steps) {
    if (s.kind == StepKind::kResizedCrop || s.kind == StepKind::kCenterCrop ||
        (s.kind == StepKind::kResize && s.short_side <= 0)) {
      h = s.height, w = s.width;
    } else if (s.kind == StepKind::kResize || s.kind == StepKind::kZoomOut || s.kind == StepKind::kIoUCrop) {
      h = w = 0;
    }
  }
  if (fixed && (h <= 0 || w <= 0)) {
    return InvalidArgument(
        "detection.transforms must give every sample one size, for one batch tensor: end the "
        "geometry with Resize((h, w)), RandomResizedCrop or CenterCrop (after RandomZoomOut, "
        "RandomIoUCrop and any Resize(int)); batches of images of several sizes, padded, are not "
        "supported");
  }
  spec->out_h = h;
  spec->out_w = w;
  if (normalize_at >= 0 && prep.dtype != DType::kFloat32) {
    return InvalidArgument("detection: Normalize needs dtype float32");
  }
  for (const Step& s : spec->steps) {
    if (s.kind == StepKind::kNormalize &&
        (s.transform.mean.size() != static_cast<size_t>(prep.channels()) ||
         s.transform.std.size() != s.transform.mean.size())) {
      return InvalidArgument("detection: Normalize's mean and std need " +
                             std::to_string(prep.channels()) + " values");
    }
    if (s.kind == StepKind::kPixelOp) {
      if (prep.dtype != DType::kFloat32 && !s.transform.op->needs_float32().empty()) {
        return InvalidArgument("detection: " + s.name + ": " + s.transform.op->needs_float32());
      }
      if (s.transform.op->output_channels() != 0 && s.transform.op->output_channels() != prep.channels()) {
        return InvalidArgument("detection: " + s.name + " makes another channel count than mode gives");
      }
    }
  }
  spec->resolved = {{"transforms", resolved},
                    {"box_format", annotations::BoxFormatName(spec->box_format)},
                    {"masks", spec->masks}};
  return std::shared_ptr<const Spec>(std::move(spec));
}

size_t TargetsRoom(const Spec& spec, uint32_t max_count, int out_h, int out_w) {
  return annotations::OutputBytes(max_count, spec.masks ? static_cast<uint32_t>(out_h) : 0,
                                  spec.masks ? static_cast<uint32_t>(out_w) : 0);
}

}  // namespace nostall::detect
