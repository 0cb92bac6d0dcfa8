// The flat storage fields read in the new form (spec_legacy.h).
#include "pipeline/spec_legacy.h"

#include "common/json_fields.h"

namespace nostall {
namespace {

using json = nlohmann::json;

struct FlatField {
  const char* flat;    // the old top-level name
  const char* option;  // its name in the driver's options
  bool s3;             // an S3 drivers' option (else the local drivers')
};

constexpr FlatField kSourceFields[] = {
    {"throttle_bandwidth", "throttle_bandwidth", false},
    {"throttle_latency_ms", "throttle_latency_ms", false},
    {"drop_page_cache", "drop_page_cache", false},
    {"s3_endpoint", "endpoint", true},
    {"s3_region", "region", true},
    {"s3_profile", "profile", true},
    {"s3_addressing", "addressing", true},
    {"s3_unsigned", "unsigned", true},
};

constexpr const char* kCacheFields[] = {"cache_name", "cache_bytes", "cache_policy",
                                        "cache_servers", "cache_local_bytes"};

// The value every old spec wrote when the field was not in use.
bool AtOldDefault(const FlatField& f, const json& v) {
  if (std::string(f.flat) == "drop_page_cache") return true;  // never meant anything for s3://
  if (std::string(f.flat) == "s3_addressing") return v == "auto";
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_number()) return v.get<double>() == 0;
  if (v.is_string()) return v.get<std::string>().empty();
  return v.is_null();
}

Status UpgradeSource(json* spec, std::vector<std::string>* read) {
  json& j = *spec;
  bool any = false;
  for (const FlatField& f : kSourceFields) any = any || j.contains(f.flat);
  if (!any) return Status::OK();
  json source = j.contains("source") ? j["source"] : json();
  if (source.is_string()) source = json{{"uri", source}};
  if (!source.is_object()) return Status::OK();  // "source" is missing or wrong: said next
  if (!source.contains("options") || source["options"].is_null()) source["options"] = json::object();
  json& options = source["options"];
  if (!options.is_object()) return Status::OK();  // said when the source is read
  const std::string uri = source.value("uri", json("")).is_string() ? source.value("uri", "") : "";
  const std::string driver =
      source.value("driver", json("")).is_string() ? source.value("driver", "") : "";
  const bool s3 = driver.empty() ? uri.rfind("s3://", 0) == 0 : driver.rfind("s3-", 0) == 0;
  for (const FlatField& f : kSourceFields) {
    if (!j.contains(f.flat)) continue;
    const json v = j[f.flat];
    j.erase(f.flat);
    read->push_back(f.flat);
    if (f.s3 != s3) {
      if (AtOldDefault(f, v)) continue;  // an old spec spelled out every field
      return InvalidArgument(
          f.s3 ? std::string(f.flat) + " is an option of the S3 drivers, for an s3:// dataset, not " +
                     uri
               : std::string(f.flat) + " emulates slow storage over local files (or keeps them "
                     "out of the page cache); an s3:// dataset is read from real remote storage: " +
                     uri);
    }
    if (options.contains(f.option)) {
      return InvalidArgument(std::string(f.flat) + " is given twice: as the old flat field and as "
                             "source.options." + f.option);
    }
    options[f.option] = v;
  }
  j["source"] = source;
  return Status::OK();
}

Status UpgradeCache(json* spec, std::vector<std::string>* read) {
  json& j = *spec;
  bool any = false;
  for (const char* f : kCacheFields) any = any || j.contains(f);
  if (!any) return Status::OK();
  if (j.contains("cache")) {
    return InvalidArgument("cache is given twice: as \"cache\" (its tiers) and as the old flat "
                           "cache_* fields");
  }
  std::string name, policy = "minio";
  std::vector<std::string> servers;
  NOSTALL_RETURN_IF_ERROR(GetString(j, "", "cache_name", &name));
  NOSTALL_RETURN_IF_ERROR(GetString(j, "", "cache_policy", &policy));
  NOSTALL_RETURN_IF_ERROR(GetStrings(j, "", "cache_servers", &servers));
  uint64_t b = 0, local = 0;
  NOSTALL_RETURN_IF_ERROR(GetU64(j, "", "cache_bytes", &b));
  NOSTALL_RETURN_IF_ERROR(GetU64(j, "", "cache_local_bytes", &local));
  for (const char* f : kCacheFields) {
    if (j.contains(f)) read->push_back(f);
    j.erase(f);
  }
  json tiers = json::array();
  if (!name.empty()) {  // no name: no cache, whatever else was written
    if (local > 0 && policy != "memcached") {
      return InvalidArgument("cache_local_bytes is the node-local tier in front of a cluster "
                             "cache: it goes with cache_policy \"memcached\", not \"" + policy + "\"");
    }
    if (!servers.empty() && policy != "memcached") {
      return InvalidArgument("cache_servers are the servers of a memcached cache, not of a \"" +
                             policy + "\" one");
    }
    if (local > 0) tiers.push_back({{"driver", "minio"}, {"name", name}, {"bytes", local}});
    json tier = {{"driver", policy}, {"name", name}, {"bytes", b}};
    if (policy == "memcached") tier["servers"] = servers;
    tiers.push_back(tier);
  }
  j["cache"] = tiers;
  return Status::OK();
}

}  // namespace

Status UpgradeFlatFields(json* spec, std::vector<std::string>* notes) {
  std::vector<std::string> read;
  NOSTALL_RETURN_IF_ERROR(UpgradeSource(spec, &read));
  NOSTALL_RETURN_IF_ERROR(UpgradeCache(spec, &read));
  if (read.empty()) return Status::OK();
  std::string list;
  for (const std::string& f : read) list += (list.empty() ? "" : ", ") + f;
  notes->push_back("the flat fields " + list +
                   " are read as the source driver's options (\"source\": {\"uri\": ..., "
                   "\"options\": {...}}) and the cache's tiers (\"cache\": [{\"driver\", \"name\", "
                   "\"bytes\", ...}]); write them so (loader.spec gives the spec in the new form; "
                   "docs/spec.md)");
  return Status::OK();
}

}  // namespace nostall
