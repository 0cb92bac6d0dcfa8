// The geometry of one detection sample (detect.h): the steps' draws and
// their rules for boxes, on a canvas that keeps where it lies in the source
// image (an affine map: the image is decoded and resampled once), and each
// axis's index map for masks. render.cc makes the image from it, pipeline.cc
// the targets.
#ifndef NOSTALL_DETECT_GEOMETRY_H_
#define NOSTALL_DETECT_GEOMETRY_H_

#include <vector>

#include <nlohmann/json.hpp>

#include "annotations/targets.h"
#include "common/sample_key.h"
#include "detect/detect.h"
#include "nostall/status.h"

namespace nostall::detect {

// An index map of one axis, output index to input index, as one step makes
// it (for masks, sampled nearest).
struct AxisOp {
  enum Kind { kShift, kFlip, kResize } kind;
  int shift = 0;  // kShift: in = out + shift
  int in_size = 0, out_size = 0;
};

struct Box {
  float v[4];
};

// The sample as the steps leave it: the canvas (the current image's size),
// where the canvas lies in the source, and the boxes in canvas pixels.
struct State {
  int cw = 0, ch = 0;
  double ax = 1, bx = 0, ay = 1, by = 0;  // source x = ax * u + bx, y = ay * v + by
  std::vector<Box> boxes;
  std::vector<int> kept;  // each box's index in the input
  std::vector<AxisOp> xops, yops;
  int first_geometry = -1;  // the first geometric step (pixel ops before it run on the source)
  // The canvas was padded (or cropped beyond itself) after its last resize:
  // the padding is whole output pixels, and the image is resampled alone
  // into its place (v2 resizes before it pads), not together with the fill.
  bool padded_after_resize = false;
};

// Each step's draws (from the sample's stream) and rules, in order, on an
// image of width x height with the targets `t`; `trace` (may be null) gets
// what each step drew.
Status RunGeometry(const Spec& spec, int width, int height, const annotations::Targets& t,
                   const SampleKey& key, State* s, nlohmann::json* trace);

// Output index -> source index through every step of one axis, -1 where the
// output lies outside the source (padding).
std::vector<int> IndexMap(const std::vector<AxisOp>& ops, int out_size);

}  // namespace nostall::detect

#endif  // NOSTALL_DETECT_GEOMETRY_H_
