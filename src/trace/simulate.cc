// Replays a trace's graph with a change applied (the rules of
// docs/trace.md), and follows each step's critical path.
#include <algorithm>
#include <cmath>
#include <queue>

#include <nlohmann/json.hpp>

#include "nostall/trace.h"
#include "trace/events.h"
#include "trace/graph.h"

namespace nostall::trace {

namespace {

using json = nlohmann::json;

// What taking a batch a loader beside the loop has ready costs, where the
// trace does not show it (a loader that works on the loop's thread
// replaced by one beside it): nostall's `__next__` on a ready batch.
constexpr double kTakeSeconds = 50e-6;

// Daydream's mixed-precision rule: kernels that run on tensor cores (GEMM,
// convolution) 3x faster, the others 2x (half the bytes moved).
constexpr double kAmpGemm = 3, kAmpOther = 2;

struct Sim {
  std::vector<double> start, end;
  std::vector<int64_t> start_by, end_by;  // the node that held it back (-1: none, -2: the loader)
  double period = 0;
};

bool Inline(const Trace& t, const Change& c) {
  return t.loader == LoaderKind::kInline && c.loader_period < 0;
}

// Where the traced loader worked beside the loop (DataLoader workers: other
// processes, not in the trace) and the change replaces it, the loop's CPU
// work ran slowed by the loader sharing the cores. It is taken at its least
// contended: the fastest steady step's CPU time over the mean's, or the fair share the
// marks show the workers left it (graph.h: contention).
bool Uncontended(const Trace& t, const Change& c) {
  return t.loader == LoaderKind::kBeside && (c.loader_free || c.loader_period >= 0);
}

double Duration(const Trace& t, const Node& n, const Change& c) {
  const bool gpu = t.lanes[n.lane].gpu;
  if (gpu) {
    if (n.kind != Kind::kGpu) {  // a copy or set: the bus's speed, not the GPU's
      return c.pinned_copies && n.pageable_h2d ? n.dur / c.pinned_copy_speedup : n.dur;
    }
    double d = n.dur / c.gpu_speedup;
    if (n.gemm) d /= c.gemm_speedup;
    if (c.amp) d /= n.gemm ? kAmpGemm : kAmpOther;
    return d;
  }
  switch (n.role) {
    case Role::kWait:
      if (!Inline(t, c)) return 0;  // the producer decides (below)
      if (c.loader_free) return 0;
      return n.dur / c.loader_speedup;
    case Role::kSync:
      if (c.pinned_copies && n.own_copy) return 0;  // returns at once
      return n.tail / c.cpu_speedup;
    case Role::kLaunch: {
      if (c.pinned_copies && n.own_copy) return t.launch_floor / c.cpu_speedup;
      double d = n.dur / c.cpu_speedup;
      if (c.fused_optimizer && n.in_optimizer) d *= n.opt_share;
      return d;
    }
    case Role::kWork: {
      double par = n.parallel;
      if (c.threads_from > 0 && c.threads_to > 0) {
        par *= c.parallel_scale > 0 ? c.parallel_scale
                                    : static_cast<double>(c.threads_from) / c.threads_to;
      }
      double opt = n.opt_python;
      if (c.fused_optimizer) opt *= n.opt_share;
      const double rest = std::max(0.0, n.dur - n.parallel - n.opt_python);
      const double contention = t.lanes[n.lane].main && Uncontended(t, c) ? t.contention : 1;
      return (rest + par + opt) * contention / c.cpu_speedup;
    }
  }
  return n.dur;
}

// The loader beside the loop, as the replay runs it: it makes a batch every
// `period` once it has made the one before and the loop has taken the one
// `prefetch` back (a free slot); taking a made batch costs `take`.
struct BesideLoader {
  double period = 0, take = 0;
  int prefetch = 2;
  int ready_at_start = 0;     // batches the traced loop found ready when the trace began
  std::vector<double> made;   // when the loader finished batch b
  std::vector<double> taken;  // when the loop took batch b

  // The loop asks for batch `b` at `st`: when it has it (`*late`: the
  // loader, not the loop, decided when).
  double Take(int b, double st, bool* late) {
    if (static_cast<int>(made.size()) <= b) made.resize(b + 1, 0), taken.resize(b + 1, 0);
    double begin = 0;
    if (b >= ready_at_start) {
      begin = b > 0 ? made[b - 1] : 0;
      if (b >= prefetch) begin = std::max(begin, taken[b - prefetch]);
      made[b] = begin + period;
    } else {
      made[b] = 0;
    }
    *late = made[b] + take > st + take;
    taken[b] = std::max(st + take, made[b] + take);
    return taken[b];
  }
};

BesideLoader LoaderFor(const Trace& t, const Change& c) {
  BesideLoader l;
  l.period = t.loader_period;
  if (c.loader_period >= 0) l.period = c.loader_period;
  else if (c.loader_free) l.period = 0;
  else l.period /= c.loader_speedup;
  l.prefetch = c.loader_prefetch > 0 ? c.loader_prefetch : 2;
  l.take = t.loader == LoaderKind::kBeside && c.loader_period < 0 && !c.loader_free ? t.wait_floor
                                                                                      : kTakeSeconds;
  // The waits before the first long one: batches ready when the trace began.
  if (t.loader == LoaderKind::kBeside) {
    for (const Node& nd : t.nodes) {
      if (nd.role != Role::kWait) continue;
      if (nd.dur > t.wait_floor + 1e-3) break;
      if (++l.ready_at_start >= l.prefetch) break;
    }
  }
  return l;
}

// Node `i` replayed, its inputs done: when it starts (after the latest of
// its inputs) and ends (its duration under the change; a sync also waits
// for the copy it syncs; a wait for a batch, for the loader beside).
void ReplayNode(const Trace& t, const Change& c, uint32_t i, BesideLoader* loader, Sim* s,
                const std::vector<bool>& visited) {
  const Node& nd = t.nodes[i];
  double st = -1e300;
  int64_t by = -1;
  double end_floor = -1e300;
  int64_t end_by = -1;
  for (uint32_t k = t.in_begin[i]; k < t.in_begin[i + 1]; ++k) {
    const Edge& e = t.edges[k];
    if (!visited[e.from]) continue;
    if (e.type == EdgeType::kEndAfterEnd) {
      if (c.pinned_copies && nd.own_copy) continue;  // no longer waits for the copy
      if (s->end[e.from] > end_floor) end_floor = s->end[e.from], end_by = e.from;
      continue;
    }
    const double at = e.type == EdgeType::kAfterEnd ? s->end[e.from] : s->start[e.from] + e.lag;
    if (at > st) st = at, by = e.from;
  }
  if (by < 0) st = nd.start;  // a first node: where the trace has it
  s->start[i] = st;
  s->start_by[i] = by;
  const double d = Duration(t, nd, c);
  double en = st + d;
  if (nd.role == Role::kSync && end_floor > -1e300 && !(c.pinned_copies && nd.own_copy)) {
    const double waited = std::max(st, end_floor) + d;
    if (waited > en) en = waited, s->end_by[i] = end_by;
  }
  if (nd.role == Role::kWait && loader != nullptr) {
    bool late = false;
    en = loader->Take(nd.batch, st, &late);
    if (late) s->end_by[i] = -2;
  }
  s->end[i] = en;
}

Sim Replay(const Trace& t, const Change& c) {
  const size_t n = t.nodes.size();
  Sim s;
  s.start.assign(n, 0);
  s.end.assign(n, 0);
  s.start_by.assign(n, -1);
  s.end_by.assign(n, -1);
  const bool beside = !Inline(t, c) && (t.loader != LoaderKind::kNone || c.loader_period >= 0);
  BesideLoader loader = LoaderFor(t, c);
  s.period = beside ? loader.period : 0;

  // Kahn's order over the edges.
  std::vector<uint32_t> indeg(n, 0);
  for (const Edge& e : t.edges) indeg[e.to]++;
  std::vector<std::vector<uint32_t>> out(n);
  for (const Edge& e : t.edges) out[e.from].push_back(e.to);
  // Ties broken by traced start, so the loader's batches are taken in order.
  using Item = std::pair<double, uint32_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  for (uint32_t i = 0; i < n; ++i)
    if (indeg[i] == 0) ready.emplace(t.nodes[i].start, i);
  size_t done = 0;
  std::vector<bool> visited(n, false);
  while (done < n) {
    if (ready.empty()) {
      // A cycle (a trace whose times contradict each other): the earliest
      // unvisited node goes next, its unvisited inputs ignored.
      uint32_t best = UINT32_MAX;
      for (uint32_t i = 0; i < n; ++i)
        if (!visited[i] && (best == UINT32_MAX || t.nodes[i].start < t.nodes[best].start)) best = i;
      indeg[best] = 0;
      ready.emplace(t.nodes[best].start, best);
    }
    const uint32_t i = ready.top().second;
    ready.pop();
    if (visited[i]) continue;
    visited[i] = true;
    ++done;
    ReplayNode(t, c, i, beside ? &loader : nullptr, &s, visited);
    for (uint32_t to : out[i])
      if (--indeg[to] == 0) ready.emplace(t.nodes[to].start, to);
  }
  return s;
}

// The critical path of step k: from its end back to its start, each
// stretch given to the kind of the node that held the step then.
void PathOf(const Trace& t, const Sim& s, size_t k, double* on_path, double* begin, double* end) {
  const Step& st = t.steps[k];
  const double S = s.start[st.first];
  const double E = k + 1 < t.steps.size() ? s.start[t.steps[k + 1].first] : s.end[st.last];
  *begin = S;
  *end = E;
  int64_t cur = st.last;
  double tt = E;
  for (size_t guard = 0; cur >= 0 && tt > S && guard < t.nodes.size() + 8; ++guard) {
    const Node& nd = t.nodes[cur];
    const int kind = static_cast<int>(nd.role == Role::kWait ? Kind::kData : nd.kind);
    const int64_t eb = s.end_by[cur];
    if (eb >= 0) {  // its end waited for another node's
      const double from = std::max(s.end[eb], S);
      if (tt > from) on_path[kind] += tt - from;
      tt = std::min(tt, s.end[eb]);
      cur = eb;
      continue;
    }
    const double from = std::max(s.start[cur], S);
    if (tt > from) on_path[kind] += tt - from;
    tt = std::min(tt, s.start[cur]);
    cur = s.start_by[cur];
  }
  if (tt > S) on_path[static_cast<int>(Kind::kCpu)] += tt - S;  // before the first node held
}

json Steps(const Trace& t, const Sim& s) {
  // The steady steps: the first step pays the profiler's own start (its
  // first recording of each operator) and the last is cut where the
  // profiler stops, so with four steps or more both are left out.
  const size_t lo = t.steps.size() >= 4 ? 1 : 0, hi = t.steps.size() - lo;
  json steps = json::array();
  double kinds[kKinds] = {}, span = 0;
  for (size_t k = 0; k < t.steps.size(); ++k) {
    double on[kKinds] = {};
    double b = 0, e = 0;
    PathOf(t, s, k, on, &b, &e);
    json path = json::object();
    for (int i = 0; i < kKinds; ++i) path[KindName(static_cast<Kind>(i))] = on[i];
    steps.push_back({{"step", t.steps[k].number}, {"seconds", e - b}, {"path", path}});
    if (k < lo || k >= hi) continue;
    span += e - b;
    for (int i = 0; i < kKinds; ++i) kinds[i] += on[i];
  }
  const double n = static_cast<double>(hi - lo);
  json mean = json::object();
  double sum = 0;
  int top = 0;  // the critical path's kind: the largest share
  for (int i = 0; i < kKinds; ++i) {
    mean[KindName(static_cast<Kind>(i))] = kinds[i] / n;
    sum += kinds[i];
    if (kinds[i] > kinds[top]) top = i;
  }
  return {{"steps", steps},
          {"step_s", span / n},
          {"path", mean},
          {"stall", sum > 0 ? kinds[static_cast<int>(Kind::kData)] / sum : 0.0},
          {"critical", KindName(static_cast<Kind>(top))},
          {"loader_period_s", s.period},
          {"steady_steps", hi - lo}};
}

}  // namespace

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kData: return "data";
    case Kind::kCpu: return "cpu";
    case Kind::kGpu: return "gpu";
    case Kind::kCopy: return "copy";
    case Kind::kSync: return "sync";
  }
  return "?";
}

Result<std::shared_ptr<const Trace>> Read(const std::string& path) {
  auto ev = ReadEvents(path);
  if (!ev.ok()) return ev.status();
  auto g = BuildGraph(std::move(ev).value(), path);
  if (!g.ok()) return g.status();
  return std::shared_ptr<const Trace>(std::make_shared<Trace>(std::move(g).value()));
}

std::string FactsJson(const Trace& t) {
  json cats = json::object();
  static const char* kCats[] = {"cpu_op", "user_annotation", "python_function", "cuda_runtime",
                                "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset", "other"};
  for (int i = 0; i <= static_cast<int>(Cat::kOther); ++i) cats[kCats[i]] = t.counts[i];
  json lanes = json::array();
  for (const GraphLane& l : t.lanes) lanes.push_back(l.name);
  const char* loader = t.loader == LoaderKind::kNone     ? "none"
                       : t.loader == LoaderKind::kInline ? "inline"
                                                         : "beside";
  int64_t gpu = 0;
  for (const Node& n : t.nodes) gpu += t.lanes[n.lane].gpu;
  json out = {{"path", t.path},
              {"events", t.events},
              {"events_not_read", t.events_not_kept},
              {"categories", cats},
              {"lanes", lanes},
              {"nodes", t.nodes.size()},
              {"edges", t.edges.size()},
              {"gpu_nodes", gpu},
              {"steps", t.steps.size()},
              {"loader", loader},
              {"loader_name", t.loader_name},
              {"loader_period_s", t.loader_period},
              {"loader_period_seen", t.period_seen},
              {"wait_floor_s", t.wait_floor},
              {"optimizer_calls", t.optimizer_calls},
              {"launch_floor_s", t.launch_floor},
              {"least_contended", t.least_contended},
              {"contention", t.contention},
              {"contention_from_workers", t.contention_from_workers},
              {"marks", t.marks}};
  double traced = 0;
  for (const Step& s : t.steps) traced += s.end - s.start;
  out["traced_step_s"] = traced / static_cast<double>(t.steps.size());
  return out.dump();
}

Result<std::string> SimulateJson(const Trace& t, const Change& change) {
  return Steps(t, Replay(t, change)).dump();
}

Result<Change> ChangeFromJson(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("a change is a JSON object");
  Change c;
  auto positive = [&](const char* k, double* v) -> Status {
    if (!j.contains(k)) return Status::OK();
    if (!j[k].is_number() || !(j[k].get<double>() > 0) || !std::isfinite(j[k].get<double>()))
      return InvalidArgument(std::string(k) + " must be a number above 0");
    *v = j[k].get<double>();
    return Status::OK();
  };
  auto flag = [&](const char* k, bool* v) -> Status {
    if (!j.contains(k)) return Status::OK();
    if (!j[k].is_boolean()) return InvalidArgument(std::string(k) + " must be true or false");
    *v = j[k].get<bool>();
    return Status::OK();
  };
  auto count = [&](const char* k, int* v) -> Status {
    if (!j.contains(k)) return Status::OK();
    if (!j[k].is_number_integer() || j[k].get<int64_t>() < 1 || j[k].get<int64_t>() > 4096)
      return InvalidArgument(std::string(k) + " must be a whole number from 1 to 4096");
    *v = static_cast<int>(j[k].get<int64_t>());
    return Status::OK();
  };
  static const char* kKeys[] = {"loader_speedup", "loader_free", "loader_period", "loader_prefetch",
                                "gpu_speedup", "gemm_speedup", "cpu_speedup", "pinned_copies",
                                "pinned_copy_speedup", "fused_optimizer", "amp", "threads_from",
                                "threads_to", "parallel_scale"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::find_if(std::begin(kKeys), std::end(kKeys),
                     [&](const char* k) { return it.key() == k; }) == std::end(kKeys))
      return InvalidArgument("unknown change '" + it.key() + "'");
  }
  for (Status st : {positive("loader_speedup", &c.loader_speedup), flag("loader_free", &c.loader_free),
                    count("loader_prefetch", &c.loader_prefetch),
                    positive("gpu_speedup", &c.gpu_speedup), positive("gemm_speedup", &c.gemm_speedup),
                    positive("cpu_speedup", &c.cpu_speedup), flag("pinned_copies", &c.pinned_copies),
                    positive("pinned_copy_speedup", &c.pinned_copy_speedup),
                    flag("fused_optimizer", &c.fused_optimizer), flag("amp", &c.amp),
                    count("threads_from", &c.threads_from), count("threads_to", &c.threads_to),
                    positive("parallel_scale", &c.parallel_scale)}) {
    if (!st.ok()) return st;
  }
  if (j.contains("loader_period")) {
    if (!j["loader_period"].is_number() || !(j["loader_period"].get<double>() >= 0) ||
        !std::isfinite(j["loader_period"].get<double>()))
      return InvalidArgument("loader_period must be seconds, 0 or more");
    c.loader_period = j["loader_period"].get<double>();
  }
  if ((c.threads_from > 0) != (c.threads_to > 0))
    return InvalidArgument("threads_from and threads_to go together");
  return c;
}

}  // namespace nostall::trace
