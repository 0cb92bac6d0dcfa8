// The what-if model: rate limits per resource (see nostall/analyze.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "nostall/analyze.h"

namespace nostall {
namespace {

using nlohmann::json;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kMaxSuggestedReads = 256;

double Clamp01(double x) { return std::min(1.0, std::max(0.0, x)); }

json ConfigToJson(const Config& c) {
  return {{"cores", c.cores},
          {"prep_threads", c.prep_threads},
          {"reads_in_flight", c.reads_in_flight},
          {"cache_fraction", c.cache_fraction},
          {"bandwidth", c.bandwidth},
          {"latency_s", c.latency},
          {"jobs", c.jobs},
          {"shared", c.shared}};
}

Config ConfigFromJson(const json& j, Config c = {}) {
  c.cores = j.value("cores", c.cores);
  c.prep_threads = j.value("prep_threads", c.prep_threads);
  c.reads_in_flight = j.value("reads_in_flight", c.reads_in_flight);
  c.cache_fraction = j.value("cache_fraction", c.cache_fraction);
  c.bandwidth = j.value("bandwidth", c.bandwidth);
  c.latency = j.value("latency_s", c.latency);
  c.jobs = j.value("jobs", c.jobs);
  c.shared = j.value("shared", c.shared);
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

double CpuPerSample(const Profile& p, const Config& c) {
  const double h = Clamp01(c.cache_fraction);
  const double pipelines = c.shared ? 1 : std::max(1, c.jobs);
  const double fetch = h * p.fetch_cpu_hit + (1 - h) * p.fetch_cpu_miss;
  return pipelines * (p.prep_cpu + fetch) + std::max(1, c.jobs) * p.step_cpu;
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

Prediction Predict(const Profile& p, const Config& c, const Efficiency& eff) {
  Prediction out;
  const double miss = 1 - Clamp01(c.cache_fraction);
  const double pipelines = c.shared ? 1 : std::max(1, c.jobs);
  double* lim = out.limits;
  lim[0] = p.step_rate > 0 ? p.step_rate * eff.compute : kInf;
  const double cpu = CpuPerSample(p, c);
  lim[1] = cpu > 0 ? c.cores * eff.cpu / cpu : kInf;
  lim[2] = p.prep_cpu > 0 ? c.prep_threads * eff.cpu / p.prep_cpu : kInf;
  lim[3] = c.bandwidth > 0 && miss > 0 && p.item_bytes > 0
               ? c.bandwidth * eff.storage / (pipelines * miss * p.item_bytes)
               : kInf;
  const double read_time = ReadTime(p, c);
  lim[4] = miss > 0 && read_time > 0 ? c.reads_in_flight * eff.storage / (miss * read_time) : kInf;
  int best = 0;
  for (int l = 1; l < 5; ++l) {
    if (lim[l] < lim[best]) best = l;  // ties go to the earlier: compute first
  }
  out.limit = static_cast<Limit>(best);
  out.rate = lim[best];
  return out;
}

Efficiency Calibrate(const Profile& p) {
  Efficiency eff;
  auto clamp = [](double x) { return std::min(1.5, std::max(0.5, x)); };
  Config cached = p.measured;
  cached.cache_fraction = 1;
  if (p.cached_rate > 0) {
    Prediction raw = Predict(p, cached, eff);
    if (raw.bottleneck() == Bottleneck::kPrep) {
      eff.cpu = clamp(p.cached_rate / raw.rate);
    } else if (raw.limit == Limit::kCompute) {
      eff.compute = clamp(p.cached_rate / raw.rate);
    }
  }
  Config cold = p.measured;
  cold.cache_fraction = 0;
  if (p.cold_rate > 0) {
    Prediction raw = Predict(p, cold, eff);
    if (raw.bottleneck() == Bottleneck::kFetch) eff.storage = clamp(p.cold_rate / raw.rate);
  }
  return eff;
}

Recommendation Recommend(const Profile& p, const Efficiency& eff) {
  Recommendation r;
  Config c = p.measured;
  // Aim at the step's rate, or, when even 4x the cores with everything cached
  // cannot feed it, at the most those cores can do.
  const double max_cores = 4 * std::max(1.0, p.measured.cores);
  Config best = c;
  best.cores = max_cores;
  best.prep_threads = static_cast<int>(max_cores);
  best.cache_fraction = 1;
  const double step_rate = p.step_rate * eff.compute;
  const double target = std::min(step_rate, max_cores * eff.cpu / CpuPerSample(p, best));
  const double pipelines = c.shared ? 1 : std::max(1, c.jobs);
  // Storage: a cache that cuts the bytes read to what the bandwidth carries,
  // then the reads in flight that hide the latency of what still misses.
  const double read_time = ReadTime(p, c);
  const double miss = 1 - Clamp01(c.cache_fraction);
  if (c.bandwidth > 0 && p.item_bytes > 0) {
    const double bytes_per_sample = pipelines * p.item_bytes;
    const double max_miss = c.bandwidth * eff.storage / (bytes_per_sample * target);
    if (max_miss < miss) {
      r.bandwidth_instead = bytes_per_sample * miss * target / eff.storage;
      // Round the cache up to whole percent of the dataset.
      c.cache_fraction = std::min(1.0, std::ceil((1 - max_miss) * 100 - 1e-9) / 100);
    }
  }
  const double miss_after = 1 - Clamp01(c.cache_fraction);
  if (read_time > 0 && miss_after > 0) {
    const int need = static_cast<int>(std::ceil(target * miss_after * read_time / eff.storage - 1e-9));
    c.reads_in_flight = std::max(p.measured.reads_in_flight, std::min(need, kMaxSuggestedReads));
  }
  // CPU: the cores that carry the pipeline(s) and the step(s) at the target.
  const double cores = std::ceil(target * CpuPerSample(p, c) / eff.cpu - 1e-9);
  const double thread_cores = std::ceil(target * p.prep_cpu / eff.cpu - 1e-9);
  c.cores = std::max(p.measured.cores, std::min(max_cores, std::max(cores, thread_cores)));
  c.prep_threads = std::max(p.measured.prep_threads, static_cast<int>(c.cores));
  r.config = c;
  r.cache_bytes = c.cache_fraction * p.dataset_bytes;
  r.rate = Predict(p, c, eff).rate;
  r.reaches_step_rate = r.rate >= step_rate * 0.999;
  return r;
}

Result<Profile> Profile::FromJson(const std::string& text) {
  try {
    json j = json::parse(text);
    Profile p;
    p.step_rate = j.at("step_rate").get<double>();
    p.step_cpu = j.value("step_cpu", 0.0);
    p.prep_cpu = j.at("prep_cpu").get<double>();
    p.fetch_cpu_miss = j.value("fetch_cpu_miss", 0.0);
    p.fetch_cpu_hit = j.value("fetch_cpu_hit", 0.0);
    p.item_bytes = j.at("item_bytes").get<double>();
    p.dataset_bytes = j.value("dataset_bytes", 0.0);
    p.dataset_items = j.value("dataset_items", int64_t{0});
    p.measured = ConfigFromJson(j.at("measured"));
    p.cached_rate = j.value("cached_rate", 0.0);
    p.cold_rate = j.value("cold_rate", 0.0);
    if (p.step_rate <= 0 || p.prep_cpu < 0 || p.item_bytes < 0 || p.measured.cores <= 0) {
      return InvalidArgument("a profile needs step_rate > 0, prep_cpu >= 0, item_bytes >= 0 "
                             "and measured.cores > 0");
    }
    return p;
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("bad profile: ") + e.what());
  }
}

std::string Profile::ToJson() const {
  json j = {{"step_rate", step_rate},           {"step_cpu", step_cpu},
            {"prep_cpu", prep_cpu},             {"fetch_cpu_miss", fetch_cpu_miss},
            {"fetch_cpu_hit", fetch_cpu_hit},   {"item_bytes", item_bytes},
            {"dataset_bytes", dataset_bytes},   {"dataset_items", dataset_items},
            {"measured", ConfigToJson(measured)}, {"cached_rate", cached_rate},
            {"cold_rate", cold_rate}};
  return j.dump();
}

std::string AnalysisJson(const Profile& p) {
  const Efficiency eff = Calibrate(p);
  const Config& m = p.measured;
  json out;
  out["profile"] = json::parse(p.ToJson());
  out["efficiency"] = {{"compute", eff.compute}, {"cpu", eff.cpu}, {"storage", eff.storage}};

  // The differential measurement, as time per sample.
  const double t_step = 1 / p.step_rate;
  const double t_cached = p.cached_rate > 0 ? 1 / p.cached_rate : t_step;
  const double t_cold = p.cold_rate > 0 ? 1 / p.cold_rate : t_cached;
  const double prep_stall = std::max(0.0, t_cached - t_step);
  const double fetch_stall = std::max(0.0, t_cold - std::max(t_cached, t_step));
  const double total = t_step + prep_stall + fetch_stall;
  out["breakdown"] = {{"compute", t_step / total},
                      {"prep_stall", prep_stall / total},
                      {"fetch_stall", fetch_stall / total}};

  Config cached = m, cold = m;
  cached.cache_fraction = 1;
  cold.cache_fraction = 0;
  const Prediction now = Predict(p, m, eff);
  out["predicted"] = PredictionJson(now);
  out["bottleneck"] = BottleneckName(now.bottleneck());
  out["check"] = {{"cached", {{"measured", p.cached_rate}, {"model", Predict(p, cached, eff).rate}}},
                  {"cold", {{"measured", p.cold_rate}, {"model", Predict(p, cold, eff).rate}}}};

  json curves;
  json cache = json::array();
  for (int i = 0; i <= 20; ++i) {
    Config c = m;
    c.cache_fraction = i / 20.0;
    cache.push_back(Point(c.cache_fraction, Predict(p, c, eff)));
  }
  curves["cache_fraction"] = cache;
  json cores = json::array();
  const int max_cores = static_cast<int>(std::ceil(4 * m.cores));
  const int step = std::max(1, max_cores / 32);
  for (int n = 1; n <= max_cores; n += step) {
    Config c = m;
    c.cores = n;
    c.prep_threads = n;
    cores.push_back(Point(n, Predict(p, c, eff)));
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
  out["curves"] = curves;

  const Recommendation r = Recommend(p, eff);
  out["recommendation"] = {{"config", ConfigToJson(r.config)},
                           {"cache_bytes", r.cache_bytes},
                           {"bandwidth_instead", r.bandwidth_instead},
                           {"rate", r.rate},
                           {"reaches_step_rate", r.reaches_step_rate}};
  return out.dump();
}

Result<std::string> PredictJson(const Profile& p, const std::string& config_json) {
  try {
    json j = json::parse(config_json);
    if (!j.is_object()) return InvalidArgument("a configuration is a JSON object");
    static const char* kKnown[] = {"cores", "prep_threads", "reads_in_flight", "cache_fraction",
                                   "bandwidth", "latency_s", "jobs", "shared"};
    for (const auto& [key, value] : j.items()) {
      if (std::find(std::begin(kKnown), std::end(kKnown), key) == std::end(kKnown)) {
        return InvalidArgument("unknown configuration field '" + key + "'");
      }
    }
    const Config c = ConfigFromJson(j, p.measured);
    json out = PredictionJson(Predict(p, c, Calibrate(p)));
    out["config"] = ConfigToJson(c);
    return out.dump();
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("bad configuration: ") + e.what());
  }
}

}  // namespace nostall
