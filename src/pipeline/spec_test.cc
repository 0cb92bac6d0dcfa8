#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

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

// Every field, one at a time set to a value other than its default, comes
// back from ToJson(FromJson(...)) as given. A field added to the spec and
// not here fails the test, so none can be forgotten by ToJson.
TEST(SpecTest, EveryFieldRoundTrips) {
  const std::map<std::string, nlohmann::json> changed = {
      {"source", "elsewhere/train"},
      {"batch_size", 48},
      {"shuffle", true},
      {"seed", 77},
      {"rank", 1},
      {"world_size", 4},
      {"drop_last", true},
      {"subset", 500},
      {"shuffle_block", 256},
      {"transforms", nlohmann::json::array({{{"type", "RandomHorizontalFlip"}, {"p", 0.25}}})},
      {"dtype", "float32"},
      {"layout", "NHWC"},
      {"mode", "L"},
      {"max_pixels", 1000000},
      {"num_threads", 3},
      {"reads_in_flight", 9},
      {"prefetch", 5},
      {"autotune", "off"},
      {"on_error", "skip"},
      {"index_cache_dir", "/tmp/idx"},
      {"use_index_cache", false},
      {"dct_scaling", false},
      {"throttle_bandwidth", 1.5e8},
      {"throttle_latency_ms", 12.5},
      {"drop_page_cache", true},
      {"cache_name", "imagenet"},
      {"cache_bytes", 1 << 30},
      {"cache_policy", "lru"},
      {"cache_servers", {"node1:11211", "node2:11211"}},
      {"cache_local_bytes", 1 << 28},
      {"s3_endpoint", "http://127.0.0.1:8333"},
      {"s3_region", "eu-west-1"},
      {"s3_profile", "train"},
      {"s3_addressing", "path"},
      {"s3_unsigned", true},
      {"fields", nlohmann::json::array(
                     {{{"name", "img"}, {"ext", {"png", "jpg"}}, {"kind", "image"}, {"optional", false}},
                      {{"name", "meta"}, {"ext", {"json"}}, {"kind", "json"}, {"optional", true}}})},
      {"max_field_bytes", 4096},
  };
  for (const std::string& field : LoaderSpec::FieldNames()) {
    SCOPED_TRACE(field);
    auto it = changed.find(field);
    ASSERT_NE(it, changed.end()) << "add the new field to this test";
    nlohmann::json in = {{"source", "d"}};
    in[field] = it->second;
    auto spec = LoaderSpec::FromJson(in.dump());
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    const nlohmann::json out = nlohmann::json::parse(spec->ToJson());
    ASSERT_TRUE(out.contains(field)) << "ToJson leaves it out";
    EXPECT_EQ(out[field], it->second);
    auto again = LoaderSpec::FromJson(out.dump());
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->ToJson(), spec->ToJson());
  }
  EXPECT_EQ(changed.size(), LoaderSpec::FieldNames().size());
}

TEST(SpecTest, FieldsReadAsAnObjectOrAListAndAreWrittenAsAList) {
  auto object = LoaderSpec::FromJson(
      R"({"source": "d", "fields": {"image": "jpg;PNG", "label": "cls", "meta": {"ext": ".json", "optional": true}}})");
  ASSERT_TRUE(object.ok()) << object.status().ToString();
  const auto& f = object->source_options.fields;
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].name, "image");
  EXPECT_EQ(f[0].kind, FieldKind::kImage);
  EXPECT_EQ(f[0].extensions, (std::vector<std::string>{"jpg", "png"}));
  EXPECT_EQ(f[1].kind, FieldKind::kLabel);
  EXPECT_EQ(f[2].kind, FieldKind::kJson);
  EXPECT_TRUE(f[2].optional);
  EXPECT_EQ(f[2].extensions, (std::vector<std::string>{"json"}));
  auto list = LoaderSpec::FromJson(nlohmann::json::parse(object->ToJson()).dump());
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->ToJson(), object->ToJson());
  // Without fields the spec is written as it always was.
  EXPECT_EQ(nlohmann::json::parse(LoaderSpec::FromJson(R"({"source": "d"})")->ToJson()).count("fields"), 0u);
}

TEST(SpecTest, BadFieldsAreNamed) {
  auto message = [](const char* text) { return LoaderSpec::FromJson(text).status().message(); };
  EXPECT_NE(message(R"({"source": "d", "fields": {"meta": "json"}})").find("exactly one image field"),
            std::string::npos);
  EXPECT_NE(message(R"({"source": "d", "fields": {"a": "jpg", "b": "png"}})").find("exactly one image"),
            std::string::npos);
  EXPECT_NE(message(R"({"source": "d", "fields": {"image": "jpg", "meta": ""}})").find("field 'meta'"),
            std::string::npos);
  EXPECT_NE(message(R"({"source": "d", "fields": {"image": "jpg", "m": {"ext": "json", "kind": "blob"}}})")
                .find("blob"),
            std::string::npos);
  EXPECT_NE(message(R"({"source": "d", "fields": {"image": {"ext": "jpg", "optional": true}}})")
                .find("cannot be optional"),
            std::string::npos);
  EXPECT_NE(message(R"({"source": "d", "fields": {"image": "jpg", "m": {"ext": "json", "opt": 1}}})")
                .find("unknown key 'opt'"),
            std::string::npos);
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
