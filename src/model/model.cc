// The performance model: rate limits per resource (see nostall/model.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "model/model_parts.h"
#include "nostall/model.h"

namespace nostall {

using nlohmann::json;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double Clamp01(double x) { return std::min(1.0, std::max(0.0, x)); }

// A cluster-cache hit costs the network stack's CPU and the checksum on top
// of a local hit's copy: 2 ns per byte, measured here (bench_cluster.py's
// nodes: 0.45 s of process CPU more per 215 MB than from shared memory).
constexpr double kPeerCpuPerByte = 2e-9;

}  // namespace

double HitRate(const Config& c) {
  return Clamp01(c.cache_fraction * std::max(1, c.cache_nodes));
}

namespace {

// Of the hits, the fraction on another node's server.
double PeerHitRate(const Config& c) {
  const int n = std::max(1, c.cache_nodes);
  return n > 1 ? HitRate(c) * (n - 1) / n : 0.0;
}

double HitCpu(const Profile& p, const Config& c) {
  return p.fetch_cpu_hit + (c.cache_nodes > 1 ? kPeerCpuPerByte * p.item_bytes : 0.0);
}

}  // namespace

json ConfigToJson(const Config& c) {
  return {{"cores", c.cores},
          {"prep_threads", c.prep_threads},
          {"reads_in_flight", c.reads_in_flight},
          {"cache_fraction", c.cache_fraction},
          {"bandwidth", c.bandwidth},
          {"latency_s", c.latency},
          {"jobs", c.jobs},
          {"shared", c.shared},
          {"step_threads", c.step_threads},
          {"cache_nodes", c.cache_nodes},
          {"peer_latency_s", c.peer_latency},
          {"peer_bandwidth", c.peer_bandwidth}};
}

Config ConfigFromJson(const json& j, Config c) {
  c.cores = j.value("cores", c.cores);
  c.prep_threads = j.value("prep_threads", c.prep_threads);
  c.reads_in_flight = j.value("reads_in_flight", c.reads_in_flight);
  c.cache_fraction = j.value("cache_fraction", c.cache_fraction);
  c.bandwidth = j.value("bandwidth", c.bandwidth);
  c.latency = j.value("latency_s", c.latency);
  c.jobs = j.value("jobs", c.jobs);
  c.shared = j.value("shared", c.shared);
  c.step_threads = j.value("step_threads", c.step_threads);
  c.cache_nodes = j.value("cache_nodes", c.cache_nodes);
  c.peer_latency = j.value("peer_latency_s", c.peer_latency);
  c.peer_bandwidth = j.value("peer_bandwidth", c.peer_bandwidth);
  return c;
}

// JSON has no infinity: an unlimited limit is null.
json Rate(double r) { return std::isfinite(r) ? json(r) : json(nullptr); }

json PredictionJson(const Prediction& p) {
  json limits = json::object();
  for (int l = 0; l < 5; ++l) limits[LimitName(static_cast<Limit>(l))] = Rate(p.limits[l]);
  return {{"rate", p.rate},
          {"limit", LimitName(p.limit)},
          {"bottleneck", BottleneckName(p.bottleneck())},
          {"limits", limits}};
}

json Point(double x, const Prediction& p) {
  return {{"x", x}, {"rate", p.rate}, {"bottleneck", BottleneckName(p.bottleneck())},
          {"limit", LimitName(p.limit)}};
}

double ReadTime(const Profile& p, const Config& c) {
  return c.latency + (c.bandwidth > 0 ? p.item_bytes / c.bandwidth : 0.0);
}

bool AdaptiveGives(const Profile& p, const Config& c, int reads) {
  Config adaptive = c;
  adaptive.reads_in_flight = 0;
  return ReadsInFlight(p, adaptive) >= reads;
}

namespace {

double CpuPerSample(const Profile& p, const Config& c) {
  const double h = HitRate(c);
  const double pipelines = c.shared ? 1 : std::max(1, c.jobs);
  const double fetch = h * HitCpu(p, c) + (1 - h) * p.fetch_cpu_miss;
  return pipelines * (p.prep_cpu + fetch) +
         std::max(1, c.jobs) * StepAt(p, c).work_cpu;
}

}  // namespace

const char* LimitName(Limit l) {
  switch (l) {
    case Limit::kCompute: return "compute";
    case Limit::kCpu: return "cpu";
    case Limit::kThreads: return "prep_threads";
    case Limit::kBandwidth: return "bandwidth";
    case Limit::kLatency: return "latency";
  }
  return "?";
}

const char* BottleneckName(Bottleneck b) {
  switch (b) {
    case Bottleneck::kCompute: return "compute";
    case Bottleneck::kPrep: return "prep";
    case Bottleneck::kFetch: return "fetch";
  }
  return "?";
}

Bottleneck BottleneckOf(Limit l) {
  switch (l) {
    case Limit::kCompute: return Bottleneck::kCompute;
    case Limit::kCpu:
    case Limit::kThreads: return Bottleneck::kPrep;
    case Limit::kBandwidth:
    case Limit::kLatency: return Bottleneck::kFetch;
  }
  return Bottleneck::kCompute;
}

double ReadsInFlight(const Profile& p, const Config& c) {
  double reads = c.reads_in_flight;
  if (reads <= 0) {
    const double prep_rate =
        p.prep_cpu > 0 ? std::max(1, c.prep_threads) / p.prep_cpu : 1 / kAssumedPrepSeconds;
    reads = AutoReadsInFlight(prep_rate, ReadTime(p, c), p.item_bytes);
  }
  if (p.slot_items > 0) reads = std::min(reads, static_cast<double>(p.slot_items));
  return reads;
}

StepCost StepAt(const Profile& p, const Config& c) {
  StepCost out;
  const int measured = std::max(1, p.step_threads);
  const int fit = std::max(1, static_cast<int>(std::floor(c.cores + 1e-9)));
  const int k = c.step_threads > 0 ? c.step_threads : std::min(measured, fit);
  out.threads = k;
  const double tk = p.step_rate > 0 ? 1 / p.step_rate : 0;
  if (k == measured || tk == 0) {
    out.seconds = tk;
    out.cpu = p.step_cpu;
  } else if (p.step_rate_1 > 0 && measured > 1) {
    // Amdahl through the two measured points: serial fraction f from
    // t(measured) = t(1) * (f + (1 - f) / measured); CPU linear in threads.
    const double t1 = 1 / p.step_rate_1;
    const double f =
        std::min(1.0, std::max(0.0, (tk / t1 - 1.0 / measured) / (1 - 1.0 / measured)));
    out.seconds = t1 * (f + (1 - f) / k);
    out.cpu = std::max(0.0, p.step_cpu_1 + (p.step_cpu - p.step_cpu_1) * (k - 1) /
                                               static_cast<double>(measured - 1));
  } else {
    out.seconds = tk * measured / k;  // not measured: perfect scaling
    out.cpu = p.step_cpu;
  }
  out.busy_cores = out.seconds > 0 ? std::min<double>(k, out.cpu / out.seconds) : 0;
  out.work_cpu = p.step_cpu_1 > 0 ? std::min(out.cpu, p.step_cpu_1) : out.cpu;
  out.spin_cpu = measured > 1 ? p.step_spin_cpu * (k - 1) / (measured - 1) : 0;
  return out;
}

namespace {

// The sharing limit (see nostall/analyze.h): one sample's cycle of step and
// wait, the cores shared fairly among the runnable threads. Returns samples/s
// per job; `oversubscribed` says whether the busy threads outnumber the cores.
double SharingRate(const Profile& p, const Config& c, const Efficiency& e,
                   bool* oversubscribed) {
  *oversubscribed = false;
  const double pipelines = c.shared ? 1 : std::max(1, c.jobs);
  const double jobs = std::max(1, c.jobs);
  const double work = pipelines * p.prep_cpu;  // prep CPU per sample of each job
  const double threads = pipelines * std::max(1, c.prep_threads);
  if (work <= 0 || c.cores <= 0 || e.cpu <= 0) return kInf;
  const StepCost step = StepAt(p, c);
  // Cores the steps keep busy while they run, spinning included: a step's
  // threads wait for each other at barriers, so a thread that loses its
  // core to a prep thread holds up the others.
  const double stepping = jobs * step.busy_cores;
  const double cpu_bound = step.threads > 0 ? std::min(1.0, step.busy_cores / step.threads) : 0;
  const double spinners = jobs * std::max(0, step.threads - 1);
  // The fetch threads' CPU (reading, the kernel's work for it) is taken off
  // the cores the step and the prep threads share.
  const double h = HitRate(c);
  const double fetch = pipelines * (h * HitCpu(p, c) + (1 - h) * p.fetch_cpu_miss);
  double busy = 1;  // fraction of the prep threads runnable while the step runs
  double wait = 0, rate = 0;
  for (int iter = 0; iter < 100; ++iter) {
    const double cores = std::max(0.05 * c.cores, c.cores - rate * fetch / e.cpu);
    const bool crowded = stepping + threads * busy > cores + kCrowdSlack;
    const double eff = e.cpu * (crowded && step.threads > 1 ? e.contention : 1);
    const double share_step = std::min(1.0, cores / std::max(1e-12, stepping + threads * busy));
    // The step runs at its own speed unless it has to share; then at its share.
    const double slow = crowded ? 1 / std::min(1.0, share_step * eff) : 1;
    const double step_time = step.seconds * ((1 - cpu_bound) + cpu_bound * slow) + p.loop_overhead;
    const double done_in_step = threads * share_step * eff * step_time;
    const double spinning =
        wait > 0 ? std::min(spinners, jobs * step.spin_cpu / wait) : (step.spin_cpu > 0 ? spinners : 0);
    const double share_wait = std::min(1.0, cores / std::max(1e-12, threads + spinning));
    double next_busy = 1, next_wait = 0;
    if (done_in_step >= work) {
      next_busy = done_in_step > 0 ? work / done_in_step : 0;
    } else {
      next_wait = (work - done_in_step) / (threads * share_wait * eff);
    }
    *oversubscribed = crowded;
    const double next_rate = 1 / (step_time + next_wait);
    const bool settled = std::abs(next_rate - rate) <= 1e-9 * next_rate;
    busy = 0.5 * (busy + next_busy);
    wait = 0.5 * (wait + next_wait);
    rate = iter == 0 ? next_rate : 0.5 * (rate + next_rate);
    if (settled && iter > 2) break;
  }
  return rate;
}

}  // namespace

Prediction Predict(const Profile& p, const Config& c, const Efficiency& eff) {
  Prediction out;
  const double miss = 1 - HitRate(c);
  const double peer = PeerHitRate(c);
  const double pipelines = c.shared ? 1 : std::max(1, c.jobs);
  double* lim = out.limits;
  const StepCost step = StepAt(p, c);
  const double loop = step.seconds + p.loop_overhead;
  lim[0] = loop > 0 ? eff.compute / loop : kInf;
  const double cpu = CpuPerSample(p, c);
  lim[1] = cpu > 0 ? c.cores * eff.cpu / cpu : kInf;
  bool oversubscribed = false;
  const double sharing = SharingRate(p, c, eff, &oversubscribed);
  lim[2] = kInf;
  if (oversubscribed) {
    lim[1] = std::min(lim[1], sharing);
  } else {
    lim[2] = sharing;
  }
  lim[3] = c.bandwidth > 0 && miss > 0 && p.item_bytes > 0
               ? c.bandwidth * eff.storage / (pipelines * miss * p.item_bytes)
               : kInf;
  // A cluster cache's peers: their hits cross the network too.
  if (peer > 0 && c.peer_bandwidth > 0 && p.item_bytes > 0) {
    lim[3] = std::min(lim[3], c.peer_bandwidth / (pipelines * peer * p.item_bytes));
  }
  const double read_time = ReadTime(p, c);
  const double peer_time = peer > 0 ? c.peer_latency + (c.peer_bandwidth > 0 ? p.item_bytes / c.peer_bandwidth : 0) : 0;
  const double in_flight_time = miss * read_time / eff.storage + peer * peer_time;
  lim[4] = in_flight_time > 0 ? ReadsInFlight(p, c) / in_flight_time : kInf;
  int best = 0;
  for (int l = 1; l < 5; ++l) {
    if (lim[l] < lim[best] * (1 - 1e-9)) best = l;  // ties go to the earlier: compute first
  }
  out.limit = static_cast<Limit>(best);
  out.rate = lim[best];
  return out;
}

double RemoteRate(const Profile& p, const RemotePrep& r, const Efficiency& eff) {
  if (r.workers <= 0 || r.cpus_per_worker <= 0) return 0;
  const double per_sample = p.prep_cpu + p.fetch_cpu_miss + r.send_cpu_per_byte * p.sample_bytes;
  double rate = per_sample > 0 ? r.workers * r.cpus_per_worker * eff.cpu / per_sample : kInf;
  if (r.network > 0 && p.sample_bytes > 0) rate = std::min(rate, r.network / p.sample_bytes);
  return rate;
}

Prediction PredictRemote(const Profile& p, const Config& c, const RemotePrep& r, const Efficiency& eff) {
  Prediction out = Predict(p, c, eff);
  const double remote = RemoteRate(p, r, eff);
  if (remote <= 0) return out;
  double* lim = out.limits;
  // The cores: at T samples/s the step's work, min(T, R) received, the rest
  // prepped and read here: piecewise linear in T.
  const double step = StepAt(p, c).work_cpu;
  const double recv = r.recv_cpu_per_byte * p.sample_bytes;
  const double here = CpuPerSample(p, c) - step;
  const double budget = c.cores * eff.cpu;
  if (!std::isfinite(remote) || remote * (step + recv) >= budget) {
    lim[1] = step + recv > 0 ? budget / (step + recv) : kInf;
  } else {
    lim[1] = step + here > 0 ? remote + (budget - remote * (step + recv)) / (step + here) : kInf;
  }
  // The node's own pipeline adds what its threads and storage carry.
  for (int l = 2; l < 5; ++l) lim[l] = remote + lim[l];
  int best = 0;
  for (int l = 1; l < 5; ++l) {
    if (lim[l] < lim[best] * (1 - 1e-9)) best = l;
  }
  out.limit = static_cast<Limit>(best);
  out.rate = lim[best];
  return out;
}

int PrepThreadsFor(const Profile& p, Config c, int cores, const Efficiency& eff) {
  c.cores = cores;
  const int all = std::max(1, cores);
  const int left = std::max(1, cores - static_cast<int>(std::lround(StepAt(p, c).busy_cores)));
  if (left == all) return all;
  c.prep_threads = all;
  const double rate_all = Predict(p, c, eff).rate;
  c.prep_threads = left;
  return Predict(p, c, eff).rate > rate_all * (1 + 1e-9) ? left : all;
}

Result<Profile> Profile::FromJson(const std::string& text) {
  try {
    json j = json::parse(text);
    Profile p;
    p.step_rate = j.at("step_rate").get<double>();
    p.step_cpu = j.value("step_cpu", 0.0);
    p.step_threads = j.value("step_threads", 1);
    p.step_rate_1 = j.value("step_rate_1", 0.0);
    p.step_cpu_1 = j.value("step_cpu_1", 0.0);
    p.step_spin_cpu = j.value("step_spin_cpu", 0.0);
    p.noise = j.value("noise", 0.0);
    p.loop_overhead = j.value("loop_overhead", 0.0);
    p.waited = j.value("waited", -1.0);
    p.hooks = j.value("hooks", 0.0);
    p.prep_cpu = j.at("prep_cpu").get<double>();
    p.fetch_cpu_miss = j.value("fetch_cpu_miss", 0.0);
    p.fetch_cpu_hit = j.value("fetch_cpu_hit", 0.0);
    p.item_bytes = j.at("item_bytes").get<double>();
    p.dataset_bytes = j.value("dataset_bytes", 0.0);
    p.dataset_items = j.value("dataset_items", int64_t{0});
    p.measured = ConfigFromJson(j.at("measured"));
    p.cached_rate = j.value("cached_rate", 0.0);
    p.cold_rate = j.value("cold_rate", 0.0);
    p.slot_items = j.value("slot_items", int64_t{0});
    p.batch = j.value("batch", int64_t{0});
    p.nodes = std::max(1, j.value("nodes", 1));
    p.sample_bytes = std::max(0.0, j.value("sample_bytes", 0.0));
    if (p.step_rate <= 0 || p.prep_cpu < 0 || p.item_bytes < 0 || p.measured.cores <= 0 ||
        p.step_threads < 1 || p.step_rate_1 < 0 || p.step_cpu_1 < 0 || p.step_spin_cpu < 0 || p.noise < 0 ||
        p.loop_overhead < 0 || p.slot_items < 0 || p.batch < 0 || p.measured.reads_in_flight < 0 || p.hooks < 0 ||
        p.hooks > p.loop_overhead || !(p.waited <= 1)) {
      return InvalidArgument("a profile needs step_rate > 0, prep_cpu >= 0, item_bytes >= 0, "
                             "measured.cores > 0, step_threads >= 1, reads_in_flight >= 0 (0: "
                             "adaptive), hooks within the loop overhead and no negative step "
                             "cost, loop overhead or slot count");
    }
    return p;
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("bad profile: ") + e.what());
  }
}

std::string Profile::ToJson() const {
  json j = {{"step_rate", step_rate},           {"step_cpu", step_cpu},
            {"step_threads", step_threads},     {"step_rate_1", step_rate_1},
            {"step_cpu_1", step_cpu_1},         {"step_spin_cpu", step_spin_cpu},
            {"noise", noise},
            {"loop_overhead", loop_overhead}, {"hooks", hooks}, {"waited", waited},
            {"prep_cpu", prep_cpu},             {"fetch_cpu_miss", fetch_cpu_miss},
            {"fetch_cpu_hit", fetch_cpu_hit},   {"item_bytes", item_bytes},
            {"dataset_bytes", dataset_bytes},   {"dataset_items", dataset_items},
            {"measured", ConfigToJson(measured)}, {"cached_rate", cached_rate},
            {"cold_rate", cold_rate},           {"slot_items", slot_items},
            {"batch", batch},                   {"nodes", nodes},
            {"sample_bytes", sample_bytes}};
  return j.dump();
}

int ThreadsToCarry(double prep_cpu, double rate, double fit) {
  if (prep_cpu <= 0 || rate <= 0 || fit <= 0) return 1;
  return std::max(1, static_cast<int>(std::ceil(rate * prep_cpu / fit - 1e-9)));
}

bool CoresTaken(const Observation& o) {
  return o.rate * (o.prep_cpu + o.fetch_cpu + o.step_cpu) >= kCoresTaken * o.cores;
}

Profile ProfileOf(const Observation& o) {
  Profile p;
  // Outside its waits the consumer ran the step: that is the step's rate,
  // as slowed by the prep threads beside it (StepAt keeps it at the
  // measured thread count).
  const double step_s = o.rate > 0 ? (1 - std::clamp(o.wait, 0.0, 0.99)) / o.rate : 0;
  p.step_rate = step_s > 0 ? 1 / step_s : 0;
  p.step_cpu = o.step_cpu;
  p.step_threads = step_s > 0 ? std::max(1, static_cast<int>(std::lround(o.step_cpu / step_s))) : 1;
  p.prep_cpu = o.prep_cpu;
  p.fetch_cpu_miss = o.fetch_cpu;
  p.fetch_cpu_hit = o.fetch_cpu;
  p.item_bytes = o.item_bytes;
  p.measured = ConfigOf(o);
  return p;
}

Config ConfigOf(const Observation& o) {
  Config c;
  c.cores = o.cores;
  c.prep_threads = std::max(1, o.prep_threads);
  c.reads_in_flight = std::max(1, o.reads_in_flight);
  c.latency = o.read_latency;
  return c;
}

}  // namespace nostall
