// OpenCache: the registered driver of the policy opens the cache.
#include <cctype>
#include <map>
#include <string>

#include "cache/driver.h"

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

Result<std::unique_ptr<Cache>> OpenCache(const std::string& policy, const CacheConfig& config) {
  if (config.budget_bytes == 0) return InvalidArgument("a cache needs a size (cache_bytes > 0)");
  std::string policies;
  for (const CacheDriver& driver : CacheDrivers()) {
    if (policy == driver.policy) return driver.open(config);
    policies += std::string(policies.empty() ? "\"" : ", \"") + driver.policy + "\"";
  }
  return InvalidArgument("cache_policy must be one of " + policies + ", not \"" + policy + "\"");
}

}  // namespace nostall
