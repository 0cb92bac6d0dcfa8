// A Source decorator that emulates slow storage.
//
// Model: every read first waits the per-read latency (reads in flight wait
// side by side, as requests to object storage do), then its bytes go through
// one shared pipe of fixed bandwidth, first come first served: a read of n
// bytes occupies the pipe for n / bandwidth seconds after the previous one
// leaves it, and returns when its last byte has passed. The real read from
// the inner source happens inside that time (it is usually far faster).
#include <algorithm>
#include <chrono>
#include <thread>

#include "common/clock.h"
#include "common/mutex.h"
#include "nostall/source.h"

namespace nostall {
namespace {

class ThrottledSource final : public Source {
 public:
  ThrottledSource(std::unique_ptr<Source> inner, double bytes_per_second, double latency_ms)
      : inner_(std::move(inner)),
        ns_per_byte_(bytes_per_second > 0 ? 1e9 / bytes_per_second : 0),
        latency_ns_(static_cast<int64_t>(latency_ms * 1e6)) {}

  int64_t size() const override { return inner_->size(); }
  std::string key(int64_t i) const override { return inner_->key(i); }
  int64_t label(int64_t i) const override { return inner_->label(i); }
  int64_t byte_size(int64_t i) const override { return inner_->byte_size(i); }
  const std::vector<std::string>& classes() const override { return inner_->classes(); }
  uint64_t fingerprint() const override { return inner_->fingerprint(); }
  int64_t skipped_at_index() const override { return inner_->skipped_at_index(); }
  std::vector<std::pair<std::string, int64_t>> left_out() const override {
    return inner_->left_out();
  }
  const char* kind() const override { return inner_->kind(); }
  const FieldSpan* record(int64_t i) const override { return inner_->record(i); }
  int extra_fields() const override { return inner_->extra_fields(); }
  int64_t field_room(int f) const override { return inner_->field_room(f); }
  int64_t max_annotations() const override { return inner_->max_annotations(); }
  std::vector<std::pair<std::string, int64_t>> members_found() const override {
    return inner_->members_found();
  }
  std::string index_origin() const override { return inner_->index_origin(); }
  std::string index_note() const override { return inner_->index_note(); }
  std::shared_ptr<ShardedItems> sharded() const override { return inner_->sharded(); }

  Status Evict(int64_t i) const override { return inner_->Evict(i); }
  Status Read(int64_t i, std::vector<uint8_t>* out) const override {
    const int64_t start = NowNs();
    Status st = inner_->Read(i, out);
    int64_t done = start + latency_ns_;
    if (ns_per_byte_ > 0) {
      const int64_t transfer = static_cast<int64_t>(static_cast<double>(out->size()) * ns_per_byte_);
      MutexLock lock(&mu_);
      const int64_t begin = std::max(done, pipe_free_ns_);
      pipe_free_ns_ = begin + transfer;
      done = pipe_free_ns_;
    }
    const int64_t wait = done - NowNs();
    if (wait > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
    return st;
  }

 private:
  const std::unique_ptr<Source> inner_;
  const double ns_per_byte_;
  const int64_t latency_ns_;
  mutable Mutex mu_;
  mutable int64_t pipe_free_ns_ GUARDED_BY(mu_) = 0;  // when the pipe has passed every byte booked so far
};

}  // namespace

std::unique_ptr<Source> ThrottleSource(std::unique_ptr<Source> inner, double bytes_per_second,
                                       double latency_ms) {
  return std::make_unique<ThrottledSource>(std::move(inner), bytes_per_second, latency_ms);
}

}  // namespace nostall
