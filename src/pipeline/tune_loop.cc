// The loader's side of the autotuner (src/pipeline/autotune.h decides):
// measuring a window, applying a change, starting workers as the counts
// grow.

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "common/clock.h"
#include "pipeline/pipeline_loader.h"

namespace nostall {
namespace {

constexpr auto kTick = std::chrono::milliseconds(250);
constexpr int64_t kWindowNs = 1'000'000'000;     // a window: at least a second...
constexpr int64_t kMinWindowItems = 16;          // ...and this many items prepared,
constexpr int64_t kLongestWindowNs = 8'000'000'000;  // or this long

}  // namespace

void PipelineLoader::StartWorkers() {
  for (; fetch_started_ < fetch_active_; ++fetch_started_) {
    const int index = fetch_started_;
    threads_.emplace_back([this, index] { FetchLoop(index); });
  }
  for (; prep_started_ < prep_active_; ++prep_started_) {
    const int index = prep_started_;
    threads_.emplace_back([this, index] { PrepLoop(index); });
  }
}

PipelineLoader::TuneSample PipelineLoader::MeasureForTune() const {
  TuneSample m;
  m.t_ns = NowNs();
  {
    MutexLock lock(&tune_mu_);
    m.wait_ns = wait_source_ ? wait_source_() : consumer_.WaitNs();
  }
  m.prep = prep_.Snapshot(0);
  m.fetch = fetch_.Snapshot(0);
  m.process_cpu_ns = ProcessCpuNs();
  m.loader_cpu_ns = m.prep.busy_cpu_ns + m.fetch.busy_cpu_ns + batch_.busy_cpu_ns.load();
  if (async_) {
    if (std::optional<StorageStats> remote = source_->storage_stats()) {
      m.loader_cpu_ns += remote->io_cpu_ns;
    }
  }
  return m;
}

// Every tick, once a window is long enough: its differences to the
// autotuner, and its answer applied.
void PipelineLoader::AutotuneLoop() {
  // NOSTALL_AUTOTUNE_TRACE=1: every window's measurements on stderr.
  const char* env = std::getenv("NOSTALL_AUTOTUNE_TRACE");
  const bool trace = env != nullptr && env[0] != '\0' && env[0] != '0';
  TuneSample prev = MeasureForTune();
  MutexLock lock(&state_->mu);
  while (!cancelled_) {
    tune_cv_.wait_for(lock.native(), kTick);
    if (cancelled_) return;
    lock.Unlock();
    const TuneSample now = MeasureForTune();
    const int64_t wall = now.t_ns - prev.t_ns;
    if (wall < kWindowNs || (now.prep.items - prev.prep.items < kMinWindowItems && wall < kLongestWindowNs)) {
      lock.Lock();
      continue;
    }
    AutotuneWindow w;
    w.wall_s = wall / 1e9;
    w.consumer_wait_s = (now.wait_ns - prev.wait_ns) / 1e9;
    w.prep_items = now.prep.items - prev.prep.items;
    w.prep_cpu_s = (now.prep.busy_cpu_ns - prev.prep.busy_cpu_ns) / 1e9;
    w.prep_work_s = (now.prep.work_ns - prev.prep.work_ns) / 1e9;
    w.prep_starved_s = (now.prep.starved_ns - prev.prep.starved_ns) / 1e9;
    w.fetch_items = now.fetch.items - prev.fetch.items;
    w.fetch_work_s = (now.fetch.work_ns - prev.fetch.work_ns) / 1e9;
    w.fetch_bytes = static_cast<double>(now.fetch.bytes - prev.fetch.bytes);
    w.read_latency_s = async_ ? source_->RequestLatencySeconds() : 0;
    w.process_cpu_s = (now.process_cpu_ns - prev.process_cpu_ns) / 1e9;
    w.loader_cpu_s = (now.loader_cpu_ns - prev.loader_cpu_ns) / 1e9;
    prev = now;
    if (trace) {
      std::fprintf(stderr,
                   "nostall autotune: %.1fs window %.2fs wait %.1f%% prep %lld items busy %.2fs "
                   "cpu %.2fs starved %.2fs; reads %lld, %.2f ms each; process cpu %.2fs, loader %.2fs\n",
                   (now.t_ns - created_ns_) / 1e9, w.wall_s, 100 * w.consumer_wait_s / w.wall_s,
                   static_cast<long long>(w.prep_items), w.prep_work_s, w.prep_cpu_s, w.prep_starved_s,
                   static_cast<long long>(w.fetch_items),
                   w.fetch_items ? 1e3 * w.fetch_work_s / w.fetch_items : 0.0, w.process_cpu_s,
                   w.loader_cpu_s);
    }
    std::optional<AutotuneDecision> d = autotuner_->Step(w, (now.t_ns - created_ns_) / 1e9);
    lock.Lock();
    if (d) ApplyTune(*d);
  }
}

void PipelineLoader::ApplyTune(const AutotuneDecision& in) {
  AutotuneDecision d = in;
  const int64_t spare = own_ring_ ? 1 : 0;  // the ring's spare slot (Init)
  if (d.knob == "prefetch" && d.to + 2 + spare > slots_reserved_) {
    const uint32_t first = static_cast<uint32_t>(slots_reserved_);
    Status st =
        ring::ReserveSlots(*state_->seg, first, static_cast<uint32_t>(d.to + 2 + spare) - first);
    if (!st.ok()) {
      autotuner_->RefusePrefetch(d.from);
      d.to = d.from;
      d.why += "; not done: " + st.message();
    } else {
      slots_reserved_ = d.to + 2 + spare;
    }
  }
  if (d.knob == "threads") {
    prep_active_ = d.to;
  } else if (d.knob == "reads_in_flight") {
    if (async_) {
      read_limit_.store(d.to);
    } else {
      fetch_active_ = d.to;
    }
  } else {
    slot_limit_ = d.to + 2;
  }
  try {
    StartWorkers();
  } catch (const std::system_error&) {
    // No thread to be had: the ones running go on (the count says so).
    prep_active_ = std::min(prep_active_, prep_started_);
    fetch_active_ = std::min(fetch_active_, fetch_started_);
  }
  park_cv_.notify_all();
  prep_cv_.notify_all();
  work_cv_.notify_all();
  state_->slot_freed.notify_all();
  MutexLock lock(&tune_mu_);
  ++changes_;
  if (decisions_.size() < LoaderStats::kMaxDecisions) decisions_.push_back(d);
  tuned_now_ = autotuner_->settings();
}

void SetConsumerWaitSource(Loader* loader, std::function<int64_t()> waited_ns) {
  if (auto* p = dynamic_cast<PipelineLoader*>(loader)) p->SetWaitSource(std::move(waited_ns));
}

}  // namespace nostall
