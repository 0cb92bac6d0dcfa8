// The pipeline loader (pipeline_loader.h): the ring, the threads, the
// stats, and the knobs as the tuner turns them.
#include "pipeline/pipeline_loader.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "common/clock.h"
#include "ops/prep.h"
#include "nostall/model.h"

namespace nostall {

PipelineLoader::PipelineLoader(PipelineParts parts)
    : spec_(std::move(parts.spec)),
      source_(std::move(parts.source)),
      cache_(std::move(parts.cache)),
      sampler_(std::move(*parts.sampler)),
      out_h_(parts.out_h),
      out_w_(parts.out_w),
      created_ns_(NowNs()),
      tune_(parts.tune),
      adapt_requests_(parts.adapt_requests),
      consumer_waited_ns_(std::move(parts.consumer_waited_ns)),
      fetcher_(*source_, cache_.get(), spec_.prep.sample_kind().ReadsPart()) {}

PipelineLoader::~PipelineLoader() {
  tuner_.reset();  // first: it starts workers
  if (scheduler_ == nullptr) return;
  scheduler_->Cancel();
  // A fetch thread may be waiting for a shard being indexed as it is read
  // (the buffered first epoch): the index's requests are cancelled too, so
  // it does not wait out that shard.
  if (fetcher_.async() && !sampler_.counts_known()) source_->CancelReads();
  for (auto& t : threads_) t.join();
  if (fetcher_.async()) {
    // Reads still in flight call back into this object: cancel them (the
    // source answers them at once) and wait for the last answer.
    source_->CancelReads();
    scheduler_->WaitForReads();
  }
}

// A private ring: slots for the most prefetch the tuner may take, memory
// reserved for the first ones (the rest are reserved as the tuner takes
// them), and one slot more than batches may take: the spare, used only
// while the caller holds every other slot (then batches leave as copies).
Result<std::shared_ptr<ring::Segment>> PipelineLoader::MakeRing() const {
  ring::RingLayout l;
  l.slot_count =
      static_cast<uint32_t>(tune_.prefetch ? tune_.max_prefetch + 2 : PipelineSlots(spec_)) + 1;
  l.reserved_slots = static_cast<uint32_t>(PipelineSlots(spec_)) + 1;
  l.chunk = spec_.batch_size;
  // (A private ring; while its shards are being indexed these are not
  // known, and no consumer reads them.)
  const bool known = sampler_.counts_known();
  l.samples_per_epoch = known ? sampler_.SamplesPerEpoch() : 0;
  l.chunks_per_epoch = known ? sampler_.BatchesPerEpoch() : 0;
  l.spec_fingerprint = spec_.Fingerprint();
  l.dataset_fingerprint = known ? source_->fingerprint() : 0;
  l.spec_json = spec_.ToJson();
  SetSampleLayout(spec_, *source_, out_h_, out_w_, &l);
  return ring::CreateRing("", l);
}

Status PipelineLoader::Init(std::shared_ptr<ring::Segment> ring) {
  own_ring_ = ring == nullptr;
  if (own_ring_) {
    NOSTALL_ASSIGN_OR_RETURN(ring, MakeRing());
  }
  const size_t sample_bytes = SampleBytes(spec_.prep, out_h_, out_w_);
  bool fields_fit = ring->g.field_count == static_cast<uint32_t>(source_->extra_fields());
  for (int f = 0; fields_fit && f < source_->extra_fields(); ++f) {
    fields_fit = ring->g.field_room[f] >= FieldRoom(spec_, *source_, f, out_h_, out_w_);
  }
  if (ring->g.chunk != spec_.batch_size || ring->g.sample_bytes != sample_bytes || !fields_fit) {
    return Internal("the ring's slots do not fit the pipeline's batches");
  }
  ring_ = std::make_shared<RingState>();
  ring_->seg = std::move(ring);
  const size_t slots = ring_->seg->g.slot_count;
  {
    MutexLock lock(&ring_->mu);
    ring_->slots.resize(slots);
  }
  const bool async = fetcher_.async();
  Scheduler::Options o;
  o.batch_size = spec_.batch_size;
  o.own_ring = own_ring_;
  o.async = async;
  // A named ring (the shared producer's) is all the pipeline's: its owner
  // holds the slots it keeps for consumers.
  o.slot_limit = own_ring_ ? static_cast<int64_t>(PipelineSlots(spec_)) : static_cast<int64_t>(slots);
  o.prep_threads = spec_.num_threads;
  o.fetch_threads = async ? 0 : spec_.reads_in_flight;
  o.read_limit = !async ? 0 : spec_.reads_in_flight > 0 ? spec_.reads_in_flight : kFirstAutoReads;
  o.on_error_skip = spec_.on_error == ErrorPolicy::kSkip;
  slots_reserved_ = o.slot_limit + (own_ring_ ? 1 : 0);
  preparer_ = std::make_unique<Preparer>(spec_, *source_, *ring_->seg, out_h_, out_w_);
  scheduler_ = std::make_unique<Scheduler>(sampler_, ring_, &consumer_, o);
  return StartThreads();
}

Status PipelineLoader::StartThreads() {
  const bool async = fetcher_.async();
  try {
    if (async) threads_.emplace_back([this] { DispatchLoop(); });
    StartWorkers(scheduler_->knobs());
    if (tune_.threads || tune_.reads || tune_.prefetch) {
      AutotuneSettings start{spec_.num_threads,
                             async ? scheduler_->read_limit() : spec_.reads_in_flight,
                             spec_.prefetch};
      AutotuneLimits limits = tune_;
      limits.prefetch = limits.prefetch && own_ring_;  // a named ring is sized by its owner
      tuner_ = std::make_unique<TuneLoop>(this, limits, start, created_ns_);
    }
  } catch (const std::system_error& e) {
    // The threads already started are joined by the destructor.
    return ResourceExhausted("cannot start the loader's " +
                             std::to_string((async ? 1 : spec_.reads_in_flight) + spec_.num_threads) +
                             " threads (" + e.what() + "); lower num_threads or reads_in_flight");
  }
  return Status::OK();
}

void PipelineLoader::StartWorkers(const Scheduler::Knobs& k) {
  for (; fetch_started_ < k.fetch_threads; ++fetch_started_) {
    const int index = fetch_started_;
    threads_.emplace_back([this, index] { FetchLoop(index); });
  }
  for (; prep_started_ < k.prep_threads; ++prep_started_) {
    const int index = prep_started_;
    threads_.emplace_back([this, index] { PrepLoop(index); });
  }
}

// ---- the workers ------------------------------------------------------------

namespace {
Status ToBackground(int tid) {
  sched_param none{};
  if (sched_setscheduler(tid, SCHED_IDLE, &none) != 0 && errno != ESRCH) {  // (ESRCH: it ended)
    return PermissionDenied(std::string("cannot run the loader's threads in the background (SCHED_IDLE): ") +
                            std::strerror(errno));
  }
  return Status::OK();
}
}  // namespace

void PipelineLoader::Registered() {
  const int tid = static_cast<int>(syscall(SYS_gettid));
  std::lock_guard<std::mutex> lock(tids_mu_);
  tids_.push_back(tid);
  if (background_) (void)ToBackground(tid);  // (RunInBackground said whether it can)
}

Status PipelineLoader::RunInBackground() {
  std::lock_guard<std::mutex> lock(tids_mu_);
  background_ = true;
  for (int tid : tids_) NOSTALL_RETURN_IF_ERROR(ToBackground(tid));
  return Status::OK();
}

void PipelineLoader::FetchLoop(int index) {
  Registered();
  // The item read is handed in with the next position taken (one lock).
  FetchedItem fi{}, read{};
  bool have = false;
  const Fetcher::Done done = [&read, &have](FetchedItem f) {
    read = std::move(f);
    have = true;
  };
  while (scheduler_->NextFetch(index, fetcher_.has_cache(), have ? &read : nullptr, &fi,
                               fetcher_.mutable_counters())) {
    have = false;
    fetcher_.Fetch(std::move(fi), done);
    fi = FetchedItem{};
  }
}

// Remote sources: one thread starts every read; each completes on the
// source's I/O thread. The reads in flight are bounded by the scheduler's
// read limit.
void PipelineLoader::DispatchLoop() {
  Registered();
  const Fetcher::Done done = [this](FetchedItem fi) {
    AdaptReadLimit();
    scheduler_->Fetched(std::move(fi));
  };
  FetchedItem fi{};
  while (scheduler_->NextFetch(-1, fetcher_.has_cache(), nullptr, &fi, fetcher_.mutable_counters())) {
    fetcher_.Fetch(std::move(fi), done);
    fi = FetchedItem{};
  }
}

// Little's law (nostall/model.h, AutoReadsInFlight): to keep prep fed, requests in
// flight = the rate prep takes items at x the time a request takes. The one
// controller of a remote source's requests; a fixed reads_in_flight is kept
// as given.
void PipelineLoader::AdaptReadLimit() {
  if (!adapt_requests_) return;
  const double latency = source_->RequestLatencySeconds();
  if (latency <= 0) return;
  const StageCounters& prep = preparer_->prep();
  const StageCounters& fetch = fetcher_.counters();
  const int64_t items = prep.items.load(std::memory_order_relaxed);
  const double per_item = items >= 16 ? prep.work_ns.load(std::memory_order_relaxed) / 1e9 / items
                                      : kAssumedPrepSeconds;
  const double rate = scheduler_->prep_threads() / std::max(per_item, 1e-6);
  const int64_t fetched = fetch.items.load(std::memory_order_relaxed);
  const double item_bytes =
      fetched > 0 ? static_cast<double>(fetch.bytes.load(std::memory_order_relaxed)) / fetched : 0;
  scheduler_->SetReadLimit(AutoReadsInFlight(rate, latency, item_bytes));
}

void PipelineLoader::PrepLoop(int index) {
  Registered();
  PrepScratch scratch;
  FetchedItem fi;
  Status st;
  const Status* result = nullptr;  // fi's, once prepared
  Scheduler::Finished f{};
  while (true) {
    switch (scheduler_->PrepStep(index, &fi, result, preparer_->mutable_prep(), &f)) {
      case Scheduler::PrepTurn::kStop:
        return;
      case Scheduler::PrepTurn::kBatchDone:
        scheduler_->Publish(fi, f, preparer_->FinishBatch(f.slot, f.count, *f.bad));
        result = nullptr;
        break;
      case Scheduler::PrepTurn::kItem:
        st = preparer_->Prepare(fi, &scratch);
        result = &st;
        break;
    }
  }
}

// ---- the tuner's side (Tunable) ---------------------------------------------

Tunable::Sample PipelineLoader::Measure() const {
  Sample m;
  m.t_ns = NowNs();
  m.wait_ns = consumer_waited_ns_ ? consumer_waited_ns_() : consumer_.WaitNs();
  m.prep = preparer_->prep().Snapshot(0);
  m.fetch = fetcher_.counters().Snapshot(0);
  m.process_cpu_ns = ProcessCpuNs();
  m.loader_cpu_ns = m.prep.busy_cpu_ns + m.fetch.busy_cpu_ns +
                    preparer_->batch().busy_cpu_ns.load() + fetcher_.IoCpuNs();
  m.read_latency_s = fetcher_.async() ? source_->RequestLatencySeconds() : 0;
  return m;
}

Status PipelineLoader::Apply(const AutotuneDecision& d) {
  Scheduler::Knobs k = scheduler_->knobs();
  if (d.knob == "prefetch") {
    const int64_t want = d.to + 2 + (own_ring_ ? 1 : 0);  // and the ring's spare slot (MakeRing)
    if (want > slots_reserved_) {
      const uint32_t first = static_cast<uint32_t>(slots_reserved_);
      NOSTALL_RETURN_IF_ERROR(
          ring::ReserveSlots(*ring_->seg, first, static_cast<uint32_t>(want) - first));
      slots_reserved_ = want;
    }
    k.slot_limit = d.to + 2;
  } else if (d.knob == "threads") {
    k.prep_threads = d.to;
  } else if (fetcher_.async()) {
    k.read_limit = d.to;
  } else {
    k.fetch_threads = d.to;
  }
  try {
    StartWorkers(k);
  } catch (const std::system_error&) {
    // No thread to be had: the ones running go on (the count says so).
    k.prep_threads = std::min(k.prep_threads, prep_started_);
    k.fetch_threads = std::min(k.fetch_threads, fetch_started_);
  }
  scheduler_->SetKnobs(k);
  return Status::OK();
}

// ---- the caller's questions -------------------------------------------------

LoaderStats PipelineLoader::Stats() const {
  LoaderStats st;
  const Scheduler::Knobs k = scheduler_->knobs();
  const Scheduler::Counts c = scheduler_->counts();
  const int reads = fetcher_.async() ? k.read_limit : k.fetch_threads;
  st.ring_slots = k.slot_limit;
  st.fetch = fetcher_.counters().Snapshot(reads);
  st.reads_in_flight_target = reads;
  st.prep = preparer_->prep().Snapshot(k.prep_threads);
  st.batch = preparer_->batch().Snapshot(0);
  st.batches = c.batches;
  st.samples = c.samples;
  st.errors = c.errors;
  st.skipped = c.skipped + source_->skipped_at_index();
  st.empty_batches_dropped = c.empty_dropped;
  st.private_copies = c.private_copies;
  st.field_bytes = preparer_->FieldBytes();
  consumer_.Fill(&st);
  st.elapsed_ns = NowNs() - created_ns_;
  st.ring_bytes = ring_->seg->g.data_offset +
                  ring_->seg->g.slot_stride * static_cast<uint64_t>(st.ring_slots);
  if (tuner_) tuner_->Fill(&st);
  if (std::optional<StorageStats> remote = source_->storage_stats()) {
    st.has_storage = true;
    st.storage = *remote;
    // The I/O thread's CPU is the fetch stage's (requests, bodies).
    st.fetch.busy_cpu_ns += fetcher_.IoCpuNs(&st.storage);
  }
  fetcher_.FillCacheStats(spec_.cache.empty() ? "" : spec_.cache.front().name, c.consumer_epoch, &st);
  return st;
}

Status PipelineLoader::EvictPageCache() const {
  for (int64_t i : sampler_.Items()) {
    Status st = source_->Evict(i);
    if (!st.ok()) return st.WithItem(source_->key(i), "fetch");
  }
  return Status::OK();
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
