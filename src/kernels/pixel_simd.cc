// The per-byte loops of the colour ops, vectorised with Google Highway and
// dispatched at run time. Each vector lane does exactly the scalar
// computation of functional.cc (the same float operations in the same order,
// no fused multiply-adds), so the results stay bit-identical to PIL's.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/pixel_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>

#include "kernels/pixel_simd.h"

HWY_BEFORE_NAMESPACE();
namespace nostall {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// float(v) of N bytes at p.
template <class DF>
HWY_INLINE hn::Vec<DF> Bytes(DF df, const uint8_t* p) {
  const hn::Rebind<int32_t, DF> di;
  const hn::Rebind<uint8_t, DF> d8;
  return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, p)));
}

// ImagingBlend: truncate(deg + alpha * (v - deg)), clamped to [0, 255].
template <class DF>
HWY_INLINE hn::Vec<DF> Blend(DF df, hn::Vec<DF> deg, hn::Vec<DF> v, hn::Vec<DF> alpha) {
  const auto t = hn::Add(deg, hn::Mul(alpha, hn::Sub(v, deg)));
  return hn::Min(hn::Max(t, hn::Zero(df)), hn::Set(df, 255.0f));
}

template <class DF>
HWY_INLINE void StoreBytes(DF df, hn::Vec<DF> v, uint8_t* p) {
  const hn::Rebind<int32_t, DF> di;
  const hn::Rebind<uint8_t, DF> d8;
  hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, v)), d8, p);  // truncates, in range
}

void BlendConstant(uint8_t* p, size_t n, float degenerate, float alpha) {
  const hn::ScalableTag<float> df;
  const size_t lanes = hn::Lanes(df);
  const auto deg = hn::Set(df, degenerate), a = hn::Set(df, alpha);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) StoreBytes(df, Blend(df, deg, Bytes(df, p + i), a), p + i);
  for (; i < n; ++i) {
    const float t = degenerate + alpha * (static_cast<float>(p[i]) - degenerate);
    p[i] = static_cast<uint8_t>(std::clamp(t, 0.0f, 255.0f));
  }
}

// One row of ImageEnhance.Sharpness, bytes [c, row - c): the SMOOTH filter
// (rows below, centre, above, as PIL sums them), rounded, blended.
void SharpnessRow(const uint8_t* up, const uint8_t* mid, const uint8_t* down, uint8_t* out,
                  size_t row, int c, float alpha) {
  const hn::ScalableTag<float> df;
  const size_t lanes = hn::Lanes(df);
  const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
  const auto vk1 = hn::Set(df, k1), vk5 = hn::Set(df, k5), half = hn::Set(df, 0.5f);
  const auto a = hn::Set(df, alpha), zero = hn::Zero(df), top = hn::Set(df, 255.0f);
  auto three = [&](const uint8_t* r, size_t i, hn::Vec<decltype(df)> kc) {
    return hn::Add(hn::Add(hn::Mul(Bytes(df, r + i - c), vk1), hn::Mul(Bytes(df, r + i), kc)),
                   hn::Mul(Bytes(df, r + i + c), vk1));
  };
  size_t i = c;
  for (; i + lanes <= row - c; i += lanes) {
    auto ss = zero;
    ss = hn::Add(ss, three(down, i, vk1));
    ss = hn::Add(ss, three(mid, i, vk5));
    ss = hn::Add(ss, three(up, i, vk1));
    // clip8(ss + 0.5): clamp, then truncate
    const auto smooth = hn::Floor(hn::Min(hn::Max(hn::Add(ss, half), zero), top));
    StoreBytes(df, Blend(df, smooth, Bytes(df, mid + i), a), out + i);
  }
  for (; i < row - c; ++i) {
    float ss = 0.0f;
    ss += down[i - c] * k1 + down[i] * k1 + down[i + c] * k1;
    ss += mid[i - c] * k1 + mid[i] * k5 + mid[i + c] * k1;
    ss += up[i - c] * k1 + up[i] * k1 + up[i + c] * k1;
    const float smooth = static_cast<float>(static_cast<uint8_t>(std::clamp(ss + 0.5f, 0.0f, 255.0f)));
    const float t = smooth + alpha * (static_cast<float>(mid[i]) - smooth);
    out[i] = static_cast<uint8_t>(std::clamp(t, 0.0f, 255.0f));
  }
}

#if HWY_TARGET != HWY_SCALAR
// Image.transform(AFFINE, BILINEAR) of an RGB image, PIL's arithmetic in
// double per lane: the sample point (a0 (x + .5) + a1 (y + .5)) + a2, fill
// outside [0, w) x [0, h), taps clamped to the edge, the second row only if
// it exists, truncated. `in` has 1 byte of slack after its last pixel (each
// tap is read as 4 bytes).
bool AffineBilinearRgb(const uint8_t* in, int w, int h, const double* a, const uint8_t* fill,
                       uint8_t* out) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<int32_t, decltype(dd)> di;
  const size_t lanes = hn::Lanes(dd);
  const int32_t row = w * 3;
  const auto a0 = hn::Set(dd, a[0]), a1 = hn::Set(dd, a[1]), a2 = hn::Set(dd, a[2]);
  const auto a3 = hn::Set(dd, a[3]), a4 = hn::Set(dd, a[4]), a5 = hn::Set(dd, a[5]);
  const auto zero = hn::Zero(dd), half = hn::Set(dd, 0.5), one = hn::Set(dd, 1.0);
  const auto wd = hn::Set(dd, static_cast<double>(w)), hd = hn::Set(dd, static_cast<double>(h));
  const auto wmax = hn::Set(di, w - 1), hmax = hn::Set(di, h - 1), izero = hn::Zero(di);
  const auto three = hn::Set(di, 3), rowv = hn::Set(di, row), byte = hn::Set(di, 0xFF);
  const int32_t* base = reinterpret_cast<const int32_t*>(in);
  // yin = y + 0.5 for every pixel (dy = 0) / xin = x + 0.5 (dx = 0).
  const bool one_row = a[3] == 0.0 && a[4] == 1.0 && a[5] == 0.0;
  const bool one_column = a[0] == 1.0 && a[1] == 0.0 && a[2] == 0.0;
  alignas(64) int32_t px[HWY_MAX_BYTES / sizeof(double)];
  for (int y = 0; y < h; ++y) {
    const auto ys = hn::Set(dd, y + 0.5);
    const auto a1y = hn::Mul(a1, ys), a4y = hn::Mul(a4, ys);
    uint8_t* o = out + static_cast<size_t>(y) * row;
    for (int x = 0; x < w; x += static_cast<int>(lanes)) {
      const auto xs = hn::Add(hn::Iota(dd, static_cast<double>(x)), half);
      const auto xin = hn::Add(hn::Add(hn::Mul(a0, xs), a1y), a2);
      const auto yin = hn::Add(hn::Add(hn::Mul(a3, xs), a4y), a5);
      const auto inside = hn::And(hn::And(hn::Ge(xin, zero), hn::Lt(xin, wd)),
                                  hn::And(hn::Ge(yin, zero), hn::Lt(yin, hd)));
      const auto xm = hn::Sub(xin, half), ym = hn::Sub(yin, half);
      const auto x0f = hn::Floor(xm), y0f = hn::Floor(ym);
      const auto dx = hn::Sub(xm, x0f), dy = hn::Sub(ym, y0f);
      const auto has_r1 = hn::And(hn::Ge(hn::Add(y0f, one), zero), hn::Lt(hn::Add(y0f, one), hd));
      // Indices: clamped (outside lanes are filled, but still read memory).
      const auto x0 = hn::DemoteTo(di, hn::Min(hn::Max(x0f, hn::Set(dd, -1.0)), wd));
      const auto y0 = hn::DemoteTo(di, hn::Min(hn::Max(y0f, hn::Set(dd, -1.0)), hd));
      const auto xa = hn::Mul(hn::Min(hn::Max(x0, izero), wmax), three);
      const auto xb = hn::Mul(hn::Min(hn::Max(hn::Add(x0, hn::Set(di, 1)), izero), wmax), three);
      const auto r0 = hn::Mul(hn::Min(hn::Max(y0, izero), hmax), rowv);
      const auto r1 = hn::Mul(hn::Min(hn::Max(hn::Add(y0, hn::Set(di, 1)), izero), hmax), rowv);
      // A shear along x samples one row (dy is exactly 0: v1 + (v2 - v1) * 0
      // is v1), one along y one column (dx is 0): half the taps are unused.
      const auto p00 = hn::GatherOffset(di, base, hn::Add(r0, xa));
      const auto p01 = one_column ? p00 : hn::GatherOffset(di, base, hn::Add(r0, xb));
      const auto p10 = one_row ? p00 : hn::GatherOffset(di, base, hn::Add(r1, xa));
      const auto p11 = one_row ? p01 : one_column ? p10 : hn::GatherOffset(di, base, hn::Add(r1, xb));
      auto result = hn::Zero(di);
      for (int k = 0; k < 3; ++k) {
        auto channel = [&](hn::Vec<decltype(di)> p) {
          return hn::PromoteTo(dd, hn::And(hn::ShiftRightSame(p, 8 * k), byte));
        };
        const auto c00 = channel(p00), c01 = channel(p01), c10 = channel(p10), c11 = channel(p11);
        const auto v1 = hn::Add(c00, hn::Mul(hn::Sub(c01, c00), dx));
        const auto v2 = hn::IfThenElse(has_r1, hn::Add(c10, hn::Mul(hn::Sub(c11, c10), dx)), v1);
        const auto v = hn::IfThenElse(inside, hn::Add(v1, hn::Mul(hn::Sub(v2, v1), dy)),
                                      hn::Set(dd, static_cast<double>(fill[k])));
        result = hn::Or(result, hn::ShiftLeftSame(hn::DemoteTo(di, v), 8 * k));
      }
      hn::Store(result, di, px);
      static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "px[i] is stored as R, G, B bytes");
      // Each pixel as 4 little-endian bytes, in order: the 4th lands on the
      // next pixel's first byte (written next, or with the next row), except
      // for the image's very last pixel, written as 3.
      const int n = std::min(static_cast<int>(lanes), w - x);
      const bool last_row = y == h - 1;
      for (int i = 0; i < n; ++i) {
        uint8_t* dst = o + (x + i) * 3;
        if (last_row && x + i == w - 1) {
          dst[0] = static_cast<uint8_t>(px[i]);
          dst[1] = static_cast<uint8_t>(px[i] >> 8);
          dst[2] = static_cast<uint8_t>(px[i] >> 16);
        } else {
          std::memcpy(dst, &px[i], 4);
        }
      }
    }
  }
  return true;
}
#else
// The scalar target has no gathers: the caller's scalar loop does it there.
bool AffineBilinearRgb(const uint8_t*, int, int, const double*, const uint8_t*, uint8_t*) {
  return false;
}
#endif

// Lanes(di) RGB pixels at q, each channel in int32 lanes.
template <class DI>
HWY_INLINE void LoadRgb(DI di, const uint8_t* q, hn::Vec<DI>* r, hn::Vec<DI>* g, hn::Vec<DI>* b) {
  const hn::Rebind<uint8_t, DI> d8;
  hn::Vec<decltype(d8)> r8, g8, b8;
  hn::LoadInterleaved3(d8, q, r8, g8, b8);
  *r = hn::PromoteTo(di, r8);
  *g = hn::PromoteTo(di, g8);
  *b = hn::PromoteTo(di, b8);
}

// ImageEnhance.Color: each channel blended with the pixel's luma (PIL's
// integer luma, ImagingBlend's float blend), a lane a pixel. Returns the
// pixels done (a whole number of vectors); the caller does the rest.
size_t SaturationRgb(uint8_t* p, size_t px, float alpha) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<int32_t, decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(df)> d8;
  const size_t lanes = hn::Lanes(df);
  const auto a = hn::Set(df, alpha), fzero = hn::Zero(df), f255 = hn::Set(df, 255.0f);
  size_t done = 0;
  for (; done + lanes <= px; done += lanes) {
    uint8_t* q = p + done * 3;
    hn::Vec<decltype(di)> r, g, b;
    LoadRgb(di, q, &r, &g, &b);
    // (19595 R + 38470 G + 7471 B + 2^15) >> 16, as Luma.
    const auto luma = hn::ShiftRight<16>(hn::Add(
        hn::Add(hn::Add(hn::Mul(r, hn::Set(di, 19595)), hn::Mul(g, hn::Set(di, 38470))), hn::Mul(b, hn::Set(di, 7471))),
        hn::Set(di, 0x8000)));
    const auto lf = hn::ConvertTo(df, luma);
    auto blend = [&](hn::Vec<decltype(di)> v) {
      const auto t = hn::Add(lf, hn::Mul(a, hn::ConvertTo(df, hn::Sub(v, luma))));
      return hn::DemoteTo(d8, hn::ConvertTo(di, hn::Min(hn::Max(t, fzero), f255)));  // truncated, in range
    };
    hn::StoreInterleaved3(blend(r), blend(g), blend(b), d8, q);
  }
  return done;
}

// PIL's RGB -> HSV -> RGB with the hue shifted (functional.cc's AdjustHue),
// a lane a pixel: each float step in float lanes, each double step in double
// lanes, in the scalar code's order. Returns the pixels done (a whole number
// of vectors); the caller does the rest.
size_t HueRgb(uint8_t* p, size_t px, int shift) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  const hn::Rebind<int32_t, decltype(dd)> di;
  const hn::Rebind<uint8_t, decltype(dd)> d8;
  const size_t lanes = hn::Lanes(dd);
  const auto zero = hn::Zero(di), one = hn::Set(di, 1), top = hn::Set(di, 255), six = hn::Set(di, 6);
  const auto shift_v = hn::Set(di, shift), byte = hn::Set(di, 0xFF);
  const auto d255 = hn::Set(dd, 255.0), d6 = hn::Set(dd, 6.0), d1 = hn::Set(dd, 1.0), half = hn::Set(dd, 0.5);
  auto to_d = [&](hn::Vec<decltype(df)> v) { return hn::PromoteTo(dd, v); };
  auto to_f = [&](hn::Vec<decltype(dd)> v) { return hn::DemoteTo(df, v); };
  auto fl = [&](hn::Vec<decltype(di)> v) { return hn::ConvertTo(df, v); };
  auto clip = [&](hn::Vec<decltype(dd)> v) {  // clamp(int(v + 0.5), 0, 255)
    return hn::Min(hn::Max(hn::DemoteTo(di, hn::Add(v, half)), zero), top);
  };
  size_t done = 0;
  for (; done + lanes <= px; done += lanes) {
    uint8_t* q = p + done * 3;
    hn::Vec<decltype(di)> r, g, b;
    LoadRgb(di, q, &r, &g, &b);
    const auto maxc = hn::Max(r, hn::Max(g, b)), minc = hn::Min(r, hn::Min(g, b));
    const auto cr = hn::Sub(maxc, minc);
    const auto gray = hn::Eq(cr, zero);
    const auto crf = fl(hn::Max(cr, one));  // (gray lanes: any divisor; their result is unused)
    const auto s = hn::Div(fl(cr), fl(hn::Max(maxc, one)));
    const auto rc = hn::Div(fl(hn::Sub(maxc, r)), crf);
    const auto gc = hn::Div(fl(hn::Sub(maxc, g)), crf);
    const auto bc = hn::Div(fl(hn::Sub(maxc, b)), crf);
    const auto case_r = hn::Sub(bc, gc);
    const auto case_g = to_f(hn::Sub(hn::Add(hn::Set(dd, 2.0), to_d(rc)), to_d(bc)));
    const auto case_b = to_f(hn::Sub(hn::Add(hn::Set(dd, 4.0), to_d(gc)), to_d(rc)));
    const auto h6 = hn::IfThenElse(hn::RebindMask(df, hn::Eq(r, maxc)), case_r,
                                   hn::IfThenElse(hn::RebindMask(df, hn::Eq(g, maxc)), case_g, case_b));
    const auto x = hn::Add(hn::Div(to_d(h6), d6), d1);
    const auto h = to_f(hn::Sub(x, hn::Floor(x)));
    auto uh = hn::Min(hn::Max(hn::DemoteTo(di, hn::Mul(to_d(h), d255)), zero), top);
    auto us = hn::Min(hn::Max(hn::DemoteTo(di, hn::Mul(to_d(s), d255)), zero), top);
    uh = hn::IfThenZeroElse(gray, uh);
    us = hn::IfThenZeroElse(gray, us);
    uh = hn::And(hn::Add(uh, shift_v), byte);
    // hsv2rgb.
    const auto hh = hn::Div(hn::Mul(to_d(fl(uh)), d6), d255);
    auto seg = hn::DemoteTo(di, hh);  // (>= 0: truncation is floor)
    const auto f = to_f(hn::Sub(hh, hn::PromoteTo(dd, seg)));
    const auto fs = hn::Div(fl(us), hn::Set(df, 255.0f));
    const auto uvd = to_d(fl(maxc));
    const auto pv = clip(hn::Mul(uvd, hn::Sub(d1, to_d(fs))));
    const auto qv = clip(hn::Mul(uvd, hn::Sub(d1, to_d(hn::Mul(fs, f)))));
    const auto tv = clip(hn::Mul(uvd, hn::Sub(d1, hn::Mul(to_d(fs), hn::Sub(d1, to_d(f))))));
    seg = hn::IfThenElse(hn::Eq(seg, six), zero, seg);
    auto pick = [&](int s0, int s1, int s2, int s3, int s4, int s5) {
      const hn::Vec<decltype(di)> values[4] = {maxc, pv, qv, tv};
      const int which[6] = {s0, s1, s2, s3, s4, s5};
      auto v = values[which[5]];
      for (int k = 4; k >= 0; --k) v = hn::IfThenElse(hn::Eq(seg, hn::Set(di, k)), values[which[k]], v);
      return hn::IfThenElse(hn::Eq(us, zero), maxc, v);
    };
    // The sectors as functional.cc's table (v, p, q, t = 0, 1, 2, 3); values in [0, 255].
    hn::StoreInterleaved3(hn::DemoteTo(d8, pick(0, 2, 1, 1, 3, 0)), hn::DemoteTo(d8, pick(3, 0, 0, 2, 1, 1)),
                          hn::DemoteTo(d8, pick(1, 1, 3, 0, 0, 2)), d8, q);
  }
  return done;
}

}  // namespace HWY_NAMESPACE
}  // namespace nostall
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace nostall {

HWY_EXPORT(BlendConstant);
HWY_EXPORT(SharpnessRow);
HWY_EXPORT(AffineBilinearRgb);
HWY_EXPORT(HueRgb);
HWY_EXPORT(SaturationRgb);

size_t HueRgbSimd(uint8_t* p, size_t px, int shift) { return HWY_DYNAMIC_DISPATCH(HueRgb)(p, px, shift); }

size_t SaturationRgbSimd(uint8_t* p, size_t px, float alpha) {
  return HWY_DYNAMIC_DISPATCH(SaturationRgb)(p, px, alpha);
}

void BlendWithConstant(uint8_t* p, size_t n, float degenerate, float alpha) {
  HWY_DYNAMIC_DISPATCH(BlendConstant)(p, n, degenerate, alpha);
}

void SharpnessBlendRow(const uint8_t* up, const uint8_t* mid, const uint8_t* down, uint8_t* out,
                       size_t row, int c, float alpha) {
  HWY_DYNAMIC_DISPATCH(SharpnessRow)(up, mid, down, out, row, c, alpha);
}

bool AffineBilinearRgbSimd(const uint8_t* in, int w, int h, const double a[6],
                           const uint8_t fill[3], uint8_t* out) {
  return HWY_DYNAMIC_DISPATCH(AffineBilinearRgb)(in, w, h, a, fill, out);
}

}  // namespace nostall
#endif  // HWY_ONCE
