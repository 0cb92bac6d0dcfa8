// Helpers for tests: real JPEG/PNG files made with libjpeg-turbo and libpng,
// and temporary dataset folders.
#ifndef NOSTALL_TESTING_TEST_IMAGES_H_
#define NOSTALL_TESTING_TEST_IMAGES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace nostall::testing {

// A smooth, position-dependent image (gradients plus a per-seed pattern), so
// crops and flips are visible in the pixels.
std::vector<uint8_t> MakePixels(int width, int height, int channels, int seed);
std::vector<uint8_t> EncodeJpeg(const std::vector<uint8_t>& pixels, int width, int height,
                                int channels, int quality = 90);
// A 4-channel JPEG, stored as CMYK or (ycck) YCCK, with Adobe's marker.
// `cmyk` holds the values as stored: Adobe's inverted polarity (255 = no ink).
std::vector<uint8_t> EncodeCmykJpeg(const std::vector<uint8_t>& cmyk, int width, int height,
                                    bool ycck, int quality = 90);
std::vector<uint8_t> EncodePng(const std::vector<uint8_t>& pixels, int width, int height,
                               int channels);
void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes);

// A fresh directory under $TMPDIR, removed with everything in it on
// destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes classes c0..c{n-1}, each with `per_class` JPEGs of width x height.
void MakeImageFolder(const std::string& root, int classes, int per_class, int width, int height);

}  // namespace nostall::testing

#endif  // NOSTALL_TESTING_TEST_IMAGES_H_

namespace nostall::testing {

// Appends one ustar member (regular file) to `tar`; FinishTar adds the two
// zero blocks that end an archive.
void AppendTarMember(std::vector<uint8_t>* tar, const std::string& name,
                     const std::vector<uint8_t>& data);
void FinishTar(std::vector<uint8_t>* tar);
// A text's bytes (a tar member's contents).
inline std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

}  // namespace nostall::testing
