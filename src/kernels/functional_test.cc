// The vectorised colour kernels against their scalar definitions (which
// tests/python/test_ops.py checks against PIL), on every SIMD target this
// build dispatches to.
#include "kernels/functional.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cstdint>
#include <vector>

namespace nostall {
namespace {

TEST(HueTest, EverySimdTargetGivesTheScalarPathsBytesForEveryColour) {
  // Every other r, every fifth g, every seventeenth b (the three channels
  // in every order of size), then the grays: 106,000 colours, each lane
  // position and sector many times over. (Every one of the 2^24 colours at
  // eight factors was checked once, docs/benchmarks.md; under the sanitizers
  // that takes too long to run each time.)
  std::vector<uint8_t> colours;
  for (int r = 0; r < 256; r += 2) {
    for (int g = 0; g < 256; g += 5) {
      for (int b = 0; b < 256; b += 17) colours.insert(colours.end(), {uint8_t(r), uint8_t(g), uint8_t(b)});
    }
  }
  for (int v = 0; v < 256; ++v) colours.insert(colours.end(), {uint8_t(v), uint8_t(v), uint8_t(v)});
  colours.insert(colours.end(), {7, 200, 13});  // a last pixel past the vectors: the scalar tail
  const int pixels = static_cast<int>(colours.size() / 3);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (double factor : {0.37, -0.113}) {
      std::vector<uint8_t> simd = colours, scalar = colours;
      AdjustHue(ImageView{simd.data(), 1, pixels, 3}, factor);
      AdjustHueScalar(ImageView{scalar.data(), 1, pixels, 3}, factor);
      size_t first = 0;
      while (first < simd.size() && simd[first] == scalar[first]) ++first;
      ASSERT_EQ(first, simd.size()) << hwy::TargetName(target) << ", factor " << factor << ": pixel "
                                    << first / 3 << " (" << int(colours[first / 3 * 3]) << ", "
                                    << int(colours[first / 3 * 3 + 1]) << ", " << int(colours[first / 3 * 3 + 2])
                                    << ") differs";
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace nostall
