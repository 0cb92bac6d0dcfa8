// The vectorised colour kernels against their scalar definitions (which
// tests/python/test_ops.py checks against PIL), on every SIMD target this
// build dispatches to.
#include "kernels/functional.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace nostall {
namespace {

// Every other r, every fifth g, every seventeenth b (the three channels in
// every order of size), then the grays, then one pixel past the vectors (the
// scalar tail): 106,000 colours, each lane position many times over.
std::vector<uint8_t> Colours() {
  std::vector<uint8_t> colours;
  for (int r = 0; r < 256; r += 2) {
    for (int g = 0; g < 256; g += 5) {
      for (int b = 0; b < 256; b += 17) colours.insert(colours.end(), {uint8_t(r), uint8_t(g), uint8_t(b)});
    }
  }
  for (int v = 0; v < 256; ++v) colours.insert(colours.end(), {uint8_t(v), uint8_t(v), uint8_t(v)});
  colours.insert(colours.end(), {7, 200, 13});
  return colours;
}

// `simd` and `scalar` (a kernel's two paths) give the same bytes on the
// colours, at each factor, on every SIMD target this build dispatches to.
template <class Simd, class Scalar>
void ExpectSameOnEveryTarget(Simd simd_path, Scalar scalar_path, std::initializer_list<double> factors) {
  const std::vector<uint8_t> colours = Colours();
  const int pixels = static_cast<int>(colours.size() / 3);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (double factor : factors) {
      std::vector<uint8_t> simd = colours, scalar = colours;
      simd_path(ImageView{simd.data(), 1, pixels, 3}, factor);
      scalar_path(ImageView{scalar.data(), 1, pixels, 3}, factor);
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

// (Every one of the 2^24 colours at eight factors was checked once,
// docs/benchmarks.md; under the sanitizers that takes too long each time.)
TEST(HueTest, EverySimdTargetGivesTheScalarPathsBytes) {
  ExpectSameOnEveryTarget(AdjustHue, AdjustHueScalar, {0.37, -0.113});
}

TEST(SaturationTest, EverySimdTargetGivesTheScalarPathsBytes) {
  // Inside [0, 1] the blend cannot leave 0-255; outside it clips.
  ExpectSameOnEveryTarget(AdjustSaturation, AdjustSaturationScalar, {0.0, 0.63, 1.5, -0.25});
}

}  // namespace
}  // namespace nostall
