// PNG decoding through libpng's simplified API.
#include <png.h>

#include <string>

#include "ops/decode.h"
#include "ops/functional.h"

namespace nostall {
namespace {

// Frees libpng's state on every exit path.
struct PngImage {
  png_image image{};
  PngImage() { image.version = PNG_IMAGE_VERSION; }
  ~PngImage() { png_image_free(&image); }
  PngImage(const PngImage&) = delete;
  PngImage& operator=(const PngImage&) = delete;
};

}  // namespace

Status PngReadInfo(const uint8_t* data, size_t size, ImageInfo* info) {
  PngImage p;
  if (!png_image_begin_read_from_memory(&p.image, data, size)) {
    return DataError(std::string("bad PNG: ") + p.image.message);
  }
  info->width = static_cast<int>(p.image.width);
  info->height = static_cast<int>(p.image.height);
  return Status::OK();
}

Status PngDecode(const uint8_t* data, size_t size, int channels, std::vector<uint8_t>* buf,
                 DecodedRegion* out) {
  PngImage p;
  if (!png_image_begin_read_from_memory(&p.image, data, size)) {
    return DataError(std::string("bad PNG: ") + p.image.message);
  }
  // Gray from a colour PNG is PIL's convert("L") (ITU-R 601 luma of the
  // 8-bit values), not libpng's, which converts in linear light with sRGB
  // weights (up to ~40 levels apart): decode RGB, then take the luma.
  const bool luma = channels == 1 && (p.image.format & PNG_FORMAT_FLAG_COLOR) != 0;
  const int decoded_channels = luma ? 3 : channels;
  p.image.format = decoded_channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  const size_t decoded_stride = static_cast<size_t>(p.image.width) * decoded_channels;
  buf->resize(decoded_stride * p.image.height);
  if (!png_image_finish_read(&p.image, nullptr, buf->data(),
                             static_cast<png_int_32>(decoded_stride), nullptr)) {
    return DataError(std::string("bad PNG: ") + p.image.message);
  }
  const size_t stride = static_cast<size_t>(p.image.width) * channels;
  if (luma) {
    const size_t px = static_cast<size_t>(p.image.width) * p.image.height;
    uint8_t* d = buf->data();
    for (size_t i = 0; i < px; ++i) d[i] = Luma(d + i * 3);  // in place: i <= 3 i
    buf->resize(px);
  }
  out->width = static_cast<int>(p.image.width);
  out->height = static_cast<int>(p.image.height);
  out->channels = channels;
  out->stride = stride;
  out->pixels = buf->data();
  return Status::OK();
}

}  // namespace nostall
