// OpenCache: the registered driver of the policy opens the cache.
#include "cache/driver.h"

namespace nostall {

const std::vector<CacheDriver>& CacheDrivers() {
#define NOSTALL_CACHE_DRIVER_ENTRY(name) name##Driver(),
  static const std::vector<CacheDriver> drivers = {
      NOSTALL_CACHE_DRIVERS(NOSTALL_CACHE_DRIVER_ENTRY)};
#undef NOSTALL_CACHE_DRIVER_ENTRY
  return drivers;
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
