// The rules every transform list keeps, image or detection (op.h,
// CheckTransformList): one place, read from each transform's schema role.
#include <string>

#include "ops/op.h"

namespace nostall {

Status CheckTransformList(const std::vector<ListEntry>& list, DType dtype, int channels,
                          bool geometry_first, const std::function<std::string(size_t)>& where) {
  int first_pixel_op = -1, first_tensor_op = -1, normalize_at = -1;
  auto name = [&](int i) { return list[i].schema->name; };
  for (size_t i = 0; i < list.size(); ++i) {
    const OpSchema& schema = *list[i].schema;
    const Transform* t = list[i].transform;
    const std::string at = where(i);
    // Crops and resizes fix the region decoded and resampled once, before
    // any pixel op runs (flips are applied where they stand).
    if (geometry_first && first_pixel_op >= 0 && schema.role == OpRole::kGeometry &&
        schema.name != "RandomHorizontalFlip") {
      return InvalidArgument(at + "crops and resizes must come before the pixel ops (" +
                             name(first_pixel_op) + " is transform #" +
                             std::to_string(first_pixel_op) + ")");
    }
    const bool on_pixels = schema.role == OpRole::kGeometry || schema.role == OpRole::kPixels;
    if (on_pixels && (normalize_at >= 0 || first_tensor_op >= 0)) {
      return InvalidArgument(at + schema.name + " must come before " +
                             name(normalize_at >= 0 ? normalize_at : first_tensor_op) +
                             ", which works on the tensor");
    }
    switch (schema.role) {
      case OpRole::kNormalize:
        if (first_tensor_op >= 0) {
          return InvalidArgument(at + "Normalize must come before " + name(first_tensor_op) +
                                 " (as in torchvision, it erases the normalised tensor)");
        }
        if (normalize_at >= 0) return InvalidArgument(at + "Normalize is given twice");
        normalize_at = static_cast<int>(i);
        if (t->mean.size() != static_cast<size_t>(channels) || t->std.size() != t->mean.size()) {
          return InvalidArgument(at + "mean and std need " + std::to_string(channels) +
                                 " values for " + (channels == 3 ? "RGB" : "grayscale"));
        }
        for (double s : t->std) {
          if (!(s > 0)) return InvalidArgument(at + "std must be positive");
        }
        if (dtype != DType::kFloat32) return InvalidArgument(at + "Normalize needs dtype float32");
        break;
      case OpRole::kTensor:
        if (first_tensor_op < 0) first_tensor_op = static_cast<int>(i);
        break;
      case OpRole::kPixels:
        if (first_pixel_op < 0) first_pixel_op = static_cast<int>(i);
        break;
      case OpRole::kGeometry:
      case OpRole::kBoxes:
        break;
      case OpRole::kAudioDecode:
      case OpRole::kWaveform:
      case OpRole::kFeatures:
      case OpRole::kSpectrum:
        return InvalidArgument(at + schema.name + " is an audio transform: give it in the "
                               "spec's \"audio\" list (transforms={\"audio\": [...]})");
    }
    if (t != nullptr && t->kind == TransformKind::kOp) {
      NOSTALL_RETURN_IF_ERROR(CheckOp(*t, at, dtype, channels));
    }
  }
  return Status::OK();
}

// An op: created, given the dtype and the channels it needs.
Status CheckOp(const Transform& t, const std::string& where, DType dtype, int channels) {
  if (!t.op) return InvalidArgument(where + "op " + t.op_name + " was not created");
  if (dtype != DType::kFloat32 && !t.op->needs_float32().empty()) {
    return InvalidArgument(where + t.op_name + ": " + t.op->needs_float32());
  }
  if (t.op->output_channels() != 0 && t.op->output_channels() != channels) {
    return InvalidArgument(
        where + t.op_name + ": num_output_channels=" +
        std::to_string(t.op->output_channels()) + " but mode=\"" +
        (channels == 1 ? "L" : "RGB") + "\" gives " + std::to_string(channels) +
        (channels == 1 ? " channel" : " channels") +
        (t.op->output_channels() == 1
             ? "; load with mode=\"L\" for one channel, or num_output_channels=3 for gray RGB"
             : "; use num_output_channels=1 with mode=\"L\""));
  }
  return Status::OK();
}

}  // namespace nostall
