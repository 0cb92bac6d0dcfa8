// The scheduler: which sample is fetched next, into which slot, and which
// batch the caller gets next. It owns the pipeline's scheduling state (the
// epoch order and its cursor, the slots, generations, the prep queue, how
// many workers are at work) and hands work over between threads; it never
// reads, decodes or sleeps on I/O.
//
// One mutex (RingState::mu, shared with the batches' leases) guards it all;
// it is held only to hand work over. Work flows in sample order: a fetch
// thread takes the next position (NextFetch) once its batch has a slot and
// the prep queue has room; the fetched item joins the prep queue (Fetched);
// a prep thread takes it and, with the next, reports it prepared
// (PrepStep); the thread that prepares a batch's last sample finishes and
// publishes it (Publish). Every wait is timed into a stage's counters.
//
// Generations: StartEpoch at another epoch or batch starts a new one; work
// of an older generation still in the queue is dropped, and work already
// running finishes before the slots are reused.
//
// Running on: when an epoch is all dispatched the fetchers run on into the
// next one, so its first batches are ready when the caller asks for them;
// StartEpoch keeps that work if it asks for that epoch.
//
// Workers beyond the counts asked for now (Knobs: the autotuner moves them)
// park, counted neither starved nor busy.
#ifndef NOSTALL_PIPELINE_SCHEDULER_H_
#define NOSTALL_PIPELINE_SCHEDULER_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "nostall/loader.h"
#include "pipeline/slot_table.h"
#include "pipeline/work.h"
#include "stats/consumer_recorder.h"

namespace nostall {

// The order the fetch threads walk: one epoch's sample order as it is known
// (a buffered epoch's grows a shard at a time: sampler.h), the next position
// in it, and the slot of the batch that position is in. A value the
// scheduler keeps under its lock; the stream it grows from is taken out to
// be read without the lock (TakeStream, Extend).
class FetchOrder {
 public:
  explicit FetchOrder(int64_t batch_size) : bs_(batch_size) {}
  // Walks `stream` of `epoch` from the first position of `first_batch`.
  void Reset(int64_t epoch, std::unique_ptr<EpochStream> stream, int64_t first_batch) {
    epoch_ = epoch;
    stream_ = std::move(stream);
    order_.clear();
    final_ = false;
    error_ = Status::OK();
    next_ = first_batch * bs_;
    slot_ = -1;
  }
  int64_t epoch() const { return epoch_; }
  int64_t samples() const { return static_cast<int64_t>(order_.size()); }  // known so far
  // Every position is known (the epoch's end too).
  bool final() const { return final_; }
  int64_t batches() const { return (samples() + bs_ - 1) / bs_; }  // once final
  const Status& error() const { return error_; }
  // Every position is dispatched.
  bool done() const { return final_ && next_ >= samples(); }
  // The next position may be dispatched: it is known, and so is its batch's
  // size when it starts one. Else (not done) the order must grow first.
  bool Ready() const {
    if (next_ >= samples()) return false;
    return !NeedsSlot() || final_ || samples() >= (next_batch() + 1) * bs_;
  }
  // The stream, to read more from without the lock (null: another thread
  // has it); Extend gives it back with what it read.
  std::unique_ptr<EpochStream> TakeStream() { return std::move(stream_); }
  void Extend(std::unique_ptr<EpochStream> stream, std::vector<int64_t> more, bool final,
              Status error) {
    if (order_.empty()) {
      order_ = std::move(more);
    } else {
      order_.insert(order_.end(), more.begin(), more.end());
    }
    if (!error.ok()) {  // the order ends where it broke; the caller meets the error there
      error_ = std::move(error);
      final = true;
    } else if (final) {
      order_.resize(static_cast<size_t>(std::min<int64_t>(samples(), stream->total())));
    }
    final_ = final;
    stream_ = std::move(stream);
  }
  // The next position's batch, and its place in it.
  int64_t next_batch() const { return next_ / bs_; }
  int64_t next_in_batch() const { return next_ % bs_; }
  // The next position starts a batch, which needs a slot of its own.
  bool NeedsSlot() const { return next_in_batch() == 0 || slot_ < 0; }
  int64_t slot() const { return slot_; }
  void set_slot(int64_t s) { slot_ = s; }
  // Samples in batch `b` (the last may be short), as far as known.
  int64_t BatchCount(int64_t b) const { return std::min<int64_t>(bs_, samples() - b * bs_); }
  // The next position's item; moves on.
  int64_t Take() { return order_[static_cast<size_t>(next_++)]; }
  // Appends batch `b`'s items (none past what is known).
  void AppendBatch(int64_t b, std::vector<int64_t>* out) const {
    for (int64_t p = b * bs_; p < std::min(samples(), (b + 1) * bs_); ++p) {
      if (order_[static_cast<size_t>(p)] != kHole) out->push_back(order_[static_cast<size_t>(p)]);
    }
  }

 private:
  int64_t bs_;
  int64_t epoch_ = 0;
  std::unique_ptr<EpochStream> stream_;
  std::vector<int64_t> order_;
  bool final_ = false;
  Status error_;
  int64_t next_ = 0;
  int64_t slot_ = -1;
};

// Fetched items waiting for a prep thread, and the byte buffers of items
// done with, reused for the next fetches (no allocation per item). A value
// the scheduler keeps under its lock.
class PrepQueue {
 public:
  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }
  void Push(FetchedItem fi) { items_.push_back(std::move(fi)); }
  FetchedItem Pop() {
    FetchedItem fi = std::move(items_.front());
    items_.pop_front();
    return fi;
  }
  // Drops every item waiting (a new generation), keeping their buffers.
  void Clear() {
    for (auto& item : items_) Recycle(std::move(item.bytes));
    items_.clear();
  }
  void Recycle(std::vector<uint8_t> bytes) { buffers_.push_back(std::move(bytes)); }
  // A buffer for a fetch: one recycled, or a new, empty one.
  std::vector<uint8_t> Buffer() {
    if (buffers_.empty()) return {};
    std::vector<uint8_t> b = std::move(buffers_.back());
    buffers_.pop_back();
    return b;
  }

 private:
  std::deque<FetchedItem> items_;
  std::vector<std::vector<uint8_t>> buffers_;
};

// The counts the caller has met (counted as batches are handed out, not as
// they are made: the pipeline may be working ahead), read without the lock.
struct MetCounts {
  std::atomic<int64_t> batches{0}, samples{0}, errors{0}, skipped{0}, empty_dropped{0},
      private_copies{0};
};

class Scheduler {
 public:
  struct Options {
    int64_t batch_size = 1;
    bool own_ring = true;    // a private ring: may drop empty batches, copy out, open a spare
    bool async = false;      // one dispatcher and reads in flight, not fetch threads
    int64_t slot_limit = 0;  // slots batches may take
    int prep_threads = 1;
    int fetch_threads = 0;   // local sources: fetch threads at work
    int read_limit = 0;      // async: reads in flight allowed
    bool on_error_skip = false;  // a bad item is skipped (else the batch raises)
  };
  // The knobs the autotuner turns, as they are now.
  struct Knobs {
    int prep_threads = 0, fetch_threads = 0, read_limit = 0;
    int64_t slot_limit = 0;
  };

  Scheduler(const Sampler& sampler, std::shared_ptr<RingState> ring, ConsumerRecorder* consumer,
            const Options& options);

  // The consumer's side.
  Status StartEpoch(int64_t epoch, int64_t first_batch) EXCLUDES(ring_->mu);
  Status Next(int64_t timeout_ms, NextStatus* status, std::shared_ptr<Batch>* out)
      EXCLUDES(ring_->mu);

  // Fetch workers. NextFetch hands in `done` (a fetched item for the prep
  // queue, or null), then waits for the next position (parked while `index`
  // is beyond the fetch threads asked for; -1: the dispatcher) and claims it
  // as a fetch in flight; false at shutdown. `prefetch`: list the items the
  // cache is asked for at a batch's first position. One lock for both: a
  // fetch thread takes the mutex once per item.
  bool NextFetch(int index, bool prefetch, FetchedItem* done, FetchedItem* fi,
                 StageCounters* fetch) EXCLUDES(ring_->mu);
  // A fetch is done (its bytes or its error): into the prep queue.
  void Fetched(FetchedItem fi) EXCLUDES(ring_->mu);

  // Prep workers, one PrepStep per item under one lock: `*fi`, prepared
  // with `*result` (null: nothing yet), is recorded (its buffer kept for a
  // later fetch). When it was its batch's last sample: kBatchDone, and the
  // batch is the caller's alone until Publish (`*finished`: its slot,
  // count and skipped positions). Else the next item of this generation
  // goes into `*fi` (parked while `index` is beyond the prep threads asked
  // for): kItem, or kStop at shutdown.
  struct Finished {
    uint64_t slot;
    int64_t count;
    const std::vector<uint8_t>* bad;  // per position: 1 = skipped
  };
  enum class PrepTurn { kItem, kBatchDone, kStop };
  PrepTurn PrepStep(int index, FetchedItem* fi, const Status* result, StageCounters* prep,
                    Finished* finished) EXCLUDES(ring_->mu);
  // The batch is complete with `kept` samples: ready for the caller.
  void Publish(const FetchedItem& fi, const Finished& f, int64_t kept) EXCLUDES(ring_->mu);

  // The knobs (the autotuner's).
  Knobs knobs() const EXCLUDES(ring_->mu);
  void SetKnobs(const Knobs& k) EXCLUDES(ring_->mu);
  int read_limit() const { return read_limit_.load(std::memory_order_relaxed); }
  int prep_threads() const { return prep_threads_.load(std::memory_order_relaxed); }
  void SetReadLimit(int reads) { read_limit_.store(reads, std::memory_order_relaxed); }

  // Wakes every waiter for good; the workers return false.
  void Cancel() EXCLUDES(ring_->mu);
  // Async: waits until no read is in flight (after the source cancelled them).
  void WaitForReads() EXCLUDES(ring_->mu);

  // The counts the caller has met, and where it is.
  struct Counts {
    int64_t batches = 0, samples = 0, errors = 0, skipped = 0, empty_dropped = 0,
            private_copies = 0;
    int64_t consumer_epoch = -1;  // -1: no epoch started
  };
  Counts counts() const EXCLUDES(ring_->mu);

 private:
  enum class Position { kReady, kNextEpoch, kExtend, kCancelled };
  SlotTable& slots() REQUIRES(ring_->mu) { return *slots_; }
  const SlotTable& slots() const REQUIRES(ring_->mu) { return *slots_; }
  int ReadLimitNow() const REQUIRES(ring_->mu) { return opt_.async ? read_limit() : fetch_active_; }
  size_t PrepQueueRoom() const REQUIRES(ring_->mu) {
    return static_cast<size_t>(std::max(8, 2 * prep_active_));
  }
  bool RoomToFetch() const REQUIRES(ring_->mu);

  bool RunOnInto(std::unique_lock<std::mutex>& native, int64_t epoch) REQUIRES(ring_->mu);
  void Restart(std::unique_lock<std::mutex>& native, int64_t epoch, int64_t first_batch,
               std::unique_ptr<EpochStream> order) REQUIRES(ring_->mu);
  // The order grows (a buffered epoch's next shard), read without the lock.
  void ExtendOrder(std::unique_lock<std::mutex>& native) REQUIRES(ring_->mu);
  // The caller's epoch's batches, once its order is final (-1 before).
  void NoteOrderEnd() REQUIRES(ring_->mu);
  bool EpochOver() const REQUIRES(ring_->mu) {
    return num_batches_ >= 0 && consume_batch_ >= num_batches_;
  }
  Position WaitForPosition(std::unique_lock<std::mutex>& native, int64_t* current,
                           StageCounters* fetch) REQUIRES(ring_->mu);
  void RunOn(int64_t current, std::unique_ptr<EpochStream> next) REQUIRES(ring_->mu);
  FetchedItem ClaimPosition(bool prefetch) REQUIRES(ring_->mu);
  void Queue(FetchedItem fi) REQUIRES(ring_->mu);
  bool TakeForPrep(std::unique_lock<std::mutex>& native, int index, FetchedItem* fi,
                   StageCounters* prep) REQUIRES(ring_->mu);
  // Next: waits for the next batch; -1 (with *status set) when none is handed out.
  int64_t WaitReady(std::unique_lock<std::mutex>& native, int64_t timeout_ms, int64_t t0,
                    NextStatus* status, Status* error) REQUIRES(ring_->mu);
  Status HandOut(uint64_t slot, NextStatus* status, std::shared_ptr<Batch>* out, bool* again)
      REQUIRES(ring_->mu);
  void Free(uint64_t s) REQUIRES(ring_->mu);

  const Sampler& sampler_;
  const std::shared_ptr<RingState> ring_;
  ConsumerRecorder* const consumer_;
  const Options opt_;

  std::condition_variable work_cv_;   // an epoch began (fetchers wait for positions)
  std::condition_variable prep_cv_;   // the prep queue gained an item
  std::condition_variable ready_cv_;  // a batch became ready
  std::condition_variable idle_cv_;   // no prep work is running
  std::condition_variable park_cv_;   // workers beyond the counts asked for wait here
  std::condition_variable reads_done_cv_;  // async: fetching_ fell to 0

  bool cancelled_ GUARDED_BY(ring_->mu) = false;
  bool started_ GUARDED_BY(ring_->mu) = false;
  bool restarting_ GUARDED_BY(ring_->mu) = false;  // StartEpoch waits for old work
  uint64_t generation_ GUARDED_BY(ring_->mu) = 0;
  int64_t epoch_ GUARDED_BY(ring_->mu) = 0;          // the epoch Next() hands out
  FetchOrder order_ GUARDED_BY(ring_->mu);         // where the fetchers are
  int64_t consume_batch_ GUARDED_BY(ring_->mu) = 0;  // next batch Next() hands out
  int64_t num_batches_ GUARDED_BY(ring_->mu) = 0;  // -1: not known yet (a buffered epoch)
  Status order_error_ GUARDED_BY(ring_->mu);       // why the caller's epoch's order broke
  bool extending_ GUARDED_BY(ring_->mu) = false;   // a thread reads the order's stream
  std::optional<SlotTable> slots_ GUARDED_BY(ring_->mu);  // over ring_->slots
  PrepQueue prep_queue_ GUARDED_BY(ring_->mu);
  int fetching_ GUARDED_BY(ring_->mu) = 0;
  int active_preps_ GUARDED_BY(ring_->mu) = 0;
  int prep_active_ GUARDED_BY(ring_->mu) = 0;    // prep threads at work (the rest park)
  int fetch_active_ GUARDED_BY(ring_->mu) = 0;   // local sources: fetch threads at work
  std::atomic<int> read_limit_{0};               // async: reads in flight allowed now
  std::atomic<int> prep_threads_{0};             // prep_active_, read without the lock

  MetCounts met_;
};

}  // namespace nostall

#endif  // NOSTALL_PIPELINE_SCHEDULER_H_
