// The physical reference for `make bench`: libjpeg-turbo decoding whole
// images at full resolution to RGB (its default, accurate IDCT), as fast as
// N threads can, reading the same files. A pipeline that does more work per
// image (crop, resize, flip, normalize, batch) can only beat this by decoding
// less: only the region it needs, at the scale it needs.
//
//   decode_reference THREADS FILE_LIST   -> {"images": N, "seconds": S}
#include <cstdio>
#include <csetjmp>
#include <jpeglib.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace {

struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
};

void OnError(j_common_ptr cinfo) {
  std::longjmp(reinterpret_cast<ErrorManager*>(cinfo->err)->jump, 1);
}

bool DecodeFull(const std::vector<unsigned char>& data, std::vector<unsigned char>* pixels) {
  jpeg_decompress_struct c;
  ErrorManager err;
  c.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = OnError;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&c);
    return false;
  }
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, data.data(), data.size());
  jpeg_read_header(&c, TRUE);
  c.out_color_space = JCS_RGB;
  jpeg_start_decompress(&c);
  size_t stride = static_cast<size_t>(c.output_width) * 3;
  pixels->resize(stride * c.output_height);
  while (c.output_scanline < c.output_height) {
    JSAMPROW row = pixels->data() + stride * c.output_scanline;
    jpeg_read_scanlines(&c, &row, 1);
  }
  jpeg_finish_decompress(&c);
  jpeg_destroy_decompress(&c);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: decode_reference THREADS FILE_LIST\n");
    return 2;
  }
  int threads = std::atoi(argv[1]);
  std::vector<std::string> files;
  std::ifstream list(argv[2]);
  for (std::string line; std::getline(list, line);) {
    if (!line.empty()) files.push_back(line);
  }
  std::atomic<size_t> next{0}, failed{0};
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      std::vector<unsigned char> data, pixels;
      for (size_t i; (i = next.fetch_add(1)) < files.size();) {
        std::ifstream in(files[i], std::ios::binary);
        data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        if (!DecodeFull(data, &pixels)) failed.fetch_add(1);
      }
    });
  }
  for (auto& t : pool) t.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("{\"images\": %zu, \"failed\": %zu, \"seconds\": %.6f}\n", files.size(),
              failed.load(), secs);
  return failed.load() == 0 ? 0 : 1;
}
