// OpenCache: the registered driver of the policy opens the cache.
#include <cctype>
#include <map>
#include <string>

#include "cache/driver.h"
#include "common/json_fields.h"

namespace nostall {

const std::vector<CacheDriver>& CacheDrivers() {
#define NOSTALL_CACHE_DRIVER_ENTRY(name) name##Driver(),
  static const std::vector<CacheDriver> drivers = {
      NOSTALL_CACHE_DRIVERS(NOSTALL_CACHE_DRIVER_ENTRY)};
#undef NOSTALL_CACHE_DRIVER_ENTRY
  return drivers;
}

Result<uint64_t> ParseByteSize(const std::string& text) {
  static const std::map<std::string, double> kUnits = {
      {"", 1},        {"b", 1},          {"k", 1024.0},      {"kib", 1024.0},
      {"kb", 1e3},    {"m", 1048576.0},  {"mib", 1048576.0}, {"mb", 1e6},
      {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9},
      {"t", 1099511627776.0}, {"tib", 1099511627776.0}, {"tb", 1e12}};
  const auto bad = [&] {
    return InvalidArgument("cannot read the size '" + text +
                           "' (a positive number and a unit: 40GiB, 512MB, 1.5G)");
  };
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  const size_t number = i;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == number) return bad();
  double v = 0;
  try {
    size_t used = 0;
    v = std::stod(text.substr(number, i - number), &used);
    if (used != i - number) return bad();
  } catch (const std::exception&) {
    return bad();
  }
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  size_t end = text.size();
  while (end > i && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  std::string unit = text.substr(i, end - i);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto it = kUnits.find(unit);
  if (it == kUnits.end()) return bad();
  const double bytes = v * it->second;
  if (!(bytes >= 1) || bytes >= 1.8e19) return bad();
  return static_cast<uint64_t>(bytes);
}

namespace {

Result<const CacheDriver*> FindCacheDriver(const std::string& policy) {
  std::string policies;
  for (const CacheDriver& driver : CacheDrivers()) {
    if (policy == driver.policy) return &driver;
    policies += std::string(policies.empty() ? "\"" : ", \"") + driver.policy + "\"";
  }
  return InvalidArgument("a cache tier's driver must be one of " + policies + ", not \"" +
                         policy.substr(0, 60) + "\"");
}

}  // namespace

Result<nlohmann::json> ResolveCacheOptions(const std::string& driver, const nlohmann::json& given) {
  NOSTALL_ASSIGN_OR_RETURN(const CacheDriver* d, FindCacheDriver(driver));
  return d->options(given);
}

Result<nlohmann::json> CacheOptionsJson(const CacheConfig& config, const char* driver) {
  const std::string& text = config.options;
  nlohmann::json j = nlohmann::json::parse(text.empty() ? "{}" : text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return InvalidArgument(std::string("the ") + driver +
                           " cache's options must be a JSON object, not '" + text.substr(0, 60) + "'");
  }
  return j;
}

namespace {

using json = nlohmann::json;

// A tier's size: bytes, or a size as people write it ("40GiB").
Status TierBytes(const json& tier, const std::string& where, uint64_t* out) {
  if (tier.contains("bytes") && tier["bytes"].is_string()) {
    Result<uint64_t> b = ParseByteSize(tier["bytes"].get<std::string>());
    if (!b.ok()) return InvalidArgument(where + "bytes: " + b.status().message());
    *out = b.value();
    return Status::OK();
  }
  return GetU64(tier, where, "bytes", out);
}

}  // namespace

Result<std::vector<CacheTierSpec>> CacheTiersFromJson(const json& given) {
  json tiers = given.is_object() ? json::array({given}) : given;
  if (!tiers.is_array()) {
    return InvalidArgument("cache must be a list of tiers, front first ({\"driver\": \"minio\", "
                           "\"name\": ..., \"bytes\": ...}), not " + Shown(given));
  }
  constexpr size_t kMaxTiers = 4;
  if (tiers.size() > kMaxTiers) {
    return InvalidArgument("cache has " + std::to_string(tiers.size()) + " tiers; at most " +
                           std::to_string(kMaxTiers));
  }
  std::vector<CacheTierSpec> out;
  for (size_t i = 0; i < tiers.size(); ++i) {
    const std::string where = "cache[" + std::to_string(i) + "]: ";
    const json& tier = tiers[i];
    if (!tier.is_object()) {
      return InvalidArgument(where + "a tier is {\"driver\", \"name\", \"bytes\", ...}, not " +
                             Shown(tier));
    }
    CacheTierSpec t;
    NOSTALL_RETURN_IF_ERROR(GetString(tier, where, "driver", &t.driver));
    NOSTALL_RETURN_IF_ERROR(GetString(tier, where, "name", &t.name));
    NOSTALL_RETURN_IF_ERROR(TierBytes(tier, where, &t.bytes));
    if (t.name.empty()) return InvalidArgument(where + "a tier needs a \"name\"");
    if (t.bytes == 0) return InvalidArgument(where + "a tier needs its size, \"bytes\" > 0");
    json own = tier;
    for (const char* key : {"driver", "name", "bytes"}) own.erase(key);
    Result<json> options = ResolveCacheOptions(t.driver, own);
    if (!options.ok()) return InvalidArgument(where + options.status().message());
    t.options = options.value().dump();
    out.push_back(std::move(t));
  }
  return out;
}

json CacheTiersToJson(const std::vector<CacheTierSpec>& tiers) {
  json out = json::array();
  for (const CacheTierSpec& t : tiers) {
    json tier = {{"driver", t.driver}, {"name", t.name}, {"bytes", t.bytes}};
    json options = json::parse(t.options.empty() ? "{}" : t.options, nullptr, false);
    if (options.is_object()) {
      for (const auto& [key, value] : options.items()) tier[key] = value;
    }
    out.push_back(tier);
  }
  return out;
}

Result<nlohmann::json> NoCacheOptions(const char* driver, const nlohmann::json& given) {
  NOSTALL_RETURN_IF_ERROR(CheckKeys(given, std::string("a ") + driver + " cache tier", {}));
  return nlohmann::json::object();
}

Result<std::unique_ptr<Cache>> OpenCache(const std::string& policy, const CacheConfig& config) {
  if (config.budget_bytes == 0) return InvalidArgument("a cache needs a size (bytes > 0)");
  NOSTALL_ASSIGN_OR_RETURN(const CacheDriver* driver, FindCacheDriver(policy));
  return driver->open(config);
}

}  // namespace nostall
