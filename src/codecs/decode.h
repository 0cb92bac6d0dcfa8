// Image decoders. libjpeg's setjmp/longjmp error handling stays inside
// jpeg.cc; libpng's inside png.cc. Neither library appears in any header.
#ifndef NOSTALL_CODECS_DECODE_H_
#define NOSTALL_CODECS_DECODE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "nostall/status.h"

namespace nostall {

enum class ImageFormat { kUnknown, kJpeg, kPng, kWebp, kTiff, kBmp, kPnm };

ImageFormat SniffFormat(const uint8_t* data, size_t size);

struct ImageInfo {
  int width = 0;
  int height = 0;
};

// A decoded (part of an) image: interleaved 8-bit pixels, `channels` per
// pixel, rows `stride` bytes apart, held in a caller-owned buffer.
struct DecodedRegion {
  int width = 0, height = 0, channels = 0;
  size_t stride = 0;
  const uint8_t* pixels = nullptr;
  // The requested source rectangle, in this buffer's pixel coordinates.
  double x = 0, y = 0, w = 0, h = 0;
};

Status JpegReadInfo(const uint8_t* data, size_t size, ImageInfo* info);
// Decodes the source rectangle (x, y, w, h) at the smallest DCT scale of
// 1/8, 2/8, 4/8 (else 8/8) that keeps it at least `min_w` x `min_h` pixels,
// decoding only the needed
// rows and (to iMCU precision) columns. `channels` is 3 (RGB) or 1 (gray).
// min_w = min_h = 0 decodes at full resolution.
Status JpegDecodeRegion(const uint8_t* data, size_t size, int channels, double x, double y,
                        double w, double h, int min_w, int min_h, std::vector<uint8_t>* buf,
                        DecodedRegion* out);

Status PngReadInfo(const uint8_t* data, size_t size, ImageInfo* info);
Status PngDecode(const uint8_t* data, size_t size, int channels, std::vector<uint8_t>* buf,
                 DecodedRegion* out);
// Its first `rows` rows only (a crop's pixels end there; out->height says
// how many), when the file is not interlaced: the rows below are not decoded.
Status PngDecodeRows(const uint8_t* data, size_t size, int channels, uint32_t rows, std::vector<uint8_t>* buf,
                     DecodedRegion* out);

// The pixels [x0, x1) x [y0, y1) of a WebP image (clamped to it), and as
// few others as libwebp decodes them with: it starts at an even corner, so
// `out` may begin up to a pixel before (x0, y0); out->x, out->y are then
// minus the corner decoded (add the source rectangle's x and y to them).
// The same pixels as the whole image's decode.
Status WebpDecodeRegion(const uint8_t* data, size_t size, int channels, int x0, int y0, int x1, int y1,
                        std::vector<uint8_t>* buf, DecodedRegion* out);

// Any format SniffFormat knows (image_codecs.cc): the size, and (not JPEG,
// which decodes regions) the whole image as PIL's convert("RGB")/("L").
Status ImageReadInfo(ImageFormat format, const uint8_t* data, size_t size, ImageInfo* info);
Status DecodeWhole(ImageFormat format, const uint8_t* data, size_t size, int channels,
                   std::vector<uint8_t>* buf, DecodedRegion* out);

}  // namespace nostall

#endif  // NOSTALL_CODECS_DECODE_H_
