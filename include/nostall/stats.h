// Per-stage and per-iteration statistics of a loader.
//
// Every blocking wait in the pipeline is timed: a stage is "starved" while it
// waits for input and "blocked" while it waits for room to put its output.
// Busy time is thread CPU time, so items / busy seconds is a stage's rate per
// core. The consumer side records how long each call for the next batch
// waited (the data stall) and how long the caller spent between calls.
#ifndef NOSTALL_STATS_H_
#define NOSTALL_STATS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace nostall {

// Requests to remote storage (s3://), over the source's life.
struct StorageStats {
  int64_t requests = 0;  // sent, retries included
  int64_t bytes = 0;     // of bodies received
  int64_t retries = 0;
  int64_t errors = 0;    // requests that failed for good
  int64_t in_flight = 0, peak_in_flight = 0;
  double latency_p50_s = 0, latency_p99_s = 0;  // of answered requests
  // Retries by cause: 503 SlowDown; other 5xx; timeouts (connect, or a body
  // stalled); connections refused or reset; bodies cut short.
  int64_t retry_slow_down = 0, retry_server_error = 0, retry_timeout = 0, retry_connection = 0,
          retry_cut_short = 0;
  // CPU time of the client's I/O thread (signing, TLS, HTTP, copying bodies).
  int64_t io_cpu_ns = 0;
};

struct StageStats {
  int64_t items = 0;
  int64_t bytes = 0;
  int64_t busy_cpu_ns = 0;
  int64_t work_ns = 0;     // wall time on items (for fetch: includes waiting on storage)
  int64_t starved_ns = 0;  // waiting for input
  int64_t blocked_ns = 0;  // waiting for room downstream
  int threads = 0;
  int64_t peak_in_flight = 0;  // fetch only: most reads in flight at once (0 elsewhere)
};

// One change the autotuner made (src/pipeline/autotune.h).
struct AutotuneDecision {
  double time_s = 0;   // since the loader was created
  std::string knob;    // "threads", "reads_in_flight" or "prefetch"
  int from = 0, to = 0;
  std::string why;
  // The model's rate (items/s) for the window the change was decided on, at
  // the settings before and after it (nostall/model.h); 0: not modelled
  // (prefetch, which the model does not see).
  double model_rate_before = 0, model_rate_after = 0;
};

struct LoaderStats {
  StageStats fetch;  // reading encoded bytes from the source
  StageStats prep;   // decode + augment, written into the batch slot
  StageStats batch;  // completing batches (compaction after skips)
  int64_t batches = 0;  // handed to the caller
  int64_t samples = 0;  // in those batches
  int64_t errors = 0;   // bad items met (raised or skipped)
  int64_t skipped = 0;  // bad items skipped under on_error="skip"
  // Batches left with no sample (every item skipped): never handed out.
  int64_t empty_batches_dropped = 0;
  // Batches handed out as private copies because the caller held every
  // other slot (zero-copy resumes once it lets batches go).
  int64_t private_copies = 0;
  // Extra fields (nostall/record.h): bytes of each put in batches so far,
  // in the spec's order.
  std::vector<std::pair<std::string, int64_t>> field_bytes;
  // Consumer side: calls for the next batch.
  int64_t iterations = 0;
  int64_t wait_ns = 0;      // total time waiting for a batch (stall)
  int64_t max_wait_ns = 0;  // longest wait for one batch (over timeouts and retries)
  int64_t between_ns = 0;   // total time the caller spent between calls
  int64_t elapsed_ns = 0;   // since the loader was created
  uint64_t ring_bytes = 0;
  int64_t ring_slots = 0;
  // Requests to remote storage (s3://); has_storage false for local files.
  bool has_storage = false;
  StorageStats storage;
  int reads_in_flight_target = 0;  // the limit the pipeline keeps now (adapts for s3://)

  // The autotuner, when any knob is tuned: which, their values now, and
  // every change it made (the first kMaxDecisions; the count goes on).
  bool has_autotune = false;
  std::vector<std::string> autotune_knobs;
  int autotune_threads = 0, autotune_reads = 0, autotune_prefetch = 0;
  std::vector<AutotuneDecision> autotune_decisions;
  int64_t autotune_changes = 0;
  static constexpr size_t kMaxDecisions = 256;

  // The consumer per epoch, in the order the epochs began.
  struct ConsumerEpoch {
    int64_t epoch = 0;
    int64_t batches = 0, samples = 0;
    int64_t wait_ns = 0, between_ns = 0;
  };
  std::vector<ConsumerEpoch> consumer_epochs;
  // The wait for each of the most recent batches (at most kRecentWaits),
  // oldest first: what a stall looks like iteration by iteration.
  static constexpr size_t kRecentWaits = 1024;
  std::vector<int64_t> recent_wait_ns;

  // The cache, when one is configured: this loader's lookups, per epoch.
  struct CacheEpoch {
    int64_t epoch = 0;
    int64_t hits = 0, misses = 0;
    int64_t errors = 0;  // of the misses: lookups a tier failed (read from storage instead)
    int64_t hit_bytes = 0, miss_bytes = 0;
  };
  // Each tier of the cache, front first: hits, misses and errors as the
  // tier counts them (a MinIO tier: every process that shares it); lookups,
  // their time and the bytes found: this loader's.
  struct CacheTier {
    std::string tier;
    uint64_t budget_bytes = 0, used_bytes = 0;
    int64_t items = 0, hits = 0, misses = 0, errors = 0;
    int64_t lookups = 0, lookup_ns = 0, hit_bytes = 0;
  };
  std::vector<CacheTier> cache_tiers;
  bool has_cache = false;
  std::string cache_name;
  uint64_t cache_budget_bytes = 0;
  uint64_t cache_used_bytes = 0;
  int64_t cache_items = 0;           // cached by any process
  int64_t cache_inserted_bytes = 0;  // by this loader
  std::vector<CacheEpoch> cache_epochs;

  // A consumer of a shared loader (nostall/shared.h).
  bool has_shared = false;
  std::string shared_name;
  std::string shared_mode;          // "shared", or "private" after falling back
  std::string shared_reason;        // why the last fallback happened
  int64_t shared_chunks = 0;        // chunks read from the shared segment
  int64_t private_chunks = 0;       // chunks made by the private pipeline
  int64_t copied_batches = 0;       // batches that spanned chunks (one copy)
  int64_t fallbacks = 0, rejoins = 0;

  // Fraction of the consumer's time spent waiting: wait / (wait + between).
  double StallFraction() const;
  // The q-quantile (0..1) of recent_wait_ns, in seconds; 0 when empty.
  double RecentWaitQuantile(double q) const;
  std::string ToJson() const;
  // A human-readable table: one line per stage, then the consumer.
  std::string ToTable() const;
};

}  // namespace nostall

#endif  // NOSTALL_STATS_H_
