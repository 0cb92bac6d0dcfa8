// Caches stacked in tiers, front first (a node-local shared-memory cache in
// front of a cluster tier): see StackCaches in nostall/cache.h. Each tier's
// lookups are timed here, so every driver reports its latency the same way.
#include <atomic>
#include <chrono>

#include "nostall/cache.h"

namespace nostall {
namespace {

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class TieredCache final : public Cache {
 public:
  explicit TieredCache(std::vector<std::unique_ptr<Cache>> tiers)
      : tiers_(std::move(tiers)), timing_(tiers_.size()) {}

  Result<bool> Lookup(int64_t item, std::vector<uint8_t>* out) override {
    bool failed = false;
    for (size_t t = 0; t < tiers_.size(); ++t) {
      const int64_t t0 = SteadyNs();
      Result<bool> hit = tiers_[t]->Lookup(item, out);
      Timing& timing = timing_[t];
      timing.lookups.fetch_add(1, std::memory_order_relaxed);
      timing.ns.fetch_add(SteadyNs() - t0, std::memory_order_relaxed);
      if (!hit.ok()) {
        failed = true;  // this tier cannot answer: ask the next
        continue;
      }
      if (!hit.value()) continue;
      timing.hit_bytes.fetch_add(static_cast<int64_t>(out->size()), std::memory_order_relaxed);
      for (size_t front = 0; front < t; ++front) tiers_[front]->Insert(item, out->data(), out->size());
      hits_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    (failed ? errors_ : misses_).fetch_add(1, std::memory_order_relaxed);
    return false;
  }

  void Prefetch(const int64_t* items, size_t n) override {
    for (auto& tier : tiers_) tier->Prefetch(items, n);
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
    for (const Timing& t : timing_) {
      s.lookup_ns += t.ns.load(std::memory_order_relaxed);
      s.hit_bytes += t.hit_bytes.load(std::memory_order_relaxed);
    }
    s.lookups = hits_.load() + misses_.load() + errors_.load();
    return s;
  }

  std::vector<CacheStats> TierStats() const override {
    std::vector<CacheStats> out;
    for (size_t i = 0; i < tiers_.size(); ++i) {
      CacheStats t = tiers_[i]->Stats();
      t.lookups = timing_[i].lookups.load(std::memory_order_relaxed);
      t.lookup_ns = timing_[i].ns.load(std::memory_order_relaxed);
      t.hit_bytes = timing_[i].hit_bytes.load(std::memory_order_relaxed);
      out.push_back(std::move(t));
    }
    return out;
  }

 private:
  struct Timing {
    std::atomic<int64_t> lookups{0}, ns{0}, hit_bytes{0};
  };
  const std::vector<std::unique_ptr<Cache>> tiers_;
  std::vector<Timing> timing_;
  std::atomic<int64_t> hits_{0}, misses_{0}, errors_{0};
};

}  // namespace

std::unique_ptr<Cache> StackCaches(std::vector<std::unique_ptr<Cache>> tiers) {
  return std::make_unique<TieredCache>(std::move(tiers));
}

}  // namespace nostall
