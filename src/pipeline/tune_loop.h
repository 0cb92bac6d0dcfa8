// The autotuner's thread: every tick it measures the loader through the
// Tunable interface, hands a long-enough window to the Autotuner
// (autotune.h decides) and applies its answer through the same interface.
// The loader it tunes knows nothing of windows or rules; the rules know
// nothing of threads or rings.
#ifndef NOSTALL_PIPELINE_TUNE_LOOP_H_
#define NOSTALL_PIPELINE_TUNE_LOOP_H_

#include <condition_variable>
#include <memory>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "nostall/status.h"
#include "pipeline/autotune.h"

namespace nostall {

// What the tuner reads and turns.
class Tunable {
 public:
  struct Sample {  // running totals at `t_ns`
    int64_t t_ns = 0, wait_ns = 0, process_cpu_ns = 0, loader_cpu_ns = 0;
    StageStats prep, fetch;
    double read_latency_s = 0;  // remote storage's measured latency; 0: local
  };
  virtual ~Tunable() = default;
  virtual Sample Measure() const = 0;
  // Sets decision.knob to decision.to; an error when it cannot (the ring's
  // memory for more prefetch): the knob stays where it was.
  virtual Status Apply(const AutotuneDecision& decision) = 0;
};

class TuneLoop {
 public:
  // Starts the thread. `created_ns`: the loader's start, the windows' clock.
  TuneLoop(Tunable* target, const AutotuneLimits& limits, const AutotuneSettings& start,
           int64_t created_ns);
  ~TuneLoop();  // stops and joins the thread
  TuneLoop(const TuneLoop&) = delete;
  TuneLoop& operator=(const TuneLoop&) = delete;

  // The autotune fields of `st` (knobs, settings now, decisions).
  void Fill(LoaderStats* st) const EXCLUDES(mu_);

 private:
  void Run() EXCLUDES(mu_);
  void Apply(AutotuneDecision d) EXCLUDES(mu_);

  Tunable* const target_;
  const int64_t created_ns_;
  const AutotuneLimits limits_;
  Autotuner tuner_;  // the tuner thread's alone
  mutable Mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<AutotuneDecision> decisions_ GUARDED_BY(mu_);
  int64_t changes_ GUARDED_BY(mu_) = 0;
  AutotuneSettings now_ GUARDED_BY(mu_);
  std::thread thread_;  // last: starts once the rest is made
};

// One window of differences between two measurements.
AutotuneWindow WindowBetween(const Tunable::Sample& prev, const Tunable::Sample& now);

}  // namespace nostall

#endif  // NOSTALL_PIPELINE_TUNE_LOOP_H_
