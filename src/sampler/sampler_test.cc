#include "nostall/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

namespace nostall {
namespace {

Sampler Make(int64_t n, int64_t batch, bool shuffle, int64_t rank = 0, int64_t world = 1,
             bool drop_last = false, uint64_t seed = 1) {
  SamplerOptions o{n, batch, shuffle, seed, rank, world, drop_last};
  auto s = Sampler::Create(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.value();
}

TEST(SamplerTest, ShuffledEpochIsAPermutationFixedBySeedAndEpoch) {
  Sampler s = Make(1000, 10, true);
  auto e0 = s.EpochOrder(0);
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(e0, Make(1000, 10, true).EpochOrder(0));  // same seed, same order
  EXPECT_NE(e0, s.EpochOrder(1));                     // a new order each epoch
  EXPECT_NE(e0, Make(1000, 10, true, 0, 1, false, /*seed=*/2).EpochOrder(0));
  auto plain = Make(5, 2, false).EpochOrder(3);
  EXPECT_EQ(plain, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

// Grouped batches (an image's aspect-ratio bin) over 3 ranks: every rank the
// same number of batches, every sample once over the ranks (the padding
// aside), each full batch but the last few of one group, the same order
// again for the same (seed, epoch).
TEST(SamplerTest, GroupedBatchesAreOfOneGroupWithEqualCountsPerRank) {
  const int64_t n = 1001, batch = 4, world = 3;
  std::vector<int32_t> groups(n);
  for (int64_t i = 0; i < n; ++i) groups[i] = static_cast<int32_t>((i * 7919) % 5 == 0 ? 0 : (i % 3) + 1);
  std::multiset<int64_t> seen;
  for (int64_t rank = 0; rank < world; ++rank) {
    SamplerOptions o{n, batch, true, 9, rank, world, false};
    o.groups = groups;
    Sampler s = Sampler::Create(o).value();
    const std::vector<int64_t> order = s.EpochOrder(2);
    ASSERT_EQ(static_cast<int64_t>(order.size()), s.SamplesPerEpoch());
    EXPECT_EQ(s.BatchesPerEpoch(), (334 + batch - 1) / batch);  // 1001 padded to 1002, 334 a rank
    EXPECT_EQ(order, s.EpochOrder(2));
    // Without groups the same samples, in another order.
    SamplerOptions plain_options{n, batch, true, 9, rank, world, false};
    std::vector<int64_t> plain = Sampler::Create(plain_options).value().EpochOrder(2), mine = order;
    std::sort(plain.begin(), plain.end());
    std::sort(mine.begin(), mine.end());
    EXPECT_EQ(plain, mine);
    int64_t mixed = 0;
    for (size_t b = 0; b + batch <= order.size(); b += batch) {
      std::set<int32_t> in;
      for (size_t k = b; k < b + batch; ++k) in.insert(groups[order[k]]);
      mixed += in.size() > 1;
    }
    EXPECT_LE(mixed, 4) << "rank " << rank;  // only where the leftovers of 4 groups meet
    seen.insert(order.begin(), order.end());
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(n + 1));  // one sample twice: the padding
  for (int64_t i = 0; i < n; ++i) EXPECT_GE(seen.count(i), 1u);
}

// Batches of similar durations over 3 ranks: the same number of batches
// on every rank and in every epoch, every item once (the padding aside),
// no batch over max_duration once padded to its longest (but a lone item
// longer than it), little padding, the same order again for (seed, epoch).
TEST(SamplerTest, DurationBucketsGiveEqualBatchCountsWithinTheBudget) {
  const int64_t n = 997, batch = 64, world = 3;
  std::vector<float> durations(n);
  for (int64_t i = 0; i < n; ++i) durations[i] = 1.0f + static_cast<float>((i * 7919) % 1900) / 100.0f;  // 1-20 s
  durations[5] = 31.0f;  // longer than the budget alone
  std::multiset<int64_t> seen;
  int64_t batches_per_rank = -1;
  double real = 0, padded = 0;
  for (int64_t rank = 0; rank < world; ++rank) {
    SamplerOptions o{n, batch, true, 4, rank, world, false};
    o.durations = durations;
    o.max_duration = 30.0;
    o.num_buckets = 8;
    Sampler s = Sampler::Create(o).value();
    if (batches_per_rank < 0) batches_per_rank = s.BatchesPerEpoch();
    EXPECT_EQ(s.BatchesPerEpoch(), batches_per_rank);
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      const std::vector<int64_t> order = s.EpochOrder(epoch);
      ASSERT_EQ(static_cast<int64_t>(order.size()), batches_per_rank * batch);
      EXPECT_EQ(order, s.EpochOrder(epoch));
      for (int64_t b = 0; b < batches_per_rank; ++b) {
        float longest = 0, sum = 0;
        int64_t count = 0;
        for (int64_t k = b * batch; k < (b + 1) * batch; ++k) {
          if (order[k] < 0) continue;
          ++count;
          longest = std::max(longest, durations[order[k]]);
          sum += durations[order[k]];
          if (epoch == 1) seen.insert(order[k]);
        }
        ASSERT_GE(count, 1);
        EXPECT_TRUE(longest * count <= 30.0f || count == 1) << longest << " x " << count;
        real += sum;
        padded += longest * count;
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_GE(seen.count(i), 1u) << i;
  EXPECT_LE(seen.size(), static_cast<size_t>(n + (world - 1) * batch));  // the padding: world - 1 batches again at most
  EXPECT_LT(padded / real, 1.25);  // buckets of similar lengths: little padding
}

TEST(SamplerTest, RanksAreDisjointAndCoverTheDataset) {
  std::set<int64_t> all;
  size_t total = 0;
  for (int64_t r = 0; r < 4; ++r) {
    auto mine = Make(1000, 32, true, r, 4).EpochOrder(5);
    EXPECT_EQ(mine.size(), 250u);
    all.insert(mine.begin(), mine.end());
    total += mine.size();
  }
  EXPECT_EQ(all.size(), 1000u);
  EXPECT_EQ(total, 1000u);
}

TEST(SamplerTest, UnevenSplitPadsSoEveryRankHasTheSameCount) {
  std::set<int64_t> all;
  for (int64_t r = 0; r < 3; ++r) {
    Sampler s = Make(10, 2, true, r, 3);
    EXPECT_EQ(s.SamplesPerEpoch(), 4);
    auto mine = s.EpochOrder(0);
    EXPECT_EQ(mine.size(), 4u);
    all.insert(mine.begin(), mine.end());
  }
  EXPECT_EQ(all.size(), 10u);
}

TEST(SamplerTest, WithoutPaddingEverySampleOnceAndCountsDifferByAtMostOne) {
  std::multiset<int64_t> seen;
  for (int64_t r = 0; r < 3; ++r) {
    SamplerOptions o{10, 2, true, /*seed=*/1, r, 3};
    o.pad_ranks = false;
    Sampler s = Sampler::Create(o).value();
    EXPECT_EQ(s.SamplesPerEpoch(), r == 0 ? 4 : 3);
    auto mine = s.EpochOrder(2);
    EXPECT_EQ(static_cast<int64_t>(mine.size()), s.SamplesPerEpoch());
    EXPECT_EQ(s.BatchesPerEpoch(), 2);
    seen.insert(mine.begin(), mine.end());
  }
  EXPECT_EQ(seen.size(), 10u);  // no sample twice
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 10u);
}

TEST(SamplerTest, DropLastDropsTheIncompleteBatch) {
  EXPECT_EQ(Make(10, 4, false).BatchesPerEpoch(), 3);
  Sampler d = Make(10, 4, false, 0, 1, /*drop_last=*/true);
  EXPECT_EQ(d.BatchesPerEpoch(), 2);
  EXPECT_EQ(d.EpochOrder(0).size(), 8u);
}

TEST(SamplerTest, SubsetIsTheSameSampleEveryEpochAndFixedBySeed) {
  SamplerOptions o{1000, 10, true, 7, 0, 1, false, /*subset=*/100};
  Sampler s = Sampler::Create(o).value();
  std::vector<int64_t> items = s.Items();
  ASSERT_EQ(items.size(), 100u);
  EXPECT_TRUE(std::is_sorted(items.begin(), items.end()));
  EXPECT_EQ(std::set<int64_t>(items.begin(), items.end()).size(), 100u);
  EXPECT_GT(items.back() - items.front(), 500);  // spread over the dataset, not its head
  EXPECT_EQ(s.SamplesPerEpoch(), 100);
  EXPECT_EQ(s.BatchesPerEpoch(), 10);
  std::vector<int64_t> e0 = s.EpochOrder(0), e1 = s.EpochOrder(1);
  EXPECT_NE(e0, e1);  // shuffled differently...
  std::sort(e0.begin(), e0.end());
  std::sort(e1.begin(), e1.end());
  EXPECT_EQ(e0, items);  // ...but always the same items
  EXPECT_EQ(e1, items);
  o.seed = 8;
  EXPECT_NE(Sampler::Create(o).value().Items(), items);
  o.subset = 5000;  // larger than the dataset: all of it
  EXPECT_EQ(Sampler::Create(o).value().Items().size(), 1000u);
}

TEST(SamplerTest, BlockShuffleRotationsHoldEveryItemOnce) {
  SamplerOptions o{103, 8, true, 3, 0, 1, false, 0, /*shuffle_block=*/16};
  Sampler s = Sampler::Create(o).value();
  std::vector<int64_t> e0 = s.EpochOrder(0), e1 = s.EpochOrder(1);
  EXPECT_NE(e0, e1);
  for (int64_t start = 0; start <= 103; start += 16) {
    // From block boundary `start` of epoch 0 to the same boundary of epoch 1.
    std::vector<int64_t> rotated(e0.begin() + std::min<int64_t>(start, 103), e0.end());
    rotated.insert(rotated.end(), e1.begin(), e1.begin() + std::min<int64_t>(start, 103));
    std::sort(rotated.begin(), rotated.end());
    ASSERT_EQ(rotated.size(), 103u);
    for (int64_t i = 0; i < 103; ++i) ASSERT_EQ(rotated[i], i) << "start " << start;
  }
  // Within a block the order changes from epoch to epoch; the items do not.
  std::vector<int64_t> b0(e0.begin(), e0.begin() + 16), b1(e1.begin(), e1.begin() + 16);
  EXPECT_NE(b0, b1);
  std::sort(b0.begin(), b0.end());
  std::sort(b1.begin(), b1.end());
  EXPECT_EQ(b0, b1);
  EXPECT_GT(b0.back() - b0.front(), 50);  // blocks are dealt at random, not ranges
}

// The window shuffle: units of 1-9 items (Parquet pages) over 2 ranks; every
// item once an epoch; each unit's items within one window, so counting the
// units met since a window began never passes what a window holds; windows
// not in file order; the same order for (seed, epoch), another next epoch.
TEST(SamplerTest, WindowShuffleKeepsAUnitsItemsWithinOneWindow) {
  SamplerOptions o{1000, 16, true, 5, 0, 1, false};
  for (int64_t i = 0; i < 1000; i += 1 + i % 9) o.unit_starts.push_back(i);
  o.unit_starts.push_back(1000);
  o.shuffle_window = 60;
  std::vector<int64_t> unit_of(1000);
  for (size_t u = 0; u + 1 < o.unit_starts.size(); ++u) {
    for (int64_t i = o.unit_starts[u]; i < o.unit_starts[u + 1]; ++i) unit_of[static_cast<size_t>(i)] = static_cast<int64_t>(u);
  }
  Sampler whole = Sampler::Create(o).value();
  const std::vector<int64_t> seq = whole.EpochOrder(0);
  std::vector<int64_t> sorted = seq;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
  // Each unit's items lie in one stretch of at most window + 8 positions
  // (the window closes once it holds 60, so at most 60 + 8 items).
  std::map<int64_t, std::pair<size_t, size_t>> span;
  for (size_t p = 0; p < seq.size(); ++p) {
    auto [it, fresh] = span.try_emplace(unit_of[static_cast<size_t>(seq[p])], p, p);
    if (!fresh) it->second.second = p;
  }
  int64_t far = 0;
  for (const auto& [u, s] : span) {
    EXPECT_LT(s.second - s.first, 68u) << "unit " << u;
    far = std::max<int64_t>(far, static_cast<int64_t>(s.second - s.first));
  }
  EXPECT_GT(far, 8);  // rows of a unit are spread within the window, not kept together
  // Not the file's order: the first window's items come from all over.
  std::vector<int64_t> first(seq.begin(), seq.begin() + 60);
  EXPECT_GT(*std::max_element(first.begin(), first.end()) - *std::min_element(first.begin(), first.end()), 500);
  EXPECT_EQ(seq, Sampler::Create(o).value().EpochOrder(0));
  EXPECT_NE(seq, whole.EpochOrder(1));
  // Dealt to 2 ranks as any epoch is: the positions alternate.
  o.rank = 1;
  o.world_size = 2;
  const std::vector<int64_t> r1 = Sampler::Create(o).value().EpochOrder(0);
  ASSERT_EQ(r1.size(), 500u);
  for (size_t k = 0; k < r1.size(); ++k) ASSERT_EQ(r1[k], seq[2 * k + 1]);
  // Units that do not cover the items, or a window beside a block shuffle: errors.
  o.unit_starts.back() = 999;
  EXPECT_FALSE(Sampler::Create(o).ok());
  o.unit_starts.back() = 1000;
  o.shuffle_block = 10;
  EXPECT_FALSE(Sampler::Create(o).ok());
}

// Elastic resume: 4 ranks read 3 batches each, 3 ranks read 2 of what was
// left, then 2 ranks read the rest: each sample once over all of them
// (but the last step's padding), with groups, block shuffle, the window
// shuffle, no padding or drop_last alike; the order a function of (seed, epoch, steps) only.
TEST(SamplerTest, ElasticStepsLeaveEachUnreadSampleOnce) {
  const int64_t n = 503, batch = 4;
  std::vector<int32_t> groups(n);
  for (int64_t i = 0; i < n; ++i) groups[i] = static_cast<int32_t>(i % 3);
  std::vector<int64_t> units;  // pages of 1-7 items
  for (int64_t i = 0; i < n; i += 1 + i % 7) units.push_back(i);
  units.push_back(n);
  for (int variant = 0; variant < 5; ++variant) {
    auto options = [&](int64_t rank, int64_t world) {
      SamplerOptions o{n, batch, true, 5, rank, world, variant == 3};
      if (variant == 1) o.groups = groups;
      if (variant == 2) o.shuffle_block = 64;
      if (variant == 3) o.pad_ranks = false;
      if (variant == 4) o.unit_starts = units, o.shuffle_window = 40;
      return o;
    };
    std::multiset<int64_t> seen;
    auto take = [&](const std::vector<int64_t>& order, int64_t batches) {
      const size_t k = static_cast<size_t>(std::min<int64_t>(batches * batch, order.size()));
      seen.insert(order.begin(), order.begin() + static_cast<ptrdiff_t>(k));
    };
    for (int64_t r = 0; r < 4; ++r) take(Sampler::Create(options(r, 4)).value().EpochOrder(1), 3);
    std::set<int64_t> counts;
    for (int64_t r = 0; r < 3; ++r) {
      Sampler s = Sampler::Create(options(r, 3)).value();
      ASSERT_TRUE(s.SetElastic(1, {{4, 3}}).ok());
      take(s.EpochOrder(1), 2);
    }
    for (int64_t r = 0; r < 2; ++r) {
      Sampler s = Sampler::Create(options(r, 2)).value();
      ASSERT_TRUE(s.SetElastic(1, {{4, 3}, {3, 2}}).ok());
      const std::vector<int64_t> order = s.EpochOrder(1);
      EXPECT_EQ(order, s.EpochOrder(1));
      EXPECT_EQ(s.BatchesInEpoch(1), static_cast<int64_t>((order.size() + batch - 1) / batch));
      EXPECT_EQ(s.BatchesInEpoch(2), s.BatchesPerEpoch()) << "only the resumed epoch is elastic";
      counts.insert(s.BatchesInEpoch(1));
      take(order, 1 << 20);
    }
    if (variant != 3) EXPECT_EQ(counts.size(), 1u) << "variant " << variant;
    std::set<int64_t> distinct(seen.begin(), seen.end());
    if (variant == 3) {
      // drop_last: only the last step's incomplete batches are not read,
      // the rest once.
      EXPECT_EQ(seen.size(), distinct.size());
      EXPECT_GE(static_cast<int64_t>(distinct.size()), n - 2 * (batch - 1));
    } else {
      EXPECT_EQ(static_cast<int64_t>(distinct.size()), n) << "variant " << variant;
      EXPECT_LE(seen.size() - distinct.size(), 1u) << "variant " << variant;
    }
  }
}

TEST(SamplerTest, BadArgumentsAreErrors) {
  EXPECT_FALSE(Sampler::Create({10, 4, true, 0, 0, 1, false, 0, /*shuffle_block=*/-1}).ok());
  EXPECT_FALSE(Sampler::Create({10, 4, false, 0, 0, 1, false, /*subset=*/-1}).ok());
  EXPECT_FALSE(Sampler::Create({10, 4, false, 0, /*rank=*/2, /*world=*/2, false}).ok());
  EXPECT_FALSE(Sampler::Create({0, 4, false, 0, 0, 1, false}).ok());
  EXPECT_FALSE(Sampler::Create({3, 4, false, 0, 0, 1, /*drop_last=*/true}).ok());
}


// Shards of known sizes, counted as a whole index counts them (ids in shard
// order), or "indexed as read": packed ids, the counts given out only in the
// order Begin asked for (a shard asked out of order would hang: a test
// failure, not a silent pass, under ctest's timeout).
class FakeShards final : public ShardedItems {
 public:
  FakeShards(std::vector<int64_t> sizes, bool complete) : sizes_(std::move(sizes)), complete_(complete) {
    base_.push_back(0);
    for (int64_t n : sizes_) base_.push_back(base_.back() + n);
  }
  int64_t shard_count() const override { return static_cast<int64_t>(sizes_.size()); }
  bool complete() const override { return complete_; }
  void Begin(const std::vector<int64_t>& order) override {
    if (begun_.empty()) begun_ = order;
  }
  Result<int64_t> Count(int64_t s) override {
    asked_.push_back(s);
    return sizes_[static_cast<size_t>(s)];
  }
  Result<int64_t> Total() override { return base_.back(); }
  int64_t Id(int64_t s, int64_t m) const override {
    return complete_ ? base_[static_cast<size_t>(s)] + m : ShardMemberKey(s, m);
  }
  int64_t StableKey(int64_t id) const override { return id; }
  // A sample's (shard, member) from either form of id.
  std::pair<int64_t, int64_t> Of(int64_t id) const {
    if (IsShardMemberKey(id)) return {ShardOfKey(id), MemberOfKey(id)};
    const size_t s = static_cast<size_t>(std::upper_bound(base_.begin(), base_.end() - 1, id) - base_.begin()) - 1;
    return {static_cast<int64_t>(s), id - base_[s]};
  }
  std::vector<int64_t> begun_, asked_;

 private:
  std::vector<int64_t> sizes_, base_;
  bool complete_;
};

SamplerOptions Sharded(std::shared_ptr<FakeShards> shards, int64_t batch, int64_t rank, int64_t world,
                       bool drop_last = false, bool shuffle = true, int64_t buffer = 64) {
  SamplerOptions o{0, batch, shuffle, /*seed=*/7, rank, world, drop_last};
  o.shards = std::move(shards);
  o.shuffle_buffer = buffer;
  return o;
}

// Reads a buffered stream to its end, a shard at a time.
std::vector<int64_t> Drain(EpochStream* stream, int* pieces = nullptr) {
  std::vector<int64_t> out;
  int n = 0;
  for (bool final = false; !final; ++n) EXPECT_TRUE(stream->More(&out, &final).ok());
  out.resize(static_cast<size_t>(stream->total()));
  if (pieces) *pieces = n;
  return out;
}

TEST(BufferedEpochTest, EverySampleOnceAcrossRanksWithPaddingAsTheExactOrder) {
  const std::vector<int64_t> sizes = {13, 0, 40, 7, 25, 1, 30};  // 116 samples, one shard empty
  for (int64_t world : {1, 3, 4}) {
    std::multiset<std::pair<int64_t, int64_t>> seen;
    size_t per_rank = 0;
    for (int64_t r = 0; r < world; ++r) {
      auto shards = std::make_shared<FakeShards>(sizes, false);
      auto stream = BufferedEpochStream(Sharded(shards, 8, r, world), 2);
      int pieces = 0;
      const std::vector<int64_t> mine = Drain(stream.get(), &pieces);
      EXPECT_EQ(pieces, 7) << "one piece per shard: the order grows as shards are indexed";
      EXPECT_EQ(static_cast<int64_t>(mine.size()), (116 + world - 1) / world);
      if (r > 0) EXPECT_EQ(mine.size(), per_rank) << "every rank the same count";
      per_rank = mine.size();
      for (int64_t id : mine) seen.insert(shards->Of(id));
      EXPECT_EQ(shards->asked_, shards->begun_) << "shards read in the order asked to be indexed";
    }
    // Each of the 116 samples at least once; the padding (as DistributedSampler's) repeats
    // the stream's first few, so the total is a multiple of the world size.
    std::set<std::pair<int64_t, int64_t>> distinct(seen.begin(), seen.end());
    EXPECT_EQ(distinct.size(), 116u) << "world " << world;
    EXPECT_EQ(seen.size(), static_cast<size_t>((116 + world - 1) / world * world));
    for (const auto& [s, m] : distinct) EXPECT_LT(m, sizes[static_cast<size_t>(s)]);
  }
}

TEST(BufferedEpochTest, WithoutPaddingEverySampleExactlyOnceAcrossRanks) {
  const std::vector<int64_t> sizes = {13, 0, 40, 7, 25, 1, 30};  // 116 samples
  std::multiset<std::pair<int64_t, int64_t>> seen;
  for (int64_t r = 0; r < 3; ++r) {
    auto shards = std::make_shared<FakeShards>(sizes, false);
    SamplerOptions o = Sharded(shards, 8, r, 3);
    o.pad_ranks = false;
    auto stream = BufferedEpochStream(o, 2);
    const std::vector<int64_t> mine = Drain(stream.get());
    EXPECT_EQ(static_cast<int64_t>(mine.size()), r < 116 % 3 ? 39 : 38);
    for (int64_t id : mine) seen.insert(shards->Of(id));
  }
  EXPECT_EQ(seen.size(), 116u);
  const std::set<std::pair<int64_t, int64_t>> distinct(seen.begin(), seen.end());
  EXPECT_EQ(distinct.size(), 116u);
}

TEST(BufferedEpochTest, DeterministicFromSeedAndEpochWhetherOrNotTheIndexIsComplete) {
  const std::vector<int64_t> sizes = {20, 35, 5, 50, 12};
  auto lazy = std::make_shared<FakeShards>(sizes, false);
  auto whole = std::make_shared<FakeShards>(sizes, true);
  const std::vector<int64_t> a = Drain(BufferedEpochStream(Sharded(lazy, 4, 1, 2), 3).get());
  const std::vector<int64_t> b = Drain(BufferedEpochStream(Sharded(whole, 4, 1, 2), 3).get());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(lazy->Of(a[i]), whole->Of(b[i])) << "position " << i << ": the same sample, named either way";
  }
  auto again = std::make_shared<FakeShards>(sizes, false);
  EXPECT_EQ(Drain(BufferedEpochStream(Sharded(again, 4, 1, 2), 3).get()), a);
  EXPECT_NE(Drain(BufferedEpochStream(Sharded(again, 4, 1, 2), 4).get()), a) << "another epoch, another order";
  auto other = std::make_shared<FakeShards>(sizes, false);
  (void)BufferedEpochStream(Sharded(other, 4, 1, 2), 4);
  EXPECT_NE(other->begun_, again->begun_) << "the shards in another order each epoch";
}

TEST(BufferedEpochTest, ShuffleMixesAcrossShardsWithinTheBuffer) {
  // 10 shards of 100: with a buffer of 400 the stream's first 100 samples
  // come from several shards, and no sample is given more than the
  // buffer's size before the place its shard put it in.
  auto shards = std::make_shared<FakeShards>(std::vector<int64_t>(10, 100), false);
  const std::vector<int64_t> order = Drain(BufferedEpochStream(Sharded(shards, 10, 0, 1, false, true, 400), 0).get());
  std::set<int64_t> first_shards;
  for (size_t p = 0; p < 100; ++p) first_shards.insert(shards->Of(order[p]).first);
  EXPECT_GE(first_shards.size(), 2u);
  std::vector<int64_t> arrival(10);  // a shard's place in the shard order
  for (size_t k = 0; k < shards->begun_.size(); ++k) arrival[static_cast<size_t>(shards->begun_[k])] = static_cast<int64_t>(k);
  for (size_t p = 0; p < order.size(); ++p) {
    const auto [s, m] = shards->Of(order[p]);
    const int64_t arrived = arrival[static_cast<size_t>(s)] * 100 + m;  // its place in the unshuffled stream
    EXPECT_GE(static_cast<int64_t>(p) + 400, arrived) << "a sample given before the buffer could hold it";
  }
}

TEST(BufferedEpochTest, UnshuffledIsTheExactOrderAndDropLastDropsTheSameTail) {
  const std::vector<int64_t> sizes = {9, 14, 3, 21};  // 47
  for (bool drop_last : {false, true}) {
    for (int64_t r = 0; r < 3; ++r) {
      auto whole = std::make_shared<FakeShards>(sizes, true);
      SamplerOptions o = Sharded(whole, 5, r, 3, drop_last, /*shuffle=*/false);
      o.num_items = 47;
      SamplerOptions exact = o;
      exact.shards = nullptr;
      EXPECT_EQ(Drain(BufferedEpochStream(o, 0).get()), Sampler::Create(exact).value().EpochOrder(0));
      // Shuffled, the same counts as the exact order's.
      SamplerOptions shuffled = o;
      shuffled.shuffle = true;
      EXPECT_EQ(static_cast<int64_t>(Drain(BufferedEpochStream(shuffled, 0).get()).size()),
                Sampler::Create(exact).value().SamplesPerEpoch());
    }
  }
}

TEST(BufferedEpochTest, TheFirstEpochOpenedBeforeTheIndexIsWholeIsBufferedTheRestExact) {
  auto lazy = std::make_shared<FakeShards>(std::vector<int64_t>{10, 10, 10}, false);
  Sampler s = Sampler::Create(Sharded(lazy, 4, 0, 1)).value();
  EXPECT_FALSE(s.counts_known());
  EXPECT_EQ(s.buffered_epoch(), -1);
  (void)s.OpenEpoch(2);
  EXPECT_EQ(s.buffered_epoch(), 2);
  (void)s.OpenEpoch(3);
  EXPECT_EQ(s.buffered_epoch(), 2);
  EXPECT_EQ(s.SamplesPerEpoch(), 30);
  EXPECT_EQ(s.BatchesPerEpoch(), 8);
  // A resumed loader sets it: none, for good, even while the index is incomplete.
  Sampler t = Sampler::Create(Sharded(std::make_shared<FakeShards>(std::vector<int64_t>{10, 10, 10}, false), 4, 0, 1)).value();
  ASSERT_TRUE(t.SetBufferedEpoch(-1).ok());
  (void)t.OpenEpoch(0);
  EXPECT_EQ(t.buffered_epoch(), -1);
  // A subset or shuffle blocks need every item: refused while the index is incomplete.
  SamplerOptions o = Sharded(lazy, 4, 0, 1);
  o.subset = 5;
  EXPECT_FALSE(Sampler::Create(o).ok());
}

TEST(BufferedEpochTest, ShardShuffleBuffersEveryEpochOfAWholeIndexEachInItsOwnOrder) {
  auto whole = std::make_shared<FakeShards>(std::vector<int64_t>{10, 10, 10, 10}, true);
  SamplerOptions o = Sharded(whole, 4, 0, 1, false, true, 8);
  o.num_items = 40;
  // Without it, a whole index gives exact epochs.
  EXPECT_FALSE(Sampler::Create(o).value().Buffered(0));
  o.shard_shuffle = true;
  Sampler s = Sampler::Create(o).value();
  std::vector<std::vector<int64_t>> epochs;
  for (int64_t e = 0; e < 3; ++e) {
    EXPECT_TRUE(s.Buffered(e));
    std::vector<int64_t> order = Drain(s.OpenEpoch(e).get());
    EXPECT_EQ(order, s.EpochOrder(e)) << "the stream and the order agree (resume reads the order)";
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(40);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(sorted, all) << "every item once, epoch " << e;
    epochs.push_back(order);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_EQ(Drain(Sampler::Create(o).value().OpenEpoch(1).get()), epochs[1]) << "the same seed, the same order";
  // It needs shards, and takes no subset or shuffle_block.
  SamplerOptions flat{40, 4, true, 7};
  flat.shard_shuffle = true;
  EXPECT_FALSE(Sampler::Create(flat).ok());
  o.subset = 10;
  EXPECT_FALSE(Sampler::Create(o).ok());
}

}  // namespace
}  // namespace nostall
