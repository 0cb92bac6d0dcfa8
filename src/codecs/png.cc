// PNG decoding through libpng, with PIL's answers: what torchvision's
// ImageFolder gets from Image.open(f).convert("RGB") (or "L").
//
// libpng's simplified API composes an alpha channel onto a background (the
// output buffer itself when none is given: pixels of the previous image)
// and converts through gamma when the file has a gAMA chunk or 16 bits.
// PIL does neither: it drops alpha, ignores gAMA, takes the high byte of
// 16-bit colour samples and clips 16-bit gray ("I;16") to 255. So the
// low-level API reads the samples as they are, and one loop below turns
// them into PIL's pixels. libpng's setjmp/longjmp stays in ReadSamples.
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdint>
#include <cstring>
#include <string>

#include "codecs/decode.h"
#include "kernels/image.h"

namespace nostall {
namespace {

// Frees libpng's simplified-API state on every exit path (header reads).
struct PngImage {
  png_image image{};
  PngImage() { image.version = PNG_IMAGE_VERSION; }
  ~PngImage() { png_image_free(&image); }
  PngImage(const PngImage&) = delete;
  PngImage& operator=(const PngImage&) = delete;
};

struct MemoryReader {
  const uint8_t* data;
  size_t size;
  size_t offset;
};

void ReadFromMemory(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<MemoryReader*>(png_get_io_ptr(png));
  if (n > r->size - r->offset) png_error(png, "truncated file");
  std::memcpy(out, r->data + r->offset, n);
  r->offset += n;
}

struct ErrorText {
  char text[200] = "";
};

[[noreturn]] void OnPngError(png_structp png, png_const_charp message) {
  auto* e = static_cast<ErrorText*>(png_get_error_ptr(png));
  std::snprintf(e->text, sizeof e->text, "%s", message);
  png_longjmp(png, 1);
}
void OnPngWarning(png_structp, png_const_charp) {}

// The file's samples after expansion to 8 bits per sample (palette to RGB,
// gray of 1/2/4 bits to 8, 16-bit colour to its high byte), or 16-bit gray
// left as big-endian pairs (`gray16`). Alpha is kept (dropped by the caller).
struct Samples {
  uint32_t width = 0, height = 0;
  int channels = 0;  // 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA
  bool gray16 = false;
  size_t row_bytes = 0;
  std::vector<uint8_t>* buf = nullptr;
  std::vector<png_bytep> rows;
};

// Returns false with `err` set on a bad file. No C++ object with a
// destructor lives in this frame past setjmp (longjmp would skip it).
// Rows from `rows` on are not decoded where the file is not interlaced
// (rows are decoded top to bottom; Adam7's passes need every row).
bool ReadSamples(const uint8_t* data, size_t size, uint64_t max_bytes, uint32_t rows, Samples* s, ErrorText* err) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, err, OnPngError, OnPngWarning);
  if (png == nullptr) {
    std::snprintf(err->text, sizeof err->text, "out of memory");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  MemoryReader reader{data, size, 0};
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    if (err->text[0] == '\0') std::snprintf(err->text, sizeof err->text, "cannot decode");
    return false;
  }
  png_set_read_fn(png, &reader, ReadFromMemory);
  // Files in the wild carry bad CRCs in ancillary chunks; PIL reads them.
  png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
  png_read_info(png, info);
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  s->width = png_get_image_width(png, info);
  s->height = png_get_image_height(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  s->gray16 = color == PNG_COLOR_TYPE_GRAY && depth == 16;
  if (depth == 16 && !s->gray16) png_set_strip_16(png);  // the high byte, as PIL's ;16B modes
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  s->channels = png_get_channels(png, info);
  s->row_bytes = png_get_rowbytes(png, info);
  if (s->height != 0 && s->row_bytes > max_bytes / s->height) {
    png_error(png, "image too large");
  }
  // Deflate compresses at most about 1032:1: image data too short to hold
  // the pixels the header claims is a truncated file, refused before a
  // buffer of their size is made (a 60 KB file claiming 268 MB of pixels).
  const uint64_t raw = static_cast<uint64_t>(s->row_bytes) * s->height;
  const uint64_t left = size - std::min<size_t>(size, reader.offset);
  if (raw / 1032 > left + 1024) png_error(png, "truncated (too little image data for its size)");
  const bool top_only = rows < s->height && png_get_interlace_type(png, info) == PNG_INTERLACE_NONE;
  if (top_only) s->height = rows;
  s->buf->resize(s->row_bytes * s->height);
  s->rows.resize(s->height);
  for (uint32_t y = 0; y < s->height; ++y) s->rows[y] = s->buf->data() + y * s->row_bytes;
  if (top_only) {
    for (uint32_t y = 0; y < s->height; ++y) png_read_row(png, s->rows[y], nullptr);
    // The rows below are not read, yet a file cut short is an error as it
    // is for the whole image (whose read ends at the IEND chunk).
    static constexpr char kIend[8] = {0, 0, 0, 0, 'I', 'E', 'N', 'D'};
    const uint8_t* rest = data + std::min(reader.offset, size);
    if (memmem(rest, static_cast<size_t>(data + size - rest), kIend, sizeof kIend) == nullptr) {
      png_error(png, "truncated file (no IEND chunk)");
    }
  } else {
    png_read_image(png, s->rows.data());
    png_read_end(png, nullptr);
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

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
  return PngDecodeRows(data, size, channels, UINT32_MAX, buf, out);
}

Status PngDecodeRows(const uint8_t* data, size_t size, int channels, uint32_t rows, std::vector<uint8_t>* buf,
                     DecodedRegion* out) {
  // The samples in a buffer of this thread's, the pixels in the caller's
  // (gray to RGB triples the bytes: no conversion in place).
  thread_local std::vector<uint8_t> samples;
  Samples s;
  s.buf = &samples;
  ErrorText err;
  // The decoded samples: at most 8 bytes a pixel (RGBA of 16 bits is read
  // as 8); PngReadInfo's caller has already checked the pixel count.
  const bool read = ReadSamples(data, size, /*max_bytes=*/uint64_t{1} << 40, std::max<uint32_t>(rows, 1), &s, &err);
  // One huge image does not keep its buffer for the thread's life.
  struct Shrink {
    ~Shrink() {
      if (samples.capacity() > (size_t{64} << 20)) std::vector<uint8_t>().swap(samples);
    }
  } shrink;
  if (!read) return DataError(std::string("bad PNG: ") + err.text);
  const size_t px = static_cast<size_t>(s.width) * s.height;
  buf->resize(px * static_cast<size_t>(channels));
  const uint8_t* d = samples.data();
  const size_t in_bpp = s.gray16 ? 2 : static_cast<size_t>(s.channels);
  const bool color = s.channels >= 3;
  for (uint32_t y = 0; y < s.height; ++y) {
    const uint8_t* row = d + y * s.row_bytes;
    uint8_t* o = buf->data() + static_cast<size_t>(y) * s.width * channels;
    for (uint32_t x = 0; x < s.width; ++x) {
      const uint8_t* p = row + x * in_bpp;
      uint8_t r, g, b;
      if (s.gray16) {
        const unsigned v = (unsigned{p[0]} << 8) | p[1];  // I;16 to L/RGB: clipped, as PIL
        r = g = b = static_cast<uint8_t>(v > 255 ? 255 : v);
      } else if (color) {
        r = p[0], g = p[1], b = p[2];
      } else {
        r = g = b = p[0];
      }
      if (channels == 3) {
        o[3 * x] = r, o[3 * x + 1] = g, o[3 * x + 2] = b;
      } else {
        const uint8_t rgb[3] = {r, g, b};
        o[x] = color ? Luma(rgb) : r;  // PIL's convert("L") of RGB: ITU-R 601 luma
      }
    }
  }
  if (samples.size() > (size_t{64} << 20)) std::vector<uint8_t>().swap(samples);  // one huge file
  out->width = static_cast<int>(s.width);
  out->height = static_cast<int>(s.height);
  out->channels = channels;
  out->stride = static_cast<size_t>(s.width) * channels;
  out->pixels = buf->data();
  return Status::OK();
}

}  // namespace nostall
