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
      {"source", {{"uri", "elsewhere/train"},
                  {"options", {{"throttle_bandwidth", 1.5e8},
                               {"throttle_latency_ms", 12.5},
                               {"drop_page_cache", true}}}}},
      {"batch_size", 48},
      {"shuffle", true},
      {"seed", 77},
      {"rank", 1},
      {"world_size", 4},
      {"drop_last", true},
      {"pad_ranks", false},
      {"subset", 500},
      {"shuffle_block", 256},
      {"bucketing", {{"by", "aspect_ratio"}, {"group_factor", 2}}},
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
      {"index_beside", "write"},
      {"dct_scaling", false},
      {"cache", nlohmann::json::array(
                    {{{"driver", "minio"}, {"name", "node"}, {"bytes", 1 << 28}},
                     {{"driver", "memcached"}, {"name", "imagenet"}, {"bytes", 1 << 30},
                      {"servers", {"node1:11211", "node2:11211"}}}})},
      {"fields", nlohmann::json::array(
                     {{{"name", "img"}, {"ext", {"png", "jpg"}}, {"kind", "image"}, {"optional", false}},
                      {{"name", "meta"}, {"ext", {"json"}}, {"kind", "json"}, {"optional", true}}})},
      {"max_field_bytes", 4096},
      {"first_epoch", "buffered"},
      {"shuffle_buffer", 1000},
      {"shuffle_window", "auto"},
      {"shard_shuffle", true},
      {"audio", nlohmann::json::array(
                    {{{"type", "Decode"}, {"mono", true}, {"sample_rate", 16000}, {"channels", nullptr},
                      {"max_seconds", 60.0}},
                     {{"type", "RandomCrop"}, {"seconds", 1.0}}})},
      {"detection", nlohmann::json::parse(
                        R"({"box_format":"XYWH","masks":true,"transforms":[{"fill":[0.0],"p":0.3,)"
                        R"("side_range":[1.0,4.0],"type":"RandomZoomOut"},{"size":[300,300],"type":"Resize"}]})")},
      {"video", nlohmann::json::parse(R"([{"type":"Clip","num_frames":4,"step":2,"sampling":"uniform",)"
                                      R"("layout":"TCHW"},{"type":"Resize","size":[32,48]}])")},
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
  EXPECT_NE(message(R"({"source": "d", "fields": {"meta": "json"}})").find("exactly one image or audio field"),
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

// One "transforms" list runs where the fields say: on an audio field's clip,
// on an image and its boxes for a targets field, else on the image; the spec
// is then the one that writes "audio" or "detection" itself.
TEST(SpecTest, TheTransformsListGoesWhereTheFieldsSay) {
  const auto written_back = [](const std::string& text) {
    auto spec = LoaderSpec::FromJson(text);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    return spec.ok() ? nlohmann::json::parse(spec->ToJson()) : nlohmann::json();
  };
  const std::string audio_fields = R"("fields": {"audio": "wav", "label": "cls"})";
  const std::string clip = R"([{"type": "Decode", "sample_rate": 16000}, {"type": "RandomCrop", "seconds": 1.0}])";
  const nlohmann::json routed = written_back(R"({"source": "d", )" + audio_fields + R"(, "transforms": )" + clip + "}");
  const nlohmann::json named = written_back(R"({"source": "d", )" + audio_fields + R"(, "audio": )" + clip + "}");
  EXPECT_EQ(routed, named);
  EXPECT_EQ(routed["transforms"], nlohmann::json::array());
  EXPECT_EQ(routed["audio"].size(), 2u);
  EXPECT_EQ(routed["dtype"], "float32");

  const std::string box_fields = R"("fields": {"image": "jpg", "targets": {"ext": "json", "kind": "targets"}})";
  const std::string steps = R"([{"type": "Resize", "size": [64, 64]}, {"type": "Normalize", "mean": [0.5, 0.5, 0.5], "std": [0.2, 0.2, 0.2]}])";
  const nlohmann::json boxes = written_back(R"({"source": "d", )" + box_fields +
                                            R"(, "detection": {"box_format": "XYWH"}, "transforms": )" + steps + "}");
  const nlohmann::json boxes_named = written_back(
      R"({"source": "d", )" + box_fields + R"(, "detection": {"box_format": "XYWH", "transforms": )" + steps + "}}");
  EXPECT_EQ(boxes, boxes_named);
  EXPECT_EQ(boxes["detection"]["box_format"], "XYWH");
  EXPECT_EQ(boxes["detection"]["transforms"].size(), 2u);
  EXPECT_EQ(boxes["dtype"], "float32");  // Normalize among the detection transforms

  // Without such a field the list is the image's.
  const nlohmann::json image = written_back(R"({"source": "d", "transforms": )" + steps + "}");
  EXPECT_EQ(image["transforms"].size(), 2u);
  EXPECT_FALSE(image.contains("audio") || image.contains("detection"));
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

// Each driver owns its part: the S3 drivers' options inside "source", the
// cache's tiers in "cache"; written back with every option spelled out.
TEST(SpecTest, DriversReadAndWriteTheirOwnOptions) {
  auto s3 = LoaderSpec::FromJson(R"({"source": {"uri": "s3://bucket/train-{0..3}.tar",
      "options": {"endpoint": "http://127.0.0.1:8333", "addressing": "path"}}})");
  ASSERT_TRUE(s3.ok()) << s3.status().ToString();
  EXPECT_EQ(s3->source, "s3://bucket/train-{0..3}.tar");
  EXPECT_EQ(s3->source_options.driver, "s3-tar-shards");
  const nlohmann::json out = nlohmann::json::parse(s3->ToJson());
  EXPECT_EQ(out["source"]["uri"], "s3://bucket/train-{0..3}.tar");
  EXPECT_EQ(out["source"]["driver"], "s3-tar-shards");
  // Every option spelled out (the S3 driver's own test lists them).
  EXPECT_EQ(out["source"]["options"]["endpoint"], "http://127.0.0.1:8333");
  EXPECT_EQ(out["source"]["options"]["addressing"], "path");
  EXPECT_EQ(out["source"]["options"]["region"], "");
  EXPECT_TRUE(s3->notes.empty());
  // A plain path is the short form: its driver found, default options.
  auto folder = LoaderSpec::FromJson(R"({"source": "s3://bucket/images/"})").value();
  EXPECT_EQ(folder.source_options.driver, "s3-image-folder");

  auto message = [](const char* text) { return LoaderSpec::FromJson(text).status().message(); };
  // Another driver's option is named with the driver that refuses it.
  EXPECT_NE(message(R"({"source": {"uri": "s3://b/x/", "options": {"throttle_bandwidth": 5}}})")
                .find("unknown key 'throttle_bandwidth' in the S3 driver's options (it takes: "
                      "endpoint, "),
            std::string::npos);
  EXPECT_NE(message(R"({"source": {"uri": "d", "options": {"endpoint": "http://x"}}})")
                .find("unknown key 'endpoint' in the image-folder driver's options"),
            std::string::npos);
  EXPECT_NE(message(R"({"source": {"uri": "s3://b/x/", "options": {"addressing": "sideways"}}})")
                .find("source.options.addressing must be one of auto, path, virtual"),
            std::string::npos);
  EXPECT_NE(message(R"({"source": {"uri": "d", "driver": "hdfs"}})")
                .find("source.driver must be one of parquet, arrow, s3-image-folder, s3-tar-shards, http-tar-shards, http-image-folder, image-folder, "
                      "tar-shards, coco, not 'hdfs'"),
            std::string::npos);
  // Parquet files, local or on S3: the parquet driver, its own option beside the S3 ones.
  auto pq = LoaderSpec::FromJson(R"({"source": {"uri": "s3://b/data/train-*.parquet",
      "options": {"decoded_cache_mb": 64, "endpoint": "http://127.0.0.1:8333"}}})");
  ASSERT_TRUE(pq.ok()) << pq.status().ToString();
  EXPECT_EQ(pq->source_options.driver, "parquet");
  const nlohmann::json pq_out = nlohmann::json::parse(pq->ToJson());
  EXPECT_EQ(pq_out["source"]["options"]["decoded_cache_mb"], 64);
  EXPECT_EQ(pq_out["source"]["options"]["endpoint"], "http://127.0.0.1:8333");
  EXPECT_EQ(nlohmann::json::parse(LoaderSpec::FromJson(R"({"source": "d/x.parquet"})")->ToJson())["source"]["options"]
                ["decoded_cache_mb"],
            256);
  EXPECT_NE(message(R"({"source": {"uri": "x.parquet", "options": {"decoded_cache_mb": -1}}})")
                .find("decoded_cache_mb"),
            std::string::npos);
  EXPECT_NE(message(R"({"source": {"path": "d"}})").find("unknown key 'path' in source"),
            std::string::npos);
  EXPECT_NE(message(R"({"source": {"uri": "d", "options": [1]}})").find("source.options must be an object"),
            std::string::npos);
  EXPECT_NE(message(R"({"source": 7})").find("source must be the dataset path"), std::string::npos);
  EXPECT_NE(message(R"({"source": "d", "cache": [{"driver": "minio", "name": "c", "bytes": 9, "servers": []}]})")
                .find("cache[0]: unknown key 'servers' in a minio cache tier (it takes none)"),
            std::string::npos);
  EXPECT_NE(message(R"({"source": "d", "cache": [{"driver": "redis", "name": "c", "bytes": 9}]})")
                .find("cache[0]: a cache tier's driver must be one of"),
            std::string::npos);
  EXPECT_NE(message(R"({"source": "d", "cache": [{"driver": "memcached", "name": "c", "bytes": 9, "servers": ["node1:http"]}]})")
                .find("node1:http"),
            std::string::npos);
  EXPECT_NE(message(R"({"source": "d", "cache": [{"name": "c"}]})").find("cache[0]: a tier needs its size"),
            std::string::npos);
  // A tier's size as people write it; one object is one tier.
  auto sized = LoaderSpec::FromJson(R"({"source": "d", "cache": {"name": "c", "bytes": "2GiB"}})");
  ASSERT_TRUE(sized.ok()) << sized.status().ToString();
  ASSERT_EQ(sized->cache.size(), 1u);
  EXPECT_EQ(sized->cache[0].driver, "minio");
  EXPECT_EQ(sized->cache[0].bytes, 2ull << 30);
}

// With a cache, the local drivers keep read files out of the page cache
// unless told otherwise (the cache holds them).
TEST(SpecTest, DropPageCacheFollowsTheCacheUnlessGiven) {
  auto options = [](const char* text) {
    auto spec = LoaderSpec::FromJson(text);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    return nlohmann::json::parse(spec->source_options.driver_options);
  };
  EXPECT_EQ(options(R"({"source": "d"})")["drop_page_cache"], false);
  EXPECT_EQ(options(R"({"source": "d", "cache": [{"name": "c", "bytes": 99}]})")["drop_page_cache"], true);
  EXPECT_EQ(options(R"({"source": {"uri": "d", "options": {"drop_page_cache": false}},
                        "cache": [{"name": "c", "bytes": 99}]})")["drop_page_cache"], false);
}

// Specs of the flat form (every spec written before drivers owned their
// options, and ToJson wrote every field) are read, said so in a note, and
// written in the new form: the same pipeline, the same fingerprint.
TEST(SpecTest, OldFlatSpecsAreReadNotedAndWrittenInTheNewForm) {
  const char* old_s3 = R"({"source": "s3://bucket/train-{0..3}.tar", "batch_size": 8,
      "throttle_bandwidth": 0.0, "throttle_latency_ms": 0.0, "drop_page_cache": true,
      "cache_name": "imagenet", "cache_bytes": 1073741824, "cache_policy": "memcached",
      "cache_servers": ["node1:11211"], "cache_local_bytes": 268435456,
      "s3_endpoint": "http://127.0.0.1:8333", "s3_region": "", "s3_profile": "",
      "s3_addressing": "path", "s3_unsigned": false})";
  auto spec = LoaderSpec::FromJson(old_s3);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->notes.size(), 1u);
  EXPECT_NE(spec->notes[0].find("the flat fields throttle_bandwidth, throttle_latency_ms, "
                                "drop_page_cache, s3_endpoint"),
            std::string::npos)
      << spec->notes[0];
  const nlohmann::json out = nlohmann::json::parse(spec->ToJson());
  EXPECT_EQ(out["source"]["options"]["endpoint"], "http://127.0.0.1:8333");
  EXPECT_EQ(out["source"]["options"]["addressing"], "path");
  EXPECT_EQ(out["cache"], nlohmann::json::parse(R"([
      {"driver": "minio", "name": "imagenet", "bytes": 268435456},
      {"driver": "memcached", "name": "imagenet", "bytes": 1073741824, "servers": ["node1:11211"]}])"));
  for (const char* flat : {"s3_endpoint", "cache_name", "throttle_bandwidth", "drop_page_cache"}) {
    EXPECT_FALSE(out.contains(flat)) << flat;
  }
  auto again = LoaderSpec::FromJson(out.dump());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->notes.empty());
  EXPECT_EQ(again->ToJson(), spec->ToJson());
  EXPECT_EQ(again->Fingerprint(), spec->Fingerprint());

  // A local dataset's flat throttle becomes its driver's options.
  auto local = LoaderSpec::FromJson(R"({"source": "d", "throttle_latency_ms": 20, "s3_endpoint": "",
      "cache_name": ""})").value();
  EXPECT_EQ(nlohmann::json::parse(local.source_options.driver_options)["throttle_latency_ms"], 20.0);
  EXPECT_TRUE(local.cache.empty());
  EXPECT_EQ(local.notes.size(), 1u);

  auto message = [](const char* text) { return LoaderSpec::FromJson(text).status().message(); };
  // A flat field set for the other kind of storage is an error, as it was.
  EXPECT_NE(message(R"({"source": "s3://b/x/", "throttle_bandwidth": 1e6})")
                .find("throttle_bandwidth emulates slow storage over local files"),
            std::string::npos);
  EXPECT_NE(message(R"({"source": "d", "s3_region": "eu-west-1"})")
                .find("s3_region is an option of the S3 drivers"),
            std::string::npos);
  // Given both ways: which one was meant is not guessed.
  EXPECT_NE(message(R"({"source": {"uri": "d", "options": {"throttle_latency_ms": 1}},
                       "throttle_latency_ms": 2})")
                .find("throttle_latency_ms is given twice"),
            std::string::npos);
  EXPECT_NE(message(R"({"source": "d", "cache": [], "cache_name": "x"})").find("cache is given twice"),
            std::string::npos);
  EXPECT_NE(message(R"({"source": "d", "cache_name": "x", "cache_bytes": 9, "cache_local_bytes": 4})")
                .find("cache_local_bytes is the node-local tier"),
            std::string::npos);
  EXPECT_NE(message(R"({"source": "d", "cache_name": 5})").find("cache_name must be a string"),
            std::string::npos);
}

// Where and how the same bytes are read changes no batch.
TEST(SpecTest, FingerprintLeavesOutWhereTheBytesComeFrom) {
  auto fp = [](const char* text) { return LoaderSpec::FromJson(text).value().Fingerprint(); };
  EXPECT_EQ(fp(R"({"source": "s3://b/x/"})"),
            fp(R"({"source": {"uri": "s3://b/x/", "options": {"endpoint": "http://h:1", "region": "r"}}})"));
  EXPECT_EQ(fp(R"({"source": "d", "cache": [{"driver": "memcached", "name": "c", "bytes": 9, "servers": ["a:1"]}]})"),
            fp(R"({"source": "d", "cache": [{"driver": "memcached", "name": "c", "bytes": 9, "servers": ["b:2"]}]})"));
  EXPECT_NE(fp(R"({"source": "d"})"), fp(R"({"source": "e"})"));
}

}  // namespace
}  // namespace nostall
