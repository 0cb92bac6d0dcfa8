// Sampler: which items, in which order, each epoch, on this rank.
//
// The epoch order is a permutation of all items fixed by (seed, epoch); every
// rank computes the same permutation and takes every world_size-th entry
// starting at its rank, after padding the permutation (by repeating its
// start) to a multiple of world_size, so every rank has the same number of
// samples (torch's DistributedSampler does the same). With a subset, the
// permutation is of the subset's items instead.
//
// The buffered epoch (docs/sampling.md): tar shards whose index is still being
// built are read as WebDataset reads them. The shards are permuted by (seed,
// epoch); their samples, in shard order, pass through a shuffle buffer whose
// draws come from (seed, epoch) too; every rank runs the same stream and takes
// every world_size-th sample, padded as above. The order is known a shard at a
// time, as the shards are indexed; it is deterministic, the same on every rank
// and holds every sample once. The first epoch a loader starts before its index
// is complete is buffered; every other epoch is exact. No I/O here: the counts
// come from a ShardedItems.
#ifndef NOSTALL_SAMPLER_H_
#define NOSTALL_SAMPLER_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "nostall/status.h"

namespace nostall {

// Items that lie in shards, whose sample counts may become known a shard at a
// time (tar shards being indexed as they are read). Thread-safe.
class ShardedItems {
 public:
  virtual ~ShardedItems() = default;
  virtual int64_t shard_count() const = 0;
  // Whether every shard is indexed (the item count is known).
  virtual bool complete() const = 0;
  // Asks for the shards to be indexed in `order` (the buffered epoch's); only
  // the first call counts.
  virtual void Begin(const std::vector<int64_t>& order) = 0;
  // Shard `s`'s sample count: waits until it is indexed (or indexing failed).
  virtual Result<int64_t> Count(int64_t s) = 0;
  // Every shard's: waits for all; the item count.
  virtual Result<int64_t> Total() = 0;
  // The item id of sample `member` of shard `s` (known once Count(s) is):
  // its number in the whole index once that is complete, else its
  // ShardMemberKey.
  virtual int64_t Id(int64_t s, int64_t member) const = 0;
  // Any id of a sample (either form) as its ShardMemberKey: what the
  // buffered epoch's random draws are keyed by, the same whether the index
  // was complete or not when the sample was read.
  virtual int64_t StableKey(int64_t id) const = 0;
};

// A sample named by its shard and its place in it, beyond any index's item
// count (bit 62 set; the shard in bits 32..61, the member below).
inline constexpr int64_t kShardMemberBit = int64_t{1} << 62;
inline int64_t ShardMemberKey(int64_t shard, int64_t member) {
  return kShardMemberBit | (shard << 32) | member;
}
inline bool IsShardMemberKey(int64_t id) { return id >= 0 && (id & kShardMemberBit) != 0; }
inline int64_t ShardOfKey(int64_t id) { return (id & ~kShardMemberBit) >> 32; }
inline int64_t MemberOfKey(int64_t id) { return id & 0xffffffff; }

// An epoch's order as it becomes known (a buffered epoch's, a shard at a
// time; any other's, all at once).
class EpochStream {
 public:
  virtual ~EpochStream() = default;
  // Appends the next positions' items to `out`; `*final` once none follow.
  // Waits for the shards it needs.
  virtual Status More(std::vector<int64_t>* out, bool* final) = 0;
  // Once final: the epoch's positions, which may be fewer than were
  // appended (drop_last drops the last, incomplete batch's).
  virtual int64_t total() const = 0;
};

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
  // Tar shards (null: none, or not in shards): with them the buffered epoch
  // is possible, and while they are not complete num_items is not known
  // (set 0; it is read from them).
  std::shared_ptr<ShardedItems> shards;
  // The buffered epoch's shuffle buffer (samples; 0: the default, 8192).
  int64_t shuffle_buffer = 0;
  // Every epoch in the buffered order (shards shuffled by seed and epoch,
  // samples mixed through the shuffle buffer), not only a first epoch whose
  // index is not whole: a block shuffle for data whose reads cost a shard's
  // worth (Parquet row groups without a page index; docs/parquet.md).
  bool shard_shuffle = false;
  // Every rank the same number of samples, the epoch's first samples again
  // where the items do not divide (DistributedSampler's rule: DDP training
  // needs equal batch counts). False: each item exactly once over the ranks,
  // whose counts then differ by at most one (evaluation: no sample counted
  // twice in a metric).
  bool pad_ranks = true;
  // Batches of one group (empty: none): each item's group (an image's
  // aspect-ratio bin), and each rank's samples dealt, in their order, into
  // one buffer per group, a batch made whenever a buffer holds batch_size
  // (torchvision's GroupedBatchSampler); what is left at the epoch's end
  // makes its last batches, by group. Every sample still comes once, and
  // every rank still has the same number of batches: only the order within
  // the rank's share changes.
  std::vector<int32_t> groups;
  // Batches of similar durations (durations empty: none; docs/sampling.md):
  // each item's duration, seconds. The items are dealt, by duration, into
  // `num_buckets` buckets of about equal total duration (their edges from
  // the data, once); a bucket's batches hold as many samples as fit
  // `max_duration` padded to the bucket's longest (each costing d +
  // d^2 / quadratic_duration where that is > 0), at most batch_size. Each
  // epoch every bucket's items are shuffled by (seed, epoch) and cut into
  // its batches, the batches shuffled, and dealt to the ranks in turn,
  // padded with the epoch's first batches to a multiple of world_size:
  // every rank the same number of batches, every item once (the padding
  // aside), a count that is the same every epoch. A batch of fewer samples
  // than batch_size fills its positions with -1 (no sample).
  std::vector<float> durations;
  double max_duration = 0;
  int64_t num_buckets = 10;
  double quadratic_duration = 0;
  // The window shuffle (with shuffle; 0: off): the items come in read units
  // (a Parquet page's rows: unit u holds items [unit_starts[u],
  // unit_starts[u + 1]); empty: each item its own unit). Each epoch the
  // units are shuffled by (seed, epoch) and taken in that order into
  // windows of at least `shuffle_window` items, and each window's items are
  // shuffled. Every item once per epoch; a unit's items all come within one
  // window, so a cache that holds a window's units reads each unit once.
  std::vector<int64_t> unit_starts;
  int64_t shuffle_window = 0;
};

// A stretch of an epoch already read before a resume at another number of
// ranks (docs/sampling.md, "Elastic resume"): `world_size` ranks had each
// taken `batch` batches of their share of what was left.
struct ElasticStep {
  int64_t world_size = 1;
  int64_t batch = 0;
  bool operator==(const ElasticStep&) const = default;
};

// Batches of one epoch of a rank's order, made by a loader in the order
// they are planned (prep on other machines: docs/remote.md): a list that
// grows while the loader runs, until finished. Thread-safe.
class BatchPlan {
 public:
  // `elastic`: the epoch's elastic steps (none: the whole epoch).
  BatchPlan(int64_t epoch, std::vector<ElasticStep> elastic) : epoch_(epoch), elastic_(std::move(elastic)) {}
  int64_t epoch() const { return epoch_; }
  const std::vector<ElasticStep>& elastic() const { return elastic_; }
  // Appends batches (their indices in the epoch); none after Finish.
  Status Extend(const std::vector<int64_t>& batches);
  void Finish();
  // The batches planned from `from` on, waiting up to `wait_ms` for some;
  // true once finished and every one was given.
  bool Take(size_t from, std::vector<int64_t>* out, int wait_ms);
  size_t size() const;

 private:
  const int64_t epoch_;
  const std::vector<ElasticStep> elastic_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int64_t> batches_;
  bool finished_ = false;
};

class Sampler {
 public:
  static Result<Sampler> Create(const SamplerOptions& options);

  // This rank's item indices for `epoch`, in order (a buffered epoch's
  // waits for every shard).
  std::vector<int64_t> EpochOrder(int64_t epoch) const;
  // The same as it becomes known: what the pipeline walks. The first epoch
  // opened while the shards are not complete becomes the buffered one.
  std::unique_ptr<EpochStream> OpenEpoch(int64_t epoch) const;
  // Counts per epoch (the same for buffered and exact epochs); while the
  // shards are being indexed these wait for them.
  int64_t SamplesPerEpoch() const;  // after drop_last
  int64_t BatchesPerEpoch() const;
  int64_t num_items() const;
  // The items an epoch draws from (all, or the subset), in increasing order.
  std::vector<int64_t> Items() const;
  const SamplerOptions& options() const { return options_; }
  // The epoch that is (or was) buffered, -1: none. A resumed loader sets
  // the one its state recorded (-1: none, for good), before opening it.
  int64_t buffered_epoch() const { return std::max<int64_t>(-1, lazy_->buffered_epoch.load()); }
  // Whether `epoch` runs in the buffered order (the buffered first epoch,
  // or any with shard_shuffle).
  bool Buffered(int64_t epoch) const {
    return (options_.shard_shuffle && options_.shards != nullptr) || lazy_->buffered_epoch.load() == epoch;
  }
  Status SetBufferedEpoch(int64_t epoch) const;
  // Elastic resume: `epoch` holds only what the ranks of `steps` left
  // unread (each step read by its own number of ranks, in turn), dealt to
  // this loader's ranks as a whole epoch is: each remaining sample once over
  // them (the padding to equal counts aside), the order a function of
  // (seed, epoch, steps) alone. Other epochs are whole. Empty steps: none.
  // Not with batches of similar durations (InvalidArgument).
  Status SetElastic(int64_t epoch, std::vector<ElasticStep> steps) const;
  // This rank's batches in `epoch`: BatchesPerEpoch(), or fewer in an
  // elastic epoch.
  int64_t BatchesInEpoch(int64_t epoch) const;
  // Makes `plan`'s epoch, when opened, hold only its batches, in its order
  // (null: none); while a plan is set no epoch is run on into.
  void SetPlan(std::shared_ptr<BatchPlan> plan) const {
    std::lock_guard<std::mutex> lock(lazy_->mu);
    lazy_->plan = std::move(plan);
  }
  bool Planned() const {
    std::lock_guard<std::mutex> lock(lazy_->mu);
    return lazy_->plan != nullptr;
  }
  bool Elastic(int64_t epoch) const {
    std::lock_guard<std::mutex> lock(lazy_->mu);
    return lazy_->elastic_epoch == epoch && !lazy_->elastic_steps.empty();
  }
  // Whether the item count is known now (without waiting).
  bool counts_known() const;

  // Batches of similar durations: the buckets, fixed once (internal).
  struct Buckets {
    std::vector<std::vector<int64_t>> items;  // each bucket's, ascending
    std::vector<int64_t> per_batch;           // samples a batch of it holds
    int64_t batches = 0;                      // all ranks', an epoch
  };

 private:
  struct Lazy {
    std::atomic<int64_t> buffered_epoch{-1};
    std::atomic<int64_t> num_items{0};
    std::mutex mu;  // the elastic epoch
    int64_t elastic_epoch = -1;
    std::vector<ElasticStep> elastic_steps;
    int64_t elastic_batches = -1;  // computed once
    std::shared_ptr<BatchPlan> plan;
  };
  std::vector<int64_t> BucketedOrder(int64_t epoch) const;
  // The epoch's sequence before it is dealt to the ranks (the permutation).
  std::vector<int64_t> Sequence(int64_t epoch) const;
  std::vector<int64_t> WindowSequence(int64_t epoch) const;
  // `rank` of `world`'s share of `seq`, as a whole epoch's is dealt.
  std::vector<int64_t> Deal(const std::vector<int64_t>& seq, int64_t rank, int64_t world) const;
  std::vector<int64_t> ElasticOrder(int64_t epoch, const std::vector<ElasticStep>& steps) const;
  explicit Sampler(const SamplerOptions& o) : options_(o), lazy_(std::make_shared<Lazy>()) {}
  int64_t Items64() const;
  SamplerOptions options_;
  std::shared_ptr<Lazy> lazy_;  // shared by copies
  std::shared_ptr<const Buckets> buckets_;
};

// The buffered epoch's order for one rank (docs/sampling.md), a shard at a
// time. Exposed for tests; Sampler::OpenEpoch makes it.
std::unique_ptr<EpochStream> BufferedEpochStream(const SamplerOptions& options, int64_t epoch);

}  // namespace nostall

#endif  // NOSTALL_SAMPLER_H_
