// The autotuner's thread (tune_loop.h).
#include "pipeline/tune_loop.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace nostall {
namespace {

constexpr auto kTick = std::chrono::milliseconds(250);
constexpr int64_t kWindowNs = 1'000'000'000;         // a window: at least a second...
constexpr int64_t kMinWindowItems = 16;              // ...and this many items prepared,
constexpr int64_t kLongestWindowNs = 8'000'000'000;  // or this long

void Trace(const AutotuneWindow& w, double at_s) {
  std::fprintf(stderr,
               "nostall autotune: %.1fs window %.2fs wait %.1f%% prep %lld items busy %.2fs "
               "cpu %.2fs starved %.2fs; reads %lld, %.2f ms each; process cpu %.2fs, loader %.2fs\n",
               at_s, w.wall_s, 100 * w.consumer_wait_s / w.wall_s,
               static_cast<long long>(w.prep_items), w.prep_work_s, w.prep_cpu_s, w.prep_starved_s,
               static_cast<long long>(w.fetch_items),
               w.fetch_items ? 1e3 * w.fetch_work_s / w.fetch_items : 0.0, w.process_cpu_s,
               w.loader_cpu_s);
}

}  // namespace

AutotuneWindow WindowBetween(const Tunable::Sample& prev, const Tunable::Sample& now) {
  AutotuneWindow w;
  w.wall_s = (now.t_ns - prev.t_ns) / 1e9;
  w.consumer_wait_s = (now.wait_ns - prev.wait_ns) / 1e9;
  w.prep_items = now.prep.items - prev.prep.items;
  w.prep_cpu_s = (now.prep.busy_cpu_ns - prev.prep.busy_cpu_ns) / 1e9;
  w.prep_work_s = (now.prep.work_ns - prev.prep.work_ns) / 1e9;
  w.prep_starved_s = (now.prep.starved_ns - prev.prep.starved_ns) / 1e9;
  w.fetch_items = now.fetch.items - prev.fetch.items;
  w.fetch_work_s = (now.fetch.work_ns - prev.fetch.work_ns) / 1e9;
  w.fetch_bytes = static_cast<double>(now.fetch.bytes - prev.fetch.bytes);
  w.read_latency_s = now.read_latency_s;
  w.process_cpu_s = (now.process_cpu_ns - prev.process_cpu_ns) / 1e9;
  w.loader_cpu_s = (now.loader_cpu_ns - prev.loader_cpu_ns) / 1e9;
  return w;
}

TuneLoop::TuneLoop(Tunable* target, const AutotuneLimits& limits, const AutotuneSettings& start,
                   int64_t created_ns)
    : target_(target), created_ns_(created_ns), limits_(limits), tuner_(limits, start) {
  {
    MutexLock lock(&mu_);
    now_ = start;
  }
  thread_ = std::thread([this] { Run(); });
}

TuneLoop::~TuneLoop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

// Every tick, once a window is long enough: its differences to the
// autotuner, and its answer applied.
void TuneLoop::Run() {
  // NOSTALL_AUTOTUNE_TRACE=1: every window's measurements on stderr.
  const char* env = std::getenv("NOSTALL_AUTOTUNE_TRACE");
  const bool trace = env != nullptr && env[0] != '\0' && env[0] != '0';
  Tunable::Sample prev = target_->Measure();
  MutexLock lock(&mu_);
  while (!stop_) {
    stop_cv_.wait_for(lock.native(), kTick);
    if (stop_) return;
    lock.Unlock();
    const Tunable::Sample now = target_->Measure();
    const int64_t wall = now.t_ns - prev.t_ns;
    if (wall >= kWindowNs &&
        (now.prep.items - prev.prep.items >= kMinWindowItems || wall >= kLongestWindowNs)) {
      const AutotuneWindow w = WindowBetween(prev, now);
      prev = now;
      const double at_s = (now.t_ns - created_ns_) / 1e9;
      if (trace) Trace(w, at_s);
      if (std::optional<AutotuneDecision> d = tuner_.Step(w, at_s)) Apply(*d);
    }
    lock.Lock();
  }
}

void TuneLoop::Apply(AutotuneDecision d) {
  Status st = target_->Apply(d);
  if (!st.ok()) {
    // Only prefetch can be refused (no memory for more slots): back to where it was.
    tuner_.RefusePrefetch(d.from);
    d.to = d.from;
    d.why += "; not done: " + st.message();
  }
  MutexLock lock(&mu_);
  ++changes_;
  if (decisions_.size() < LoaderStats::kMaxDecisions) decisions_.push_back(d);
  now_ = tuner_.settings();
}

void TuneLoop::Fill(LoaderStats* st) const {
  st->has_autotune = true;
  if (limits_.threads) st->autotune_knobs.push_back("threads");
  if (limits_.reads) st->autotune_knobs.push_back("reads_in_flight");
  if (limits_.prefetch) st->autotune_knobs.push_back("prefetch");
  MutexLock lock(&mu_);
  st->autotune_threads = now_.threads;
  st->autotune_reads = now_.reads;
  st->autotune_prefetch = now_.prefetch;
  st->autotune_decisions = decisions_;
  st->autotune_changes = changes_;
}

}  // namespace nostall
