#include "nostall/stats.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace nostall {
namespace {

LoaderStats Example() {
  LoaderStats s;
  s.fetch = {100, 5000000, 20000000, 900000000, 10, 5, 4};
  s.prep = {100, 100 * 602112, 2000000000, 2100000000, 300000000, 0, 2};
  s.iterations = 10;
  s.wait_ns = 3000000000;
  s.between_ns = 1000000000;
  s.errors = 2;
  s.skipped = 2;
  return s;
}

TEST(StatsTest, StallFractionIsWaitOverWaitPlusStep) {
  EXPECT_DOUBLE_EQ(Example().StallFraction(), 0.75);
  EXPECT_DOUBLE_EQ(LoaderStats().StallFraction(), 0.0);
}

TEST(StatsTest, JsonCarriesEveryStageInSeconds) {
  auto j = nlohmann::json::parse(Example().ToJson());
  EXPECT_EQ(j["stages"]["prep"]["items"], 100);
  EXPECT_DOUBLE_EQ(j["stages"]["prep"]["busy_cpu_s"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["stages"]["fetch"]["work_s"].get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(j["consumer"]["stall_fraction"].get<double>(), 0.75);
  EXPECT_EQ(j["skipped"], 2);
}

TEST(StatsTest, PerEpochAndRecentWaits) {
  LoaderStats s = Example();
  s.consumer_epochs.push_back({0, 4, 256, 1000000000, 1000000000});
  s.consumer_epochs.push_back({1, 4, 256, 0, 500000000});
  for (int i = 1; i <= 100; ++i) s.recent_wait_ns.push_back(i * 1000000);  // 1..100 ms
  EXPECT_NEAR(s.RecentWaitQuantile(0.5), 0.051, 1e-9);
  EXPECT_NEAR(s.RecentWaitQuantile(0.99), 0.100, 1e-9);
  auto j = nlohmann::json::parse(s.ToJson());
  const auto& e = j["consumer"]["epochs"];
  ASSERT_EQ(e.size(), 2u);
  EXPECT_DOUBLE_EQ(e[0]["stall_fraction"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(e[0]["images_per_s"].get<double>(), 128.0);
  EXPECT_DOUBLE_EQ(e[1]["images_per_s"].get<double>(), 512.0);
  EXPECT_DOUBLE_EQ(j["consumer"]["wait_p99_s"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(LoaderStats().RecentWaitQuantile(0.5), 0.0);
}

TEST(StatsTest, TableNamesStagesRatesAndTheStall) {
  std::string t = Example().ToTable();
  size_t row = t.find("decode+augment");
  ASSERT_NE(row, std::string::npos);
  std::string prep = t.substr(row, t.find('\n', row) - row);
  EXPECT_EQ(prep.substr(prep.size() - 3), " 50") << prep;  // 100 items / 2 CPU-seconds
  EXPECT_NE(prep.find("2.10s"), std::string::npos) << prep;  // working (wall)
  EXPECT_NE(t.find("75.0% stalled"), std::string::npos);
  EXPECT_NE(t.find("bad items: 2 (2 skipped)"), std::string::npos);
}

}  // namespace
}  // namespace nostall
