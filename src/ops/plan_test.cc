#include <gtest/gtest.h>

#include <cmath>

#include "nostall/transforms.h"

namespace nostall {
namespace {

Transform Rrc(int size) {
  Transform t{TransformKind::kRandomResizedCrop};
  t.height = t.width = size;
  return t;
}

TEST(PlanTest, RandomResizedCropStaysInsideWithinScaleAndRatio) {
  PrepSpec spec;
  spec.transforms = {Rrc(224)};
  for (int64_t i = 0; i < 2000; ++i) {
    SamplePlan p;
    ASSERT_TRUE(PlanSample(spec, 500, 375, 7, 0, i, &p).ok());
    EXPECT_EQ(p.out_w, 224);
    EXPECT_EQ(p.out_h, 224);
    ASSERT_GE(p.x, 0);
    ASSERT_GE(p.y, 0);
    ASSERT_LE(p.x + p.w, 500.0 + 1e-9);
    ASSERT_LE(p.y + p.h, 375.0 + 1e-9);
    double area = p.w * p.h / (500.0 * 375.0);
    // Rounding w and h to whole pixels can move the area a little.
    ASSERT_GE(area, 0.08 * 0.97);
    ASSERT_LE(p.w / p.h, 4.0 / 3.0 * 1.05);
    ASSERT_GE(p.w / p.h, 3.0 / 4.0 / 1.05);
  }
}

TEST(PlanTest, SameKeySamePlanOtherKeyOtherPlan) {
  PrepSpec spec;
  Transform flip{TransformKind::kRandomHorizontalFlip};
  spec.transforms = {Rrc(64), flip};
  SamplePlan a, b, c;
  ASSERT_TRUE(PlanSample(spec, 300, 200, 1, 2, 3, &a).ok());
  ASSERT_TRUE(PlanSample(spec, 300, 200, 1, 2, 3, &b).ok());
  ASSERT_TRUE(PlanSample(spec, 300, 200, 1, 3, 3, &c).ok());
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.w, b.w);
  EXPECT_EQ(a.flip, b.flip);
  EXPECT_FALSE(a.x == c.x && a.y == c.y && a.w == c.w);
}

TEST(PlanTest, ResizeThenCenterCropFollowsTorchvision) {
  PrepSpec spec;
  Transform resize{TransformKind::kResize};
  resize.short_side = 256;
  Transform crop{TransformKind::kCenterCrop};
  crop.height = crop.width = 224;
  spec.transforms = {resize, crop};
  SamplePlan p;
  ASSERT_TRUE(PlanSample(spec, 500, 375, 0, 0, 0, &p).ok());
  // 500x375 -> 341x256 (int(256 * 500 / 375)); crop left round(117/2)=58, top 16.
  const double s = 375.0 / 256.0;
  EXPECT_NEAR(p.w, 224 * 500.0 / 341, 1e-9);
  EXPECT_NEAR(p.h, 224 * s, 1e-9);
  EXPECT_NEAR(p.x, 58 * 500.0 / 341, 1e-9);
  EXPECT_NEAR(p.y, 16 * s, 1e-9);
  EXPECT_EQ(p.out_w, 224);
}

TEST(PlanTest, CropAfterFlipComesFromTheMirroredSide) {
  Transform flip{TransformKind::kRandomHorizontalFlip};
  flip.p = 1.0;
  Transform rrc = Rrc(10);
  rrc.scale_min = rrc.scale_max = 0.16;
  rrc.ratio_min = rrc.ratio_max = 0.5;
  PrepSpec flipped_spec, plain_spec;
  flipped_spec.transforms = {flip, rrc};
  plain_spec.transforms = {flip, rrc};
  plain_spec.transforms[0].p = 0.0;  // still draws, so the crop draws line up
  int mirrored = 0;
  for (int64_t i = 0; i < 50; ++i) {
    SamplePlan f, p;
    ASSERT_TRUE(PlanSample(flipped_spec, 100, 80, 3, 0, i, &f).ok());
    ASSERT_TRUE(PlanSample(plain_spec, 100, 80, 3, 0, i, &p).ok());
    EXPECT_TRUE(f.flip);
    EXPECT_FALSE(p.flip);
    EXPECT_NEAR(f.y, p.y, 1e-9);
    EXPECT_NEAR(f.x, 100 - p.x - p.w, 1e-9);
    mirrored += std::abs(f.x - p.x) > 1;
  }
  EXPECT_GT(mirrored, 25);
}

TEST(PlanTest, CenterCropLargerThanImageIsADataError) {
  PrepSpec spec;
  Transform crop{TransformKind::kCenterCrop};
  crop.height = crop.width = 224;
  spec.transforms = {crop};
  SamplePlan p;
  Status st = PlanSample(spec, 100, 300, 0, 0, 0, &p);
  EXPECT_EQ(st.code(), StatusCode::kDataError);
}

TEST(PlanTest, ValidateRejectsMisplacedNormalizeAndBadSizes) {
  PrepSpec spec;
  spec.dtype = DType::kFloat32;
  Transform norm{TransformKind::kNormalize};
  norm.mean = {0.5, 0.5, 0.5};
  norm.std = {0.5, 0.5, 0.5};
  spec.transforms = {norm, Rrc(3)};
  EXPECT_FALSE(spec.Validate().ok());
  spec.transforms = {Rrc(0)};
  EXPECT_FALSE(spec.Validate().ok());
  spec.transforms = {Rrc(8), norm};
  EXPECT_TRUE(spec.Validate().ok());
  spec.dtype = DType::kUint8;
  EXPECT_FALSE(spec.Validate().ok());
}

}  // namespace
}  // namespace nostall
