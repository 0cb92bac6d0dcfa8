// An in-process LRU cache of encoded bytes: the page cache's policy, for
// benchmarks that compare it with MinIO at the same memory (spec field
// a cache tier of driver "lru"). Not shared between processes.
#include <list>
#include <unordered_map>

#include "cache/driver.h"
#include "common/mutex.h"

namespace nostall {
namespace {

class LruCache final : public Cache {
 public:
  explicit LruCache(uint64_t budget) : budget_(budget) {}

  Result<bool> Lookup(int64_t item, std::vector<uint8_t>* out) override {
    MutexLock lock(&mu_);
    auto it = where_.find(item);
    if (it == where_.end()) {
      ++misses_;
      return false;
    }
    order_.splice(order_.begin(), order_, it->second);  // most recently used
    *out = it->second->second;
    ++hits_;
    return true;
  }

  bool Insert(int64_t item, const uint8_t* data, size_t size) override {
    MutexLock lock(&mu_);
    if (size > budget_ || where_.count(item)) return false;
    while (used_ + size > budget_) {  // evict least recently used
      used_ -= order_.back().second.size();
      where_.erase(order_.back().first);
      order_.pop_back();
    }
    order_.emplace_front(item, std::vector<uint8_t>(data, data + size));
    where_[item] = order_.begin();
    used_ += size;
    return true;
  }

  CacheStats Stats() const override {
    MutexLock lock(&mu_);
    return {budget_, used_, static_cast<int64_t>(where_.size()), hits_, misses_, 0, "lru"};
  }

 private:
  const uint64_t budget_;
  mutable Mutex mu_;
  std::list<std::pair<int64_t, std::vector<uint8_t>>> order_ GUARDED_BY(mu_);
  std::unordered_map<int64_t, std::list<std::pair<int64_t, std::vector<uint8_t>>>::iterator> where_ GUARDED_BY(mu_);
  uint64_t used_ GUARDED_BY(mu_) = 0;
  int64_t hits_ GUARDED_BY(mu_) = 0;
  int64_t misses_ GUARDED_BY(mu_) = 0;
};

}  // namespace

std::unique_ptr<Cache> MakeLruCache(uint64_t budget_bytes) {
  return std::make_unique<LruCache>(budget_bytes);
}

CacheDriver LruDriver() {
  return {"lru", [](const CacheConfig& c) -> Result<std::unique_ptr<Cache>> {
            return MakeLruCache(c.budget_bytes);
          },
          [](const nlohmann::json& given) { return NoCacheOptions("lru", given); }};
}

}  // namespace nostall
