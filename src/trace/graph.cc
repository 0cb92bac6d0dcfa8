// Builds the dependency graph of a trace (graph.h) from its events.
#include "trace/graph.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>

namespace nostall::trace {
namespace {

constexpr double kUs = 1e-6;
// An ATen operator's stretch of own time at least this long is counted as
// work intra-op threads divide (ATen splits an operator over threads past
// a grain of 32,768 elements, some tens of microseconds of work).
constexpr double kParallelMin = 50e-6;

bool StartsWith(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

bool IsWait(const std::string& n) {
  return StartsWith(n, "enumerate(DataLoader)#") || StartsWith(n, "nostall: next batch");
}
bool IsOptimizer(const std::string& n) { return StartsWith(n, "Optimizer.step#"); }
bool IsStep(const std::string& n) { return StartsWith(n, "ProfilerStep#"); }
bool IsSyncCall(const std::string& n) {
  return n == "cudaDeviceSynchronize" || n == "cudaStreamSynchronize" ||
         n == "cudaEventSynchronize" || n == "cudaMemcpy" || n == "cudaMemcpy2D" ||
         n == "cuCtxSynchronize" || n == "cuStreamSynchronize" || n == "cuEventSynchronize" ||
         n == "hipDeviceSynchronize" || n == "hipStreamSynchronize" || n == "hipMemcpy";
}
// A host-to-device copy from pageable memory (the GPU event's name).
bool IsPageableH2D(const std::string& n) {
  return n.find("HtoD") != std::string::npos && n.find("Pageable") != std::string::npos;
}
bool IsGemm(const std::string& n) {
  static const char* kWords[] = {"gemm", "Gemm", "GEMM", "conv", "Conv", "cutlass", "cudnn",
                                 "xmma", "wgrad", "dgrad", "fprop", "s1688", "s884", "h1688",
                                 "h884", "s16816", "h16816", "_mma", "matmul"};
  for (const char* w : kWords)
    if (n.find(w) != std::string::npos) return true;
  return false;
}

// One open event while a CPU lane is swept.
struct Open {
  double end;
  uint32_t event;
};

struct Builder {
  Events& ev;
  Trace& t;
  double origin = 0;  // microseconds: the first step's start
  double window_end_us = 0;
  uint32_t main_lane = 0;
  std::vector<uint32_t> step_events;  // ProfilerStep#N on the main lane, by time
  // GPU work by correlation id, and each CPU node's GPU work.
  std::unordered_map<int64_t, uint32_t> gpu_by_corr;   // correlation -> event index
  std::unordered_map<uint32_t, uint32_t> node_of_gpu_event;
  std::vector<std::pair<uint32_t, int64_t>> launches;  // (node, correlation)
  std::vector<uint32_t> syncs;                         // sync nodes
  // The optimizer calls' direct children: calls and distinct names.
  struct OptCall {
    int64_t children = 0;
    std::set<uint32_t> names;
  };
  std::vector<OptCall> opt_calls;
  std::vector<uint32_t> opt_nodes;
  // The main lane's nodes by time (for other threads' fork edges), and its
  // waits for data.
  std::vector<uint32_t> main_nodes, wait_nodes;
  std::vector<std::string> wait_names;

  double S(double us) const { return (us - origin) * kUs; }

  uint32_t Add(Node n) {
    t.nodes.push_back(n);
    return static_cast<uint32_t>(t.nodes.size() - 1);
  }
  void Edge_(uint32_t from, uint32_t to, EdgeType type, double lag = 0) {
    t.edges.push_back(Edge{from, to, type, lag});
  }
};

// Steps: ProfilerStep#N on one thread (the main lane); the window they span.
Status FindSteps(Builder& b, const std::string& path) {
  const Events& ev = b.ev;
  std::vector<uint32_t>& steps = b.step_events;
  for (uint32_t i = 0; i < ev.events.size(); ++i) {
    const Event& e = ev.events[i];
    if (e.cat == Cat::kUserAnnotation && IsStep(ev.names[e.name])) steps.push_back(i);
  }
  if (steps.empty()) {
    return DataError(path + ": the trace has no ProfilerStep#N events: profile several steps "
                            "with torch.profiler.profile(schedule=...) and call prof.step() "
                            "after each one");
  }
  std::sort(steps.begin(), steps.end(), [&](uint32_t a, uint32_t c) { return ev.events[a].ts < ev.events[c].ts; });
  b.main_lane = ev.events[steps[0]].lane;
  // Steps on other threads than the first step's are not this loop's.
  steps.erase(std::remove_if(steps.begin(), steps.end(), [&](uint32_t i) { return ev.events[i].lane != b.main_lane; }),
              steps.end());
  b.origin = ev.events[steps[0]].ts;
  b.window_end_us = ev.events[steps.back()].ts + ev.events[steps.back()].dur;
  return Status::OK();
}

// GPU work by correlation id; each lane's events inside the steps; the
// lanes in the graph's order: the main thread first, other CPU threads,
// GPU streams.
std::vector<uint32_t> SortLanes(Builder& b, std::vector<std::vector<uint32_t>>* by_lane) {
  const Events& ev = b.ev;
  for (uint32_t i = 0; i < ev.events.size(); ++i) {
    const Event& e = ev.events[i];
    if (OnGpu(e.cat) && e.correlation >= 0) b.gpu_by_corr.emplace(e.correlation, i);
  }
  by_lane->assign(ev.lanes.size(), {});
  for (uint32_t i = 0; i < ev.events.size(); ++i) {
    const Event& e = ev.events[i];
    if (e.ts + e.dur < b.origin || e.ts > b.window_end_us) continue;  // outside the steps
    (*by_lane)[e.lane].push_back(i);
  }
  std::vector<uint32_t> order;
  order.push_back(b.main_lane);
  for (uint32_t l = 0; l < ev.lanes.size(); ++l)
    if (l != b.main_lane && !ev.lanes[l].gpu) order.push_back(l);
  for (uint32_t l = 0; l < ev.lanes.size(); ++l)
    if (ev.lanes[l].gpu) order.push_back(l);
  return order;
}

// A GPU stream: its kernels and copies in order, each after the one before.
void GpuLane(Builder& b, uint32_t glane, const std::vector<uint32_t>& es) {
  uint32_t prev = UINT32_MAX;
  double prev_end = -1e300;
  for (uint32_t i : es) {
    const Event& e = b.ev.events[i];
    if (!OnGpu(e.cat)) continue;
    Node n;
    n.start = b.S(std::max(e.ts, prev_end / kUs + b.origin));
    n.dur = std::max(0.0, b.S(e.ts + e.dur) - n.start);
    n.lane = glane;
    n.kind = e.cat == Cat::kKernel ? Kind::kGpu : Kind::kCopy;
    const std::string& name = b.ev.names[e.name];
    n.gemm = e.cat == Cat::kKernel && IsGemm(name);
    n.pageable_h2d = e.cat == Cat::kMemcpy && IsPageableH2D(name);
    const uint32_t id = b.Add(n);
    b.node_of_gpu_event[i] = id;
    if (prev != UINT32_MAX) b.Edge_(prev, id, EdgeType::kAfterEnd);
    prev = id;
    prev_end = n.start + n.dur;
  }
}

// A CPU lane, swept by time: cut where the innermost event changes; plain
// CPU time merged into one node until something the rules treat apart
// begins (a wait for data, a runtime call, another optimizer call).
class CpuLaneSweep {
 public:
  CpuLaneSweep(Builder& b, uint32_t glane, bool main) : b_(b), t_(b.t), glane_(glane), main_(main) {
    cursor_ = main ? b.origin : -1;
  }

  void Run(const std::vector<uint32_t>& es) {
    for (uint32_t i : es) {
      if (OnCpu(b_.ev.events[i].cat)) Event_(i);
    }
    while (!stack_.empty()) CloseTop();
    if (main_ && cursor_ < b_.window_end_us) Segment(cursor_, b_.window_end_us);
    Flush();
  }

 private:
  // Adds a node of this lane: after the one before it (on the training
  // loop always; elsewhere where the thread did not idle between them).
  uint32_t Place(const Node& node, int64_t opt) {
    const uint32_t id = b_.Add(node);
    if (opt >= 0) {
      t_.nodes[id].optimizer_call = static_cast<uint32_t>(opt + 1);
      b_.opt_nodes.push_back(id);
    }
    if (prev_node_ != UINT32_MAX && (main_ || std::abs(prev_end_us_ - (node.start / kUs + b_.origin)) < 1.0))
      b_.Edge_(prev_node_, id, EdgeType::kAfterEnd);
    prev_node_ = id;
    prev_end_us_ = (node.start + node.dur) / kUs + b_.origin;
    if (main_) b_.main_nodes.push_back(id);
    return id;
  }
  void Flush() {
    if (!building_) return;
    building_ = false;
    if (cur_.dur > 0) Place(cur_, cur_opt_);
  }
  // A stretch [a, c) whose innermost open event is stack_.back() (or none).
  void Segment(double a, double c) {
    if (c - a <= 0) return;
    if (!special_of_.empty() && special_of_.back()) return;  // its node is made
    const int64_t opt = stack_.empty() ? -1 : opt_of_.back();
    if (building_ && (cur_opt_ != opt)) Flush();
    if (!building_) {
      building_ = true;
      cur_ = Node();
      cur_.start = b_.S(a);
      cur_.lane = glane_;
      cur_.kind = Kind::kCpu;
      cur_opt_ = opt;
    }
    const double len = (c - a) * kUs;
    cur_.dur = b_.S(c) - cur_.start;
    const Event* inner = stack_.empty() ? nullptr : &b_.ev.events[stack_.back().event];
    if (inner && inner->cat == Cat::kCpuOp && len >= kParallelMin) cur_.parallel += len;
    if (opt >= 0 && inner && inner->cat != Cat::kCpuOp) cur_.opt_python += len;
  }
  void CloseTop() {
    const Open top = stack_.back();
    Segment(cursor_, top.end);
    cursor_ = std::max(cursor_, top.end);
    stack_.pop_back();
    opt_of_.pop_back();
    special_of_.pop_back();
  }
  // One CPU event as it opens.
  void Event_(uint32_t i) {
    const Events& ev = b_.ev;
    const Event& e = ev.events[i];
    const double s = std::max(e.ts, b_.origin);
    double end = std::min(e.ts + e.dur, b_.window_end_us);
    if (end <= s && e.dur > 0) return;
    while (!stack_.empty() && stack_.back().end <= s) CloseTop();
    if (!main_ && stack_.empty() && cursor_ < s) {
      Flush();  // a gap: the thread was idle
      cursor_ = s;
    }
    if (cursor_ < 0) cursor_ = s;
    Segment(cursor_, s);
    cursor_ = std::max(cursor_, s);
    if (!stack_.empty()) end = std::min(end, stack_.back().end);  // nested in its parent
    if (end < s) end = s;
    const std::string& name = ev.names[e.name];
    // The parent's optimizer call, and this event's place in it.
    int64_t opt = stack_.empty() ? -1 : opt_of_.back();
    if (opt >= 0 && !stack_.empty() && ev.events[stack_.back().event].cat == Cat::kUserAnnotation &&
        IsOptimizer(ev.names[ev.events[stack_.back().event].name]) && e.cat == Cat::kCpuOp) {
      b_.opt_calls[opt].children++;
      b_.opt_calls[opt].names.insert(e.name);
    }
    const bool in_special = !special_of_.empty() && special_of_.back();
    if (!in_special && e.cat == Cat::kUserAnnotation && IsOptimizer(name)) {
      opt = static_cast<int64_t>(b_.opt_calls.size());
      b_.opt_calls.emplace_back();
    }
    const bool is_wait = e.cat == Cat::kUserAnnotation && IsWait(name) && main_;
    const bool is_call = e.cat == Cat::kRuntime || e.cat == Cat::kDriver;
    if (!in_special && (is_wait || is_call) && end > s) Special(e, s, end, is_wait, opt);
    stack_.push_back(Open{end, i});
    opt_of_.push_back(opt);
    special_of_.push_back(in_special || (e.cat == Cat::kUserAnnotation && IsWait(name)) || is_call);
  }
  // A wait for data or a runtime call [s, end): its one node (two for a
  // copy from pageable memory: a launch until the copy begins, then a wait
  // for it).
  void Special(const Event& e, double s, double end, bool is_wait, int64_t opt) {
    Flush();
    const std::string& name = b_.ev.names[e.name];
    Node n;
    n.start = b_.S(s);
    n.dur = (end - s) * kUs;
    n.lane = glane_;
    if (is_wait) {
      n.kind = Kind::kData;
      n.role = Role::kWait;
      n.batch = static_cast<int32_t>(b_.wait_nodes.size());
    } else {
      n.kind = Kind::kCpu;
      n.role = IsSyncCall(name) ? Role::kSync : Role::kLaunch;
      auto g = e.correlation >= 0 ? b_.gpu_by_corr.find(e.correlation) : b_.gpu_by_corr.end();
      if (g != b_.gpu_by_corr.end()) {
        const Event& ge = b_.ev.events[g->second];
        if (ge.cat == Cat::kMemcpy && IsPageableH2D(b_.ev.names[ge.name])) {
          n.own_copy = true;
          n.dur = std::clamp(ge.ts - s, 0.0, end - s) * kUs;
        }
      }
      if (n.role == Role::kSync) n.kind = Kind::kSync;
    }
    const uint32_t id = Place(n, opt);
    if (n.own_copy) {
      Node w = n;
      w.role = Role::kSync;
      w.kind = Kind::kSync;
      w.start = n.start + n.dur;
      w.dur = (end - s) * kUs - n.dur;
      b_.syncs.push_back(Place(w, opt));
    }
    if (is_wait) {
      b_.wait_nodes.push_back(id);
      b_.wait_names.push_back(name);
    } else {
      if (e.correlation >= 0) b_.launches.emplace_back(id, e.correlation);
      if (t_.nodes[id].role == Role::kSync) b_.syncs.push_back(id);
    }
  }

  Builder& b_;
  Trace& t_;
  const uint32_t glane_;
  const bool main_;
  std::vector<Open> stack_;
  double cursor_;
  uint32_t prev_node_ = UINT32_MAX;
  double prev_end_us_ = -1;
  // The node being built (plain CPU time), if any.
  bool building_ = false;
  Node cur_;
  int64_t cur_opt_ = -1;
  std::vector<int64_t> opt_of_;  // per stack level: the optimizer call it is inside (-1)
  // Per stack level: inside a wait for data or a runtime call, whose one
  // node is made when it opens.
  std::vector<bool> special_of_;
};

// Every lane's nodes.
void BuildLanes(Builder& b) {
  std::vector<std::vector<uint32_t>> by_lane;
  for (uint32_t l : SortLanes(b, &by_lane)) {
    const Lane& lane = b.ev.lanes[l];
    const uint32_t glane = static_cast<uint32_t>(b.t.lanes.size());
    GraphLane gl;
    gl.gpu = lane.gpu;
    gl.main = l == b.main_lane;
    gl.name = lane.gpu ? "GPU " + lane.pid + " stream " + lane.tid
                       : "CPU thread " + lane.tid + (gl.main ? " (the training loop)" : "");
    std::vector<uint32_t>& es = by_lane[l];
    if (es.empty() && !gl.main) continue;
    b.t.lanes.push_back(gl);
    std::sort(es.begin(), es.end(), [&](uint32_t a, uint32_t c) {
      const Event &x = b.ev.events[a], &y = b.ev.events[c];
      return x.ts != y.ts ? x.ts < y.ts : x.dur > y.dur;
    });
    if (lane.gpu) {
      GpuLane(b, glane, es);
    } else {
      CpuLaneSweep(b, glane, gl.main).Run(es);
    }
  }
}

// Optimizer calls: of its Python between operators, what a fused step pays.
void MarkOptimizerNodes(Builder& b) {
  Trace& t = b.t;
  for (uint32_t id : b.opt_nodes) {
    const auto& call = b.opt_calls[t.nodes[id].optimizer_call - 1];
    t.nodes[id].in_optimizer = true;
    if (call.children > 0)
      t.nodes[id].opt_share = static_cast<float>(
          std::min(1.0, static_cast<double>(call.names.size()) / static_cast<double>(call.children)));
  }
  t.optimizer_calls = static_cast<int>(b.opt_calls.size());
}

// Launch edges (and GPU work's optimizer flag); when each GPU node's launch
// began (-1: not launched from a node).
std::vector<double> LaunchEdges(Builder& b) {
  Trace& t = b.t;
  std::vector<double> launched(t.nodes.size(), -1);
  std::vector<double> launch_durs;
  for (auto [node, corr] : b.launches) {
    auto g = b.gpu_by_corr.find(corr);
    if (g == b.gpu_by_corr.end()) continue;
    auto gn = b.node_of_gpu_event.find(g->second);
    if (gn == b.node_of_gpu_event.end()) continue;
    Node& l = t.nodes[node];
    Node& k = t.nodes[gn->second];
    const double lag = std::clamp(k.start - l.start, 0.0, l.dur);
    b.Edge_(node, gn->second, EdgeType::kAfterStart, lag);
    launched[gn->second] = l.start;
    if (l.in_optimizer) {
      k.in_optimizer = true;
      k.optimizer_call = l.optimizer_call;
    }
    if (l.role == Role::kLaunch) launch_durs.push_back(l.dur);
  }
  if (!launch_durs.empty()) {
    std::nth_element(launch_durs.begin(), launch_durs.begin() + launch_durs.size() / 10, launch_durs.end());
    t.launch_floor = launch_durs[launch_durs.size() / 10];
  }
  return launched;
}

// Synchronisation edges: from the last GPU work on each stream launched before the call.
void SyncEdges(Builder& b, const std::vector<double>& launched) {
  Trace& t = b.t;
  std::vector<std::vector<uint32_t>> gpu_lanes(t.lanes.size());
  for (uint32_t i = 0; i < t.nodes.size(); ++i)
    if (t.lanes[t.nodes[i].lane].gpu) gpu_lanes[t.nodes[i].lane].push_back(i);
  for (uint32_t s : b.syncs) {
    Node& sn = t.nodes[s];
    double waited_until = sn.start;
    for (const auto& gl : gpu_lanes) {
      if (gl.empty()) continue;
      // GPU nodes of a stream run in launch order; the last launched before the call.
      auto it = std::partition_point(gl.begin(), gl.end(), [&](uint32_t g) {
        const double at = launched[g] >= 0 ? launched[g] : t.nodes[g].start;
        return at < sn.start;
      });
      if (it == gl.begin()) continue;
      const uint32_t g = *(it - 1);
      b.Edge_(g, s, EdgeType::kEndAfterEnd);
      waited_until = std::max(waited_until, t.nodes[g].start + t.nodes[g].dur);
    }
    sn.tail = std::max(0.0, sn.start + sn.dur - waited_until);
  }
}

// Other threads' first node after an idle gap starts when the training loop
// is where it was then (the fork that woke them): an edge from the main node at that time.
void ForkEdges(Builder& b) {
  Trace& t = b.t;
  const std::vector<uint32_t>& main_nodes = b.main_nodes;
  std::vector<bool> has_pred(t.nodes.size(), false);
  for (const Edge& e : t.edges)
    if (e.type != EdgeType::kEndAfterEnd) has_pred[e.to] = true;
  for (uint32_t i = 0; i < t.nodes.size(); ++i) {
    const Node& n = t.nodes[i];
    if (has_pred[i] || t.lanes[n.lane].main || t.lanes[n.lane].gpu) continue;
    auto it = std::upper_bound(main_nodes.begin(), main_nodes.end(), n.start,
                               [&](double x, uint32_t m) { return x < t.nodes[m].start; });
    if (it == main_nodes.begin()) continue;
    const uint32_t m = *(it - 1);
    b.Edge_(m, i, EdgeType::kAfterStart, n.start - t.nodes[m].start);
  }
}

// Steps on the main lane; the loop's own CPU time per steady step (not
// waiting for data), and the least of it over the mean (graph.h:
// least_contended).
Status MainSteps(Builder& b, const std::string& path) {
  Trace& t = b.t;
  const Events& ev = b.ev;
  const std::vector<uint32_t>& main_nodes = b.main_nodes;
  for (size_t k = 0; k < b.step_events.size(); ++k) {
    const Event& e = ev.events[b.step_events[k]];
    Step st;
    const std::string& name = ev.names[e.name];
    st.number = std::strtoll(name.c_str() + std::string("ProfilerStep#").size(), nullptr, 10);
    st.start = b.S(e.ts);
    st.end = k + 1 < b.step_events.size() ? b.S(ev.events[b.step_events[k + 1]].ts) : b.S(e.ts + e.dur);
    auto first = std::lower_bound(main_nodes.begin(), main_nodes.end(), st.start - 1e-9,
                                  [&](uint32_t m, double x) { return t.nodes[m].start < x; });
    auto last = std::lower_bound(main_nodes.begin(), main_nodes.end(), st.end - 1e-9,
                                 [&](uint32_t m, double x) { return t.nodes[m].start < x; });
    if (first == main_nodes.end() || last == first) continue;
    st.first = *first;
    st.last = *(last - 1);
    t.steps.push_back(st);
  }
  if (t.steps.empty()) return DataError(path + ": the trace's ProfilerStep#N events are empty");
  if (t.steps.size() >= 3) {
    const size_t lo = t.steps.size() >= 4 ? 1 : 0, hi = t.steps.size() - lo;
    double least = 1e300, sum = 0;
    for (size_t k = lo; k < hi; ++k) {
      double cpu = 0;
      for (auto it = std::lower_bound(main_nodes.begin(), main_nodes.end(), t.steps[k].first);
           it != main_nodes.end() && *it <= t.steps[k].last; ++it)
        if (t.nodes[*it].role != Role::kWait) cpu += t.nodes[*it].dur;
      least = std::min(least, cpu);
      sum += cpu;
    }
    if (sum > 0) t.least_contended = std::min(1.0, least / (sum / static_cast<double>(hi - lo)));
  }
  return Status::OK();
}

// The loader: inline (no workers) or beside the loop, the least wait, and
// the period between batches the loop waited for.
void FindLoader(Builder& b) {
  Trace& t = b.t;
  const std::vector<uint32_t>& wait_nodes = b.wait_nodes;
  if (wait_nodes.empty()) return;
  const std::string& name = b.wait_names[0];
  t.loader_name = name;
  t.loader = name.find("_SingleProcessDataLoaderIter") != std::string::npos ? LoaderKind::kInline
                                                                            : LoaderKind::kBeside;
  double floor = 1e300;
  for (uint32_t w : wait_nodes) floor = std::min(floor, t.nodes[w].dur);
  t.wait_floor = floor;
  if (t.loader != LoaderKind::kBeside) return;
  // Waits well past the floor are the loader's: a batch came when it was
  // made. The period is the time between such batches over their count.
  // Workers make batches side by side, so they come in bursts (two workers:
  // in pairs); the loop waits for a burst's first and takes the rest at
  // once, though on a busy machine a take can be slow. Counting from a
  // burst's first to a burst's first spans whole bursts, so only waits
  // above half the way from the floor to the long ones (the 90th
  // percentile: one stray long wait does not set it) mark the ends.
  const double mean_step = (t.steps.back().end - t.steps.front().start) / static_cast<double>(t.steps.size());
  std::vector<double> durs;
  for (uint32_t w : wait_nodes) durs.push_back(t.nodes[w].dur);
  std::sort(durs.begin(), durs.end());
  const double high = durs[static_cast<size_t>(0.9 * static_cast<double>(durs.size() - 1))];
  const double late = floor + std::max(1e-3, 0.05 * mean_step);
  const double head = std::max(late, floor + 0.5 * (high - floor));
  // (with fewer than two such, any wait well past the floor marks an end)
  const double bound = std::count_if(durs.begin(), durs.end(), [&](double d) { return d > head; }) >= 2 ? head : late;
  int prev = -1;
  double span = 0;
  int batches = 0;
  for (size_t k = 0; k < wait_nodes.size(); ++k) {
    const Node& w = t.nodes[wait_nodes[k]];
    if (w.dur <= bound) continue;
    if (prev >= 0) {
      const Node& p = t.nodes[wait_nodes[prev]];
      span += (w.start + w.dur) - (p.start + p.dur);
      batches += static_cast<int>(k) - prev;
    }
    prev = static_cast<int>(k);
  }
  t.period_seen = batches > 0;
  t.loader_period = t.period_seen ? span / batches : 0;
}

// Where the marks (nostall.trace.mark) give the loop's intra-op threads T,
// its cores C and the CPU the loader's worker processes used beside it (b
// cores' worth on average), a CPU loop whose threads and workers
// oversubscribe the cores (T + b > C) ran at the scheduler's fair share,
// C / (T + b) of its speed alone; the least contended step cannot show that
// when every step was alike contended. The smaller of the two is taken.
void LoopContention(Trace& t, int64_t gpu_nodes) {
  t.contention = t.least_contended;
  auto mark = [&](const char* k) {
    auto it = t.marks.find(k);
    return it == t.marks.end() ? 0.0 : it->second;
  };
  const double threads = mark("intra_op_threads"), cores = mark("cores");
  const double wall = mark("workers_wall_s"), cpu = mark("workers_cpu_s");
  if (t.loader != LoaderKind::kBeside || gpu_nodes > 0 || threads < 1 || cores < 1 || wall <= 0 ||
      cpu < 0) {
    return;
  }
  const double busy = cpu / wall;
  if (threads + busy <= cores) return;
  const double share = cores / (threads + busy);
  if (share < t.contention) {
    t.contention = share;
    t.contention_from_workers = true;
  }
}

}  // namespace

Result<Trace> BuildGraph(Events ev, const std::string& path) {
  Trace t;
  t.path = path;
  t.events = static_cast<int64_t>(ev.events.size());
  t.events_not_kept = ev.not_kept;
  t.marks = ev.marks;
  std::copy(std::begin(ev.counts), std::end(ev.counts), std::begin(t.counts));
  Builder b{ev, t};
  NOSTALL_RETURN_IF_ERROR(FindSteps(b, path));
  BuildLanes(b);
  MarkOptimizerNodes(b);
  SyncEdges(b, LaunchEdges(b));
  ForkEdges(b);
  NOSTALL_RETURN_IF_ERROR(MainSteps(b, path));
  FindLoader(b);
  int64_t gpu_nodes = 0;
  for (const Node& n : t.nodes) gpu_nodes += t.lanes[n.lane].gpu;
  LoopContention(t, gpu_nodes);
  // Edges grouped by their target.
  std::stable_sort(t.edges.begin(), t.edges.end(), [](const Edge& a, const Edge& c) { return a.to < c.to; });
  t.in_begin.assign(t.nodes.size() + 1, 0);
  for (const Edge& e : t.edges) t.in_begin[e.to + 1]++;
  for (size_t i = 0; i < t.nodes.size(); ++i) t.in_begin[i + 1] += t.in_begin[i];
  return t;
}

}  // namespace nostall::trace
