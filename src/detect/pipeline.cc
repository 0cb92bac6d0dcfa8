// One detection sample, image and annotations together (detect.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "codecs/decode.h"
#include "common/philox.h"
#include "detect/detect.h"
#include "kernels/functional.h"
#include "kernels/resample.h"
#include "ops/op.h"
#include "ops/plan.h"

namespace nostall::detect {
namespace {

using json = nlohmann::json;
using annotations::Instance;
using annotations::Targets;

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
};

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

void Sanitize(const Step& st, State* s, json* trace) {
  std::vector<Box> boxes;
  std::vector<int> kept;
  const float w = static_cast<float>(s->cw), h = static_cast<float>(s->ch);
  for (size_t k = 0; k < s->boxes.size(); ++k) {
    const float* b = s->boxes[k].v;
    const float bw = b[2] - b[0], bh = b[3] - b[1];
    // v2's _get_sanitize_bounding_boxes_mask (NaN fails every test).
    const bool valid = bw >= st.min_size && bh >= st.min_size && b[0] >= 0 && b[1] >= 0 &&
                       b[2] >= 0 && b[3] >= 0 && bw * bh >= st.min_area && b[0] <= w && b[2] <= w &&
                       b[1] <= h && b[3] <= h;
    if (!valid) continue;
    boxes.push_back(s->boxes[k]);
    kept.push_back(s->kept[k]);
  }
  if (trace) {
    trace->push_back({{"op", "SanitizeBoundingBoxes"}, {"removed", s->boxes.size() - boxes.size()}});
  }
  s->boxes = std::move(boxes);
  s->kept = std::move(kept);
}

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
      case StepKind::kZoomOut: {
        // _RandomApplyTransform: the coin first, then get_params.
        if (!(rng.Uniform() < st.p)) {
          if (trace) trace->push_back({{"op", "RandomZoomOut"}, {"padding", nullptr}});
          break;
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
        break;
      }
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

// torch's nearest index (upsample_nearest: the float scale in / out).
int NearestIndex(int out_index, int in_size, int out_size) {
  if (out_size == in_size) return out_index;
  if (out_size == 2 * in_size) return out_index >> 1;
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  return std::min(static_cast<int>(std::floor(static_cast<float>(out_index) * scale)), in_size - 1);
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

template <typename T>
void Put(uint8_t*& p, T v) {
  std::memcpy(p, &v, sizeof(T));
  p += sizeof(T);
}

// The output targets (targets.h's output form).
Status WriteTargets(const Spec& spec, const Targets& t, const State& s, int width, int height,
                    uint8_t* out, size_t room, int64_t* len, std::vector<uint8_t>* mask) {
  const uint32_t n = static_cast<uint32_t>(s.boxes.size());
  const uint32_t mh = spec.masks ? static_cast<uint32_t>(s.ch) : 0;
  const uint32_t mw = spec.masks ? static_cast<uint32_t>(s.cw) : 0;
  const size_t bytes = annotations::OutputBytes(n, mh, mw);
  if (bytes > room) {
    return DataError(std::to_string(n) + " annotations (after the transforms) do not fit the batch's room "
                     "for this sample's targets (" + std::to_string(room) +
                     " bytes): give the targets field a larger max_annotations");
  }
  uint8_t* p = out;
  std::memcpy(p, annotations::kOutputMagic, 4);
  p += 4;
  Put<uint32_t>(p, n);
  Put<uint32_t>(p, mh);
  Put<uint32_t>(p, mw);
  for (const Box& b : s.boxes) {
    float o[4] = {b.v[0], b.v[1], b.v[2], b.v[3]};
    if (spec.box_format == annotations::BoxFormat::kXYWH) {
      o[2] = b.v[2] - b.v[0], o[3] = b.v[3] - b.v[1];
    } else if (spec.box_format == annotations::BoxFormat::kCXCYWH) {
      o[0] = (b.v[0] + b.v[2]) / 2, o[1] = (b.v[1] + b.v[3]) / 2;
      o[2] = b.v[2] - b.v[0], o[3] = b.v[3] - b.v[1];
    }
    for (float v : o) Put<float>(p, v);
  }
  for (int k : s.kept) Put<int64_t>(p, t.instances[static_cast<size_t>(k)].label);
  const size_t pad8 = (size_t{n} + 7) / 8 * 8;
  std::memset(p, 0, pad8);
  for (uint32_t k = 0; k < n; ++k) p[k] = t.instances[static_cast<size_t>(s.kept[k])].crowd ? 1 : 0;
  p += pad8;
  if (spec.masks && n > 0) {
    const std::vector<int> xs = IndexMap(s.xops, s.cw), ys = IndexMap(s.yops, s.ch);
    const size_t mask_bytes = (uint64_t{mh} * mw + 63) / 64 * 8;
    for (uint32_t k = 0; k < n; ++k) {
      const Instance& inst = t.instances[static_cast<size_t>(s.kept[k])];
      NOSTALL_RETURN_IF_ERROR(annotations::RasterizeInstance(inst, static_cast<uint32_t>(height),
                                                             static_cast<uint32_t>(width), mask));
      std::memset(p, 0, mask_bytes);
      size_t bit = 0;
      for (uint32_t y = 0; y < mh; ++y) {
        const int sy = ys[y];
        for (uint32_t x = 0; x < mw; ++x, ++bit) {
          const int sx = xs[x];
          if (sy >= 0 && sx >= 0 && (*mask)[static_cast<size_t>(sy) * width + sx]) {
            p[bit >> 3] |= static_cast<uint8_t>(0x80u >> (bit & 7));  // numpy's unpackbits order
          }
        }
      }
      p += mask_bytes;
    }
  }
  *len = static_cast<int64_t>(p - out);
  return Status::OK();
}

// The uint8 HWC image `src` (out_h x out_w) laid out as `prep` says, and
// normalised when a Normalize step asks.
void WriteOut(const Spec& spec, const PrepSpec& prep, const uint8_t* src, int h, int w, void* dst) {
  const int c = prep.channels();
  float a[3] = {1.0f / 255, 1.0f / 255, 1.0f / 255}, b[3] = {0, 0, 0};
  for (const Step& s : spec.steps) {
    if (s.kind != StepKind::kNormalize) continue;
    for (int k = 0; k < c; ++k) {
      a[k] = static_cast<float>(1.0 / (255.0 * s.transform.std[k]));
      b[k] = static_cast<float>(-s.transform.mean[k] / s.transform.std[k]);
    }
  }
  const bool nchw = prep.layout == Layout::kNCHW;
  const size_t plane = static_cast<size_t>(h) * w;
  if (prep.dtype == DType::kUint8) {
    auto* out = static_cast<uint8_t*>(dst);
    if (!nchw) {
      std::memcpy(out, src, plane * c);
      return;
    }
    for (size_t i = 0; i < plane; ++i) {
      for (int k = 0; k < c; ++k) out[k * plane + i] = src[i * c + k];
    }
    return;
  }
  auto* out = static_cast<float*>(dst);
  for (size_t i = 0; i < plane; ++i) {
    for (int k = 0; k < c; ++k) {
      const float v = src[i * c + k] * a[k] + b[k];
      out[nchw ? k * plane + i : i * c + k] = v;
    }
  }
}

void PixelOps(const Spec& spec, bool before, int first_geometry, const ImageView& img, Philox& rng,
              OpScratch& scratch) {
  for (size_t i = 0; i < spec.steps.size(); ++i) {
    const Step& s = spec.steps[i];
    if (s.kind != StepKind::kPixelOp || OnTensor(s.transform)) continue;
    const bool is_before = first_geometry < 0 ? false : static_cast<int>(i) < first_geometry;
    if (is_before == before) s.transform.op->Apply(img, rng, scratch, nullptr);
  }
}

// The image: the source region the canvas covers decoded once (padded with
// the fill where the canvas lies outside the source), pixel ops before the
// geometry run on it, then one resample to the output.
// The fill a ZoomOut paints around the image (its last one's), gray for one channel.
void ZoomFill(const Spec& spec, int c, uint8_t fill[3]) {
  for (const Step& st : spec.steps) {
    if (st.kind != StepKind::kZoomOut) continue;
    for (int k = 0; k < 3; ++k) {
      const double v = st.fill.empty() ? 0 : st.fill[st.fill.size() == 1 ? 0 : std::min<size_t>(k, st.fill.size() - 1)];
      fill[k] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
    }
    if (c == 1) fill[0] = static_cast<uint8_t>((fill[0] * 299 + fill[1] * 587 + fill[2] * 114 + 500) / 1000);
  }
}

// Rows [0, h) of `row_bytes` each, upside down in place.
void FlipRows(uint8_t* px, int row_bytes, int h, std::vector<uint8_t>* tmp) {
  const size_t row = static_cast<size_t>(row_bytes);
  tmp->resize(row);
  for (int y = 0; y < h / 2; ++y) {
    uint8_t* a = px + static_cast<size_t>(y) * row;
    uint8_t* b = px + static_cast<size_t>(h - 1 - y) * row;
    std::memcpy(tmp->data(), a, row);
    std::memcpy(a, b, row);
    std::memcpy(b, tmp->data(), row);
  }
}

// Where the image's pixels go on a canvas: its size, and their corner.
struct Placement {
  int cw = 0, ch = 0, ox = 0, oy = 0;
};

// The image's decoded pixels (bw x bh of `c` channels, rows `stride` apart
// from `px`) on a canvas as `at` says, filled with `fill` around them where
// given, the pixel ops before the geometry applied to the image's pixels
// alone first (`pre_ops`). Returns the canvas (in the scratch), rows
// cw * c apart.
const uint8_t* OnCanvas(const Spec& spec, int first_geometry, bool pre_ops, const uint8_t* fill,
                        const uint8_t* px, size_t stride, int bw, int bh, int c, Placement at,
                        Philox& rng, PrepScratch* scratch) {
  const int cw = at.cw, ch = at.ch, ox = at.ox, oy = at.oy;
  std::vector<uint8_t>& canvas = KindScratchOf<Scratch>(scratch).canvas;
  canvas.resize(static_cast<size_t>(cw) * ch * c + 4);
  if (fill != nullptr) {
    for (size_t i = 0; i < static_cast<size_t>(cw) * ch; ++i) {
      for (int k = 0; k < c; ++k) canvas[i * c + k] = fill[k];
    }
  }
  // Pixel ops before the geometry see the image's pixels only.
  std::vector<uint8_t>& own = scratch->ops.tmp2;
  own.resize(static_cast<size_t>(bw) * bh * c + 4);
  for (int y = 0; y < bh; ++y) {
    std::memcpy(own.data() + static_cast<size_t>(y) * bw * c, px + static_cast<size_t>(y) * stride,
                static_cast<size_t>(bw) * c);
  }
  if (pre_ops) PixelOps(spec, true, first_geometry, ImageView{own.data(), bh, bw, c}, rng, scratch->ops);
  for (int y = 0; y < bh; ++y) {
    std::memcpy(canvas.data() + (static_cast<size_t>(oy + y) * cw + ox) * c,
                own.data() + static_cast<size_t>(y) * bw * c, static_cast<size_t>(bw) * c);
  }
  return canvas.data();
}

// Whether pixel ops (not on the tensor) come before the first geometric step.
bool PixelOpsBefore(const Spec& spec, int first_geometry) {
  for (int i = 0; i < first_geometry; ++i) {
    const Step& st = spec.steps[static_cast<size_t>(i)];
    if (st.kind == StepKind::kPixelOp && !OnTensor(st.transform)) return true;
  }
  return false;
}

void FillPixels(uint8_t* out, size_t pixels, int c, const uint8_t fill[3]) {
  for (size_t i = 0; i < pixels; ++i) {
    for (int k = 0; k < c; ++k) out[i * c + k] = fill[k];
  }
}

Status RenderImage(const Spec& spec, const PrepSpec& prep, const uint8_t* data, size_t size, int width,
                   int height, const State& s, const SampleKey& key, void* dst, PrepScratch* scratch) {
  const int c = prep.channels();
  const int out_w = s.cw, out_h = s.ch;
  uint8_t fill[3] = {0, 0, 0};
  ZoomFill(spec, c, fill);
  // The source rectangle the output covers, and its mirroring.
  const double x0 = s.bx, x1 = s.ax * s.cw + s.bx, y0 = s.by, y1 = s.ay * s.ch + s.by;
  const bool flip_x = x1 < x0, flip_y = y1 < y0;
  const double rx = std::min(x0, x1), rw = std::abs(x1 - x0), ry = std::min(y0, y1), rh = std::abs(y1 - y0);
  // Whole source pixels around it (P) and the part inside the image (I).
  const int px0 = static_cast<int>(std::floor(rx + 1e-6)), py0 = static_cast<int>(std::floor(ry + 1e-6));
  const int px1 = static_cast<int>(std::ceil(rx + rw - 1e-6)), py1 = static_cast<int>(std::ceil(ry + rh - 1e-6));
  const int ix0 = std::max(px0, 0), iy0 = std::max(py0, 0), ix1 = std::min(px1, width), iy1 = std::min(py1, height);
  Philox ops_rng = key.Stream(SampleStream::kPixelOps);
  std::vector<uint8_t>& resized = scratch->resized;
  resized.resize(static_cast<size_t>(out_h) * out_w * c + 4);
  if (ix1 <= ix0 || iy1 <= iy0) {  // the output shows none of the image
    FillPixels(resized.data(), static_cast<size_t>(out_h) * out_w, c, fill);
  } else {
    const int iw = ix1 - ix0, ih = iy1 - iy0;
    DecodedRegion r;
    const ImageFormat format = SniffFormat(data, size);
    if (format == ImageFormat::kJpeg) {
      const int min_w = prep.dct_scaling ? static_cast<int>(std::ceil(out_w * iw / rw)) : 0;
      const int min_h = prep.dct_scaling ? static_cast<int>(std::ceil(out_h * ih / rh)) : 0;
      NOSTALL_RETURN_IF_ERROR(
          JpegDecodeRegion(data, size, c, ix0, iy0, iw, ih, min_w, min_h, &scratch->decoded, &r));
    } else {
      NOSTALL_RETURN_IF_ERROR(DecodeWhole(format, data, size, c, &scratch->decoded, &r));
      r.x = ix0, r.y = iy0, r.w = iw, r.h = ih;
    }
    if (r.width != width && format != ImageFormat::kJpeg) {
      return DataError("the image decodes to another size than its header says");
    }
    const double sx = r.w / iw, sy = r.h / ih;  // decoded pixels per source pixel
    // I's pixels, whole, in the decoded buffer.
    const int bx0 = std::clamp(static_cast<int>(std::lround(r.x)), 0, r.width);
    const int by0 = std::clamp(static_cast<int>(std::lround(r.y)), 0, r.height);
    const int bw = std::clamp(static_cast<int>(std::lround(r.w)), 1, r.width - bx0);
    const int bh = std::clamp(static_cast<int>(std::lround(r.h)), 1, r.height - by0);
    const bool pre_ops = PixelOpsBefore(spec, s.first_geometry);
    const bool padded = px0 < 0 || py0 < 0 || px1 > width || py1 > height;
    const uint8_t* src = r.pixels + static_cast<size_t>(by0) * r.stride + static_cast<size_t>(bx0) * c;
    size_t stride = r.stride;
    int src_w = bw, src_h = bh;
    double box_x = (rx - ix0) * sx, box_y = (ry - iy0) * sy;
    if (pre_ops || padded) {
      // The canvas: P at the decoded scale, the fill around I.
      const int cw = padded ? std::max(bw, static_cast<int>(std::lround((px1 - px0) * sx))) : bw;
      const int ch = padded ? std::max(bh, static_cast<int>(std::lround((py1 - py0) * sy))) : bh;
      if (static_cast<int64_t>(cw) * ch > prep.max_pixels) {
        return DataError("the zoomed-out canvas of " + std::to_string(cw) + "x" + std::to_string(ch) +
                         " pixels is over max_pixels");
      }
      const int ox = std::clamp(static_cast<int>(std::lround((ix0 - px0) * sx)), 0, cw - bw);
      const int oy = std::clamp(static_cast<int>(std::lround((iy0 - py0) * sy)), 0, ch - bh);
      src = OnCanvas(spec, s.first_geometry, pre_ops, padded ? fill : nullptr, src, r.stride, bw, bh, c,
                     Placement{cw, ch, ox, oy}, ops_rng, scratch);
      stride = static_cast<size_t>(cw) * c;
      src_w = cw, src_h = ch;
      if (padded) box_x = (rx - px0) * sx, box_y = (ry - py0) * sy;
    }
    ResampleBox(src, src_w, src_h, stride, c, box_x, box_y, rw * sx, rh * sy, resized.data(), out_w,
                out_h, &scratch->resample, flip_x);
    if (flip_y) FlipRows(resized.data(), out_w * c, out_h, &scratch->ops.tmp);
  }
  PixelOps(spec, false, s.first_geometry, ImageView{resized.data(), out_h, out_w, c}, ops_rng, scratch->ops);
  WriteOut(spec, prep, resized.data(), out_h, out_w, dst);
  const OutputView out{dst, prep.dtype == DType::kFloat32, prep.layout == Layout::kNCHW, out_h, out_w, c};
  for (const Step& st : spec.steps) {
    if (st.kind == StepKind::kPixelOp && OnTensor(st.transform)) st.transform.op->ApplyOutput(out, ops_rng, nullptr);
  }
  return Status::OK();
}

}  // namespace

Status Prepare(const Spec& spec, const PrepSpec& prep, const uint8_t* image, size_t image_size,
               const uint8_t* record, size_t record_size, const SampleKey& key, int out_h, int out_w,
               void* dst, uint8_t* targets, size_t room, int64_t* targets_len, PrepScratch* scratch) {
  int width = 0, height = 0;
  NOSTALL_RETURN_IF_ERROR(ProbeImageSize(image, image_size, &width, &height));
  if (width <= 0 || height <= 0) return DataError("image has zero width or height");
  if (static_cast<int64_t>(width) * height > prep.max_pixels) {
    return DataError("image is " + std::to_string(width) + "x" + std::to_string(height) +
                     " pixels, over the limit of " + std::to_string(prep.max_pixels) + " (max_pixels)");
  }
  Targets t;
  if (record_size > 0) {
    Status st = annotations::DecodeTargets(record, record_size, spec.masks, &t);
    if (!st.ok()) return DataError("annotations: " + st.message());
  }
  if (spec.masks && t.width != 0 && (t.width != static_cast<uint32_t>(width) || t.height != static_cast<uint32_t>(height))) {
    return DataError("the annotations are of a " + std::to_string(t.width) + "x" + std::to_string(t.height) +
                     " image, but the image is " + std::to_string(width) + "x" + std::to_string(height));
  }
  State s;
  NOSTALL_RETURN_IF_ERROR(RunGeometry(spec, width, height, t, key, &s, nullptr));
  if (s.cw != out_w || s.ch != out_h) {
    return DataError("the sample is " + std::to_string(s.cw) + "x" + std::to_string(s.ch) +
                     " but the batch is " + std::to_string(out_w) + "x" + std::to_string(out_h));
  }
  NOSTALL_RETURN_IF_ERROR(RenderImage(spec, prep, image, image_size, width, height, s, key, dst, scratch));
  return WriteTargets(spec, t, s, width, height, targets, room, targets_len, &KindScratchOf<Scratch>(scratch).mask);
}

Status Trace(const Spec& spec, int width, int height, const uint8_t* record, size_t record_size,
             const SampleKey& key, json* out) {
  if (width <= 0 || height <= 0) return InvalidArgument("width and height must be positive");
  Targets t;
  if (record_size > 0) {
    Status st = annotations::DecodeTargets(record, record_size, false, &t);
    if (!st.ok()) return DataError("annotations: " + st.message());
  }
  State s;
  json ops = json::array();
  NOSTALL_RETURN_IF_ERROR(RunGeometry(spec, width, height, t, key, &s, &ops));
  json boxes = json::array(), labels = json::array(), crowd = json::array();
  for (size_t k = 0; k < s.boxes.size(); ++k) {
    boxes.push_back({s.boxes[k].v[0], s.boxes[k].v[1], s.boxes[k].v[2], s.boxes[k].v[3]});
    labels.push_back(t.instances[static_cast<size_t>(s.kept[k])].label);
    crowd.push_back(t.instances[static_cast<size_t>(s.kept[k])].crowd);
  }
  const double x0 = s.bx, x1 = s.ax * s.cw + s.bx, y0 = s.by, y1 = s.ay * s.ch + s.by;
  *out = {{"size", {s.ch, s.cw}},
          {"ops", ops},
          {"boxes", boxes},
          {"labels", labels},
          {"iscrowd", crowd},
          {"kept", s.kept},
          {"source_box", {std::min(x0, x1), std::min(y0, y1), std::abs(x1 - x0), std::abs(y1 - y0)}},
          {"flip", {x1 < x0, y1 < y0}}};
  return Status::OK();
}

}  // namespace nostall::detect
