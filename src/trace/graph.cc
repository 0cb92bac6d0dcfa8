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

  double S(double us) const { return (us - origin) * kUs; }

  uint32_t Add(Node n) {
    t.nodes.push_back(n);
    return static_cast<uint32_t>(t.nodes.size() - 1);
  }
  void Edge_(uint32_t from, uint32_t to, EdgeType type, double lag = 0) {
    t.edges.push_back(Edge{from, to, type, lag});
  }
};

}  // namespace

Result<Trace> BuildGraph(Events ev, const std::string& path) {
  Trace t;
  t.path = path;
  t.events = static_cast<int64_t>(ev.events.size());
  t.events_not_kept = ev.not_kept;
  std::copy(std::begin(ev.counts), std::end(ev.counts), std::begin(t.counts));
  Builder b{ev, t};

  // Steps: ProfilerStep#N on one thread (the main lane).
  std::vector<uint32_t> step_events;
  for (uint32_t i = 0; i < ev.events.size(); ++i) {
    const Event& e = ev.events[i];
    if (e.cat == Cat::kUserAnnotation && IsStep(ev.names[e.name])) step_events.push_back(i);
  }
  if (step_events.empty()) {
    return DataError(path + ": the trace has no ProfilerStep#N events: profile several steps "
                            "with torch.profiler.profile(schedule=...) and call prof.step() "
                            "after each one");
  }
  std::sort(step_events.begin(), step_events.end(),
            [&](uint32_t a, uint32_t c) { return ev.events[a].ts < ev.events[c].ts; });
  const uint32_t main_lane = ev.events[step_events[0]].lane;
  // Steps on other threads than the first step's are not this loop's.
  step_events.erase(std::remove_if(step_events.begin(), step_events.end(),
                                   [&](uint32_t i) { return ev.events[i].lane != main_lane; }),
                    step_events.end());
  b.origin = ev.events[step_events[0]].ts;
  const double window_end_us =
      ev.events[step_events.back()].ts + ev.events[step_events.back()].dur;

  // GPU work by correlation id.
  for (uint32_t i = 0; i < ev.events.size(); ++i) {
    const Event& e = ev.events[i];
    if (OnGpu(e.cat) && e.correlation >= 0) b.gpu_by_corr.emplace(e.correlation, i);
  }

  // Lanes in the graph: the main thread first, other CPU threads, GPU streams.
  std::vector<std::vector<uint32_t>> by_lane(ev.lanes.size());
  for (uint32_t i = 0; i < ev.events.size(); ++i) {
    const Event& e = ev.events[i];
    if (e.ts + e.dur < b.origin || e.ts > window_end_us) continue;  // outside the steps
    by_lane[e.lane].push_back(i);
  }
  std::vector<uint32_t> order;
  order.push_back(main_lane);
  for (uint32_t l = 0; l < ev.lanes.size(); ++l)
    if (l != main_lane && !ev.lanes[l].gpu) order.push_back(l);
  for (uint32_t l = 0; l < ev.lanes.size(); ++l)
    if (ev.lanes[l].gpu) order.push_back(l);

  // The main lane's nodes by time, for other threads' fork edges.
  std::vector<uint32_t> main_nodes;
  std::vector<uint32_t> wait_nodes;
  std::vector<std::string> wait_names;

  for (uint32_t l : order) {
    const Lane& lane = ev.lanes[l];
    const uint32_t glane = static_cast<uint32_t>(t.lanes.size());
    GraphLane gl;
    gl.gpu = lane.gpu;
    gl.main = l == main_lane;
    gl.name = lane.gpu ? "GPU " + lane.pid + " stream " + lane.tid
                       : "CPU thread " + lane.tid + (gl.main ? " (the training loop)" : "");
    std::vector<uint32_t>& es = by_lane[l];
    if (es.empty() && !gl.main) continue;
    t.lanes.push_back(gl);
    std::sort(es.begin(), es.end(), [&](uint32_t a, uint32_t c) {
      const Event &x = ev.events[a], &y = ev.events[c];
      return x.ts != y.ts ? x.ts < y.ts : x.dur > y.dur;
    });

    if (lane.gpu) {
      uint32_t prev = UINT32_MAX;
      double prev_end = -1e300;
      for (uint32_t i : es) {
        const Event& e = ev.events[i];
        if (!OnGpu(e.cat)) continue;
        Node n;
        n.start = b.S(std::max(e.ts, prev_end / kUs + b.origin));
        n.dur = std::max(0.0, b.S(e.ts + e.dur) - n.start);
        n.lane = glane;
        n.kind = e.cat == Cat::kKernel ? Kind::kGpu : Kind::kCopy;
        const std::string& name = ev.names[e.name];
        n.gemm = e.cat == Cat::kKernel && IsGemm(name);
        n.pageable_h2d = e.cat == Cat::kMemcpy && IsPageableH2D(name);
        const uint32_t id = b.Add(n);
        b.node_of_gpu_event[i] = id;
        if (prev != UINT32_MAX) b.Edge_(prev, id, EdgeType::kAfterEnd);
        prev = id;
        prev_end = n.start + n.dur;
      }
      continue;
    }

    // A CPU lane: cut where the innermost event changes; merge plain CPU
    // time into one node until something the rules treat apart begins.
    std::vector<Open> stack;
    double cursor = gl.main ? b.origin : -1;
    uint32_t prev_node = UINT32_MAX;
    double prev_end_us = -1;
    // The node being built (plain CPU time), if any.
    bool building = false;
    Node cur;
    int64_t cur_opt = -1;
    std::vector<int64_t> opt_of;  // per stack level: the optimizer call it is inside (-1)
    // Per stack level: inside a wait for data or a runtime call, whose one
    // node is made when it opens.
    std::vector<bool> special_of;
    // Adds a node of this lane: after the one before it (on the training
    // loop always; elsewhere where the thread did not idle between them).
    auto place = [&](const Node& node, int64_t opt) {
      const uint32_t id = b.Add(node);
      if (opt >= 0) {
        t.nodes[id].optimizer_call = static_cast<uint32_t>(opt + 1);
        b.opt_nodes.push_back(id);
      }
      if (prev_node != UINT32_MAX &&
          (gl.main || std::abs(prev_end_us - (node.start / kUs + b.origin)) < 1.0))
        b.Edge_(prev_node, id, EdgeType::kAfterEnd);
      prev_node = id;
      prev_end_us = (node.start + node.dur) / kUs + b.origin;
      if (gl.main) main_nodes.push_back(id);
      return id;
    };
    auto flush = [&]() {
      if (!building) return;
      building = false;
      if (cur.dur > 0) place(cur, cur_opt);
    };
    // A stretch [a, c) whose innermost open event is stack.back() (or none).
    auto segment = [&](double a, double c) {
      if (c - a <= 0) return;
      if (!special_of.empty() && special_of.back()) return;  // its node is made
      const int64_t opt = stack.empty() ? -1 : opt_of.back();
      if (building && (cur_opt != opt)) flush();
      if (!building) {
        building = true;
        cur = Node();
        cur.start = b.S(a);
        cur.lane = glane;
        cur.kind = Kind::kCpu;
        cur_opt = opt;
      }
      const double len = (c - a) * kUs;
      cur.dur = b.S(c) - cur.start;
      const Event* inner = stack.empty() ? nullptr : &ev.events[stack.back().event];
      if (inner && inner->cat == Cat::kCpuOp && len >= kParallelMin) cur.parallel += len;
      if (opt >= 0 && inner && inner->cat != Cat::kCpuOp) cur.opt_python += len;
    };
    auto close_top = [&]() {
      const Open top = stack.back();
      segment(cursor, top.end);
      cursor = std::max(cursor, top.end);
      stack.pop_back();
      opt_of.pop_back();
      special_of.pop_back();
    };

    for (uint32_t i : es) {
      const Event& e = ev.events[i];
      if (!OnCpu(e.cat)) continue;
      const double s = std::max(e.ts, b.origin);
      double end = std::min(e.ts + e.dur, window_end_us);
      if (end <= s && e.dur > 0) continue;
      while (!stack.empty() && stack.back().end <= s) close_top();
      if (!gl.main && stack.empty() && cursor < s) {
        flush();  // a gap: the thread was idle
        cursor = s;
      }
      if (cursor < 0) cursor = s;
      segment(cursor, s);
      cursor = std::max(cursor, s);
      if (!stack.empty()) end = std::min(end, stack.back().end);  // nested in its parent
      if (end < s) end = s;
      const std::string& name = ev.names[e.name];
      // The parent's optimizer call, and this event's place in it.
      int64_t opt = stack.empty() ? -1 : opt_of.back();
      if (opt >= 0 && !stack.empty() && ev.events[stack.back().event].cat == Cat::kUserAnnotation &&
          IsOptimizer(ev.names[ev.events[stack.back().event].name]) && e.cat == Cat::kCpuOp) {
        b.opt_calls[opt].children++;
        b.opt_calls[opt].names.insert(e.name);
      }
      const bool in_special = !special_of.empty() && special_of.back();
      if (!in_special && e.cat == Cat::kUserAnnotation && IsOptimizer(name)) {
        opt = static_cast<int64_t>(b.opt_calls.size());
        b.opt_calls.emplace_back();
      }
      const bool is_wait = e.cat == Cat::kUserAnnotation && IsWait(name) && gl.main;
      const bool is_call = e.cat == Cat::kRuntime || e.cat == Cat::kDriver;
      if (!in_special && (is_wait || is_call) && end > s) {
        flush();
        Node n;
        n.start = b.S(s);
        n.dur = (end - s) * kUs;
        n.lane = glane;
        if (is_wait) {
          n.kind = Kind::kData;
          n.role = Role::kWait;
          n.batch = static_cast<int32_t>(wait_nodes.size());
        } else {
          n.kind = Kind::kCpu;
          n.role = IsSyncCall(name) ? Role::kSync : Role::kLaunch;
          if (e.correlation >= 0) {
            auto g = b.gpu_by_corr.find(e.correlation);
            if (g != b.gpu_by_corr.end()) {
              const Event& ge = ev.events[g->second];
              if (ge.cat == Cat::kMemcpy && IsPageableH2D(ev.names[ge.name])) {
                // A copy from pageable memory: the call launches it, then
                // returns once it is done (two nodes: a launch until the
                // copy begins, then a wait for it).
                n.own_copy = true;
                n.dur = std::clamp(ge.ts - s, 0.0, end - s) * kUs;
              }
            }
          }
          if (n.role == Role::kSync) n.kind = Kind::kSync;
        }
        const uint32_t id = place(n, opt);
        if (n.own_copy) {
          Node w = n;
          w.role = Role::kSync;
          w.kind = Kind::kSync;
          w.start = n.start + n.dur;
          w.dur = (end - s) * kUs - n.dur;
          b.syncs.push_back(place(w, opt));
        }
        if (is_wait) {
          wait_nodes.push_back(id);
          wait_names.push_back(name);
        } else {
          if (e.correlation >= 0) b.launches.emplace_back(id, e.correlation);
          if (t.nodes[id].role == Role::kSync) b.syncs.push_back(id);
        }
      }
      stack.push_back(Open{end, i});
      opt_of.push_back(opt);
      special_of.push_back(in_special || (e.cat == Cat::kUserAnnotation && IsWait(name)) || is_call);
    }
    while (!stack.empty()) close_top();
    if (gl.main && cursor < window_end_us) segment(cursor, window_end_us);
    flush();
  }

  // Optimizer calls: of its Python between operators, what a fused step pays.
  for (uint32_t id : b.opt_nodes) {
    const auto& call = b.opt_calls[t.nodes[id].optimizer_call - 1];
    t.nodes[id].in_optimizer = true;
    if (call.children > 0)
      t.nodes[id].opt_share = static_cast<float>(
          std::min(1.0, static_cast<double>(call.names.size()) / static_cast<double>(call.children)));
  }
  t.optimizer_calls = static_cast<int>(b.opt_calls.size());

  // Launch edges (and GPU work's optimizer flag), and when each GPU node's launch began.
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
    std::nth_element(launch_durs.begin(), launch_durs.begin() + launch_durs.size() / 10,
                     launch_durs.end());
    t.launch_floor = launch_durs[launch_durs.size() / 10];
  }
  // Synchronisation edges: from the last GPU work on each stream launched before the call.
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
  // Other threads' first node after an idle gap starts when the training loop
  // is where it was then (the fork that woke them): an edge from the main node at that time.
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

  // Steps on the main lane.
  for (size_t k = 0; k < step_events.size(); ++k) {
    const Event& e = ev.events[step_events[k]];
    Step st;
    const std::string& name = ev.names[e.name];
    st.number = std::strtoll(name.c_str() + std::string("ProfilerStep#").size(), nullptr, 10);
    st.start = b.S(e.ts);
    st.end = k + 1 < step_events.size() ? b.S(ev.events[step_events[k + 1]].ts) : b.S(e.ts + e.dur);
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

  // The loop's own CPU time per steady step (not waiting for data), and the
  // least of it over the mean (graph.h: least_contended).
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

  // The loader.
  if (!wait_nodes.empty()) {
    const std::string& name = wait_names[0];
    t.loader_name = name;
    t.loader = name.find("_SingleProcessDataLoaderIter") != std::string::npos ? LoaderKind::kInline
                                                                              : LoaderKind::kBeside;
    double floor = 1e300;
    for (uint32_t w : wait_nodes) floor = std::min(floor, t.nodes[w].dur);
    t.wait_floor = floor;
    if (t.loader == LoaderKind::kBeside) {
      // Waits well past the floor are the loader's: a batch came when it was
      // made. The period is the time between such batches over their count.
      const double mean_step = (t.steps.back().end - t.steps.front().start) /
                               static_cast<double>(t.steps.size());
      const double bound = floor + std::max(1e-3, 0.05 * mean_step);
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
  }

  // Edges grouped by their target.
  std::stable_sort(t.edges.begin(), t.edges.end(),
                   [](const Edge& a, const Edge& c) { return a.to < c.to; });
  t.in_begin.assign(t.nodes.size() + 1, 0);
  for (const Edge& e : t.edges) t.in_begin[e.to + 1]++;
  for (size_t i = 0; i < t.nodes.size(); ++i) t.in_begin[i + 1] += t.in_begin[i];
  return t;
}

}  // namespace nostall::trace
