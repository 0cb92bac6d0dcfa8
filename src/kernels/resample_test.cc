#include "kernels/resample.h"

#include <gtest/gtest.h>

#include <cmath>

namespace nostall {
namespace {

TEST(ResampleTest, ConstantStaysConstantForAnyBoxSizeAndChannels) {
  for (int c : {1, 3, 4}) {
    std::vector<uint8_t> src(100 * 80 * c, 77);
    for (auto [w, h] : {std::pair{7, 5}, std::pair{64, 64}, std::pair{150, 120}}) {
      std::vector<uint8_t> out(w * h * c);
      ResampleScratch scratch;
      ResampleBox(src.data(), 100, 80, 100 * c, c, 3.3, 2.7, 90.1, 70.4, out.data(), w, h, &scratch);
      for (uint8_t v : out) ASSERT_EQ(v, 77) << "channels " << c << " size " << w << "x" << h;
    }
  }
}

// A linear ramp is reproduced at each output pixel's centre, mapped back
// into the fractional box: the geometry is exact, not rounded to pixels.
TEST(ResampleTest, FractionalBoxIsSampledAtTheRightPlace) {
  const int w = 200, h = 10;
  std::vector<uint8_t> src(w * h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) src[y * w + x] = static_cast<uint8_t>(x);  // value = column
  }
  for (auto [bx, bw, ow] : {std::tuple{20.25, 150.5, 60}, std::tuple{40.7, 30.0, 90},
                            std::tuple{10.0, 180.0, 9}}) {
    std::vector<uint8_t> out(ow * h);
    ResampleScratch scratch;
    ResampleBox(src.data(), w, h, w, 1, bx, 0, bw, h, out.data(), ow, h, &scratch);
    for (int xx = 2; xx < ow - 2; ++xx) {
      double centre = bx + (xx + 0.5) * bw / ow - 0.5;  // in pixel-index units
      EXPECT_NEAR(out[5 * ow + xx], centre, 0.75) << "box " << bx << "+" << bw << " -> " << ow;
    }
  }
}

TEST(ResampleTest, WholePixelBoxAtOutputSizeIsACopy) {
  std::vector<uint8_t> src(30 * 20 * 3);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 37);
  std::vector<uint8_t> out(10 * 8 * 3);
  ResampleScratch scratch;
  ResampleBox(src.data(), 30, 20, 90, 3, 5, 4, 10, 8, out.data(), 10, 8, &scratch);
  for (int y = 0; y < 8; ++y) {
    for (int x = 0; x < 30; ++x) {
      ASSERT_EQ(out[y * 30 + x], src[(y + 4) * 90 + 15 + x]);
    }
  }
}

}  // namespace
}  // namespace nostall
