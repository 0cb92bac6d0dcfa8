// The pipeline loader, the consumer's side: creating the ring, starting
// epochs (and resuming mid-epoch), handing out batches, stats. The workers
// are workers.cc; the class and its locking rules pipeline_loader.h.
#include "pipeline/pipeline_loader.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

#include "ops/prep.h"

namespace nostall {

PipelineLoader::~PipelineLoader() {
  {
    MutexLock lock(&state_->mu);
    cancelled_ = true;
  }
  tune_cv_.notify_all();
  if (tuner_thread_.joinable()) tuner_thread_.join();  // first: it starts workers
  state_->slot_freed.notify_all();
  work_cv_.notify_all();
  prep_cv_.notify_all();
  park_cv_.notify_all();
  ready_cv_.notify_all();
  for (auto& t : threads_) t.join();
  if (async_) {
    // Reads still in flight call back into this object: cancel them (the
    // source answers them at once) and wait for the last answer.
    source_->CancelReads();
    MutexLock lock(&state_->mu);
    while (fetching_ != 0) reads_done_cv_.wait(lock.native());
  }
}

Status PipelineLoader::Init(std::shared_ptr<ring::Segment> ring) {
  state_ = std::make_shared<RingState>();  // first: the destructor locks its mutex
  const bool own_ring = ring == nullptr;
  own_ring_ = own_ring;
  if (ring == nullptr) {
    ring::RingLayout l;
    // Tuned prefetch: slots for the most it may take, memory reserved for
    // the first ones (the rest are reserved as the tuner takes them).
    // One slot more than batches may take: the spare, used only while the
    // caller holds every other slot (Next: then batches leave as copies).
    l.slot_count =
        static_cast<uint32_t>(tune_.prefetch ? tune_.max_prefetch + 2 : PipelineSlots(spec_)) + 1;
    l.reserved_slots = static_cast<uint32_t>(PipelineSlots(spec_)) + 1;
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
  // Fetched items wait for a prep thread in the prep queue. Its bound
  // counts the reads in flight too (memory stays bounded), but it leaves
  // room for every read: bounded by the queue alone, items waiting for prep
  // would take the places of reads and fewer than reads_in_flight reads
  // would run whenever prep is busy (on slow storage, a loss of
  // throughput). RoomToFetch.
  async_ = source_->ReadsAsync();
  if (async_) {
    read_limit_ = spec_.reads_in_flight > 0 ? spec_.reads_in_flight : kFirstAutoReads;
    if (std::optional<StorageStats> remote = source_->storage_stats()) {
      io_cpu_at_start_ = remote->io_cpu_ns;
    }
  }
  MutexLock lock(&state_->mu);
  prep_active_ = spec_.num_threads;
  fetch_active_ = async_ ? 0 : spec_.reads_in_flight;
  // A named ring (the shared producer's) is all the pipeline's: its owner
  // holds the slots it keeps for consumers.
  slot_limit_ = own_ring ? static_cast<int64_t>(PipelineSlots(spec_))
                         : static_cast<int64_t>(state_->slots.size());
  slots_reserved_ = slot_limit_ + (own_ring ? 1 : 0);
  try {
    if (async_) threads_.emplace_back([this] { DispatchLoop(); });
    StartWorkers();
    if (tune_.threads || tune_.reads || tune_.prefetch) {
      AutotuneSettings start{spec_.num_threads, async_ ? read_limit_.load() : spec_.reads_in_flight,
                             spec_.prefetch};
      AutotuneLimits limits = tune_;
      limits.prefetch = limits.prefetch && own_ring;  // a named ring is sized by its owner
      autotuner_ = std::make_unique<Autotuner>(limits, start);
      {
        MutexLock tl(&tune_mu_);
        tuned_now_ = start;
      }
      tuner_thread_ = std::thread([this] { AutotuneLoop(); });
    }
  } catch (const std::system_error& e) {
    // The threads already started are joined by the destructor.
    return ResourceExhausted("cannot start the loader's " +
                             std::to_string((async_ ? 1 : spec_.reads_in_flight) + spec_.num_threads) +
                             " threads (" + e.what() + "); lower num_threads or reads_in_flight");
  }
  return Status::OK();
}

Status PipelineLoader::StartEpoch(int64_t epoch, int64_t first_batch) {
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

Status PipelineLoader::Next(int64_t timeout_ms, NextStatus* status, std::shared_ptr<Batch>* out) {
  const int64_t t0 = NowNs();
  MutexLock lock(&state_->mu);
  if (!started_) return FailedPrecondition("StartEpoch was not called");
  consumer_.CallStarted(epoch_, t0);
next_batch:
  if (consume_batch_ >= num_batches_) {
    *status = NextStatus::kEndOfEpoch;
    return Status::OK();
  }
  int64_t found = -1;
  bool starved_by_caller = false;
  auto ready = [&]() REQUIRES(state_->mu) {
    found = FindSlot(SlotState::kReady, consume_batch_);
    // Every slot leased to the caller: no batch can be made until it lets
    // one go, so waiting would be forever. Its own ring has a spare slot
    // for that: the next batch is made there and leaves as a copy.
    starved_by_caller = found < 0 && AllSlotsLeased();
    if (starved_by_caller && own_ring_ && !spare_open_) {
      spare_open_ = true;
      starved_by_caller = false;
      work_cv_.notify_all();
      state_->slot_freed.notify_all();
    }
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
    // A loader's own ring opens its spare slot instead (above); a shared
    // producer's ring, which has none, gets here.
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
  if (h.count == 0 && own_ring_) {
    // Every item of the batch was skipped: a batch of no samples would make
    // the caller's loss NaN. Dropped (counted), and the next one is taken.
    empty_dropped_.fetch_add(1);
    h.state = SlotState::kFree;
    lock.Unlock();
    state_->slot_freed.notify_all();
    lock.Lock();
    goto next_batch;
  }
  samples_.fetch_add(h.count);
  delivered_.fetch_add(1);
  consumer_.Delivered(epoch_, h.count, NowNs());
  h.state = SlotState::kLeased;
  h.leases = 1;
  if (own_ring_ && LeasedSlots() > slot_limit_) {
    // The caller holds every other slot (list(loader), batches kept for
    // evaluation): this one leaves as a private copy and its slot is
    // refilled, so the pipeline goes on. Zero-copy resumes once the caller
    // lets old batches go.
    private_copies_.fetch_add(1);
    *out = std::make_shared<CopiedBatch>(*state_->seg, static_cast<uint32_t>(s), epoch_, index,
                                         h.count,
                                         static_cast<size_t>(h.count) * sample_bytes_);
    h.state = SlotState::kFree;
    h.leases = 0;
    spare_open_ = false;
    lock.Unlock();
    state_->slot_freed.notify_all();
    *status = NextStatus::kBatch;
    return Status::OK();
  }
  *out = std::make_shared<LeasedBatch>(state_, s, epoch_, index, h.count);
  *status = NextStatus::kBatch;
  return Status::OK();
}

LoaderStats PipelineLoader::Stats() const {
  LoaderStats st;
  int reads = 0, threads = 0;
  int64_t consumer_epoch = 0;
  {
    MutexLock lock(&state_->mu);
    consumer_epoch = started_ ? epoch_ : -1;
    reads = ReadLimitNow();
    threads = prep_active_;
    st.ring_slots = slot_limit_;
  }
  st.fetch = fetch_.Snapshot(reads);
  st.reads_in_flight_target = reads;
  st.prep = prep_.Snapshot(threads);
  st.batch = batch_.Snapshot(0);
  st.batches = delivered_.load();
  st.samples = samples_.load();
  st.errors = errors_.load();
  st.skipped = skipped_.load() + source_->skipped_at_index();
  st.empty_batches_dropped = empty_dropped_.load();
  st.private_copies = private_copies_.load();
  consumer_.Fill(&st);
  st.elapsed_ns = NowNs() - created_ns_;
  st.ring_bytes = state_->seg->g.data_offset + state_->seg->g.slot_stride * static_cast<uint64_t>(st.ring_slots);
  if (autotuner_) {
    const AutotuneLimits& l = autotuner_->limits();
    st.has_autotune = true;
    if (l.threads) st.autotune_knobs.push_back("threads");
    if (l.reads) st.autotune_knobs.push_back("reads_in_flight");
    if (l.prefetch) st.autotune_knobs.push_back("prefetch");
    MutexLock lock(&tune_mu_);
    st.autotune_threads = tuned_now_.threads;
    st.autotune_reads = tuned_now_.reads;
    st.autotune_prefetch = tuned_now_.prefetch;
    st.autotune_decisions = decisions_;
    st.autotune_changes = changes_;
  }
  if (std::optional<StorageStats> remote = source_->storage_stats()) {
    st.has_storage = true;
    st.storage = *remote;
    // The I/O thread's CPU is the fetch stage's (requests, bodies).
    if (async_) st.fetch.busy_cpu_ns += remote->io_cpu_ns - io_cpu_at_start_;
  }
  if (cache_) {
    CacheStats cs = cache_->Stats();
    st.has_cache = true;
    st.cache_name = spec_.cache_name;
    st.cache_budget_bytes = cs.budget_bytes;
    st.cache_used_bytes = cs.used_bytes;
    st.cache_items = cs.items;
    for (const CacheStats& t : cache_->TierStats()) {
      st.cache_tiers.push_back({t.tier, t.budget_bytes, t.used_bytes, t.items, t.hits, t.misses,
                                t.errors, t.lookups, t.lookup_ns, t.hit_bytes});
    }
    st.cache_inserted_bytes = cache_inserted_bytes_.load();
    MutexLock lock(&cache_mu_);
    // Epochs the caller has reached: the fetchers read ahead into the next
    // one, which is not an epoch the caller ran (yet).
    for (const auto& [epoch, counts] : cache_epochs_) {
      if (epoch <= consumer_epoch) st.cache_epochs.push_back(counts);
    }
  }
  return st;
}

Status PipelineLoader::EvictPageCache() const {
  for (int64_t i : sampler_.Items()) {
    Status st = source_->Evict(i);
    if (!st.ok()) return st.WithItem(source_->key(i), "fetch");
  }
  return Status::OK();
}

void PipelineLoader::CountCache(int64_t epoch, bool hit, bool error, size_t bytes) {
  MutexLock lock(&cache_mu_);
  auto& e = cache_epochs_[epoch];
  e.epoch = epoch;
  (hit ? e.hits : e.misses) += 1;
  e.errors += error ? 1 : 0;
  (hit ? e.hit_bytes : e.miss_bytes) += static_cast<int64_t>(bytes);
}

uint64_t PipelineSlots(const LoaderSpec& spec) {
  return static_cast<uint64_t>(spec.prefetch < 0 ? kDefaultPrefetch : spec.prefetch) + 2;
}

Result<std::unique_ptr<Loader>> StartPipeline(PipelineParts parts,
                                              std::shared_ptr<ring::Segment> ring) {
  auto loader = std::make_unique<PipelineLoader>(std::move(parts));
  NOSTALL_RETURN_IF_ERROR(loader->Init(std::move(ring)));
  return std::unique_ptr<Loader>(std::move(loader));
}

}  // namespace nostall
