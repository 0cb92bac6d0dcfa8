// Trace analysis: where a training step's time goes in the user's own
// PyTorch profiler trace, and what a change would give.
//
// A Chrome-trace JSON written by torch.profiler (plain or gzipped) is read
// as a stream (nlohmann's SAX parser over zlib; nothing but the events'
// few fields is kept) into a dependency graph, as Holistic Trace Analysis'
// critical-path analysis and Daydream (ATC'20) build it:
//
//   - each CPU thread's time, cut where the innermost operator changes, is a
//     chain of nodes (the thread runs them one after another);
//   - each GPU stream's kernels, copies and sets are a chain;
//   - a kernel launch (cudaLaunchKernel, cudaMemcpyAsync, ...) is an edge to
//     the GPU work its correlation id names;
//   - a synchronisation (cudaDeviceSynchronize, cudaStreamSynchronize,
//     cudaEventSynchronize, a blocking cudaMemcpy) ends no earlier than the
//     GPU work launched before it;
//   - waiting for the next batch (the DataLoader's `enumerate(DataLoader)#...
//     __next__`, nostall's `nostall: next batch`) is a node of its own: with
//     a loader that works on the training thread (a DataLoader without
//     workers) it is that work; with one that works beside it (workers,
//     nostall's threads), a producer chain of one node per batch, a batch
//     `period` apart, `prefetch` batches ahead of the consumer, whose
//     batch the wait cannot end before.
//
// A change is a transformation of the graph (durations scaled, nodes made
// asynchronous, the producer's period replaced), replayed in dependency
// order: so what overlapped in the trace overlaps in the prediction. The
// critical path of each step is followed back from its last node through
// the edges that held each node back. docs/trace.md documents every rule.
#ifndef NOSTALL_TRACE_H_
#define NOSTALL_TRACE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nostall/status.h"

namespace nostall::trace {

// What a node's time is, on the critical path.
enum class Kind : uint8_t {
  kData,     // waiting for the next batch
  kCpu,      // CPU operators, Python, launching kernels
  kGpu,      // GPU kernels
  kCopy,     // memcpy / memset on the GPU
  kSync,     // the CPU waiting for the GPU
};
inline constexpr int kKinds = 5;
const char* KindName(Kind k);

// The changes a prediction may make, each a rule on the graph (docs/trace.md).
struct Change {
  double loader_speedup = 1;     // the loader's work per batch / k
  bool loader_free = false;      // batches cost nothing (synthetic data)
  double loader_period = -1;     // >= 0: a loader working beside the step (workers,
                                 // threads) that makes a batch every this many seconds
  int loader_prefetch = -1;      // batches such a loader keeps ready (-1: as traced, else 2)
  double gpu_speedup = 1;        // every GPU kernel / k
  double gemm_speedup = 1;       // GEMM and convolution kernels / k (on top of gpu_speedup)
  double cpu_speedup = 1;        // CPU work (not waits) / k
  bool pinned_copies = false;    // host-to-device copies from pinned memory, non_blocking
  double pinned_copy_speedup = 2;  // a pinned copy's speed over a pageable one's
  bool fused_optimizer = false;  // the optimizer's per-parameter ops fused (foreach/fused)
  bool amp = false;              // mixed precision (Daydream's rule)
  int threads_from = 0;          // intra-op threads the trace ran with (0: not changed)
  int threads_to = 0;            // and the threads to predict for
  double parallel_scale = 0;     // > 0: what those threads make of parallel work (measured;
                                 // 0: threads_from / threads_to)
};

class Trace;

// Reads a torch.profiler Chrome trace (.json or .json.gz). Errors name the
// file and what is wrong: not JSON, not a trace, no ProfilerStep#N.
Result<std::shared_ptr<const Trace>> Read(const std::string& path);

// The trace's facts as JSON: steps, threads, streams, the loader seen
// ("none", "inline" or "beside"), its inferred period and prefetch, counts
// of events by category, and the traced critical-path split.
std::string FactsJson(const Trace& t);

// Replays the graph with `change` applied; steps and their critical paths.
Result<std::string> SimulateJson(const Trace& t, const Change& change);

// A change from JSON ({"loader_speedup": 2, ...}); unknown keys are errors.
Result<Change> ChangeFromJson(const std::string& json);

}  // namespace nostall::trace

#endif  // NOSTALL_TRACE_H_
