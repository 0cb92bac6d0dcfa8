// The conformance suite every cache passes (src/cache/driver.h), alone and
// stacked in tiers.
//
// A cache joins by adding a Factory below that opens it with a budget. The
// suite checks what the loader relies on: a miss, then the exact bytes once
// inserted; a second insert of an item is refused; the budget is never
// passed (the cluster tier's, a share of memory its servers bound, is
// reached: passed by less than one item) and an item bigger than it is
// refused, not half-kept; hits and
// misses are counted exactly; many threads inserting and reading at once
// never see another item's bytes or a torn value.
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cache/driver.h"
#include "nostall/cache.h"
#include "testing/memcached_server.h"

namespace nostall {
namespace {

constexpr int64_t kItems = 64;

std::vector<uint8_t> Payload(int64_t i) {
  std::vector<uint8_t> b(200 + (i * 7919) % 3000);
  for (size_t k = 0; k < b.size(); ++k) b[k] = static_cast<uint8_t>(i * 31 + k * 17 + (k >> 8));
  return b;
}

// What a tier's used bytes may pass its budget by: the cluster tier's budget
// is this client's share of its servers' memory, reached rather than never
// crossed (passed by less than one item, header included); every other's is a hard bound.
uint64_t Overshoot(const CacheStats& t) { return t.tier == "memcached" ? 3200 + 64 : 0; }

std::string NameFor(const char* what) {
  static std::atomic<int> n{0};
  return std::string("conf-") + what + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(n.fetch_add(1));
}

struct MinioFactory {
  static Result<std::unique_ptr<Cache>> Open(const std::string& name, uint64_t budget) {
    return OpenCache("minio", {name, budget, /*dataset_fingerprint=*/42, kItems});
  }
  static void Remove(const std::string& name) { (void)MinioCache::Remove(name); }
};

struct LruFactory {
  static Result<std::unique_ptr<Cache>> Open(const std::string& name, uint64_t budget) {
    return OpenCache("lru", {name, budget, 42, kItems});
  }
  static void Remove(const std::string&) {}
};

// An in-process LRU tier in front of a shared-memory MinIO tier.
struct TieredFactory {
  static Result<std::unique_ptr<Cache>> Open(const std::string& name, uint64_t budget) {
    std::vector<std::unique_ptr<Cache>> tiers;
    tiers.push_back(MakeLruCache(budget / 2));
    NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<Cache> back, MinioFactory::Open(name, budget));
    tiers.push_back(std::move(back));
    return StackCaches(std::move(tiers));
  }
  static void Remove(const std::string& name) { MinioFactory::Remove(name); }
};

// The cluster tier against a real memcached of its own (src/testing).
struct MemcachedFactory {
  static std::map<std::string, std::unique_ptr<testing::MemcachedServer>>& Servers() {
    static std::map<std::string, std::unique_ptr<testing::MemcachedServer>> servers;
    return servers;
  }
  static Result<std::unique_ptr<Cache>> Open(const std::string& name, uint64_t budget) {
    auto& server = Servers()[name];
    if (!server) server = std::make_unique<testing::MemcachedServer>();
    if (!server->started()) return Internal("memcached did not start");
    CacheConfig config{name, budget, 42, kItems};
    config.options = nlohmann::json{{"servers", {server->address()}}}.dump();
    return OpenCache("memcached", config);
  }
  static void Remove(const std::string& name) { Servers().erase(name); }
};

template <typename Factory>
class CacheConformance : public ::testing::Test {
 protected:
  void TearDown() override { Factory::Remove(name_); }
  std::unique_ptr<Cache> Open(uint64_t budget) {
    auto opened = Factory::Open(name_, budget);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    return opened.ok() ? std::move(opened).value() : nullptr;
  }
  // Hit or miss; a local cache must answer.
  static bool Hit(Cache& c, int64_t item, std::vector<uint8_t>* out) {
    Result<bool> r = c.Lookup(item, out);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() && r.value();
  }
  std::string name_ = NameFor("cache");
};

using Factories = ::testing::Types<MinioFactory, LruFactory, TieredFactory, MemcachedFactory>;
TYPED_TEST_SUITE(CacheConformance, Factories);

TYPED_TEST(CacheConformance, AMissThenTheExactBytesOnceInserted) {
  auto cache = this->Open(1 << 20);
  ASSERT_NE(cache, nullptr);
  std::vector<uint8_t> out;
  EXPECT_FALSE(this->Hit(*cache, 7, &out));
  const auto bytes = Payload(7);
  EXPECT_TRUE(cache->Insert(7, bytes.data(), bytes.size()));
  EXPECT_FALSE(cache->Insert(7, bytes.data(), bytes.size())) << "a second insert of one item";
  out.assign(5, 0xee);  // stale contents are replaced
  ASSERT_TRUE(this->Hit(*cache, 7, &out));
  EXPECT_EQ(out, bytes);
  EXPECT_FALSE(this->Hit(*cache, 8, &out));
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.errors, 0);
  EXPECT_EQ(s.items, static_cast<int64_t>(cache->TierStats().size()));  // one copy per tier
  EXPECT_GE(s.used_bytes, bytes.size());
  EXPECT_FALSE(s.tier.empty());
}

TYPED_TEST(CacheConformance, TheBudgetIsNeverPassedAndABigItemIsRefusedWhole) {
  const uint64_t budget = 16 << 10;
  auto cache = this->Open(budget);
  ASSERT_NE(cache, nullptr);
  std::vector<uint8_t> big(budget + 1, 1), out;
  EXPECT_FALSE(cache->Insert(0, big.data(), big.size()));
  EXPECT_FALSE(this->Hit(*cache, 0, &out));
  int refused = 0;
  for (int64_t i = 1; i < kItems; ++i) {
    const auto bytes = Payload(i);
    if (!cache->Insert(i, bytes.data(), bytes.size())) ++refused;
    for (const CacheStats& t : cache->TierStats()) {
      ASSERT_LE(t.used_bytes, t.budget_bytes + Overshoot(t)) << t.tier << " after item " << i;
    }
  }
  // More bytes than the budget were offered: a cache either refused some or made room.
  int cached = 0;
  for (int64_t i = 1; i < kItems; ++i) {
    if (this->Hit(*cache, i, &out)) {
      ++cached;
      EXPECT_EQ(out, Payload(i)) << "item " << i;
    }
  }
  EXPECT_GT(cached, 0);
  EXPECT_LT(cached, kItems - 1);
  (void)refused;
}

TYPED_TEST(CacheConformance, ThreadsInsertingAndReadingAtOnceNeverSeeWrongBytes) {
  auto cache = this->Open(96 << 10);  // room for about half the items
  ASSERT_NE(cache, nullptr);
  std::atomic<int64_t> wrong{0}, hits{0}, lookups{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> out;
      for (int round = 0; round < 30; ++round) {
        for (int64_t k = 0; k < kItems; ++k) {
          const int64_t i = (k * (2 * t + 1) + round) % kItems;
          Result<bool> r = cache->Lookup(i, &out);
          lookups.fetch_add(1);
          if (!r.ok()) {
            wrong.fetch_add(1);
          } else if (r.value()) {
            hits.fetch_add(1);
            if (out != Payload(i)) wrong.fetch_add(1);
          } else {
            const auto bytes = Payload(i);
            cache->Insert(i, bytes.data(), bytes.size());
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(hits.load(), 0);
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.hits + s.misses + s.errors, lookups.load());
  for (const CacheStats& t : cache->TierStats()) {
    EXPECT_LE(t.used_bytes, t.budget_bytes + Overshoot(t)) << t.tier;
  }
}

TEST(CacheRegistryTest, AnUnknownPolicyNamesTheOnesThereAre) {
  auto c = OpenCache("fifo", {"x", 1 << 20, 1, 10});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  for (const CacheDriver& d : CacheDrivers()) {
    EXPECT_NE(c.status().message().find(d.policy), std::string::npos) << c.status().message();
  }
  EXPECT_FALSE(OpenCache("lru", {"x", 0, 1, 10}).ok()) << "a cache of no size";
}

// A tier that cannot answer (a remote server down): the stack asks the next
// tier and counts the error; a miss everywhere is a miss.
class FailingTier final : public Cache {
 public:
  Result<bool> Lookup(int64_t, std::vector<uint8_t>*) override {
    return IoError("server unreachable");
  }
  bool Insert(int64_t, const uint8_t*, size_t) override { return false; }
  CacheStats Stats() const override { return {0, 0, 0, 0, 0, 0, "down"}; }
};

TEST(TieredCacheTest, AFailingTierCostsHitsNotItems) {
  std::vector<std::unique_ptr<Cache>> tiers;
  tiers.push_back(MakeLruCache(1 << 16));
  tiers.push_back(std::make_unique<FailingTier>());
  tiers.push_back(MakeLruCache(1 << 16));
  auto cache = StackCaches(std::move(tiers));
  const auto bytes = Payload(3);
  ASSERT_TRUE(cache->Insert(3, bytes.data(), bytes.size()));
  std::vector<uint8_t> out;
  Result<bool> hit = cache->Lookup(3, &out);
  ASSERT_TRUE(hit.ok() && hit.value());
  EXPECT_EQ(out, bytes);
  hit = cache->Lookup(4, &out);
  ASSERT_TRUE(hit.ok());
  EXPECT_FALSE(hit.value());
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.errors, 1);  // item 4: the failing tier could not say
  EXPECT_EQ(s.tier, "lru+down+lru");
  ASSERT_EQ(cache->TierStats().size(), 3u);
}

TEST(TieredCacheTest, AHitInABackTierIsCopiedToTheFront) {
  auto back = MakeLruCache(1 << 16);
  const auto bytes = Payload(9);
  ASSERT_TRUE(back->Insert(9, bytes.data(), bytes.size()));
  std::vector<std::unique_ptr<Cache>> tiers;
  tiers.push_back(MakeLruCache(1 << 16));
  tiers.push_back(std::move(back));
  auto cache = StackCaches(std::move(tiers));
  std::vector<uint8_t> out;
  ASSERT_TRUE(cache->Lookup(9, &out).value_or(false));
  auto per_tier = cache->TierStats();
  EXPECT_EQ(per_tier[0].items, 1) << "the front tier took a copy";
  ASSERT_TRUE(cache->Lookup(9, &out).value_or(false));
  per_tier = cache->TierStats();
  EXPECT_EQ(per_tier[0].hits, 1);
  EXPECT_EQ(per_tier[1].hits, 1) << "the second lookup never reached the back tier";
}

}  // namespace
}  // namespace nostall
