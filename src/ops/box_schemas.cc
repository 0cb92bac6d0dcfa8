// The schemas of the transforms that need boxes: torchvision.transforms.v2's
// RandomZoomOut, RandomIoUCrop, SanitizeBoundingBoxes and
// ClampBoundingBoxes, with v2's names and defaults. They run in a detection
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
  };
}

bool IsBoxTransform(const std::string& type) {
  const OpSchema* schema = FindTransformSchema(type);
  return schema != nullptr && schema->needs_boxes;
}

}  // namespace nostall
