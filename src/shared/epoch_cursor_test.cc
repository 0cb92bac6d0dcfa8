// The epoch cursor over a real loader: the rules trainers rely on.
#include "nostall/epoch_cursor.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "testing/test_images.h"

namespace nostall {
namespace {

class EpochCursorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::MakeImageFolder(dir_.path(), 2, 5, 40, 30);  // 10 items, batches of 4: 3
    LoaderSpec s;
    s.source = dir_.path();
    s.source_options.use_index_cache = false;
    s.batch_size = 4;
    s.shuffle = true;
    s.seed = 7;
    s.num_threads = 1;
    s.reads_in_flight = 1;
    Transform resize{TransformKind::kResize};
    resize.height = resize.width = 8;
    s.prep.transforms = {resize};
    spec_ = s;
    loader_ = Loader::Create(s).value();
  }
  // Takes `n` batches through `c` (fewer at the end of the epoch); their indices.
  std::vector<int64_t> Take(EpochCursor* c, int n, Loader* loader = nullptr) {
    loader = loader ? loader : loader_.get();
    std::vector<int64_t> seen;
    for (int i = 0; i < n; ++i) {
      NextStatus ns;
      std::shared_ptr<Batch> b;
      EXPECT_TRUE(loader->Next(10000, &ns, &b).ok());
      if (ns == NextStatus::kEndOfEpoch) {
        c->Ended();
        break;
      }
      c->Delivered(b->index());
      seen.insert(seen.end(), b->indices(), b->indices() + b->size());
    }
    return seen;
  }
  testing::TempDir dir_;
  LoaderSpec spec_;
  std::unique_ptr<Loader> loader_;
};

TEST_F(EpochCursorTest, AFinishedEpochIsFollowedByTheNextWithoutAskingForTheEnd) {
  EpochCursor c(loader_.get(), "");
  ASSERT_TRUE(c.Begin().ok());
  EXPECT_EQ(c.epoch(), 0);
  Take(&c, 3);  // the last batch: over, though the end was not asked for
  ASSERT_TRUE(c.Begin().ok());
  EXPECT_EQ(c.epoch(), 1);
}

TEST_F(EpochCursorTest, AnAbandonedEpochIsFollowedByTheNextAsADataLoaderDrawsANewOrder) {
  EpochCursor c(loader_.get(), "");
  ASSERT_TRUE(c.Begin().ok());
  const std::vector<int64_t> first = Take(&c, 1);
  ASSERT_TRUE(c.Begin().ok());  // abandoned after one batch (a peek, a break)
  EXPECT_EQ(c.epoch(), 1);
  const std::vector<int64_t> second = Take(&c, 1);
  EXPECT_NE(second, first);  // another order, not the same batch again
  ASSERT_TRUE(c.Begin().ok());
  EXPECT_EQ(c.epoch(), 2);
  EXPECT_FALSE(c.SetEpoch(-1).ok());
}

TEST_F(EpochCursorTest, APassThatHandedOutNothingBeginsAgainWhereItBegan) {
  EpochCursor c(loader_.get(), "");
  ASSERT_TRUE(c.Begin().ok());  // iter() never advanced (Lightning checks a loader is iterable)
  ASSERT_TRUE(c.Begin().ok());
  EXPECT_EQ(c.epoch(), 0);
  Take(&c, 1);
  const std::string state = c.StateJson().value();
  std::unique_ptr<Loader> other = Loader::Create(spec_).value();
  EpochCursor d(other.get(), "");
  ASSERT_TRUE(d.LoadStateJson(state).ok());
  ASSERT_TRUE(d.Begin().ok());
  ASSERT_TRUE(d.Begin().ok());  // still at the loaded batch
  EXPECT_EQ(d.epoch(), 0);
  EXPECT_EQ(d.position(), 1);
}

TEST_F(EpochCursorTest, SetEpochNamesTheEpochTheNextPassRunsFromItsStart) {
  EpochCursor c(loader_.get(), "");
  ASSERT_TRUE(c.Begin().ok());
  const std::vector<int64_t> first = Take(&c, 1);
  ASSERT_TRUE(c.SetEpoch(0).ok());  // the running epoch, named while it runs: it runs on
  EXPECT_EQ(c.position(), 1);
  EXPECT_EQ(nlohmann::json::parse(c.StateJson().value())["batch"], 1);
  ASSERT_TRUE(c.Begin().ok());  // abandoned, but named: epoch 0 again, from its start
  EXPECT_EQ(c.epoch(), 0);
  EXPECT_EQ(Take(&c, 1), first);
  ASSERT_TRUE(c.SetEpoch(5).ok());
  ASSERT_TRUE(c.Begin().ok());
  EXPECT_EQ(c.epoch(), 5);
  ASSERT_TRUE(c.SetEpoch(5).ok());  // named as it starts, as Lightning does
  Take(&c, 3);                      // and run to its end
  ASSERT_TRUE(c.Begin().ok());
  EXPECT_EQ(c.epoch(), 6);
  Take(&c, 3);
  ASSERT_TRUE(c.SetEpoch(6).ok());  // named after its end: run again
  ASSERT_TRUE(c.Begin().ok());
  EXPECT_EQ(c.epoch(), 6);
}

TEST_F(EpochCursorTest, AStateTakenMidEpochResumesAtTheNextBatchInAnotherLoader) {
  EpochCursor c(loader_.get(), "");
  ASSERT_TRUE(c.SetEpoch(2).ok());
  ASSERT_TRUE(c.Begin().ok());
  Take(&c, 1);
  const std::string state = c.StateJson().value();
  EXPECT_EQ(nlohmann::json::parse(state)["batch"], 1);
  const std::vector<int64_t> rest = Take(&c, 2);

  std::unique_ptr<Loader> other = Loader::Create(spec_).value();
  EpochCursor d(other.get(), "");
  ASSERT_TRUE(d.LoadStateJson(state).ok());
  EXPECT_EQ(d.StateJson().value(), state);  // loaded, not yet begun: the same place
  ASSERT_TRUE(d.Begin().ok());
  EXPECT_EQ(d.epoch(), 2);
  EXPECT_EQ(d.position(), 1);
  EXPECT_EQ(Take(&d, 2, other.get()), rest);
  // After the epoch's last batch the state names the next epoch's start.
  EXPECT_EQ(nlohmann::json::parse(d.StateJson().value())["epoch"], 3);
  EXPECT_EQ(nlohmann::json::parse(d.StateJson().value())["batch"], 0);
}

TEST_F(EpochCursorTest, AStateOfAnotherSeedIsRefusedNamingIt) {
  EpochCursor c(loader_.get(), "");
  nlohmann::json state = nlohmann::json::parse(c.StateJson().value());
  state["seed"] = 8;
  Status st = c.LoadStateJson(state.dump());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("seed"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace nostall
