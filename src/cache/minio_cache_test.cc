#include "nostall/cache.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace nostall {
namespace {

// A lookup that must answer (a local cache cannot fail): hit or miss.
bool Hit(Cache& c, int64_t item, std::vector<uint8_t>* out) {
  Result<bool> r = c.Lookup(item, out);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() && r.value();
}

std::string UniqueName(const char* what) {
  return std::string("test-") + what + "-" + std::to_string(::getpid());
}

// Item i's bytes: length and content derived from i, so any reader can check them.
std::vector<uint8_t> ItemBytes(int64_t i) {
  std::vector<uint8_t> b(1000 + (i * 7919) % 5000);
  for (size_t k = 0; k < b.size(); ++k) b[k] = static_cast<uint8_t>(i * 31 + k * 17);
  return b;
}

class CacheTest : public ::testing::Test {
 protected:
  void TearDown() override { (void)MinioCache::Remove(name_); }
  std::string name_ = UniqueName(::testing::UnitTest::GetInstance()->current_test_info()->name());
};

TEST_F(CacheTest, FirstComeFirstCachedNeverEvicts) {
  auto cache = MinioCache::Open(name_, /*budget_bytes=*/16384, /*fingerprint=*/1, 100).value();
  std::vector<uint8_t> out;
  EXPECT_FALSE(Hit(*cache, 3, &out));
  auto a = std::vector<uint8_t>(6000, 1), b = std::vector<uint8_t>(6000, 2),
       c = std::vector<uint8_t>(6000, 3), d = std::vector<uint8_t>(3000, 4);
  EXPECT_TRUE(cache->Insert(3, a.data(), a.size()));
  EXPECT_FALSE(cache->Insert(3, b.data(), b.size()));  // already cached: kept as first seen
  EXPECT_TRUE(cache->Insert(4, b.data(), b.size()));
  EXPECT_FALSE(cache->Insert(5, c.data(), c.size()));  // no room: nothing is evicted
  EXPECT_TRUE(cache->Insert(6, d.data(), d.size()));   // a smaller one still fits
  ASSERT_TRUE(Hit(*cache, 3, &out));
  EXPECT_EQ(out, a);
  ASSERT_TRUE(Hit(*cache, 4, &out));
  EXPECT_EQ(out, b);
  EXPECT_FALSE(Hit(*cache, 5, &out));
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.items, 3);
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.misses, 2);
  EXPECT_LE(s.used_bytes, s.budget_bytes);
}

TEST_F(CacheTest, AnotherProcessSeesWhatWasCached) {
  auto cache = MinioCache::Open(name_, 1 << 20, 7, 50).value();
  for (int64_t i = 0; i < 50; i += 2) {
    auto b = ItemBytes(i);
    ASSERT_TRUE(cache->Insert(i, b.data(), b.size()));
  }
  pid_t child = ::fork();
  if (child == 0) {
    auto other = MinioCache::Open(name_, 1 << 20, 7, 50);
    int bad = !other.ok();
    std::vector<uint8_t> out;
    for (int64_t i = 0; !bad && i < 50; ++i) {
      bool hit = Hit(*other.value(), i, &out);
      bad |= hit != (i % 2 == 0) || (hit && out != ItemBytes(i));
    }
    ::_exit(bad);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_F(CacheTest, ProcessesAndThreadsInsertAndReadAtOnce) {
  constexpr int64_t kItems = 400;
  auto cache = MinioCache::Open(name_, 1 << 20, 9, kItems).value();  // room for ~1/3
  auto work = [&](int seed) {
    int bad = 0;
    std::vector<std::thread> threads;
    std::atomic<int> errors{0};
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        auto c = MinioCache::Open(name_, 1 << 20, 9, kItems).value();
        std::vector<uint8_t> out;
        for (int64_t k = 0; k < 3 * kItems; ++k) {
          int64_t i = (k * 131 + t * 17 + seed * 7) % kItems;
          if (Hit(*c, i, &out)) {
            errors += out != ItemBytes(i);
          } else {
            auto b = ItemBytes(i);
            c->Insert(i, b.data(), b.size());
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    bad = errors.load();
    return bad;
  };
  pid_t child = ::fork();
  if (child == 0) ::_exit(work(1) != 0);
  int mine = work(2);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_EQ(mine, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CacheStats s = cache->Stats();
  EXPECT_GT(s.items, 50);
  EXPECT_LE(s.used_bytes, s.budget_bytes);
  // Every published entry reads back whole.
  std::vector<uint8_t> out;
  int64_t found = 0;
  for (int64_t i = 0; i < kItems; ++i) {
    if (Hit(*cache, i, &out)) {
      ++found;
      EXPECT_EQ(out, ItemBytes(i));
    }
  }
  EXPECT_EQ(found, s.items);
}

TEST_F(CacheTest, WriterKilledMidInsertLeavesNoTornEntry) {
  auto cache = MinioCache::Open(name_, 1 << 20, 5, 10).value();
  pid_t child = ::fork();
  if (child == 0) {
    auto c = MinioCache::Open(name_, 1 << 20, 5, 10).value();
    auto b = ItemBytes(4);
    c->InsertForTest(4, b.data(), b.size(), [] { ::raise(SIGKILL); });
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  auto fresh = MinioCache::Open(name_, 1 << 20, 5, 10).value();
  std::vector<uint8_t> out;
  EXPECT_FALSE(Hit(*fresh, 4, &out));  // claimed, never published: a miss
  auto b = ItemBytes(4);
  EXPECT_TRUE(fresh->Insert(4, b.data(), b.size()));  // the dead claim is taken over
  ASSERT_TRUE(Hit(*fresh, 4, &out));
  EXPECT_EQ(out, b);
}

// Writes `value` at byte `at` of cache segment `name` (another process
// damaging it). Format version 2 (docs/cache_format.md): header fields
// budget_bytes at 32, data_offset at 40, used at 48; entry i at 128 + 32 i
// holds state, offset (+8), length (+16) and checksum (+24).
void Poke(const std::string& name, size_t at, uint64_t value) {
  int fd = ::shm_open(("/nostall-cache-" + std::to_string(::geteuid()) + "-" + name).c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, &value, 8, static_cast<off_t>(at)), 8);
  ::close(fd);
}

TEST_F(CacheTest, DamagedEntriesAreMissesNotCrashes) {
  auto cache = MinioCache::Open(name_, /*budget_bytes=*/16384, /*fingerprint=*/1, 8).value();
  const auto bytes = ItemBytes(1);
  for (int64_t i = 0; i < 4; ++i) ASSERT_TRUE(cache->Insert(i, bytes.data(), bytes.size()));
  Poke(name_, 128 + 32 * 0 + 8, uint64_t{1} << 40);    // offset far outside
  Poke(name_, 128 + 32 * 1 + 16, uint64_t{1} << 40);   // length far outside
  Poke(name_, 128 + 32 * 2 + 16, ~uint64_t{0});        // length 2^64 - 1
  Poke(name_, 128 + 32 * 3 + 8, 16384 - 100);          // the end passes the budget
  std::vector<uint8_t> out;
  const int64_t misses = cache->Stats().misses;
  for (int64_t i = 0; i < 4; ++i) EXPECT_FALSE(Hit(*cache, i, &out)) << "item " << i;
  EXPECT_EQ(cache->Stats().misses, misses + 4);
  // A damaged allocator word cannot send an insert out of bounds either.
  Poke(name_, 48, uint64_t{1} << 63);
  EXPECT_FALSE(cache->Insert(5, bytes.data(), bytes.size()));
  // A second process attaching sees the same.
  auto other = MinioCache::Open(name_, 16384, 1, 8).value();
  EXPECT_FALSE(Hit(*other, 1, &out));
}

uint64_t Peek(const std::string& name, size_t at) {
  int fd = ::shm_open(("/nostall-cache-" + std::to_string(::geteuid()) + "-" + name).c_str(), O_RDONLY, 0);
  uint64_t value = 0;
  EXPECT_EQ(::pread(fd, &value, 8, static_cast<off_t>(at)), 8);
  ::close(fd);
  return value;
}

// An entry pointed at another item's bytes (its offset, length and even its
// checksum copied over) proves nothing: the checksum is seeded with the
// item. A miss, never the other sample.
TEST_F(CacheTest, AnEntryPointedAtAnotherItemsBytesIsAMiss) {
  auto cache = MinioCache::Open(name_, /*budget_bytes=*/65536, /*fingerprint=*/1, 8).value();
  const auto one = ItemBytes(1), two = ItemBytes(2);
  ASSERT_TRUE(cache->Insert(0, one.data(), one.size()));
  ASSERT_TRUE(cache->Insert(1, two.data(), two.size()));
  std::vector<uint8_t> out;
  Poke(name_, 128 + 32 * 0 + 8, Peek(name_, 128 + 32 * 1 + 8));  // item 0 -> item 1's offset
  Poke(name_, 128 + 32 * 0 + 16, Peek(name_, 128 + 32 * 1 + 16));
  EXPECT_FALSE(Hit(*cache, 0, &out));
  Poke(name_, 128 + 32 * 0 + 24, Peek(name_, 128 + 32 * 1 + 24));  // and its checksum
  EXPECT_FALSE(Hit(*cache, 0, &out));
  ASSERT_TRUE(Hit(*cache, 1, &out));
  EXPECT_EQ(out, two);
  // A byte of an item's bytes changed: a miss too.
  const uint64_t at = Peek(name_, 40) + Peek(name_, 128 + 32 * 1 + 8);
  Poke(name_, at, Peek(name_, at) ^ 1);
  EXPECT_FALSE(Hit(*cache, 1, &out));
}

TEST_F(CacheTest, DamagedHeaderIsRefusedAtAttach) {
  { auto cache = MinioCache::Open(name_, 16384, 1, 8).value(); }
  Poke(name_, 40, uint64_t{1} << 63);  // data_offset
  Poke(name_, 32, uint64_t{1} << 63);  // budget: offset + budget wraps to 0
  auto damaged = MinioCache::Open(name_, 16384, 1, 8);
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(damaged.status().message().find("damaged"), std::string::npos)
      << damaged.status().ToString();
  EXPECT_NE(damaged.status().message().find("nostall cache rm"), std::string::npos);
  // Cut short: refused too.
  ASSERT_TRUE(MinioCache::Remove(name_).ok());
  { auto cache = MinioCache::Open(name_, 16384, 1, 8).value(); }
  int fd = ::shm_open(("/nostall-cache-" + std::to_string(::geteuid()) + "-" + name_).c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 100), 0);
  ::close(fd);
  EXPECT_FALSE(MinioCache::Open(name_, 16384, 1, 8).ok());
}

TEST_F(CacheTest, WrongDatasetOrTooBigAreClearErrors) {
  auto cache = MinioCache::Open(name_, 1 << 20, 5, 10).value();
  auto other = MinioCache::Open(name_, 1 << 20, 6, 10);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("another dataset"), std::string::npos);
  auto huge = MinioCache::Open(name_ + "-huge", uint64_t{1} << 50, 5, 10);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("free"), std::string::npos);
  EXPECT_EQ(MinioCache::Open("bad/name", 1024, 5, 10).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nostall
