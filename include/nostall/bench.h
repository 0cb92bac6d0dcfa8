// Throughput measurement shared by `nostall bench` and the benchmarks.
#ifndef NOSTALL_BENCH_H_
#define NOSTALL_BENCH_H_

#include <cstdint>
#include <functional>

#include "nostall/loader.h"

namespace nostall {

struct ThroughputResult {
  int64_t images = 0;
  int64_t batches = 0;
  double seconds = 0;  // from the first Next() call to the last batch
  LoaderStats stats;
  double images_per_second() const { return seconds > 0 ? images / seconds : 0; }
};

// Pulls batches from a loader built from `spec` as fast as they come, for
// `epochs` epochs (or `max_batches`, if > 0), releasing each at once.
// `progress(images, seconds)` is called after every batch when set.
Result<ThroughputResult> MeasureThroughput(
    const LoaderSpec& spec, int epochs, int64_t max_batches,
    const std::function<void(int64_t, double)>& progress = nullptr);

}  // namespace nostall

#endif  // NOSTALL_BENCH_H_
