// The two resampling passes, vectorised with Google Highway and dispatched at
// run time (one binary: SSE4, AVX2, AVX-512, or an emulated 128-bit target).
//
// Vertical pass: for each output row, the taps' uint8 source rows are widened
// to float and summed with their weights in registers, one vector of columns
// at a time (a contiguous, branch-free loop).
// Horizontal pass (3 channels): one output pixel per 128-bit vector: each
// tap adds weight x [R G B (next R)] of its source pixel. Four pixels are
// then transposed to R, G and B vectors, rounded and clamped as the uint8
// PIL would produce, and either written interleaved (uint8 HWC) or, fused
// with Normalize and the flip, straight into the output planes (NCHW).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/resample.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/resample.h"

HWY_BEFORE_NAMESPACE();
namespace nostall {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// rows[yy * row_floats + j] = sum_i wy[i] * src[(ymin + i) * stride + byte0 + j], j < span.
void VerticalPass(const uint8_t* src, size_t stride, size_t byte0, size_t span,
                  const int* bounds_y, const float* weights_y, int ky, int out_h,
                  size_t row_floats, float* rows) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<int32_t, decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(df)> d8;
  const size_t n = hn::Lanes(df);
  for (int yy = 0; yy < out_h; ++yy) {
    const int ymin = bounds_y[yy * 2], taps = bounds_y[yy * 2 + 1];
    const float* k = weights_y + static_cast<size_t>(yy) * ky;
    const uint8_t* first = src + static_cast<size_t>(ymin) * stride + byte0;
    float* out = rows + static_cast<size_t>(yy) * row_floats;
    size_t j = 0;
    for (; j + n <= span; j += n) {
      auto acc = hn::Zero(df);
      const uint8_t* p = first + j;
      for (int i = 0; i < taps; ++i, p += stride) {
        const auto v = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, p)));
        acc = hn::MulAdd(hn::Set(df, k[i]), v, acc);
      }
      hn::StoreU(acc, df, out + j);
    }
    for (; j < span; ++j) {
      float acc = 0;
      const uint8_t* p = first + j;
      for (int i = 0; i < taps; ++i, p += stride) acc += k[i] * static_cast<float>(*p);
      out[j] = acc;
    }
  }
}

#if HWY_TARGET == HWY_SCALAR
// The baseline target holds one lane: the horizontal pass is plain C++ there
// (a CPU without SSSE3).
float ScalarSum(const float* in, const int* start, const float* weights, int kx, int xx, int k) {
  const float* p = in + static_cast<size_t>(start[xx]) * 3 + k;
  const float* w = weights + static_cast<size_t>(xx) * kx;
  float acc = 0;
  for (int i = 0; i < kx; ++i) acc += w[i] * p[3 * i];
  return std::clamp(std::floor(acc + 0.5f), 0.0f, 255.0f);
}

void HorizontalRgbPlanar(const float* rows, size_t row_floats, const int* start,
                         const float* weights, int kx, int out_w, size_t plane, int y0, int n,
                         bool flip, const float* a, const float* b, float* out_f, uint8_t* out_u8) {
  for (int yy = y0; yy < y0 + n; ++yy) {
    const float* in = rows + static_cast<size_t>(yy - y0) * row_floats;
    for (int xx = 0; xx < out_w; ++xx) {
      const size_t at = static_cast<size_t>(yy) * out_w + (flip ? out_w - 1 - xx : xx);
      for (int k = 0; k < 3; ++k) {
        const float v = ScalarSum(in, start, weights, kx, xx, k);
        if (out_f) {
          out_f[k * plane + at] = v * a[k] + b[k];
        } else {
          out_u8[k * plane + at] = static_cast<uint8_t>(v);
        }
      }
    }
  }
}

void HwcToPlanes(const uint8_t* src, int w, int h, const float* a, const float* b, float* out_f,
                 uint8_t* out_u8, size_t plane) {
  for (size_t i = 0; i < static_cast<size_t>(w) * h; ++i) {
    for (int k = 0; k < 3; ++k) {
      if (out_f) {
        out_f[k * plane + i] = src[i * 3 + k] * a[k] + b[k];
      } else {
        out_u8[k * plane + i] = src[i * 3 + k];
      }
    }
  }
}

void HorizontalRgbInterleaved(const float* rows, size_t row_floats, const int* start,
                              const float* weights, int kx, int out_w, int out_h, bool flip,
                              uint8_t* out) {
  for (int yy = 0; yy < out_h; ++yy) {
    const float* in = rows + static_cast<size_t>(yy) * row_floats;
    uint8_t* o = out + static_cast<size_t>(yy) * out_w * 3;
    for (int xx = 0; xx < out_w; ++xx) {
      const int at = flip ? out_w - 1 - xx : xx;
      for (int k = 0; k < 3; ++k) {
        o[at * 3 + k] = static_cast<uint8_t>(ScalarSum(in, start, weights, kx, xx, k));
      }
    }
  }
}
#else
using D4 = hn::FixedTag<float, 4>;

// Output pixel xx of one row: [R G B x] before rounding. kKx > 0 fixes the
// tap count at compile time (the loop unrolls); 0 reads it from `kx`.
template <int kKx>
HWY_INLINE hn::Vec<D4> Pixel(const float* in, const int* start, const float* weights, int kx,
                             int xx) {
  const D4 d;
  const int taps = kKx > 0 ? kKx : kx;
  const float* p = in + static_cast<size_t>(start[xx]) * 3;
  const float* k = weights + static_cast<size_t>(xx) * taps;
  auto acc = hn::Zero(d);
  for (int i = 0; i < taps; ++i) acc = hn::MulAdd(hn::Set(d, k[i]), hn::LoadU(d, p + 3 * i), acc);
  return acc;
}

// PIL's rounding to uint8: floor(v + 0.5), clamped to [0, 255].
HWY_INLINE hn::Vec<D4> Round8(hn::Vec<D4> v) {
  const D4 d;
  return hn::Min(hn::Max(hn::Floor(hn::Add(v, hn::Set(d, 0.5f))), hn::Zero(d)),
                 hn::Set(d, 255.0f));
}

// The same rounding to int32 lanes. floor(v + 0.5) clamped is the
// truncation of v + 0.5 clamped to [0, 255], and a value in range needs no
// overflow fix-up (the generic conversion's), so x86 converts it directly.
HWY_INLINE hn::Vec<hn::Rebind<int32_t, D4>> Round8ToInt(hn::Vec<D4> v) {
  const D4 d;
  const auto in_range = hn::Min(hn::Max(hn::Add(v, hn::Set(d, 0.5f)), hn::Zero(d)), hn::Set(d, 255.0f));
#if HWY_ARCH_X86 && HWY_TARGET != HWY_EMU128
  return hn::Vec<hn::Rebind<int32_t, D4>>{_mm_cvttps_epi32(in_range.raw)};
#else
  return hn::ConvertTo(hn::Rebind<int32_t, D4>(), in_range);
#endif
}

// [R G B x] of 4 pixels -> the R, G and B of the 4 (a 4x4 transpose).
HWY_INLINE void Transpose4(hn::Vec<D4> p0, hn::Vec<D4> p1, hn::Vec<D4> p2, hn::Vec<D4> p3,
                           hn::Vec<D4>* r, hn::Vec<D4>* g, hn::Vec<D4>* b) {
  const D4 d;
  const auto t0 = hn::InterleaveLower(d, p0, p1);  // R0 R1 G0 G1
  const auto t1 = hn::InterleaveLower(d, p2, p3);  // R2 R3 G2 G3
  const auto t2 = hn::InterleaveUpper(d, p0, p1);  // B0 B1 x x
  const auto t3 = hn::InterleaveUpper(d, p2, p3);  // B2 B3 x x
  *r = hn::ConcatLowerLower(d, t1, t0);
  *g = hn::ConcatUpperUpper(d, t1, t0);
  *b = hn::ConcatLowerLower(d, t3, t2);
}

// The CHW output: float planes get v * a[k] + b[k], uint8 planes v (values
// already whole and in [0, 255]).
struct Planes {
  float* f;
  uint8_t* u8;
  size_t plane;
  const float* a;
  const float* b;

  // Four consecutive values of channel k at `at`, before rounding.
  HWY_INLINE void Store4(int k, hn::Vec<D4> v, size_t at) const {
    const D4 d;
    if (f) {
      hn::StoreU(hn::MulAdd(Round8(v), hn::Set(d, a[k]), hn::Set(d, b[k])), d, f + k * plane + at);
    } else {
      const hn::Rebind<uint8_t, D4> d8;
      hn::StoreU(hn::DemoteTo(d8, Round8ToInt(v)), d8, u8 + k * plane + at);
    }
  }
  // One pixel's three values.
  HWY_INLINE void Store1(const float* px, size_t at) const {
    for (int k = 0; k < 3; ++k) {
      if (f) {
        f[k * plane + at] = px[k] * a[k] + b[k];
      } else {
        u8[k * plane + at] = static_cast<uint8_t>(px[k]);
      }
    }
  }
};

// Rows of `span` interleaved RGB floats -> rows y0 .. y0 + n - 1 of three
// planes of out_w columns, `plane` values apart. Float planes get v * a[k] + b[k]; uint8 planes the rounded
// value. `flip` mirrors the columns.
template <int kKx>
void HorizontalRgbPlanarK(const float* rows, size_t row_floats, const int* start,
                          const float* weights, int kx, int out_w, size_t plane, int y0, int n,
                          bool flip, const float* a, const float* b, float* out_f,
                          uint8_t* out_u8) {
  const D4 d;
  const Planes out{out_f, out_u8, plane, a, b};
  for (int yy = y0; yy < y0 + n; ++yy) {
    const float* in = rows + static_cast<size_t>(yy - y0) * row_floats;
    const size_t row0 = static_cast<size_t>(yy) * out_w;
    int xx = 0;
    for (; xx + 4 <= out_w; xx += 4) {
      hn::Vec<D4> r, g, bl;
      Transpose4(Pixel<kKx>(in, start, weights, kx, xx), Pixel<kKx>(in, start, weights, kx, xx + 1),
                 Pixel<kKx>(in, start, weights, kx, xx + 2),
                 Pixel<kKx>(in, start, weights, kx, xx + 3), &r, &g, &bl);
      size_t at = row0 + xx;
      if (flip) {
        r = hn::Reverse(d, r);
        g = hn::Reverse(d, g);
        bl = hn::Reverse(d, bl);
        at = row0 + (out_w - 4 - xx);
      }
      out.Store4(0, r, at);
      out.Store4(1, g, at);
      out.Store4(2, bl, at);
    }
    for (; xx < out_w; ++xx) {  // the last < 4 pixels, one at a time
      alignas(16) float px[4];
      hn::Store(Round8(Pixel<kKx>(in, start, weights, kx, xx)), d, px);
      out.Store1(px, row0 + (flip ? out_w - 1 - xx : xx));
    }
  }
}

// Calls f with the tap count as a constant where one is compiled in (2:
// upscaling; 3 to 5: shrinking up to 2x, every crop DCT scaling leaves), or
// 0 (the count read at run time).
template <typename F>
HWY_INLINE void WithTaps(int kx, const F& f) {
  switch (kx) {
    case 2: return f(std::integral_constant<int, 2>());
    case 3: return f(std::integral_constant<int, 3>());
    case 4: return f(std::integral_constant<int, 4>());
    case 5: return f(std::integral_constant<int, 5>());
    default: return f(std::integral_constant<int, 0>());
  }
}

void HorizontalRgbPlanar(const float* rows, size_t row_floats, const int* start,
                         const float* weights, int kx, int out_w, size_t plane, int y0, int n,
                         bool flip, const float* a, const float* b, float* out_f, uint8_t* out_u8) {
  WithTaps(kx, [&](auto taps) {
    HorizontalRgbPlanarK<decltype(taps)::value>(rows, row_floats, start, weights, kx, out_w, plane, y0, n, flip, a,
                                                b, out_f, out_u8);
  });
}

// Interleaved uint8 RGB (HWC, w x h) -> planes: float v * a[k] + b[k], or
// uint8. Reads one byte past the last pixel (the caller pads the buffer).
void HwcToPlanes(const uint8_t* src, int w, int h, const float* a, const float* b, float* out_f,
                 uint8_t* out_u8, size_t plane) {
  const D4 d;
  const hn::Rebind<int32_t, D4> di;
  const hn::Rebind<uint8_t, D4> d8;
  const Planes out{out_f, out_u8, plane, a, b};
  const size_t count = static_cast<size_t>(w) * h;
  auto px = [&](size_t i) { return hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, src + i * 3))); };
  size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    hn::Vec<D4> r, g, bl;
    Transpose4(px(i), px(i + 1), px(i + 2), px(i + 3), &r, &g, &bl);
    out.Store4(0, r, i);
    out.Store4(1, g, i);
    out.Store4(2, bl, i);
  }
  for (; i < count; ++i) {
    const float v[3] = {static_cast<float>(src[i * 3]), static_cast<float>(src[i * 3 + 1]),
                        static_cast<float>(src[i * 3 + 2])};
    out.Store1(v, i);
  }
}

// Rows of interleaved RGB floats -> interleaved uint8 RGB (HWC), mirrored
// when `flip`. Each pixel is stored as 4 bytes, the 4th overwritten by the
// next pixel's; the row's last pixel is stored as 3.
template <int kKx>
void HorizontalRgbInterleavedK(const float* rows, size_t row_floats, const int* start,
                               const float* weights, int kx, int out_w, int out_h, bool flip,
                               uint8_t* out) {
  const D4 d;
  const hn::Rebind<int32_t, D4> di;
  const hn::Rebind<uint8_t, D4> d8;
  for (int yy = 0; yy < out_h; ++yy) {
    const float* in = rows + static_cast<size_t>(yy) * row_floats;
    uint8_t* o = out + static_cast<size_t>(yy) * out_w * 3;
    for (int at = 0; at < out_w; ++at) {  // in output order: each store after its left one
      const int xx = flip ? out_w - 1 - at : at;
      const auto px = hn::DemoteTo(d8, hn::ConvertTo(di, Round8(Pixel<kKx>(in, start, weights, kx, xx))));
      if (at + 1 < out_w) {
        hn::StoreU(px, d8, o + at * 3);
      } else {
        alignas(16) uint8_t last[16];
        hn::Store(px, d8, last);
        o[at * 3] = last[0];
        o[at * 3 + 1] = last[1];
        o[at * 3 + 2] = last[2];
      }
    }
  }
}

void HorizontalRgbInterleaved(const float* rows, size_t row_floats, const int* start,
                              const float* weights, int kx, int out_w, int out_h, bool flip,
                              uint8_t* out) {
  WithTaps(kx, [&](auto taps) {
    HorizontalRgbInterleavedK<decltype(taps)::value>(rows, row_floats, start, weights, kx, out_w, out_h, flip, out);
  });
}

#endif  // HWY_TARGET == HWY_SCALAR

}  // namespace HWY_NAMESPACE
}  // namespace nostall
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace nostall {

HWY_EXPORT(VerticalPass);
HWY_EXPORT(HorizontalRgbPlanar);
HWY_EXPORT(HorizontalRgbInterleaved);
HWY_EXPORT(HwcToPlanes);

namespace {

// The weights kept `ksize` apart, of which no output pixel uses more than
// its bounds' count: repacked that many apart (an upscale's window holds 3
// pixels, its taps are never more than 2), so the passes' fixed-tap loops
// skip the weights that are always zero. The sums are unchanged (each
// dropped term was 0 x a finite value). Returns the new spacing.
int TrimTaps(const std::vector<int>& bounds, int out_size, int ksize, std::vector<float>* weights) {
  int used = 1;
  for (int xx = 0; xx < out_size; ++xx) used = std::max(used, bounds[xx * 2 + 1]);
  if (used >= ksize) return ksize;
  for (int xx = 0; xx < out_size; ++xx) {
    std::copy_n(weights->data() + static_cast<size_t>(xx) * ksize, used,
                weights->data() + static_cast<size_t>(xx) * used);
  }
  weights->resize(static_cast<size_t>(out_size) * used);
  return used;
}

// PIL's precompute_coeffs for the bilinear filter (support 1): for each
// output pixel, the first input pixel, the tap count and normalised weights.
int PrecomputeWeights(int in_size, double in0, double in1, int out_size, std::vector<int>* bounds,
                      std::vector<float>* weights) {
  const double scale = (in1 - in0) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  const int ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  bounds->assign(static_cast<size_t>(out_size) * 2, 0);
  weights->assign(static_cast<size_t>(out_size) * ksize, 0.0f);
  const double ss = 1.0 / filterscale;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    xmax = std::clamp(xmax, 0, ksize);
    float* k = weights->data() + static_cast<size_t>(xx) * ksize;
    double total = 0;
    for (int i = 0; i < xmax; ++i) {
      double t = std::abs((i + xmin - center + 0.5) * ss);
      double v = t < 1.0 ? 1.0 - t : 0.0;
      k[i] = static_cast<float>(v);
      total += v;
    }
    if (total > 0) {
      for (int i = 0; i < xmax; ++i) k[i] = static_cast<float>(k[i] / total);
    } else if (xmax == 0) {  // a box entirely off the image edge: take the edge
      xmin = std::clamp(static_cast<int>(center), 0, in_size - 1);
      xmax = 1;
      k[0] = 1.0f;
    }
    (*bounds)[xx * 2] = xmin;
    (*bounds)[xx * 2 + 1] = xmax;
  }
  return TrimTaps(*bounds, out_size, ksize, weights);
}

// Rows of the vertical pass's output held at a time: a block stays in the
// cache between the two passes (the whole intermediate of a large output
// is megabytes, written out to memory and read back).
constexpr size_t kBlockBytes = 64 << 10;

struct Passes {
  int kx = 0, ky = 0, col0 = 0, block = 0;
  size_t row_floats = 0, span = 0;
};

// Weights for both directions; the horizontal pass's first tap per output
// pixel (relative to col0) in s->start; s->rows sized for a block of rows.
Passes Plan(int width, int height, int c, double x, double y, double w, double h, int out_w,
            int out_h, ResampleScratch* s) {
  Passes p;
  p.kx = PrecomputeWeights(width, x, x + w, out_w, &s->bounds_x, &s->weights_x);
  p.ky = PrecomputeWeights(height, y, y + h, out_h, &s->bounds_y, &s->weights_y);
  p.col0 = s->bounds_x[0];
  int col1 = p.col0;
  for (int xx = 0; xx < out_w; ++xx) {
    col1 = std::max(col1, s->bounds_x[xx * 2] + s->bounds_x[xx * 2 + 1]);
  }
  p.span = static_cast<size_t>(std::max(col1 - p.col0, 1)) * c;
  // Each row padded so that a pixel's fixed kx taps (weights past its own
  // taps are zero) and the 4-float loads stay inside finite values.
  p.row_floats = p.span + static_cast<size_t>(p.kx) * c + 4;
  p.block = static_cast<int>(std::clamp<size_t>(kBlockBytes / (p.row_floats * sizeof(float)), 1,
                                                static_cast<size_t>(std::max(out_h, 1))));
  s->rows.resize(p.row_floats * p.block);
  for (int yy = 0; yy < p.block; ++yy) {
    float* row = s->rows.data() + static_cast<size_t>(yy) * p.row_floats;
    std::fill(row + p.span, row + p.row_floats, 0.0f);
  }
  s->start.resize(out_w);
  for (int xx = 0; xx < out_w; ++xx) s->start[xx] = s->bounds_x[xx * 2] - p.col0;
  return p;
}

// The vertical pass for output rows y0 .. y0 + n - 1, into s->rows.
void Vertical(const uint8_t* src, size_t stride, int c, const Passes& p, int y0, int n,
              ResampleScratch* s) {
  HWY_DYNAMIC_DISPATCH(VerticalPass)(src, stride, static_cast<size_t>(p.col0) * c, p.span,
                                     s->bounds_y.data() + 2 * y0,
                                     s->weights_y.data() + static_cast<size_t>(y0) * p.ky, p.ky, n,
                                     p.row_floats, s->rows.data());
}

}  // namespace

void ResampleBox(const uint8_t* src, int width, int height, size_t stride, int channels, double x,
                 double y, double w, double h, uint8_t* dst, int out_w, int out_h,
                 ResampleScratch* s, bool flip) {
  const int c = channels;
  const Passes p = Plan(width, height, c, x, y, w, h, out_w, out_h, s);
  for (int y0 = 0; y0 < out_h; y0 += p.block) {
    const int n = std::min(p.block, out_h - y0);
    Vertical(src, stride, c, p, y0, n, s);
    uint8_t* out_rows = dst + static_cast<size_t>(y0) * out_w * c;
    if (c == 3) {
      HWY_DYNAMIC_DISPATCH(HorizontalRgbInterleaved)(s->rows.data(), p.row_floats, s->start.data(),
                                                     s->weights_x.data(), p.kx, out_w, n, flip,
                                                     out_rows);
      continue;
    }
    // Other channel counts: the same sum, scalar.
    for (int yy = 0; yy < n; ++yy) {
      const float* in = s->rows.data() + static_cast<size_t>(yy) * p.row_floats;
      uint8_t* out = out_rows + static_cast<size_t>(yy) * out_w * c;
      for (int xx = 0; xx < out_w; ++xx) {
        const float* k = s->weights_x.data() + static_cast<size_t>(xx) * p.kx;
        const float* q = in + static_cast<size_t>(s->start[xx]) * c;
        const int at = flip ? out_w - 1 - xx : xx;
        for (int ch = 0; ch < c; ++ch) {
          float a = 0.5f;
          for (int i = 0; i < p.kx; ++i) a += k[i] * q[i * c + ch];
          out[at * c + ch] = static_cast<uint8_t>(std::clamp(a, 0.0f, 255.0f));
        }
      }
    }
  }
}

bool ResampleBoxPlanar(const uint8_t* src, int width, int height, size_t stride, int channels,
                       double x, double y, double w, double h, int out_w, int out_h, bool flip,
                       const float* a, const float* b, float* dst_f32, uint8_t* dst_u8,
                       ResampleScratch* s, size_t plane_stride) {
  if (channels != 3) return false;
  const size_t plane = plane_stride != 0 ? plane_stride : static_cast<size_t>(out_w) * out_h;
  const Passes p = Plan(width, height, 3, x, y, w, h, out_w, out_h, s);
  for (int y0 = 0; y0 < out_h; y0 += p.block) {
    const int n = std::min(p.block, out_h - y0);
    Vertical(src, stride, 3, p, y0, n, s);
    HWY_DYNAMIC_DISPATCH(HorizontalRgbPlanar)(s->rows.data(), p.row_floats, s->start.data(),
                                              s->weights_x.data(), p.kx, out_w, plane, y0, n, flip,
                                              a, b, dst_f32, dst_u8);
  }
  return true;
}

void InterleavedToPlanes(const uint8_t* src, int w, int h, const float* a, const float* b,
                         float* dst_f32, uint8_t* dst_u8, size_t plane_stride) {
  HWY_DYNAMIC_DISPATCH(HwcToPlanes)(src, w, h, a, b, dst_f32, dst_u8,
                                    plane_stride != 0 ? plane_stride : static_cast<size_t>(w) * h);
}

}  // namespace nostall
#endif  // HWY_ONCE
