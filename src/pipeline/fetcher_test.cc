// The fetcher with a cache: a fetch of an item whose read from storage is
// still under way (the next epoch's, run on into) waits for that read and
// takes its bytes, rather than reading the item again: a local source's
// fetch thread waits, a remote source's fetch joins the read.
#include "pipeline/fetcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace nostall {
namespace {

// Items whose reads block until the test opens the gate, counted.
class GatedSource final : public Source {
 public:
  int64_t size() const override { return 4; }
  std::string key(int64_t i) const override { return "item" + std::to_string(i); }
  int64_t label(int64_t) const override { return 0; }
  int64_t byte_size(int64_t) const override { return 3; }
  const std::vector<std::string>& classes() const override { return classes_; }
  uint64_t fingerprint() const override { return 7; }
  const char* kind() const override { return "gated"; }
  bool ReadsAsync() const override { return async; }
  void ReadAsync(int64_t i, std::vector<uint8_t> buffer, ReadDone done) const override {
    threads.emplace_back([this, i, buffer = std::move(buffer), done = std::move(done)]() mutable {
      Status st = Read(i, &buffer);
      done(std::move(st), std::move(buffer));
    });
  }
  Status Read(int64_t i, std::vector<uint8_t>* out) const override {
    reads.fetch_add(1);
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return open; });
    *out = {static_cast<uint8_t>(i), 1, 2};
    return fail ? IoError("disk gone") : Status::OK();
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
  mutable std::atomic<int> reads{0};
  mutable std::mutex mu;
  mutable std::condition_variable cv;
  bool open = false;
  bool fail = false;
  bool async = false;
  mutable std::vector<std::thread> threads;

 private:
  std::vector<std::string> classes_;
};

FetchedItem Item(int64_t epoch, int64_t item) {
  FetchedItem fi{};
  fi.epoch = epoch;
  fi.item = item;
  return fi;
}

void FetchTwiceWhileTheFirstReadWaits(bool fail, bool async) {
  GatedSource source;
  source.fail = fail;
  source.async = async;
  CacheConfig config;
  config.budget_bytes = 1 << 20;
  config.num_items = source.size();
  config.dataset_fingerprint = source.fingerprint();
  std::unique_ptr<Cache> cache = OpenCache("lru", config).value();
  Fetcher fetcher(source, cache.get());
  std::mutex mu;
  std::condition_variable got_cv;
  std::vector<FetchedItem> got;
  auto done = [&](FetchedItem fi) {
    std::lock_guard<std::mutex> lock(mu);
    got.push_back(std::move(fi));
    got_cv.notify_all();
  };
  std::thread first([&] { fetcher.Fetch(Item(0, 2), done); });
  while (source.reads.load() == 0) std::this_thread::yield();
  // The next epoch's fetch of the same item while the read is under way.
  std::thread second([&] { fetcher.Fetch(Item(1, 2), done); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(got.size(), 0u);  // neither is done before the read is
  }
  source.Open();
  first.join();
  second.join();
  {
    std::unique_lock<std::mutex> lock(mu);
    got_cv.wait(lock, [&] { return got.size() == 2; });
  }
  for (auto& t : source.threads) t.join();
  source.threads.clear();
  // One read from storage serves both; a failed one is tried again by a
  // local fetch thread (it finds nothing in the cache) and is the joined
  // fetch's error too for a remote one.
  EXPECT_EQ(source.reads.load(), fail && !async ? 2 : 1);
  for (const FetchedItem& fi : got) {
    EXPECT_EQ(fi.item, 2);
    if (fail) {
      EXPECT_FALSE(fi.status.ok());
      EXPECT_NE(fi.status.Describe().find("item2"), std::string::npos) << fi.status.Describe();
    } else {
      ASSERT_TRUE(fi.status.ok());
      EXPECT_EQ(fi.bytes, (std::vector<uint8_t>{2, 1, 2}));
    }
  }
  // The first epoch read it from storage, the second took its bytes.
  LoaderStats st;
  fetcher.FillCacheStats("x", 1, &st);
  ASSERT_EQ(st.cache_epochs.size(), 2u);
  EXPECT_EQ(st.cache_epochs[0].misses, 1);
  EXPECT_EQ(st.cache_epochs[1].hits, fail ? 0 : 1);
  EXPECT_EQ(st.cache_epochs[1].misses, fail ? 1 : 0);
}

TEST(FetcherTest, ALocalFetchOfAnItemBeingReadWaitsAndFindsItCached) {
  FetchTwiceWhileTheFirstReadWaits(/*fail=*/false, /*async=*/false);
}
TEST(FetcherTest, ALocalFetchOfAnItemWhoseReadFailedReadsItAgain) {
  FetchTwiceWhileTheFirstReadWaits(/*fail=*/true, /*async=*/false);
}
TEST(FetcherTest, ARemoteFetchOfAnItemBeingReadTakesThatReadsBytes) {
  FetchTwiceWhileTheFirstReadWaits(/*fail=*/false, /*async=*/true);
}
TEST(FetcherTest, ARemoteFetchOfAnItemBeingReadTakesThatReadsError) {
  FetchTwiceWhileTheFirstReadWaits(/*fail=*/true, /*async=*/true);
}

}  // namespace
}  // namespace nostall
