// Sampler: which items, in which order, each epoch, on this rank.
//
// The epoch order is a permutation of all items fixed by (seed, epoch); every
// rank computes the same permutation and takes every world_size-th entry
// starting at its rank, after padding the permutation (by repeating its
// start) to a multiple of world_size, so every rank has the same number of
// samples (torch's DistributedSampler does the same). With a subset, the
// permutation is of the subset's items instead. No I/O here.
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
  // When 0 < subset < num_items: every epoch uses the same random sample of
  // `subset` items (fixed by seed alone), e.g. to profile a huge dataset in
  // minutes. 0 = all items.
  int64_t subset = 0;
  // With shuffle: 0 shuffles all items each epoch. B > 0 shuffles in blocks:
  // the items are dealt once (by seed) into fixed blocks of B, the blocks
  // keep their order, and each epoch shuffles the items within each block.
  // So any rotation of an epoch by whole blocks (from block i of epoch e to
  // block i of epoch e + 1) still holds every item exactly once: a consumer
  // of a shared loader may start at any block boundary.
  int64_t shuffle_block = 0;
};

class Sampler {
 public:
  static Result<Sampler> Create(const SamplerOptions& options);

  // This rank's item indices for `epoch`, in order.
  std::vector<int64_t> EpochOrder(int64_t epoch) const;
  int64_t SamplesPerEpoch() const;  // after drop_last
  int64_t BatchesPerEpoch() const;
  // The items an epoch draws from (all, or the subset), in increasing order.
  std::vector<int64_t> Items() const;
  const SamplerOptions& options() const { return options_; }

 private:
  explicit Sampler(const SamplerOptions& o) : options_(o) {}
  SamplerOptions options_;
};

}  // namespace nostall

#endif  // NOSTALL_SAMPLER_H_
