// How many reads a remote source keeps in flight when the spec leaves them
// to adapt (reads_in_flight = 0): Little's law. The loader applies it as it
// runs (src/pipeline/pipeline_loader.cc, AdaptReadLimit) and the analyzer's model predicts with the
// same rule (src/analyze/model.cc), so the two cannot drift apart.
#ifndef NOSTALL_PIPELINE_READ_LIMIT_H_
#define NOSTALL_PIPELINE_READ_LIMIT_H_

#include <algorithm>
#include <cmath>

namespace nostall {

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

}  // namespace nostall

#endif  // NOSTALL_PIPELINE_READ_LIMIT_H_
