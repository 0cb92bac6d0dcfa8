// libjpeg-turbo decoding with DCT scaling and cropped decoding. All of
// libjpeg's setjmp/longjmp lives in this file.
#include <csetjmp>
#include <cstdlib>
#include <cstdio>
#include <cmath>
#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>
#include <vector>

// jpeglib.h needs FILE and size_t declared first.
#include <jerror.h>
#include <jpeglib.h>

#include "codecs/decode.h"

namespace nostall {
namespace {

struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void OnError(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings mean damaged data (libjpeg would fill the damage with gray and go
// on); nostall treats them as errors so a damaged file is never a silently
// wrong sample. Extraneous bytes between markers are harmless and common.
void OnMessage(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code != JWRN_EXTRANEOUS_DATA) OnError(cinfo);
}

// A progressive JPEG is decoded scan by scan, each pass over the whole
// image: a file of thousands of tiny scans takes minutes. More than this
// many is refused: 500 (libjpeg-turbo's own fuzzers use this order; real
// progressive files have about 10), or NOSTALL_JPEG_MAX_SCANS.
int MaxScans() {
  static const int limit = [] {
    const char* env = std::getenv("NOSTALL_JPEG_MAX_SCANS");
    const long v = env != nullptr ? std::strtol(env, nullptr, 10) : 0;
    return v > 0 && v < 100000 ? static_cast<int>(v) : 500;
  }();
  return limit;
}
// The most libjpeg may allocate for one image (a progressive file keeps
// every coefficient of the image: about 2 bytes a pixel per component).
constexpr long kMaxDecoderMemory = 2L << 30;

struct ScanLimit {
  jpeg_progress_mgr pub;
  ErrorManager* err;
};

void OnProgress(j_common_ptr cinfo) {
  auto* limit = reinterpret_cast<ScanLimit*>(cinfo->progress);
  if (cinfo->is_decompressor &&
      reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number > MaxScans()) {
    std::snprintf(limit->err->message, sizeof limit->err->message,
                  "a progressive JPEG of over %d scans (real files have about 10; "
                  "NOSTALL_JPEG_MAX_SCANS)", MaxScans());
    std::longjmp(limit->err->jump, 1);
  }
}

// RAII for jpeg_decompress_struct. The error manager is wired before create.
class Decompressor {
 public:
  Decompressor() {
    cinfo_.err = jpeg_std_error(&err_.pub);
    err_.pub.error_exit = OnError;
    err_.pub.emit_message = OnMessage;
    err_.message[0] = '\0';
  }
  ~Decompressor() {
    if (created_) jpeg_destroy_decompress(&cinfo_);
  }
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;

  // After jpeg_create_decompress (which clears the struct): the scan and
  // memory limits.
  void Limit() {
    scans_.pub.progress_monitor = OnProgress;
    scans_.err = &err_;
    cinfo_.progress = &scans_.pub;
    cinfo_.mem->max_memory_to_use = kMaxDecoderMemory;
  }

  // The error libjpeg reported, in words a user can act on.
  Status Error() const {
    if (err_.pub.msg_code == JWRN_JPEG_EOF) return DataError("truncated JPEG (data ends early)");
    return DataError(std::string("bad JPEG: ") + err_.message);
  }

  jpeg_decompress_struct cinfo_;
  ErrorManager err_;
  ScanLimit scans_{};
  bool created_ = false;
};

// A truncated file must be an error even when the rows we decode all come
// before the cut, so the end-of-image marker is checked up front. It is
// looked for only after the first start-of-scan marker: in entropy-coded data
// 0xFF is always stuffed, so FF D9 there can only be the real end; in the
// headers before it the same two bytes may occur by chance.
bool HasEndMarker(const uint8_t* data, size_t size) {
  size_t pos = 2;  // after SOI
  while (pos + 4 <= size) {
    if (data[pos] != 0xFF) return false;
    uint8_t marker = data[pos + 1];
    if (marker == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    size_t length = (static_cast<size_t>(data[pos + 2]) << 8) | data[pos + 3];
    if (marker == 0xDA) break;  // start of scan
    pos += 2 + length;
  }
  if (pos + 4 > size) return false;
  // Trailing bytes after EOI (padding, appended data) are tolerated up to 64 KiB.
  size_t stop = std::max(pos, size > 65536 ? size - 65536 : 0);
  for (size_t i = size; i >= stop + 2; --i) {
    if (data[i - 2] == 0xFF && data[i - 1] == 0xD9) return true;
  }
  return false;
}

// CMYK pixels as libjpeg gives them (Adobe's inverted polarity, which is
// what Photoshop writes and what PIL assumes for every CMYK JPEG) to RGB or
// gray exactly as PIL does: Image.open() reads "CMYK;I", convert("RGB")
// is Pillow's cmyk2rgb, convert("L") its rgb2l on that result.
inline uint8_t MulDiv255(int a, int b) {
  const int t = a * b + 128;
  return static_cast<uint8_t>(((t >> 8) + t) >> 8);
}

void CmykRowToRgb(const uint8_t* in, int width, int channels, uint8_t* out) {
  for (int x = 0; x < width; ++x, in += 4) {
    const int nk = in[3];  // 255 - K, K = 255 - stored
    uint8_t rgb[3];
    for (int c = 0; c < 3; ++c) {
      const int v = nk - MulDiv255(255 - in[c], nk);
      rgb[c] = static_cast<uint8_t>(std::clamp(v, 0, 255));
    }
    if (channels == 3) {
      out[0] = rgb[0];
      out[1] = rgb[1];
      out[2] = rgb[2];
      out += 3;
    } else {
      *out++ = static_cast<uint8_t>((rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16);
    }
  }
}

constexpr JDIMENSION kRowsPerRead = 16;

}  // namespace

ImageFormat SniffFormat(const uint8_t* d, size_t n) {
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return ImageFormat::kJpeg;
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (n >= 8 && std::equal(kPng, kPng + 8, d)) return ImageFormat::kPng;
  if (n >= 12 && std::memcmp(d, "RIFF", 4) == 0 && std::memcmp(d + 8, "WEBP", 4) == 0) {
    return ImageFormat::kWebp;
  }
  if (n >= 4 && (std::memcmp(d, "II*\0", 4) == 0 || std::memcmp(d, "MM\0*", 4) == 0)) {
    return ImageFormat::kTiff;
  }
  if (n >= 2 && d[0] == 'B' && d[1] == 'M') return ImageFormat::kBmp;
  if (n >= 3 && d[0] == 'P' && d[1] >= '1' && d[1] <= '6' && std::isspace(d[2])) {
    return ImageFormat::kPnm;
  }
  return ImageFormat::kUnknown;
}

Status JpegReadInfo(const uint8_t* data, size_t size, ImageInfo* info) {
  Decompressor d;
  if (setjmp(d.err_.jump)) return d.Error();
  jpeg_create_decompress(&d.cinfo_);
  d.created_ = true;
  d.Limit();
  jpeg_mem_src(&d.cinfo_, data, static_cast<unsigned long>(size));
  jpeg_read_header(&d.cinfo_, TRUE);
  info->width = static_cast<int>(d.cinfo_.image_width);
  info->height = static_cast<int>(d.cinfo_.image_height);
  return Status::OK();
}

namespace {

// The decode scale, in eighths, for a w x h region wanted at least
// min_w x min_h (0: full scale): the smallest of 1/8, 2/8, 4/8 that keeps
// it that large, else 8/8. The other factors (3/8, 5/8, 6/8, 7/8) are slower
// than decoding at full scale: libjpeg-turbo has no SIMD for their IDCTs,
// and their chroma goes through a double-size IDCT (measured: 5/8-7/8 take
// 1.2-1.8x the full-scale time on 300-800 px photos).
int ScaleEighths(double w, double h, int min_w, int min_h) {
  for (int candidate : {1, 2, 4}) {
    if (min_w > 0 && w * candidate / 8.0 >= min_w && h * candidate / 8.0 >= min_h) return candidate;
  }
  return 8;
}

}  // namespace

Status JpegDecodeRegion(const uint8_t* data, size_t size, int channels, double x, double y,
                        double w, double h, int min_w, int min_h, std::vector<uint8_t>* buf,
                        DecodedRegion* out) {
  if (!HasEndMarker(data, size)) {
    return DataError("truncated JPEG (no end-of-image marker)");
  }
  Decompressor d;
  jpeg_decompress_struct& c = d.cinfo_;
  if (setjmp(d.err_.jump)) return d.Error();
  jpeg_create_decompress(&c);
  d.created_ = true;
  d.Limit();
  jpeg_mem_src(&c, data, static_cast<unsigned long>(size));
  jpeg_read_header(&c, TRUE);
  // CMYK and YCCK JPEGs (ImageNet holds some; print workflows make them)
  // are decoded to CMYK and converted row by row, as PIL converts them.
  const bool cmyk = c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK;
  if (cmyk && c.num_components != 4) return DataError("bad JPEG: CMYK with " + std::to_string(c.num_components) + " components");
  c.out_color_space = cmyk ? JCS_CMYK : channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  c.scale_num = static_cast<unsigned>(ScaleEighths(w, h, min_w, min_h));
  c.scale_denom = 8;
  jpeg_start_decompress(&c);
  const double fx = static_cast<double>(c.output_width) / c.image_width;
  const double fy = static_cast<double>(c.output_height) / c.image_height;
  auto clampi = [](double v, JDIMENSION lo, JDIMENSION hi) {
    return static_cast<JDIMENSION>(std::clamp(v, static_cast<double>(lo), static_cast<double>(hi)));
  };
  JDIMENSION x0 = clampi(std::floor(x * fx), 0, c.output_width - 1);
  JDIMENSION x1 = clampi(std::ceil((x + w) * fx), x0 + 1, c.output_width);
  JDIMENSION y0 = clampi(std::floor(y * fy), 0, c.output_height - 1);
  JDIMENSION y1 = clampi(std::ceil((y + h) * fy), y0 + 1, c.output_height);
  JDIMENSION xoff = x0, xw = x1 - x0;
  if (xw < c.output_width) jpeg_crop_scanline(&c, &xoff, &xw);  // widens to iMCU edges
  const size_t stride = static_cast<size_t>(c.output_width) * channels;
  const JDIMENSION rows = y1 - y0;
  buf->resize(stride * rows);
  // A CMYK row is decoded after the region, in the same caller-owned buffer:
  // nothing here may own memory, as libjpeg's errors longjmp past destructors.
  const size_t region_bytes = stride * rows;
  if (cmyk) buf->resize(region_bytes + static_cast<size_t>(c.output_width) * 4);
  uint8_t* cmyk_row = buf->data() + region_bytes;
  if (y0 > 0) jpeg_skip_scanlines(&c, y0);
  while (c.output_scanline < y1) {
    const JDIMENSION first = c.output_scanline;
    uint8_t* dst = buf->data() + stride * (first - y0);
    if (cmyk) {
      JSAMPROW row = cmyk_row;
      if (jpeg_read_scanlines(&c, &row, 1) != 1) return DataError("bad JPEG: no scanline decoded");
      // (After jpeg_crop_scanline, output_width is the cropped width.)
      CmykRowToRgb(cmyk_row, static_cast<int>(c.output_width), channels, dst);
      continue;
    }
    // Several rows a call: the decoder then upsamples chroma straight into
    // them (one row a call goes through its spare row and a copy).
    JSAMPROW rows[kRowsPerRead];
    const JDIMENSION n = std::min<JDIMENSION>(kRowsPerRead, y1 - first);
    for (JDIMENSION i = 0; i < n; ++i) rows[i] = dst + stride * i;
    if (jpeg_read_scanlines(&c, rows, n) == 0) return DataError("bad JPEG: no scanline decoded");
  }
  jpeg_abort_decompress(&c);
  out->width = static_cast<int>(c.output_width);
  out->height = static_cast<int>(rows);
  out->channels = channels;
  out->stride = stride;
  out->pixels = buf->data();
  out->x = x * fx - xoff;
  out->y = y * fy - y0;
  out->w = w * fx;
  out->h = h * fy;
  return Status::OK();
}

}  // namespace nostall
