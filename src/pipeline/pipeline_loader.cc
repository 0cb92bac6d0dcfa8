// The pipeline: fetch and prep pools around bounded queues and the ring.
//
// One mutex guards the scheduling state (cursor, slot states, prep queue);
// it is held only to hand work over, never during I/O or decoding. Work
// flows in sample order: fetch threads take the next sample position, once
// its batch's slot is free; prep threads decode it straight into its place in
// that slot; the thread that finishes a batch's last sample publishes it.
// Every wait is timed into the stats. Shutdown: set `cancelled_`, notify
// every condition variable, join every thread.
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
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
#include "pipeline/pipeline.h"
#include "ring/ring.h"

namespace nostall {

namespace {

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
        created_ns_(NowNs()) {}

  ~PipelineLoader() override {
    {
      MutexLock lock(&state_->mu);
      cancelled_ = true;
    }
    state_->slot_freed.notify_all();
    work_cv_.notify_all();
    prep_cv_.notify_all();
    ready_cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // `ring`: a named ring to fill (the shared producer's); null: a private one.
  Status Init(std::shared_ptr<ring::Segment> ring) {
    state_ = std::make_shared<RingState>();  // first: the destructor locks its mutex
    if (ring == nullptr) {
      ring::RingLayout l;
      l.slot_count = static_cast<uint32_t>(PipelineSlots(spec_));
      l.chunk = spec_.batch_size;
      l.sample_bytes = sample_bytes_;
      const std::vector<int64_t> shape = SampleShape();
      for (size_t i = 0; i < 3 && i < shape.size(); ++i) l.shape[i] = shape[i];
      l.dtype = spec_.prep.dtype == DType::kFloat32 ? 1 : 0;
      l.samples_per_epoch = sampler_.SamplesPerEpoch();
      l.chunks_per_epoch = sampler_.BatchesPerEpoch();
      l.spec_fingerprint = spec_.Fingerprint();
      l.dataset_fingerprint = source_->fingerprint();
      l.spec_json = spec_.ToJson();
      NOSTALL_ASSIGN_OR_RETURN(ring, ring::CreateRing("", l));
    }
    if (ring->g.chunk != spec_.batch_size || ring->g.sample_bytes != sample_bytes_) {
      return Internal("the ring's slots do not fit the pipeline's batches");
    }
    state_->seg = std::move(ring);
    {
      MutexLock lock(&state_->mu);
      state_->slots.resize(state_->seg->g.slot_count);
      work_.resize(state_->seg->g.slot_count);
      for (auto& w : work_) w.bad.assign(static_cast<size_t>(spec_.batch_size), 0);
    }
    // Fetched items wait here for a prep thread. The bound counts the reads
    // in flight too (memory stays bounded), but it must leave room for every
    // fetcher: bounded by the queue alone, items waiting for prep would take
    // the places of reads and fewer than reads_in_flight reads would run
    // whenever prep is busy (on slow storage, a loss of throughput).
    prep_queue_cap_ =
        static_cast<size_t>(spec_.reads_in_flight + std::max(8, 2 * spec_.num_threads));
    try {
      for (int i = 0; i < spec_.reads_in_flight; ++i) threads_.emplace_back([this] { FetchLoop(); });
      for (int i = 0; i < spec_.num_threads; ++i) threads_.emplace_back([this] { PrepLoop(); });
    } catch (const std::system_error& e) {
      // The threads already started are joined by the destructor.
      return ResourceExhausted("cannot start the loader's " +
                               std::to_string(spec_.reads_in_flight + spec_.num_threads) +
                               " threads (" + e.what() + "); lower num_threads or reads_in_flight");
    }
    return Status::OK();
  }

  Status StartEpoch(int64_t epoch, int64_t first_batch) override {
    if (epoch < 0) return InvalidArgument("epoch must be >= 0");
    const int64_t nb = sampler_.BatchesPerEpoch();
    if (first_batch < 0 || first_batch > nb) {
      return InvalidArgument("batch " + std::to_string(first_batch) + " is outside the epoch's " +
                             std::to_string(nb) + " batches");
    }
    MutexLock lock(&state_->mu);
    if (first_batch == 0 && started_ && fetch_epoch_ == epoch && epoch_ != epoch) {
      // The fetchers ran on into this epoch when the last one ran out: keep
      // that work. Batches of other epochs still being made finish first,
      // then every slot not holding this epoch (or leased) is freed.
      auto other_epoch_filling = [&]() REQUIRES(state_->mu) {
        for (uint64_t s = 0; s < state_->slots.size(); ++s) {
          const PipelineSlot& h = state_->slots[s];
          if (h.state == SlotState::kFilling && h.epoch != epoch) {
            return true;
          }
        }
        return false;
      };
      while (!cancelled_ && other_epoch_filling()) ready_cv_.wait(lock.native());
      for (uint64_t s = 0; s < state_->slots.size(); ++s) {
        PipelineSlot& h = state_->slots[s];
        if (h.state == SlotState::kReady && h.epoch != epoch) {
          h.state = SlotState::kFree;
        }
      }
      epoch_ = epoch;
      consume_batch_ = 0;
      num_batches_ = nb;
      consumer_.EpochStarted();
      lock.Unlock();
      state_->slot_freed.notify_all();
      return Status::OK();
    }
    lock.Unlock();
    std::vector<int64_t> order = sampler_.EpochOrder(epoch);  // outside the lock
    lock.Lock();
    ++generation_;
    // Work of the old epoch already running must finish before its slots
    // are handed to the new one; it takes one decode at most. Meanwhile no
    // fetcher may start a batch: it would carry the new generation with the
    // old epoch's position, and its samples would land in a slot of the new
    // epoch (a resumed epoch with another epoch's samples in it).
    restarting_ = true;
    while (active_preps_ != 0) idle_cv_.wait(lock.native());
    for (auto& item : prep_queue_) free_buffers_.push_back(std::move(item.bytes));
    prep_queue_.clear();
    for (uint64_t s = 0; s < state_->slots.size(); ++s) {
      PipelineSlot& h = state_->slots[s];
      if (h.state != SlotState::kLeased) {
        h.state = SlotState::kFree;
      }
    }
    epoch_ = epoch;
    fetch_epoch_ = epoch;
    order_ = std::move(order);
    cursor_ = first_batch * spec_.batch_size;
    fill_slot_ = -1;
    consume_batch_ = first_batch;
    num_batches_ = nb;
    started_ = true;
    restarting_ = false;
    consumer_.EpochStarted();
    lock.Unlock();
    work_cv_.notify_all();
    state_->slot_freed.notify_all();
    return Status::OK();
  }

  Status Next(int64_t timeout_ms, NextStatus* status, std::shared_ptr<Batch>* out) override {
    const int64_t t0 = NowNs();
    MutexLock lock(&state_->mu);
    if (!started_) return FailedPrecondition("StartEpoch was not called");
    consumer_.CallStarted(epoch_, t0);
    if (consume_batch_ >= num_batches_) {
      *status = NextStatus::kEndOfEpoch;
      return Status::OK();
    }
    int64_t found = -1;
    bool starved_by_caller = false;
    auto ready = [&]() REQUIRES(state_->mu) {
      found = FindSlot(SlotState::kReady, consume_batch_);
      // Every slot leased to the caller: no batch can be made until it lets
      // one go, so waiting would be forever.
      starved_by_caller = found < 0 && AllSlotsLeased();
      return cancelled_ || found >= 0 || starved_by_caller;
    };
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0));
    bool ok = true;
    while (!ready()) {
      if (timeout_ms < 0) {
        ready_cv_.wait(lock.native());
      } else if (ready_cv_.wait_until(lock.native(), deadline) == std::cv_status::timeout) {
        ok = ready();
        break;
      }
    }
    const int64_t waited = NowNs() - t0;
    consumer_.Waited(epoch_, waited);
    if (!ok) {
      consumer_.TimedOut();
      *status = NextStatus::kTimeout;
      return Status::OK();
    }
    if (cancelled_) return Cancelled("loader shut down");
    if (starved_by_caller) {
      return FailedPrecondition(
          "all " + std::to_string(state_->slots.size()) +
          " batch slots are held by batches still referenced, so no new batch can be made; "
          "drop references to old batches, or keep copies (copy=True), or raise prefetch");
    }
    const uint64_t s = static_cast<uint64_t>(found);
    PipelineSlot& h = state_->slots[s];
    const int64_t index = consume_batch_++;
    SlotWork& w = work_[s];
    // Counted as the caller meets them, not as made (the pipeline may be
    // working ahead, even into the next epoch).
    errors_.fetch_add(w.bad_items);
    skipped_.fetch_add(w.skipped);
    if (!w.error.ok()) {
      consumer_.Delivered(epoch_, 0, NowNs());  // the caller met the batch, as an error
      Status err = w.error;
      w.error = Status::OK();
      h.state = SlotState::kFree;
      lock.Unlock();
      state_->slot_freed.notify_all();
      return err;
    }
    h.state = SlotState::kLeased;
    h.leases = 1;
    samples_.fetch_add(h.count);
    delivered_.fetch_add(1);
    consumer_.Delivered(epoch_, h.count, NowNs());
    *out = std::make_shared<LeasedBatch>(state_, s, epoch_, index, h.count);
    *status = NextStatus::kBatch;
    return Status::OK();
  }

  LoaderStats Stats() const override {
    LoaderStats st;
    st.fetch = fetch_.Snapshot(spec_.reads_in_flight);
    st.prep = prep_.Snapshot(spec_.num_threads);
    st.batch = batch_.Snapshot(0);
    st.batches = delivered_.load();
    st.samples = samples_.load();
    st.errors = errors_.load();
    st.skipped = skipped_.load() + source_->skipped_at_index();
    consumer_.Fill(&st);
    st.elapsed_ns = NowNs() - created_ns_;
    st.ring_bytes = state_->seg->mapping.size();
    st.ring_slots = static_cast<int64_t>(state_->slots.size());
    if (cache_) {
      CacheStats cs = cache_->Stats();
      st.has_cache = true;
      st.cache_name = spec_.cache_name;
      st.cache_budget_bytes = cs.budget_bytes;
      st.cache_used_bytes = cs.used_bytes;
      st.cache_items = cs.items;
      for (const CacheStats& t : cache_->TierStats()) {
        st.cache_tiers.push_back(
            {t.tier, t.budget_bytes, t.used_bytes, t.items, t.hits, t.misses, t.errors});
      }
      st.cache_inserted_bytes = cache_inserted_bytes_.load();
      MutexLock lock(&cache_mu_);
      for (const auto& [epoch, counts] : cache_epochs_) st.cache_epochs.push_back(counts);
    }
    return st;
  }

  const Source& source() const override { return *source_; }
  const Sampler& sampler() const override { return sampler_; }

  Status EvictPageCache() const override {
    for (int64_t i : sampler_.Items()) {
      Status st = source_->Evict(i);
      if (!st.ok()) return st.WithItem(source_->key(i), "fetch");
    }
    return Status::OK();
  }
  const LoaderSpec& spec() const override { return spec_; }
  std::vector<int64_t> SampleShape() const override {
    return SampleShapeOf(spec_.prep, out_h_, out_w_);
  }

 private:
  int64_t SamplesThisEpoch() const REQUIRES(state_->mu) { return static_cast<int64_t>(order_.size()); }
  int64_t BatchCount(int64_t b) const REQUIRES(state_->mu) {
    return std::min<int64_t>(spec_.batch_size, SamplesThisEpoch() - b * spec_.batch_size);
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

  void CountCache(int64_t epoch, bool hit, bool error, size_t bytes) EXCLUDES(cache_mu_) {
    MutexLock lock(&cache_mu_);
    auto& e = cache_epochs_[epoch];
    e.epoch = epoch;
    (hit ? e.hits : e.misses) += 1;
    e.errors += error ? 1 : 0;
    (hit ? e.hit_bytes : e.miss_bytes) += static_cast<int64_t>(bytes);
  }

  bool AllSlotsLeased() const REQUIRES(state_->mu) {
    for (uint64_t i = 0; i < state_->slots.size(); ++i) {
      if (state_->slots[i].state != SlotState::kLeased) {
        return false;
      }
    }
    return true;
  }

  void FetchLoop() {
    MutexLock lock(&state_->mu);
    while (true) {
      // Starved: no sample left to fetch. Blocked: the next batch's slot is
      // still in use, or the prep queue is full.
      int64_t t0 = NowNs();
      bool blocked = false;
      while (!cancelled_) {
        if (restarting_ || !started_ || (cursor_ >= SamplesThisEpoch() && fetch_epoch_ != epoch_)) {
          blocked = false;  // nothing to fetch until the caller starts an epoch
        } else if (cursor_ >= SamplesThisEpoch()) {
          // This epoch is all dispatched: run on into the next one, so its
          // first batches are ready when the caller asks (no bubble between
          // epochs). StartEpoch keeps this work if it asks for that epoch.
          const int64_t current = epoch_;
          lock.Unlock();
          std::vector<int64_t> next = sampler_.EpochOrder(current + 1);
          lock.Lock();
          if (epoch_ == current && fetch_epoch_ == current && cursor_ >= SamplesThisEpoch() &&
              !cancelled_) {
            fetch_epoch_ = current + 1;
            order_ = std::move(next);
            cursor_ = 0;
            fill_slot_ = -1;
          }
          continue;
        } else {
          // A new batch needs a free slot; any will do, so a batch the
          // caller still holds never blocks the ones after it.
          const bool have_slot = cursor_ % spec_.batch_size != 0 && fill_slot_ >= 0;
          if ((have_slot || FindSlot(SlotState::kFree, -1) >= 0) &&
              prep_queue_.size() + fetching_ < prep_queue_cap_) {
            break;
          }
          blocked = true;
        }
        if (blocked) {
          state_->slot_freed.wait(lock.native());
        } else {
          work_cv_.wait(lock.native());
        }
      }
      (blocked ? fetch_.blocked_ns : fetch_.starved_ns).fetch_add(NowNs() - t0);
      if (cancelled_) return;
      const int64_t pos_in_epoch = cursor_++;
      const int64_t b = pos_in_epoch / spec_.batch_size;
      if (pos_in_epoch % spec_.batch_size == 0 || fill_slot_ < 0) {
        const uint64_t s = static_cast<uint64_t>(FindSlot(SlotState::kFree, -1));
        PipelineSlot& h = state_->slots[s];
        h.epoch = fetch_epoch_;
        h.batch_index = b;
        h.count = BatchCount(b);
        h.state = SlotState::kFilling;
        work_[s].remaining = h.count;
        work_[s].error = Status::OK();
        work_[s].error_pos = -1;
        work_[s].bad_items = 0;
        work_[s].skipped = 0;
        std::fill(work_[s].bad.begin(), work_[s].bad.end(), 0);
        fill_slot_ = static_cast<int64_t>(s);
      }
      FetchedItem fi;
      fi.generation = generation_;
      fi.epoch = fetch_epoch_;
      fi.batch = b;
      fi.slot = static_cast<uint64_t>(fill_slot_);
      fi.pos = pos_in_epoch % spec_.batch_size;
      fi.item = order_[static_cast<size_t>(pos_in_epoch)];
      if (!free_buffers_.empty()) {
        fi.bytes = std::move(free_buffers_.back());
        free_buffers_.pop_back();
      }
      fetch_.InFlight(++fetching_);
      lock.Unlock();

      const int64_t cpu0 = ThreadCpuNs(), wall0 = NowNs();
      // A tier that cannot answer costs a hit, never the item: it is read from storage.
      Result<bool> hit = cache_ ? cache_->Lookup(fi.item, &fi.bytes) : Result<bool>(false);
      if (hit.ok() && hit.value()) {
        CountCache(fi.epoch, /*hit=*/true, !hit.ok(), fi.bytes.size());
      } else {
        fi.status = source_->Read(fi.item, &fi.bytes);
        if (cache_) {
          CountCache(fi.epoch, /*hit=*/false, !hit.ok(), fi.bytes.size());
          if (fi.status.ok() && cache_->Insert(fi.item, fi.bytes.data(), fi.bytes.size())) {
            cache_inserted_bytes_.fetch_add(static_cast<int64_t>(fi.bytes.size()));
          }
        }
      }
      if (!fi.status.ok()) {
        // A file that vanished or cannot be read is a bad item, handled by
        // the error policy; running out of descriptors is not the item's fault.
        StatusCode code = fi.status.code() == StatusCode::kResourceExhausted
                              ? fi.status.code()
                              : StatusCode::kDataError;
        fi.status = Status(code, fi.status.message()).WithItem(source_->key(fi.item), "fetch");
      }
      fetch_.busy_cpu_ns.fetch_add(ThreadCpuNs() - cpu0);
      fetch_.work_ns.fetch_add(NowNs() - wall0);
      fetch_.items.fetch_add(1);
      fetch_.bytes.fetch_add(static_cast<int64_t>(fi.bytes.size()));

      lock.Lock();
      --fetching_;
      prep_queue_.push_back(std::move(fi));
      prep_cv_.notify_one();
    }
  }

  void PrepLoop() {
    PrepScratch scratch;
    MutexLock lock(&state_->mu);
    while (true) {
      int64_t t0 = NowNs();
      while (!cancelled_ && prep_queue_.empty()) prep_cv_.wait(lock.native());
      prep_.starved_ns.fetch_add(NowNs() - t0);
      if (cancelled_) return;
      FetchedItem fi = std::move(prep_queue_.front());
      prep_queue_.pop_front();
      state_->slot_freed.notify_all();  // room in the prep queue for a fetcher
      if (fi.generation != generation_) {
        free_buffers_.push_back(std::move(fi.bytes));
        continue;
      }
      const uint64_t s = fi.slot;
      ++active_preps_;
      lock.Unlock();

      const int64_t cpu0 = ThreadCpuNs(), wall0 = NowNs();
      Status st = fi.status;
      uint8_t* dst = state_->seg->images(s) + static_cast<size_t>(fi.pos) * sample_bytes_;
      if (st.ok()) {
        st = PrepareSample(spec_.prep, fi.bytes.data(), fi.bytes.size(),
                           {spec_.seed, fi.epoch, fi.item}, out_h_, out_w_, dst, &scratch);
        if (!st.ok()) st = st.WithItem(source_->key(fi.item), "decode");
      }
      state_->seg->labels(s)[fi.pos] = source_->label(fi.item);
      state_->seg->indices(s)[fi.pos] = fi.item;
      prep_.busy_cpu_ns.fetch_add(ThreadCpuNs() - cpu0);
      prep_.work_ns.fetch_add(NowNs() - wall0);
      prep_.items.fetch_add(1);
      prep_.bytes.fetch_add(static_cast<int64_t>(sample_bytes_));

      lock.Lock();
      --active_preps_;
      if (active_preps_ == 0) idle_cv_.notify_all();
      free_buffers_.push_back(std::move(fi.bytes));
      SlotWork& w = work_[s];
      if (!st.ok()) {
        ++w.bad_items;
        if (spec_.on_error == ErrorPolicy::kSkip) {
          w.bad[static_cast<size_t>(fi.pos)] = 1;
        } else if (w.error_pos < 0 || fi.pos < w.error_pos) {
          w.error = st;
          w.error_pos = fi.pos;
        }
      }
      if (--w.remaining == 0) {
        ++active_preps_;  // the slot is ours alone until published
        lock.Unlock();
        FinishBatch(s);
        lock.Lock();
        --active_preps_;
        if (active_preps_ == 0) idle_cv_.notify_all();
        if (fi.generation == generation_) {
          state_->slots[s].state = SlotState::kReady;
          ready_cv_.notify_all();
        }
      }
    }
  }

  // Closes the holes that skipped samples left, keeping the order of the
  // good ones; this is the only copy of pixels nostall ever makes, and only
  // when a batch had bad items. Runs without the lock: the slot's last
  // sample is done and it is not yet READY, so no other thread touches its
  // work entry (the analysis cannot see that ownership).
  void FinishBatch(uint64_t s) NO_THREAD_SAFETY_ANALYSIS {
    const int64_t cpu0 = ThreadCpuNs();
    PipelineSlot& h = state_->slots[s];
    SlotWork& w = work_[s];
    int64_t kept = 0;
    uint8_t* images = state_->seg->images(s);
    int64_t* labels = state_->seg->labels(s);
    int64_t* indices = state_->seg->indices(s);
    for (int64_t p = 0; p < h.count; ++p) {
      if (w.bad[static_cast<size_t>(p)]) {
        ++w.skipped;
        continue;
      }
      if (kept != p) {
        std::memmove(images + kept * sample_bytes_, images + p * sample_bytes_, sample_bytes_);
        labels[kept] = labels[p];
        indices[kept] = indices[p];
      }
      ++kept;
    }
    h.count = kept;
    batch_.items.fetch_add(1);
    batch_.bytes.fetch_add(kept * static_cast<int64_t>(sample_bytes_));
    batch_.busy_cpu_ns.fetch_add(ThreadCpuNs() - cpu0);
  }

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

  std::shared_ptr<RingState> state_;  // its mutex guards everything below
  std::condition_variable work_cv_;   // an epoch began (fetchers wait for positions)
  std::condition_variable prep_cv_;   // the prep queue gained an item
  std::condition_variable ready_cv_;  // a batch became ready
  std::condition_variable idle_cv_;   // no prep work is running
  std::vector<std::thread> threads_;
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
  size_t prep_queue_cap_ = 8;  // set before the threads start
  int fetching_ GUARDED_BY(state_->mu) = 0;
  int active_preps_ GUARDED_BY(state_->mu) = 0;
  std::vector<std::vector<uint8_t>> free_buffers_ GUARDED_BY(state_->mu);

  StageCounters fetch_, prep_, batch_;
  std::atomic<int64_t> samples_{0}, delivered_{0}, errors_{0}, skipped_{0};
  ConsumerRecorder consumer_;
};

}  // namespace

uint64_t PipelineSlots(const LoaderSpec& spec) { return static_cast<uint64_t>(spec.prefetch) + 2; }

Result<std::unique_ptr<Loader>> StartPipeline(PipelineParts parts,
                                              std::shared_ptr<ring::Segment> ring) {
  auto loader = std::make_unique<PipelineLoader>(std::move(parts));
  NOSTALL_RETURN_IF_ERROR(loader->Init(std::move(ring)));
  return std::unique_ptr<Loader>(std::move(loader));
}

}  // namespace nostall
