// The performance model: what rate a training job's input pipeline can
// deliver in a configuration of the node, and which resource limits it.
// One model answers the analyzer's what-ifs (nostall/analyze.h: measured
// once, calibrated, asked about other configurations) and the autotuner's
// questions while a pipeline runs (src/pipeline/autotune.cc: how many prep
// threads carry the prep CPU, how many reads in flight hide the latency,
// what one more thread or read would give, whether the cores are taken).
//
// The model is a set of rate limits, one per resource; the job runs at the
// smallest (Plumber's view of a pipeline):
//
//   compute    T <= 1 / (1 / G(step threads) + loop overhead)
//   cpu        T * (pipelines * (prep + fetch(h)) + jobs * step_cpu) <= cores
//   sharing    the prep threads and the step's own threads share the cores
//              (a cycle of step and wait, below): "cpu" when they are more
//              than the cores, "prep_threads" when they are not
//   bandwidth  T * pipelines * (1 - h) * item_bytes <= bandwidth
//   latency    T * (1 - h) * (latency + item_bytes / bandwidth) <= reads_in_flight
//
// A shared pipeline writes each chunk in place in its segment and each job
// takes a view of it (docs/ring_format.md): no copy is charged.
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
#ifndef NOSTALL_MODEL_H_
#define NOSTALL_MODEL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "nostall/status.h"

namespace nostall {

// A configuration of the node and the pipeline to predict for.
struct Config {
  double cores = 1;            // CPUs the job(s) may use
  int prep_threads = 1;        // decode + augment threads per pipeline
  int reads_in_flight = 4;     // concurrent reads per pipeline; 0: a remote source's, by Little's law (ReadsInFlight)
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
  // How far apart two timings of the step alone were (relative; one before
  // the runs, one after): the machine's own noise during the measurement.
  // The model and the runs differ by more than max(kModelNoise, noise)
  // before the analyzer calls it a disagreement.
  double noise = 0;
  // Seconds per sample the training loop spends outside the step and outside
  // waiting for data (taking the batch, Python, being scheduled on cores the
  // prep threads keep busy), measured in the cached run: the loop around the
  // step runs at 1 / (1 / G + loop_overhead) at most.
  double loop_overhead = 0;
  // The share of the real-data runs' time the loop spent waiting for a batch
  // (the loader's own count; the larger of the cold and the cached run), -1
  // where not measured. A stall is the loop waiting: runs slower than the
  // step alone while the loop never waited are the step slowed beside the
  // pipeline (a busy machine), not a stall.
  double waited = -1;
  // Of loop_overhead, the seconds per sample spent in the Python hooks
  // (per-sample callables and batch_transform, run as each batch is taken:
  // docs/records.md). The analysis reports them as a stage of their own.
  double hooks = 0;
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
  int64_t batch = 0;          // samples per batch (slot_items / batch: the slots; 0: unknown)
  // Nodes in the job (its world size): the nodes whose memory a cluster
  // cache can pool (the recommendation's "cache across N nodes").
  int nodes = 1;
  // The bytes of one sample as the loader hands it out (what prep on
  // another machine sends the trainer); 0: not known.
  double sample_bytes = 0;

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
// [4, 256] and 256 MiB of bodies: AutoReadsInFlight below). Either way at
// most the items the batch slots hold.
double ReadsInFlight(const Profile& p, const Config& c);

struct Prediction {
  double rate = 0;  // samples/s per job
  double limits[5] = {0, 0, 0, 0, 0};  // by Limit; +inf where unlimited
  Limit limit = Limit::kCompute;
  Bottleneck bottleneck() const { return BottleneckOf(limit); }
};

// The model: `eff` scales the compute, cpu/threads and storage limits.
Prediction Predict(const Profile& p, const Config& c, const Efficiency& eff = {});

// ---- Prep on other machines (nostall.ray.Prep, docs/remote.md) ----
// `workers` actors of `cpus_per_worker` CPUs each read from storage, prep
// and send whole batches to the trainer; the trainer's own prep threads
// make the rest from what the step leaves. A batch crossing costs CPU on
// both sides and the network's bandwidth into the trainer's node: the
// defaults are what Ray's object store cost on the benchmark that measured
// them (docs/benchmarks.md, "Remote prep on Ray": ~28 ms of the prep node's
// CPU and ~25 ms of the trainer node's per 9.6 MB batch) and a 10 Gb/s link.
struct RemotePrep {
  int workers = 0;
  double cpus_per_worker = 1;
  double network = 1.25e9;            // bytes/s into the trainer's node
  double send_cpu_per_byte = 2.9e-9;  // a worker's CPU to put a byte of batch in the object store and send it
  double recv_cpu_per_byte = 2.6e-9;  // the trainer node's CPU to receive it (its raylet and the trainer)
};
// Samples/s the workers can make and send at most.
double RemoteRate(const Profile& p, const RemotePrep& r, const Efficiency& eff = {});
// The job's rate with the workers beside the node's own pipeline (one job):
// the step's rate, or the cores' (the step, receiving the workers'
// batches, and prepping the rest here), or the workers' rate and what the
// node's own pipeline adds within its thread and storage limits.
Prediction PredictRemote(const Profile& p, const Config& c, const RemotePrep& r, const Efficiency& eff = {});

// Prep threads for `cores` whole cores: one per core, or one per core the
// step leaves free, whichever the model says is faster.
int PrepThreadsFor(const Profile& p, Config c, int cores, const Efficiency& eff);

// ---- Reads in flight: Little's law ----
// How many reads a remote source keeps in flight when the spec leaves them
// to adapt (reads_in_flight = 0). The loader applies it as it runs
// (src/pipeline/pipeline_loader.cc, the only controller of a remote
// source's requests), the autotuner sizes a local source's fetch threads
// towards it and ReadsInFlight above predicts with it: one rule.
constexpr int kFirstAutoReads = 16;   // before the first latency is measured
constexpr int kMinAutoReads = 4;
constexpr int kMaxAutoReads = 256;
constexpr double kAutoReadBytes = 256.0 * (1 << 20);  // bytes in flight at most
constexpr double kAssumedPrepSeconds = 0.002;       // per item, before prep is measured

// Reads in flight that keep prep fed: the rate prep takes items at (items/s)
// x the time a read takes, with 1.5x headroom for the latency's spread, plus
// 2; at most kAutoReadBytes of bodies (item_bytes <= 0: not known yet);
// within [kMinAutoReads, kMaxAutoReads].
inline int AutoReadsInFlight(double prep_rate, double read_seconds, double item_bytes) {
  double want = std::ceil(prep_rate * read_seconds * 1.5) + 2;
  if (item_bytes > 0) want = std::min(want, kAutoReadBytes / std::max(item_bytes, 1.0));
  return static_cast<int>(std::clamp(want, double{kMinAutoReads}, double{kMaxAutoReads}));
}

// ---- The autotuner's questions ----
// Prep threads are sized to carry prep's CPU at 80% busy (the rest is slack
// for the spread of decode times).
inline constexpr double kFitCpu = 0.8;

// The prep threads that carry `prep_cpu` seconds per item at `rate` items/s,
// each at most `fit` busy (at least 1).
int ThreadsToCarry(double prep_cpu, double rate, double fit = kFitCpu);

// A stretch of a running pipeline (the autotuner's window), per item.
struct Observation {
  double rate = 0;            // items/s the pipeline delivered
  double wait = 0;            // fraction of the stretch the consumer waited
  double prep_cpu = 0;        // CPU seconds per item: decode + augment
  double fetch_cpu = 0;       // CPU seconds per item: reading (the loader's other threads)
  double step_cpu = 0;        // CPU seconds per item of the rest of the process (the step)
  double read_latency = 0;    // seconds a read takes
  double item_bytes = 0;
  double cores = 1;           // the cores the process may use
  int prep_threads = 1;
  int reads_in_flight = 1;
};

// The process used this share of its cores: the cores are taken (a
// CPU-bound step), and only the rate, not the consumer's waits, says what a
// prep thread costs or brings.
inline constexpr double kCoresTaken = 0.9;
bool CoresTaken(const Observation& o);

// The profile and configuration that reproduce an observation: the step
// runs at what it ran at outside the waits, on the cores its CPU kept busy;
// reads in flight as set. Predict(ProfileOf(o), ConfigOf(o)) is what the
// model makes of the stretch; with one knob changed, what the change would
// give.
Profile ProfileOf(const Observation& o);
Config ConfigOf(const Observation& o);

}  // namespace nostall

#endif  // NOSTALL_MODEL_H_
