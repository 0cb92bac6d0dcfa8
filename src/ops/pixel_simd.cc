// The per-byte loops of the colour ops, vectorised with Google Highway and
// dispatched at run time. Each vector lane does exactly the scalar
// computation of functional.cc (the same float operations in the same order,
// no fused multiply-adds), so the results stay bit-identical to PIL's.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/pixel_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>

#include "ops/pixel_simd.h"

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

}  // namespace HWY_NAMESPACE
}  // namespace nostall
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace nostall {

HWY_EXPORT(BlendConstant);
HWY_EXPORT(SharpnessRow);

void BlendWithConstant(uint8_t* p, size_t n, float degenerate, float alpha) {
  HWY_DYNAMIC_DISPATCH(BlendConstant)(p, n, degenerate, alpha);
}

void SharpnessBlendRow(const uint8_t* up, const uint8_t* mid, const uint8_t* down, uint8_t* out,
                       size_t row, int c, float alpha) {
  HWY_DYNAMIC_DISPATCH(SharpnessRow)(up, mid, down, out, row, c, alpha);
}

}  // namespace nostall
#endif  // HWY_ONCE
