// One detection sample's image (render.h).
#include "detect/render.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "codecs/decode.h"
#include "common/philox.h"
#include "kernels/functional.h"
#include "kernels/resample.h"
#include "ops/op.h"

namespace nostall::detect {
namespace {

// The uint8 HWC image `src` (out_h x out_w) laid out as `prep` says, and
// normalised when a Normalize step asks.
// What a float32 output's value v is written as, v * a[k] + b[k]: scaled to
// [0, 1], or as a Normalize step says.
void OutputScale(const Spec& spec, int c, float a[3], float b[3]) {
  for (int k = 0; k < 3; ++k) a[k] = 1.0f / 255, b[k] = 0;
  for (const Step& s : spec.steps) {
    if (s.kind != StepKind::kNormalize) continue;
    for (int k = 0; k < c; ++k) {
      a[k] = static_cast<float>(1.0 / (255.0 * s.transform.std[k]));
      b[k] = static_cast<float>(-s.transform.mean[k] / s.transform.std[k]);
    }
  }
}

void WriteOut(const Spec& spec, const PrepSpec& prep, const uint8_t* src, int h, int w, void* dst) {
  const int c = prep.channels();
  float a[3], b[3];
  OutputScale(spec, c, a, b);
  const bool nchw = prep.layout == Layout::kNCHW;
  const size_t plane = static_cast<size_t>(h) * w;
  if (nchw && c == 3) {  // (the kernel's SIMD planes; `src` has the byte past its end)
    const bool f32 = prep.dtype != DType::kUint8;
    InterleavedToPlanes(src, w, h, a, b, f32 ? static_cast<float*>(dst) : nullptr,
                        f32 ? nullptr : static_cast<uint8_t*>(dst));
    return;
  }
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
// The fill a ZoomOut or FixedSizeCrop paints around the image (one for both:
// spec.cc), gray for one channel.
void CanvasFill(const Spec& spec, int c, uint8_t fill[3]) {
  for (const Step& st : spec.steps) {
    if (st.kind != StepKind::kZoomOut && st.kind != StepKind::kFixedSizeCrop) continue;
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
// Whether pixel ops run on the resampled image (before the output's own).
bool PixelOpsAfter(const Spec& spec, int first_geometry) {
  for (size_t i = 0; i < spec.steps.size(); ++i) {
    const Step& st = spec.steps[i];
    const bool after = first_geometry < 0 || static_cast<int>(i) >= first_geometry;
    if (after && st.kind == StepKind::kPixelOp && !OnTensor(st.transform)) return true;
  }
  return false;
}

bool PixelOpsBefore(const Spec& spec, int first_geometry) {
  for (int i = 0; i < first_geometry; ++i) {
    const Step& st = spec.steps[static_cast<size_t>(i)];
    if (st.kind == StepKind::kPixelOp && !OnTensor(st.transform)) return true;
  }
  return false;
}

// Where the image lands in an output padded after its last resize: whole
// output pixels [u0, u1) x [v0, v1), and the source rectangle they show.
struct Footprint {
  int u0 = 0, u1 = 0, v0 = 0, v1 = 0;
  double x_lo = 0, x_hi = 0, y_lo = 0, y_hi = 0;
};

Footprint FootprintOf(const State& s, int width, int height) {
  Footprint f;
  const auto axis = [](double a, double b, int size, int out, int* lo, int* hi, double* s_lo, double* s_hi) {
    const double e0 = (0 - b) / a, e1 = (size - b) / a;  // output coordinates of the image's edges
    *lo = static_cast<int>(std::lround(std::clamp(std::min(e0, e1), 0.0, static_cast<double>(out))));
    *hi = static_cast<int>(std::lround(std::clamp(std::max(e0, e1), 0.0, static_cast<double>(out))));
    const double x0 = a * *lo + b, x1 = a * *hi + b;
    *s_lo = std::clamp(std::min(x0, x1), 0.0, static_cast<double>(size));
    *s_hi = std::clamp(std::max(x0, x1), 0.0, static_cast<double>(size));
  };
  axis(s.ax, s.bx, width, s.cw, &f.u0, &f.u1, &f.x_lo, &f.x_hi);
  axis(s.ay, s.by, height, s.ch, &f.v0, &f.v1, &f.y_lo, &f.y_hi);
  return f;
}

// Rows [y0, y1) of `out` (out_w pixels of c channels each), columns
// [x0, x1), set to `fill`: one row made, then copied.
void FillRect(uint8_t* out, int out_w, int c, const uint8_t fill[3], int x0, int x1, int y0, int y1,
              std::vector<uint8_t>* row) {
  if (x1 <= x0 || y1 <= y0) return;
  const size_t bytes = static_cast<size_t>(x1 - x0) * c;
  row->resize(bytes);
  for (size_t i = 0; i < bytes; ++i) (*row)[i] = fill[i % static_cast<size_t>(c)];
  for (int y = y0; y < y1; ++y) {
    std::memcpy(out + (static_cast<size_t>(y) * out_w + x0) * c, row->data(), bytes);
  }
}

// The decoded image region (`src`, bw x bh from source pixel (ix0, iy0),
// sx x sy decoded pixels per source pixel) resampled alone into its
// footprint of `out` (out_w x out_h), the rest of `out` the fill. Where the
// footprint spans whole rows it is resampled in place.
void PlaceImage(const State& s, const Footprint& f, const uint8_t* src, size_t stride, int bw, int bh, int c,
                int ix0, int iy0, double sx, double sy, const uint8_t fill[3], uint8_t* out, int out_w, int out_h,
                PrepScratch* scratch) {
  const int ow = f.u1 - f.u0, oh = f.v1 - f.v0;
  std::vector<uint8_t>& placed = KindScratchOf<Scratch>(scratch).placed;
  std::vector<uint8_t>& row = placed;  // (the fill's row first, then the image when it is not whole rows)
  if (ow <= 0 || oh <= 0) {
    FillRect(out, out_w, c, fill, 0, out_w, 0, out_h, &row);
    return;
  }
  FillRect(out, out_w, c, fill, 0, out_w, 0, f.v0, &row);
  FillRect(out, out_w, c, fill, 0, out_w, f.v1, out_h, &row);
  FillRect(out, out_w, c, fill, 0, f.u0, f.v0, f.v1, &row);
  FillRect(out, out_w, c, fill, f.u1, out_w, f.v0, f.v1, &row);
  const bool whole_rows = ow == out_w;
  uint8_t* dst = out + static_cast<size_t>(f.v0) * out_w * c;
  if (!whole_rows) {
    placed.resize(static_cast<size_t>(ow) * oh * c + 4);
    dst = placed.data();
  }
  ResampleBox(src, bw, bh, stride, c, (f.x_lo - ix0) * sx, (f.y_lo - iy0) * sy, (f.x_hi - f.x_lo) * sx,
              (f.y_hi - f.y_lo) * sy, dst, ow, oh, &scratch->resample, s.ax < 0);
  if (s.ay < 0) FlipRows(dst, ow * c, oh, &scratch->ops.tmp);
  if (whole_rows) return;
  for (int y = 0; y < oh; ++y) {
    std::memcpy(out + (static_cast<size_t>(f.v0 + y) * out_w + f.u0) * c,
                placed.data() + static_cast<size_t>(y) * ow * c, static_cast<size_t>(ow) * c);
  }
}

// The image's pixels [ix0, ix0 + iw) x [iy0, iy0 + ih), decoded once: a
// JPEG's region at the smallest DCT scale that still gives need_w x need_h
// pixels there, other formats whole.
Status DecodeRegion(const PrepSpec& prep, const uint8_t* data, size_t size, int c, int width, int ix0, int iy0,
                    int iw, int ih, double need_w, double need_h, PrepScratch* scratch, DecodedRegion* r) {
  const ImageFormat format = SniffFormat(data, size);
  if (format == ImageFormat::kJpeg) {
    const int min_w = prep.dct_scaling ? static_cast<int>(std::ceil(need_w)) : 0;
    const int min_h = prep.dct_scaling ? static_cast<int>(std::ceil(need_h)) : 0;
    return JpegDecodeRegion(data, size, c, ix0, iy0, iw, ih, min_w, min_h, &scratch->decoded, r);
  }
  NOSTALL_RETURN_IF_ERROR(DecodeWhole(format, data, size, c, &scratch->decoded, r));
  r->x = ix0, r->y = iy0, r->w = iw, r->h = ih;
  if (r->width != width) return DataError("the image decodes to another size than its header says");
  return Status::OK();
}

// The ops that run on the output tensor (RandomErasing after Normalize).
Status OutputOps(const Spec& spec, const PrepSpec& prep, void* dst, int out_h, int out_w, Philox& ops_rng) {
  const OutputView out{dst, prep.dtype == DType::kFloat32, prep.layout == Layout::kNCHW, out_h, out_w,
                       prep.channels()};
  for (const Step& st : spec.steps) {
    if (st.kind == StepKind::kPixelOp && OnTensor(st.transform)) st.transform.op->ApplyOutput(out, ops_rng, nullptr);
  }
  return Status::OK();
}

// Nothing between the resample and the output (no vertical flip, no pixel
// ops on the resampled image, planes out): the box (x, y, w, h) of `src`
// resampled straight into the output's planes, normalized when asked,
// written once. False, nothing written: not this case.
bool ResampleIntoPlanes(const Spec& spec, const PrepSpec& prep, const State& s, const uint8_t* src, int src_w,
                        int src_h, size_t stride, const double box[4], bool flip_x, bool flip_y, void* dst,
                        PrepScratch* scratch) {
  if (flip_y || prep.layout != Layout::kNCHW || PixelOpsAfter(spec, s.first_geometry)) return false;
  const int c = prep.channels();
  float a[3], b[3];
  OutputScale(spec, c, a, b);
  const bool f32 = prep.dtype == DType::kFloat32;
  return ResampleBoxPlanar(src, src_w, src_h, stride, c, box[0], box[1], box[2], box[3], s.cw, s.ch, flip_x, a, b,
                           f32 ? static_cast<float*>(dst) : nullptr, f32 ? nullptr : static_cast<uint8_t*>(dst),
                           &scratch->resample);
}

}  // namespace

Status RenderImage(const Spec& spec, const PrepSpec& prep, const uint8_t* data, size_t size, int width,
                   int height, const State& s, const SampleKey& key, void* dst, PrepScratch* scratch) {
  const int c = prep.channels();
  const int out_w = s.cw, out_h = s.ch;
  uint8_t fill[3] = {0, 0, 0};
  CanvasFill(spec, c, fill);
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
    FillRect(resized.data(), out_w, c, fill, 0, out_w, 0, out_h, &KindScratchOf<Scratch>(scratch).placed);
  } else {
    const int iw = ix1 - ix0, ih = iy1 - iy0;
    DecodedRegion r;
    NOSTALL_RETURN_IF_ERROR(DecodeRegion(prep, data, size, c, width, ix0, iy0, iw, ih, out_w * iw / rw,
                                         out_h * ih / rh, scratch, &r));
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
    if (padded && s.padded_after_resize) {
      // Padded after the last resize: the image alone into its place.
      if (pre_ops) {
        src = OnCanvas(spec, s.first_geometry, true, nullptr, src, r.stride, bw, bh, c, Placement{bw, bh, 0, 0},
                       ops_rng, scratch);
        stride = static_cast<size_t>(bw) * c;
      }
      PlaceImage(s, FootprintOf(s, width, height), src, stride, bw, bh, c, ix0, iy0, sx, sy, fill, resized.data(),
                 out_w, out_h, scratch);
    } else {
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
      const double box[4] = {box_x, box_y, rw * sx, rh * sy};
      if (ResampleIntoPlanes(spec, prep, s, src, src_w, src_h, stride, box, flip_x, flip_y, dst, scratch)) {
        return OutputOps(spec, prep, dst, out_h, out_w, ops_rng);
      }
      ResampleBox(src, src_w, src_h, stride, c, box[0], box[1], box[2], box[3], resized.data(), out_w,
                  out_h, &scratch->resample, flip_x);
      if (flip_y) FlipRows(resized.data(), out_w * c, out_h, &scratch->ops.tmp);
    }
  }
  PixelOps(spec, false, s.first_geometry, ImageView{resized.data(), out_h, out_w, c}, ops_rng, scratch->ops);
  WriteOut(spec, prep, resized.data(), out_h, out_w, dst);
  return OutputOps(spec, prep, dst, out_h, out_w, ops_rng);
}

}  // namespace nostall::detect
