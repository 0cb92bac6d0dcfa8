// Analyze: where a training job's time goes, and what would change it.
//
// The differential measurement (DS-Analyzer's idea, made one command) runs
// the user's own training step three ways: on synthetic batches already in
// memory (the step's ingestion rate G), on real data fully cached (adds
// decode and augmentation: the prep stall) and on real data read cold from
// storage (adds reading: the fetch stall). The pipeline's stats give each
// stage's cost per item; a storage probe gives the bandwidth and latency.
//
// The model (nostall/model.h) is a set of rate limits, one per resource,
// scaled by efficiencies calibrated on the measured runs, so it reproduces
// what was measured before it predicts anything else. See docs/analyze.md.
#ifndef NOSTALL_ANALYZE_H_
#define NOSTALL_ANALYZE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "nostall/loader.h"
#include "nostall/model.h"
#include "nostall/status.h"

namespace nostall {

// The configuration the autotuner would start from for a job whose step
// takes `need` samples/s: just enough, by the rules it tunes with
// (src/pipeline/autotune.h, nostall/model.h): prep threads that carry
// `prep_cpu_s` a sample at 80% busy (within `cores`), reads in flight by
// Little's law for `latency_s` a read, 2 batches ahead. As JSON: {"threads",
// "reads_in_flight", "prefetch", "why"}.
std::string AutotuneStartJson(double need, double prep_cpu_s, double latency_s, double item_bytes,
                              double cores);


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
  // The prefetch (batches made ahead) whose slots leave room for
  // config.reads_in_flight, where today's slots hold fewer (0: as now).
  int prefetch = 0;
};
Recommendation Recommend(const Profile& p, const Efficiency& eff);

// Everything a report shows, as JSON: the stall breakdown, the calibrated
// model at the measured configuration, what-if curves (cache size, cores,
// bandwidth, latency, jobs shared or not) and the recommendation.
std::string AnalysisJson(const Profile& p);

// One calibrated prediction as JSON; `config_json` overrides fields of the
// measured configuration (same names as in the profile's "measured").
Result<std::string> PredictJson(const Profile& p, const std::string& config_json);

// The same for another training step than the measured one (`step_json`:
// {"step_rate", "step_cpu", "step_threads", "loop_overhead"}, per sample):
// the efficiencies are calibrated on the measured runs, then the step is
// replaced. What a profiler trace's step would get from this pipeline
// (nostall/trace.h) is asked this way: one model for both.
Result<std::string> PredictWithStepJson(const Profile& measured, const std::string& step_json,
                                        const std::string& config_json);

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
