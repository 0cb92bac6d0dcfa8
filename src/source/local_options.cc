// The local drivers' options (local_options.h).
#include "source/local_options.h"

#include "common/json_fields.h"

namespace nostall {

using json = nlohmann::json;

Result<LocalOptions> ReadLocalOptions(const json& given, bool cached, const char* driver) {
  const std::string what = std::string("the ") + driver + " driver's options";
  NOSTALL_RETURN_IF_ERROR(
      CheckKeys(given, what, {"throttle_bandwidth", "throttle_latency_ms", "drop_page_cache"}));
  const std::string w = "source.options.";
  LocalOptions o;
  o.drop_page_cache = cached;  // a cache holds the bytes: the page cache need not
  NOSTALL_RETURN_IF_ERROR(GetDouble(given, w, "throttle_bandwidth", &o.throttle_bandwidth));
  NOSTALL_RETURN_IF_ERROR(GetDouble(given, w, "throttle_latency_ms", &o.throttle_latency_ms));
  NOSTALL_RETURN_IF_ERROR(GetBool(given, w, "drop_page_cache", &o.drop_page_cache));
  // A simulated store: a latency past a minute per read, or a bandwidth
  // under a byte a second, is a typo, not a store (1e300 ms slept forever).
  if (o.throttle_latency_ms < 0 || o.throttle_latency_ms > 60000) {
    return InvalidArgument(w + "throttle_latency_ms must be in [0, 60000], not " +
                           Shown(given["throttle_latency_ms"]));
  }
  if (o.throttle_bandwidth != 0 && (o.throttle_bandwidth < 1 || o.throttle_bandwidth > 1e15)) {
    return InvalidArgument(w + "throttle_bandwidth must be 0 (none) or in [1, 1e15] bytes/s, not " +
                           Shown(given["throttle_bandwidth"]));
  }
  return o;
}

json LocalOptionsJson(const LocalOptions& o) {
  return {{"throttle_bandwidth", o.throttle_bandwidth},
          {"throttle_latency_ms", o.throttle_latency_ms},
          {"drop_page_cache", o.drop_page_cache}};
}

Result<json> ResolveImageFolderOptions(const json& given, bool cached) {
  NOSTALL_ASSIGN_OR_RETURN(LocalOptions o, ReadLocalOptions(given, cached, "image-folder"));
  return LocalOptionsJson(o);
}

Result<json> ResolveTarShardsOptions(const json& given, bool cached) {
  NOSTALL_ASSIGN_OR_RETURN(LocalOptions o, ReadLocalOptions(given, cached, "tar-shards"));
  return LocalOptionsJson(o);
}

std::unique_ptr<Source> Throttled(std::unique_ptr<Source> source, const LocalOptions& o) {
  if (o.throttle_bandwidth <= 0 && o.throttle_latency_ms <= 0) return source;
  return ThrottleSource(std::move(source), o.throttle_bandwidth, o.throttle_latency_ms);
}

}  // namespace nostall
