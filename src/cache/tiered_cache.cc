// Caches stacked in tiers, front first (a node-local shared-memory cache in
// front of a cluster tier): see StackCaches in nostall/cache.h.
#include <atomic>

#include "nostall/cache.h"

namespace nostall {
namespace {

class TieredCache final : public Cache {
 public:
  explicit TieredCache(std::vector<std::unique_ptr<Cache>> tiers) : tiers_(std::move(tiers)) {}

  Result<bool> Lookup(int64_t item, std::vector<uint8_t>* out) override {
    bool failed = false;
    for (size_t t = 0; t < tiers_.size(); ++t) {
      Result<bool> hit = tiers_[t]->Lookup(item, out);
      if (!hit.ok()) {
        failed = true;  // this tier cannot answer: ask the next
        continue;
      }
      if (!hit.value()) continue;
      for (size_t front = 0; front < t; ++front) tiers_[front]->Insert(item, out->data(), out->size());
      hits_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    (failed ? errors_ : misses_).fetch_add(1, std::memory_order_relaxed);
    return false;
  }

  bool Insert(int64_t item, const uint8_t* data, size_t size) override {
    bool any = false;
    for (auto& tier : tiers_) any = tier->Insert(item, data, size) || any;
    return any;
  }

  CacheStats Stats() const override {
    CacheStats s;
    for (const auto& tier : tiers_) {
      CacheStats t = tier->Stats();
      s.budget_bytes += t.budget_bytes;
      s.used_bytes += t.used_bytes;
      s.items += t.items;
      s.tier += (s.tier.empty() ? "" : "+") + t.tier;
    }
    s.hits = hits_.load(std::memory_order_relaxed);
    s.misses = misses_.load(std::memory_order_relaxed);
    s.errors = errors_.load(std::memory_order_relaxed);
    return s;
  }

  std::vector<CacheStats> TierStats() const override {
    std::vector<CacheStats> out;
    for (const auto& tier : tiers_) {
      for (CacheStats& t : tier->TierStats()) out.push_back(std::move(t));
    }
    return out;
  }

 private:
  const std::vector<std::unique_ptr<Cache>> tiers_;
  std::atomic<int64_t> hits_{0}, misses_{0}, errors_{0};
};

}  // namespace

std::unique_ptr<Cache> StackCaches(std::vector<std::unique_ptr<Cache>> tiers) {
  return std::make_unique<TieredCache>(std::move(tiers));
}

}  // namespace nostall
