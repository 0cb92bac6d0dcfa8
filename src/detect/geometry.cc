// One detection sample's geometry (geometry.h).
#include "detect/geometry.h"

#include <algorithm>
#include <cmath>

#include "common/philox.h"
#include "ops/op.h"
#include "ops/plan.h"

namespace nostall::detect {
namespace {

using json = nlohmann::json;
using annotations::Targets;

void ClampBoxes(State* s) {
  const float w = static_cast<float>(s->cw), h = static_cast<float>(s->ch);
  for (Box& b : s->boxes) {
    b.v[0] = std::clamp(b.v[0], 0.0f, w);
    b.v[2] = std::clamp(b.v[2], 0.0f, w);
    b.v[1] = std::clamp(b.v[1], 0.0f, h);
    b.v[3] = std::clamp(b.v[3], 0.0f, h);
  }
}

// v2's crop_bounding_boxes and crop: the canvas becomes [left, left + w) x
// [top, top + h) of itself (outside it: fill), boxes shifted and clamped.
void Crop(State* s, int left, int top, int w, int h) {
  for (Box& b : s->boxes) {
    b.v[0] -= static_cast<float>(left), b.v[2] -= static_cast<float>(left);
    b.v[1] -= static_cast<float>(top), b.v[3] -= static_cast<float>(top);
  }
  s->bx += s->ax * left;
  s->by += s->ay * top;
  s->xops.push_back({AxisOp::kShift, left, s->cw, w});
  s->yops.push_back({AxisOp::kShift, top, s->ch, h});
  if (left < 0 || top < 0 || left + w > s->cw || top + h > s->ch) s->padded_after_resize = true;
  s->cw = w;
  s->ch = h;
  ClampBoxes(s);
}

// v2's pad (RandomZoomOut): the canvas grows by left/top/right/bottom.
void Pad(State* s, int left, int top, int right, int bottom) {
  for (Box& b : s->boxes) {
    b.v[0] += static_cast<float>(left), b.v[2] += static_cast<float>(left);
    b.v[1] += static_cast<float>(top), b.v[3] += static_cast<float>(top);
  }
  s->bx -= s->ax * left;
  s->by -= s->ay * top;
  const int w = s->cw + left + right, h = s->ch + top + bottom;
  if (left > 0 || top > 0 || right > 0 || bottom > 0) s->padded_after_resize = true;
  s->xops.push_back({AxisOp::kShift, -left, s->cw, w});
  s->yops.push_back({AxisOp::kShift, -top, s->ch, h});
  s->cw = w;
  s->ch = h;
  ClampBoxes(s);
}

// v2's resize_bounding_boxes: scaled by the float32 ratios, not clamped.
void ResizeTo(State* s, int w, int h) {
  if (w == s->cw && h == s->ch) return;
  const float rx = static_cast<float>(static_cast<double>(w) / s->cw);
  const float ry = static_cast<float>(static_cast<double>(h) / s->ch);
  for (Box& b : s->boxes) {
    b.v[0] *= rx, b.v[2] *= rx;
    b.v[1] *= ry, b.v[3] *= ry;
  }
  s->ax *= static_cast<double>(s->cw) / w;
  s->ay *= static_cast<double>(s->ch) / h;
  s->xops.push_back({AxisOp::kResize, 0, s->cw, w});
  s->yops.push_back({AxisOp::kResize, 0, s->ch, h});
  s->padded_after_resize = false;
  s->cw = w;
  s->ch = h;
}

// v2's horizontal (axis 0) or vertical (axis 1) flip: the box's two
// coordinates on that axis mirrored and swapped.
void Flip(State* s, int axis) {
  const int size = axis == 0 ? s->cw : s->ch;
  const float extent = static_cast<float>(size);
  for (Box& b : s->boxes) {
    const float lo = b.v[axis];
    b.v[axis] = extent - b.v[axis + 2];
    b.v[axis + 2] = extent - lo;
  }
  double& a = axis == 0 ? s->ax : s->ay;
  (axis == 0 ? s->bx : s->by) += a * size;
  a = -a;
  (axis == 0 ? s->xops : s->yops).push_back({AxisOp::kFlip, 0, size, size});
}

// torchvision.ops.box_iou of one box against the crop, in float32.
float Iou(const Box& b, float l, float t, float r, float btm) {
  const float area1 = (b.v[2] - b.v[0]) * (b.v[3] - b.v[1]);
  const float area2 = (r - l) * (btm - t);
  const float w = std::max(0.0f, std::min(b.v[2], r) - std::max(b.v[0], l));
  const float h = std::max(0.0f, std::min(b.v[3], btm) - std::max(b.v[1], t));
  const float inter = w * h;
  return inter / (area1 + area2 - inter);
}

// v2's RandomZoomOut: the coin (as _RandomApplyTransform, first), then the
// canvas's size and the image's place on it.
Status ZoomOut(const Step& st, Philox& rng, State* s, json* trace) {
  if (!(rng.Uniform() < st.p)) {
    if (trace) trace->push_back({{"op", "RandomZoomOut"}, {"padding", nullptr}});
    return Status::OK();
  }
  const double r = st.side_min + rng.Uniform() * (st.side_max - st.side_min);
  if (s->cw * r * s->ch * r > static_cast<double>(int64_t{1} << 30)) {
    return DataError("RandomZoomOut would make a canvas over 2^30 pixels");
  }
  const int canvas_w = static_cast<int>(s->cw * r), canvas_h = static_cast<int>(s->ch * r);
  const int left = static_cast<int>((canvas_w - s->cw) * rng.Uniform());
  const int top = static_cast<int>((canvas_h - s->ch) * rng.Uniform());
  const int right = canvas_w - (left + s->cw), bottom = canvas_h - (top + s->ch);
  if (trace) trace->push_back({{"op", "RandomZoomOut"}, {"padding", {left, top, right, bottom}}});
  Pad(s, left, top, right, bottom);
  return Status::OK();
}

// RandomIoUCrop's get_params and transform (SSD's sampler): an option of
// minimum IoU, then up to `trials` crops of the canvas until one holds a box
// centre and overlaps some such box by that much; boxes whose centre it
// does not hold are zeroed (SanitizeBoundingBoxes removes them).
void IoUCrop(const Step& st, Philox& rng, State* s, json* trace) {
  // A sample whose boxes no crop can satisfy (none at all, say) draws
  // until the "no crop" option (1.0) comes up, as v2's `while True`; bounded
  // here, where v2 would loop for ever on sampler_options without it.
  for (int round = 0; round < 1000; ++round) {
    const double min_iou = st.options[rng.Below(st.options.size())];
    if (min_iou >= 1.0) break;
    for (int trial = 0; trial < st.trials; ++trial) {
      const double r0 = st.min_scale + (st.max_scale - st.min_scale) * rng.Uniform();
      const double r1 = st.min_scale + (st.max_scale - st.min_scale) * rng.Uniform();
      const int new_w = static_cast<int>(s->cw * r0), new_h = static_cast<int>(s->ch * r1);
      if (new_w <= 0 || new_h <= 0) continue;
      const double aspect = static_cast<double>(new_w) / new_h;
      if (!(st.min_aspect <= aspect && aspect <= st.max_aspect)) continue;
      const int left = static_cast<int>((s->cw - new_w) * rng.Uniform());
      const int top = static_cast<int>((s->ch - new_h) * rng.Uniform());
      const int right = left + new_w, bottom = top + new_h;
      std::vector<uint8_t> within(s->boxes.size(), 0);
      bool any = false;
      float best = -1;
      for (size_t k = 0; k < s->boxes.size(); ++k) {
        const Box& b = s->boxes[k];
        const float cx = 0.5f * (b.v[0] + b.v[2]), cy = 0.5f * (b.v[1] + b.v[3]);
        within[k] = left < cx && cx < right && top < cy && cy < bottom;
        if (!within[k]) continue;
        any = true;
        best = std::max(best, Iou(b, static_cast<float>(left), static_cast<float>(top),
                                  static_cast<float>(right), static_cast<float>(bottom)));
      }
      if (!any || best < min_iou) continue;
      Crop(s, left, top, new_w, new_h);
      for (size_t k = 0; k < s->boxes.size(); ++k) {
        if (!within[k]) std::fill(s->boxes[k].v, s->boxes[k].v + 4, 0.0f);
      }
      if (trace) trace->push_back({{"op", "RandomIoUCrop"}, {"crop", {top, left, new_h, new_w}}, {"min_iou", min_iou}});
      return;
    }
  }
  if (trace) trace->push_back({{"op", "RandomIoUCrop"}, {"crop", nullptr}});
}

void ResizedCrop(const Step& st, Philox& rng, State* s, json* trace) {
  // The image pipeline's draw (ops/plan.h), on the current canvas.
  const CropDraw c = DrawResizedCrop(rng, s->cw, s->ch, st.scale_min, st.scale_max, st.ratio_min, st.ratio_max);
  if (trace) trace->push_back({{"op", "RandomResizedCrop"}, {"crop", {c.top, c.left, c.h, c.w}}});
  Crop(s, c.left, c.top, c.w, c.h);
  ResizeTo(s, st.width, st.height);
}

Status Resize(const Step& st, State* s, json* trace) {
  int w = st.width, h = st.height;
  if (st.short_side > 0) NOSTALL_RETURN_IF_ERROR(ShortSideSize(s->cw, s->ch, st.short_side, st.max_size, &w, &h));
  if (trace) trace->push_back({{"op", "Resize"}, {"size", {h, w}}});
  ResizeTo(s, w, h);
  return Status::OK();
}

// v2's ScaleJitter, RandomShortestSize and RandomResize: a size drawn for
// the current canvas (in v2's arithmetic: ScaleJitter's scale and ratio in
// float32, as its tensors are), then a resize to it.
Status ScaleResize(const Step& st, Philox& rng, State* s, json* trace) {
  int w = 0, h = 0;
  json drawn;
  if (st.kind == StepKind::kScaleJitter) {
    const float scale = static_cast<float>(st.jitter_min) +
                        static_cast<float>(rng.Uniform()) * static_cast<float>(st.jitter_max - st.jitter_min);
    // target_size[1] over the height, [0] over the width: v2's own pairing.
    const double base = std::min(static_cast<double>(st.target_w) / s->ch, static_cast<double>(st.target_h) / s->cw);
    const float r = static_cast<float>(base) * scale;
    w = static_cast<int>(static_cast<float>(s->cw) * r);
    h = static_cast<int>(static_cast<float>(s->ch) * r);
    drawn = scale;
  } else if (st.kind == StepKind::kShortestSize) {
    const int side = st.min_sizes[rng.Below(st.min_sizes.size())];
    double r = static_cast<double>(side) / std::min(s->cw, s->ch);
    if (st.max_size > 0) r = std::min(r, static_cast<double>(st.max_size) / std::max(s->cw, s->ch));
    w = static_cast<int>(s->cw * r);
    h = static_cast<int>(s->ch * r);
    drawn = side;
  } else {
    const int side = st.resize_min + static_cast<int>(rng.Below(static_cast<uint64_t>(st.resize_max - st.resize_min)));
    NOSTALL_RETURN_IF_ERROR(ShortSideSize(s->cw, s->ch, side, 0, &w, &h));
    drawn = side;
  }
  if (trace) trace->push_back({{"op", st.name}, {"drawn", drawn}, {"size", {h, w}}});
  if (w < 1 || h < 1) {
    return DataError(st.name + " would make a " + std::to_string(w) + "x" + std::to_string(h) + " image of a " +
                     std::to_string(s->cw) + "x" + std::to_string(s->ch) + " one");
  }
  ResizeTo(s, w, h);
  return Status::OK();
}

// The boxes (and with them their labels and masks) that `keep` holds.
template <typename Keep>
size_t KeepBoxes(State* s, Keep keep) {
  std::vector<Box> boxes;
  std::vector<int> kept;
  for (size_t k = 0; k < s->boxes.size(); ++k) {
    if (!keep(s->boxes[k].v)) continue;
    boxes.push_back(s->boxes[k]);
    kept.push_back(s->kept[k]);
  }
  const size_t removed = s->boxes.size() - boxes.size();
  s->boxes = std::move(boxes);
  s->kept = std::move(kept);
  return removed;
}

// The detection references' FixedSizeCrop: where the canvas is larger, a
// crop at one draw for both axes, boxes clamped and those left empty
// removed; where smaller, padding at the right and bottom.
void FixedSizeCrop(const Step& st, Philox& rng, State* s, json* trace) {
  const int new_h = std::min(s->ch, st.height), new_w = std::min(s->cw, st.width);
  json crop;
  size_t removed = 0;
  if (new_h != s->ch || new_w != s->cw) {
    const float r = static_cast<float>(rng.Uniform());
    const int top = static_cast<int>(static_cast<float>(std::max(s->ch - st.height, 0)) * r);
    const int left = static_cast<int>(static_cast<float>(std::max(s->cw - st.width, 0)) * r);
    Crop(s, left, top, new_w, new_h);
    removed = KeepBoxes(s, [](const float* b) { return b[0] < b[2] && b[1] < b[3]; });
    crop = {top, left, new_h, new_w};
  }
  const int right = st.width - new_w, bottom = st.height - new_h;
  if (right > 0 || bottom > 0) Pad(s, 0, 0, right, bottom);
  if (trace) {
    trace->push_back({{"op", "FixedSizeCrop"}, {"crop", crop}, {"padding", {0, 0, right, bottom}}, {"removed", removed}});
  }
}

void Sanitize(const Step& st, State* s, json* trace) {
  const float w = static_cast<float>(s->cw), h = static_cast<float>(s->ch);
  const size_t removed = KeepBoxes(s, [&](const float* b) {
    const float bw = b[2] - b[0], bh = b[3] - b[1];
    // v2's _get_sanitize_bounding_boxes_mask (NaN fails every test).
    return bw >= st.min_size && bh >= st.min_size && b[0] >= 0 && b[1] >= 0 && b[2] >= 0 && b[3] >= 0 &&
           bw * bh >= st.min_area && b[0] <= w && b[2] <= w && b[1] <= h && b[3] <= h;
  });
  if (trace) trace->push_back({{"op", "SanitizeBoundingBoxes"}, {"removed", removed}});
}

// torch's nearest index (upsample_nearest: the float scale in / out).
int NearestIndex(int out_index, int in_size, int out_size) {
  if (out_size == in_size) return out_index;
  if (out_size == 2 * in_size) return out_index >> 1;
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  return std::min(static_cast<int>(std::floor(static_cast<float>(out_index) * scale)), in_size - 1);
}

}  // namespace

// The geometry of one sample: each step's draws (from the sample's stream)
// and rules, in order. Pixel ops draw from their own stream, when the pixels
// are made (so that adding one does not change the crops).
Status RunGeometry(const Spec& spec, int width, int height, const Targets& t, const SampleKey& key,
                   State* s, json* trace) {
  Philox rng = key.Stream(SampleStream::kGeometry);
  s->cw = width;
  s->ch = height;
  for (size_t k = 0; k < t.instances.size(); ++k) {
    Box b;
    std::copy(t.instances[k].box, t.instances[k].box + 4, b.v);
    s->boxes.push_back(b);
    s->kept.push_back(static_cast<int>(k));
  }
  for (size_t i = 0; i < spec.steps.size(); ++i) {
    const Step& st = spec.steps[i];
    if (st.moves_pixels && s->first_geometry < 0) s->first_geometry = static_cast<int>(i);
    switch (st.kind) {
      case StepKind::kZoomOut:
        NOSTALL_RETURN_IF_ERROR(ZoomOut(st, rng, s, trace));
        break;
      case StepKind::kIoUCrop:
        IoUCrop(st, rng, s, trace);
        break;
      case StepKind::kResizedCrop:
        ResizedCrop(st, rng, s, trace);
        break;
      case StepKind::kResize:
        NOSTALL_RETURN_IF_ERROR(Resize(st, s, trace));
        break;
      case StepKind::kCenterCrop: {
        // v2's center_crop anchor; a crop larger than the canvas pads it.
        const int top = static_cast<int>(std::nearbyint((s->ch - st.height) / 2.0));
        const int left = static_cast<int>(std::nearbyint((s->cw - st.width) / 2.0));
        if (trace) trace->push_back({{"op", "CenterCrop"}, {"crop", {top, left, st.height, st.width}}});
        Crop(s, left, top, st.width, st.height);
        break;
      }
      case StepKind::kScaleJitter:
      case StepKind::kShortestSize:
      case StepKind::kRandomResize:
        NOSTALL_RETURN_IF_ERROR(ScaleResize(st, rng, s, trace));
        break;
      case StepKind::kFixedSizeCrop:
        FixedSizeCrop(st, rng, s, trace);
        break;
      case StepKind::kHFlip:
      case StepKind::kVFlip: {
        const bool flip = rng.Uniform() < st.p;
        if (trace) trace->push_back({{"op", st.name}, {"applied", flip}});
        if (flip) Flip(s, st.kind == StepKind::kHFlip ? 0 : 1);
        break;
      }
      case StepKind::kSanitize:
        Sanitize(st, s, trace);
        break;
      case StepKind::kClamp:
        ClampBoxes(s);
        break;
      case StepKind::kPixelOp:
      case StepKind::kNormalize:
        break;
    }
    if (s->cw <= 0 || s->ch <= 0) return DataError("the transforms leave an empty image");
    if (static_cast<int64_t>(s->cw) * s->ch > (int64_t{1} << 30)) {
      return DataError("the transforms make a canvas of " + std::to_string(s->cw) + "x" +
                       std::to_string(s->ch) + " pixels");
    }
  }
  return Status::OK();
}

// Output index -> source index through every step, -1 where the output
// lies outside the source (padding).
std::vector<int> IndexMap(const std::vector<AxisOp>& ops, int out_size) {
  std::vector<int> map(static_cast<size_t>(out_size));
  for (int u = 0; u < out_size; ++u) {
    int i = u;
    for (auto op = ops.rbegin(); op != ops.rend() && i >= 0; ++op) {
      switch (op->kind) {
        case AxisOp::kShift:
          i += op->shift;
          if (i < 0 || i >= op->in_size) i = -1;
          break;
        case AxisOp::kFlip: i = op->in_size - 1 - i; break;
        case AxisOp::kResize: i = NearestIndex(i, op->in_size, op->out_size); break;
      }
    }
    map[static_cast<size_t>(u)] = i;
  }
  return map;
}

}  // namespace nostall::detect
