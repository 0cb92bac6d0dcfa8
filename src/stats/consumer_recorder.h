// The consumer side of the stats: how long each call for the next batch
// waited, how long the caller worked in between, per epoch, and the waits
// of the most recent batches. Shared by every Loader implementation.
// Thread-safe (one mutex; a few operations per batch).
#ifndef NOSTALL_STATS_CONSUMER_RECORDER_H_
#define NOSTALL_STATS_CONSUMER_RECORDER_H_

#include <cstdint>
#include <vector>

#include "common/mutex.h"
#include "nostall/stats.h"

namespace nostall {

class ConsumerRecorder {
 public:
  // A call for the next batch begins at `now`: the time since the last batch
  // was handed out was the caller's own work.
  void CallStarted(int64_t epoch, int64_t now);
  // The call waited `ns` (one batch's wait may span several calls that time
  // out so the caller can check for signals).
  void Waited(int64_t epoch, int64_t ns);
  // The call timed out: the caller comes straight back, and the time it
  // spends in between is waiting, not its own work.
  void TimedOut();
  // A batch of `samples` was handed out at `now`.
  void Delivered(int64_t epoch, int64_t samples, int64_t now);
  // A new epoch starts: nothing carries over.
  void EpochStarted();
  // Total time waited so far (calls that returned).
  int64_t WaitNs() const;
  // Fills the consumer fields of `st`.
  void Fill(LoaderStats* st) const;

 private:
  LoaderStats::ConsumerEpoch& Epoch(int64_t epoch) REQUIRES(mu_);
  mutable Mutex mu_;
  int64_t last_return_ns_ GUARDED_BY(mu_) = 0;
  int64_t pending_wait_ns_ GUARDED_BY(mu_) = 0;
  int64_t iterations_ GUARDED_BY(mu_) = 0;
  int64_t wait_ns_ GUARDED_BY(mu_) = 0;
  int64_t max_wait_ns_ GUARDED_BY(mu_) = 0;
  int64_t between_ns_ GUARDED_BY(mu_) = 0;
  std::vector<LoaderStats::ConsumerEpoch> epochs_ GUARDED_BY(mu_);
  std::vector<int64_t> recent_ GUARDED_BY(mu_);
  size_t recent_next_ GUARDED_BY(mu_) = 0;
};

}  // namespace nostall

#endif  // NOSTALL_STATS_CONSUMER_RECORDER_H_
