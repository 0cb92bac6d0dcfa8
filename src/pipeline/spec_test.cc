#include <gtest/gtest.h>

#include "nostall/loader.h"

namespace nostall {
namespace {

TEST(SpecTest, JsonRoundTripKeepsEverything) {
  auto spec = LoaderSpec::FromJson(R"({
    "source": "data/train", "batch_size": 64, "shuffle": true, "seed": 9,
    "transforms": [{"type": "RandomResizedCrop", "size": 224, "scale": [0.2, 1.0]},
                   {"type": "RandomHorizontalFlip"},
                   {"type": "Normalize", "mean": [0.5, 0.5, 0.5], "std": [0.2, 0.2, 0.2]}],
    "layout": "NHWC", "on_error": "skip"})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->prep.dtype, DType::kFloat32);  // implied by Normalize
  EXPECT_EQ(spec->prep.transforms[0].scale_min, 0.2);
  EXPECT_EQ(spec->on_error, ErrorPolicy::kSkip);
  auto again = LoaderSpec::FromJson(spec->ToJson());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ToJson(), spec->ToJson());
  EXPECT_EQ(again->Fingerprint(), spec->Fingerprint());
}

TEST(SpecTest, FingerprintIgnoresThreadsButNotSeed) {
  auto a = LoaderSpec::FromJson(R"({"source": "d", "num_threads": 1})").value();
  auto b = LoaderSpec::FromJson(R"({"source": "d", "num_threads": 8})").value();
  auto c = LoaderSpec::FromJson(R"({"source": "d", "seed": 1})").value();
  EXPECT_EQ(a.Fingerprint(), b.Fingerprint());
  EXPECT_NE(a.Fingerprint(), c.Fingerprint());
}

TEST(SpecTest, MistakesAreNamed) {
  auto typo = LoaderSpec::FromJson(R"({"source": "d", "batchsize": 3})");
  EXPECT_NE(typo.status().message().find("batchsize"), std::string::npos);
  auto bad_enum = LoaderSpec::FromJson(R"({"source": "d", "layout": "CHW"})");
  EXPECT_NE(bad_enum.status().message().find("NCHW, NHWC"), std::string::npos);
  auto unknown = LoaderSpec::FromJson(R"({"source": "d", "transforms": [{"type": "Blur"}]})");
  EXPECT_NE(unknown.status().message().find("Blur"), std::string::npos);
  EXPECT_FALSE(LoaderSpec::FromJson("{not json").ok());
  EXPECT_FALSE(LoaderSpec::FromJson(R"({"batch_size": 3})").ok());  // no source
}

}  // namespace
}  // namespace nostall
