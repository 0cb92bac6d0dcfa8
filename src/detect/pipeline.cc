// One detection sample, image and annotations together (detect.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "codecs/decode.h"
#include "detect/detect.h"
#include "detect/geometry.h"
#include "detect/render.h"

namespace nostall::detect {
namespace {

using json = nlohmann::json;
using annotations::Instance;
using annotations::Targets;

template <typename T>
void Put(uint8_t*& p, T v) {
  std::memcpy(p, &v, sizeof(T));
  p += sizeof(T);
}

// The source-size mask `mask` (`width` columns, bytes 0 or not) at the
// output's size: output pixel (x, y) is source pixel (xs[x], ys[y]), none
// where either is negative; 0 or 1 per byte in `out` (rows repeated by an
// upscale are copied, not gathered again).
void ResampleMask(const std::vector<uint8_t>& mask, int width, const std::vector<int>& xs,
                  const std::vector<int>& ys, std::vector<uint8_t>* out) {
  const size_t mw = xs.size(), mh = ys.size();
  out->resize(mh * mw + 8);
  uint8_t* o = out->data();
  for (size_t y = 0; y < mh; ++y, o += mw) {
    const int sy = ys[y];
    if (sy < 0) {
      std::memset(o, 0, mw);
    } else if (y > 0 && sy == ys[y - 1]) {
      std::memcpy(o, o - mw, mw);
    } else {
      const uint8_t* row = mask.data() + static_cast<size_t>(sy) * width;
      for (size_t x = 0; x < mw; ++x) o[x] = xs[x] >= 0 && row[xs[x]] != 0;
    }
  }
  out->resize(mh * mw);
}

// Bytes of 0 or 1 as bits, the first byte's the most significant (numpy's
// unpackbits order), into `bytes` of `out` (zeros past the last bit).
void PackBits(const uint8_t* in, size_t n, uint8_t* out, size_t bytes) {
  std::memset(out, 0, bytes);
  size_t j = 0;
  for (; 8 * j + 8 <= n; ++j) {
    uint64_t x;
    std::memcpy(&x, in + 8 * j, 8);  // (little-endian: the first byte lowest)
    // Byte i's bit lands at bit 63 - i: distinct powers of two, no carries.
    out[j] = static_cast<uint8_t>((x * 0x8040201008040201ull) >> 56);
  }
  for (size_t b = 8 * j; b < n; ++b) out[b >> 3] |= static_cast<uint8_t>((in[b] & 1u) << (7 - (b & 7)));
}

// The output targets (targets.h's output form).
Status WriteTargets(const Spec& spec, const Targets& t, const State& s, int width, int height,
                    uint8_t* out, size_t room, int64_t* len, std::vector<uint8_t>* mask, std::vector<uint8_t>* full) {
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
      ResampleMask(*mask, width, xs, ys, full);
      PackBits(full->data(), full->size(), p, mask_bytes);
      p += mask_bytes;
    }
  }
  *len = static_cast<int64_t>(p - out);
  return Status::OK();
}

}  // namespace

Status Prepare(const Spec& spec, const PrepSpec& prep, const SampleInput& in, const SampleKey& key,
               const SampleOutput& out, PrepScratch* scratch) {
  const uint8_t* image = in.data;
  const size_t image_size = in.size;
  const uint8_t* record = in.annotations;
  const size_t record_size = in.annotations_size;
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
  if (spec.ragged ? s.cw > out.out_w || s.ch > out.out_h : s.cw != out.out_w || s.ch != out.out_h) {
    return DataError("the sample is " + std::to_string(s.cw) + "x" + std::to_string(s.ch) + " but the batch is " +
                     (spec.ragged ? "at most " : "") + std::to_string(out.out_w) + "x" + std::to_string(out.out_h));
  }
  if (out.dims != nullptr) {
    const std::vector<int64_t> shape = ImageKind().SampleShape(prep, s.ch, s.cw);
    for (size_t a = 0; a < 3; ++a) out.dims[a] = a < shape.size() ? shape[a] : 1;
  }
  NOSTALL_RETURN_IF_ERROR(RenderImage(spec, prep, image, image_size, width, height, s, key, out.dst, scratch));
  Scratch& own = KindScratchOf<Scratch>(scratch);
  return WriteTargets(spec, t, s, width, height, out.targets, out.targets_room, out.targets_len, &own.mask,
                      &own.full_mask);
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
