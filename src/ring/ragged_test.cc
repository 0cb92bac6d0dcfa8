#include "ring/ragged.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace nostall::ring {
namespace {

// Element (i, j, l) of a sample of shape `d` (its own values, so a sample
// moved to the wrong place or read from another's bytes shows).
uint16_t Value(int64_t sample, int64_t i, int64_t j, int64_t l) {
  return static_cast<uint16_t>(sample * 7919 + i * 613 + j * 31 + l + 1);
}

// The padded layout `to` of a sample of shape `d`, built element by element.
std::vector<uint16_t> Expected(int64_t sample, const int64_t d[3], const int64_t to[3]) {
  std::vector<uint16_t> out(static_cast<size_t>(to[0] * to[1] * to[2]), 0);
  for (int64_t i = 0; i < d[0]; ++i) {
    for (int64_t j = 0; j < d[1]; ++j) {
      for (int64_t l = 0; l < d[2]; ++l) out[static_cast<size_t>((i * to[1] + j) * to[2] + l)] = Value(sample, i, j, l);
    }
  }
  return out;
}

Geometry Ragged(int64_t b0, int64_t b1, int64_t b2, uint32_t axes, uint32_t multiple) {
  Geometry g;
  g.shape[0] = b0;
  g.shape[1] = b1;
  g.shape[2] = b2;
  g.ragged_axes = axes;
  g.pad_multiple = multiple;
  return g;
}

// Batches of random shapes (images CHW and HWC, sequences, spectrograms),
// with random samples dropped, padded in place, equal the batch built by
// copying each sample into a fresh padded tensor; the padding is zero.
TEST(Ragged, PaddingInPlaceEqualsCopyingIntoAFreshBatch) {
  std::mt19937 rng(7);
  const Geometry kinds[] = {Ragged(3, 64, 48, 6, 8), Ragged(40, 32, 3, 3, 4), Ragged(1, 1, 500, 4, 1),
                            Ragged(80, 300, 1, 2, 1), Ragged(2, 16, 16, 6, 1)};
  for (int round = 0; round < 400; ++round) {
    const Geometry& g = kinds[round % 5];
    const int64_t count = 1 + static_cast<int64_t>(rng() % 9);
    const uint64_t bound = static_cast<uint64_t>(g.shape[0] * g.shape[1] * g.shape[2]);
    std::vector<uint16_t> slot(bound * static_cast<uint64_t>(count), 0xEEEE);
    std::vector<int64_t> dims(static_cast<size_t>(3 * count));
    std::vector<int64_t> keep;
    for (int64_t p = 0; p < count; ++p) {
      int64_t* d = &dims[static_cast<size_t>(3 * p)];
      for (int a = 0; a < 3; ++a) {
        d[a] = (g.ragged_axes >> a & 1) != 0 ? 1 + static_cast<int64_t>(rng() % g.shape[a]) : g.shape[a];
      }
      // Written dense, as a prep thread writes it.
      uint16_t* s = &slot[static_cast<size_t>(p) * bound];
      for (int64_t i = 0; i < d[0]; ++i) {
        for (int64_t j = 0; j < d[1]; ++j) {
          for (int64_t l = 0; l < d[2]; ++l) *s++ = Value(p, i, j, l);
        }
      }
      if (rng() % 4 != 0 || p == count - 1) keep.push_back(p);
    }
    std::vector<int64_t> kept_dims;
    for (int64_t p : keep) kept_dims.insert(kept_dims.end(), &dims[3 * p], &dims[3 * p + 3]);
    int64_t padded[3];
    ASSERT_TRUE(PaddedShape(g, kept_dims.data(), static_cast<int64_t>(keep.size()), padded).ok());
    for (int a = 0; a < 3; ++a) {
      ASSERT_EQ(padded[a] % ((g.ragged_axes >> a & 1) != 0 ? g.pad_multiple : 1), 0);
      ASSERT_LE(padded[a], g.shape[a]);
    }
    PadInPlace(reinterpret_cast<uint8_t*>(slot.data()), bound * 2, 2, dims.data(), keep, padded);
    const size_t n = static_cast<size_t>(padded[0] * padded[1] * padded[2]);
    for (size_t k = 0; k < keep.size(); ++k) {
      const std::vector<uint16_t> want = Expected(keep[k], &kept_dims[3 * k], padded);
      const std::vector<uint16_t> got(slot.begin() + static_cast<ptrdiff_t>(k * n),
                                      slot.begin() + static_cast<ptrdiff_t>((k + 1) * n));
      ASSERT_EQ(got, want) << "round " << round << " sample " << k;
      for (int a = 0; a < 3; ++a) ASSERT_EQ(dims[3 * k + a], kept_dims[3 * k + a]);
    }
    // And a sample copied out of the padded batch into another padding.
    const size_t k = keep.size() - 1;
    int64_t wider[3];
    for (int a = 0; a < 3; ++a) wider[a] = padded[a] + ((g.ragged_axes >> a & 1) != 0 ? 3 : 0);
    std::vector<uint16_t> copy(static_cast<size_t>(wider[0] * wider[1] * wider[2]), 0xEEEE);
    CopyPadded(reinterpret_cast<const uint8_t*>(&slot[k * n]), padded, &kept_dims[3 * k],
               reinterpret_cast<uint8_t*>(copy.data()), wider, 2);
    ASSERT_EQ(copy, Expected(keep[k], &kept_dims[3 * k], wider)) << "round " << round;
  }
}

// A shape past the bound (a slot another process damaged) is an error, not
// a read out of the slot.
TEST(Ragged, AShapePastTheBoundIsAnError) {
  const Geometry g = Ragged(3, 64, 64, 6, 32);
  const int64_t fine[] = {3, 64, 10, 3, 40, 64};
  int64_t padded[3];
  ASSERT_TRUE(PaddedShape(g, fine, 2, padded).ok());
  EXPECT_EQ(padded[0], 3);
  EXPECT_EQ(padded[1], 64);
  EXPECT_EQ(padded[2], 64);
  const int64_t too_tall[] = {3, 65, 10};
  EXPECT_EQ(PaddedShape(g, too_tall, 1, padded).code(), StatusCode::kDataError);
  const int64_t empty[] = {3, 0, 10};
  EXPECT_EQ(PaddedShape(g, empty, 1, padded).code(), StatusCode::kDataError);
  const int64_t channels[] = {4, 10, 10};  // a fixed axis that differs
  EXPECT_EQ(PaddedShape(g, channels, 1, padded).code(), StatusCode::kDataError);
}

}  // namespace
}  // namespace nostall::ring
