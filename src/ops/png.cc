// PNG decoding through libpng's simplified API.
#include <png.h>

#include <string>

#include "ops/decode.h"

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
  p.image.format = channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  const size_t stride = static_cast<size_t>(p.image.width) * channels;
  buf->resize(stride * p.image.height);
  if (!png_image_finish_read(&p.image, nullptr, buf->data(), static_cast<png_int_32>(stride),
                             nullptr)) {
    return DataError(std::string("bad PNG: ") + p.image.message);
  }
  out->width = static_cast<int>(p.image.width);
  out->height = static_cast<int>(p.image.height);
  out->channels = channels;
  out->stride = stride;
  out->pixels = buf->data();
  return Status::OK();
}

}  // namespace nostall
