// The pipeline loader's class: fetch and prep pools around bounded queues
// and the ring. Internal; split by role: the consumer's side (StartEpoch,
// Next, Stats) in pipeline_loader.cc, the workers in workers.cc.
//
// One mutex guards the scheduling state (cursor, slot states, prep queue);
// it is held only to hand work over, never during I/O or decoding. Work
// flows in sample order: fetch threads take the next sample position, once
// its batch's slot is free; prep threads decode it straight into its place in
// that slot; the thread that finishes a batch's last sample publishes it.
// Every wait is timed into the stats. Shutdown: set `cancelled_`, notify
// every condition variable, join every thread.
//
// A remote source (Source::ReadsAsync) is read without a thread per read:
// one dispatch thread claims positions and starts reads, which complete on
// the source's I/O thread into the prep queue. How many are in flight is
// `reads_in_flight` when the spec fixes it, else sized by Little's law from
// the measured request latency and the rate prep can take items at
// (AdaptReadLimit).
//
// Autotuned knobs (src/pipeline/autotune.h) move while it runs: prep and
// fetch threads are started up to the count asked for and park (waiting on
// park_cv_, counted neither starved nor busy) beyond it; the slots in use
// are bounded by slot_limit_ within a ring reserved for the most the tuner
// may ask. Batches do not depend on any of it: each sample's place and
// randomness come from its position, whichever thread makes it.
#ifndef NOSTALL_PIPELINE_PIPELINE_LOADER_H_
#define NOSTALL_PIPELINE_PIPELINE_LOADER_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "common/clock.h"
#include "common/mutex.h"
#include "nostall/cache.h"
#include "nostall/loader.h"
#include "stats/consumer_recorder.h"
#include "ops/prep.h"
#include "pipeline/autotune.h"
#include "pipeline/pipeline.h"
#include "pipeline/read_limit.h"
#include "ring/ring.h"

namespace nostall {

struct StageCounters {
  std::atomic<int64_t> items{0}, bytes{0}, busy_cpu_ns{0}, work_ns{0}, starved_ns{0},
      blocked_ns{0}, peak_in_flight{0};
  StageStats Snapshot(int threads) const {
    return {items.load(),      bytes.load(),      busy_cpu_ns.load(), work_ns.load(),
            starved_ns.load(), blocked_ns.load(), threads,          peak_in_flight.load()};
  }
  void InFlight(int64_t n) {  // called with the count just entered
    int64_t peak = peak_in_flight.load(std::memory_order_relaxed);
    while (n > peak && !peak_in_flight.compare_exchange_weak(peak, n)) {
    }
  }
};

struct FetchedItem {
  uint64_t generation;
  int64_t epoch;
  int64_t batch;
  uint64_t slot;
  int64_t pos;   // within the batch
  int64_t item;  // dataset index
  std::vector<uint8_t> bytes;
  Status status;  // a failed read travels on so the batch can complete
  // Set on a batch's first position: the items the cache is asked for in
  // one go (Cache::Prefetch; this batch's when it is an epoch's first, and
  // the next batch's), before this item is looked up.
  std::vector<int64_t> prefetch;
};

// Per-slot bookkeeping that only this process needs.
struct SlotWork {
  int64_t remaining = 0;        // samples not yet prepared
  std::vector<uint8_t> bad;     // per position: 1 = skipped
  Status error;                 // first error by position (raise policy)
  int64_t error_pos = -1;
  int64_t bad_items = 0;        // counted into the stats when handed out
  int64_t skipped = 0;
};

// State shared between the loader and the leases it hands out, so a Batch
// outliving its Loader can still be released safely.
// A slot's life in the pipeline (docs/ring_format.md):
//   free -> filling (a fetch thread claims it for a batch) -> ready (the
//   thread that prepares its last sample) -> leased (Next) -> free (the last
//   lease goes); StartEpoch frees every slot not leased.
enum class SlotState { kFree, kFilling, kReady, kLeased };
struct PipelineSlot {
  SlotState state = SlotState::kFree;
  uint32_t leases = 0;  // Batches holding it
  int64_t epoch = 0, batch_index = 0;
  int64_t count = 0;    // samples (fewer at the epoch's end or after skips)
};

struct RingState {
  std::shared_ptr<ring::Segment> seg;  // the slots' memory (ring/ring.h)
  // Guards the slots' states and the pipeline's scheduling state
  // (PipelineLoader's GUARDED_BY members).
  Mutex mu;
  std::condition_variable slot_freed;  // fetchers wait for a free slot
  std::vector<PipelineSlot> slots GUARDED_BY(mu);
  void Release(uint64_t slot) EXCLUDES(mu) {
    MutexLock lock(&mu);
    PipelineSlot& h = slots[slot];
    if (--h.leases == 0) {
      h.state = SlotState::kFree;
      slot_freed.notify_all();
    }
  }
};

class LeasedBatch final : public Batch {
 public:
  LeasedBatch(std::shared_ptr<RingState> state, uint64_t slot, int64_t epoch, int64_t index,
              int64_t size)
      : state_(std::move(state)), slot_(slot), epoch_(epoch), index_(index), size_(size) {}
  ~LeasedBatch() override { state_->Release(slot_); }
  int64_t epoch() const override { return epoch_; }
  int64_t index() const override { return index_; }
  int64_t size() const override { return size_; }
  const void* images() const override { return state_->seg->images(slot_); }
  const int64_t* labels() const override { return state_->seg->labels(slot_); }
  const int64_t* indices() const override { return state_->seg->indices(slot_); }

 private:
  std::shared_ptr<RingState> state_;
  uint64_t slot_;
  int64_t epoch_, index_, size_;
};

// A batch copied out of its slot (the slot is free again at once): what the
// caller gets when it holds every other slot, so the pipeline never stops.
class CopiedBatch final : public Batch {
 public:
  CopiedBatch(const ring::Segment& seg, uint32_t slot, int64_t epoch, int64_t index, int64_t size,
              size_t image_bytes)
      : epoch_(epoch),
        index_(index),
        images_(static_cast<const uint8_t*>(seg.images(slot)),
                static_cast<const uint8_t*>(seg.images(slot)) + image_bytes),
        labels_(seg.labels(slot), seg.labels(slot) + size),
        indices_(seg.indices(slot), seg.indices(slot) + size) {}
  int64_t epoch() const override { return epoch_; }
  int64_t index() const override { return index_; }
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  const void* images() const override { return images_.data(); }
  const int64_t* labels() const override { return labels_.data(); }
  const int64_t* indices() const override { return indices_.data(); }
  bool copied() const override { return true; }

 private:
  int64_t epoch_, index_;
  std::vector<uint8_t> images_;
  std::vector<int64_t> labels_, indices_;
};

class PipelineLoader final : public Loader {
 public:
  explicit PipelineLoader(PipelineParts parts)
      : spec_(std::move(parts.spec)),
        source_(std::move(parts.source)),
        cache_(std::move(parts.cache)),
        sampler_(std::move(*parts.sampler)),
        out_h_(parts.out_h),
        out_w_(parts.out_w),
        sample_bytes_(SampleBytes(spec_.prep, out_h_, out_w_)),
        created_ns_(NowNs()),
        tune_(parts.tune) {}

  ~PipelineLoader() override;

  // `ring`: a named ring to fill (the shared producer's); null: a private one.
  Status Init(std::shared_ptr<ring::Segment> ring);

  Status StartEpoch(int64_t epoch, int64_t first_batch) override;

  Status Next(int64_t timeout_ms, NextStatus* status, std::shared_ptr<Batch>* out) override;

  LoaderStats Stats() const override;

  const Source& source() const override { return *source_; }
  const Sampler& sampler() const override { return sampler_; }

  Status EvictPageCache() const override;
  const LoaderSpec& spec() const override { return spec_; }
  std::vector<int64_t> SampleShape() const override {
    return SampleShapeOf(spec_.prep, out_h_, out_w_);
  }

 private:
  int64_t SamplesThisEpoch() const REQUIRES(state_->mu) { return static_cast<int64_t>(order_.size()); }
  int64_t BatchCount(int64_t b) const REQUIRES(state_->mu) {
    return std::min<int64_t>(spec_.batch_size, SamplesThisEpoch() - b * spec_.batch_size);
  }

  // A free slot a new batch may take (the slots in use are below the
  // limit), or -1.
  int64_t SlotToClaim() const REQUIRES(state_->mu) {
    int64_t in_use = 0;
    for (const PipelineSlot& h : state_->slots) in_use += h.state != SlotState::kFree;
    return in_use < slot_limit_ + (spare_open_ ? 1 : 0) ? FindSlot(SlotState::kFree, -1) : -1;
  }

  // A slot in `state` (holding `batch` of this epoch, if batch >= 0), or -1.
  int64_t FindSlot(SlotState state, int64_t batch) const REQUIRES(state_->mu) {
    for (uint64_t i = 0; i < state_->slots.size(); ++i) {
      const PipelineSlot& h = state_->slots[i];
      if (h.state != state) continue;
      if (batch < 0 || (h.batch_index == batch && h.epoch == epoch_)) return static_cast<int64_t>(i);
    }
    return -1;
  }

  void PrefetchFromCache(FetchedItem* fi);
  void CountCache(int64_t epoch, bool hit, bool error, size_t bytes) EXCLUDES(cache_mu_);

  int64_t LeasedSlots() const REQUIRES(state_->mu) {
    int64_t leased = 0;
    for (const PipelineSlot& h : state_->slots) leased += h.state == SlotState::kLeased;
    return leased;
  }
  bool AllSlotsLeased() const REQUIRES(state_->mu) { return LeasedSlots() >= slot_limit_; }

  // Workers (workers.cc).
  void FetchLoop(int index) EXCLUDES(state_->mu);
  bool TakePosition(std::unique_lock<std::mutex>& native, FetchedItem* fi) REQUIRES(state_->mu);
  void DispatchLoop() EXCLUDES(state_->mu);
  void ReadDone(FetchedItem fi, int64_t wall0) EXCLUDES(state_->mu);
  void AdaptReadLimit() REQUIRES(state_->mu);
  // Items waiting for prep beyond the reads: enough for every prep thread.
  size_t PrepQueueRoom() const REQUIRES(state_->mu) {
    return static_cast<size_t>(std::max(8, 2 * prep_active_));
  }
  bool RoomToFetch() const REQUIRES(state_->mu) {
    const size_t limit = static_cast<size_t>(ReadLimitNow());
    if (!async_) return prep_queue_.size() + fetching_ < limit + PrepQueueRoom();
    return static_cast<size_t>(fetching_) < limit &&
           prep_queue_.size() + fetching_ < limit + PrepQueueRoom();
  }
  // A failed read as the error policy sees it, named by the item.
  void NameFetchError(FetchedItem* fi) const;
  // After a miss read from storage: into the cache, and counted.
  void CacheMiss(FetchedItem* fi, bool lookup_failed);
  enum class Position { kReady, kNextEpoch, kCancelled };
  Position WaitForPosition(std::unique_lock<std::mutex>& native, int64_t t0, int64_t* current)
      REQUIRES(state_->mu);
  void RunOn(int64_t current, std::vector<int64_t> next) REQUIRES(state_->mu);
  FetchedItem ClaimPosition() REQUIRES(state_->mu);
  void Fetch(FetchedItem* fi) EXCLUDES(state_->mu);
  void PrepLoop(int index) EXCLUDES(state_->mu);
  // The autotuner's thread (autotune.cc decides, this applies).
  struct TuneSample {
    int64_t t_ns = 0, wait_ns = 0, process_cpu_ns = 0, loader_cpu_ns = 0;
    StageStats prep, fetch;
  };
  TuneSample MeasureForTune() const EXCLUDES(tune_mu_);
 public:
  void SetWaitSource(std::function<int64_t()> f) EXCLUDES(tune_mu_) {
    MutexLock lock(&tune_mu_);
    wait_source_ = std::move(f);
  }
 private:
  void AutotuneLoop() EXCLUDES(state_->mu);
  void ApplyTune(const AutotuneDecision& d) REQUIRES(state_->mu);
  // Starts workers up to the counts now asked for (threads start parked
  // beyond it, so the tuner never waits for one to start).
  void StartWorkers() REQUIRES(state_->mu);
  int ReadLimitNow() const REQUIRES(state_->mu) {
    return async_ ? read_limit_.load(std::memory_order_relaxed) : fetch_active_;
  }
  // Closes the holes that skipped samples left, keeping the order of the
  // good ones; this is the only copy of pixels nostall ever makes, and only
  // when a batch had bad items. Runs without the lock: the slot's last
  // sample is done and it is not yet READY, so no other thread touches its
  // work entry (the analysis cannot see that ownership).
  void FinishBatch(uint64_t s) NO_THREAD_SAFETY_ANALYSIS;

  const LoaderSpec spec_;
  const std::unique_ptr<Source> source_;
  const std::unique_ptr<Cache> cache_;  // may be null
  // Per-epoch cache counters of this loader.
  mutable Mutex cache_mu_;
  std::map<int64_t, LoaderStats::CacheEpoch> cache_epochs_ GUARDED_BY(cache_mu_);
  std::atomic<int64_t> cache_inserted_bytes_{0};
  const Sampler sampler_;
  const int out_h_, out_w_;
  const size_t sample_bytes_;
  const int64_t created_ns_;
  const AutotuneLimits tune_;

  std::shared_ptr<RingState> state_;  // its mutex guards everything below
  std::condition_variable work_cv_;   // an epoch began (fetchers wait for positions)
  std::condition_variable prep_cv_;   // the prep queue gained an item
  std::condition_variable ready_cv_;  // a batch became ready
  std::condition_variable idle_cv_;   // no prep work is running
  std::vector<std::thread> threads_;   // fetch and prep workers (the tuner may add some)
  std::thread tuner_thread_;           // joined first: it starts workers
  std::condition_variable park_cv_;    // workers beyond the counts asked for wait here
  std::condition_variable tune_cv_;    // wakes the tuner at shutdown
  int prep_active_ GUARDED_BY(state_->mu) = 0;   // prep threads at work (the rest park)
  int fetch_active_ GUARDED_BY(state_->mu) = 0;  // local sources: fetch threads at work
  int prep_started_ GUARDED_BY(state_->mu) = 0, fetch_started_ GUARDED_BY(state_->mu) = 0;
  int64_t slot_limit_ GUARDED_BY(state_->mu) = 0;  // slots batches may take (prefetch + 2)
  // The caller holds slot_limit_ slots: one batch may take the spare slot
  // (its own ring has one), and leaves as a copy.
  bool spare_open_ GUARDED_BY(state_->mu) = false;
  int64_t slots_reserved_ GUARDED_BY(state_->mu) = 0;  // of a private ring: memory reserved
  std::unique_ptr<Autotuner> autotuner_;  // null: nothing tuned
  mutable Mutex tune_mu_;
  std::vector<AutotuneDecision> decisions_ GUARDED_BY(tune_mu_);
  int64_t changes_ GUARDED_BY(tune_mu_) = 0;
  AutotuneSettings tuned_now_ GUARDED_BY(tune_mu_);
  std::function<int64_t()> wait_source_ GUARDED_BY(tune_mu_);  // null: consumer_'s waits
  bool cancelled_ GUARDED_BY(state_->mu) = false;
  bool started_ GUARDED_BY(state_->mu) = false;
  bool restarting_ GUARDED_BY(state_->mu) = false;  // StartEpoch is waiting for old work
  uint64_t generation_ GUARDED_BY(state_->mu) = 0;
  int64_t epoch_ GUARDED_BY(state_->mu) = 0;          // the epoch Next() hands out
  int64_t fetch_epoch_ GUARDED_BY(state_->mu) = 0;    // the epoch `order_` and `cursor_` belong to
  std::vector<int64_t> order_ GUARDED_BY(state_->mu);
  int64_t cursor_ GUARDED_BY(state_->mu) = 0;         // next position in the epoch order to fetch
  int64_t fill_slot_ GUARDED_BY(state_->mu) = -1;     // the slot of the batch `cursor_` is in
  int64_t consume_batch_ GUARDED_BY(state_->mu) = 0;  // next batch Next() hands out
  int64_t num_batches_ GUARDED_BY(state_->mu) = 0;
  std::vector<SlotWork> work_ GUARDED_BY(state_->mu);
  std::deque<FetchedItem> prep_queue_ GUARDED_BY(state_->mu);
  bool async_ = false;         // reads through Source::ReadAsync (set before the threads start)
  std::atomic<int> read_limit_{4};  // async: reads in flight allowed now
  int64_t io_cpu_at_start_ = 0;     // the source's I/O thread CPU before this pipeline
  std::condition_variable reads_done_cv_;  // async: fetching_ fell to 0
  int fetching_ GUARDED_BY(state_->mu) = 0;
  int active_preps_ GUARDED_BY(state_->mu) = 0;
  std::vector<std::vector<uint8_t>> free_buffers_ GUARDED_BY(state_->mu);

  StageCounters fetch_, prep_, batch_;
  std::atomic<int64_t> samples_{0}, delivered_{0}, errors_{0}, skipped_{0};
  std::atomic<int64_t> empty_dropped_{0}, private_copies_{0};
  // The ring is this loader's own (not a shared producer's, whose slots it
  // publishes): batches may then be dropped when empty or copied out.
  bool own_ring_ = true;
  ConsumerRecorder consumer_;
};

}  // namespace nostall

#endif  // NOSTALL_PIPELINE_PIPELINE_LOADER_H_
