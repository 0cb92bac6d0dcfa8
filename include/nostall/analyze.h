// Analyze: where a training job's time goes, and what would change it.
//
// The differential measurement (DS-Analyzer's idea, made one command) runs
// the user's own training step three ways: on synthetic batches already in
// memory (the step's ingestion rate G), on real data fully cached (adds
// decode and augmentation: the prep stall) and on real data read cold from
// storage (adds reading: the fetch stall). The pipeline's stats give each
// stage's cost per item; a storage probe gives the bandwidth and latency.
//
// The model built on those numbers is a set of rate limits, one per
// resource; the job runs at the smallest (Plumber's view of a pipeline):
//
//   compute    T <= 1 / (1 / G(step threads) + loop overhead)
//   cpu        T * (pipelines * (prep + fetch(h)) + jobs * step_cpu) <= cores
//   sharing    the prep threads and the step's own threads share the cores
//              (a cycle of step and wait, below): "cpu" when they are more
//              than the cores, "prep_threads" when they are not
//   bandwidth  T * pipelines * (1 - h) * item_bytes <= bandwidth
//
// A shared pipeline writes each chunk in place in its segment and each job
// takes a view of it (docs/ring_format.md): no copy is charged.
//   latency    T * (1 - h) * (latency + item_bytes / bandwidth) <= reads_in_flight
//
// The sharing limit follows one sample's time as the consumer sees it: the
// step runs (its threads keep `step_cores` cores busy, slowed when they and
// the busy prep threads are more than the cores: each runnable thread gets
// cores / runnable of a core), then the consumer waits while the prep
// threads finish the sample's prep work, competing only with the step's
// idle threads that spin after it returns (`step_spin_cpu`). With a step
// that uses no CPU this is the familiar T * prep <= prep_threads.
//
// where T is each job's samples/s, h the fraction of the dataset's bytes in
// a MinIO cache (its hit rate: docs/cache_format.md), `pipelines` is 1 when
// the jobs share one pipeline and `jobs` otherwise. The cpu and storage
// limits are scaled by efficiencies calibrated on the measured runs, so the
// model reproduces what was measured before it predicts anything else.
// Each prediction names its bottleneck: compute, prep (cpu, threads) or
// fetch (bandwidth, latency). See docs/analyze.md.
#ifndef NOSTALL_ANALYZE_H_
#define NOSTALL_ANALYZE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "nostall/loader.h"
#include "nostall/status.h"

namespace nostall {

// A configuration of the node and the pipeline to predict for.
struct Config {
  double cores = 1;            // CPUs the job(s) may use
  int prep_threads = 1;        // decode + augment threads per pipeline
  int reads_in_flight = 4;     // concurrent reads per pipeline; 0: adaptive (AdaptiveReads)
  double cache_fraction = 0;   // of the dataset's bytes held in a MinIO cache
  double bandwidth = 0;        // storage bytes/s (0: unlimited)
  double latency = 0;          // storage seconds per read
  int jobs = 1;                // training jobs on the node reading this dataset
  bool shared = false;         // one shared pipeline feeds every job
  int step_threads = 0;        // the step's intra-op threads (0: as measured, at most the cores)
  // The cache pooled across this many nodes (the cluster cache on
  // memcached): each node holds cache_fraction, an item is cached on one
  // node, so the hit rate is min(1, cache_fraction x cache_nodes); a hit on
  // a peer costs peer_latency (its request's share of a batch's multi-get
  // round trip and the peer's answer) and network bytes.
  int cache_nodes = 1;
  double peer_latency = 0.0005;   // s per item read from a peer's cache
  double peer_bandwidth = 1.25e9; // network bytes/s into this node (10 Gb/s)
};

// What the differential measurement found. Costs are per item (sample).
struct Profile {
  double step_rate = 0;       // G: samples/s of the step on in-memory batches
  double step_cpu = 0;        // CPU seconds the step uses per sample
  int step_threads = 1;       // the step's intra-op threads when G was measured
  double step_rate_1 = 0;     // G with one intra-op thread (0: not measured)
  double step_cpu_1 = 0;      // CPU seconds per sample with one intra-op thread
  double step_spin_cpu = 0;   // CPU seconds per sample the step's idle threads burn after it
  // Seconds per sample the training loop spends outside the step and outside
  // waiting for data (taking the batch, Python, being scheduled on cores the
  // prep threads keep busy), measured in the cached run: the loop around the
  // step runs at 1 / (1 / G + loop_overhead) at most.
  double loop_overhead = 0;
  double prep_cpu = 0;        // decode + augment
  double fetch_cpu_miss = 0;  // reading one item from storage
  double fetch_cpu_hit = 0;   // copying one item from the cache
  double item_bytes = 0;      // mean encoded size
  double dataset_bytes = 0;   // the whole dataset's encoded size
  int64_t dataset_items = 0;
  Config measured;            // the configuration the runs below used
  double cached_rate = 0;     // measured samples/s with the step, all items cached
  double cold_rate = 0;       // measured samples/s with the step, nothing cached
  // Items the batch slots can hold reads for (the slots ahead of the one in
  // use x the batch size): reads in flight never exceed it. 0: no bound.
  int64_t slot_items = 0;
  // Nodes in the job (its world size): the nodes whose memory a cluster
  // cache can pool (the recommendation's "cache across N nodes").
  int nodes = 1;

  static Result<Profile> FromJson(const std::string& json);
  std::string ToJson() const;
};

enum class Limit { kCompute, kCpu, kThreads, kBandwidth, kLatency };
enum class Bottleneck { kCompute, kPrep, kFetch };
const char* LimitName(Limit l);
const char* BottleneckName(Bottleneck b);
Bottleneck BottleneckOf(Limit l);

// Multiplies the raw limits; 1 = the model as written above.
// `contention` applies only where a multithreaded step and busy prep
// threads outnumber the cores: the step's threads then wait for each other
// (spinning) and waste CPU a fair share does not show.
struct Efficiency {
  double compute = 1, cpu = 1, storage = 1, contention = 1;
};

// Measured and model rates further apart than this are a disagreement the
// report names; closer, they are noise on a shared machine.
inline constexpr double kModelNoise = 0.05;

// The step at a configuration's thread count: wall seconds per sample alone,
// the cores it keeps busy while it runs (its threads wait for each other, so
// it needs them all), its CPU per sample, and the part of that CPU that is
// work (the one-thread CPU; the rest is spinning at barriers): the CPU
// budget counts the work, the sharing of cores counts the busy cores.
struct StepCost {
  int threads = 1;
  double seconds = 0;
  double busy_cores = 0;
  double cpu = 0;
  double work_cpu = 0;
  double spin_cpu = 0;
};
StepCost StepAt(const Profile& p, const Config& c);

// The reads in flight a configuration runs with: `reads_in_flight` when
// fixed; when adaptive (0), what the loader keeps by Little's law (the rate
// the prep threads take items at x the read time, 1.5x headroom + 2, within
// [4, 256] and 256 MiB of bodies: src/pipeline/read_limit.h). Either way at
// most the items the batch slots hold.
double ReadsInFlight(const Profile& p, const Config& c);

// The configuration the autotuner would start from for a job whose step
// takes `need` samples/s: just enough, by the rules it tunes with
// (src/pipeline/autotune.h, read_limit.h): prep threads that carry
// `prep_cpu_s` a sample at 80% busy (within `cores`), reads in flight by
// Little's law for `latency_s` a read, 2 batches ahead. As JSON: {"threads",
// "reads_in_flight", "prefetch", "why"}.
std::string AutotuneStartJson(double need, double prep_cpu_s, double latency_s, double item_bytes,
                              double cores);

struct Prediction {
  double rate = 0;  // samples/s per job
  double limits[5] = {0, 0, 0, 0, 0};  // by Limit; +inf where unlimited
  Limit limit = Limit::kCompute;
  Bottleneck bottleneck() const { return BottleneckOf(limit); }
};

// The model: `eff` scales the compute, cpu/threads and storage limits.
Prediction Predict(const Profile& p, const Config& c, const Efficiency& eff = {});

// Efficiencies that make the model reproduce the measured cached and cold
// rates at `p.measured` (each clamped to [0.5, 1.5]; 1 where the
// measurement says nothing about a resource). The step's rate G is measured
// directly and never calibrated: a cached run slower than G beyond the noise
// is a prep stall, so it is the CPU efficiency that explains it. A cold run
// slower than the model is a storage effect (the runs differ only in
// reading), so where storage has a finite limit its efficiency explains it.
Efficiency Calibrate(const Profile& p);

// The smallest change that brings the predicted rate to the step's rate G:
// cache first (memory is cheaper than bandwidth), then reads in flight,
// then cores. Fields equal to the measured configuration are unchanged.
struct Recommendation {
  Config config;
  double cache_bytes = 0;           // for config.cache_fraction
  double bandwidth_instead = 0;     // storage bytes/s that would do without the cache (0: n/a)
  double cache_bytes_per_node = 0;  // config.cache_nodes > 1: what each node holds
  double rate = 0;                  // predicted with `config`
  bool reaches_step_rate = false;   // false: even 4x the cores and all in cache fall short
};
Recommendation Recommend(const Profile& p, const Efficiency& eff);

// Everything a report shows, as JSON: the stall breakdown, the calibrated
// model at the measured configuration, what-if curves (cache size, cores,
// bandwidth, latency, jobs shared or not) and the recommendation.
std::string AnalysisJson(const Profile& p);

// One calibrated prediction as JSON; `config_json` overrides fields of the
// measured configuration (same names as in the profile's "measured").
Result<std::string> PredictJson(const Profile& p, const std::string& config_json);

// Storage, measured directly: evicts `items` from the page cache, then reads
// them with `concurrency` threads, timing each read. The source is opened as
// the spec says (throttle included).
struct ReadTiming {
  int64_t bytes = 0;
  double seconds = 0;
};
struct StorageProbe {
  std::vector<ReadTiming> reads;
  double elapsed_s = 0;
  int concurrency = 1;
};
Result<StorageProbe> ProbeStorage(const Source& source, const std::vector<int64_t>& items,
                                  int concurrency);

// Fits latency + bytes / bandwidth to sequential reads (least squares), and
// takes the aggregate rate of concurrent reads as the bandwidth when higher.
struct StorageModel {
  double bandwidth = 0;  // bytes/s (0: too fast to matter)
  double latency = 0;    // seconds
};
StorageModel FitStorage(const StorageProbe& sequential, const StorageProbe& concurrent);

// Times cold reads of `sequential` of `loader`'s items one at a time and of
// `concurrent` others `concurrency` at a time, spread evenly over its items
// (this rank's); the fitted model and the raw figures as JSON:
// {"bandwidth", "latency_s", "sequential": {reads, bytes, elapsed_s,
// concurrency}, "concurrent": {...}}.
Result<std::string> ProbeLoaderStorageJson(const Loader& loader, int64_t sequential,
                                           int64_t concurrent, int concurrency);

}  // namespace nostall

#endif  // NOSTALL_ANALYZE_H_
