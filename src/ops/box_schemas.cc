// The schemas of the transforms that need boxes: torchvision.transforms.v2's
// RandomZoomOut, RandomIoUCrop, SanitizeBoundingBoxes, ClampBoundingBoxes,
// ScaleJitter, RandomShortestSize and RandomResize, and the detection
// references' FixedSizeCrop, with their names and defaults. They run in a detection
// spec only (src/detect reads them); declared here so the Python classes
// and the docs' argument tables come from one list with every other
// transform's.
#include "ops/op.h"

namespace nostall {

std::vector<OpSchema> BoxSchemas() {
  return {
      {"RandomZoomOut",
       "With probability p, place the image on a canvas side_range times its size (drawn per "
       "sample), at a random place, filled with fill (SSD's zoom out); boxes move with it. Masks "
       "are padded with 0. Detection specs only.",
       {FillArg("fill", 0, "the canvas's colour: a number or one per channel, 0-255"),
        PairArg("side_range", 1.0, 4.0, 1.0, 64.0, "the canvas's side as a multiple of the image's"),
        FloatArg("p", 0.5, 0, 1, "the probability of zooming out")},
       OpRole::kGeometry, true, true},
      {"RandomIoUCrop",
       "SSD's random crop: a minimum IoU drawn from sampler_options (1.0 or more: no crop), then up "
       "to trials crops of min_scale..max_scale of each side until one holds a box centre and "
       "overlaps such a box by that IoU; boxes whose centre it leaves out are zeroed, for "
       "SanitizeBoundingBoxes to remove. Detection specs only.",
       {FloatArg("min_scale", 0.3, 0, 1, "the crop's smallest side, as a fraction of the image's"),
        FloatArg("max_scale", 1.0, 0, 1, "the crop's largest side, as a fraction of the image's"),
        FloatArg("min_aspect_ratio", 0.5, 0, 1e6, "the crop's smallest width / height"),
        FloatArg("max_aspect_ratio", 2.0, 0, 1e6, "the crop's largest width / height"),
        AnyArg("sampler_options", nullptr, "Sequence[float] | None",
               "the minimum IoUs drawn from (None: [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0])"),
        IntArg("trials", 40, 1, 100000, "crops tried per drawn IoU")},
       OpRole::kGeometry, true, true},
      {"SanitizeBoundingBoxes",
       "Remove the boxes (with their labels and masks) narrower or lower than min_size, of less "
       "area than min_area, or outside the image, as v2's. Detection specs only.",
       {FloatArg("min_size", 1.0, 0, 1e9, "the smallest width and height kept"),
        FloatArg("min_area", 1.0, 0, 1e18, "the smallest area kept"),
        AcceptedOnly(AnyArg("labels_getter", "default", "str",
                            "'default' only: the labels are the annotations' own"))},
       OpRole::kBoxes, false, true},
      {"ClampBoundingBoxes", "Clamp the boxes to the image. Detection specs only.", {},
       OpRole::kBoxes, false, true},
      // The multi-scale and large-scale-jitter recipes (torchvision's detection
      // references: multiscale, lsj; DETR's multi-scale training).
      {"ScaleJitter",
       "Large scale jitter (v2's, the Copy-Paste recipe): resize by min(target_size[1] / height, "
       "target_size[0] / width) times a scale drawn from scale_range; boxes and masks follow. "
       "Follow it with FixedSizeCrop for batches of one size (the lsj recipe). Detection specs only.",
       {Required(AnyArg("target_size", nullptr, "tuple[int, int]", "the base size (height, width)")),
        PairArg("scale_range", 0.1, 2.0, 1e-3, 64.0, "the scale's range, drawn uniformly"), Bilinear(),
        Antialias()},
       OpRole::kGeometry, true, true},
      {"RandomShortestSize",
       "Resize so the shorter side is one of min_size (drawn per sample) and the longer at most "
       "max_size; boxes and masks follow (v2's; Faster and Mask R-CNN's multi-scale training). "
       "Detection specs only.",
       {Required(AnyArg("min_size", nullptr, "int | Sequence[int]", "the shorter side's choices")),
        AnyArg("max_size", nullptr, "int | None", "a cap on the longer side"), Bilinear(), Antialias()},
       OpRole::kGeometry, true, true},
      {"RandomResize",
       "Resize the shorter side to a size drawn from [min_size, max_size) (v2's; DETR's "
       "multi-scale training); boxes and masks follow. Detection specs and video lists (a short "
       "side per clip: PyTorchVideo's RandomShortSideScale(lo, hi) is RandomResize(lo, hi + 1)).",
       {Required(IntArg("min_size", 1, 1, 1 << 16, "the smallest shorter side")),
        Required(IntArg("max_size", 2, 2, 1 << 16, "one past the largest shorter side")), Bilinear(),
        Antialias()},
       OpRole::kGeometry, true, true},
      {"FixedSizeCrop",
       "Crop to size at one random place (a single draw for both axes) where the image is larger, "
       "then pad the right and bottom with fill where it is smaller; boxes are shifted and clamped, "
       "those left empty removed with their labels and masks (torchvision's detection references' "
       "FixedSizeCrop, the lsj recipe's). Masks are padded with 0. Detection specs only.",
       {SizeArg("an int (square) or (height, width)"),
        FillArg("fill", 0, "the padding's colour: a number or one per channel, 0-255"),
        AcceptedOnly(ChoiceArg("padding_mode", "constant", {"constant"}, "constant only"))},
       OpRole::kGeometry, true, true},
  };
}

bool IsBoxTransform(const std::string& type) {
  const OpSchema* schema = FindTransformSchema(type);
  return schema != nullptr && schema->needs_boxes;
}

}  // namespace nostall
