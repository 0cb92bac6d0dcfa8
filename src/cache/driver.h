// The seam every cache plugs into.
//
// A driver opens a cache of its policy for a dataset (nostall/cache.h,
// CacheConfig). OpenCache (registry.cc) finds the driver by the spec's
// `cache_policy`, so a new cache is one new file in src/cache/ defining
// `CacheDriver FooDriver()` and one line in NOSTALL_CACHE_DRIVERS. Every
// driver passes the typed conformance suite in cache_conformance_test.cc.
#ifndef NOSTALL_CACHE_DRIVER_H_
#define NOSTALL_CACHE_DRIVER_H_

#include <memory>
#include <vector>

#include "nostall/cache.h"

namespace nostall {

struct CacheDriver {
  const char* policy;  // the spec's cache_policy
  Result<std::unique_ptr<Cache>> (*open)(const CacheConfig& config);
};

// The registered drivers.
const std::vector<CacheDriver>& CacheDrivers();

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
