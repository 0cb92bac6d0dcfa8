// The other formats torchvision's ImageFolder takes (.webp, .tif/.tiff,
// .bmp, .ppm/.pgm), each through a maintained library, with PIL's
// Image.open(f).convert("RGB") (or "L") as the answer to match:
// - WebP: libwebp, which PIL decodes with too (alpha dropped, as convert
//   drops it).
// - TIFF: libtiff's RGBA interface (8-bit samples, palettes, bilevel, 16-bit
//   colour as its high byte, as PIL's ;16 modes take it); 16-bit gray is
//   read as samples and clipped to 255, as PIL's I;16 -> L does.
// - BMP and binary PPM/PGM: stb_image (Debian's libstb); 16-bit PGM/PPM
//   clipped / high byte as PIL.
// Every decoder writes interleaved 8-bit pixels into the caller's buffer.
#include <stb_image.h>
#include <tiffio.h>
#include <webp/decode.h>

#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "codecs/decode.h"
#include "kernels/image.h"

namespace nostall {
namespace {

// RGB (3 bytes a pixel) to the caller's channel count, in place.
void FinishRgb(int width, int height, int channels, std::vector<uint8_t>* buf,
               DecodedRegion* out) {
  const size_t px = static_cast<size_t>(width) * height;
  if (channels == 1) {
    uint8_t* d = buf->data();
    for (size_t i = 0; i < px; ++i) d[i] = Luma(d + i * 3);  // PIL's convert("L"); i <= 3 i
  }
  buf->resize(px * static_cast<size_t>(channels));
  out->width = width;
  out->height = height;
  out->channels = channels;
  out->stride = static_cast<size_t>(width) * channels;
  out->pixels = buf->data();
}

// ---------------------------------------------------------------- WebP

Status WebpInfo(const uint8_t* data, size_t size, ImageInfo* info) {
  WebPBitstreamFeatures f;
  if (WebPGetFeatures(data, size, &f) != VP8_STATUS_OK) return DataError("bad WebP image");
  if (f.has_animation) return DataError("animated WebP is not supported");
  info->width = f.width;
  info->height = f.height;
  return Status::OK();
}

}  // namespace

Status WebpDecodeRegion(const uint8_t* data, size_t size, int channels, int x0, int y0, int x1, int y1,
                        std::vector<uint8_t>* buf, DecodedRegion* out) {
  ImageInfo info;
  NOSTALL_RETURN_IF_ERROR(WebpInfo(data, size, &info));
  // libwebp crops from an even corner (it rounds crop_left and crop_top
  // down to even): ask for that, and say where the pixels start. Its
  // reconstruction of the crop is the whole decode's (it filters from the
  // top-left macroblock where the loop filter chains).
  // Its chroma upsampling treats the crop's edges as the image's: two
  // pixels more on each side keep the wanted ones as the whole decode has them.
  x0 = std::clamp(x0 - 2, 0, info.width) & ~1;
  y0 = std::clamp(y0 - 2, 0, info.height) & ~1;
  x1 = std::clamp(x1 + 2, x0 + 1, info.width);
  y1 = std::clamp(y1 + 2, y0 + 1, info.height);
  const bool whole = x0 == 0 && y0 == 0 && x1 == info.width && y1 == info.height;
  const int w = x1 - x0, h = y1 - y0;
  const size_t stride = static_cast<size_t>(w) * 3;
  buf->resize(stride * h);
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) return Internal("libwebp: version mismatch");
  config.options.use_cropping = whole ? 0 : 1;
  config.options.crop_left = x0;
  config.options.crop_top = y0;
  config.options.crop_width = w;
  config.options.crop_height = h;
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = buf->data();
  config.output.u.RGBA.stride = static_cast<int>(stride);
  config.output.u.RGBA.size = buf->size();
  const VP8StatusCode st = WebPDecode(data, size, &config);
  WebPFreeDecBuffer(&config.output);  // (external memory: frees nothing of ours)
  if (st != VP8_STATUS_OK) return DataError("bad WebP image: cannot decode");
  FinishRgb(w, h, channels, buf, out);
  out->x = -x0;  // the caller adds its rectangle's source x and y
  out->y = -y0;
  return Status::OK();
}

namespace {

Status WebpDecode(const uint8_t* data, size_t size, int channels, std::vector<uint8_t>* buf,
                  DecodedRegion* out) {
  return WebpDecodeRegion(data, size, channels, 0, 0, 1 << 30, 1 << 30, buf, out);  // (out->x, y: 0)
}

// ---------------------------------------------------------------- TIFF

// libtiff reads through callbacks; this is the file in memory.
struct TiffMemory {
  const uint8_t* data;
  size_t size;
  toff_t offset;
};

tsize_t TiffRead(thandle_t h, tdata_t out, tsize_t n) {
  auto* m = static_cast<TiffMemory*>(h);
  if (m->offset >= m->size) return 0;
  const size_t k = std::min(static_cast<size_t>(n), m->size - static_cast<size_t>(m->offset));
  std::memcpy(out, m->data + m->offset, k);
  m->offset += k;
  return static_cast<tsize_t>(k);
}
tsize_t TiffWrite(thandle_t, tdata_t, tsize_t) { return 0; }
toff_t TiffSeek(thandle_t h, toff_t off, int whence) {
  auto* m = static_cast<TiffMemory*>(h);
  toff_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->offset : m->size;
  m->offset = base + off;
  return m->offset;
}
int TiffClose(thandle_t) { return 0; }
toff_t TiffSize(thandle_t h) { return static_cast<TiffMemory*>(h)->size; }
int TiffMap(thandle_t, tdata_t*, toff_t*) { return 0; }
void TiffUnmap(thandle_t, tdata_t, toff_t) {}

// libtiff reports errors through a process-wide handler; the message of
// this thread's last error is kept for the DataError.
thread_local char tiff_error[200];
int TiffErrorHandler(TIFF*, void*, const char*, const char* fmt, va_list ap) {
  std::vsnprintf(tiff_error, sizeof tiff_error, fmt, ap);
  return 1;  // handled: libtiff's global handler (stderr) stays quiet
}
int TiffWarningHandler(TIFF*, void*, const char*, const char*, va_list) { return 1; }

struct TiffCloser {
  void operator()(TIFF* t) const { TIFFClose(t); }
};
using TiffHandle = std::unique_ptr<TIFF, TiffCloser>;

Result<TiffHandle> OpenTiff(TiffMemory* m) {
  TIFFOpenOptions* opts = TIFFOpenOptionsAlloc();
  TIFFOpenOptionsSetErrorHandlerExtR(opts, TiffErrorHandler, nullptr);
  TIFFOpenOptionsSetWarningHandlerExtR(opts, TiffWarningHandler, nullptr);
  tiff_error[0] = '\0';
  TIFF* t = TIFFClientOpenExt("tiff", "rm", m, TiffRead, TiffWrite, TiffSeek, TiffClose, TiffSize,
                              TiffMap, TiffUnmap, opts);
  TIFFOpenOptionsFree(opts);
  if (t == nullptr) return DataError(std::string("bad TIFF image: ") + tiff_error);
  return TiffHandle(t);
}

Status TiffSize(TIFF* t, ImageInfo* info) {
  uint32_t w = 0, h = 0;
  TIFFGetField(t, TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(t, TIFFTAG_IMAGELENGTH, &h);
  if (w == 0 || h == 0 || w > (1u << 30) || h > (1u << 30)) {
    return DataError("bad TIFF image: size " + std::to_string(w) + "x" + std::to_string(h));
  }
  info->width = static_cast<int>(w);
  info->height = static_cast<int>(h);
  return Status::OK();
}

Status TiffInfo(const uint8_t* data, size_t size, ImageInfo* info) {
  TiffMemory m{data, size, 0};
  NOSTALL_ASSIGN_OR_RETURN(TiffHandle t, OpenTiff(&m));
  return TiffSize(t.get(), info);
}

Status TiffDecode(const uint8_t* data, size_t size, int channels, std::vector<uint8_t>* buf,
                  DecodedRegion* out) {
  TiffMemory m{data, size, 0};
  NOSTALL_ASSIGN_OR_RETURN(TiffHandle t, OpenTiff(&m));  // opened once: size and pixels
  ImageInfo info;
  NOSTALL_RETURN_IF_ERROR(TiffSize(t.get(), &info));
  uint16_t bits = 8, spp = 1, photometric = PHOTOMETRIC_MINISBLACK;
  TIFFGetFieldDefaulted(t.get(), TIFFTAG_BITSPERSAMPLE, &bits);
  TIFFGetFieldDefaulted(t.get(), TIFFTAG_SAMPLESPERPIXEL, &spp);
  TIFFGetFieldDefaulted(t.get(), TIFFTAG_PHOTOMETRIC, &photometric);
  const int w = info.width, h = info.height;
  const size_t px = static_cast<size_t>(w) * h;
  if (bits == 16 && spp == 1 && photometric == PHOTOMETRIC_MINISBLACK && !TIFFIsTiled(t.get())) {
    // PIL's I;16: convert("L"/"RGB") clips each sample to 255.
    std::vector<uint16_t> row(static_cast<size_t>(TIFFScanlineSize(t.get())) / 2 + 1);
    buf->resize(px * 3);
    for (int y = 0; y < h; ++y) {
      if (TIFFReadScanline(t.get(), row.data(), static_cast<uint32_t>(y), 0) < 0) {
        return DataError(std::string("bad TIFF image: ") + tiff_error);
      }
      uint8_t* o = buf->data() + static_cast<size_t>(y) * w * 3;
      for (int x = 0; x < w; ++x) o[3 * x] = o[3 * x + 1] = o[3 * x + 2] =
          static_cast<uint8_t>(std::min<uint16_t>(row[x], 255));
    }
    FinishRgb(w, h, channels, buf, out);
    return Status::OK();
  }
  char why[1024];
  if (!TIFFRGBAImageOK(t.get(), why)) return DataError(std::string("unsupported TIFF: ") + why);
  // RGBA words, top row first; then packed to RGB in place (3 <= 4 bytes).
  buf->resize(px * 4);
  auto* rgba = reinterpret_cast<uint32_t*>(buf->data());
  if (!TIFFReadRGBAImageOriented(t.get(), static_cast<uint32_t>(w), static_cast<uint32_t>(h), rgba,
                                 ORIENTATION_TOPLEFT, /*stop_on_error=*/1) ||
      tiff_error[0] != '\0') {
    return DataError(std::string("bad TIFF image: ") + tiff_error);
  }
  uint8_t* d = buf->data();
  for (size_t i = 0; i < px; ++i) {
    const uint32_t v = rgba[i];
    d[3 * i] = static_cast<uint8_t>(TIFFGetR(v));
    d[3 * i + 1] = static_cast<uint8_t>(TIFFGetG(v));
    d[3 * i + 2] = static_cast<uint8_t>(TIFFGetB(v));
  }
  FinishRgb(w, h, channels, buf, out);
  return Status::OK();
}

// ---------------------------------------------------------------- BMP, PPM/PGM

Status StbInfo(const uint8_t* data, size_t size, ImageInfo* info) {
  int w = 0, h = 0, comp = 0;
  if (size > static_cast<size_t>(INT32_MAX) ||
      !stbi_info_from_memory(data, static_cast<int>(size), &w, &h, &comp)) {
    return DataError(std::string("bad image: ") + stbi_failure_reason());
  }
  // A BMP whose rows run top-down says so with a negative height, which
  // stb_image's info gives as it is (its decoder takes it, as PIL does).
  if (h < 0 && size >= 2 && data[0] == 'B' && data[1] == 'M' && h != INT32_MIN) h = -h;
  if (w <= 0 || h <= 0) {
    return DataError("bad image: size " + std::to_string(w) + "x" + std::to_string(h));
  }
  info->width = w;
  info->height = h;
  return Status::OK();
}

// stb_image reads past the end of a BMP or PNM as zeros: a truncated file
// would decode, its missing rows black. PIL refuses it ("image file is
// truncated"): so is it here, from the sizes the headers give.
uint32_t Le32(const uint8_t* p) { return p[0] | p[1] << 8 | p[2] << 16 | uint32_t{p[3]} << 24; }
uint16_t Le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

Status CheckBmpComplete(const uint8_t* d, size_t n, const ImageInfo& info) {
  if (n < 26) return DataError("bad image: truncated BMP header");
  const uint32_t offset = Le32(d + 10), header = Le32(d + 14);
  uint64_t bpp = 0, compression = 0;
  if (header == 12) {
    bpp = Le16(d + 24);
  } else if (n >= 34) {
    bpp = Le16(d + 28);
    compression = Le32(d + 30);
  }
  if (compression != 0 && compression != 3 && compression != 6) return Status::OK();  // RLE, ...
  const uint64_t stride = (static_cast<uint64_t>(info.width) * bpp + 31) / 32 * 4;
  const uint64_t need = uint64_t{offset} + stride * static_cast<uint64_t>(info.height);
  if (bpp == 0 || need > n) {
    return DataError("bad image: truncated BMP (" + std::to_string(n) + " bytes, the header needs " +
                     std::to_string(need) + ")");
  }
  return Status::OK();
}

Status CheckPnmComplete(const uint8_t* d, size_t n, const ImageInfo& info) {
  // "P5/P6", then width, height, maxval (with # comments), then one space.
  size_t i = 2;
  uint64_t fields[3] = {0, 0, 0};
  for (uint64_t& f : fields) {
    while (i < n && (std::isspace(d[i]) || d[i] == '#')) {
      if (d[i] == '#') {
        while (i < n && d[i] != '\n') ++i;
      } else {
        ++i;
      }
    }
    if (i >= n || !std::isdigit(d[i])) return DataError("bad image: truncated PNM header");
    while (i < n && std::isdigit(d[i]) && f < (uint64_t{1} << 32)) f = f * 10 + (d[i++] - '0');
  }
  ++i;  // the one whitespace before the raster
  const uint64_t channels = d[1] == '6' ? 3 : d[1] == '5' ? 1 : 0;
  if (channels == 0) return Status::OK();  // ASCII or bitmap: stb_image refuses them itself
  const uint64_t need = i + static_cast<uint64_t>(info.width) * static_cast<uint64_t>(info.height) *
                                channels * (fields[2] > 255 ? 2 : 1);
  if (need > n) {
    return DataError("bad image: truncated PNM (" + std::to_string(n) + " bytes, the header needs " +
                     std::to_string(need) + ")");
  }
  return Status::OK();
}

struct StbFree {
  void operator()(void* p) const { stbi_image_free(p); }
};

Status StbDecode(const uint8_t* data, size_t size, int channels, std::vector<uint8_t>* buf,
                 DecodedRegion* out) {
  ImageInfo info;
  NOSTALL_RETURN_IF_ERROR(StbInfo(data, size, &info));
  NOSTALL_RETURN_IF_ERROR(data[0] == 'B' ? CheckBmpComplete(data, size, info)
                                         : CheckPnmComplete(data, size, info));
  int w = 0, h = 0, comp = 0;
  const int n = static_cast<int>(size);
  const size_t px = static_cast<size_t>(info.width) * info.height;
  buf->resize(px * 3);
  if (stbi_is_16_bit_from_memory(data, n)) {
    // 16-bit PGM/PPM: PIL clips gray (I;16) to 255 and takes colour's high byte.
    std::unique_ptr<stbi_us, StbFree> p(stbi_load_16_from_memory(data, n, &w, &h, &comp, 0));
    if (!p || static_cast<size_t>(w) * h != px) {
      return DataError(std::string("bad image: ") + stbi_failure_reason());
    }
    uint8_t* d = buf->data();
    for (size_t i = 0; i < px; ++i) {
      if (comp < 3) {
        d[3 * i] = d[3 * i + 1] = d[3 * i + 2] =
            static_cast<uint8_t>(std::min<stbi_us>(p.get()[i * comp], 255));
      } else {
        for (int k = 0; k < 3; ++k) d[3 * i + k] = static_cast<uint8_t>(p.get()[i * comp + k] >> 8);
      }
    }
  } else {
    std::unique_ptr<stbi_uc, StbFree> p(stbi_load_from_memory(data, n, &w, &h, &comp, 3));
    if (!p || static_cast<size_t>(w) * h != px) {
      return DataError(std::string("bad image: ") + stbi_failure_reason());
    }
    std::memcpy(buf->data(), p.get(), px * 3);
  }
  FinishRgb(info.width, info.height, channels, buf, out);
  return Status::OK();
}

}  // namespace

Status ImageReadInfo(ImageFormat format, const uint8_t* data, size_t size, ImageInfo* info) {
  switch (format) {
    case ImageFormat::kJpeg: return JpegReadInfo(data, size, info);
    case ImageFormat::kPng: return PngReadInfo(data, size, info);
    case ImageFormat::kWebp: return WebpInfo(data, size, info);
    case ImageFormat::kTiff: return TiffInfo(data, size, info);
    case ImageFormat::kBmp:
    case ImageFormat::kPnm: return StbInfo(data, size, info);
    case ImageFormat::kUnknown: break;
  }
  return DataError(size == 0 ? "empty file" : "not an image nostall reads (JPEG, PNG, WebP, TIFF, BMP, PPM/PGM)");
}

Status DecodeWhole(ImageFormat format, const uint8_t* data, size_t size, int channels,
                   std::vector<uint8_t>* buf, DecodedRegion* out) {
  switch (format) {
    case ImageFormat::kPng: return PngDecode(data, size, channels, buf, out);
    case ImageFormat::kWebp: return WebpDecode(data, size, channels, buf, out);
    case ImageFormat::kTiff: return TiffDecode(data, size, channels, buf, out);
    case ImageFormat::kBmp:
    case ImageFormat::kPnm: return StbDecode(data, size, channels, buf, out);
    case ImageFormat::kJpeg:
    case ImageFormat::kUnknown: break;
  }
  return Internal("DecodeWhole: not a whole-image format");
}

}  // namespace nostall
