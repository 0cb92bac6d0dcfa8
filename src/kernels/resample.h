// Resampling of a fractional source box, with PIL's antialiased filters.
//
// Written by hand because no library at hand does this one thing: torchvision
// on PIL images resizes the *exact* (fractional) crop box with a triangle
// filter whose support widens with the downscale factor. OpenCV's resize
// takes only whole-pixel regions and has no such filter; cropping to whole
// pixels first shifts the output by up to half a pixel. Two separable passes
// (vertical, then horizontal, a block of rows at a time) over a float
// intermediate, vectorised with Google Highway (resample.cc).
#ifndef NOSTALL_KERNELS_RESAMPLE_H_
#define NOSTALL_KERNELS_RESAMPLE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nostall {

struct ResampleScratch {
  std::vector<float> rows;       // vertical pass output, a block of rows
  std::vector<float> weights_x, weights_y;
  std::vector<int> bounds_x, bounds_y;  // per output pixel: first tap, tap count
  std::vector<int> start;               // per output column: first tap in `rows`
};

// Resamples the box (x, y, w, h) of `src` (height x width pixels of
// `channels` interleaved uint8, rows `stride` bytes apart) to out_w x out_h
// interleaved uint8 pixels at `dst`, mirrored left-right when `flip`.
// Bilinear (triangle) filter; when shrinking, its support scales with the
// factor, as PIL's does.
void ResampleBox(const uint8_t* src, int width, int height, size_t stride, int channels, double x,
                 double y, double w, double h, uint8_t* dst, int out_w, int out_h,
                 ResampleScratch* scratch, bool flip = false);

// The same resample written as planes (CHW), fused with what follows it:
// each rounded value v becomes v * a[k] + b[k] in float32 planes (dst_f32),
// or v in uint8 planes (dst_u8, when dst_f32 is null); `flip` mirrors the
// columns. Pixels are written once, into `dst`; the planes `plane_stride`
// values apart (0: out_w x out_h, one after the other; a clip's (C, T, H, W)
// puts a frame's planes T x H x W apart). False (nothing written) for
// channel counts other than 3.
bool ResampleBoxPlanar(const uint8_t* src, int width, int height, size_t stride, int channels,
                       double x, double y, double w, double h, int out_w, int out_h, bool flip,
                       const float* a, const float* b, float* dst_f32, uint8_t* dst_u8,
                       ResampleScratch* scratch, size_t plane_stride = 0);

// Interleaved RGB (w x h, HWC) to planes (CHW), as ResampleBoxPlanar writes
// them (float32 v * a[k] + b[k], or uint8 when dst_f32 is null), the planes
// `plane_stride` values apart (0: w x h). Reads one byte past the last
// pixel: `src` must have it.
void InterleavedToPlanes(const uint8_t* src, int w, int h, const float* a, const float* b,
                         float* dst_f32, uint8_t* dst_u8, size_t plane_stride = 0);

}  // namespace nostall

#endif  // NOSTALL_KERNELS_RESAMPLE_H_
