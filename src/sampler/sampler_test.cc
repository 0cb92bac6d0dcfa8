#include "nostall/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
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

TEST(SamplerTest, BadArgumentsAreErrors) {
  EXPECT_FALSE(Sampler::Create({10, 4, true, 0, 0, 1, false, 0, /*shuffle_block=*/-1}).ok());
  EXPECT_FALSE(Sampler::Create({10, 4, false, 0, 0, 1, false, /*subset=*/-1}).ok());
  EXPECT_FALSE(Sampler::Create({10, 4, false, 0, /*rank=*/2, /*world=*/2, false}).ok());
  EXPECT_FALSE(Sampler::Create({0, 4, false, 0, 0, 1, false}).ok());
  EXPECT_FALSE(Sampler::Create({3, 4, false, 0, 0, 1, /*drop_last=*/true}).ok());
}

}  // namespace
}  // namespace nostall
