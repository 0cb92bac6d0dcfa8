#include "geometry/affine.h"

#include <gtest/gtest.h>

namespace nostall {
namespace {

void ExpectPoint(const Affine& a, double x, double y, double ex, double ey) {
  double ox = 0, oy = 0;
  a.Apply(x, y, &ox, &oy);
  EXPECT_NEAR(ox, ex, 1e-9);
  EXPECT_NEAR(oy, ey, 1e-9);
}

TEST(AffineTest, CropResizeThenFlipMovesCornersAndCenters) {
  // A 100x50 box at (10, 20) onto 50x25: half size; then flipped.
  const Affine crop = Affine::CropResize(10, 20, 100, 50, 50, 25);
  ExpectPoint(crop, 10, 20, 0, 0);
  ExpectPoint(crop, 110, 70, 50, 25);
  const Affine both = Affine::FlipX(50).After(crop);
  ExpectPoint(both, 10, 20, 50, 0);
  ExpectPoint(both, 10.5 + 2 * 3, 20, 50 - 3.25, 0);  // pixel 6's center lands at 46.75
  ExpectPoint(Affine::FlipY(25).After(crop), 110, 20, 50, 25);
}

TEST(AffineTest, InverseUndoesAndSingularMapsAreRefused) {
  Affine a;
  a.m = {0.8, -0.6, 5, 0.6, 0.8, -3};
  Affine inv;
  ASSERT_TRUE(a.Inverse(&inv));
  double x = 0, y = 0;
  a.Apply(12.5, -4, &x, &y);
  ExpectPoint(inv, x, y, 12.5, -4);
  ExpectPoint(inv.After(a), 3, 7, 3, 7);
  Affine flat;
  flat.m = {1, 2, 0, 2, 4, 0};
  EXPECT_FALSE(flat.Inverse(&inv));
}

}  // namespace
}  // namespace nostall
