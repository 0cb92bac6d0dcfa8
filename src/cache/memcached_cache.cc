// The cluster tier: encoded items partitioned across the nodes' memcached
// servers (CoorDL's partitioned cache, on a cache people already run).
//
// libmemcached (the maintained "awesome" fork) places each key on one server
// by ketama consistent hashing and speaks the binary protocol. Each value
// carries a header naming the dataset, the item and the length, and an
// HMAC-SHA256 of header and bytes keyed with the job's secret
// (ResolveCacheSecret): a value cut short, damaged, written for another
// dataset, or written by anyone without the secret (memcached has no access
// control: whoever reaches the port can set any key) is a miss, never the
// item's bytes. Items are added, never replaced or evicted:
// the servers run with -M (a full server refuses instead of evicting), and a
// server that answers "out of memory" gets no more inserts from this client
// (first come, first cached, as the node-local MinIO cache). A server that
// does not answer within the timeouts (milliseconds) costs hits, never the
// item: the lookup is an error and the loader reads storage. After two
// failures in a row a server is left alone (its lookups are errors at once,
// its inserts skipped) for a backoff of 1 s, doubling up to 30 s, then tried
// again; one answer puts it back.
//
// Prefetch asks for a batch's items in one multi-get (one round trip per
// server, not one per item); their Lookups take the answers from a small
// staging table, waiting for the multi-get if it is still running. An item
// the multi-get could not answer (a server failed meanwhile) is looked up
// on its own.
#include <libmemcached/memcached.h>
#include <libmemcached/util.h>
#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <map>
#include <condition_variable>
#include <deque>
#include <set>
#include <string>
#include <unordered_map>

#include "cache/driver.h"
#include "cache/memcached_value.h"
#include "common/json_fields.h"
#include "common/fd.h"
#include "common/mutex.h"

namespace nostall {
namespace {

constexpr int kPoolSize = 32;  // connections' handles: one per thread reading at once
constexpr int kFailuresToDrop = 2;
constexpr double kFirstBackoffS = 1.0, kMaxBackoffS = 30.0;
constexpr size_t kMaxStaged = 8192;  // prefetched answers not yet looked up
constexpr auto kStagedWait = std::chrono::milliseconds(50);

// "host:port" (port 11211 when left out).
Result<std::pair<std::string, int>> ParseServer(const std::string& s) {
  const size_t colon = s.rfind(':');
  std::string host = colon == std::string::npos ? s : s.substr(0, colon);
  int port = 11211;
  if (colon != std::string::npos) {
    char* end = nullptr;
    const long p = std::strtol(s.c_str() + colon + 1, &end, 10);
    if (*end != '\0' || p <= 0 || p > 65535) {
      return InvalidArgument("cache server \"" + s + "\": the port must be a number in [1, 65535]");
    }
    port = static_cast<int>(p);
  }
  if (host.empty()) return InvalidArgument("cache server \"" + s + "\" names no host");
  return std::make_pair(host, port);
}

bool OutOfMemory(memcached_return_t rc) {
  return rc == MEMCACHED_SERVER_MEMORY_ALLOCATION_FAILURE ||
         rc == MEMCACHED_MEMORY_ALLOCATION_FAILURE || rc == MEMCACHED_E2BIG;
}

class MemcachedCache final : public Cache {
 public:
  MemcachedCache(memcached_st* master, memcached_pool_st* pool, const CacheConfig& config,
                 const std::string& secret)
      : master_(master), pool_(pool), config_(config), codec_(secret) {}
  bool ok() const { return codec_.ok(); }

  ~MemcachedCache() override {
    memcached_pool_destroy(pool_);
    memcached_free(master_);
  }

  void Prefetch(const int64_t* items, size_t n) override {
    std::vector<int64_t> mine;  // the items this call asks for (not staged yet)
    {
      MutexLock lock(&stage_mu_);
      for (size_t i = 0; i < n; ++i) {
        if (staged_.count(items[i]) > 0) continue;
        staged_[items[i]] = Staged{};
        stage_order_.push_back(items[i]);
        mine.push_back(items[i]);
      }
      TrimStaged();
    }
    if (mine.empty()) return;
    std::unordered_map<std::string, int64_t> item_of;
    std::vector<std::string> keys;
    std::vector<const char*> key_ptrs;
    std::vector<size_t> key_lens;
    memcached_return_t rc;
    memcached_st* mc = Fetch(&rc);
    // Checked as they arrive (on this thread), kept without the header.
    std::unordered_map<int64_t, std::pair<bool, std::vector<uint8_t>>> found;
    bool clean = false;  // every asked server answered: what is not found is a miss
    if (mc != nullptr) {
      keys.reserve(mine.size());
      for (int64_t item : mine) {
        std::string key = Key(item);
        if (IsDown(ServerOf(mc, key))) continue;  // its Lookup answers at once
        item_of[key] = item;
        keys.push_back(std::move(key));
      }
      for (const std::string& k : keys) {
        key_ptrs.push_back(k.data());
        key_lens.push_back(k.size());
      }
      rc = keys.empty() ? MEMCACHED_SUCCESS
                        : memcached_mget(mc, key_ptrs.data(), key_lens.data(), keys.size());
      clean = rc == MEMCACHED_SUCCESS && keys.size() == mine.size();
      if (rc == MEMCACHED_SUCCESS && !keys.empty()) {
        memcached_result_st result;
        memcached_result_create(mc, &result);
        for (int failures = 0;;) {
          memcached_result_st* r = memcached_fetch_result(mc, &result, &rc);
          if (r != nullptr) {
            auto it = item_of.find(std::string(memcached_result_key_value(r),
                                               memcached_result_key_length(r)));
            if (it != item_of.end()) {
              auto& [good, bytes] = found[it->second];
              good = Check(it->second,
                           reinterpret_cast<const uint8_t*>(memcached_result_value(r)),
                           memcached_result_length(r), &bytes);
            }
            continue;
          }
          // The end of the answers (libmemcached says NOTFOUND, or END).
          if (rc == MEMCACHED_END || rc == MEMCACHED_NOTFOUND) break;
          clean = false;  // a server failed part-way: the rest are asked one by one
          if (++failures > 2) break;
        }
        memcached_result_free(&result);
      }
      memcached_pool_release(pool_, mc);
    }
    MutexLock lock(&stage_mu_);
    for (int64_t item : mine) {
      auto it = staged_.find(item);
      if (it == staged_.end()) continue;
      auto f = found.find(item);
      if (f != found.end()) {
        it->second.bytes = std::move(f->second.second);
        it->second.state = f->second.first ? Staged::kFound : Staged::kRejected;
      } else if (clean) {
        it->second.state = Staged::kAbsent;
      } else {
        staged_.erase(it);  // unknown: its Lookup asks on its own
      }
    }
    staged_cv_.notify_all();
  }

  Result<bool> Lookup(int64_t item, std::vector<uint8_t>* out) override {
    {
      MutexLock lock(&stage_mu_);
      auto it = staged_.find(item);
      // A multi-get is waited for while it is quick; one that is not (its
      // thread descheduled, a server slow) does not hold this lookup up.
      const auto deadline = std::chrono::steady_clock::now() + kStagedWait;
      while (it != staged_.end() && it->second.state == Staged::kPending &&
             staged_cv_.wait_until(lock.native(), deadline) == std::cv_status::no_timeout) {
        it = staged_.find(item);
      }
      it = staged_.find(item);
      if (it != staged_.end() && it->second.state != Staged::kPending) {
        Staged s = std::move(it->second);
        staged_.erase(it);
        lock.Unlock();
        if (s.state != Staged::kFound) {
          misses_.fetch_add(1);
          if (s.state == Staged::kRejected) rejected_.fetch_add(1);
          return false;
        }
        out->swap(s.bytes);  // checked when it arrived
        hits_.fetch_add(1);
        return true;
      }
    }
    const std::string key = Key(item);
    memcached_return_t rc;
    memcached_st* mc = Fetch(&rc);
    if (mc == nullptr) return Failed("no connection handle", rc);
    const std::string server = ServerOf(mc, key);
    if (IsDown(server)) {
      memcached_pool_release(pool_, mc);
      errors_.fetch_add(1);
      return IoError("memcached server " + server + " is down (tried again after a backoff)");
    }
    size_t len = 0;
    uint32_t flags = 0;
    char* value = memcached_get(mc, key.data(), key.size(), &len, &flags, &rc);
    memcached_pool_release(pool_, mc);
    Answered(server, rc == MEMCACHED_SUCCESS || rc == MEMCACHED_NOTFOUND);
    if (rc == MEMCACHED_NOTFOUND) {
      misses_.fetch_add(1);
      return false;
    }
    if (rc != MEMCACHED_SUCCESS) {
      std::free(value);
      return Failed(key + " on " + server, rc);
    }
    const bool good = Check(item, reinterpret_cast<const uint8_t*>(value), len, out);
    std::free(value);
    (good ? hits_ : misses_).fetch_add(1);
    if (!good) rejected_.fetch_add(1);
    return good;
  }

  bool Insert(int64_t item, const uint8_t* data, size_t size) override {
    const uint64_t need = size + MemcachedValueCodec::kHeaderBytes;
    if (need > config_.budget_bytes) return false;  // bigger than a whole share
    const std::string key = Key(item);
    memcached_return_t rc;
    memcached_st* mc = Fetch(&rc);
    if (mc == nullptr) return false;
    bool stored = false;
    const std::string server = ServerOf(mc, key);
    if (!IsFull(server) && !IsDown(server)) {
      const Reserved reserved = Reserve(mc, key, server, need);
      if (reserved != Reserved::kNone) {
        const std::string value = codec_.Encode(config_.dataset_fingerprint, item, data, size);
        // add: stored only if absent (a second insert, or another node's, wins nothing).
        rc = memcached_add(mc, key.data(), key.size(), value.data(), value.size(), 0, 0);
        stored = rc == MEMCACHED_SUCCESS;
        if (OutOfMemory(rc)) MarkFull(server);
        Answered(server, rc == MEMCACHED_SUCCESS || rc == MEMCACHED_NOTSTORED ||
                             rc == MEMCACHED_DATA_EXISTS || OutOfMemory(rc));
        if (stored) {
          items_.fetch_add(1);
          if (reserved == Reserved::kPool) used_.fetch_add(need);
        } else {
          Release(mc, key, reserved, need);
        }
      }
    }
    memcached_pool_release(pool_, mc);
    return stored;
  }

  CacheStats Stats() const override {
    CacheStats s;
    s.budget_bytes = config_.budget_bytes;
    s.used_bytes = used_.load();
    s.items = items_.load();
    s.hits = hits_.load();
    s.misses = misses_.load();
    s.errors = errors_.load();
    s.tier = "memcached";
    return s;
  }

 private:
  // Room for `need` more bytes of `key`'s item. The job's shares are
  // pooled: every client of the dataset adds to a counter on the item's own
  // server (the counter key placed by the item's key) while that server's
  // total is below its part of share x pool_parts (the job's world size), so
  // what one node's items leave of its share serves the others'. The counter
  // lives beside the items it counts: a server restarted empty starts again
  // from zero with them (one counter for the whole pool, on one server, kept
  // counting items another server had lost, never cached again). The pool is
  // reached, not never crossed (by less than one item; the servers' -M bounds
  // their memory). When the server does not answer, this client's own share
  // is the bound.
  enum class Reserved { kNone, kPool, kLocal };
  Reserved Reserve(memcached_st* mc, const std::string& key, const std::string& server, uint64_t need) {
    const std::string pool = PoolKey();
    // This client never holds more than the whole pool (with one part: its
    // own budget), whatever the servers' counters allow.
    if (used_.load() + need > config_.budget_bytes * static_cast<uint64_t>(config_.pool_parts)) {
      return Reserved::kNone;
    }
    if (!IsDown(server)) {
      uint64_t total = 0;
      const memcached_return_t rc = memcached_increment_with_initial_by_key(
          mc, key.data(), key.size(), pool.data(), pool.size(), need, need, 0, &total);
      Answered(server, rc == MEMCACHED_SUCCESS || OutOfMemory(rc));
      if (rc == MEMCACHED_SUCCESS) {
        // Each server's part of the pool, with 10% slack: consistent hashing
        // spreads items within a few percent of evenly, and without it the
        // servers holding more than their part would leave items uncached
        // (an epoch-5 hit rate of 93-97% where a pool of the dataset's size
        // held all of it). The servers' own memory (-M) is the hard bound.
        const uint64_t servers = std::max<uint64_t>(1, memcached_server_count(mc));
        const uint64_t limit =
            config_.budget_bytes * static_cast<uint64_t>(config_.pool_parts) / servers * 11 / 10;
        if (total - need < limit) return Reserved::kPool;
        memcached_decrement_by_key(mc, key.data(), key.size(), pool.data(), pool.size(),
                                   static_cast<uint32_t>(need), &total);
        return Reserved::kNone;
      }
    }
    uint64_t used = used_.load();
    do {
      if (used >= config_.budget_bytes) return Reserved::kNone;
    } while (!used_.compare_exchange_weak(used, used + need));
    return Reserved::kLocal;
  }
  void Release(memcached_st* mc, const std::string& key, Reserved reserved, uint64_t need) {
    if (reserved == Reserved::kLocal) {
      used_.fetch_sub(need);
    } else if (reserved == Reserved::kPool) {
      const std::string pool = PoolKey();
      uint64_t total = 0;
      memcached_decrement_by_key(mc, key.data(), key.size(), pool.data(), pool.size(),
                                 static_cast<uint32_t>(need), &total);
    }
  }
  std::string PoolKey() const {
    char key[64];
    std::snprintf(key, sizeof key, "nostall:%016llx:pool",
                  static_cast<unsigned long long>(config_.dataset_fingerprint));
    return key;
  }

  std::string Key(int64_t item) const {
    char key[64];
    std::snprintf(key, sizeof key, "nostall:%016llx:%lld",
                  static_cast<unsigned long long>(config_.dataset_fingerprint),
                  static_cast<long long>(item));
    return key;
  }

  memcached_st* Fetch(memcached_return_t* rc) {
    struct timespec wait = {1, 0};
    return memcached_pool_fetch(pool_, &wait, rc);
  }

  Status Failed(const std::string& what, memcached_return_t rc) {
    errors_.fetch_add(1);
    return IoError("memcached: " + what + ": " + memcached_strerror(master_, rc));
  }

  // The value as written by Insert for this dataset and item, its bytes whole.
  bool Check(int64_t item, const uint8_t* value, size_t len, std::vector<uint8_t>* out) const {
    return codec_.Decode(config_.dataset_fingerprint, item, value, len, out);
  }

  std::string ServerOf(memcached_st* mc, const std::string& key) {
    memcached_return_t rc;
    const memcached_instance_st* s = memcached_server_by_key(mc, key.data(), key.size(), &rc);
    if (s == nullptr) return "";
    return std::string(memcached_server_name(s)) + ":" + std::to_string(memcached_server_port(s));
  }
  bool IsFull(const std::string& server) {
    MutexLock lock(&mu_);
    return full_.count(server) > 0;
  }
  void MarkFull(const std::string& server) {
    MutexLock lock(&mu_);
    full_.insert(server);
  }

  // The circuit breaker: consecutive failures per server, and until when it
  // is left alone.
  struct Health {
    int failures = 0;
    double backoff_s = 0;
    std::chrono::steady_clock::time_point down_until{};
  };
  bool IsDown(const std::string& server) {
    MutexLock lock(&mu_);
    auto it = health_.find(server);
    return it != health_.end() && std::chrono::steady_clock::now() < it->second.down_until;
  }
  void Answered(const std::string& server, bool ok) {
    MutexLock lock(&mu_);
    Health& h = health_[server];
    if (ok) {
      h = Health{};
      return;
    }
    if (++h.failures >= kFailuresToDrop) {
      h.backoff_s = h.backoff_s == 0 ? kFirstBackoffS : std::min(kMaxBackoffS, 2 * h.backoff_s);
      h.down_until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(h.backoff_s));
      h.failures = kFailuresToDrop - 1;  // one more failure when it is tried again: down again
    }
  }

  // Drops the oldest answered entries beyond kMaxStaged (prefetched, never
  // looked up: the loader restarted an epoch, or a front tier hit).
  void TrimStaged() REQUIRES(stage_mu_) {
    if (stage_order_.size() > 2 * kMaxStaged) {  // forget the ids looked up since
      std::deque<int64_t> live;
      std::set<int64_t> seen;
      for (int64_t item : stage_order_) {
        if (staged_.count(item) > 0 && seen.insert(item).second) live.push_back(item);
      }
      stage_order_.swap(live);
    }
    for (size_t n = stage_order_.size(); n > 0 && staged_.size() > kMaxStaged; --n) {
      const int64_t item = stage_order_.front();
      stage_order_.pop_front();
      auto it = staged_.find(item);
      if (it != staged_.end() && it->second.state == Staged::kPending) {
        stage_order_.push_back(item);
      } else if (it != staged_.end()) {
        staged_.erase(it);
      }
    }
  }

  struct Staged {
    // kRejected: a value was there, not ours (another dataset's, cut, damaged).
    enum State { kPending, kFound, kAbsent, kRejected } state = kPending;
    std::vector<uint8_t> bytes;  // the item's (kFound), checked
  };

  memcached_st* master_;
  memcached_pool_st* pool_;
  const CacheConfig config_;
  const MemcachedValueCodec codec_;
  std::atomic<uint64_t> used_{0};
  std::atomic<int64_t> items_{0}, hits_{0}, misses_{0}, errors_{0}, rejected_{0};
  Mutex mu_;
  std::set<std::string> full_ GUARDED_BY(mu_);  // servers that answered "out of memory"
  std::map<std::string, Health> health_ GUARDED_BY(mu_);
  Mutex stage_mu_;
  std::condition_variable staged_cv_;
  std::unordered_map<int64_t, Staged> staged_ GUARDED_BY(stage_mu_);
  std::deque<int64_t> stage_order_ GUARDED_BY(stage_mu_);  // oldest first (and ids since looked up)
};

// A memcached tier's own keys: "servers", ["host:port", ...] (none or
// empty: NOSTALL_CACHE_SERVERS when the cache opens).
Result<std::vector<std::string>> ReadServers(const nlohmann::json& given) {
  NOSTALL_RETURN_IF_ERROR(CheckKeys(given, "a memcached cache tier", {"servers"}));
  std::vector<std::string> servers;
  NOSTALL_RETURN_IF_ERROR(GetStrings(given, "cache: memcached ", "servers", &servers));
  for (const std::string& s : servers) NOSTALL_RETURN_IF_ERROR(ParseServer(s).status());
  return servers;
}

Result<nlohmann::json> Options(const nlohmann::json& given) {
  NOSTALL_ASSIGN_OR_RETURN(std::vector<std::string> servers, ReadServers(given));
  return nlohmann::json{{"servers", servers}};
}

Result<std::unique_ptr<Cache>> Open(const CacheConfig& config) {
  NOSTALL_ASSIGN_OR_RETURN(nlohmann::json options, CacheOptionsJson(config, "memcached"));
  NOSTALL_ASSIGN_OR_RETURN(std::vector<std::string> servers, ReadServers(options));
  if (servers.empty()) {
    if (const char* env = std::getenv("NOSTALL_CACHE_SERVERS"); env != nullptr) {
      std::string list = env;
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        if (comma > at) servers.push_back(list.substr(at, comma - at));
        at = comma + 1;
      }
    }
  }
  if (servers.empty()) {
    return InvalidArgument("a memcached cache needs its servers (\"servers\" in its tier, or "
                           "NOSTALL_CACHE_SERVERS=host:port,host:port)");
  }
  memcached_st* master = memcached_create(nullptr);
  if (master == nullptr) return ResourceExhausted("libmemcached could not make a client");
  // Timeouts in milliseconds: a slow or dead server costs hits, not time.
  memcached_behavior_set(master, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, 1);
  memcached_behavior_set(master, MEMCACHED_BEHAVIOR_DISTRIBUTION,
                         MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA);
  memcached_behavior_set(master, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
  memcached_behavior_set(master, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, 200);   // ms
  memcached_behavior_set(master, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, 200);      // ms
  memcached_behavior_set(master, MEMCACHED_BEHAVIOR_RCV_TIMEOUT, 200000);    // us
  memcached_behavior_set(master, MEMCACHED_BEHAVIOR_SND_TIMEOUT, 200000);    // us
  memcached_behavior_set(master, MEMCACHED_BEHAVIOR_SERVER_FAILURE_LIMIT, 2);
  memcached_behavior_set(master, MEMCACHED_BEHAVIOR_SERVER_TIMEOUT_LIMIT, 2);  // timeouts count too
  memcached_behavior_set(master, MEMCACHED_BEHAVIOR_REMOVE_FAILED_SERVERS, 1);
  memcached_behavior_set(master, MEMCACHED_BEHAVIOR_RETRY_TIMEOUT, 2);       // s, then try again
  for (const std::string& s : servers) {
    Result<std::pair<std::string, int>> hp = ParseServer(s);
    if (!hp.ok()) {
      memcached_free(master);
      return hp.status();
    }
    const memcached_return_t rc =
        memcached_server_add(master, hp.value().first.c_str(), static_cast<in_port_t>(hp.value().second));
    if (rc != MEMCACHED_SUCCESS) {
      memcached_free(master);
      return InvalidArgument("cache server \"" + s + "\": " + memcached_strerror(nullptr, rc));
    }
  }
  Result<std::string> secret = ResolveCacheSecret();
  if (!secret.ok()) {
    memcached_free(master);
    return secret.status();
  }
  memcached_pool_st* pool = memcached_pool_create(master, 1, kPoolSize);
  if (pool == nullptr) {
    memcached_free(master);
    return ResourceExhausted("libmemcached could not make a connection pool");
  }
  auto cache = std::make_unique<MemcachedCache>(master, pool, config, secret.value());
  if (!cache->ok()) return Internal("OpenSSL could not key HMAC-SHA256");
  return std::unique_ptr<Cache>(std::move(cache));
}

}  // namespace

CacheDriver MemcachedDriver() { return {"memcached", Open, Options}; }

namespace {

// The secret in a file that must be the caller's own and private to it.
Result<std::string> ReadSecretFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot read the cache secret " + path, errno);
  struct stat st;
  std::string secret;
  Status status;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    status = InvalidArgument("the cache secret " + path + " is not a file");
  } else if (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    status = PermissionDenied("the cache secret " + path + " is owned by " + UserText(st.st_uid) +
                              " with mode " + ModeText(st.st_mode) + "; it must be yours and "
                              "private (chmod 600 " + path + ")");
  } else {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0 && secret.size() < 65536) secret.append(buf, static_cast<size_t>(n));
    while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
    if (secret.size() < 16) status = InvalidArgument("the cache secret " + path + " is under 16 bytes");
  }
  ::close(fd);
  if (!status.ok()) return status;
  return secret;
}

}  // namespace

Result<std::string> ResolveCacheSecret() {
  if (const char* env = std::getenv("NOSTALL_CACHE_SECRET"); env != nullptr && *env != '\0') {
    if (std::strlen(env) < 16) return InvalidArgument("NOSTALL_CACHE_SECRET is under 16 bytes");
    return std::string(env);
  }
  if (const char* file = std::getenv("NOSTALL_CACHE_SECRET_FILE"); file != nullptr && *file != '\0') {
    return ReadSecretFile(file);
  }
  // The default: a random secret of this user's, made once. Every job of the
  // user on a node (and on every node sharing the home directory) has it.
  std::string dir;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x != nullptr && *x != '\0') {
    dir = std::string(x) + "/nostall";
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    dir = std::string(home) + "/.config/nostall";
  } else {
    return InvalidArgument("a memcached cache needs a secret: set NOSTALL_CACHE_SECRET or "
                           "NOSTALL_CACHE_SECRET_FILE (no HOME for the default file)");
  }
  const std::string path = dir + "/cache-secret";
  if (::access(path.c_str(), F_OK) != 0) {
    ::mkdir((dir.substr(0, dir.rfind('/'))).c_str(), 0700);
    ::mkdir(dir.c_str(), 0700);
    unsigned char raw[32];
    if (RAND_bytes(raw, sizeof raw) != 1) return Internal("OpenSSL could not make a random secret");
    std::string hex;
    for (unsigned char b : raw) {
      char two[3];
      std::snprintf(two, sizeof two, "%02x", b);
      hex += two;
    }
    hex += '\n';
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return ErrnoError("cannot make the cache secret " + tmp, errno);
    const bool written = ::write(fd, hex.data(), hex.size()) == static_cast<ssize_t>(hex.size());
    ::close(fd);
    // link, not rename: a secret another process made meanwhile is kept.
    if (!written || (::link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST)) {
      const int err = errno;
      ::unlink(tmp.c_str());
      return ErrnoError("cannot make the cache secret " + path, err);
    }
    ::unlink(tmp.c_str());
  }
  return ReadSecretFile(path);
}

Result<std::vector<MemcachedServerInfo>> InspectMemcachedServers(
    const std::vector<std::string>& servers) {
  std::vector<MemcachedServerInfo> out;
  for (const std::string& s : servers) {
    NOSTALL_ASSIGN_OR_RETURN(auto hp, ParseServer(s));
    MemcachedServerInfo info;
    info.server = hp.first + ":" + std::to_string(hp.second);
    memcached_st* mc = memcached_create(nullptr);
    if (mc == nullptr) return ResourceExhausted("libmemcached could not make a client");
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_CONNECT_TIMEOUT, 1000);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_POLL_TIMEOUT, 1000);
    memcached_server_add(mc, hp.first.c_str(), static_cast<in_port_t>(hp.second));
    memcached_return_t rc;
    memcached_stat_st* st = memcached_stat(mc, nullptr, &rc);
    if (st == nullptr || rc != MEMCACHED_SUCCESS) {
      const memcached_return_t last = memcached_last_error(mc);
      info.error = memcached_strerror(mc, last != MEMCACHED_SUCCESS ? last : rc);
      if (const int e = memcached_last_error_errno(mc); e != 0) {
        info.error += std::string(" (") + std::strerror(e) + ")";
      }
    } else {
      info.version = st->version;
      info.bytes = st->bytes;
      info.limit_bytes = st->limit_maxbytes;
      info.items = static_cast<int64_t>(st->curr_items);
      info.evictions = static_cast<int64_t>(st->evictions);
      info.get_hits = static_cast<int64_t>(st->get_hits);
      info.get_misses = static_cast<int64_t>(st->get_misses);
    }
    if (st != nullptr) memcached_stat_free(mc, st);
    memcached_free(mc);
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace nostall
