// LoaderSpec <-> JSON (the format is described in docs/spec.md).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "nostall/loader.h"
#include "ops/op.h"

namespace nostall {
namespace {

using nlohmann::json;

// Typed reads of one field that name it in every error: a spec is written
// by hand, and "batch_size must be an integer, not \"abc\"" is what its
// author needs, not the JSON library's type names (values shown as the
// transforms' errors show them: Shown, ops/op.h).

Status GetInt(const json& j, const std::string& where, const char* key, int64_t lo, int64_t hi,
              int64_t* out) {
  if (!j.contains(key)) return Status::OK();
  const json& v = j[key];
  if (!v.is_number_integer()) {
    return InvalidArgument(where + key + " must be an integer, not " + Shown(v));
  }
  // (An unsigned value above INT64_MAX would wrap as int64: out of range.)
  const bool huge = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi);
  const int64_t x = huge ? hi : v.get<int64_t>();
  if (huge || x < lo || x > hi) {
    return InvalidArgument(where + key + " must be in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "], not " + Shown(v));
  }
  *out = x;
  return Status::OK();
}

template <typename T>
Status GetIntAs(const json& j, const std::string& where, const char* key, int64_t lo, int64_t hi,
                T* out) {
  int64_t v = static_cast<int64_t>(*out);
  NOSTALL_RETURN_IF_ERROR(GetInt(j, where, key, lo, hi, &v));
  *out = static_cast<T>(v);
  return Status::OK();
}

Status GetU64(const json& j, const std::string& where, const char* key, uint64_t* out) {
  if (!j.contains(key)) return Status::OK();
  const json& v = j[key];
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0)) {
    return InvalidArgument(where + key + " must be a non-negative integer, not " + Shown(v));
  }
  *out = v.get<uint64_t>();
  return Status::OK();
}

Status GetDouble(const json& j, const std::string& where, const char* key, double* out) {
  if (!j.contains(key)) return Status::OK();
  const json& v = j[key];
  if (!v.is_number()) return InvalidArgument(where + key + " must be a number, not " + Shown(v));
  *out = v.get<double>();
  if (!std::isfinite(*out)) return InvalidArgument(where + key + " must be finite");
  return Status::OK();
}

Status GetBool(const json& j, const std::string& where, const char* key, bool* out) {
  if (!j.contains(key)) return Status::OK();
  const json& v = j[key];
  if (!v.is_boolean()) {
    return InvalidArgument(where + key + " must be true or false, not " + Shown(v));
  }
  *out = v.get<bool>();
  return Status::OK();
}

Status GetString(const json& j, const std::string& where, const char* key, std::string* out) {
  if (!j.contains(key)) return Status::OK();
  const json& v = j[key];
  if (!v.is_string()) return InvalidArgument(where + key + " must be a string, not " + Shown(v));
  *out = v.get<std::string>();
  return Status::OK();
}

Status GetStrings(const json& j, const std::string& where, const char* key,
                  std::vector<std::string>* out) {
  if (!j.contains(key)) return Status::OK();
  const json& v = j[key];
  bool ok = v.is_array();
  for (size_t i = 0; ok && i < v.size(); ++i) ok = v[i].is_string();
  if (!ok) return InvalidArgument(where + key + " must be a list of strings, not " + Shown(v));
  *out = v.get<std::vector<std::string>>();
  return Status::OK();
}

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
      "source", "batch_size", "shuffle", "seed", "rank", "world_size", "drop_last", "subset",
      "shuffle_block", "transforms", "dtype", "layout", "mode", "max_pixels", "num_threads",
      "reads_in_flight", "prefetch", "autotune", "on_error", "index_cache_dir", "use_index_cache",
      "dct_scaling", "throttle_bandwidth", "throttle_latency_ms", "drop_page_cache", "cache_name",
      "cache_bytes", "cache_policy", "cache_servers", "cache_local_bytes", "s3_endpoint", "s3_region", "s3_profile", "s3_addressing",
      "s3_unsigned", "fields", "max_field_bytes"};
  return kFields;
}

Status LoaderSpec::CheckJsonDepth(const std::string& text, int max_depth, const std::string& what) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return InvalidArgument(what + " is nested over " + std::to_string(max_depth) +
                               " levels deep (at byte " + std::to_string(i) + ")");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status::OK();
}

namespace {

// The spec's storage fields: the index cache, throttling, the caches, S3.
Status StorageFromJson(const json& j, LoaderSpec* s) {
  const std::string w;  // top-level fields are named as they are
  NOSTALL_RETURN_IF_ERROR(GetString(j, w, "index_cache_dir", &s->source_options.index_cache_dir));
  NOSTALL_RETURN_IF_ERROR(GetBool(j, w, "use_index_cache", &s->source_options.use_index_cache));
  NOSTALL_RETURN_IF_ERROR(GetDouble(j, w, "throttle_bandwidth", &s->source_options.throttle_bytes_per_second));
  NOSTALL_RETURN_IF_ERROR(GetDouble(j, w, "throttle_latency_ms", &s->source_options.throttle_latency_ms));
  // A simulated store: a latency past a minute per read, or a bandwidth
  // under a byte a second, is a typo, not a store (1e300 ms slept forever).
  if (s->source_options.throttle_latency_ms < 0 || s->source_options.throttle_latency_ms > 60000) {
    return InvalidArgument(w + "throttle_latency_ms must be in [0, 60000], not " +
                           std::to_string(s->source_options.throttle_latency_ms));
  }
  if (s->source_options.throttle_bytes_per_second != 0 &&
      (s->source_options.throttle_bytes_per_second < 1 || s->source_options.throttle_bytes_per_second > 1e15)) {
    return InvalidArgument(w + "throttle_bandwidth must be 0 (none) or in [1, 1e15] bytes/s");
  }
  NOSTALL_RETURN_IF_ERROR(GetString(j, w, "cache_name", &s->cache_name));
  NOSTALL_RETURN_IF_ERROR(GetU64(j, w, "cache_bytes", &s->cache_bytes));
  NOSTALL_RETURN_IF_ERROR(GetString(j, w, "cache_policy", &s->cache_policy));
  NOSTALL_RETURN_IF_ERROR(GetStrings(j, w, "cache_servers", &s->cache_servers));
  NOSTALL_RETURN_IF_ERROR(GetU64(j, w, "cache_local_bytes", &s->cache_local_bytes));
  NOSTALL_RETURN_IF_ERROR(GetString(j, w, "s3_endpoint", &s->source_options.s3_endpoint));
  NOSTALL_RETURN_IF_ERROR(GetString(j, w, "s3_region", &s->source_options.s3_region));
  NOSTALL_RETURN_IF_ERROR(GetString(j, w, "s3_profile", &s->source_options.s3_profile));
  NOSTALL_RETURN_IF_ERROR(GetString(j, w, "s3_addressing", &s->source_options.s3_addressing));
  NOSTALL_RETURN_IF_ERROR(GetBool(j, w, "s3_unsigned", &s->source_options.s3_unsigned));
  // With a cache, the page cache would hold the same bytes twice: bypass
  // it unless asked otherwise.
  s->source_options.drop_page_cache = !s->cache_name.empty();
  NOSTALL_RETURN_IF_ERROR(GetBool(j, w, "drop_page_cache", &s->source_options.drop_page_cache));
  return Status::OK();
}

// One field of "fields": {"name", "ext" (a list, or "jpg;png"), "kind"
// (default: from the extensions), "optional"}, or, in the object form
// {"NAME": "jpg;png" | {...}}, the value under its name.
Result<FieldSpec> FieldFromJson(const json& v, const std::string& name_given) {
  FieldSpec f;
  f.name = name_given;
  const std::string where = "fields: ";
  if (v.is_string()) {
    f.extensions = SplitExtensions(v.get<std::string>());
  } else if (v.is_object()) {
    for (const auto& [key, _] : v.items()) {
      if (key != "name" && key != "ext" && key != "kind" && key != "optional" && key != "batch") {
        return InvalidArgument(where + "unknown key '" + key.substr(0, 40) +
                               "' in a field (name, ext, kind, optional, batch)");
      }
    }
    if (name_given.empty()) NOSTALL_RETURN_IF_ERROR(GetString(v, where, "name", &f.name));
    if (v.contains("ext") && v["ext"].is_string()) {
      f.extensions = SplitExtensions(v["ext"].get<std::string>());
    } else {
      std::vector<std::string> exts;
      NOSTALL_RETURN_IF_ERROR(GetStrings(v, where, "ext", &exts));
      for (const std::string& e : exts) {
        for (std::string& x : SplitExtensions(e)) f.extensions.push_back(std::move(x));
      }
    }
    NOSTALL_RETURN_IF_ERROR(GetBool(v, where, "optional", &f.optional));
    NOSTALL_RETURN_IF_ERROR(GetString(v, where, "batch", &f.batch));
    f.kind = InferFieldKind(f.extensions);
    if (v.contains("kind")) {
      std::string kind;
      NOSTALL_RETURN_IF_ERROR(GetString(v, where, "kind", &kind));
      NOSTALL_ASSIGN_OR_RETURN(f.kind, FieldKindFromName(kind));
    }
    return f;
  } else {
    return InvalidArgument(where + "a field is \"jpg;png\" or {\"ext\": ..., \"kind\": ..., "
                           "\"optional\": ...}, not " + Shown(v));
  }
  f.kind = InferFieldKind(f.extensions);
  return f;
}

Status FieldsFromJson(const json& j, LoaderSpec* s) {
  std::vector<FieldSpec>& fields = s->source_options.fields;
  if (j.contains("fields")) {
    const json& fs = j["fields"];
    if (fs.is_array()) {
      for (const json& v : fs) {
        if (!v.is_object()) return InvalidArgument("fields: each field of the list is an object");
        NOSTALL_ASSIGN_OR_RETURN(FieldSpec f, FieldFromJson(v, ""));
        fields.push_back(std::move(f));
      }
    } else if (fs.is_object()) {
      for (const auto& [name, v] : fs.items()) {
        NOSTALL_ASSIGN_OR_RETURN(FieldSpec f, FieldFromJson(v, name));
        fields.push_back(std::move(f));
      }
    } else if (!fs.is_null()) {
      return InvalidArgument("fields must be a list of fields or an object of them, not " + Shown(fs));
    }
  }
  NOSTALL_RETURN_IF_ERROR(ValidateFields(fields));
  NOSTALL_RETURN_IF_ERROR(GetU64(j, "", "max_field_bytes", &s->source_options.max_field_bytes));
  if (s->source_options.max_field_bytes < 1 || s->source_options.max_field_bytes > (1ull << 30)) {
    return InvalidArgument("max_field_bytes must be in [1, 2^30]");
  }
  return Status::OK();
}

// The spec's output fields: the transforms, dtype, layout, mode, on_error.
Status OutputFromJson(const json& j, LoaderSpec* s) {
  if (j.contains("transforms")) {
    const json& ts = j["transforms"];
    if (!ts.is_array()) {
      return InvalidArgument("transforms must be a list of transforms, not " + Shown(ts));
    }
    for (size_t i = 0; i < ts.size(); ++i) {
      NOSTALL_ASSIGN_OR_RETURN(Transform tr, TransformFromJson(ts[i], i));
      s->prep.transforms.push_back(tr);
    }
  }
  bool normalizes = false;
  for (const auto& t : s->prep.transforms) normalizes |= t.kind == TransformKind::kNormalize;
  s->prep.dtype = normalizes ? DType::kFloat32 : DType::kUint8;
  NOSTALL_RETURN_IF_ERROR(Enum<DType>(j, "dtype", {{"uint8", DType::kUint8},
                                                   {"float32", DType::kFloat32}},
                                      &s->prep.dtype));
  NOSTALL_RETURN_IF_ERROR(
      Enum<Layout>(j, "layout", {{"NCHW", Layout::kNCHW}, {"NHWC", Layout::kNHWC}}, &s->prep.layout));
  NOSTALL_RETURN_IF_ERROR(
      Enum<ColorMode>(j, "mode", {{"RGB", ColorMode::kRGB}, {"L", ColorMode::kGray}}, &s->prep.mode));
  NOSTALL_RETURN_IF_ERROR(Enum<ErrorPolicy>(
      j, "on_error", {{"raise", ErrorPolicy::kRaise}, {"skip", ErrorPolicy::kSkip}}, &s->on_error));
  return Status::OK();
}

}  // namespace

Result<LoaderSpec> LoaderSpec::FromJson(const std::string& text) {
  const std::vector<std::string>& kKnown = FieldNames();
  NOSTALL_RETURN_IF_ERROR(CheckJsonDepth(text, 32, "the loader spec"));
  try {
    json j = json::parse(text);
    if (!j.is_object()) return InvalidArgument("a loader spec is a JSON object");
    for (const auto& [key, _] : j.items()) {
      if (std::find(kKnown.begin(), kKnown.end(), key) == kKnown.end()) {
        return InvalidArgument("unknown loader spec field '" + key + "'");
      }
    }
    LoaderSpec s;
    const std::string w;  // top-level fields are named as they are
    if (!j.contains("source")) return InvalidArgument("a loader spec needs \"source\" (the dataset path)");
    NOSTALL_RETURN_IF_ERROR(GetString(j, w, "source", &s.source));
    constexpr int64_t kMaxCount = int64_t{1} << 40;
    NOSTALL_RETURN_IF_ERROR(GetInt(j, w, "batch_size", 1, 1 << 20, &s.batch_size));
    NOSTALL_RETURN_IF_ERROR(GetBool(j, w, "shuffle", &s.shuffle));
    NOSTALL_RETURN_IF_ERROR(GetU64(j, w, "seed", &s.seed));
    NOSTALL_RETURN_IF_ERROR(GetInt(j, w, "rank", 0, 1 << 20, &s.rank));
    NOSTALL_RETURN_IF_ERROR(GetInt(j, w, "world_size", 1, 1 << 20, &s.world_size));
    NOSTALL_RETURN_IF_ERROR(GetBool(j, w, "drop_last", &s.drop_last));
    NOSTALL_RETURN_IF_ERROR(GetInt(j, w, "subset", 0, kMaxCount, &s.subset));
    NOSTALL_RETURN_IF_ERROR(GetInt(j, w, "shuffle_block", 0, kMaxCount, &s.shuffle_block));
    NOSTALL_RETURN_IF_ERROR(GetIntAs(j, w, "num_threads", 0, kMaxThreads, &s.num_threads));
    NOSTALL_RETURN_IF_ERROR(GetIntAs(j, w, "reads_in_flight", 0, kMaxReadsInFlight, &s.reads_in_flight));
    NOSTALL_RETURN_IF_ERROR(GetIntAs(j, w, "prefetch", -1, 64, &s.prefetch));
    if (j.contains("autotune") && j["autotune"].is_boolean()) {
      s.autotune = j["autotune"].get<bool>() ? "on" : "off";
    } else {
      NOSTALL_RETURN_IF_ERROR(GetString(j, w, "autotune", &s.autotune));
    }
    NOSTALL_RETURN_IF_ERROR(GetInt(j, w, "max_pixels", 1, kMaxCount, &s.prep.max_pixels));
    NOSTALL_RETURN_IF_ERROR(GetBool(j, w, "dct_scaling", &s.prep.dct_scaling));
    NOSTALL_RETURN_IF_ERROR(StorageFromJson(j, &s));
    NOSTALL_RETURN_IF_ERROR(OutputFromJson(j, &s));
    NOSTALL_RETURN_IF_ERROR(FieldsFromJson(j, &s));
    return s;
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("bad loader spec: ") + e.what());
  }
}

std::string LoaderSpec::ToJson() const {
  json t = json::array();
  for (const auto& tr : prep.transforms) t.push_back(TransformToJson(tr));
  json j = {{"source", source},
            {"batch_size", batch_size},
            {"shuffle", shuffle},
            {"seed", seed},
            {"rank", rank},
            {"world_size", world_size},
            {"drop_last", drop_last},
            {"subset", subset},
            {"shuffle_block", shuffle_block},
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
            {"throttle_bandwidth", source_options.throttle_bytes_per_second},
            {"throttle_latency_ms", source_options.throttle_latency_ms},
            {"drop_page_cache", source_options.drop_page_cache},
            {"cache_name", cache_name},
            {"cache_bytes", cache_bytes},
            {"cache_policy", cache_policy},
            {"cache_servers", cache_servers},
            {"cache_local_bytes", cache_local_bytes},
            {"s3_endpoint", source_options.s3_endpoint},
            {"s3_region", source_options.s3_region},
            {"s3_profile", source_options.s3_profile},
            {"s3_addressing", source_options.s3_addressing},
            {"s3_unsigned", source_options.s3_unsigned}};
  // Written only when set, so a spec of images and labels stays as it was.
  if (!source_options.fields.empty()) {
    json fs = json::array();
    for (const FieldSpec& f : source_options.fields) {
      json entry = {{"name", f.name}, {"ext", f.extensions}, {"kind", FieldKindName(f.kind)},
                    {"optional", f.optional}};
      if (f.batch != "list") entry["batch"] = f.batch;  // the default is not written
      fs.push_back(entry);
    }
    j["fields"] = fs;
  }
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
  j.erase("cache_servers");  // where the cached copies are kept changes no batch
  j.erase("cache_local_bytes");
  for (const char* where : {"s3_endpoint", "s3_region", "s3_profile", "s3_addressing", "s3_unsigned"}) {
    j.erase(where);  // where the same objects are fetched from changes no batch
  }
  return j.dump();
}

}  // namespace nostall
