#include "nostall/resume.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "testing/test_images.h"

namespace nostall {
namespace {

class ResumeTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::MakeImageFolder(dir_.path(), 2, 6, 24, 24); }
  std::unique_ptr<Loader> Make(uint64_t seed, int64_t batch_size = 4) {
    LoaderSpec s;
    s.source = dir_.path();
    s.source_options.use_index_cache = false;
    s.batch_size = batch_size;
    s.shuffle = true;
    s.seed = seed;
    s.num_threads = 1;
    Transform resize{TransformKind::kResize};
    resize.height = resize.width = 8;
    s.prep.transforms = {resize};
    auto loader = Loader::Create(s);
    EXPECT_TRUE(loader.ok()) << loader.status().ToString();
    return std::move(loader).value();
  }
  testing::TempDir dir_;
};

TEST_F(ResumeTest, AStateComesBackAsTheSamePoint) {
  auto loader = Make(7);
  const std::string state = ResumeStateJson(*loader, 3, 2, "").value();
  auto point = CheckResumeState(*loader, /*is_consumer=*/false, state);
  ASSERT_TRUE(point.ok()) << point.status().ToString();
  EXPECT_EQ(point->epoch, 3);
  EXPECT_EQ(point->batch, 2);
  EXPECT_FALSE(point->stream_position.has_value());
  // A new loader of the same spec (as after a restart) takes it.
  EXPECT_TRUE(CheckResumeState(*Make(7), false, state).ok());
}

TEST_F(ResumeTest, WhatWouldGiveOtherBatchesIsRefusedByName) {
  const std::string state = ResumeStateJson(*Make(7), 1, 1, "").value();
  auto other_seed = CheckResumeState(*Make(8), false, state);
  EXPECT_EQ(other_seed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(other_seed.status().message().find("seed=7"), std::string::npos)
      << other_seed.status().message();
  auto other_batch = CheckResumeState(*Make(7, 3), false, state);
  EXPECT_NE(other_batch.status().message().find("batch_size"), std::string::npos);
  // A consumer's state is not a local loader's, and the other way round.
  auto j = nlohmann::json::parse(state);
  j["shared"] = "train";
  auto consumer_state = CheckResumeState(*Make(7), false, j.dump());
  EXPECT_NE(consumer_state.status().message().find("Loader.attach"), std::string::npos);
  auto local_into_consumer = CheckResumeState(*Make(7), /*is_consumer=*/true, state);
  EXPECT_NE(local_into_consumer.status().message().find("local loader"), std::string::npos);
}

TEST_F(ResumeTest, DamagedStatesAreErrorsNotCrashes) {
  auto loader = Make(7);
  auto j = nlohmann::json::parse(ResumeStateJson(*loader, 0, 1, "").value());
  for (const std::string& bad :
       {std::string("{not json"), std::string("[1, 2]"), std::string("{}"),
        [&] { auto k = j; k["version"] = 99; return k.dump(); }(),
        [&] { auto k = j; k["batch"] = 99; return k.dump(); }(),
        [&] { auto k = j; k["batch"] = "one"; return k.dump(); }(),
        [&] { auto k = j; k["epoch"] = -1; return k.dump(); }(),
        [&] { auto k = j; k["dataset_fingerprint"] = "0"; return k.dump(); }(),
        [&] { auto k = j; k.erase("seed"); return k.dump(); }()}) {
    SCOPED_TRACE(bad);
    auto point = CheckResumeState(*loader, false, bad);
    ASSERT_FALSE(point.ok());
    EXPECT_EQ(point.status().code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace nostall
