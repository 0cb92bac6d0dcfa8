#include "pipeline/autotune.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "nostall/model.h"

namespace nostall {
namespace {

constexpr const char* kKnobNames[] = {"threads", "reads_in_flight", "prefetch"};
constexpr double kGain = 1.04;        // an added thread or reads must raise the rate 4%
constexpr double kLoss = 0.9;         // a removal that cost 10% of the rate is given back
// With every core busy (a CPU-bound training step) the consumer never
// waits, yet a prep thread fewer can slow the step (its threads and prep's
// share the cores, and prep's work then runs beside the step instead of
// ahead of it): there a removal that cost what an add must bring is given
// back. Elsewhere the consumer sets the rate (a sleeping step, a producer's
// consumers) and only its waits say what a removal cost.
constexpr double kSaturatedLoss = 1 / kGain;
constexpr double kBusy = 0.8;         // prep threads this busy: prep is the bottleneck
constexpr double kStarved = 0.2;      // prep threads this starved: reads are
constexpr double kMaxBackoff = 120;

std::string Format(const char* fmt, double a, double b = 0, double c = 0) {
  char buf[200];
  std::snprintf(buf, sizeof buf, fmt, a, b, c);
  return buf;
}

}  // namespace

// The first window holds the start (threads starting, the first reads):
// it is not evidence.
Autotuner::Autotuner(const AutotuneLimits& limits, const AutotuneSettings& start)
    : limits_(limits), s_(start), settle_(1) {}

int& Autotuner::Value(Knob k) {
  return k == kThreads ? s_.threads : k == kReads ? s_.reads : s_.prefetch;
}

Observation Autotuner::Observe(const AutotuneWindow& w) const {
  Observation o;
  if (w.wall_s <= 0 || w.prep_items <= 0) return o;
  const double items = static_cast<double>(w.prep_items);
  o.rate = items / w.wall_s;
  o.wait = std::clamp(w.consumer_wait_s / w.wall_s, 0.0, 1.0);
  o.prep_cpu = w.prep_cpu_s / items;
  o.fetch_cpu = std::max(0.0, w.loader_cpu_s - w.prep_cpu_s) / items;
  o.step_cpu = std::max(0.0, w.process_cpu_s - std::max(w.loader_cpu_s, w.prep_cpu_s)) / items;
  o.read_latency = w.read_latency_s > 0 ? w.read_latency_s
                   : w.fetch_items > 0  ? w.fetch_work_s / static_cast<double>(w.fetch_items)
                                        : 0;
  o.item_bytes = w.fetch_items > 0 ? w.fetch_bytes / static_cast<double>(w.fetch_items) : 0;
  o.cores = limits_.max_threads;
  o.prep_threads = s_.threads;
  o.reads_in_flight = s_.reads;
  return o;
}

bool Autotuner::Allowed(const Bound& b, double now_s) const { return b.value == 0 || now_s >= b.until_s; }

// The bounds a CPU-bound step set hold while the cores stay taken; once a
// window shows them free (the step changed), the knobs may move again.
void Autotuner::LiftSaturatedBounds() {
  for (int k = 0; k < kKnobs; ++k) {
    for (int side = 0; side < 2; ++side) {
      if (!while_saturated_[side][k]) continue;
      (side == 0 ? ceiling_ : floor_)[k] = Bound{};
      while_saturated_[side][k] = false;
    }
  }
}

// An add from `cur` towards `to` under the knob's ceiling: halfway to it
// (bisecting between what paid and what did not), none once that is within
// a quarter (or 1), or after the knob's second reversal.
int Autotuner::CapAdd(Knob k, int cur, int to, double now_s) const {
  const Bound& c = ceiling_[k];
  if (Allowed(c, now_s)) return to;
  // After the knob's second reversal it bisects no more.
  if (reversals_[k] >= 2 || c.value - cur <= std::max(1, cur / 4)) return cur;
  return std::min(to, (cur + c.value) / 2);
}

AutotuneDecision Autotuner::Change(Knob knob, int to, double now_s, std::string why, double rate,
                                   double wait) {
  int& v = Value(knob);
  AutotuneDecision d{now_s, kKnobNames[knob], v, to, std::move(why)};
  // What the model makes of the last window, and of it with the change.
  if (observed_.rate > 0 && knob != kPrefetch) {
    const Profile profile = ProfileOf(observed_);
    Config after = ConfigOf(observed_);
    (knob == kThreads ? after.prep_threads : after.reads_in_flight) = to;
    d.model_rate_before = Predict(profile, ConfigOf(observed_)).rate;
    d.model_rate_after = Predict(profile, after).rate;
  }
  pending_ = Pending{knob, v, to, rate, wait};
  v = to;
  settle_ = 1;
  return d;
}

// Judges the last change on the window after the one it settled in.
std::optional<AutotuneDecision> Autotuner::Judge(const AutotuneWindow& w, double now_s, double rate,
                                                 double wait) {
  const Pending p = *pending_;
  pending_.reset();
  if (p.knob == kPrefetch) return std::nullopt;
  const bool added = p.to > p.from;
  std::string why;
  Bound* bound = nullptr;
  if (added && (wait > kNoWait || p.probe) && rate < p.rate_before * kGain) {
    const double step_cores = std::max(0.0, w.process_cpu_s - w.loader_cpu_s) / w.wall_s;
    why = p.knob == kThreads
              ? Format("the rate went from %.0f to %.0f items/s only (the training step uses %.1f "
                       "cores): taken back",
                       p.rate_before, rate, step_cores)
              : Format("the rate went from %.0f to %.0f items/s only: taken back", p.rate_before, rate);
    bound = &ceiling_[p.knob];
  } else if (!added && (wait > std::max(kWaiting, p.wait_before + 0.02) ||
                        (wait > kNoWait && rate < p.rate_before * kLoss) ||
                        (CoresTaken(observed_) && rate < p.rate_before * kSaturatedLoss))) {
    why = Format("with fewer the rate fell to %.0f items/s (from %.0f) and the consumer waited %.0f%% "
                 "of the time: given back",
                 rate, p.rate_before, wait * 100);
    bound = &floor_[p.knob];
  } else {
    return std::nullopt;
  }
  // After a knob's second reversal its bound stays. With the cores taken by
  // the step, a removal given back, or an add that cost the rate 10%, stays
  // so while they stay taken: the try measured what the change costs a
  // CPU-bound step, and each retry would cost it windows at the lower rate.
  // (A window whose cores are not all taken lifts it: Step.)
  const bool saturated = CoresTaken(observed_) && (!added || rate < p.rate_before * kLoss);
  const bool permanent = ++reversals_[p.knob] >= 2 || saturated;
  if (saturated) {
    why += "; not tried again while the cores stay taken";
    while_saturated_[bound == &ceiling_[p.knob] ? 0 : 1][p.knob] = true;
  }
  // A ceiling is the value that did not pay (later adds bisect below it); a
  // floor the value given back to.
  bound->value = bound == &ceiling_[p.knob] ? p.to : p.from;
  bound->until_s = permanent ? std::numeric_limits<double>::infinity() : now_s + bound->backoff_s;
  bound->backoff_s = std::min(kMaxBackoff, bound->backoff_s * 2);
  AutotuneDecision d = Change(p.knob, p.from, now_s, std::move(why), rate, wait);
  pending_.reset();  // a reversal is not judged again
  return d;
}

std::optional<AutotuneDecision> Autotuner::Step(const AutotuneWindow& w, double now_s) {
  if (w.wall_s <= 0 || w.prep_items < 4) return std::nullopt;  // nothing flowing: no evidence
  if (settle_ > 0) {
    --settle_;
    return std::nullopt;
  }
  observed_ = Observe(w);
  if (!CoresTaken(observed_)) LiftSaturatedBounds();
  Seen m;
  m.rate = observed_.rate;
  m.wait = observed_.wait;
  if (pending_) {
    if (std::optional<AutotuneDecision> d = Judge(w, now_s, m.rate, m.wait)) return d;
  }
  m.threads = std::max(1, s_.threads);
  m.busy = w.prep_work_s / (m.threads * w.wall_s);
  m.starved = w.prep_starved_s / (m.threads * w.wall_s);
  m.latency = observed_.read_latency;
  m.item_bytes = observed_.item_bytes;
  if (m.wait > kWaiting) return WhenWaiting(w, m, now_s);
  if (m.wait >= kNoWait) return std::nullopt;
  return WhenNeverWaiting(w, m, now_s);
}

int Autotuner::Little(const Seen& m, double rate) const {
  return std::clamp(AutoReadsInFlight(rate, m.latency, m.item_bytes), limits_.min_reads,
                    limits_.max_reads);
}

// Rule 2: the consumer waits.
std::optional<AutotuneDecision> Autotuner::WhenWaiting(const AutotuneWindow& w, const Seen& m,
                                                       double now_s) {
  const double rate = m.rate, wait = m.wait, busy = m.busy, starved = m.starved,
               latency = m.latency;
  if (limits_.threads && busy > kBusy && s_.threads < limits_.max_threads &&
      CapAdd(kThreads, s_.threads, s_.threads + 1, now_s) > s_.threads) {
    return Change(kThreads, s_.threads + 1, now_s,
                  Format("the consumer waited %.0f%% of the time and the prep threads were busy "
                         "%.0f%%",
                         wait * 100, busy * 100),
                  rate, wait);
  }
  // What prep could take: its threads at their measured CPU per item (the
  // wall time per item is inflated while threads share cores).
  const double cpu_per_item = w.prep_cpu_s / static_cast<double>(w.prep_items);
  const double capacity = cpu_per_item > 0 ? m.threads / cpu_per_item : rate * 2;
  // Reads are the limit when prep waits for them, or when every read in
  // flight is busy (the rate is what they can bring: reads / latency).
  const bool reads_bound = starved > kStarved || rate * latency >= kBusy * s_.reads;
  // Towards Little's law for 80% of that capacity (its 1.5x headroom over
  // the rate prep reaches then, 1.2x over the capacity): reads past it
  // cost more CPU than they bring.
  const int more_reads = CapAdd(
      kReads, s_.reads,
      std::min({Little(m, capacity * kBusy), std::max(s_.reads * 4, s_.reads + 2), limits_.max_reads}),
      now_s);
  // An add under a quarter cannot show the 4% gain it is judged by (near
  // the best count the probe is noise): not tried.
  if (limits_.reads && reads_bound && latency > 0 && more_reads * 4 >= s_.reads * 5) {
    // Little's law, at most 4x at a time: every step is judged (rule 1), so
    // too many reads (threads and requests cost CPU too) are found and
    // taken back.
    return Change(kReads, more_reads, now_s,
                  Format("the consumer waited %.0f%% of the time and prep waited for reads; "
                         "%.1f ms a read x %.0f items/s prep can take",
                         wait * 100, latency * 1e3, capacity),
                  rate, wait);
  }
  // Reads prep never waits for: each costs CPU (a fetch thread waking, a
  // request), and on a prep-bound pipeline the consumer always waits, so
  // the never-waits rule would never cut them. Straight to Little's law
  // (judged like any removal).
  const int little = Little(m, capacity);
  if (limits_.reads && w.fetch_items > 0 && starved < kStarved / 2 && s_.reads > limits_.min_reads &&
      s_.reads * 2 > little * 3 &&
      (Allowed(floor_[kReads], now_s) || little >= floor_[kReads].value)) {
    return Change(kReads, std::max(little, limits_.min_reads), now_s,
                  Format("prep never waited for reads: %.1f ms a read x %.0f items/s prep can "
                         "take needs about %.0f in flight",
                         latency * 1e3, capacity, little),
                  rate, wait);
  }
  if (limits_.prefetch && busy <= kBusy && starved <= kStarved &&
      s_.prefetch < limits_.max_prefetch) {
    return Change(kPrefetch, s_.prefetch + 1, now_s,
                  Format("the consumer waited %.0f%% of the time while prep kept up on average "
                         "(busy %.0f%%): one more batch covers the jitter",
                         wait * 100, busy * 100),
                  rate, wait);
  }
  return std::nullopt;
}

// Rule 3: the consumer never waits.
std::optional<AutotuneDecision> Autotuner::WhenNeverWaiting(const AutotuneWindow& w, const Seen& m,
                                                            double now_s) {
  const double prep_cores = w.prep_cpu_s / w.wall_s;
  if (limits_.threads && s_.threads > 1 &&
      ThreadsToCarry(observed_.prep_cpu, observed_.rate) <= s_.threads - 1 &&
      (Allowed(floor_[kThreads], now_s) || s_.threads > floor_[kThreads].value)) {
    return Change(kThreads, s_.threads - 1, now_s,
                  Format("the consumer never waited and prep used %.2f cores: %.0f thread(s) carry it",
                         prep_cores, s_.threads - 1.0),
                  m.rate, m.wait);
  }
  // The process uses every core (a CPU-bound training step): the step's
  // threads and prep's share them, and the consumer's rate, not its waits,
  // says what prep threads cost it. One more is tried, and kept only if the
  // rate rises as much as any add must (else taken back, and the count
  // becomes a ceiling).
  const double process_cores = w.process_cpu_s / w.wall_s;
  if (limits_.threads && s_.threads < limits_.max_threads && CoresTaken(observed_) &&
      CapAdd(kThreads, s_.threads, s_.threads + 1, now_s) > s_.threads) {
    AutotuneDecision d = Change(
        kThreads, s_.threads + 1, now_s,
        Format("the process used %.1f of %.0f cores (a CPU-bound step): one more prep thread tried, "
               "kept if the rate rises",
               process_cores, limits_.max_threads),
        m.rate, m.wait);
    pending_->probe = true;
    return d;
  }
  if (limits_.reads && m.latency > 0) {
    const int need = Little(m, m.rate * 1.3);
    if (need < s_.reads && need * 3 <= s_.reads * 2 &&
        (Allowed(floor_[kReads], now_s) || need >= floor_[kReads].value)) {
      return Change(kReads, need, now_s,
                    Format("the consumer never waited; %.1f ms a read x %.0f items/s (+30%%) needs "
                           "about %.0f in flight",
                           m.latency * 1e3, m.rate, need),
                    m.rate, m.wait);
    }
  }
  return std::nullopt;
}

}  // namespace nostall
