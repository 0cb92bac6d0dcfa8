// The parquet driver's working parts (parquet.cc): the cache of decoded
// pages, row groups as the buffered epoch's shards, and the threads that
// decode pages fetched from S3.
#ifndef NOSTALL_SOURCE_COLUMNAR_PARQUET_UNITS_H_
#define NOSTALL_SOURCE_COLUMNAR_PARQUET_UNITS_H_

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <thread>
#include <tuple>
#include <vector>

#include "common/mutex.h"
#include "nostall/sampler.h"
#include "source/columnar/parquet_file.h"

namespace nostall::pq {

// Decoded units (pages or whole chunks) and raw dictionary pages, by
// (file, row group, leaf, page), least recently used first out, within a
// byte budget.
class UnitCache {
 public:
  explicit UnitCache(uint64_t budget) : budget_(budget) {}
  uint64_t budget() const { return budget_; }
  struct Key {
    int32_t file, rg, leaf, page;
    bool operator<(const Key& o) const {
      return std::tie(file, rg, leaf, page) < std::tie(o.file, o.rg, o.leaf, o.page);
    }
  };
  std::shared_ptr<const Values> Get(const Key& k) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    auto it = map_.find(k);
    if (it == map_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second.where);
    return it->second.values;
  }
  void Put(const Key& k, std::shared_ptr<const Values> v) EXCLUDES(mu_) {
    const uint64_t size = v->bytes();
    if (size > budget_) return;
    MutexLock lock(&mu_);
    if (map_.count(k) != 0) return;
    lru_.push_front(k);
    map_[k] = {std::move(v), lru_.begin(), size};
    used_ += size;
    while (used_ > budget_ && !lru_.empty()) {
      auto it = map_.find(lru_.back());
      used_ -= it->second.size;
      map_.erase(it);
      lru_.pop_back();
    }
  }

 private:
  struct Entry {
    std::shared_ptr<const Values> values;
    std::list<Key>::iterator where;
    uint64_t size;
  };
  const uint64_t budget_;
  Mutex mu_;
  std::list<Key> lru_ GUARDED_BY(mu_);
  std::map<Key, Entry> map_ GUARDED_BY(mu_);
  uint64_t used_ GUARDED_BY(mu_) = 0;
};

// Row groups as the buffered epoch's shards (sampler.h): every epoch with
// shard_shuffle, row groups in a random order, rows mixed in the buffer.
class RowGroupShards final : public ShardedItems {
 public:
  explicit RowGroupShards(std::vector<int64_t> starts) : starts_(std::move(starts)) {}
  int64_t shard_count() const override { return static_cast<int64_t>(starts_.size()) - 1; }
  bool complete() const override { return true; }
  void Begin(const std::vector<int64_t>&) override {}
  Result<int64_t> Count(int64_t s) override { return starts_[s + 1] - starts_[s]; }
  Result<int64_t> Total() override { return starts_.back(); }
  int64_t Id(int64_t s, int64_t member) const override { return starts_[s] + member; }
  int64_t StableKey(int64_t id) const override {
    if (IsShardMemberKey(id)) return id;
    auto it = std::upper_bound(starts_.begin(), starts_.end(), id);
    const int64_t s = static_cast<int64_t>(it - starts_.begin()) - 1;
    return ShardMemberKey(s, id - starts_[s]);
  }

 private:
  const std::vector<int64_t> starts_;  // each shard's first item; the total last
};

// A small pool for the S3 reads' page decoding (off the I/O thread).
class DecodePool {
 public:
  explicit DecodePool(int threads) {
    for (int t = 0; t < threads; ++t) threads_.emplace_back([this] { Run(); });
  }
  ~DecodePool() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  // Notified under the lock: a poster may be the last to touch the pool
  // before it goes (its job done on a pool thread and the owner destroying
  // it), and the condition variable must outlive the notify.
  void Post(std::function<void()> job) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    jobs_.push_back(std::move(job));
    cv_.notify_one();
  }

 private:
  void Run() EXCLUDES(mu_) {
    for (;;) {
      std::function<void()> job;
      {
        MutexLock lock(&mu_);
        cv_.wait(lock.native(), [&]() NO_THREAD_SAFETY_ANALYSIS { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, and nothing left
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace nostall::pq

#endif  // NOSTALL_SOURCE_COLUMNAR_PARQUET_UNITS_H_
