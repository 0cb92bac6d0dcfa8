// ReadCoalescer over an in-memory store that counts its reads: members of
// one block asked for close together come from one read of the block; a
// block that cannot be read leaves each member to its own read.
#include "source/tar/coalesce.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace nostall {
namespace {

// Objects of made-up bytes (byte p of object k: a function of both), so
// that gigabytes of them cost no memory; counts its reads.
class MemoryStore final : public store::ObjectStore {
 public:
  const char* name() const override { return "memory"; }
  std::string Uri(const std::string& key) const override { return "mem://" + key; }
  Result<std::vector<store::ObjectInfo>> List(const std::string&) const override {
    return std::vector<store::ObjectInfo>{};
  }
  Result<store::ObjectInfo> Stat(const std::string& key) const override {
    return store::ObjectInfo{key, sizes.at(key), 0, ""};
  }
  Status Read(const std::string& key, uint64_t offset, int64_t length, std::vector<uint8_t>* out,
              uint64_t) const override {
    ++reads;
    if (static_cast<uint64_t>(length) > fail_longer_than) return fail_with;
    if (offset + static_cast<uint64_t>(length) > sizes.at(key)) return DataError("past the end of " + key);
    *out = Made(key, offset, static_cast<uint64_t>(length));
    return Status::OK();
  }
  static std::vector<uint8_t> Made(const std::string& key, uint64_t offset, uint64_t length) {
    const uint64_t k = std::hash<std::string>{}(key);
    std::vector<uint8_t> v(length);
    for (uint64_t i = 0; i < length; ++i) v[i] = static_cast<uint8_t>(((offset + i) * 2654435761u + k) >> 11);
    return v;
  }

  std::map<std::string, uint64_t> sizes;
  mutable std::atomic<int> reads{0};
  uint64_t fail_longer_than = UINT64_MAX;
  Status fail_with = IoError("the server hung up");
};

// Reads member `m` (of `size` bytes, 512 bytes of header before each) of `key`.
struct Got {
  Status status;
  std::vector<uint8_t> bytes;
};
Got ReadMember(const ReadCoalescer& c, const MemoryStore& s, const std::string& key, uint64_t m, uint64_t size) {
  Got got;
  const uint64_t offset = m * (size + 512) + 512;
  c.Read({key, offset, size, s.sizes.at(key)}, {}, [&](Status st, std::vector<uint8_t> b) {
    got.status = std::move(st);
    got.bytes = std::move(b);
  });
  return got;
}

std::vector<uint8_t> Expected(const std::string& key, uint64_t m, uint64_t size) {
  return MemoryStore::Made(key, m * (size + 512) + 512, size);
}

TEST(ReadCoalescerTest, MembersOfABlockReadCloseTogetherComeFromOneRead) {
  MemoryStore store;
  store.sizes["shard-0.tar"] = 30 * (10240 + 512);  // 30 members of 10 kB: one block
  ReadCoalescer c(&store);
  std::vector<uint64_t> order(30);
  for (uint64_t i = 0; i < 30; ++i) order[i] = (i * 7) % 30;  // shuffled within the shard
  for (uint64_t m : order) {
    Got g = ReadMember(c, store, "shard-0.tar", m, 10240);
    ASSERT_TRUE(g.status.ok()) << g.status.ToString();
    EXPECT_EQ(g.bytes, Expected("shard-0.tar", m, 10240)) << "member " << m;
  }
  // Three members alone, then the block; the other 26 from it.
  EXPECT_EQ(store.reads.load(), 4);
  EXPECT_EQ(c.blocks(), 1);
  EXPECT_EQ(c.joined(), 27);
}

TEST(ReadCoalescerTest, ReadsSpreadOverManyBlocksGoToTheStoreAsTheyAre) {
  MemoryStore store;
  // 64 shards of 8 blocks of 1 MiB; members of 100 kB; 2,000 reads at random.
  const uint64_t size = 100 << 10, per_shard = (8 << 20) / (size + 512);
  for (int s = 0; s < 64; ++s) store.sizes["s" + std::to_string(s)] = 8 << 20;
  ReadCoalescer c(&store);
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {
    const std::string key = "s" + std::to_string(rng() % 64);
    const uint64_t m = rng() % per_shard;
    Got g = ReadMember(c, store, key, m, size);
    ASSERT_TRUE(g.status.ok());
    ASSERT_EQ(g.bytes, Expected(key, m, size));
  }
  // 512 blocks, 64 recent reads: four of one block among them is rare
  // (each block read is 1 MiB for a 100 kB member: ten reads' worth).
  EXPECT_LE(c.blocks(), 4) << "whole blocks read for a shuffle that seldom comes back to one";
  EXPECT_GT(store.reads.load(), 1950);
}

TEST(ReadCoalescerTest, ABlockThatCannotBeReadLeavesEachMemberToItsOwnRead) {
  MemoryStore store;
  store.sizes["shard.tar"] = 20 * (4096 + 512);
  store.fail_longer_than = 8192;  // a member reads; a block fails
  ReadCoalescer c(&store);
  for (uint64_t m = 0; m < 20; ++m) {
    Got g = ReadMember(c, store, "shard.tar", m, 4096);
    ASSERT_TRUE(g.status.ok()) << m << ": " << g.status.ToString();
    EXPECT_EQ(g.bytes, Expected("shard.tar", m, 4096));
  }
  EXPECT_GE(c.blocks(), 1);
  // Cancelled: the waiting member is answered Cancelled, not read again.
  MemoryStore cancelled;
  cancelled.sizes["shard.tar"] = store.sizes["shard.tar"];
  cancelled.fail_longer_than = 8192;
  cancelled.fail_with = Cancelled("the loader is closing");
  ReadCoalescer d(&cancelled);
  for (uint64_t m = 0; m < 3; ++m) ASSERT_TRUE(ReadMember(d, cancelled, "shard.tar", m, 4096).status.ok());
  const int before = cancelled.reads.load();
  Got fourth = ReadMember(d, cancelled, "shard.tar", 3, 4096);  // the block's read
  EXPECT_EQ(fourth.status.code(), StatusCode::kCancelled);
  EXPECT_EQ(cancelled.reads.load(), before + 1);
}

}  // namespace
}  // namespace nostall
