// The trace reader and its graph on small hand-written traces (the Python
// tests read real torch.profiler traces and GPU traces in Kineto's format).
#include <gtest/gtest.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "nostall/trace.h"
#include "trace/events.h"
#include "trace/graph.h"

namespace nostall::trace {
namespace {

using json = nlohmann::json;

// Steps of 10 ms: a 4 ms wait on a DataLoader without workers, then 6 ms of operators.
std::string InlineLoop(int steps, bool bare = false, bool string_ids = false) {
  json ev = json::array();
  for (int s = 0; s < steps; ++s) {
    const double t0 = 1000 + s * 10000.0;
    json pid = string_ids ? json("proc") : json(7), tid = string_ids ? json("main") : json(7);
    ev.push_back({{"ph", "X"}, {"cat", "user_annotation"}, {"name", "ProfilerStep#" + std::to_string(s)},
                  {"pid", pid}, {"tid", tid}, {"ts", t0}, {"dur", 10000.0}});
    ev.push_back({{"ph", "X"}, {"cat", "user_annotation"},
                  {"name", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"},
                  {"pid", pid}, {"tid", tid}, {"ts", t0}, {"dur", 4000.0}});
    ev.push_back({{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::addmm"}, {"pid", pid}, {"tid", tid},
                  {"ts", t0 + 4000}, {"dur", 6000.0}});
  }
  return bare ? ev.dump() : json{{"traceEvents", ev}, {"schemaVersion", 1}}.dump();
}

Trace Build(const std::string& text) {
  auto ev = ParseEvents(text.data(), text.size(), "t.json");
  EXPECT_TRUE(ev.ok()) << ev.status().ToString();
  auto g = BuildGraph(std::move(ev).value(), "t.json");
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return std::move(g).value();
}

json Simulate(const Trace& t, const std::string& change) {
  auto c = ChangeFromJson(change);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return json::parse(SimulateJson(t, c.value()).value());
}

TEST(TraceTest, ReplayedUnchangedAnInlineLoopGivesItsStepsBack) {
  const Trace t = Build(InlineLoop(5));
  EXPECT_EQ(t.steps.size(), 5u);
  EXPECT_EQ(t.loader, LoaderKind::kInline);
  const json r = Simulate(t, "{}");
  EXPECT_NEAR(r["step_s"].get<double>(), 0.010, 1e-9);
  EXPECT_NEAR(r["path"]["data"].get<double>(), 0.004, 1e-9);
  EXPECT_NEAR(r["path"]["cpu"].get<double>(), 0.006, 1e-9);
  EXPECT_EQ(r["critical"], "cpu");
  EXPECT_NEAR(Simulate(t, R"({"loader_free": true})")["step_s"].get<double>(), 0.006, 1e-9);
  EXPECT_NEAR(Simulate(t, R"({"loader_speedup": 4})")["step_s"].get<double>(), 0.007, 1e-9);
  // Beside the loop, a batch every 8 ms: the loop (6 ms) waits for each; the steps are the period.
  EXPECT_NEAR(Simulate(t, R"({"loader_period": 0.008})")["step_s"].get<double>(), 0.008, 1e-9);
  // The operator is long enough for intra-op threads: 6 ms x 1/2.
  EXPECT_NEAR(Simulate(t, R"({"threads_from": 1, "threads_to": 2})")["step_s"].get<double>(), 0.007, 1e-9);
}

// Two DataLoader workers beside the loop: batches come in pairs, one pair
// every 20 ms (a batch every 10 ms). The loop (6 ms a step) waits for the
// first of each pair and takes the second at once, in 0.5 ms or, on a busy
// machine, 3 ms: the trace ends on such a take.
std::string PairedLoop(int steps) {
  json ev = json::array();
  double cur = 0;
  for (int s = 0; s < steps; ++s) {
    const double wait = s % 2 == 0 ? 20000.0 * (s / 2 + 1) - cur : (s % 4 == 1 ? 3000.0 : 500.0);
    ev.push_back({{"ph", "X"}, {"cat", "user_annotation"}, {"name", "ProfilerStep#" + std::to_string(s)},
                  {"pid", 7}, {"tid", 7}, {"ts", 1000 + cur}, {"dur", wait + 6000}});
    ev.push_back({{"ph", "X"}, {"cat", "user_annotation"},
                  {"name", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"},
                  {"pid", 7}, {"tid", 7}, {"ts", 1000 + cur}, {"dur", wait}});
    ev.push_back({{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::addmm"}, {"pid", 7}, {"tid", 7},
                  {"ts", 1000 + cur + wait}, {"dur", 6000.0}});
    cur += wait + 6000;
  }
  return json{{"traceEvents", ev}}.dump();
}

TEST(TraceTest, BatchesInBurstsGiveTheLoadersPeriodNotTheBurstsSpacing) {
  const Trace t = Build(PairedLoop(10));
  EXPECT_EQ(t.loader, LoaderKind::kBeside);
  ASSERT_TRUE(t.period_seen);
  // From the first batch of one pair to the first of another: whole pairs,
  // never a pair's second batch taken late at the end.
  EXPECT_NEAR(t.loader_period, 0.010, 1e-9);
  // Replayed unchanged, the steady steps take the loader's period.
  EXPECT_NEAR(Simulate(t, "{}")["step_s"].get<double>(), 0.010, 0.0005);
}

TEST(TraceTest, WorkersThatOversubscribeTheLoopsThreadsSlowItByTheirFairShare) {
  // Every step alike (6 ms of work): the least contended step shows none.
  const std::string paired = PairedLoop(10);
  const Trace alone = Build(paired);
  EXPECT_NEAR(alone.least_contended, 1, 1e-9);
  EXPECT_NEAR(alone.contention, 1, 1e-9);
  auto marked = [&](const std::string& marks) {
    return Build("{\"nostall\": " + marks + ", " + paired.substr(1));
  };
  // 2 intra-op threads and workers 1 core busy on 2 cores: 2 / 3 of its speed.
  const Trace two = marked(R"({"intra_op_threads": 2, "cores": 2, "workers_cpu_s": 2, "workers_wall_s": 2})");
  EXPECT_NEAR(two.contention, 2.0 / 3, 1e-9);
  EXPECT_TRUE(two.contention_from_workers);
  // The synthetic-batch step is the loop's work at that share: 6 ms x 2/3.
  EXPECT_NEAR(Simulate(two, R"({"loader_free": true})")["step_s"].get<double>(), 0.004, 0.0002);
  // One thread beside one busy worker on 2 cores: no oversubscription.
  const Trace one = marked(R"({"intra_op_threads": 1, "cores": 2, "workers_cpu_s": 2, "workers_wall_s": 2})");
  EXPECT_NEAR(one.contention, 1, 1e-9);
  EXPECT_FALSE(one.contention_from_workers);
  // Without the workers' CPU: as unmarked.
  EXPECT_NEAR(marked(R"({"intra_op_threads": 2, "cores": 2})").contention, 1, 1e-9);
}

TEST(TraceTest, ABareListAndStringIdsReadAsTheObjectForm) {
  const json a = Simulate(Build(InlineLoop(4)), "{}");
  const json b = Simulate(Build(InlineLoop(4, true, true)), "{}");
  EXPECT_EQ(a["step_s"], b["step_s"]);
  EXPECT_EQ(a["path"], b["path"]);
}

TEST(TraceTest, WhatIsNotATraceIsADataErrorNamingIt) {
  for (const char* bad : {"", "{", "[1, 2", "{\"traceEvents\": 3}", "nul"}) {
    auto ev = ParseEvents(bad, std::strlen(bad), "bad.json");
    if (ev.ok()) {
      auto g = BuildGraph(std::move(ev).value(), "bad.json");
      ASSERT_FALSE(g.ok()) << bad;
      EXPECT_NE(g.status().message().find("bad.json"), std::string::npos);
    } else {
      EXPECT_EQ(ev.status().code(), StatusCode::kDataError) << bad;
      EXPECT_NE(ev.status().message().find("bad.json"), std::string::npos) << bad;
    }
  }
  auto missing = ReadEvents("/nonexistent/trace.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(TraceTest, EventsPastTheBoundAreCountedNotKept) {
  const std::string text = InlineLoop(100);  // 300 events
  auto ev = ParseEvents(text.data(), text.size(), "big.json", /*max_events=*/30);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_EQ(ev.value().events.size(), 30u);
  EXPECT_EQ(ev.value().not_kept, 270);
  auto g = BuildGraph(std::move(ev).value(), "big.json");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g.value().events_not_kept, 270);
  EXPECT_EQ(json::parse(FactsJson(g.value()))["events_not_read"], 270);
  EXPECT_LE(g.value().steps.size(), 10u);  // the steps the kept events hold
}

TEST(TraceTest, TheNostallMetadataObjectIsReadAsNumbers) {
  // What nostall.trace.mark(prof) adds with torch's add_metadata_json: the
  // numbers are kept, anything else (strings, nested values) passed over.
  const std::string events = InlineLoop(4, /*bare=*/true);
  const std::string text = R"({"schemaVersion": 1, "nostall": {"intra_op_threads": 2, "cores": 16,
      "torch": "2.13", "nested": {"intra_op_threads": 9}, "num_workers": 0}, "other": {"cores": 3},
      "traceEvents": )" + events + "}";
  auto ev = ParseEvents(text.data(), text.size(), "marked.json");
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  const std::map<std::string, double> want = {{"cores", 16}, {"intra_op_threads", 2}, {"num_workers", 0}};
  EXPECT_EQ(ev.value().marks, want);
  auto g = BuildGraph(std::move(ev).value(), "marked.json");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(json::parse(FactsJson(g.value()))["marks"]["intra_op_threads"], 2);
  // Without it: no marks.
  auto plain = ParseEvents(events.data(), events.size(), "plain.json");
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain.value().marks.empty());
}

TEST(TraceTest, ChangesAreChecked) {
  EXPECT_FALSE(ChangeFromJson(R"({"gpu_speedup": 0})").ok());
  EXPECT_FALSE(ChangeFromJson(R"({"gpu_speedup": "2"})").ok());
  EXPECT_FALSE(ChangeFromJson(R"({"warp_drive": true})").ok());
  EXPECT_FALSE(ChangeFromJson(R"({"threads_from": 1})").ok());
  EXPECT_FALSE(ChangeFromJson(R"({"loader_period": -1})").ok());
  EXPECT_FALSE(ChangeFromJson("[]").ok());
  EXPECT_TRUE(ChangeFromJson(R"({"amp": true, "pinned_copies": true})").ok());
}

}  // namespace
}  // namespace nostall::trace
