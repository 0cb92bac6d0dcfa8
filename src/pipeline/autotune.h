// The autotuner: moves a pipeline's prep threads, reads in flight and
// prefetch while it runs, one knob at a time, towards "just enough": the
// consumer never waits, with the fewest threads, reads and slots that do it.
//
// It is fed one window of measurements at a time (about a second: the
// consumer's wait, each stage's busy/starved time, the read latency, the
// process's CPU) and answers with at most one change. The rules, in order:
//   1. A change is judged on the window after the one it settled in: a
//      thread or reads added that did not raise the rate (the cores are
//      taken, by the training step or the other threads) are taken back and
//      the count that did not pay becomes a ceiling (later adds bisect below
//      it); a thread or reads removed after which the consumer waits, or
//      the rate falls (10% while it waits; 4% when the process uses every
//      core: a CPU-bound step never waits, yet a thread fewer slows it), are
//      given back and the count becomes a floor. A ceiling or floor is lifted
//      after a back-off (15 s, doubling), and never after a knob's second
//      reversal. With every core busy, a floor given back, or a ceiling
//      whose add cost the rate 10%, holds until a window shows the cores
//      not all taken.
//   2. The consumer waits (> 3% of the window):
//        prep busy          -> one more prep thread (up to the cores);
//        reads the limit    -> reads in flight towards Little's law (the
//                              rate prep could take x read latency,
//                              read_limit.h), at most 4x at a time,
//                              at least +25% (a smaller add is noise);
//        reads idle         -> reads cut to Little's law (each costs CPU);
//        neither (jitter)   -> one more batch of prefetch (up to the cap).
//   3. The consumer never waits (< 1%): one prep thread less when the prep
//      CPU fits in one thread fewer at 80%; else, when the process uses 90%
//      of the cores (a CPU-bound step), one more tried, kept only if the
//      rate rises 4%; reads in flight down to Little's law at 1.3x the rate
//      delivered when that is under 2/3 of them.
// The loader (pipeline_loader.cc) measures and applies; this class is pure,
// so its rules are tested on made-up windows (autotune_test.cc).
#ifndef NOSTALL_PIPELINE_AUTOTUNE_H_
#define NOSTALL_PIPELINE_AUTOTUNE_H_

#include <optional>
#include <string>
#include <vector>

#include "nostall/model.h"
#include "nostall/stats.h"

namespace nostall {

// Which knobs are tuned and their bounds.
struct AutotuneLimits {
  bool threads = false, reads = false, prefetch = false;
  int max_threads = 1;   // the cores this process may use
  int min_reads = 1, max_reads = 64;
  int max_prefetch = 4;  // within the memory cap
};

struct AutotuneSettings {
  int threads = 1, reads = 1, prefetch = 2;
};

// One window of measurements (differences over the window).
struct AutotuneWindow {
  double wall_s = 0;
  double consumer_wait_s = 0;   // the consumer waited for batches
  int64_t prep_items = 0;
  double prep_cpu_s = 0, prep_work_s = 0, prep_starved_s = 0;
  int64_t fetch_items = 0;
  double fetch_work_s = 0, fetch_bytes = 0;
  double read_latency_s = 0;    // remote: the storage's measured latency; 0: fetch work per item
  double process_cpu_s = 0, loader_cpu_s = 0;  // the step's CPU = process - loader
};

class Autotuner {
 public:
  Autotuner(const AutotuneLimits& limits, const AutotuneSettings& start);

  // One window; returns the change to apply (the settings already hold it).
  std::optional<AutotuneDecision> Step(const AutotuneWindow& w, double now_s);

  const AutotuneSettings& settings() const { return s_; }
  // The loader could not reserve memory for more prefetch: back to `value`,
  // and no more asked for.
  void RefusePrefetch(int value) {
    s_.prefetch = value;
    limits_.max_prefetch = value;
    pending_.reset();
  }
  const AutotuneLimits& limits() const { return limits_; }

  static constexpr double kWaiting = 0.03;  // the consumer waits: > 3% of the window
  static constexpr double kNoWait = 0.01;   // never waits: < 1%

 private:
  enum Knob { kThreads, kReads, kPrefetch, kKnobs };
  struct Bound {  // a floor or ceiling a reversal left, retried after a back-off
    int value = 0;
    double until_s = 0;
    double backoff_s = 15;
  };
  struct Pending {
    Knob knob;
    int from, to;
    double rate_before, wait_before;
    bool probe = false;  // tried though the consumer did not wait: judged by the rate alone
  };
  // What a window showed (Step's measures, for the rules).
  struct Seen {
    double rate = 0, wait = 0, threads = 1, busy = 0, starved = 0, latency = 0, item_bytes = 0;
  };
  std::optional<AutotuneDecision> WhenWaiting(const AutotuneWindow& w, const Seen& m, double now_s);
  std::optional<AutotuneDecision> WhenNeverWaiting(const AutotuneWindow& w, const Seen& m,
                                                   double now_s);
  int Little(const Seen& m, double rate) const;  // reads in flight for `rate` (read_limit.h)
  AutotuneDecision Change(Knob knob, int to, double now_s, std::string why, double rate,
                          double wait);
  std::optional<AutotuneDecision> Judge(const AutotuneWindow& w, double now_s, double rate,
                                        double wait);
  bool Allowed(const Bound& b, double now_s) const;
  void LiftSaturatedBounds();
  // The window as the model (nostall/model.h) sees it.
  Observation Observe(const AutotuneWindow& w) const;
  int CapAdd(Knob k, int cur, int to, double now_s) const;
  int& Value(Knob k);

  AutotuneLimits limits_;
  AutotuneSettings s_;
  std::optional<Pending> pending_;
  Observation observed_;  // the last window's (CoresTaken(observed_): a CPU-bound step)
  int settle_ = 0;  // windows to skip after a change (its transition)
  Bound ceiling_[kKnobs], floor_[kKnobs];
  int reversals_[kKnobs] = {};
  // [0]: ceiling_, [1]: floor_ of a knob set under a CPU-bound step (held
  // while the cores stay taken).
  bool while_saturated_[2][kKnobs] = {};
};

}  // namespace nostall

#endif  // NOSTALL_PIPELINE_AUTOTUNE_H_
