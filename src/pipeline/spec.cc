// LoaderSpec <-> JSON (the format is described in docs/spec.md).
#include <nlohmann/json.hpp>

#include "nostall/loader.h"

namespace nostall {
namespace {

using nlohmann::json;

const char* KindName(TransformKind k) {
  switch (k) {
    case TransformKind::kRandomResizedCrop: return "RandomResizedCrop";
    case TransformKind::kResize: return "Resize";
    case TransformKind::kCenterCrop: return "CenterCrop";
    case TransformKind::kRandomHorizontalFlip: return "RandomHorizontalFlip";
    case TransformKind::kNormalize: return "Normalize";
  }
  return "?";
}

Result<Transform> TransformFromJson(const json& j) {
  Transform t;
  std::string type = j.at("type").get<std::string>();
  auto size = [&](Transform* t) -> Status {
    const json& s = j.at("size");
    if (s.is_number_integer()) {
      t->height = t->width = s.get<int>();
    } else if (s.is_array() && s.size() == 2) {
      t->height = s[0].get<int>();
      t->width = s[1].get<int>();
    } else {
      return InvalidArgument(type + ": size must be an int or [height, width]");
    }
    return Status::OK();
  };
  if (type == "RandomResizedCrop") {
    t.kind = TransformKind::kRandomResizedCrop;
    NOSTALL_RETURN_IF_ERROR(size(&t));
    if (j.contains("scale")) {
      t.scale_min = j["scale"].at(0).get<double>();
      t.scale_max = j["scale"].at(1).get<double>();
    }
    if (j.contains("ratio")) {
      t.ratio_min = j["ratio"].at(0).get<double>();
      t.ratio_max = j["ratio"].at(1).get<double>();
    }
  } else if (type == "Resize") {
    t.kind = TransformKind::kResize;
    if (j.at("size").is_number_integer()) {
      t.short_side = j["size"].get<int>();
    } else {
      NOSTALL_RETURN_IF_ERROR(size(&t));
    }
    t.max_size = j.value("max_size", 0);
  } else if (type == "CenterCrop") {
    t.kind = TransformKind::kCenterCrop;
    NOSTALL_RETURN_IF_ERROR(size(&t));
  } else if (type == "RandomHorizontalFlip") {
    t.kind = TransformKind::kRandomHorizontalFlip;
    t.p = j.value("p", 0.5);
  } else if (type == "Normalize") {
    t.kind = TransformKind::kNormalize;
    t.mean = j.at("mean").get<std::vector<double>>();
    t.std = j.at("std").get<std::vector<double>>();
  } else {
    return InvalidArgument("unknown transform '" + type + "'");
  }
  return t;
}

json TransformToJson(const Transform& t) {
  json j = {{"type", KindName(t.kind)}};
  switch (t.kind) {
    case TransformKind::kRandomResizedCrop:
      j["size"] = {t.height, t.width};
      j["scale"] = {t.scale_min, t.scale_max};
      j["ratio"] = {t.ratio_min, t.ratio_max};
      break;
    case TransformKind::kResize:
      if (t.short_side > 0) {
        j["size"] = t.short_side;
      } else {
        j["size"] = {t.height, t.width};
      }
      if (t.max_size > 0) j["max_size"] = t.max_size;
      break;
    case TransformKind::kCenterCrop: j["size"] = {t.height, t.width}; break;
    case TransformKind::kRandomHorizontalFlip: j["p"] = t.p; break;
    case TransformKind::kNormalize:
      j["mean"] = t.mean;
      j["std"] = t.std;
      break;
  }
  return j;
}

template <typename E>
Status Enum(const json& j, const char* key, std::initializer_list<std::pair<const char*, E>> names,
            E* out) {
  if (!j.contains(key)) return Status::OK();
  std::string v = j[key].get<std::string>();
  std::string allowed;
  for (const auto& [name, value] : names) {
    if (v == name) {
      *out = value;
      return Status::OK();
    }
    allowed += std::string(allowed.empty() ? "" : ", ") + name;
  }
  return InvalidArgument(std::string(key) + " must be one of " + allowed + ", not '" + v + "'");
}

}  // namespace

Result<LoaderSpec> LoaderSpec::FromJson(const std::string& text) {
  static const std::initializer_list<const char*> kKnown = {
      "source", "batch_size", "shuffle", "seed", "rank", "world_size", "drop_last", "subset", "shuffle_block", "transforms",
      "dtype", "layout", "mode", "max_pixels", "num_threads", "reads_in_flight", "prefetch",
      "on_error", "index_cache_dir", "use_index_cache", "dct_scaling",
      "throttle_bandwidth", "throttle_latency_ms", "drop_page_cache", "cache_name",
      "cache_bytes", "cache_policy"};
  try {
    json j = json::parse(text);
    if (!j.is_object()) return InvalidArgument("a loader spec is a JSON object");
    for (const auto& [key, _] : j.items()) {
      if (std::find(kKnown.begin(), kKnown.end(), key) == kKnown.end()) {
        return InvalidArgument("unknown loader spec field '" + key + "'");
      }
    }
    LoaderSpec s;
    s.source = j.at("source").get<std::string>();
    s.batch_size = j.value("batch_size", s.batch_size);
    s.shuffle = j.value("shuffle", s.shuffle);
    s.seed = j.value("seed", s.seed);
    s.rank = j.value("rank", s.rank);
    s.world_size = j.value("world_size", s.world_size);
    s.drop_last = j.value("drop_last", s.drop_last);
    s.subset = j.value("subset", s.subset);
    s.shuffle_block = j.value("shuffle_block", s.shuffle_block);
    s.num_threads = j.value("num_threads", s.num_threads);
    s.reads_in_flight = j.value("reads_in_flight", s.reads_in_flight);
    s.prefetch = j.value("prefetch", s.prefetch);
    s.prep.max_pixels = j.value("max_pixels", s.prep.max_pixels);
    s.prep.dct_scaling = j.value("dct_scaling", s.prep.dct_scaling);
    s.source_options.index_cache_dir = j.value("index_cache_dir", std::string());
    s.source_options.use_index_cache = j.value("use_index_cache", true);
    s.source_options.throttle_bytes_per_second = j.value("throttle_bandwidth", 0.0);
    s.source_options.throttle_latency_ms = j.value("throttle_latency_ms", 0.0);
    s.cache_name = j.value("cache_name", std::string());
    s.cache_bytes = j.value("cache_bytes", uint64_t{0});
    s.cache_policy = j.value("cache_policy", std::string("minio"));
    // With a cache, the page cache would hold the same bytes twice: bypass
    // it unless asked otherwise.
    s.source_options.drop_page_cache = j.value("drop_page_cache", !s.cache_name.empty());
    if (j.contains("transforms")) {
      for (const json& t : j["transforms"]) {
        NOSTALL_ASSIGN_OR_RETURN(Transform tr, TransformFromJson(t));
        s.prep.transforms.push_back(tr);
      }
    }
    bool normalizes = false;
    for (const auto& t : s.prep.transforms) normalizes |= t.kind == TransformKind::kNormalize;
    s.prep.dtype = normalizes ? DType::kFloat32 : DType::kUint8;
    NOSTALL_RETURN_IF_ERROR(Enum<DType>(j, "dtype", {{"uint8", DType::kUint8},
                                                     {"float32", DType::kFloat32}},
                                        &s.prep.dtype));
    NOSTALL_RETURN_IF_ERROR(
        Enum<Layout>(j, "layout", {{"NCHW", Layout::kNCHW}, {"NHWC", Layout::kNHWC}}, &s.prep.layout));
    NOSTALL_RETURN_IF_ERROR(
        Enum<ColorMode>(j, "mode", {{"RGB", ColorMode::kRGB}, {"L", ColorMode::kGray}}, &s.prep.mode));
    NOSTALL_RETURN_IF_ERROR(Enum<ErrorPolicy>(
        j, "on_error", {{"raise", ErrorPolicy::kRaise}, {"skip", ErrorPolicy::kSkip}}, &s.on_error));
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
            {"on_error", on_error == ErrorPolicy::kRaise ? "raise" : "skip"},
            {"throttle_bandwidth", source_options.throttle_bytes_per_second},
            {"throttle_latency_ms", source_options.throttle_latency_ms},
            {"drop_page_cache", source_options.drop_page_cache},
            {"cache_name", cache_name},
            {"cache_bytes", cache_bytes},
            {"cache_policy", cache_policy}};
  return j.dump();
}

uint64_t LoaderSpec::Fingerprint() const {
  // What makes two pipelines produce the same batches (not thread counts).
  json j = json::parse(ToJson());
  j.erase("num_threads");
  j.erase("reads_in_flight");
  j.erase("prefetch");
  std::string s = j.dump();
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace nostall
