// LoaderSpec <-> JSON (the format is described in docs/spec.md).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "audio/kind.h"
#include "detect/detect.h"
#include "video/kind.h"
#include "cache/driver.h"
#include "common/json_fields.h"
#include "nostall/loader.h"
#include "ops/op.h"
#include "pipeline/pipeline.h"
#include "pipeline/spec_legacy.h"
#include "source/driver.h"
#include "source/record_json.h"

namespace nostall {
namespace {

using nlohmann::json;

// Typed reads of one field, each naming it in its errors: common/json_fields.h.

template <typename E>
Status Enum(const json& j, const char* key, std::initializer_list<std::pair<const char*, E>> names,
            E* out) {
  if (!j.contains(key)) return Status::OK();
  std::string allowed;
  for (const auto& [name, value] : names) allowed += std::string(allowed.empty() ? "" : ", ") + name;
  if (!j[key].is_string()) {
    return InvalidArgument(std::string(key) + " must be one of " + allowed + ", not " + Shown(j[key]));
  }
  std::string v = j[key].get<std::string>();
  for (const auto& [name, value] : names) {
    if (v == name) {
      *out = value;
      return Status::OK();
    }
  }
  return InvalidArgument(std::string(key) + " must be one of " + allowed + ", not '" + v + "'");
}

}  // namespace

const std::vector<std::string>& LoaderSpec::FieldNames() {
  static const std::vector<std::string> kFields = {
      "source", "batch_size", "shuffle", "seed", "rank", "world_size", "drop_last", "pad_ranks", "subset",
      "shuffle_block", "transforms", "dtype", "layout", "mode", "max_pixels", "num_threads",
      "reads_in_flight", "prefetch", "autotune", "on_error", "index_cache_dir", "use_index_cache",
      "index_beside", "dct_scaling", "cache", "fields", "max_field_bytes", "first_epoch",
      "shuffle_buffer", "shuffle_window", "shard_shuffle", "audio", "detection", "bucketing", "video"};
  return kFields;
}

Status LoaderSpec::CheckJsonDepth(const std::string& text, int max_depth, const std::string& what) {
  return nostall::CheckJsonDepth(text, max_depth, what);
}

namespace {

// "source": the dataset's path, or {"uri", "driver", "options"} with the
// options its driver reads (source/driver.h). `cached`: the spec has a
// cache (a driver's default may follow it).
Status SourceFromJson(const json& v, bool cached, LoaderSpec* s) {
  json given = json::object();
  if (v.is_string()) {
    s->source = v.get<std::string>();
  } else if (v.is_object()) {
    NOSTALL_RETURN_IF_ERROR(CheckKeys(v, "source", {"uri", "driver", "options"}));
    if (!v.contains("uri")) return InvalidArgument("source needs \"uri\" (the dataset path)");
    NOSTALL_RETURN_IF_ERROR(GetString(v, "source.", "uri", &s->source));
    NOSTALL_RETURN_IF_ERROR(GetString(v, "source.", "driver", &s->source_options.driver));
    if (v.contains("options") && !v["options"].is_null()) {
      given = v["options"];
      if (!given.is_object()) {
        return InvalidArgument("source.options must be an object of the driver's options, not " +
                               Shown(given));
      }
    }
  } else {
    return InvalidArgument("source must be the dataset path or {\"uri\": ..., \"driver\": ..., "
                           "\"options\": {...}}, not " + Shown(v));
  }
  NOSTALL_ASSIGN_OR_RETURN(json options,
                           ResolveSourceOptions(s->source, &s->source_options.driver, given, cached));
  s->source_options.driver_options = options.dump();
  return Status::OK();
}

// "cache": its tiers, each read by its driver (cache/driver.h).
Status CacheFromJson(const json& j, LoaderSpec* s) {
  if (!j.contains("cache") || j["cache"].is_null()) return Status::OK();
  NOSTALL_ASSIGN_OR_RETURN(s->cache, CacheTiersFromJson(j["cache"]));
  return Status::OK();
}

// "fields" (read by the record model: source/record_json.h) and
// "max_field_bytes".
Status FieldsFromJson(const json& j, LoaderSpec* s) {
  if (j.contains("fields")) {
    NOSTALL_ASSIGN_OR_RETURN(s->source_options.fields, ReadFields(j["fields"]));
  }
  NOSTALL_RETURN_IF_ERROR(GetU64(j, "", "max_field_bytes", &s->source_options.max_field_bytes));
  if (s->source_options.max_field_bytes < 1 || s->source_options.max_field_bytes > (1ull << 30)) {
    return InvalidArgument("max_field_bytes must be in [1, 2^30]");
  }
  return Status::OK();
}

// The transform lists of a spec: the image list, the "audio" list, the
// "detection" object.
struct TransformLists {
  json image, audio, detection, video;
};

// Where the spec's one "transforms" list goes, decided here and nowhere
// else: a spec whose fields have a targets field runs it on the image and its
// boxes (the "detection" object's "transforms", beside its box_format and
// masks), one with an audio field on the clip (the "audio" list; an empty
// list is none), any other on the image. A spec that writes "audio" or the detection transforms
// itself keeps them where it put them.
TransformLists RouteTransforms(const json& j, const std::vector<FieldSpec>& fields) {
  TransformLists out{j.value("transforms", json()), j.value("audio", json()), j.value("detection", json()),
                     j.value("video", json())};
  const auto has = [&](FieldKind k) {
    return std::any_of(fields.begin(), fields.end(), [k](const FieldSpec& f) { return f.kind == k; });
  };
  if (!j.contains("transforms")) return out;
  if (has(FieldKind::kTargets) && (out.detection.is_null() ||
                                   (out.detection.is_object() && !out.detection.contains("transforms")))) {
    if (out.detection.is_null()) out.detection = json::object();
    out.detection["transforms"] = std::move(out.image);
    out.image = json();
  } else if (has(FieldKind::kAudio) && out.audio.is_null() && !(out.image.is_array() && out.image.empty())) {
    out.audio = std::move(out.image);
    out.image = json();
  } else if (has(FieldKind::kVideo) && out.video.is_null()) {
    out.video = std::move(out.image);
    out.image = json();
  }
  return out;
}

// The spec's output fields: the transforms, dtype, layout, mode, on_error.
// Its fields are read first: they say where the transforms go.
Status OutputFromJson(const json& j, LoaderSpec* s) {
  const TransformLists lists = RouteTransforms(j, s->source_options.fields);
  if (!lists.image.is_null()) {
    const json& ts = lists.image;
    if (!ts.is_array()) {
      return InvalidArgument("transforms must be a list of transforms, not " + Shown(ts));
    }
    for (size_t i = 0; i < ts.size(); ++i) {
      NOSTALL_ASSIGN_OR_RETURN(Transform tr, TransformFromJson(ts[i], i));
      s->prep.transforms.push_back(tr);
    }
  }
  const bool detection = !lists.detection.is_null();
  const json none;
  s->prep.dtype = DefaultDType(lists.image);
  if (detection && lists.detection.is_object() &&
      DefaultDType(lists.detection.value("transforms", none)) == DType::kFloat32) {
    s->prep.dtype = DType::kFloat32;
  }
  if (!lists.audio.is_null()) {
    NOSTALL_ASSIGN_OR_RETURN(std::shared_ptr<const audio::Spec> clips, audio::SpecFromJson(lists.audio));
    s->prep.kind = audio::MakeKind(std::move(clips));
    s->prep.dtype = DType::kFloat32;  // audio batches are float32 samples
  }
  NOSTALL_RETURN_IF_ERROR(Enum<DType>(j, "dtype", {{"uint8", DType::kUint8},
                                                   {"float32", DType::kFloat32}},
                                      &s->prep.dtype));
  NOSTALL_RETURN_IF_ERROR(
      Enum<Layout>(j, "layout", {{"NCHW", Layout::kNCHW}, {"NHWC", Layout::kNHWC}}, &s->prep.layout));
  NOSTALL_RETURN_IF_ERROR(
      Enum<ColorMode>(j, "mode", {{"RGB", ColorMode::kRGB}, {"L", ColorMode::kGray}}, &s->prep.mode));
  NOSTALL_RETURN_IF_ERROR(Enum<ErrorPolicy>(
      j, "on_error", {{"raise", ErrorPolicy::kRaise}, {"skip", ErrorPolicy::kSkip}}, &s->on_error));
  if (!lists.video.is_null()) {
    if (s->prep.kind) return InvalidArgument("a spec has one of \"audio\", \"video\" and \"detection\"");
    NOSTALL_ASSIGN_OR_RETURN(std::shared_ptr<const video::Spec> clips, video::SpecFromJson(lists.video));
    const bool f32 = clips->normalize;
    s->prep.kind = video::MakeKind(std::move(clips));
    if (f32 && !j.contains("dtype")) s->prep.dtype = DType::kFloat32;
  }
  if (detection) {
    if (s->prep.kind) return InvalidArgument("a spec has one of \"audio\", \"video\" and \"detection\"");
    NOSTALL_ASSIGN_OR_RETURN(std::shared_ptr<const detect::Spec> d, detect::SpecFromJson(lists.detection, s->prep));
    s->prep.kind = detect::MakeKind(std::move(d));
  }
  return Status::OK();
}

// A count of the spec, the values it may take, and where the spec keeps it:
// the one home of these ranges. The JSON reader reads each through its rule
// (ReadCount: the error names the key as written), and CheckSpecRules holds
// every spec to them, one read from JSON or built in C++.
struct CountRule {
  const char* key;
  int64_t lo, hi;
  int64_t (*of)(const LoaderSpec&);
};
constexpr int64_t kMaxCount = int64_t{1} << 40;
const CountRule kCountRules[] = {
    {"batch_size", 1, 1 << 20, [](const LoaderSpec& s) { return s.batch_size; }},
    {"rank", 0, 1 << 20, [](const LoaderSpec& s) { return s.rank; }},
    {"world_size", 1, 1 << 20, [](const LoaderSpec& s) { return s.world_size; }},
    {"subset", 0, kMaxCount, [](const LoaderSpec& s) { return s.subset; }},
    {"shuffle_block", 0, kMaxCount, [](const LoaderSpec& s) { return s.shuffle_block; }},
    {"shuffle_buffer", 0, kMaxCount, [](const LoaderSpec& s) { return s.shuffle_buffer; }},
    {"shuffle_window", kAutoShuffleWindow, kMaxCount, [](const LoaderSpec& s) { return s.shuffle_window; }},
    {"num_threads", 0, kMaxThreads, [](const LoaderSpec& s) -> int64_t { return s.num_threads; }},
    {"reads_in_flight", 0, kMaxReadsInFlight, [](const LoaderSpec& s) -> int64_t { return s.reads_in_flight; }},
    {"prefetch", -1, 64, [](const LoaderSpec& s) -> int64_t { return s.prefetch; }},
    {"max_pixels", 1, kMaxCount, [](const LoaderSpec& s) { return s.prep.max_pixels; }},
};

const CountRule& RuleOf(std::string_view key) {
  for (const CountRule& r : kCountRules) {
    if (key == r.key) return r;
  }
  std::abort();  // a key without a rule: a mistake in this file
}

template <typename T>
Status ReadCount(const json& j, const char* key, T* out) {
  const CountRule& r = RuleOf(key);
  return GetIntAs(j, "", key, r.lo, r.hi, out);
}

// "bucketing": null, {"by": "aspect_ratio", "group_factor": 3}, or {"by":
// "duration", "max_duration": 200, "num_buckets": 10, "quadratic_duration": 0}.
Status BucketingFromJson(const json& j, BucketingSpec* out) {
  if (!j.contains("bucketing") || j["bucketing"].is_null()) return Status::OK();
  const json& b = j["bucketing"];
  if (!b.is_object()) {
    return InvalidArgument("\"bucketing\" must be null, {\"by\": \"aspect_ratio\", \"group_factor\": 3} or "
                           "{\"by\": \"duration\", \"max_duration\": seconds, ...}, not " + Shown(b));
  }
  NOSTALL_RETURN_IF_ERROR(GetString(b, "bucketing.", "by", &out->by));
  if (out->by == "duration") {
    NOSTALL_RETURN_IF_ERROR(CheckKeys(b, "\"bucketing\"", {"by", "max_duration", "num_buckets", "quadratic_duration"}));
    NOSTALL_RETURN_IF_ERROR(GetDouble(b, "bucketing.", "max_duration", &out->max_duration));
    NOSTALL_RETURN_IF_ERROR(GetIntAs(b, "bucketing.", "num_buckets", 1, 1000, &out->num_buckets));
    NOSTALL_RETURN_IF_ERROR(GetDouble(b, "bucketing.", "quadratic_duration", &out->quadratic_duration));
    return Status::OK();
  }
  NOSTALL_RETURN_IF_ERROR(CheckKeys(b, "\"bucketing\"", {"by", "group_factor"}));
  NOSTALL_RETURN_IF_ERROR(GetIntAs(b, "bucketing.", "group_factor", 0, 64, &out->group_factor));
  return Status::OK();
}

json BucketingToJson(const BucketingSpec& b) {
  if (b.by.empty()) return nullptr;
  if (b.by == "duration") {
    return {{"by", b.by}, {"max_duration", b.max_duration}, {"num_buckets", b.num_buckets},
            {"quadratic_duration", b.quadratic_duration}};
  }
  return {{"by", b.by}, {"group_factor", b.group_factor}};
}

}  // namespace

Status CheckSpecRules(const LoaderSpec& s) {
  for (const CountRule& r : kCountRules) {
    const int64_t v = r.of(s);
    if (v < r.lo || v > r.hi) {
      return InvalidArgument(std::string(r.key) + " must be in [" + std::to_string(r.lo) + ", " +
                             std::to_string(r.hi) + "], not " + std::to_string(v));
    }
  }
  if (s.first_epoch != "auto" && s.first_epoch != "exact" && s.first_epoch != "buffered") {
    return InvalidArgument("\"first_epoch\" must be \"auto\", \"exact\" or \"buffered\", not \"" +
                           s.first_epoch + "\"");
  }
  if (!s.bucketing.by.empty() && s.bucketing.by != "aspect_ratio" && s.bucketing.by != "duration") {
    return InvalidArgument("bucketing.by must be \"aspect_ratio\" or \"duration\", not \"" + s.bucketing.by + "\"");
  }
  if (s.bucketing.by == "duration" &&
      (!(s.bucketing.max_duration > 0) || !std::isfinite(s.bucketing.max_duration) ||
       s.bucketing.num_buckets < 1 || s.bucketing.num_buckets > 1000 ||
       !(s.bucketing.quadratic_duration >= 0) || !std::isfinite(s.bucketing.quadratic_duration))) {
    return InvalidArgument("bucketing by duration needs max_duration > 0 (seconds a batch holds, padded), "
                           "num_buckets in [1, 1000] and quadratic_duration >= 0 (0: none)");
  }
  if (s.bucketing.group_factor < 0 || s.bucketing.group_factor > 64) {
    return InvalidArgument("bucketing.group_factor must be in [0, 64], not " +
                           std::to_string(s.bucketing.group_factor));
  }
  if (s.autotune != "auto" && s.autotune != "on" && s.autotune != "off") {
    return InvalidArgument("autotune must be \"auto\", \"on\" or \"off\" (or true/false), not '" +
                           s.autotune + "'");
  }
  return Status::OK();
}

Result<LoaderSpec> LoaderSpec::FromJson(const std::string& text) {
  const std::vector<std::string>& kKnown = FieldNames();
  NOSTALL_RETURN_IF_ERROR(CheckJsonDepth(text, 32, "the loader spec"));
  try {
    json j = json::parse(text);
    if (!j.is_object()) return InvalidArgument("a loader spec is a JSON object");
    LoaderSpec s;
    NOSTALL_RETURN_IF_ERROR(UpgradeFlatFields(&j, &s.notes));
    for (const auto& [key, _] : j.items()) {
      if (key == "remote") {
        // Prep on other machines runs through Python (nostall.ray, on Ray);
        // what builds a pipeline here cannot do it.
        return InvalidArgument("the spec's \"remote\" (prep on other machines, on Ray) runs through Python: "
                               "nostall.Loader.from_spec(spec) (docs/remote.md); drop it to run the pipeline "
                               "on this node alone");
      }
      if (std::find(kKnown.begin(), kKnown.end(), key) == kKnown.end()) {
        return InvalidArgument("unknown loader spec field '" + key + "'");
      }
    }
    const std::string w;  // top-level fields are named as they are
    if (!j.contains("source")) return InvalidArgument("a loader spec needs \"source\" (the dataset path)");
    NOSTALL_RETURN_IF_ERROR(CacheFromJson(j, &s));
    NOSTALL_RETURN_IF_ERROR(SourceFromJson(j["source"], !s.cache.empty(), &s));
    NOSTALL_RETURN_IF_ERROR(GetString(j, w, "index_cache_dir", &s.source_options.index_cache_dir));
    NOSTALL_RETURN_IF_ERROR(GetBool(j, w, "use_index_cache", &s.source_options.use_index_cache));
    NOSTALL_RETURN_IF_ERROR(GetString(j, w, "index_beside", &s.source_options.index_beside));
    if (const std::string& m = s.source_options.index_beside;
        m != "read" && m != "write" && m != "rebuild" && m != "off") {
      return InvalidArgument("\"index_beside\" must be \"read\", \"write\", \"rebuild\" or \"off\", not \"" + m + "\"");
    }
    NOSTALL_RETURN_IF_ERROR(ReadCount(j, "batch_size", &s.batch_size));
    NOSTALL_RETURN_IF_ERROR(GetBool(j, w, "shuffle", &s.shuffle));
    NOSTALL_RETURN_IF_ERROR(GetU64(j, w, "seed", &s.seed));
    NOSTALL_RETURN_IF_ERROR(ReadCount(j, "rank", &s.rank));
    NOSTALL_RETURN_IF_ERROR(ReadCount(j, "world_size", &s.world_size));
    NOSTALL_RETURN_IF_ERROR(GetBool(j, w, "drop_last", &s.drop_last));
    NOSTALL_RETURN_IF_ERROR(GetBool(j, w, "pad_ranks", &s.pad_ranks));
    NOSTALL_RETURN_IF_ERROR(ReadCount(j, "subset", &s.subset));
    NOSTALL_RETURN_IF_ERROR(ReadCount(j, "shuffle_block", &s.shuffle_block));
    NOSTALL_RETURN_IF_ERROR(BucketingFromJson(j, &s.bucketing));
    NOSTALL_RETURN_IF_ERROR(GetString(j, w, "first_epoch", &s.first_epoch));
    NOSTALL_RETURN_IF_ERROR(ReadCount(j, "shuffle_buffer", &s.shuffle_buffer));
    if (j.contains("shuffle_window") && j["shuffle_window"] == "auto") {
      s.shuffle_window = kAutoShuffleWindow;
    } else {
      NOSTALL_RETURN_IF_ERROR(ReadCount(j, "shuffle_window", &s.shuffle_window));
    }
    NOSTALL_RETURN_IF_ERROR(GetBool(j, w, "shard_shuffle", &s.shard_shuffle));
    NOSTALL_RETURN_IF_ERROR(ReadCount(j, "num_threads", &s.num_threads));
    NOSTALL_RETURN_IF_ERROR(ReadCount(j, "reads_in_flight", &s.reads_in_flight));
    NOSTALL_RETURN_IF_ERROR(ReadCount(j, "prefetch", &s.prefetch));
    if (j.contains("autotune") && j["autotune"].is_boolean()) {
      s.autotune = j["autotune"].get<bool>() ? "on" : "off";
    } else {
      NOSTALL_RETURN_IF_ERROR(GetString(j, w, "autotune", &s.autotune));
    }
    NOSTALL_RETURN_IF_ERROR(ReadCount(j, "max_pixels", &s.prep.max_pixels));
    NOSTALL_RETURN_IF_ERROR(GetBool(j, w, "dct_scaling", &s.prep.dct_scaling));
    NOSTALL_RETURN_IF_ERROR(FieldsFromJson(j, &s));
    NOSTALL_RETURN_IF_ERROR(OutputFromJson(j, &s));
    NOSTALL_RETURN_IF_ERROR(CheckSpecRules(s));
    return s;
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("bad loader spec: ") + e.what());
  }
}

namespace {

json SourceToJson(const LoaderSpec& s) {
  json options = json::parse(s.source_options.driver_options.empty() ? "{}" : s.source_options.driver_options,
                             nullptr, /*allow_exceptions=*/false);
  json out = {{"uri", s.source}};
  if (!s.source_options.driver.empty()) out["driver"] = s.source_options.driver;
  out["options"] = options.is_object() ? options : json::object();
  return out;
}

}  // namespace

Result<std::string> LoaderSpec::UpgradeJson(const std::string& text, std::vector<std::string>* notes) {
  NOSTALL_RETURN_IF_ERROR(CheckJsonDepth(text, 32, "the loader spec"));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("bad loader spec: not JSON");
  if (!j.is_object()) return InvalidArgument("a loader spec is a JSON object");
  NOSTALL_RETURN_IF_ERROR(UpgradeFlatFields(&j, notes));
  return j.dump();
}

std::string LoaderSpec::ToJson() const {
  json t = json::array();
  for (const auto& tr : prep.transforms) t.push_back(TransformToJson(tr));
  json j = {{"source", SourceToJson(*this)},
            {"batch_size", batch_size},
            {"shuffle", shuffle},
            {"seed", seed},
            {"rank", rank},
            {"world_size", world_size},
            {"drop_last", drop_last},
            {"pad_ranks", pad_ranks},
            {"subset", subset},
            {"shuffle_block", shuffle_block},
            {"bucketing", BucketingToJson(bucketing)},
            {"transforms", t},
            {"dtype", prep.dtype == DType::kUint8 ? "uint8" : "float32"},
            {"layout", prep.layout == Layout::kNCHW ? "NCHW" : "NHWC"},
            {"mode", prep.mode == ColorMode::kRGB ? "RGB" : "L"},
            {"max_pixels", prep.max_pixels},
            {"dct_scaling", prep.dct_scaling},
            {"num_threads", num_threads},
            {"reads_in_flight", reads_in_flight},
            {"prefetch", prefetch},
            {"autotune", autotune},
            {"on_error", on_error == ErrorPolicy::kRaise ? "raise" : "skip"},
            {"index_cache_dir", source_options.index_cache_dir},
            {"use_index_cache", source_options.use_index_cache},
            {"cache", CacheTiersToJson(cache)}};
  // Written only when set, so a spec without it stays as it was.
  if (source_options.index_beside != SourceOptions().index_beside) {
    j["index_beside"] = source_options.index_beside;
  }
  // Written only when set, so a spec without them stays as it was.
  if (first_epoch != LoaderSpec().first_epoch) j["first_epoch"] = first_epoch;
  if (shuffle_buffer != 0) j["shuffle_buffer"] = shuffle_buffer;
  if (shuffle_window == kAutoShuffleWindow) {
    j["shuffle_window"] = "auto";
  } else if (shuffle_window != 0) {
    j["shuffle_window"] = shuffle_window;
  }
  if (shard_shuffle) j["shard_shuffle"] = true;
  if (prep.kind) j[prep.kind->name()] = prep.kind->ToJson();
  // Written only when set, so a spec of images and labels stays as it was.
  if (!source_options.fields.empty()) j["fields"] = FieldsJson(source_options.fields);
  if (!source_options.fields.empty() || source_options.max_field_bytes != SourceOptions().max_field_bytes) {
    j["max_field_bytes"] = source_options.max_field_bytes;
  }
  return j.dump();
}

uint64_t LoaderSpec::Fingerprint() const {
  const std::string s = BatchJson();
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::string LoaderSpec::BatchJson() const {
  // What makes two pipelines produce the same batches (not thread counts).
  json j = json::parse(ToJson());
  j.erase("num_threads");
  j.erase("reads_in_flight");
  j.erase("prefetch");
  j.erase("autotune");
  j.erase("index_cache_dir");  // where the index is kept changes no batch
  j.erase("use_index_cache");
  j.erase("index_beside");
  // The dataset is its path: which driver reads it and how (an endpoint,
  // a throttle, the page cache) changes no batch.
  j["source"] = source;
  // A cache tier is its driver, name and size: where its copies are kept
  // (a cluster tier's servers) changes no batch.
  for (json& tier : j["cache"]) {
    tier = json{{"driver", tier["driver"]}, {"name", tier["name"]}, {"bytes", tier["bytes"]}};
  }
  return j.dump();
}

}  // namespace nostall
