// The dependency graph of a trace (nostall/trace.h says what it holds).
#ifndef NOSTALL_TRACE_GRAPH_H_
#define NOSTALL_TRACE_GRAPH_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nostall/trace.h"
#include "trace/events.h"

namespace nostall::trace {

// What a node is, for the rules that change it.
enum class Role : uint8_t {
  kWork,      // CPU time (operators, Python) or GPU work
  kLaunch,    // a runtime call that launches GPU work
  kSync,      // a runtime call that waits for the GPU
  kWait,      // waiting for the next batch
};

struct Node {
  double start = 0, dur = 0;  // seconds, as traced (from the first step's start)
  double tail = 0;            // kSync: what the call takes once the GPU work is done
  uint32_t lane = 0;          // into Trace::lanes
  Kind kind = Kind::kCpu;
  Role role = Role::kWork;
  // Parts of a CPU node's time the rules treat apart (seconds):
  double parallel = 0;        // in ATen operators large enough for intra-op threads
  double opt_python = 0;      // the optimizer's Python between its per-parameter operators
  float opt_share = 1;        // of opt_python a fused optimizer still pays (kinds / calls)
  // GPU nodes:
  bool gemm = false;          // a GEMM or convolution kernel
  bool pageable_h2d = false;  // a host-to-device copy from pageable memory
  bool in_optimizer = false;  // launched by the optimizer's step
  uint32_t optimizer_call = 0;  // which optimizer.step() launched it (1-based; 0: none)
  int32_t batch = -1;         // kWait: which batch (0-based, in the trace's order)
  bool own_copy = false;      // kSync that waits for its own pageable host-to-device copy
};

enum class EdgeType : uint8_t {
  kAfterEnd,     // to starts after from ends
  kAfterStart,   // to starts `lag` after from starts (a launch, a thread woken)
  kEndAfterEnd,  // to ends after from ends (a synchronisation)
};

struct Edge {
  uint32_t from = 0, to = 0;
  EdgeType type = EdgeType::kAfterEnd;
  double lag = 0;
};

struct GraphLane {
  std::string name;           // "CPU thread 123 (python)", "GPU 0 stream 7"
  bool gpu = false;
  bool main = false;          // the thread that runs ProfilerStep#N
};

struct Step {
  int64_t number = 0;
  uint32_t first = 0;         // its first node on the main lane
  uint32_t last = 0;          // its last node on the main lane
  double start = 0, end = 0;  // as traced (seconds from the first step's start)
};

// The loader as the trace shows it.
enum class LoaderKind : uint8_t { kNone, kInline, kBeside };

class Trace {
 public:
  std::string path;
  std::vector<Node> nodes;
  std::vector<Edge> edges;      // sorted by `to`
  std::vector<uint32_t> in_begin;  // edges of node i: [in_begin[i], in_begin[i+1])
  std::vector<GraphLane> lanes;
  std::vector<Step> steps;
  std::string loader_name;      // the wait's annotation, e.g. enumerate(DataLoader)#...
  LoaderKind loader = LoaderKind::kNone;
  double loader_period = 0;     // seconds per batch, where the waits show it (kBeside)
  bool period_seen = false;     // false: the loader kept up; the period is at most the step
  double wait_floor = 0;        // what taking a ready batch costs (the shortest wait)
  int64_t counts[static_cast<int>(Cat::kOther) + 1] = {};
  int64_t events = 0;
  int64_t events_not_kept = 0;  // past kMaxEvents (events.h)
  std::map<std::string, double> marks;  // the trace's "nostall" metadata (events.h)
  int optimizer_calls = 0;
  double least_contended = 1;   // the fastest steady step's loop CPU time over the mean
  // The loop's CPU work against what it would take with the cores to
  // itself, where a loader beside it shared them: the least contended step,
  // or less where the trace's marks show the workers' CPU and the loop's
  // threads oversubscribing the cores (LoopContention in graph.cc).
  double contention = 1;
  bool contention_from_workers = false;
  double launch_floor = 5e-6;   // the shortest kernel launch: an asynchronous call's cost
};

// Builds the graph from the events; errors name the file.
Result<Trace> BuildGraph(Events ev, const std::string& path);

}  // namespace nostall::trace

#endif  // NOSTALL_TRACE_GRAPH_H_
