// The analyzer on the model: calibration, recommendation, the report's JSON
// (see nostall/analyze.h; the model itself is src/model/).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "nostall/analyze.h"
#include "model/model_parts.h"

namespace nostall {

using nlohmann::json;

namespace {

constexpr int kMaxSuggestedReads = 256;
// The gain (x the rate now) at which prep on other machines is advised.
constexpr double kRemotePays = 1.2;

// Differences the measurement cannot tell from the machine's noise.
double Noise(const Profile& p) { return std::max(kModelNoise, p.noise); }

double ClampEfficiency(double x) { return std::min(1.5, std::max(0.5, x)); }

// The CPU (or contention) efficiency at which the model's CPU limits give
// `rate` (the sharing limit is not linear in it: bisection; it rises with
// efficiency).
double EfficiencyFor(const Profile& p, const Config& c, double rate, Efficiency base,
                     double Efficiency::*field) {
  auto cpu_rate = [&](double x) {
    Efficiency eff = base;
    eff.*field = x;
    eff.compute = 1e9;  // only the CPU limits
    eff.storage = 1e9;
    return Predict(p, c, eff).rate;
  };
  double lo = 0.5, hi = 1.5;
  if (cpu_rate(lo) >= rate) return lo;
  if (cpu_rate(hi) <= rate) return hi;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (cpu_rate(mid) < rate ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// Whether a multithreaded step and the prep threads outnumber the cores at `c`.
bool Crowded(const Profile& p, const Config& c) {
  const StepCost step = StepAt(p, c);
  return step.threads > 1 &&
         step.busy_cores + std::max(1, c.prep_threads) > c.cores + kCrowdSlack;
}

}  // namespace

Efficiency Calibrate(const Profile& p) {
  Efficiency eff;
  Config cached = p.measured;
  cached.cache_fraction = 1;
  Config cold = p.measured;
  cold.cache_fraction = 0;
  // Where a multithreaded step crowds the prep threads, what the fair-share
  // model misses is the step's spinning: calibrate that, not the prep cost,
  // so that a configuration without the crowding does not inherit it.
  double Efficiency::*field = Crowded(p, cached) ? &Efficiency::contention : &Efficiency::cpu;
  // How far the model is from the measured runs the CPU limits bind (the
  // cold run only when storage does not limit it).
  auto cpu_error = [&](const Efficiency& e) {
    double err = std::abs(Predict(p, cached, e).rate / p.cached_rate - 1);
    Efficiency no_storage = e;
    no_storage.storage = 1e9;
    if (p.cold_rate > 0 && Predict(p, cold, no_storage).bottleneck() != Bottleneck::kFetch) {
      err += std::abs(Predict(p, cold, no_storage).rate / p.cold_rate - 1);
    }
    return err;
  };
  if (p.cached_rate > 0) {
    Prediction raw = Predict(p, cached, eff);
    const bool slower_than_step = p.cached_rate < raw.limits[0] * (1 - Noise(p));
    if (raw.bottleneck() == Bottleneck::kPrep || slower_than_step) {
      const double from_cached = EfficiencyFor(p, cached, p.cached_rate, eff, field);
      // A cold run the CPU limits too is a second measurement of the same
      // efficiency (the fetch CPU is measured apart): average the two.
      Efficiency with = eff;
      with.*field = from_cached;
      Prediction cold_raw = Predict(p, cold, with);
      if (p.cold_rate > 0 && cold_raw.bottleneck() == Bottleneck::kPrep &&
          Crowded(p, cold) == Crowded(p, cached)) {
        with.*field = 0.5 * (from_cached + EfficiencyFor(p, cold, p.cold_rate, eff, field));
      }
      // Only an efficiency that brings the model closer to what was measured
      // (one the clamp stops short of may not, and would bend the rest).
      if (cpu_error(with) < cpu_error(eff)) eff = with;
    }
  }
  if (p.cold_rate > 0) {
    Prediction raw = Predict(p, cold, eff);
    const double storage = std::min(raw.limits[3], raw.limits[4]);
    const bool slower = p.cold_rate < raw.rate * (1 - Noise(p));
    if (std::isfinite(storage) && (raw.bottleneck() == Bottleneck::kFetch || slower)) {
      eff.storage = ClampEfficiency(p.cold_rate / storage);
    }
  }
  return eff;
}

namespace {

// The profile with the batch slots of `prefetch` batches made ahead (0: as
// measured): the reads in flight they leave room for.
Profile WithPrefetch(const Profile& p, int prefetch) {
  Profile q = p;
  if (prefetch > 0 && p.batch > 0) q.slot_items = (prefetch + 1) * p.batch;
  return q;
}

// The step's own intra-op threads (torch.set_num_threads) that run the job
// fastest at `c`, where that is measurably faster than the threads measured
// (a step whose threads fight the prep threads for the cores runs faster on
// fewer); 0: keep them. Needs the step timed on one thread as well.
int BestStepThreads(const Profile& p, const Efficiency& eff, Config c) {
  const int measured = std::max(1, p.step_threads);
  if (measured <= 1 || p.step_rate_1 <= 0) return 0;
  c.step_threads = 0;
  const double now = Predict(p, c, eff).rate;
  int best = 0;
  double best_rate = now * (1 + Noise(p));
  for (int k = 1; k < measured; ++k) {
    c.step_threads = k;
    const double rate = Predict(p, c, eff).rate;
    if (rate > best_rate) best = k, best_rate = rate;
  }
  return best;
}

}  // namespace

Recommendation Recommend(const Profile& p, const Efficiency& eff) {
  Recommendation r;
  Config c = p.measured;
  c.step_threads = BestStepThreads(p, eff, c);  // first: it moves the step's rate
  // Aim at the step's rate, or, when even 4x the cores with everything cached
  // cannot feed it, at the most those cores can do.
  const double max_cores = 4 * std::max(1.0, p.measured.cores);
  Config best = c;
  best.cores = max_cores;
  best.cache_fraction = 1;
  best.prep_threads = PrepThreadsFor(p, best, static_cast<int>(max_cores), eff);
  const double step_rate = Predict(p, c, eff).limits[0];
  Efficiency pipeline_only = eff;
  pipeline_only.compute = 1e9;
  const double target = std::min(step_rate, Predict(p, best, pipeline_only).rate);
  const double pipelines = c.shared ? 1 : std::max(1, c.jobs);
  // Storage: a cache that cuts the bytes read to what the bandwidth carries,
  // then the reads in flight that hide the latency of what still misses.
  const double read_time = ReadTime(p, c);
  const double miss = 1 - HitRate(c);
  if (c.bandwidth > 0 && p.item_bytes > 0) {
    const double bytes_per_sample = pipelines * p.item_bytes;
    const double max_miss = c.bandwidth * eff.storage / (bytes_per_sample * target);
    if (max_miss < miss) {
      r.bandwidth_instead = bytes_per_sample * miss * target / eff.storage;
      // Round the cache up to whole percent of the dataset.
      c.cache_fraction = std::min(1.0, std::ceil((1 - max_miss) * 100 - 1e-9) / 100);
    }
  }
  // Across the job's nodes: a cluster cache holds what is needed with each
  // node giving 1/N of it, where the network carries the peers' hits.
  r.cache_bytes_per_node = 0;
  if (p.nodes > 1 && c.cache_fraction > p.measured.cache_fraction + 1e-9) {
    Config cluster = c;
    cluster.cache_nodes = p.nodes;
    cluster.cache_fraction = c.cache_fraction / p.nodes;
    if (Predict(p, cluster, eff).rate >= Predict(p, c, eff).rate * (1 - kModelNoise)) {
      c.cache_nodes = p.nodes;
      c.cache_fraction = cluster.cache_fraction;
    }
  }
  const double miss_after = 1 - HitRate(c);
  if (read_time > 0 && miss_after > 0) {
    const int need = std::min(
        kMaxSuggestedReads,
        static_cast<int>(std::ceil(target * miss_after * read_time / eff.storage - 1e-9)));
    // Adaptive reads stay adaptive where they already reach what is needed.
    const bool adaptive = p.measured.reads_in_flight <= 0;
    if (!(adaptive && AdaptiveGives(p, c, need))) {
      c.reads_in_flight = std::max(p.measured.reads_in_flight, need);
    }
  }
  // Each read in flight needs room in a batch slot: where today's slots hold
  // fewer than recommended, the prefetch that holds them is part of it.
  if (p.slot_items > 0 && p.batch > 0 && c.reads_in_flight > p.slot_items) {
    r.prefetch = static_cast<int>((c.reads_in_flight + p.batch - 1) / p.batch) - 1;
  }
  const Profile room = WithPrefetch(p, r.prefetch);
  // CPU: the fewest whole cores (a prep thread each) that carry the
  // pipeline(s) and the step(s) at the target, their sharing included.
  Efficiency storage_free = eff;
  storage_free.storage = 1e9;
  Config trial = c;
  for (int n = static_cast<int>(std::ceil(p.measured.cores - 1e-9)); n <= max_cores; ++n) {
    trial.cores = std::max<double>(n, p.measured.cores);
    trial.prep_threads = n == p.measured.cores ? p.measured.prep_threads
                                               : PrepThreadsFor(room, trial, n, storage_free);
    if (Predict(room, trial, storage_free).rate >= target * (1 - 1e-6)) break;
  }
  c.cores = trial.cores;
  c.prep_threads = trial.prep_threads;
  r.config = c;
  r.cache_bytes = HitRate(c) * p.dataset_bytes;
  if (c.cache_nodes > 1) r.cache_bytes_per_node = c.cache_fraction * p.dataset_bytes;
  r.rate = Predict(room, c, eff).rate;
  r.reaches_step_rate = r.rate >= step_rate * 0.999;
  return r;
}


namespace {

// The bottleneck printed must agree with the stalls printed: the model's,
// unless the measurement says its resource cost no time (within the
// noise); then the larger measured stall, or compute if neither counts.
Bottleneck NamedBottleneck(const Prediction& now, double prep_frac, double fetch_frac,
                           double noise) {
  Bottleneck named = now.bottleneck();
  const double named_stall = named == Bottleneck::kFetch ? fetch_frac
                             : named == Bottleneck::kPrep
                                 ? (now.limit == Limit::kCpu ? prep_frac + fetch_frac : prep_frac)
                                 : 0.0;
  if (prep_frac + fetch_frac <= noise) {
    named = Bottleneck::kCompute;
  } else if (named_stall <= noise) {
    named = fetch_frac > prep_frac ? Bottleneck::kFetch : Bottleneck::kPrep;
  } else if (named == Bottleneck::kPrep && prep_frac <= noise && fetch_frac > noise) {
    // The cores are the limit, but only reading cold made the step wait:
    // the stall is reading's CPU on busy cores, and a cache removes it.
    named = Bottleneck::kFetch;
  }
  return named;
}

// Model against measurement (the cached and cold runs), before and after
// calibration; beyond the noise the report names the difference.
void CheckAgainstRuns(const Profile& p, const Efficiency& eff, json* check, json* disagreements) {
  Config cached = p.measured, cold = p.measured;
  cached.cache_fraction = 1;
  cold.cache_fraction = 0;
  for (const auto& [name, config, measured] :
       {std::tuple<const char*, Config, double>{"cached", cached, p.cached_rate},
        std::tuple<const char*, Config, double>{"cold", cold, p.cold_rate}}) {
    const double raw = Predict(p, config, Efficiency{}).rate;
    const double model = Predict(p, config, eff).rate;
    (*check)[name] = {{"measured", measured}, {"model", model}, {"uncalibrated", raw}};
    if (measured <= 0) continue;
    for (const auto& [kind, value] : {std::pair<const char*, double>{"uncalibrated", raw},
                                      std::pair<const char*, double>{"calibrated", model}}) {
      const double off = (value - measured) / measured;
      if (std::abs(off) > Noise(p)) {
        disagreements->push_back({{"run", name}, {"model", kind}, {"measured", measured},
                                  {"predicted", value}, {"off", off}});
      }
    }
  }
}

// The knobs' curves: the step's own intra-op threads (where it was timed
// on its threads and on one) and reads in flight (where reads are made).
void KnobCurves(const Profile& p, const Efficiency& eff, json* curves) {
  const Config& m = p.measured;
  if (p.step_threads > 1 && p.step_rate_1 > 0) {
    json threads = json::array();
    for (int k = 1; k <= p.step_threads; ++k) {
      Config c = m;
      c.step_threads = k;
      threads.push_back(Point(k, Predict(p, c, eff)));
    }
    (*curves)["step_threads"] = threads;
  }
  // Reads in flight, where reads are made (a fixed setting; 0 adapts).
  if (p.item_bytes > 0) {
    json reads = json::array();
    for (int n : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
      Config c = m;
      c.reads_in_flight = n;
      json point = Point(n, Predict(p, c, eff));
      point["in_flight"] = ReadsInFlight(p, c);
      reads.push_back(point);
    }
    (*curves)["reads_in_flight"] = reads;
  }
}

// N workers of this node's cores (whole, at least one), the transport as assumed.
RemotePrep RemoteOfSize(const Profile& p, int workers) {
  RemotePrep r;
  r.workers = workers;
  r.cpus_per_worker = std::max(1.0, std::floor(p.measured.cores + 1e-9));
  return r;
}

// The what-if curves: the rate as one thing changes (cache, cores,
// bandwidth, latency, jobs sharing a pipeline or not; the knobs: KnobCurves).
json Curves(const Profile& p, const Efficiency& eff) {
  const Config& m = p.measured;
  json curves;
  json cache = json::array();
  for (int i = 0; i <= 20; ++i) {
    Config c = m;
    c.cache_fraction = i / 20.0;
    cache.push_back(Point(c.cache_fraction, Predict(p, c, eff)));
  }
  curves["cache_fraction"] = cache;
  // The node's cache (as measured, or a quarter of the dataset when none)
  // pooled across N nodes.
  json nodes = json::array();
  for (int n : {1, 2, 4, 8, 16, 32, 64}) {
    Config c = m;
    c.cache_fraction = m.cache_fraction > 0 ? m.cache_fraction : 0.25;
    c.cache_nodes = n;
    json point = Point(n, Predict(p, c, eff));
    point["hit_rate"] = HitRate(c);
    nodes.push_back(point);
  }
  curves["cache_nodes"] = nodes;
  json cores = json::array();
  const int max_cores = static_cast<int>(std::ceil(4 * m.cores));
  const int step = std::max(1, max_cores / 32);
  for (int n = 1; n <= max_cores; n += step) {
    Config c = m;
    c.cores = n;
    c.prep_threads = PrepThreadsFor(p, c, n, eff);
    json point = Point(n, Predict(p, c, eff));
    point["prep_threads"] = c.prep_threads;
    cores.push_back(point);
  }
  curves["cores"] = cores;
  json bw = json::array();
  for (double f : {0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0}) {
    Config c = m;
    c.bandwidth = (m.bandwidth > 0 ? m.bandwidth : 100e6) * f;
    bw.push_back(Point(c.bandwidth, Predict(p, c, eff)));
  }
  curves["bandwidth"] = bw;
  json lat = json::array();
  for (double ms : {0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0}) {
    Config c = m;
    c.latency = ms / 1000;
    lat.push_back(Point(c.latency, Predict(p, c, eff)));
  }
  curves["latency_s"] = lat;
  KnobCurves(p, eff, &curves);
  json jobs = json::array();
  for (int n = 1; n <= 8; ++n) {
    Config shared = m, own = m;
    shared.jobs = own.jobs = n;
    shared.shared = true;
    own.shared = false;
    Prediction ps = Predict(p, shared, eff), po = Predict(p, own, eff);
    jobs.push_back({{"x", n},
                    {"shared", ps.rate},
                    {"shared_bottleneck", BottleneckName(ps.bottleneck())},
                    {"independent", po.rate},
                    {"independent_bottleneck", BottleneckName(po.bottleneck())}});
  }
  curves["jobs"] = jobs;
  if (p.sample_bytes > 0) {
    // Prep on other machines: N workers the size of this node.
    json remote = json::array();
    for (int n : {0, 1, 2, 4, 8}) {
      const RemotePrep workers = RemoteOfSize(p, n);
      json point = Point(n, PredictRemote(p, m, workers, eff));
      point["workers_rate"] = RemoteRate(p, workers, eff);
      remote.push_back(point);
    }
    curves["remote_workers"] = remote;
  }
  return curves;
}

// Whether prep on other machines pays, and with how many workers: the
// fewest (of 1, 2, 4, 8 the size of this node) that reach the step's rate,
// else the most; it pays where the pipeline is what limits (prep) and the
// workers raise the rate by kRemotePays or more (a model's gain, not a
// timing: the step's timing noise, which a step of microseconds makes
// large on a busy machine, is not its measure). Null without the sample's size.
json RemoteAdvice(const Profile& p, const Efficiency& eff, Bottleneck named, const Prediction& now) {
  if (p.sample_bytes <= 0) return nullptr;
  const RemotePrep assumed;
  json out = {{"network", assumed.network},
              {"send_cpu_per_byte", assumed.send_cpu_per_byte},
              {"recv_cpu_per_byte", assumed.recv_cpu_per_byte},
              {"sample_bytes", p.sample_bytes}};
  Prediction best;
  int workers = 0;
  for (int n : {1, 2, 4, 8}) {
    best = PredictRemote(p, p.measured, RemoteOfSize(p, n), eff);
    workers = n;
    if (best.rate >= now.limits[0] * 0.999) break;
  }
  out["workers"] = workers;
  out["cpus_per_worker"] = RemoteOfSize(p, workers).cpus_per_worker;
  out["rate"] = best.rate;
  out["limit"] = LimitName(best.limit);
  out["pays"] = named == Bottleneck::kPrep && best.rate >= now.rate * kRemotePays;
  // What a batch's crossing costs the trainer's node, per sample.
  out["trainer_cpu_per_sample"] = assumed.recv_cpu_per_byte * p.sample_bytes;
  return out;
}

// What removes the stall, as one object the table, JSON and HTML all print.
json RecommendationJson(const Profile& p, const Efficiency& eff, Bottleneck named,
                        const Prediction& now) {
  // No stall beyond the noise: nothing to change, whatever the model would
  // add on paper (the report says so, and the notes say where it differs).
  Recommendation r = Recommend(p, eff);
  if (named == Bottleneck::kCompute) {
    // The step itself may still run faster on fewer threads of its own
    // (Recommend chose them first, from the measured configuration).
    const int step_threads = r.config.step_threads;
    r = Recommendation{};
    r.config = p.measured;
    r.cache_bytes = HitRate(p.measured) * p.dataset_bytes;
    r.rate = now.rate;
    r.reaches_step_rate = true;
    r.config.step_threads = step_threads;
    if (step_threads > 0) r.rate = Predict(p, r.config, eff).rate;
  }
  // The batches made ahead the recommendation runs with (its reads' room).
  const int64_t prefetch_now = p.batch > 0 && p.slot_items > 0 ? p.slot_items / p.batch - 1 : 0;
  const int64_t prefetch = r.prefetch > 0 ? r.prefetch : prefetch_now;
  return {{"config", ConfigToJson(r.config)},
          {"cache_bytes", r.cache_bytes},
          {"cache_bytes_per_node", r.cache_bytes_per_node},
          {"bandwidth_instead", r.bandwidth_instead},
          {"rate", r.rate},
          {"reads_in_flight", ReadsInFlight(WithPrefetch(p, r.prefetch), r.config)},
          {"prefetch", prefetch},
          {"reaches_step_rate", r.reaches_step_rate}};
}

}  // namespace

std::string AnalysisJson(const Profile& p) {
  const Efficiency eff = Calibrate(p);
  json out;
  out["profile"] = json::parse(p.ToJson());
  out["efficiency"] = {{"compute", eff.compute},
                       {"cpu", eff.cpu},
                       {"contention", eff.contention},
                       {"storage", eff.storage}};

  // The differential measurement, as time per sample.
  // The step and the loop around it (taking each batch): "compute", less
  // the Python hooks run as each batch is taken: "hooks".
  const double t_step = 1 / p.step_rate + p.loop_overhead;
  const double t_cached = p.cached_rate > 0 ? 1 / p.cached_rate : t_step;
  const double t_cold = p.cold_rate > 0 ? 1 / p.cold_rate : t_cached;
  const double prep_stall = std::max(0.0, t_cached - t_step);
  const double fetch_stall = std::max(0.0, t_cold - std::max(t_cached, t_step));
  const double total = t_step + prep_stall + fetch_stall;
  out["breakdown"] = {{"compute", (t_step - p.hooks) / total},
                      {"hooks", p.hooks / total},
                      {"prep_stall", prep_stall / total},
                      {"fetch_stall", fetch_stall / total}};

  const Prediction now = Predict(p, p.measured, eff);
  out["predicted"] = PredictionJson(now);
  out["predicted"]["reads_in_flight"] = ReadsInFlight(p, p.measured);
  // How far the step's timings spread (p.noise) moves the stalls by that
  // share of the step's own time, not of the whole: a 90% stall behind a
  // near-instant step is no noise however its timings spread (on a busy
  // machine a step of microseconds is timed 100% apart).
  const double stall_noise = std::max(kModelNoise, p.noise * t_step / total);
  out["stall_noise"] = stall_noise;
  Bottleneck named = NamedBottleneck(now, prep_stall / total, fetch_stall / total, stall_noise);
  // A stall is the loop waiting for data: where it measurably did not (within
  // the noise) in the real-data runs, what made them slower than the step
  // alone was the step itself, slowed beside the pipeline.
  if (p.waited >= 0 && p.waited <= stall_noise) named = Bottleneck::kCompute;
  out["bottleneck"] = BottleneckName(named);
  // The model alone: its binding limit, or compute when the step's own rate
  // is within the measurement's noise of it (the model cannot tell them apart).
  const bool compute_near = now.limits[0] <= now.rate * (1 + Noise(p));
  out["model_bottleneck"] = BottleneckName(compute_near ? Bottleneck::kCompute : now.bottleneck());
  json check = json::object();
  json disagreements = json::array();
  CheckAgainstRuns(p, eff, &check, &disagreements);
  out["check"] = check;
  out["disagreements"] = disagreements;
  out["curves"] = Curves(p, eff);

  out["recommendation"] = RecommendationJson(p, eff, named, now);
  out["remote"] = RemoteAdvice(p, eff, named, now);
  return out.dump();
}

Result<std::string> PredictJson(const Profile& p, const std::string& config_json) {
  return PredictWithStepJson(p, "{}", config_json);
}

Result<std::string> PredictWithStepJson(const Profile& measured, const std::string& step_json,
                                        const std::string& config_json) {
  try {
    // Calibrated on what was measured, then asked about another step.
    const Efficiency eff = Calibrate(measured);
    Profile p = measured;
    json step = json::parse(step_json);
    if (!step.is_object()) return InvalidArgument("a step is a JSON object");
    for (const auto& [key, value] : step.items()) {
      if (!value.is_number() || !(value.get<double>() >= 0))
        return InvalidArgument("step field '" + key + "' must be a number, 0 or more");
      const double v = value.get<double>();
      if (key == "step_rate" && v > 0) p.step_rate = v;
      else if (key == "step_cpu") p.step_cpu = v;
      else if (key == "step_threads" && v >= 1) p.step_threads = static_cast<int>(v);
      else if (key == "loop_overhead") p.loop_overhead = v;
      else return InvalidArgument("unknown step field '" + key + "'");
    }
    if (step.contains("step_rate")) {
      // The step's single-thread and spinning figures were of the measured step.
      p.step_rate_1 = 0, p.step_cpu_1 = 0, p.step_spin_cpu = 0, p.hooks = 0;
    }
    json j = json::parse(config_json);
    if (!j.is_object()) return InvalidArgument("a configuration is a JSON object");
    static const char* kKnown[] = {"cores", "prep_threads", "reads_in_flight", "cache_fraction",
                                   "bandwidth", "latency_s", "jobs", "shared",
                                   "step_threads", "cache_nodes", "peer_latency_s",
                                   "peer_bandwidth"};
    for (const auto& [key, value] : j.items()) {
      if (std::find(std::begin(kKnown), std::end(kKnown), key) == std::end(kKnown)) {
        return InvalidArgument("unknown configuration field '" + key + "'");
      }
    }
    Config c = ConfigFromJson(j, p.measured);
    // More cores means what the "cores" curve means: a prep thread per core
    // (PrepThreadsFor), unless the prep threads are given too.
    if (j.contains("cores") && !j.contains("prep_threads")) {
      const int whole = std::max(1, static_cast<int>(std::floor(c.cores + 1e-9)));
      c.prep_threads = PrepThreadsFor(p, c, whole, eff);
    }
    json out = PredictionJson(Predict(p, c, eff));
    out["config"] = ConfigToJson(c);
    out["reads_in_flight"] = ReadsInFlight(p, c);
    return out.dump();
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("bad configuration: ") + e.what());
  }
}

std::string AutotuneStartJson(double need, double prep_cpu_s, double latency_s, double item_bytes,
                              double cores) {
  const double most = std::max(1.0, std::round(cores));
  const int threads = std::min(ThreadsToCarry(prep_cpu_s, need), static_cast<int>(most));
  const int reads = AutoReadsInFlight(need, latency_s, item_bytes);
  char why[160];
  std::snprintf(why, sizeof why, "%.0f samples/s x %.2f ms prep CPU; %.2f ms a read", need,
                prep_cpu_s * 1e3, latency_s * 1e3);
  return json{{"threads", threads}, {"reads_in_flight", reads}, {"prefetch", 2}, {"why", why}}.dump();
}

}  // namespace nostall
