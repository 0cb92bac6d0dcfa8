#include "testing/test_images.h"

#include <png.h>
#include <cstdio>
#include <jpeglib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace nostall::testing {

std::vector<uint8_t> MakePixels(int width, int height, int channels, int seed) {
  std::vector<uint8_t> px(static_cast<size_t>(width) * height * channels);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        double v = 128 + 60 * std::sin((x + seed * 7) * (0.02 + 0.01 * c)) +
                   50 * std::cos((y + seed * 3) * 0.03) + 15 * std::sin((x + y) * 0.2);
        px[(static_cast<size_t>(y) * width + x) * channels + c] =
            static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
    }
  }
  return px;
}

namespace {

std::vector<uint8_t> Compress(const std::vector<uint8_t>& pixels, int width, int height,
                              int channels, J_COLOR_SPACE in, J_COLOR_SPACE stored, int quality) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  jpeg_mem_dest(&c, &out, &out_size);
  c.image_width = static_cast<JDIMENSION>(width);
  c.image_height = static_cast<JDIMENSION>(height);
  c.input_components = channels;
  c.in_color_space = in;
  jpeg_set_defaults(&c);
  jpeg_set_colorspace(&c, stored);  // CMYK/YCCK: writes Adobe's APP14 marker
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(pixels.data()) +
                   static_cast<size_t>(c.next_scanline) * width * channels;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<uint8_t> bytes(out, out + out_size);
  jpeg_destroy_compress(&c);
  std::free(out);
  return bytes;
}

}  // namespace

std::vector<uint8_t> EncodeJpeg(const std::vector<uint8_t>& pixels, int width, int height,
                                int channels, int quality) {
  const J_COLOR_SPACE in = channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  return Compress(pixels, width, height, channels, in, channels == 3 ? JCS_YCbCr : JCS_GRAYSCALE,
                  quality);
}

std::vector<uint8_t> EncodeCmykJpeg(const std::vector<uint8_t>& cmyk, int width, int height,
                                    bool ycck, int quality) {
  return Compress(cmyk, width, height, 4, JCS_CMYK, ycck ? JCS_YCCK : JCS_CMYK, quality);
}

std::vector<uint8_t> EncodePng(const std::vector<uint8_t>& pixels, int width, int height,
                               int channels) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(width);
  img.height = static_cast<png_uint_32>(height);
  img.format = channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  png_alloc_size_t size = 0;
  png_image_write_to_memory(&img, nullptr, &size, 0, pixels.data(), 0, nullptr);
  std::vector<uint8_t> bytes(size);
  if (!png_image_write_to_memory(&img, bytes.data(), &size, 0, pixels.data(), 0, nullptr)) {
    throw std::runtime_error(img.message);
  }
  bytes.resize(size);
  return bytes;
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "nostall-test-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void MakeImageFolder(const std::string& root, int classes, int per_class, int width, int height) {
  for (int c = 0; c < classes; ++c) {
    for (int i = 0; i < per_class; ++i) {
      auto px = MakePixels(width, height, 3, c * 1000 + i);
      char name[64];
      std::snprintf(name, sizeof name, "/c%d/img%03d.jpg", c, i);
      WriteFile(root + name, EncodeJpeg(px, width, height, 3));
    }
  }
}

}  // namespace nostall::testing

namespace nostall::testing {

void AppendTarMember(std::vector<uint8_t>* tar, const std::string& name,
                     const std::vector<uint8_t>& data) {
  uint8_t h[512] = {};
  std::snprintf(reinterpret_cast<char*>(h), 100, "%s", name.c_str());
  std::snprintf(reinterpret_cast<char*>(h) + 100, 8, "%07o", 0644);
  std::snprintf(reinterpret_cast<char*>(h) + 108, 8, "%07o", 0);
  std::snprintf(reinterpret_cast<char*>(h) + 116, 8, "%07o", 0);
  std::snprintf(reinterpret_cast<char*>(h) + 124, 12, "%011o", static_cast<unsigned>(data.size()));
  std::snprintf(reinterpret_cast<char*>(h) + 136, 12, "%011o", 0);
  h[156] = '0';
  std::memcpy(h + 257, "ustar\0" "00", 8);
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (uint8_t b : h) sum += b;
  std::snprintf(reinterpret_cast<char*>(h) + 148, 8, "%06o", sum);
  tar->insert(tar->end(), h, h + 512);
  tar->insert(tar->end(), data.begin(), data.end());
  tar->resize((tar->size() + 511) / 512 * 512, 0);
}

void FinishTar(std::vector<uint8_t>* tar) { tar->resize(tar->size() + 1024, 0); }

}  // namespace nostall::testing
