// The scheduler alone: one test thread plays the fetchers, the preparers
// and the caller, so every hand-over is seen in order.
#include "pipeline/scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>

#include "ring/ring.h"

namespace nostall {
namespace {

// Shards indexed as read, every one at once (the order grows a shard at a
// time all the same): ids are ShardMemberKeys until the index is whole.
class GrowingShards final : public ShardedItems {
 public:
  explicit GrowingShards(std::vector<int64_t> sizes) : sizes_(std::move(sizes)) {}
  int64_t shard_count() const override { return static_cast<int64_t>(sizes_.size()); }
  bool complete() const override { return false; }
  void Begin(const std::vector<int64_t>&) override {}
  Result<int64_t> Count(int64_t s) override {
    ++counted;
    return sizes_[static_cast<size_t>(s)];
  }
  Result<int64_t> Total() override {
    int64_t n = 0;
    for (int64_t v : sizes_) n += v;
    return n;
  }
  int64_t Id(int64_t s, int64_t m) const override { return ShardMemberKey(s, m); }
  int64_t StableKey(int64_t id) const override { return id; }
  int counted = 0;

 private:
  std::vector<int64_t> sizes_;
};

struct Board {
  explicit Board(int64_t items, int64_t batch, int64_t slots, bool skip = false,
                 std::shared_ptr<ShardedItems> shards = nullptr) {
    SamplerOptions so;
    so.num_items = shards ? 0 : items;
    so.batch_size = batch;
    so.shards = shards;
    sampler.emplace(Sampler::Create(so).value());
    ring::RingLayout l;
    l.slot_count = static_cast<uint32_t>(slots) + 1;
    l.reserved_slots = l.slot_count;
    l.chunk = batch;
    l.sample_bytes = 4;
    l.samples_per_epoch = items;
    l.chunks_per_epoch = sampler->BatchesPerEpoch();
    ring = std::make_shared<RingState>();
    ring->seg = ring::CreateRing("", l).value();
    {
      MutexLock lock(&ring->mu);
      ring->slots.resize(l.slot_count);
    }
    Scheduler::Options o;
    o.batch_size = batch;
    o.slot_limit = slots;
    o.prep_threads = 1;
    o.fetch_threads = 1;
    o.on_error_skip = skip;
    scheduler = std::make_unique<Scheduler>(*sampler, ring, &consumer, o);
  }
  // One batch of `n` items through fetch and prep (`ok[i]` false: item i
  // fails to prepare), published.
  void MakeBatch(int n, std::vector<bool> ok = {}) {
    for (int i = 0; i < n; ++i) {
      FetchedItem fi;
      ASSERT_TRUE(scheduler->NextFetch(0, false, nullptr, &fi, &fetch));
      scheduler->Fetched(std::move(fi));
    }
    FetchedItem fi;
    Scheduler::Finished f{};
    Status st;
    const Status* result = nullptr;
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(scheduler->PrepStep(0, &fi, result, &prep, &f), Scheduler::PrepTurn::kItem);
      ring->seg->indices(static_cast<uint32_t>(fi.slot))[fi.pos] = fi.item;
      st = ok.empty() || ok[static_cast<size_t>(i)] ? Status::OK() : DataError("bad");
      result = &st;
    }
    ASSERT_EQ(scheduler->PrepStep(0, &fi, result, &prep, &f), Scheduler::PrepTurn::kBatchDone);
    int64_t kept = 0;
    for (int64_t p = 0; p < f.count; ++p) kept += (*f.bad)[static_cast<size_t>(p)] == 0;
    scheduler->Publish(fi, f, kept);
  }
  std::optional<Sampler> sampler;
  std::shared_ptr<RingState> ring;
  ConsumerRecorder consumer;
  StageCounters fetch, prep;
  std::unique_ptr<Scheduler> scheduler;
};

TEST(SchedulerTest, HandsOutEveryBatchOfTheEpochInOrder) {
  Board b(10, 4, 3);
  ASSERT_TRUE(b.scheduler->StartEpoch(0, 0).ok());
  std::vector<int64_t> seen;
  for (int batch = 0; batch < 3; ++batch) {
    const int n = batch < 2 ? 4 : 2;
    b.MakeBatch(n);
    NextStatus ns;
    std::shared_ptr<Batch> out;
    ASSERT_TRUE(b.scheduler->Next(0, &ns, &out).ok());
    ASSERT_EQ(ns, NextStatus::kBatch);
    EXPECT_EQ(out->index(), batch);
    EXPECT_EQ(out->size(), n);
    seen.insert(seen.end(), out->indices(), out->indices() + out->size());
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  NextStatus ns;
  std::shared_ptr<Batch> out;
  ASSERT_TRUE(b.scheduler->Next(0, &ns, &out).ok());
  EXPECT_EQ(ns, NextStatus::kEndOfEpoch);
  EXPECT_EQ(b.scheduler->counts().batches, 3);
  EXPECT_EQ(b.scheduler->counts().samples, 10);
}

TEST(SchedulerTest, ABufferedEpochsOrderGrowsAShardAtATimeAndEndsWhenItDoes) {
  // Shards of 3, 5, 0 and 2 samples, unshuffled: batches of 4 are 4, 4, 2,
  // in shard order, each claimed once its samples (or the order's end) are known.
  auto shards = std::make_shared<GrowingShards>(std::vector<int64_t>{3, 5, 0, 2});
  Board b(10, 4, 3, false, shards);
  ASSERT_TRUE(b.scheduler->StartEpoch(0, 0).ok());
  EXPECT_EQ(shards->counted, 0) << "no shard read before a fetcher asks";
  std::vector<int64_t> seen;
  for (int batch = 0; batch < 3; ++batch) {
    const int n = batch < 2 ? 4 : 2;
    b.MakeBatch(n);
    if (batch == 0) EXPECT_EQ(shards->counted, 2) << "the first batch needs the first two shards only";
    NextStatus ns;
    std::shared_ptr<Batch> out;
    ASSERT_TRUE(b.scheduler->Next(0, &ns, &out).ok());
    ASSERT_EQ(ns, NextStatus::kBatch);
    EXPECT_EQ(out->size(), n);
    seen.insert(seen.end(), out->indices(), out->indices() + out->size());
  }
  std::vector<int64_t> expect;
  for (auto [s, n] : {std::pair{0, 3}, {1, 5}, {3, 2}}) {
    for (int m = 0; m < n; ++m) expect.push_back(ShardMemberKey(s, m));
  }
  EXPECT_EQ(seen, expect);
  NextStatus ns;
  std::shared_ptr<Batch> out;
  ASSERT_TRUE(b.scheduler->Next(0, &ns, &out).ok());
  EXPECT_EQ(ns, NextStatus::kEndOfEpoch);
  EXPECT_EQ(b.sampler->buffered_epoch(), 0);
}

TEST(SchedulerTest, ABatchNotYetMadeTimesOutAndNoSlotIsTakenBeyondTheLimit) {
  Board b(16, 2, 2);
  ASSERT_TRUE(b.scheduler->StartEpoch(0, 0).ok());
  NextStatus ns;
  std::shared_ptr<Batch> out;
  ASSERT_TRUE(b.scheduler->Next(0, &ns, &out).ok());
  EXPECT_EQ(ns, NextStatus::kTimeout);
  // Two slots: four items fill them; the fifth position waits for a slot
  // (the caller has not taken a batch), so the fetcher is blocked.
  b.MakeBatch(2);
  b.MakeBatch(2);
  std::atomic<bool> asking{false};
  std::thread late([&] {
    FetchedItem fi;
    asking.store(true);
    if (b.scheduler->NextFetch(0, false, nullptr, &fi, &b.fetch)) b.scheduler->Fetched(std::move(fi));
  });
  // 200 ms from when the fetcher asks (a busy machine may start the thread
  // late): it waits all that time, less what reaching the wait takes.
  while (!asking.load()) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(b.scheduler->Next(0, &ns, &out).ok());
  ASSERT_EQ(ns, NextStatus::kBatch);
  out.reset();  // frees its slot: the waiting position goes on
  late.join();
  EXPECT_GT(b.fetch.blocked_ns.load(), 50'000'000);
}

TEST(SchedulerTest, ANewGenerationDropsQueuedWorkAndResumesAtItsBatch) {
  Board b(12, 4, 3);
  ASSERT_TRUE(b.scheduler->StartEpoch(0, 0).ok());
  FetchedItem stale;
  ASSERT_TRUE(b.scheduler->NextFetch(0, false, nullptr, &stale, &b.fetch));
  b.scheduler->Fetched(std::move(stale));  // queued, never prepared: dropped
  ASSERT_TRUE(b.scheduler->StartEpoch(0, 2).ok());
  b.MakeBatch(4);
  NextStatus ns;
  std::shared_ptr<Batch> out;
  ASSERT_TRUE(b.scheduler->Next(0, &ns, &out).ok());
  ASSERT_EQ(ns, NextStatus::kBatch);
  EXPECT_EQ(out->index(), 2);
  EXPECT_EQ(std::set<int64_t>(out->indices(), out->indices() + 4), (std::set<int64_t>{8, 9, 10, 11}));
}

TEST(SchedulerTest, SkippedItemsLeaveTheBatchShorterAndCounted) {
  Board b(4, 4, 2, /*skip=*/true);
  ASSERT_TRUE(b.scheduler->StartEpoch(0, 0).ok());
  b.MakeBatch(4, {true, false, true, false});
  NextStatus ns;
  std::shared_ptr<Batch> out;
  ASSERT_TRUE(b.scheduler->Next(0, &ns, &out).ok());
  ASSERT_EQ(ns, NextStatus::kBatch);
  EXPECT_EQ(out->size(), 2);
  EXPECT_EQ(b.scheduler->counts().errors, 2);
  EXPECT_EQ(b.scheduler->counts().skipped, 2);
}

TEST(SchedulerTest, CancelWakesAWaitingFetcher) {
  Board b(8, 4, 2);
  bool got = true;
  std::thread fetcher([&] {
    FetchedItem fi;
    got = b.scheduler->NextFetch(0, false, nullptr, &fi, &b.fetch);  // no epoch started: waits
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  b.scheduler->Cancel();
  fetcher.join();
  EXPECT_FALSE(got);
}

}  // namespace
}  // namespace nostall
