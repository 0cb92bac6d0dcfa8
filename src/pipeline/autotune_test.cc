// The autotuner's rules on made-up windows: what a user would see it do in
// each situation (src/pipeline/autotune.h).
#include "pipeline/autotune.h"

#include <gtest/gtest.h>

namespace nostall {
namespace {

AutotuneLimits AllTuned(int cores = 4) {
  AutotuneLimits l;
  l.threads = l.reads = l.prefetch = true;
  l.max_threads = cores;
  l.min_reads = 2;
  l.max_reads = 256;
  l.max_prefetch = 6;
  return l;
}

// One second in which `threads` prep threads made `rate` items/s, each
// taking `item_s` of CPU and wall time, the consumer waited `wait` of it,
// and reads took `latency_s` each.
AutotuneWindow Window(int threads, double rate, double item_s, double wait, double latency_s = 1e-4) {
  AutotuneWindow w;
  w.wall_s = 1;
  w.consumer_wait_s = wait;
  w.prep_items = static_cast<int64_t>(rate);
  w.prep_work_s = w.prep_cpu_s = rate * item_s;
  w.prep_starved_s = std::max(0.0, threads - w.prep_work_s);
  w.fetch_items = w.prep_items;
  w.fetch_work_s = w.fetch_items * latency_s;
  w.fetch_bytes = w.fetch_items * 100e3;
  w.process_cpu_s = w.loader_cpu_s = w.prep_cpu_s;
  return w;
}

// Feeds windows from `make(settings)` until nothing changes for 40 in a row
// (past the back-offs; or 300 windows); returns the decisions.
template <typename F>
std::vector<AutotuneDecision> Feed(Autotuner* t, F make, double* now) {
  std::vector<AutotuneDecision> out;
  int quiet = 0;
  for (int i = 0; i < 300 && quiet < 40; ++i) {
    *now += 1;
    if (auto d = t->Step(make(t->settings()), *now)) {
      out.push_back(*d);
      quiet = 0;
    } else {
      ++quiet;
    }
  }
  return out;
}

TEST(AutotuneTest, PrepBoundAddsThreadsUpToTheCores) {
  Autotuner t(AllTuned(4), {1, 4, 2});
  double now = 0;
  // Each thread makes 250 items/s; the consumer takes anything: it waits.
  auto d = Feed(&t, [](const AutotuneSettings& s) { return Window(s.threads, 250.0 * s.threads, 0.004, 0.9); },
               &now);
  EXPECT_EQ(t.settings().threads, 4);
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(d.front().knob, "threads");
  EXPECT_EQ(d.front().from, 1);
  EXPECT_EQ(d.front().to, 2);
  EXPECT_NE(d.front().why.find("busy"), std::string::npos) << d.front().why;
  // The model (nostall/model.h) reproduces the window and says what the
  // thread would bring: about double.
  EXPECT_NEAR(d.front().model_rate_before, 250, 25);
  EXPECT_GT(d.front().model_rate_after, d.front().model_rate_before * 1.8);
}

TEST(AutotuneTest, ASlowConsumerNeedsFewThreads) {
  // The step takes 300 items/s; one thread makes 250: two carry it, four idle.
  Autotuner t(AllTuned(4), {4, 4, 2});
  double now = 0;
  auto make = [](const AutotuneSettings& s) {
    const double rate = std::min(300.0, 250.0 * s.threads);
    return Window(s.threads, rate, 0.004, rate < 300 ? (300 - rate) / 300 : 0.0);
  };
  Feed(&t, make, &now);
  EXPECT_EQ(t.settings().threads, 2);
}

TEST(AutotuneTest, AThreadThatDoesNotRaiseTheRateIsTakenBackAndNotRetriedAtOnce) {
  // Two cores taken by the step: a second prep thread makes nothing more.
  Autotuner t(AllTuned(4), {1, 4, 2});
  double now = 0;
  auto make = [](const AutotuneSettings& s) { return Window(s.threads, 250.0, 0.004 * s.threads, 0.5); };
  auto d = Feed(&t, make, &now);
  ASSERT_GE(d.size(), 2u);
  EXPECT_EQ(d[0].to, 2);
  EXPECT_EQ(d[1].to, 1);
  EXPECT_NE(d[1].why.find("taken back"), std::string::npos) << d[1].why;
  EXPECT_EQ(t.settings().threads, 1);
  // Retried after the back-off, never after the second reversal: at most
  // 2 reversals in 200 s.
  int reversals = 0;
  for (const auto& x : d) reversals += x.why.find("taken back") != std::string::npos;
  EXPECT_LE(reversals, 2);
  const size_t before = d.size();
  auto later = Feed(&t, make, &now);
  EXPECT_TRUE(later.empty()) << later.size() << " more changes after " << before;
}

TEST(AutotuneTest, AThreadRemovedWhenTheConsumerThenWaitsIsGivenBack) {
  // Prep's CPU looks like it fits in one thread fewer, but with one fewer
  // the consumer waits (the threads' time is not all CPU: say, page faults).
  Autotuner t(AllTuned(4), {2, 4, 2});
  double now = 0;
  auto make = [](const AutotuneSettings& s) {
    AutotuneWindow w = Window(s.threads, s.threads >= 2 ? 300.0 : 200.0, 0.0025, s.threads >= 2 ? 0.0 : 0.3);
    return w;
  };
  auto d = Feed(&t, make, &now);
  ASSERT_GE(d.size(), 2u);
  EXPECT_EQ(d[0].to, 1);
  EXPECT_EQ(d[1].to, 2);
  EXPECT_NE(d[1].why.find("given back"), std::string::npos) << d[1].why;
  EXPECT_EQ(t.settings().threads, 2);
}

// A CPU-bound training step on 2 cores (its own threads on both): the
// consumer never waits, prep's CPU fits in one thread, yet with one prep
// thread the step runs 20% slower (prep's work then runs beside it).
AutotuneWindow CpuBoundStep(const AutotuneSettings& s) {
  AutotuneWindow w = Window(s.threads, s.threads >= 2 ? 440.0 : 350.0, 0.0016, 0.0);
  w.process_cpu_s = 1.95;  // the step's threads and prep's fill both cores
  return w;
}

TEST(AutotuneTest, AThreadFewerThatSlowsACpuBoundStepIsGivenBack) {
  Autotuner t(AllTuned(2), {2, 2, 2});
  double now = 0;
  auto d = Feed(&t, CpuBoundStep, &now);
  ASSERT_GE(d.size(), 2u);
  EXPECT_EQ(d[0].to, 1);
  EXPECT_EQ(d[1].to, 2);
  EXPECT_NE(d[1].why.find("rate fell to 350"), std::string::npos) << d[1].why;
  EXPECT_EQ(t.settings().threads, 2);
  // Not tried again after the back-off: the step is as CPU-bound as before.
  EXPECT_EQ(d.size(), 2u);
}

TEST(AutotuneTest, ACpuBoundStepStartedOnOneThreadTriesASecondAndKeepsIt) {
  Autotuner t(AllTuned(2), {1, 2, 2});
  double now = 0;
  auto d = Feed(&t, CpuBoundStep, &now);
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(d[0].to, 2);
  EXPECT_NE(d[0].why.find("CPU-bound"), std::string::npos) << d[0].why;
  EXPECT_EQ(t.settings().threads, 2);
}

TEST(AutotuneTest, AThreadTriedUnderACpuBoundStepThatDoesNotPayIsTakenBack) {
  Autotuner t(AllTuned(2), {1, 2, 2});
  double now = 0;
  auto flat = [](const AutotuneSettings& s) {  // the rate the same with 1 or 2
    AutotuneWindow w = Window(s.threads, 350.0, 0.0016, 0.0);
    w.process_cpu_s = 1.95;
    return w;
  };
  auto d = Feed(&t, flat, &now);
  ASSERT_GE(d.size(), 2u);
  EXPECT_EQ(d[0].to, 2);
  EXPECT_EQ(d[1].to, 1);
  EXPECT_NE(d[1].why.find("taken back"), std::string::npos) << d[1].why;
  EXPECT_EQ(t.settings().threads, 1);
  EXPECT_LE(d.size(), 4u);  // tried again once after the back-off, then never
}

TEST(AutotuneTest, AnAddThatCostsACpuBoundStepIsNotRetriedWhileTheCoresStayTaken) {
  // A one-thread step on 2 cores: a second prep thread takes the step's
  // core and the rate falls 20%.
  Autotuner t(AllTuned(2), {1, 2, 2});
  double now = 0;
  auto costly = [](const AutotuneSettings& s) {
    AutotuneWindow w = Window(s.threads, s.threads >= 2 ? 280.0 : 350.0, 0.0016, 0.0);
    w.process_cpu_s = 1.95;
    return w;
  };
  auto d = Feed(&t, costly, &now);
  ASSERT_EQ(d.size(), 2u);  // tried once, taken back, never again (40 quiet windows, past the 15 s back-off)
  EXPECT_EQ(d[0].to, 2);
  EXPECT_EQ(d[1].to, 1);
  EXPECT_NE(d[1].why.find("not tried again while the cores stay taken"), std::string::npos) << d[1].why;
  EXPECT_TRUE(Feed(&t, costly, &now).empty());
  // The step changes: the cores are free and the consumer waits on busy
  // prep threads. A second thread is tried again.
  auto starved = [](const AutotuneSettings& s) { return Window(s.threads, 250.0 * s.threads, 0.004, 0.4); };
  auto after = Feed(&t, starved, &now);
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after[0].to, 2);
  EXPECT_EQ(t.settings().threads, 2);
}

TEST(AutotuneTest, FarStorageGetsReadsByLittlesLaw) {
  // 30 ms a read; prep can take 500 items/s with 2 threads; every read in
  // flight brings 1/0.03 items/s.
  AutotuneLimits l = AllTuned(2);
  Autotuner t(l, {2, 1, 2});
  double now = 0;
  auto make = [](const AutotuneSettings& s) {
    const double rate = std::min(500.0, s.reads / 0.03);
    AutotuneWindow w = Window(2, rate, 0.004, rate < 500 ? 1 - rate / 500 : 0.0, 0.03);
    return w;
  };
  auto d = Feed(&t, make, &now);
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(d[0].knob, "reads_in_flight");
  // Enough to bring the 500/s prep can take (15 at 30 ms), no more than
  // Little's law with its headroom: 500/s x 30 ms x 1.5 + 2 = 25 (nostall/model.h: AutoReadsInFlight).
  EXPECT_GE(t.settings().reads, 15);
  EXPECT_LE(t.settings().reads, 25);
  // Up 4x at a time at most: 1 -> 4.
  EXPECT_EQ(d[0].to, 4);
  EXPECT_NE(d[0].why.find("30.0 ms"), std::string::npos) << d[0].why;
}

TEST(AutotuneTest, ReadsThatDidNotPayAreTakenBackThenBisected) {
  // Reads of 30 ms; the rate grows with them up to 60, then falls (each
  // read costs the cores something): the tuner ends between 45 and 75.
  Autotuner t(AllTuned(2), {2, 16, 2});
  double now = 0;
  auto make = [](const AutotuneSettings& s) {
    const double rate = s.reads <= 60 ? s.reads / 0.03 : 2000 - (s.reads - 60) * 15.0;
    AutotuneWindow w = Window(2, rate, 0.0005, 0.9, 0.03);
    w.prep_starved_s = 1.0;  // prep waits for reads
    return w;
  };
  auto d = Feed(&t, make, &now);
  EXPECT_GE(t.settings().reads, 45);
  EXPECT_LE(t.settings().reads, 75);
  int reversals = 0;
  for (const auto& x : d) reversals += x.why.find("taken back") != std::string::npos;
  EXPECT_GE(reversals, 1);
  EXPECT_LE(reversals, 2);
}

TEST(AutotuneTest, TooManyReadsComeDownWhenTheConsumerNeverWaits) {
  Autotuner t(AllTuned(2), {2, 200, 2});
  double now = 0;
  Feed(&t, [](const AutotuneSettings&) { return Window(2, 400, 0.004, 0.0, 0.01); }, &now);
  // 400/s x 1.3 x 10 ms x 1.5 + 2 = 10
  EXPECT_EQ(t.settings().reads, 10);
}

TEST(AutotuneTest, IdleReadsOfAPrepBoundPipelineAreCut) {
  // All cores busy preparing, the consumer always waits, reads take 0.1 ms:
  // 64 fetch threads are 60 too many (each wakes and costs CPU).
  Autotuner t(AllTuned(2), {2, 64, 2});
  double now = 0;
  auto d = Feed(&t, [](const AutotuneSettings& s) { return Window(2, 500, 0.004, 0.9); }, &now);
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(d[0].knob, "reads_in_flight");
  EXPECT_EQ(d[0].to, 4);  // Little's law: 500/s x 0.1 ms, at least 4 (nostall/model.h: AutoReadsInFlight)
  EXPECT_NE(d[0].why.find("never waited for reads"), std::string::npos) << d[0].why;
  EXPECT_EQ(t.settings().threads, 2);
}

TEST(AutotuneTest, JitterGetsPrefetchUpToTheCap) {
  // Prep keeps up on average (60% busy, not starved) yet the consumer waits.
  Autotuner t(AllTuned(2), {2, 4, 1});
  double now = 0;
  auto make = [](const AutotuneSettings& s) {
    AutotuneWindow w = Window(2, 300, 0.004, s.prefetch < 4 ? 0.1 : 0.0);
    w.prep_starved_s = 0.1;
    return w;
  };
  auto d = Feed(&t, make, &now);
  EXPECT_EQ(t.settings().prefetch, 4);
  for (const auto& x : d) EXPECT_EQ(x.knob, "prefetch");
}

TEST(AutotuneTest, KnobsNotTunedNeverMove) {
  AutotuneLimits l = AllTuned(4);
  l.threads = false;
  l.prefetch = false;
  Autotuner t(l, {1, 4, 2});
  double now = 0;
  auto d = Feed(&t, [](const AutotuneSettings& s) { return Window(s.threads, 250, 0.004, 0.9); }, &now);
  EXPECT_EQ(t.settings().threads, 1);
  EXPECT_EQ(t.settings().prefetch, 2);
  for (const auto& x : d) EXPECT_EQ(x.knob, "reads_in_flight");
}

TEST(AutotuneTest, NoEvidenceNoChange) {
  Autotuner t(AllTuned(4), {4, 4, 2});
  double now = 0;
  AutotuneWindow idle;  // the consumer stopped (validation, checkpoint): nothing flowed
  idle.wall_s = 1;
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(t.Step(idle, now += 1).has_value());
  EXPECT_EQ(t.settings().threads, 4);
}

}  // namespace
}  // namespace nostall
