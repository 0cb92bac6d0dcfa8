// The seam every cache plugs into.
//
// A driver opens a cache of its policy for a dataset (nostall/cache.h,
// CacheConfig). OpenCache (registry.cc) finds the driver by a cache tier's
// "driver", so a new cache is one new file in src/cache/ defining
// `CacheDriver FooDriver()` and one line in NOSTALL_CACHE_DRIVERS. Every
// driver passes the typed conformance suite in cache_conformance_test.cc.
//
// A spec's "cache" is a list of tiers, front first, each
// `{"driver", "name", "bytes", ...the driver's own keys}`: the driver reads
// and checks its own keys (`options`) when the spec is read, and again
// (CacheConfig::options) when it opens the cache.
#ifndef NOSTALL_CACHE_DRIVER_H_
#define NOSTALL_CACHE_DRIVER_H_

#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "nostall/cache.h"

namespace nostall {

struct CacheDriver {
  const char* policy;  // a cache tier's "driver"
  Result<std::unique_ptr<Cache>> (*open)(const CacheConfig& config);
  // A tier's keys besides driver, name and bytes, as a spec gives them
  // (a JSON object), checked and returned with every one spelled out; an
  // error names the key and the driver.
  Result<nlohmann::json> (*options)(const nlohmann::json& given);
};

// The registered drivers.
const std::vector<CacheDriver>& CacheDrivers();

// The options of a tier of `driver` checked by it (ResolveCacheOptions;
// an error listing the drivers when there is none of that name).
Result<nlohmann::json> ResolveCacheOptions(const std::string& driver, const nlohmann::json& given);

// CacheConfig::options parsed (an InvalidArgument naming the driver when
// it is not a JSON object).
Result<nlohmann::json> CacheOptionsJson(const CacheConfig& config, const char* driver);

// A spec's "cache": a list of tiers, front first (an object is one tier),
// each {"driver" (default "minio"), "name", "bytes" (a number or a size as
// people write it, "40GiB"), ...the driver's own keys}, read by their
// drivers; errors name the tier ("cache[1]: ..."). Written back with every
// key spelled out.
Result<std::vector<CacheTierSpec>> CacheTiersFromJson(const nlohmann::json& tiers);
nlohmann::json CacheTiersToJson(const std::vector<CacheTierSpec>& tiers);

// The options of a driver that has none: `given` must be empty.
Result<nlohmann::json> NoCacheOptions(const char* driver, const nlohmann::json& given);

// The drivers, one line each (X(Name) defines `CacheDriver NameDriver()`).
#define NOSTALL_CACHE_DRIVERS(X) \
  X(Minio)                       \
  X(Lru)                         \
  X(Memcached)

#define NOSTALL_DECLARE_CACHE_DRIVER(name) CacheDriver name##Driver();
NOSTALL_CACHE_DRIVERS(NOSTALL_DECLARE_CACHE_DRIVER)
#undef NOSTALL_DECLARE_CACHE_DRIVER

}  // namespace nostall

#endif  // NOSTALL_CACHE_DRIVER_H_
