#include "stats/consumer_recorder.h"

#include <algorithm>

namespace nostall {

LoaderStats::ConsumerEpoch& ConsumerRecorder::Epoch(int64_t epoch) {
  if (epochs_.empty() || epochs_.back().epoch != epoch) {
    epochs_.push_back({});
    epochs_.back().epoch = epoch;
  }
  return epochs_.back();
}

void ConsumerRecorder::CallStarted(int64_t epoch, int64_t now) {
  MutexLock lock(&mu_);
  if (last_return_ns_ == 0) return;
  const int64_t between = now - last_return_ns_;
  between_ns_ += between;
  Epoch(epoch).between_ns += between;
  last_return_ns_ = 0;
}

void ConsumerRecorder::Waited(int64_t epoch, int64_t ns) {
  MutexLock lock(&mu_);
  wait_ns_ += ns;
  pending_wait_ns_ += ns;
  Epoch(epoch).wait_ns += ns;
}

void ConsumerRecorder::TimedOut() {
  MutexLock lock(&mu_);
  last_return_ns_ = 0;
}

void ConsumerRecorder::Delivered(int64_t epoch, int64_t samples, int64_t now) {
  MutexLock lock(&mu_);
  const int64_t wait = pending_wait_ns_;
  pending_wait_ns_ = 0;
  max_wait_ns_ = std::max(max_wait_ns_, wait);
  if (recent_.size() < LoaderStats::kRecentWaits) {
    recent_.push_back(wait);
  } else {
    recent_[recent_next_] = wait;
  }
  recent_next_ = (recent_next_ + 1) % LoaderStats::kRecentWaits;
  ++iterations_;
  auto& e = Epoch(epoch);
  e.batches += 1;
  e.samples += samples;
  last_return_ns_ = now;
}

void ConsumerRecorder::EpochStarted() {
  MutexLock lock(&mu_);
  last_return_ns_ = 0;
  pending_wait_ns_ = 0;
}

int64_t ConsumerRecorder::WaitNs() const {
  MutexLock lock(&mu_);
  return wait_ns_;
}

void ConsumerRecorder::Fill(LoaderStats* st) const {
  MutexLock lock(&mu_);
  st->iterations = iterations_;
  st->wait_ns = wait_ns_;
  st->max_wait_ns = max_wait_ns_;
  st->between_ns = between_ns_;
  st->consumer_epochs = epochs_;
  const size_t n = recent_.size();
  const size_t first = n < LoaderStats::kRecentWaits ? 0 : recent_next_;
  st->recent_wait_ns.clear();
  for (size_t k = 0; k < n; ++k) st->recent_wait_ns.push_back(recent_[(first + k) % n]);
}

}  // namespace nostall
