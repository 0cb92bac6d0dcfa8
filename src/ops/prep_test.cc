#include "ops/prep.h"

#include <gtest/gtest.h>

#include <opencv2/imgproc.hpp>

#include <cmath>

#include "codecs/decode.h"
#include "testing/test_images.h"

namespace nostall {
namespace {

using testing::EncodeJpeg;
using testing::EncodePng;
using testing::MakePixels;

double MeanAbsDiff(const uint8_t* a, const uint8_t* b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += std::abs(int(a[i]) - int(b[i]));
  return s / n;
}

PrepSpec Nhwc(std::vector<Transform> t) {
  PrepSpec spec;
  spec.layout = Layout::kNHWC;
  spec.transforms = std::move(t);
  return spec;
}

TEST(PrepTest, FullDecodeMatchesTheEncodedPixels) {
  auto px = MakePixels(120, 90, 3, 4);
  auto jpg = EncodeJpeg(px, 120, 90, 3, 95);
  std::vector<uint8_t> out(120 * 90 * 3);
  PrepScratch scratch;
  ASSERT_TRUE(PrepareSample(Nhwc({}), jpg.data(), jpg.size(), {0, 0, 0}, 90, 120, out.data(),
                            &scratch).ok());
  EXPECT_LT(MeanAbsDiff(out.data(), px.data(), px.size()), 2.0);
}

// The scaled, cropped decode reads the right region at the right size: it
// matches decoding everything, cropping and resizing with an independent
// resampler (OpenCV's area filter). The search over small shifts shows the
// best alignment; the filters differ, so the match is close, not exact.
TEST(PrepTest, ScaledCroppedDecodeMatchesFullDecodeThenCropAndResize) {
  const int w = 640, h = 480;
  auto px = MakePixels(w, h, 3, 9);
  auto jpg = EncodeJpeg(px, w, h, 3, 90);
  Transform rrc{TransformKind::kRandomResizedCrop};
  rrc.height = rrc.width = 96;
  PrepSpec spec = Nhwc({rrc});
  PrepScratch scratch;
  for (int64_t i = 0; i < 20; ++i) {
    std::vector<uint8_t> out(96 * 96 * 3);
    ASSERT_TRUE(PrepareSample(spec, jpg.data(), jpg.size(), {5, 0, i}, 96, 96, out.data(),
                              &scratch).ok());
    SamplePlan plan;
    ASSERT_TRUE(PlanSample(spec, w, h, 5, 0, i, &plan).ok());
    cv::Mat full(h, w, CV_8UC3, px.data());
    double best = 1e9;
    for (int dy = -4; dy <= 4; ++dy) {
      for (int dx = -4; dx <= 4; ++dx) {
        int x0 = std::lround(plan.x) + dx, y0 = std::lround(plan.y) + dy;
        int rw = std::lround(plan.w), rh = std::lround(plan.h);
        if (x0 < 0 || y0 < 0 || x0 + rw > w || y0 + rh > h) continue;
        cv::Mat ref;
        cv::resize(full(cv::Rect(x0, y0, rw, rh)), ref, cv::Size(96, 96), 0, 0, cv::INTER_AREA);
        best = std::min(best, MeanAbsDiff(out.data(), ref.data, out.size()));
      }
    }
    EXPECT_LT(best, 2.5) << "sample " << i;
  }
}

TEST(PrepTest, FlipMirrorsAndNormalizeAndLayoutAreExact) {
  const int w = 32, h = 16;
  auto px = MakePixels(w, h, 3, 1);
  auto png = EncodePng(px, w, h, 3);  // lossless, so pixels compare exactly
  Transform flip{TransformKind::kRandomHorizontalFlip};
  flip.p = 1.0;
  Transform norm{TransformKind::kNormalize};
  norm.mean = {0.5, 0.25, 0.0};
  norm.std = {0.5, 0.25, 1.0};
  PrepSpec spec;
  spec.layout = Layout::kNCHW;
  spec.dtype = DType::kFloat32;
  spec.transforms = {flip, norm};
  std::vector<float> out(3 * w * h);
  PrepScratch scratch;
  ASSERT_TRUE(PrepareSample(spec, png.data(), png.size(), {0, 0, 0}, h, w, out.data(), &scratch).ok());
  for (int y = 0; y < h; y += 5) {
    for (int x = 0; x < w; x += 7) {
      for (int c = 0; c < 3; ++c) {
        float src = px[(y * w + (w - 1 - x)) * 3 + c] / 255.0f;
        float want = (src - norm.mean[c]) / norm.std[c];
        EXPECT_NEAR(out[c * w * h + y * w + x], want, 1e-5);
      }
    }
  }
}

TEST(PrepTest, GrayscaleFromColourAndColourFromGrayscale) {
  auto gray = MakePixels(40, 30, 1, 2);
  auto gjpg = EncodeJpeg(gray, 40, 30, 1, 95);
  PrepScratch scratch;
  std::vector<uint8_t> rgb(40 * 30 * 3);
  ASSERT_TRUE(PrepareSample(Nhwc({}), gjpg.data(), gjpg.size(), {0, 0, 0}, 30, 40, rgb.data(),
                            &scratch).ok());
  EXPECT_EQ(rgb[300], rgb[301]);
  EXPECT_EQ(rgb[301], rgb[302]);
  PrepSpec l = Nhwc({});
  l.mode = ColorMode::kGray;
  std::vector<uint8_t> one(40 * 30);
  ASSERT_TRUE(PrepareSample(l, gjpg.data(), gjpg.size(), {0, 0, 0}, 30, 40, one.data(), &scratch).ok());
  EXPECT_LT(MeanAbsDiff(one.data(), gray.data(), gray.size()), 2.0);
}

// CMYK and YCCK JPEGs (stored in Adobe's inverted polarity) decode to the
// RGB PIL gives: R = (255 - C)(255 - K) / 255 for real ink C, K; in stored
// values, c * k / 255. Whole images and scaled, cropped decodes alike.
TEST(PrepTest, CmykAndYcckJpegsDecodeToRgbAsPilConvertsThem) {
  const int w = 160, h = 120;
  auto ink = MakePixels(w, h, 4, 3);  // stored CMYK values
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  for (size_t p = 0; p < static_cast<size_t>(w) * h; ++p) {
    for (int c = 0; c < 3; ++c) {
      rgb[p * 3 + c] = static_cast<uint8_t>(std::lround(ink[p * 4 + c] * ink[p * 4 + 3] / 255.0));
    }
  }
  for (bool ycck : {false, true}) {
    SCOPED_TRACE(ycck ? "YCCK" : "CMYK");
    auto jpg = testing::EncodeCmykJpeg(ink, w, h, ycck, /*quality=*/98);
    std::vector<uint8_t> out(rgb.size());
    PrepScratch scratch;
    Status st = PrepareSample(Nhwc({}), jpg.data(), jpg.size(), {0, 0, 0}, h, w, out.data(),
                              &scratch);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_LT(MeanAbsDiff(out.data(), rgb.data(), rgb.size()), 1.5);
    // Gray output: PIL's L from that RGB.
    PrepSpec gray = Nhwc({});
    gray.mode = ColorMode::kGray;
    std::vector<uint8_t> l(static_cast<size_t>(w) * h);
    ASSERT_TRUE(PrepareSample(gray, jpg.data(), jpg.size(), {0, 0, 0}, h, w, l.data(), &scratch).ok());
    std::vector<uint8_t> want_l(l.size());
    for (size_t p = 0; p < l.size(); ++p) {
      want_l[p] = static_cast<uint8_t>(
          (rgb[p * 3] * 19595 + rgb[p * 3 + 1] * 38470 + rgb[p * 3 + 2] * 7471 + 0x8000) >> 16);
    }
    EXPECT_LT(MeanAbsDiff(l.data(), want_l.data(), l.size()), 1.5);
    // A random resized crop (DCT-scaled, column-cropped decode) lands on the
    // same pixels as the same crop of an RGB JPEG of those colours.
    auto rgb_jpg = EncodeJpeg(rgb, w, h, 3, 98);
    Transform rrc{TransformKind::kRandomResizedCrop};
    rrc.height = rrc.width = 32;
    for (int64_t i = 0; i < 8; ++i) {
      std::vector<uint8_t> a(32 * 32 * 3), b(32 * 32 * 3);
      ASSERT_TRUE(PrepareSample(Nhwc({rrc}), jpg.data(), jpg.size(), {1, 0, i}, 32, 32, a.data(),
                                &scratch).ok());
      ASSERT_TRUE(PrepareSample(Nhwc({rrc}), rgb_jpg.data(), rgb_jpg.size(), {1, 0, i}, 32, 32,
                                b.data(), &scratch).ok());
      EXPECT_LT(MeanAbsDiff(a.data(), b.data(), a.size()), 3.0) << "sample " << i;
    }
    // Damaged: a DataError, and nothing leaked on libjpeg's error path
    // (its longjmp skips destructors; the ASan build checks for leaks).
    std::vector<uint8_t> garbled = jpg;
    for (size_t i = jpg.size() / 3; i < jpg.size() - 10; i += 7) garbled[i] ^= 0x5a;
    EXPECT_EQ(PrepareSample(Nhwc({}), garbled.data(), garbled.size(), {0, 0, 0}, h, w, out.data(),
                            &scratch).code(),
              StatusCode::kDataError);
  }
}

TEST(PrepTest, BadBytesAreDataErrorsThatSayWhy) {
  PrepScratch scratch;
  std::vector<uint8_t> out(64 * 64 * 3);
  auto run = [&](const std::vector<uint8_t>& bytes, const PrepSpec& spec = Nhwc({})) {
    return PrepareSample(spec, bytes.data(), bytes.size(), {0, 0, 0}, 64, 64, out.data(), &scratch);
  };
  auto jpg = EncodeJpeg(MakePixels(64, 64, 3, 0), 64, 64, 3);
  Status empty = run({});
  EXPECT_EQ(empty.code(), StatusCode::kDataError);
  EXPECT_NE(empty.message().find("empty"), std::string::npos);
  Status text = run({'h', 'e', 'l', 'l', 'o'});
  EXPECT_NE(text.message().find("not an image nostall reads"), std::string::npos) << text.ToString();
  std::vector<uint8_t> cut(jpg.begin(), jpg.begin() + jpg.size() / 2);
  Status truncated = run(cut);
  EXPECT_EQ(truncated.code(), StatusCode::kDataError);
  EXPECT_NE(truncated.message().find("truncated"), std::string::npos) << truncated.ToString();
  std::vector<uint8_t> header_only(jpg.begin(), jpg.begin() + 20);
  EXPECT_EQ(run(header_only).code(), StatusCode::kDataError);
  std::vector<uint8_t> garbled = jpg;
  for (size_t i = jpg.size() / 3; i < jpg.size() - 10; i += 7) garbled[i] ^= 0x5a;
  EXPECT_EQ(run(garbled).code(), StatusCode::kDataError);
  PrepSpec small = Nhwc({});
  small.max_pixels = 1000;
  Status big = run(jpg, small);
  EXPECT_NE(big.message().find("max_pixels"), std::string::npos);
  auto png = EncodePng(MakePixels(64, 64, 3, 0), 64, 64, 3);
  std::vector<uint8_t> png_cut(png.begin(), png.begin() + png.size() / 2);
  EXPECT_EQ(run(png_cut).code(), StatusCode::kDataError);
  // A sample of the wrong size for the batch is reported, not written.
  auto other = EncodeJpeg(MakePixels(32, 32, 3, 0), 32, 32, 3);
  EXPECT_NE(run(other).message().find("batch is 64x64"), std::string::npos);
}

}  // namespace
}  // namespace nostall
