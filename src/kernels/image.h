// What the pixel kernels work on: an interleaved 8-bit image, the scratch
// buffers they reuse, and PIL's luma (the decoders' gray, and the kernels').
#ifndef NOSTALL_KERNELS_IMAGE_H_
#define NOSTALL_KERNELS_IMAGE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nostall {

// An interleaved 8-bit image, rows contiguous (w * c bytes apart). data may
// be null: an op then only draws (and records) its parameters.
struct ImageView {
  uint8_t* data = nullptr;
  int h = 0, w = 0, c = 0;
  size_t bytes() const { return static_cast<size_t>(h) * w * c; }
};

// Per-thread buffers a kernel may use; reused from sample to sample.
struct KernelScratch {
  std::vector<uint8_t> tmp, tmp2;
  std::vector<float> ftmp;
};

// PIL's ITU-R 601 luma: (19595 R + 38470 G + 7471 B + 2^15) >> 16.
inline uint8_t Luma(const uint8_t* p) {
  return static_cast<uint8_t>((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
}

}  // namespace nostall

#endif  // NOSTALL_KERNELS_IMAGE_H_
