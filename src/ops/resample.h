// Resampling of a fractional source box, with PIL's antialiased filters.
//
// Written by hand because no library at hand does this one thing: torchvision
// on PIL images resizes the *exact* (fractional) crop box with a triangle
// filter whose support widens with the downscale factor. OpenCV's resize
// takes only whole-pixel regions and has no such filter; cropping to whole
// pixels first shifts the output by up to half a pixel. Two separable passes
// (vertical, then horizontal) over a float intermediate.
#ifndef NOSTALL_OPS_RESAMPLE_H_
#define NOSTALL_OPS_RESAMPLE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nostall {

struct ResampleScratch {
  std::vector<float> rows;       // vertical pass output
  std::vector<float> weights_x, weights_y;
  std::vector<int> bounds_x, bounds_y;  // per output pixel: first tap, tap count
};

// Resamples the box (x, y, w, h) of `src` (height x width pixels of
// `channels` interleaved uint8, rows `stride` bytes apart) to out_w x out_h
// interleaved uint8 pixels at `dst`. Bilinear (triangle) filter; when
// shrinking, its support scales with the factor, as PIL's does.
void ResampleBox(const uint8_t* src, int width, int height, size_t stride, int channels, double x,
                 double y, double w, double h, uint8_t* dst, int out_w, int out_h,
                 ResampleScratch* scratch);

}  // namespace nostall

#endif  // NOSTALL_OPS_RESAMPLE_H_
