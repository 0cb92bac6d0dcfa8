#include "nostall/sampler.h"

#include <numeric>
#include <string>

#include "common/philox.h"

namespace nostall {
namespace {
// Distinguishes the shuffle's random stream from the augmentation streams.
constexpr uint64_t kShuffleStream = 0x5348554646ull;  // "SHUFF"
}  // namespace

Result<Sampler> Sampler::Create(const SamplerOptions& o) {
  if (o.num_items <= 0) return InvalidArgument("the dataset has no items");
  if (o.batch_size <= 0) return InvalidArgument("batch_size must be positive");
  if (o.world_size <= 0) return InvalidArgument("world_size must be positive");
  if (o.rank < 0 || o.rank >= o.world_size) {
    return InvalidArgument("rank " + std::to_string(o.rank) + " is outside [0, " +
                           std::to_string(o.world_size) + ")");
  }
  Sampler s(o);
  if (s.BatchesPerEpoch() == 0) {
    return InvalidArgument("drop_last with batch_size " + std::to_string(o.batch_size) +
                           " leaves no batch: this rank has only " +
                           std::to_string((o.num_items + o.world_size - 1) / o.world_size) +
                           " samples");
  }
  return s;
}

int64_t Sampler::SamplesPerEpoch() const {
  int64_t per_rank = (options_.num_items + options_.world_size - 1) / options_.world_size;
  if (options_.drop_last) per_rank -= per_rank % options_.batch_size;
  return per_rank;
}

int64_t Sampler::BatchesPerEpoch() const {
  return (SamplesPerEpoch() + options_.batch_size - 1) / options_.batch_size;
}

std::vector<int64_t> Sampler::EpochOrder(int64_t epoch) const {
  const int64_t n = options_.num_items;
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  if (options_.shuffle) {
    Philox rng(options_.seed, kShuffleStream, static_cast<uint64_t>(epoch));
    for (int64_t i = n - 1; i > 0; --i) {
      int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
      std::swap(perm[i], perm[j]);
    }
  }
  const int64_t world = options_.world_size;
  const int64_t total = ((n + world - 1) / world) * world;
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(total / world));
  for (int64_t p = options_.rank; p < total; p += world) mine.push_back(perm[p % n]);
  mine.resize(static_cast<size_t>(SamplesPerEpoch()));
  return mine;
}

}  // namespace nostall
