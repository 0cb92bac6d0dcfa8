// Sampler: which items, in which order, each epoch, on this rank.
//
// The epoch order is a permutation of all items fixed by (seed, epoch); every
// rank computes the same permutation and takes every world_size-th entry
// starting at its rank, after padding the permutation (by repeating its
// start) to a multiple of world_size, so every rank has the same number of
// samples (torch's DistributedSampler does the same). No I/O here.
#ifndef NOSTALL_SAMPLER_H_
#define NOSTALL_SAMPLER_H_

#include <cstdint>
#include <vector>

#include "nostall/status.h"

namespace nostall {

struct SamplerOptions {
  int64_t num_items = 0;
  int64_t batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;
  int64_t rank = 0;
  int64_t world_size = 1;
  bool drop_last = false;  // drop the final, incomplete batch of the epoch
};

class Sampler {
 public:
  static Result<Sampler> Create(const SamplerOptions& options);

  // This rank's item indices for `epoch`, in order.
  std::vector<int64_t> EpochOrder(int64_t epoch) const;
  int64_t SamplesPerEpoch() const;  // after drop_last
  int64_t BatchesPerEpoch() const;
  const SamplerOptions& options() const { return options_; }

 private:
  explicit Sampler(const SamplerOptions& o) : options_(o) {}
  SamplerOptions options_;
};

}  // namespace nostall

#endif  // NOSTALL_SAMPLER_H_
