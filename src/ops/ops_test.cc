// The op registry, the op interface's contract (size kept, draws from the
// sample's stream alone) on hostile sizes, and the SIMD resample paths
// against each other. Pixel parity with PIL is tests/python/test_ops.py; the
// parameters' distributions are tests/python/test_op_distributions.py. Under
// ASan/UBSan and TSan (make test-asan, test-tsan) these exercise every op and
// every vector tail for out-of-bounds access.
#include "ops/op.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "nostall/loader.h"
#include "ops/prep.h"
#include "kernels/resample.h"
#include "testing/test_images.h"

namespace nostall {
namespace {

using nlohmann::json;

// Every registered op with arguments that make it do something on every call.
std::vector<json> EveryOp() {
  return {
      {{"type", "ColorJitter"}, {"brightness", 0.4}, {"contrast", 0.4}, {"saturation", 0.4}, {"hue", 0.2}},
      {{"type", "Grayscale"}, {"num_output_channels", 3}},
      {{"type", "RandomGrayscale"}, {"p", 1.0}},
      {{"type", "GaussianBlur"}, {"kernel_size", json::array({9, 5})}, {"sigma", json::array({0.1, 3.0})}},
      {{"type", "RandomErasing"}, {"p", 1.0}, {"value", "random"}},
      {{"type", "TrivialAugmentWide"}},
      {{"type", "TrivialAugmentWide"}, {"interpolation", "bilinear"}, {"fill", json::array({1, 2, 3})}},
      {{"type", "RandAugment"}, {"num_ops", 4}},
      {{"type", "AutoAugment"}, {"policy", "svhn"}},
      {{"type", "RandomRotation"}, {"degrees", 180}, {"interpolation", "bilinear"}},
      {{"type", "RandomRotation"}, {"degrees", 90}, {"center", json::array({0, 0})}},
      {{"type", "RandomAffine"}, {"degrees", 30}, {"translate", json::array({0.5, 0.5})},
       {"scale", json::array({0.5, 2.0})}, {"shear", 20}},
      {{"type", "RandomVerticalFlip"}, {"p", 1.0}},
      {{"type", "RandomInvert"}, {"p", 1.0}},
      {{"type", "RandomPosterize"}, {"bits", 0}, {"p", 1.0}},
      {{"type", "RandomSolarize"}, {"threshold", 0}, {"p", 1.0}},
      {{"type", "RandomAutocontrast"}, {"p", 1.0}},
      {{"type", "RandomEqualize"}, {"p", 1.0}},
      {{"type", "RandomAdjustSharpness"}, {"sharpness_factor", 3}, {"p", 1.0}},
      {{"type", "RandomPhotometricDistort"}, {"p", 1.0}},
  };
}

std::shared_ptr<const ImageOp> Make(const json& j) {
  auto t = TransformFromJson(j, 0);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->kind, TransformKind::kOp) << j.dump();
  return t->op;
}

TEST(OpsTest, EveryRegisteredOpIsCoveredHere) {
  std::set<std::string> covered;
  for (const json& j : EveryOp()) covered.insert(j["type"].get<std::string>());
  std::string names = ImageOpNames();
  size_t count = 0;
  for (size_t at = 0; at != std::string::npos; at = names.find(", ", at + 1)) ++count;
  EXPECT_EQ(covered.size(), count) << names;
}

// Tiny, thin and odd sizes, both channel counts: no op reads or writes
// outside the image (ASan), and the same stream gives the same pixels.
TEST(OpsTest, OpsKeepTheSizeAndDependOnTheStreamAloneOnHostileSizes) {
  const int sizes[][2] = {{1, 1}, {1, 7}, {7, 1}, {2, 3}, {5, 9}, {33, 17}, {224, 224}};
  for (const json& j : EveryOp()) {
    auto op = Make(j);
    const bool on_tensor = FindTransformSchema(j["type"].get<std::string>())->role == OpRole::kTensor;
    for (int c : {3, 1}) {
      for (const auto& hw : sizes) {
        const int h = hw[0], w = hw[1];
        const auto base = testing::MakePixels(w, h, c, h * 31 + w);
        OpScratch scratch;
        std::vector<uint8_t> a = base, b = base;
        for (int sample = 0; sample < 4; ++sample) {
          Philox r1(7, 1, sample), r2(7, 1, sample);
          if (on_tensor) {
            std::vector<float> fa(a.size(), 0.5f), fb(a.size(), 0.5f);
            op->ApplyOutput(OutputView{fa.data(), true, true, h, w, c}, r1, nullptr);
            op->ApplyOutput(OutputView{fb.data(), true, true, h, w, c}, r2, nullptr);
            EXPECT_EQ(fa, fb) << j.dump();
            continue;
          }
          op->Apply(ImageView{a.data(), h, w, c}, r1, scratch, nullptr);
          op->Apply(ImageView{b.data(), h, w, c}, r2, scratch, nullptr);
          ASSERT_EQ(a, b) << j.dump() << " " << h << "x" << w << "x" << c;
        }
      }
    }
  }
}

// An op's schema says whether it moves pixels (boxes and masks must follow
// it, src/detect): an op whose draws move them says so, and an op that says
// so moves them in some draw. (What moves is what the op records in
// OpScratch::motion, the sample's geometry record.)
TEST(OpsTest, AnOpMovesPixelsExactlyWhenItsSchemaSaysSo) {
  for (const json& j : EveryOp()) {
    const OpSchema& schema = *FindTransformSchema(j["type"].get<std::string>());
    if (schema.role == OpRole::kTensor) {
      EXPECT_FALSE(schema.moves_pixels) << schema.name;
      continue;
    }
    auto op = Make(j);
    bool moved = false;
    for (int sample = 0; sample < 200 && !moved; ++sample) {
      auto pixels = testing::MakePixels(40, 30, 3, sample);
      OpScratch scratch;
      Affine motion;
      scratch.motion = &motion;
      Philox rng(11, 2, sample);
      op->Apply(ImageView{pixels.data(), 30, 40, 3}, rng, scratch, nullptr);
      moved = motion.m != Affine{}.m;
    }
    EXPECT_EQ(moved, schema.moves_pixels) << schema.name;
  }
}

TEST(OpsTest, BadArgumentsNameTheArgument) {
  auto error = [](const json& j) { return TransformFromJson(j, 0).status().ToString(); };
  EXPECT_NE(error({{"type", "ColorJitter"}, {"brightness", -1}}).find("brightness must be non-negative"),
            std::string::npos);
  EXPECT_NE(error({{"type", "ColorJitter"}, {"hue", json::array({0.1, 0.9})}}).find("hue values"),
            std::string::npos);
  EXPECT_NE(error({{"type", "RandomErasing"}, {"value", "noise"}}).find("\"random\""), std::string::npos);
  EXPECT_NE(error({{"type", "RandomAffine"}, {"degrees", 5}, {"translate", json::array({2, 0})}})
                .find("translate"),
            std::string::npos);
  EXPECT_NE(error({{"type", "TrivialAugmentWide"}, {"bins", 3}}).find("unknown argument 'bins'"),
            std::string::npos);
  EXPECT_NE(error({{"type", "RandomPosterize"}}).find("needs bits"), std::string::npos);
  EXPECT_NE(error({{"type", "RandomRotation"}, {"degrees", 5}, {"expand", true}}).find("a batch has one size"),
            std::string::npos);
  EXPECT_NE(error({{"type", "RandomResizedCrop"}, {"size", 8}, {"scale", json::array({0, 1})}}).find("scale"),
            std::string::npos);
  EXPECT_NE(error({{"type", "Normalize"}, {"mean", json::array({0.5})}, {"std", json::array({0})}})
                .find("std must be positive"),
            std::string::npos);
}

// Every argument a transform reads is one its schema declares (a read the
// schema does not declare is an internal error, whether or not the argument
// is given), for every transform: the schema and the code that reads it agree.
TEST(OpsTest, EveryTransformReadsOnlyWhatItsSchemaDeclares) {
  std::vector<json> all = EveryOp();
  all.push_back({{"type", "RandomResizedCrop"}, {"size", 8}});
  all.push_back({{"type", "Resize"}, {"size", 8}, {"max_size", 20}});
  all.push_back({{"type", "CenterCrop"}, {"size", json::array({4, 6})}});
  all.push_back({{"type", "RandomHorizontalFlip"}});
  all.push_back({{"type", "Normalize"}, {"mean", json::array({0.5})}, {"std", json::array({0.2})}});
  std::set<std::string> seen;
  for (const json& j : all) {
    auto t = TransformFromJson(j, 0);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    seen.insert(j["type"].get<std::string>());
    // Written back, it reads again to the same.
    auto again = TransformFromJson(TransformToJson(t.value()), 0);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(TransformToJson(again.value()), TransformToJson(t.value()));
  }
  // The box transforms (a detection spec's: src/detect reads them) are
  // checked by their schemas alone, here.
  // (Their required arguments given.)
  const std::map<std::string, json> required = {
      {"ScaleJitter", {{"target_size", {64, 64}}}},
      {"RandomShortestSize", {{"min_size", {32, 48}}}},
      {"RandomResize", {{"min_size", 32}, {"max_size", 64}}},
      {"FixedSizeCrop", {{"size", 64}}}};
  for (const OpSchema& s : BoxSchemas()) {
    json j = required.count(s.name) ? required.at(s.name) : json::object();
    j["type"] = s.name;
    auto checked = CheckTransformJson(j.dump());
    ASSERT_TRUE(checked.ok()) << checked.status().ToString();
    auto again = CheckTransformJson(checked.value());
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again.value(), checked.value());
    seen.insert(s.name);
  }
  EXPECT_EQ(seen.size(), TransformSchemas().size());
  for (const OpSchema& s : TransformSchemas()) {
    EXPECT_FALSE(s.doc.empty()) << s.name;
    for (const ArgSchema& a : s.args) EXPECT_FALSE(a.doc.empty()) << s.name << "." << a.name;
  }
}

// The fused planar resample (NCHW, flip, normalise) writes what the
// interleaved resample followed by the layout would: every tail of the
// 4-pixel groups, every tap count.
TEST(OpsTest, PlanarResampleEqualsInterleavedThenLayout) {
  const auto src = testing::MakePixels(301, 203, 3, 5);
  const int outs[][2] = {{1, 1}, {3, 5}, {7, 6}, {64, 61}, {224, 223}};
  const double boxes[][4] = {{0, 0, 301, 203}, {10.5, 3.25, 40.5, 50.75}, {100, 50, 2, 3}};
  const float a[3] = {0.5f, 2.0f, -1.0f}, b[3] = {1.0f, -3.0f, 0.25f};
  for (const auto& o : outs) {
    for (const auto& box : boxes) {
      for (bool flip : {false, true}) {
        const int oh = o[0], ow = o[1];
        ResampleScratch s1, s2;
        std::vector<uint8_t> hwc(static_cast<size_t>(oh) * ow * 3 + 4);
        ResampleBox(src.data(), 301, 203, 301 * 3, 3, box[0], box[1], box[2], box[3], hwc.data(),
                    ow, oh, &s1, flip);
        std::vector<float> planes(static_cast<size_t>(oh) * ow * 3);
        std::vector<uint8_t> planes8(planes.size());
        ASSERT_TRUE(ResampleBoxPlanar(src.data(), 301, 203, 301 * 3, 3, box[0], box[1], box[2],
                                      box[3], ow, oh, flip, a, b, planes.data(), nullptr, &s2));
        ASSERT_TRUE(ResampleBoxPlanar(src.data(), 301, 203, 301 * 3, 3, box[0], box[1], box[2],
                                      box[3], ow, oh, flip, a, b, nullptr, planes8.data(), &s2));
        std::vector<float> via(planes.size());
        InterleavedToPlanes(hwc.data(), ow, oh, a, b, via.data(), nullptr);
        const size_t plane = static_cast<size_t>(oh) * ow;
        for (size_t i = 0; i < plane; ++i) {
          for (int k = 0; k < 3; ++k) {
            ASSERT_EQ(planes8[k * plane + i], hwc[i * 3 + k]) << oh << "x" << ow << " " << i;
            ASSERT_FLOAT_EQ(planes[k * plane + i], via[k * plane + i]);
            ASSERT_FLOAT_EQ(via[k * plane + i], hwc[i * 3 + k] * a[k] + b[k]);
          }
        }
      }
    }
  }
}

// The whole prep with the recipe's ops, through odd output sizes, every
// layout and dtype: same bytes for the same key, different for another.
TEST(OpsTest, RecipeThroughPrepareSampleIsDeterministic) {
  const auto px = testing::MakePixels(97, 61, 3, 2);
  const auto jpg = testing::EncodeJpeg(px, 97, 61, 3, 90);
  for (const char* layout : {"NCHW", "NHWC"}) {
    for (const char* dtype : {"float32", "uint8"}) {
      std::string norm = std::string(dtype) == "float32"
                             ? R"({"type": "Normalize", "mean": [0.5, 0.5, 0.5], "std": [0.2, 0.2, 0.2]}, )"
                             : "";
      auto spec = LoaderSpec::FromJson(
          std::string(R"({"source": ".", "layout": ")") + layout + R"(", "dtype": ")" + dtype +
          R"(", "transforms": [{"type": "RandomResizedCrop", "size": [37, 43]},
             {"type": "RandomHorizontalFlip"}, {"type": "TrivialAugmentWide", "interpolation": "bilinear"},
             {"type": "ColorJitter", "brightness": 0.3, "hue": 0.1}, )" +
          norm + R"({"type": "RandomErasing", "p": 0.7}]})");
      ASSERT_TRUE(spec.ok()) << spec.status().ToString();
      ASSERT_TRUE(spec.value().prep.Validate().ok());
      const size_t bytes = SampleBytes(spec.value().prep, 37, 43);
      PrepScratch scratch;
      for (int64_t i = 0; i < 20; ++i) {
        std::vector<uint8_t> a(bytes), b(bytes), c(bytes);
        ASSERT_TRUE(PrepareSample(spec.value().prep, jpg.data(), jpg.size(), {3, 0, i}, 37, 43,
                                  a.data(), &scratch).ok());
        ASSERT_TRUE(PrepareSample(spec.value().prep, jpg.data(), jpg.size(), {3, 0, i}, 37, 43,
                                  b.data(), &scratch).ok());
        ASSERT_TRUE(PrepareSample(spec.value().prep, jpg.data(), jpg.size(), {3, 1, i}, 37, 43,
                                  c.data(), &scratch).ok());
        EXPECT_EQ(a, b);
        EXPECT_NE(a, c);
      }
    }
  }
}

}  // namespace
}  // namespace nostall
