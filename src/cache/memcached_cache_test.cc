// The cluster tier with real memcached processes: values that are not ours
// are misses, a killed server costs hits and not time, a full server refuses
// and keeps what it has. (The conformance suite covers the rest.)
#include <libmemcached/memcached.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nostall/cache.h"
#include "testing/memcached_server.h"

namespace nostall {
namespace {

using testing::MemcachedServer;

std::vector<uint8_t> Bytes(int64_t item, size_t n) {
  std::vector<uint8_t> b(n);
  for (size_t k = 0; k < n; ++k) b[k] = static_cast<uint8_t>(item * 131 + k * 7);
  return b;
}

std::unique_ptr<Cache> Open(const std::vector<std::string>& servers, uint64_t fingerprint = 7,
                            uint64_t budget = 256 << 20) {
  CacheConfig config{"cluster", budget, fingerprint, 1000};
  config.options = nlohmann::json{{"servers", servers}}.dump();
  auto c = OpenCache("memcached", config);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

// Writes `value` under the key the tier uses for (fingerprint, item), as
// another program (or a damaged server) might.
void Overwrite(const MemcachedServer& server, uint64_t fingerprint, int64_t item,
               const std::string& value) {
  memcached_st* mc = memcached_create(nullptr);
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, 1);
  memcached_server_add(mc, "127.0.0.1", static_cast<in_port_t>(server.port()));
  char key[64];
  std::snprintf(key, sizeof key, "nostall:%016llx:%lld", static_cast<unsigned long long>(fingerprint),
                static_cast<long long>(item));
  ASSERT_EQ(memcached_set(mc, key, std::strlen(key), value.data(), value.size(), 0, 0),
            MEMCACHED_SUCCESS);
  memcached_free(mc);
}

TEST(MemcachedCacheTest, ServersComeFromTheConfigOrTheEnvironmentOrItSaysSo) {
  unsetenv("NOSTALL_CACHE_SERVERS");
  auto none = OpenCache("memcached", {"x", 1 << 20, 1, 10});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("NOSTALL_CACHE_SERVERS"), std::string::npos);
  CacheConfig bad{"x", 1 << 20, 1, 10};
  bad.options = R"({"servers": ["node1:http"]})";
  auto wrong = OpenCache("memcached", bad);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("node1:http"), std::string::npos);
  MemcachedServer server;
  ASSERT_TRUE(server.started());
  setenv("NOSTALL_CACHE_SERVERS", server.address().c_str(), 1);
  auto from_env = OpenCache("memcached", {"x", 1 << 20, 1, 10});
  unsetenv("NOSTALL_CACHE_SERVERS");
  ASSERT_TRUE(from_env.ok()) << from_env.status().ToString();
  const auto b = Bytes(1, 100);
  EXPECT_TRUE(from_env.value()->Insert(1, b.data(), b.size()));
}

TEST(MemcachedCacheTest, ValuesThatAreNotOursAreMissesNeverBytes) {
  MemcachedServer server;
  ASSERT_TRUE(server.started());
  auto cache = Open({server.address()});
  ASSERT_NE(cache, nullptr);
  const auto good = Bytes(3, 5000);
  ASSERT_TRUE(cache->Insert(3, good.data(), good.size()));
  std::vector<uint8_t> out;
  ASSERT_TRUE(cache->Lookup(3, &out).value());
  EXPECT_EQ(out, good);
  // Another dataset's items (another fingerprint) are never ours.
  auto other = Open({server.address()}, /*fingerprint=*/8);
  EXPECT_FALSE(other->Lookup(3, &out).value());
  // Garbage, a header alone, and a value cut short under our key: misses.
  Overwrite(server, 7, 4, "not a nostall value");
  EXPECT_FALSE(cache->Lookup(4, &out).value());
  ASSERT_TRUE(cache->Insert(5, good.data(), good.size()));
  memcached_st* mc = memcached_create(nullptr);
  memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, 1);
  memcached_server_add(mc, "127.0.0.1", static_cast<in_port_t>(server.port()));
  size_t len = 0;
  uint32_t flags = 0;
  memcached_return_t rc;
  const char* key = "nostall:0000000000000007:5";
  char* whole = memcached_get(mc, key, std::strlen(key), &len, &flags, &rc);
  ASSERT_EQ(rc, MEMCACHED_SUCCESS);
  const std::string value(whole, len);
  std::free(whole);
  memcached_free(mc);
  Overwrite(server, 7, 5, value.substr(0, len - 1));  // cut short
  EXPECT_FALSE(cache->Lookup(5, &out).value());
  std::string flipped = value;
  flipped[len / 2] ^= 1;  // one bit of the bytes
  Overwrite(server, 7, 5, flipped);
  EXPECT_FALSE(cache->Lookup(5, &out).value());
  Overwrite(server, 7, 6, value);  // item 5's value under item 6's key
  EXPECT_FALSE(cache->Lookup(6, &out).value());
  EXPECT_EQ(cache->Stats().errors, 0);
}

// memcached has no access control: anyone who reaches the port can write
// any key. A value written without the job's secret, however well formed,
// is a miss; a job with another secret reads nothing of this one's.
TEST(MemcachedCacheTest, ValuesWrittenWithoutTheSecretAreMisses) {
  MemcachedServer server;
  ASSERT_TRUE(server.started());
  setenv("NOSTALL_CACHE_SECRET", "the job's secret, 32 bytes long!", 1);
  auto cache = Open({server.address()});
  ASSERT_NE(cache, nullptr);
  const auto good = Bytes(3, 5000);
  ASSERT_TRUE(cache->Insert(3, good.data(), good.size()));
  // Someone else, knowing the format but not the secret, writes item 4.
  setenv("NOSTALL_CACHE_SECRET", "an intruder's secret, 32 bytes!!", 1);
  auto intruder = Open({server.address()});
  const auto forged = Bytes(99, 5000);
  ASSERT_TRUE(intruder->Insert(4, forged.data(), forged.size()));
  std::vector<uint8_t> out;
  EXPECT_FALSE(intruder->Lookup(3, &out).value());  // the job's values are not theirs either
  setenv("NOSTALL_CACHE_SECRET", "the job's secret, 32 bytes long!", 1);
  EXPECT_FALSE(cache->Lookup(4, &out).value());
  ASSERT_TRUE(cache->Lookup(3, &out).value());
  EXPECT_EQ(out, good);
  // A secret file that others can read is refused, naming its mode.
  unsetenv("NOSTALL_CACHE_SECRET");
  const std::string path = ::testing::TempDir() + "/nostall-secret";
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("0123456789abcdef0123456789abcdef\n", f);
  std::fclose(f);
  chmod(path.c_str(), 0644);
  setenv("NOSTALL_CACHE_SECRET_FILE", path.c_str(), 1);
  CacheConfig config{"cluster", 1 << 20, 7, 1000};
  config.options = nlohmann::json{{"servers", {server.address()}}}.dump();
  auto refused = OpenCache("memcached", config);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("0644"), std::string::npos) << refused.status().ToString();
  chmod(path.c_str(), 0600);
  EXPECT_TRUE(OpenCache("memcached", config).ok());
  unsetenv("NOSTALL_CACHE_SECRET_FILE");
  std::remove(path.c_str());
}

size_t SizeOf(int64_t item) { return 1000 + static_cast<size_t>(item); }

// Items 0..n-1 into `cache`, each of SizeOf(item) bytes.
void Fill(Cache& cache, int n) {
  for (int64_t i = 0; i < n; ++i) {
    const auto bytes = Bytes(i, SizeOf(i));
    ASSERT_TRUE(cache.Insert(i, bytes.data(), bytes.size())) << i;
  }
}

// Items 0..n-1, as a batch to prefetch.
std::vector<int64_t> FirstItems(int n) {
  std::vector<int64_t> items(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) items[static_cast<size_t>(i)] = i;
  return items;
}

// Looks items 0..n-1 up: a hit must be the item's bytes. Adds to the counts
// and returns the seconds it took.
double LookAll(Cache& cache, int n, int* hits, int* errors) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint8_t> out;
  for (int64_t i = 0; i < n; ++i) {
    Result<bool> r = cache.Lookup(i, &out);
    if (!r.ok()) {
      ++*errors;
    } else if (r.value()) {
      ++*hits;
      EXPECT_EQ(out, Bytes(i, SizeOf(i))) << "item " << i;
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The pool's counters live beside the items they count: a server that
// restarts empty takes its items' bytes off the pool with it, and they are
// cached again (one counter for the whole pool, elsewhere, kept counting
// them: the pool stayed "full" of items no server had).
TEST(MemcachedCacheTest, AServerRestartedEmptyIsFilledAgain) {
  auto a = std::make_unique<MemcachedServer>();
  MemcachedServer b;
  ASSERT_TRUE(a->started() && b.started());
  const int port_a = a->port();
  const int n = 200;
  // A budget for about n items: the pool is full once they are in.
  auto cache = Open({a->address(), b.address()}, 7, static_cast<uint64_t>(n) * (SizeOf(n) + 64));
  ASSERT_NE(cache, nullptr);
  int stored = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto bytes = Bytes(i, SizeOf(i));
    stored += cache->Insert(i, bytes.data(), bytes.size());
  }
  ASSERT_GT(stored, n * 3 / 4);
  a.reset();  // killed, and started again empty on its port
  a = std::make_unique<MemcachedServer>(64, port_a);
  ASSERT_TRUE(a->started());
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // past the client's retry timeout
  auto again = Open({"127.0.0.1:" + std::to_string(port_a), b.address()}, 7,
                    static_cast<uint64_t>(n) * (SizeOf(n) + 64));
  std::vector<uint8_t> out;
  int lost = 0, recached = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (again->Lookup(i, &out).value()) continue;
    ++lost;
    const auto bytes = Bytes(i, SizeOf(i));
    recached += again->Insert(i, bytes.data(), bytes.size());
  }
  ASSERT_GT(lost, n / 5);  // server a's share
  EXPECT_GE(recached, lost * 3 / 4);
}

TEST(MemcachedCacheTest, AKilledServerCostsItsHitsNotTimeNorBytes) {
  MemcachedServer a, b;
  ASSERT_TRUE(a.started() && b.started());
  auto cache = Open({a.address(), b.address()});
  ASSERT_NE(cache, nullptr);
  constexpr int kItems = 200;
  Fill(*cache, kItems);
  b.Kill();
  int hits = 0, errors = 0;
  double seconds = 0;
  for (int round = 0; round < 3; ++round) seconds += LookAll(*cache, kItems, &hits, &errors);
  // Consistent hashing spreads the items over both; the survivor keeps its share.
  EXPECT_GT(hits, 3 * kItems / 4);
  EXPECT_LT(hits, 3 * kItems);
  EXPECT_LT(seconds, 3.0) << "a dead server must cost milliseconds, not seconds";
  const CacheStats s = cache->Stats();
  EXPECT_EQ(s.errors, errors);
  EXPECT_EQ(s.hits + s.misses + s.errors, 3 * kItems);
}

TEST(MemcachedCacheTest, AServerDownAtStartCostsItsShareOnly) {
  MemcachedServer live, dead;
  ASSERT_TRUE(live.started() && dead.started());
  const std::string gone = dead.address();
  dead.Kill();  // named in the list, never up while the cache runs
  auto cache = Open({live.address(), gone});
  ASSERT_NE(cache, nullptr);
  constexpr int kItems = 200;
  int stored = 0;
  for (int64_t i = 0; i < kItems; ++i) {
    const auto bytes = Bytes(i, SizeOf(i));
    stored += cache->Insert(i, bytes.data(), bytes.size()) ? 1 : 0;
  }
  // The live server takes its share (and, once the dead one is dropped
  // from the ring, may take more); nothing fails outright.
  EXPECT_GT(stored, kItems / 4);
  int hits = 0, errors = 0;
  const double seconds = LookAll(*cache, kItems, &hits, &errors);
  EXPECT_GT(hits, kItems / 4);  // the live server's items, each with its bytes (LookAll)
  EXPECT_LE(hits, stored);
  EXPECT_LT(seconds, 2.0) << errors << " errors";
}

TEST(MemcachedCacheTest, AServerThatDoesNotAnswerCostsMillisecondsAndIsDropped) {
  MemcachedServer a, b;
  ASSERT_TRUE(a.started() && b.started());
  auto cache = Open({a.address(), b.address()});
  ASSERT_NE(cache, nullptr);
  constexpr int kItems = 100;
  Fill(*cache, kItems);
  b.Pause();  // its connections stay open; nothing comes back
  int hits = 0, errors = 0;
  const double seconds = LookAll(*cache, kItems, &hits, &errors);
  b.Resume();
  EXPECT_GT(errors, 0);
  EXPECT_GT(hits, kItems / 4);
  // Two timeouts of 200 ms, then the server is left alone: not one per item.
  EXPECT_LT(seconds, 2.0) << errors << " errors";
  // After its backoff (1 s) it is asked again, and its items are hits again.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  int back = 0, still = 0;
  LookAll(*cache, kItems, &back, &still);
  EXPECT_EQ(back, kItems);
  EXPECT_EQ(still, 0);
}

TEST(MemcachedCacheTest, AFullServerRefusesAndKeepsWhatItHas) {
  MemcachedServer server(/*megabytes=*/4);
  ASSERT_TRUE(server.started());
  auto cache = Open({server.address()});
  ASSERT_NE(cache, nullptr);
  std::vector<int64_t> stored;
  int refused = 0;
  for (int64_t i = 0; i < 200 && refused < 3; ++i) {
    const auto bytes = Bytes(i, 100000);
    if (cache->Insert(i, bytes.data(), bytes.size())) {
      stored.push_back(i);
    } else {
      ++refused;
    }
  }
  ASSERT_GT(refused, 0) << "4 MB of memcached took 20 MB of items";
  ASSERT_GT(stored.size(), 5u);
  // Never evicted: everything it took is still there.
  std::vector<uint8_t> out;
  for (int64_t i : stored) {
    ASSERT_TRUE(cache->Lookup(i, &out).value()) << "item " << i << " was evicted";
    EXPECT_EQ(out, Bytes(i, 100000));
  }
}

TEST(MemcachedCacheTest, APrefetchedBatchIsAnsweredFromOneMultiGet) {
  MemcachedServer a, b;
  ASSERT_TRUE(a.started() && b.started());
  auto cache = Open({a.address(), b.address()});
  ASSERT_NE(cache, nullptr);
  constexpr int kItems = 64;
  Fill(*cache, kItems);
  Overwrite(a, 7, 1000, "not a nostall value");  // under our key, on one of them
  Overwrite(b, 7, 1000, "not a nostall value");
  std::vector<int64_t> batch = FirstItems(kItems);
  batch.push_back(500);   // never cached: a miss
  batch.push_back(1000);  // not ours: a miss
  cache->Prefetch(batch.data(), batch.size());
  // The answers are in hand: with both servers gone, the batch is still all here.
  a.Kill();
  b.Kill();
  int hits = 0, errors = 0;
  LookAll(*cache, kItems, &hits, &errors);
  EXPECT_EQ(hits, kItems);
  EXPECT_EQ(errors, 0);
  std::vector<uint8_t> out;
  Result<bool> never = cache->Lookup(500, &out);
  ASSERT_TRUE(never.ok());
  EXPECT_FALSE(never.value());
  Result<bool> foreign = cache->Lookup(1000, &out);
  ASSERT_TRUE(foreign.ok());
  EXPECT_FALSE(foreign.value());
  // Looked up once, gone from the staging: the next lookup asks the (dead) servers.
  EXPECT_FALSE(cache->Lookup(0, &out).ok());
}

TEST(MemcachedCacheTest, APrefetchWithAServerDownCostsItsItemsNotTime) {
  MemcachedServer a, b;
  ASSERT_TRUE(a.started() && b.started());
  auto cache = Open({a.address(), b.address()});
  ASSERT_NE(cache, nullptr);
  constexpr int kItems = 200;
  Fill(*cache, kItems);
  b.Kill();
  const std::vector<int64_t> batch = FirstItems(kItems);
  const auto t0 = std::chrono::steady_clock::now();
  int hits = 0, errors = 0;
  for (int round = 0; round < 3; ++round) {
    cache->Prefetch(batch.data(), batch.size());
    LookAll(*cache, kItems, &hits, &errors);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(hits, 3 * kItems / 4);  // the survivor's share, every round
  EXPECT_LT(hits, 3 * kItems);
  EXPECT_LT(seconds, 3.0);
  const CacheStats s = cache->Stats();
  EXPECT_EQ(s.hits + s.misses + s.errors, 3 * kItems);
}

TEST(MemcachedCacheTest, LookupsRacingTheirPrefetchGetTheItemsBytes) {
  MemcachedServer server;
  ASSERT_TRUE(server.started());
  auto cache = Open({server.address()});
  ASSERT_NE(cache, nullptr);
  constexpr int kItems = 300;
  Fill(*cache, kItems);
  const std::vector<int64_t> batch = FirstItems(kItems);
  for (int round = 0; round < 5; ++round) {
    std::vector<std::thread> readers;
    std::atomic<int> hits{0};
    readers.emplace_back([&] { cache->Prefetch(batch.data(), batch.size()); });
    for (int t = 0; t < 3; ++t) {
      readers.emplace_back([&, t] {
        std::vector<uint8_t> out;
        for (int64_t i = t; i < kItems; i += 3) {
          Result<bool> r = cache->Lookup(i, &out);
          ASSERT_TRUE(r.ok());
          ASSERT_TRUE(r.value()) << "item " << i;
          EXPECT_EQ(out, Bytes(i, SizeOf(i)));
          ++hits;
        }
      });
    }
    for (auto& r : readers) r.join();
    EXPECT_EQ(hits.load(), kItems);
  }
}

}  // namespace
}  // namespace nostall
