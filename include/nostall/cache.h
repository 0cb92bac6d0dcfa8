// Cache: encoded item bytes kept in memory between epochs.
//
// The MinIO policy (CoorDL): an item is cached the first time it is read, if
// there is room, and never evicted. Under a uniformly random order each epoch
// every item is equally likely to be needed next, so the hit rate from the
// second epoch on is cache/dataset, the best any policy can do; LRU (the page
// cache) does worse.
#ifndef NOSTALL_CACHE_H_
#define NOSTALL_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nostall/status.h"

namespace nostall {

struct CacheStats {
  uint64_t budget_bytes = 0;
  uint64_t used_bytes = 0;
  int64_t items = 0;  // entries published
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t errors = 0;  // lookups that failed (a remote tier down): read from storage instead
  std::string tier;    // the driver: "minio", "lru", "memcached"
  // This process's lookups in this tier (TieredCache counts them): how many,
  // their time in all, and the bytes they found.
  int64_t lookups = 0;
  int64_t lookup_ns = 0;
  int64_t hit_bytes = 0;
};

// Thread-safe; MinioCache is also safe across processes that share it.
// Every cache passes the conformance suite in src/cache/cache_conformance_test.cc.
class Cache {
 public:
  virtual ~Cache() = default;
  // Copies item `item`'s bytes into `out` and returns true (a hit), or
  // returns false (a miss). An error means the tier could not answer (a
  // remote server down or slow): the caller reads the item from storage.
  // Never returns bytes other than those inserted for `item`.
  virtual Result<bool> Lookup(int64_t item, std::vector<uint8_t>* out) = 0;
  // Caches the bytes if the item is not cached yet and they fit in what is
  // left of the budget; returns whether this call cached them. MinIO never
  // evicts; LRU evicts the least recently used. The memcached tier's budget
  // is this client's share of the servers' memory (which -M bounds), pooled
  // with the job's other clients (CacheConfig.pool_parts): it adds while any
  // of the pool is left, so it may pass it by one item.
  virtual bool Insert(int64_t item, const uint8_t* data, size_t size) = 0;
  // A hint: these items will be looked up soon (a batch's). A remote tier
  // asks for them all in one round trip (memcached's multi-get), and their
  // Lookups then wait for that answer instead of asking one by one.
  virtual void Prefetch(const int64_t* items, size_t n) {
    (void)items;
    (void)n;
  }
  // All tiers together (a hit in any tier is a hit).
  virtual CacheStats Stats() const = 0;
  // One entry per tier, front first (a plain cache is one tier).
  virtual std::vector<CacheStats> TierStats() const { return {Stats()}; }
};

// What a cache is opened for. `name` names a shared cache (a MinIO cache's
// segment); the fingerprint and item count tie it to one dataset.
struct CacheConfig {
  std::string name;
  uint64_t budget_bytes = 0;
  uint64_t dataset_fingerprint = 0;
  int64_t num_items = 0;
  // The driver's own options, a JSON object that the driver alone reads
  // (src/cache/driver.h): memcached's "servers" ("host:port"; none:
  // NOSTALL_CACHE_SERVERS). "{}": every option at its default.
  std::string options = "{}";
  // A cluster tier's shares pooled across the job: every client adds while
  // the job's inserts are below budget_bytes x pool_parts (the world size).
  int64_t pool_parts = 1;
};

// One tier of a loader's cache: `{"driver": "minio", "name": "imagenet",
// "bytes": 40000000000}` in a spec; `options` holds the driver's own keys
// (memcached: "servers"), which the driver alone reads (src/cache/driver.h).
struct CacheTierSpec {
  std::string driver = "minio";  // "minio", "memcached" or "lru"
  std::string name;              // the node cache's shared memory; a label for the others
  uint64_t bytes = 0;            // a cluster tier: this rank's share (pooled by the world size)
  std::string options = "{}";
};

// Opens a cache of `policy` ("minio", "lru", "memcached"; see src/cache/driver.h for the
// registry), or an InvalidArgument error naming the policies there are.
Result<std::unique_ptr<Cache>> OpenCache(const std::string& policy, const CacheConfig& config);

// The secret that authenticates a cluster cache's values (HMAC-SHA256):
// NOSTALL_CACHE_SECRET, else the file NOSTALL_CACHE_SECRET_FILE, else
// $XDG_CONFIG_HOME/nostall/cache-secret (~/.config/nostall/cache-secret),
// made with 32 random bytes on first use. A file must be the caller's own
// and mode 0600. Every process of a job must have the same secret: values
// written under another are misses.
Result<std::string> ResolveCacheSecret();

// A size as users write it: "40GiB", "512MB", "1.5G", "4096". One meaning
// for every face (Python, the CLI, specs): KB/MB/GB/TB are powers of 1000,
// KiB/MiB/GiB/TiB and the bare K/M/G/T powers of 1024 (as memcached -m,
// docker --shm-size and the JVM's -Xmx take them); any case. Positive.
Result<uint64_t> ParseByteSize(const std::string& text);

// Tiers, front first: a lookup tries each in turn, and a hit in a later
// tier is inserted into the earlier ones; an insert goes to every tier; a
// tier that fails a lookup counts an error and the next tier is asked.
// TierStats() adds each tier's lookups, their time and the bytes found (one
// tier alone is stacked for those).
std::unique_ptr<Cache> StackCaches(std::vector<std::unique_ptr<Cache>> tiers);

// What a cluster tier's memcached server says of itself (`nostall cache
// inspect --servers`): one entry per server, `error` set when it did not answer.
struct MemcachedServerInfo {
  std::string server;  // host:port
  std::string error;   // empty: it answered
  std::string version;
  uint64_t bytes = 0, limit_bytes = 0;
  int64_t items = 0, evictions = 0, get_hits = 0, get_misses = 0;
};
Result<std::vector<MemcachedServerInfo>> InspectMemcachedServers(
    const std::vector<std::string>& servers);

// An in-process LRU cache (the page cache's policy), for comparisons.
std::unique_ptr<Cache> MakeLruCache(uint64_t budget_bytes);

// A MinIO cache in a named POSIX shared-memory segment ("/nostall-cache-NAME",
// mode 0600, budget reserved at creation), shared by every process on the
// node that opens the same name. Layout and protocol: docs/cache_format.md.
class MinioCache final : public Cache {
 public:
  // Attaches to the cache `name`, creating it if it does not exist. A cache
  // made for another dataset (fingerprint or item count) or another format
  // version is an error naming the difference.
  static Result<std::unique_ptr<MinioCache>> Open(const std::string& name, uint64_t budget_bytes,
                                                  uint64_t dataset_fingerprint, int64_t num_items);
  // Removes the name; processes attached keep their mapping until they close.
  static Status Remove(const std::string& name);
  // The names of the caches on this node (segments in /dev/shm).
  static std::vector<std::string> List();
  struct Info {
    std::string name;
    uint32_t version = 0;
    uint64_t dataset_fingerprint = 0;
    int64_t num_items = 0;
    uint64_t segment_bytes = 0;
    CacheStats stats;
  };
  // Reads a cache's header without attaching to it as a user.
  static Result<Info> Inspect(const std::string& name);
  ~MinioCache() override;

  Result<bool> Lookup(int64_t item, std::vector<uint8_t>* out) override;
  bool Insert(int64_t item, const uint8_t* data, size_t size) override;
  CacheStats Stats() const override;

  // For tests of a writer dying mid-insert: runs `between` after the entry is
  // claimed and the space reserved, before the bytes are published.
  bool InsertForTest(int64_t item, const uint8_t* data, size_t size, void (*between)());

  struct Impl;

 private:
  explicit MinioCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nostall

#endif  // NOSTALL_CACHE_H_
