#include "nostall/sampler.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "common/philox.h"

namespace nostall {
namespace {
// Distinguishes the shuffle's random stream from the augmentation streams.
constexpr uint64_t kShuffleStream = 0x5348554646ull;  // "SHUFF"
constexpr uint64_t kSubsetStream = 0x5355425345ull;   // "SUBSE"
constexpr uint64_t kBlockStream = 0x424c4f434b000000ull;  // "BLOCK", + block number

// Fisher-Yates with Philox: the same permutation on every machine.
void Shuffle(std::vector<int64_t>* v, uint64_t seed, uint64_t stream, uint64_t counter) {
  Philox rng(seed, stream, counter);
  for (int64_t i = static_cast<int64_t>(v->size()) - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap((*v)[i], (*v)[j]);
  }
}

int64_t EffectiveItems(const SamplerOptions& o) {
  return o.subset > 0 && o.subset < o.num_items ? o.subset : o.num_items;
}
}  // namespace

Result<Sampler> Sampler::Create(const SamplerOptions& o) {
  if (o.num_items <= 0) return InvalidArgument("the dataset has no items");
  if (o.batch_size <= 0) return InvalidArgument("batch_size must be positive");
  if (o.subset < 0) return InvalidArgument("subset must be 0 (all items) or positive");
  if (o.shuffle_block < 0) return InvalidArgument("shuffle_block must be 0 or positive");
  if (o.world_size <= 0) return InvalidArgument("world_size must be positive");
  if (o.rank < 0 || o.rank >= o.world_size) {
    return InvalidArgument("rank " + std::to_string(o.rank) + " is outside [0, " +
                           std::to_string(o.world_size) + ")");
  }
  Sampler s(o);
  if (s.BatchesPerEpoch() == 0) {
    return InvalidArgument("drop_last with batch_size " + std::to_string(o.batch_size) +
                           " leaves no batch: this rank has only " +
                           std::to_string((EffectiveItems(o) + o.world_size - 1) / o.world_size) +
                           " samples");
  }
  return s;
}

int64_t Sampler::SamplesPerEpoch() const {
  int64_t per_rank = (EffectiveItems(options_) + options_.world_size - 1) / options_.world_size;
  if (options_.drop_last) per_rank -= per_rank % options_.batch_size;
  return per_rank;
}

int64_t Sampler::BatchesPerEpoch() const {
  return (SamplesPerEpoch() + options_.batch_size - 1) / options_.batch_size;
}

std::vector<int64_t> Sampler::Items() const {
  std::vector<int64_t> all(static_cast<size_t>(options_.num_items));
  std::iota(all.begin(), all.end(), 0);
  const int64_t m = EffectiveItems(options_);
  if (m == options_.num_items) return all;
  Shuffle(&all, options_.seed, kSubsetStream, 0);
  all.resize(static_cast<size_t>(m));
  std::sort(all.begin(), all.end());
  return all;
}

std::vector<int64_t> Sampler::EpochOrder(int64_t epoch) const {
  std::vector<int64_t> perm = Items();
  const int64_t n = static_cast<int64_t>(perm.size());
  if (options_.shuffle && options_.shuffle_block > 0) {
    // Fixed blocks (dealt once by seed), each shuffled within per epoch.
    Shuffle(&perm, options_.seed, kBlockStream, 0);
    const int64_t bs = options_.shuffle_block;
    for (int64_t start = 0, b = 0; start < n; start += bs, ++b) {
      std::vector<int64_t> block(perm.begin() + start, perm.begin() + std::min(n, start + bs));
      Shuffle(&block, options_.seed, kBlockStream + 1 + static_cast<uint64_t>(b),
              static_cast<uint64_t>(epoch));
      std::copy(block.begin(), block.end(), perm.begin() + start);
    }
  } else if (options_.shuffle) {
    Shuffle(&perm, options_.seed, kShuffleStream, static_cast<uint64_t>(epoch));
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
