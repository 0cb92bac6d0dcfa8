// Vectorised per-byte loops of the colour ops (pixel_simd.cc), bit-identical
// to their scalar definitions in functional.cc.
#ifndef NOSTALL_KERNELS_PIXEL_SIMD_H_
#define NOSTALL_KERNELS_PIXEL_SIMD_H_

#include <cstddef>
#include <cstdint>

namespace nostall {

// p[i] = ImagingBlend(degenerate, p[i], alpha) for n bytes.
void BlendWithConstant(uint8_t* p, size_t n, float degenerate, float alpha);

// out[i] for i in [c, row - c): ImageEnhance.Sharpness of the middle row
// (SMOOTH over up/mid/down, rounded, then blended with alpha).
void SharpnessBlendRow(const uint8_t* up, const uint8_t* mid, const uint8_t* down, uint8_t* out,
                       size_t row, int c, float alpha);

// Image.transform(AFFINE, BILINEAR) of a w x h RGB image (`in`, with one
// byte of slack after the last pixel) into `out`, PIL's double arithmetic per
// lane. False (nothing written) where the CPU has no SIMD target.
bool AffineBilinearRgbSimd(const uint8_t* in, int w, int h, const double a[6],
                           const uint8_t fill[3], uint8_t* out);

// AdjustHue's PIL HSV round trip with the hue byte shifted by `shift` on the
// first pixels of `px` RGB pixels at p: returns how many it did (a whole
// number of vectors; the scalar loop does the rest).
size_t HueRgbSimd(uint8_t* p, size_t px, int shift);

// AdjustSaturation's blend of each channel with the pixel's luma on the
// first pixels of `px` RGB pixels at p: returns how many it did (a whole
// number of vectors; the scalar loop does the rest).
size_t SaturationRgbSimd(uint8_t* p, size_t px, float alpha);

}  // namespace nostall

#endif  // NOSTALL_KERNELS_PIXEL_SIMD_H_
