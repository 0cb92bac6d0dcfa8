#include "nostall/sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <unordered_set>

#include "common/philox.h"

namespace nostall {
namespace {
// Distinguishes the shuffle's random stream from the augmentation streams.
constexpr uint64_t kShuffleStream = 0x5348554646ull;  // "SHUFF"
constexpr uint64_t kSubsetStream = 0x5355425345ull;   // "SUBSE"
constexpr uint64_t kBlockStream = 0x424c4f434b000000ull;  // "BLOCK", + block number
constexpr uint64_t kBucketStream = 0x4255434b00000000ull;  // "BUCK", + bucket number (the batches' order: - 1)
constexpr uint64_t kShardStream = 0x5348415244ull;   // "SHARD": the buffered epoch's shards
constexpr uint64_t kBufferStream = 0x4255464645ull;  // "BUFFE": its shuffle buffer
constexpr uint64_t kUnitStream = 0x554e495400000000ull;  // "UNIT", + window number (the units' order: 0)
constexpr int64_t kDefaultShuffleBuffer = 8192;
// The buffer gives its first sample once it holds this many (or an eighth
// of its size, if less): the first batch needs no more than a shard or so.
constexpr int64_t kBufferStart = 256;
constexpr int64_t kNoBufferedEpoch = -2;  // decided: no epoch is buffered

// Fisher-Yates with Philox: the same permutation on every machine.
void Shuffle(std::vector<int64_t>* v, uint64_t seed, uint64_t stream, uint64_t counter) {
  Philox rng(seed, stream, counter);
  for (int64_t i = static_cast<int64_t>(v->size()) - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap((*v)[i], (*v)[j]);
  }
}

int64_t EffectiveItems(const SamplerOptions& o, int64_t num_items) {
  return o.subset > 0 && o.subset < num_items ? o.subset : num_items;
}

// `rank` of `world`'s samples of an epoch of `n` items (after drop_last).
int64_t PerRank(const SamplerOptions& o, int64_t n, int64_t rank, int64_t world) {
  int64_t per_rank = o.pad_ranks ? (n + world - 1) / world : n / world + (rank < n % world ? 1 : 0);
  if (o.drop_last) per_rank -= per_rank % o.batch_size;
  return per_rank;
}
int64_t PerRank(const SamplerOptions& o, int64_t n) { return PerRank(o, n, o.rank, o.world_size); }

class FixedStream final : public EpochStream {
 public:
  explicit FixedStream(std::vector<int64_t> order)
      : order_(std::move(order)), total_(static_cast<int64_t>(order_.size())) {}
  Status More(std::vector<int64_t>* out, bool* final) override {
    if (out->empty()) {
      out->swap(order_);
    } else {
      out->insert(out->end(), order_.begin(), order_.end());
    }
    order_.clear();
    *final = true;
    return Status::OK();
  }
  int64_t total() const override { return total_; }

 private:
  std::vector<int64_t> order_;
  const int64_t total_;
};

// A plan's batches of the rank's `order`, as they are planned: each batch's
// positions, the last (short) one's filled up with holes (no sample), so
// every planned batch is one batch of the stream.
class PlannedStream final : public EpochStream {
 public:
  PlannedStream(std::vector<int64_t> order, int64_t batch_size, std::shared_ptr<BatchPlan> plan)
      : order_(std::move(order)), bs_(batch_size), plan_(std::move(plan)) {}
  Status More(std::vector<int64_t>* out, bool* final) override {
    std::vector<int64_t> batches;
    *final = plan_->Take(taken_, &batches, /*wait_ms=*/20);  // a wait the fetchers' shutdown can see
    taken_ += batches.size();
    const int64_t n = static_cast<int64_t>(order_.size());
    for (int64_t b : batches) {
      if (b < 0 || b * bs_ >= n) {
        *final = true;
        return InvalidArgument("planned batch " + std::to_string(b) + " is outside the epoch's " +
                               std::to_string((n + bs_ - 1) / bs_));
      }
      for (int64_t p = b * bs_; p < (b + 1) * bs_; ++p) out->push_back(p < n ? order_[static_cast<size_t>(p)] : -1);
      total_ += bs_;
    }
    return Status::OK();
  }
  int64_t total() const override { return total_; }

 private:
  const std::vector<int64_t> order_;
  const int64_t bs_;
  const std::shared_ptr<BatchPlan> plan_;
  size_t taken_ = 0;
  int64_t total_ = 0;
};

// The buffered epoch (sampler.h): shards in a permutation of (seed, epoch),
// their samples through a shuffle buffer, every world_size-th kept. The
// buffer fills to a start of B/8 (at most 256) before it gives a sample, then grows to B
// giving one sample for every second it takes, then one for each; at the end
// it gives the rest in random order. Every choice is a function of the
// stream's position, never of timing.
class BufferedStream final : public EpochStream {
 public:
  BufferedStream(const SamplerOptions& o, int64_t epoch)
      : o_(o),
        capacity_(o.shuffle ? (o.shuffle_buffer > 0 ? o.shuffle_buffer : kDefaultShuffleBuffer) : 0),
        start_(std::max<int64_t>(1, std::min<int64_t>(capacity_ / 8, kBufferStart))),
        rng_(o.seed, kBufferStream, static_cast<uint64_t>(epoch)) {
    order_.resize(static_cast<size_t>(o.shards->shard_count()));
    std::iota(order_.begin(), order_.end(), 0);
    if (o.shuffle) Shuffle(&order_, o.seed, kShardStream, static_cast<uint64_t>(epoch));
    o.shards->Begin(order_);
  }

  Status More(std::vector<int64_t>* out, bool* final) override {
    *final = false;
    if (next_shard_ < order_.size()) {
      const int64_t s = order_[next_shard_++];
      NOSTALL_ASSIGN_OR_RETURN(int64_t count, o_.shards->Count(s));
      for (int64_t m = 0; m < count; ++m) Take(o_.shards->Id(s, m), out);
      if (next_shard_ < order_.size()) return Status::OK();
    }
    // Every shard is in: the buffer's rest, then the padding every rank
    // shares (the stream's first samples again, as the exact order pads).
    while (!buffer_.empty()) Give(Draw(), out);
    const int64_t n = given_;
    if (n == 0) return NotFound("the tar shards hold no samples");
    const int64_t w = o_.world_size;
    for (int64_t p = n; o_.pad_ranks && p < (n + w - 1) / w * w; ++p) {
      if (p % w == o_.rank) Mine(first_[static_cast<size_t>(p % n)], out);
    }
    // drop_last: the rank's samples past a whole number of batches go (no
    // batch holding one was complete before now, so none was handed out).
    total_ = PerRank(o_, n);
    *final = true;
    return Status::OK();
  }
  int64_t total() const override { return total_; }

 private:
  void Take(int64_t item, std::vector<int64_t>* out) {
    const int64_t t = taken_++;
    if (capacity_ == 0) {
      Give(item, out);
      return;
    }
    buffer_.push_back(item);
    const int64_t held = static_cast<int64_t>(buffer_.size());
    if (held < start_) return;
    if (held < capacity_ && t % 2 == 0) return;
    Give(Draw(), out);
  }
  int64_t Draw() {
    const size_t j = static_cast<size_t>(rng_.Below(buffer_.size()));
    const int64_t item = buffer_[j];
    buffer_[j] = buffer_.back();
    buffer_.pop_back();
    return item;
  }
  void Give(int64_t item, std::vector<int64_t>* out) {
    const int64_t p = given_++;
    if (p < o_.world_size) first_.push_back(item);
    if (p % o_.world_size == o_.rank) Mine(item, out);
  }
  void Mine(int64_t item, std::vector<int64_t>* out) {
    out->push_back(item);
    ++mine_;
  }

  const SamplerOptions o_;
  const int64_t capacity_, start_;
  Philox rng_;
  std::vector<int64_t> order_;  // the shards, in the epoch's order
  size_t next_shard_ = 0;
  std::vector<int64_t> buffer_;
  std::vector<int64_t> first_;  // the stream's first world_size samples
  int64_t taken_ = 0, given_ = 0, mine_ = 0, total_ = 0;
};
// The buckets of batches of similar durations (SamplerOptions::durations):
// `items` sorted by duration, cut where the running total passes each
// 1/num_buckets of the whole (a bucket's items all of one duration stay
// together), and how many samples a batch of each holds.
Result<std::shared_ptr<const Sampler::Buckets>> MakeBuckets(const SamplerOptions& o, std::vector<int64_t> items) {
  if (o.durations.size() != static_cast<size_t>(o.num_items)) {
    return InvalidArgument("batches of similar durations need one duration per item: " +
                           std::to_string(o.durations.size()) + " for " + std::to_string(o.num_items));
  }
  if (!(o.max_duration > 0) || o.num_buckets < 1 || o.num_buckets > 1000 || o.quadratic_duration < 0) {
    return InvalidArgument("batches of similar durations need max_duration > 0, num_buckets in [1, 1000] "
                           "and quadratic_duration >= 0");
  }
  auto dur = [&](int64_t i) { return static_cast<double>(o.durations[static_cast<size_t>(i)]); };
  for (int64_t i : items) {
    if (!(dur(i) >= 0) || !std::isfinite(dur(i))) {
      return InvalidArgument("item " + std::to_string(i) + " has no duration (" + std::to_string(dur(i)) + ")");
    }
  }
  std::stable_sort(items.begin(), items.end(), [&](int64_t a, int64_t b) { return dur(a) < dur(b); });
  double total = 0;
  for (int64_t i : items) total += dur(i);
  auto b = std::make_shared<Sampler::Buckets>();
  double running = 0;
  for (size_t at = 0; at < items.size(); ++at) {
    const bool next = !b->items.empty() && static_cast<int64_t>(b->items.size()) < o.num_buckets &&
                      running >= total * static_cast<double>(b->items.size()) / o.num_buckets &&
                      dur(items[at]) > dur(items[at - 1]);
    if (b->items.empty() || next) b->items.emplace_back();
    b->items.back().push_back(items[at]);
    running += dur(items[at]);
  }
  for (std::vector<int64_t>& bucket : b->items) {
    const double longest = dur(bucket.back());
    const double cost = longest + (o.quadratic_duration > 0 ? longest * longest / o.quadratic_duration : 0);
    const int64_t fit = cost > 0 ? static_cast<int64_t>(o.max_duration / cost) : o.batch_size;
    b->per_batch.push_back(std::clamp<int64_t>(fit, 1, o.batch_size));
    b->batches += (static_cast<int64_t>(bucket.size()) + b->per_batch.back() - 1) / b->per_batch.back();
    std::sort(bucket.begin(), bucket.end());
  }
  return std::shared_ptr<const Sampler::Buckets>(std::move(b));
}

// `order` reordered into batches of one group where it can
// (SamplerOptions::groups): full batches as their group's buffer fills,
// then what the buffers hold, group by group.
void GroupBatches(const std::vector<int32_t>& groups, int64_t batch_size, std::vector<int64_t>* order) {
  std::map<int32_t, std::vector<int64_t>> buffers;
  std::vector<int64_t> out;
  out.reserve(order->size());
  for (int64_t item : *order) {
    const int32_t g = item >= 0 && static_cast<size_t>(item) < groups.size() ? groups[static_cast<size_t>(item)] : -1;
    std::vector<int64_t>& buffer = buffers[g];
    buffer.push_back(item);
    if (static_cast<int64_t>(buffer.size()) == batch_size) {
      out.insert(out.end(), buffer.begin(), buffer.end());
      buffer.clear();
    }
  }
  for (const auto& [g, buffer] : buffers) out.insert(out.end(), buffer.begin(), buffer.end());
  *order = std::move(out);
}

}  // namespace

std::unique_ptr<EpochStream> BufferedEpochStream(const SamplerOptions& options, int64_t epoch) {
  return std::make_unique<BufferedStream>(options, epoch);
}

namespace {

// The window shuffle's options: a shuffle of the whole index, units that
// cover it in order.
Status CheckWindow(const SamplerOptions& o) {
  if (o.shuffle_window < 0) return InvalidArgument("shuffle_window must be 0 (off) or positive");
  if (o.shuffle_window == 0) return Status::OK();
  if (o.shard_shuffle || o.subset > 0 || o.shuffle_block > 0 || !o.durations.empty()) {
    return InvalidArgument("shuffle_window is a shuffle of its own: it has no shard_shuffle, subset, "
                           "shuffle_block or bucketing by duration");
  }
  if (o.shards != nullptr && !o.shards->complete()) {
    return InvalidArgument("shuffle_window needs the whole index: the buffered first epoch has none "
                           "(first_epoch=\"exact\")");
  }
  const std::vector<int64_t>& u = o.unit_starts;
  if (u.empty()) return Status::OK();
  if (u.front() != 0 || u.back() != o.num_items || !std::is_sorted(u.begin(), u.end()) ||
      std::adjacent_find(u.begin(), u.end()) != u.end()) {
    return InvalidArgument("the read units do not cover the items in order");
  }
  return Status::OK();
}

}  // namespace

Result<Sampler> Sampler::Create(const SamplerOptions& o) {
  const bool lazy = o.shards != nullptr && !o.shards->complete();
  if (lazy && (o.subset > 0 || o.shuffle_block > 0)) {
    return InvalidArgument("a subset or shuffle_block needs the whole index: the buffered first "
                           "epoch gives neither");
  }
  if (o.num_items <= 0 && !lazy) return InvalidArgument("the dataset has no items");
  if (o.batch_size <= 0) return InvalidArgument("batch_size must be positive");
  if (o.subset < 0) return InvalidArgument("subset must be 0 (all items) or positive");
  if (o.shuffle_block < 0) return InvalidArgument("shuffle_block must be 0 or positive");
  if (o.world_size <= 0) return InvalidArgument("world_size must be positive");
  if (o.rank < 0 || o.rank >= o.world_size) {
    return InvalidArgument("rank " + std::to_string(o.rank) + " is outside [0, " +
                           std::to_string(o.world_size) + ")");
  }
  if (o.shuffle_buffer < 0) return InvalidArgument("shuffle_buffer must be 0 (the default) or positive");
  if (o.shard_shuffle && o.shards == nullptr) {
    return InvalidArgument("shard_shuffle needs data in shards (tar shards, Parquet row groups); this dataset "
                           "is not");
  }
  if (o.shard_shuffle && (o.subset > 0 || o.shuffle_block > 0)) {
    return InvalidArgument("shard_shuffle has no subset or shuffle_block");
  }
  NOSTALL_RETURN_IF_ERROR(CheckWindow(o));
  Sampler s(o);
  if (!o.durations.empty()) {
    if (lazy) return InvalidArgument("batches of similar durations need every item's duration: no shards being indexed");
    NOSTALL_ASSIGN_OR_RETURN(s.buckets_, MakeBuckets(o, s.Items()));
  }
  if (lazy) return s;  // counts known when the shards are
  if (s.BatchesPerEpoch() == 0) {
    return InvalidArgument("drop_last with batch_size " + std::to_string(o.batch_size) +
                           " leaves no batch: this rank has only " +
                           std::to_string((s.Items64() + o.world_size - 1) / o.world_size) +
                           " samples");
  }
  return s;
}

int64_t Sampler::num_items() const {
  if (options_.shards == nullptr || options_.num_items > 0) return options_.num_items;
  int64_t n = lazy_->num_items.load();
  if (n > 0) return n;
  Result<int64_t> total = options_.shards->Total();  // waits
  n = total.ok() ? total.value() : 0;  // a failed index: its error comes with the batches
  lazy_->num_items.store(n);
  return n;
}

bool Sampler::counts_known() const {
  return options_.shards == nullptr || options_.num_items > 0 || options_.shards->complete();
}

int64_t Sampler::Items64() const { return EffectiveItems(options_, num_items()); }

Status Sampler::SetBufferedEpoch(int64_t epoch) const {
  if (epoch < 0) {
    lazy_->buffered_epoch.store(kNoBufferedEpoch);  // none, for good
    return Status::OK();
  }
  if (options_.shards == nullptr) {
    return InvalidArgument("a buffered epoch needs tar shards; this dataset is not in shards");
  }
  if (options_.subset > 0 || options_.shuffle_block > 0) {
    return InvalidArgument("a buffered epoch has no subset or shuffle_block");
  }
  lazy_->buffered_epoch.store(epoch);
  return Status::OK();
}

std::unique_ptr<EpochStream> Sampler::OpenEpoch(int64_t epoch) const {
  std::shared_ptr<BatchPlan> plan;
  {
    std::lock_guard<std::mutex> lock(lazy_->mu);
    plan = lazy_->plan;
  }
  if (plan != nullptr && plan->epoch() == epoch) {
    std::vector<int64_t> order = plan->elastic().empty() ? EpochOrder(epoch) : ElasticOrder(epoch, plan->elastic());
    return std::make_unique<PlannedStream>(std::move(order), options_.batch_size, std::move(plan));
  }
  if (Elastic(epoch)) return std::make_unique<FixedStream>(EpochOrder(epoch));
  if (options_.shards != nullptr) {
    int64_t none = -1;
    // The first epoch opened before the index is whole is the buffered one.
    if (!options_.shards->complete()) lazy_->buffered_epoch.compare_exchange_strong(none, epoch);
    if (Buffered(epoch)) return BufferedEpochStream(options_, epoch);
  }
  return std::make_unique<FixedStream>(EpochOrder(epoch));
}

int64_t Sampler::SamplesPerEpoch() const {
  if (buckets_) return BatchesPerEpoch() * options_.batch_size;  // positions, the holes counted
  return PerRank(options_, Items64());
}

int64_t Sampler::BatchesPerEpoch() const {
  if (buckets_) {
    const int64_t k = buckets_->batches, w = options_.world_size;
    return options_.pad_ranks ? (k + w - 1) / w : k / w + (options_.rank < k % w ? 1 : 0);
  }
  return (SamplesPerEpoch() + options_.batch_size - 1) / options_.batch_size;
}

std::vector<int64_t> Sampler::BucketedOrder(int64_t epoch) const {
  const Buckets& b = *buckets_;
  std::vector<std::vector<int64_t>> batches;
  for (size_t k = 0; k < b.items.size(); ++k) {
    std::vector<int64_t> items = b.items[k];
    if (options_.shuffle) Shuffle(&items, options_.seed, kBucketStream + k, static_cast<uint64_t>(epoch));
    for (size_t at = 0; at < items.size(); at += static_cast<size_t>(b.per_batch[k])) {
      const size_t end = std::min(items.size(), at + static_cast<size_t>(b.per_batch[k]));
      batches.emplace_back(items.begin() + static_cast<ptrdiff_t>(at), items.begin() + static_cast<ptrdiff_t>(end));
    }
  }
  std::vector<int64_t> order(batches.size());
  std::iota(order.begin(), order.end(), 0);
  if (options_.shuffle) Shuffle(&order, options_.seed, kBucketStream - 1, static_cast<uint64_t>(epoch));
  const int64_t k = static_cast<int64_t>(batches.size()), w = options_.world_size;
  std::vector<int64_t> out;
  for (int64_t j = 0; j < BatchesPerEpoch(); ++j) {
    const std::vector<int64_t>& batch = batches[static_cast<size_t>(order[static_cast<size_t>((options_.rank + j * w) % k)])];
    out.insert(out.end(), batch.begin(), batch.end());
    out.resize(out.size() + static_cast<size_t>(options_.batch_size) - batch.size(), -1);
  }
  return out;
}

std::vector<int64_t> Sampler::Items() const {
  const int64_t n = num_items();
  std::vector<int64_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  const int64_t m = EffectiveItems(options_, n);
  if (m == n) return all;
  Shuffle(&all, options_.seed, kSubsetStream, 0);
  all.resize(static_cast<size_t>(m));
  std::sort(all.begin(), all.end());
  return all;
}

std::vector<int64_t> Sampler::EpochOrder(int64_t epoch) const {
  if (buckets_) return BucketedOrder(epoch);
  {
    std::lock_guard<std::mutex> lock(lazy_->mu);
    if (lazy_->elastic_epoch == epoch && !lazy_->elastic_steps.empty()) {
      return ElasticOrder(epoch, lazy_->elastic_steps);
    }
  }
  if (options_.shards != nullptr && Buffered(epoch)) {
    std::vector<int64_t> out;
    std::unique_ptr<EpochStream> stream = BufferedEpochStream(options_, epoch);
    for (bool final = false; !final;) {
      if (!stream->More(&out, &final).ok()) return {};
    }
    out.resize(static_cast<size_t>(stream->total()));
    return out;
  }
  std::vector<int64_t> perm = Sequence(epoch);
  if (perm.empty()) return {};  // a failed index (its error comes with the batches)
  return Deal(perm, options_.rank, options_.world_size);
}

std::vector<int64_t> Sampler::Sequence(int64_t epoch) const {
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
  } else if (options_.shuffle && options_.shuffle_window > 0) {
    return WindowSequence(epoch);
  } else if (options_.shuffle) {
    Shuffle(&perm, options_.seed, kShuffleStream, static_cast<uint64_t>(epoch));
  }
  return perm;
}

// Units shuffled, taken into windows of at least shuffle_window items, each
// window's items shuffled (SamplerOptions::shuffle_window).
std::vector<int64_t> Sampler::WindowSequence(int64_t epoch) const {
  const std::vector<int64_t>& starts = options_.unit_starts;
  const int64_t n = num_items();
  const int64_t units = starts.empty() ? n : static_cast<int64_t>(starts.size()) - 1;
  std::vector<int64_t> order(static_cast<size_t>(units));
  std::iota(order.begin(), order.end(), int64_t{0});
  Shuffle(&order, options_.seed, kUnitStream, static_cast<uint64_t>(epoch));
  std::vector<int64_t> seq;
  seq.reserve(static_cast<size_t>(n));
  size_t window_start = 0;
  uint64_t window = 0;
  auto close_window = [&] {
    std::vector<int64_t> w(seq.begin() + static_cast<ptrdiff_t>(window_start), seq.end());
    Shuffle(&w, options_.seed, kUnitStream + 1 + window, static_cast<uint64_t>(epoch));
    std::copy(w.begin(), w.end(), seq.begin() + static_cast<ptrdiff_t>(window_start));
    window_start = seq.size();
    ++window;
  };
  for (int64_t u : order) {
    const int64_t first = starts.empty() ? u : starts[static_cast<size_t>(u)];
    const int64_t end = starts.empty() ? u + 1 : starts[static_cast<size_t>(u) + 1];
    for (int64_t i = first; i < end; ++i) seq.push_back(i);
    if (static_cast<int64_t>(seq.size() - window_start) >= options_.shuffle_window) close_window();
  }
  if (window_start < seq.size()) close_window();
  return seq;
}

std::vector<int64_t> Sampler::Deal(const std::vector<int64_t>& seq, int64_t rank, int64_t world) const {
  const int64_t n = static_cast<int64_t>(seq.size());
  if (n == 0) return {};
  const int64_t total = options_.pad_ranks ? ((n + world - 1) / world) * world : n;
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(total / world));
  for (int64_t p = rank; p < total; p += world) mine.push_back(seq[static_cast<size_t>(p % n)]);
  mine.resize(static_cast<size_t>(PerRank(options_, n, rank, world)));
  if (!options_.groups.empty()) GroupBatches(options_.groups, options_.batch_size, &mine);
  return mine;
}

// What each step's ranks left unread, in turn: step i's ranks each read the
// first `batch` batches of their share of what step i - 1 left; what is
// left is their shares' rest, taken a position of each rank at a time (so
// at the same number of ranks it is the sequence's tail), less the padding
// (samples read already, or met twice), then what no share held (drop_last's
// incomplete batches), in the sequence's order.
std::vector<int64_t> Sampler::ElasticOrder(int64_t epoch, const std::vector<ElasticStep>& steps) const {
  // A buffered epoch's sequence is its stream's (rank 0 of 1 holds it all),
  // its first ranks' shares their streams'.
  const bool buffered = options_.shards != nullptr && Buffered(epoch);
  auto buffered_share = [&](int64_t rank, int64_t world, bool drop_last) {
    SamplerOptions o = options_;
    o.rank = rank;
    o.world_size = world;
    o.drop_last = drop_last;
    Sampler whole(o);
    whole.lazy_->buffered_epoch.store(lazy_->buffered_epoch.load());
    return whole.EpochOrder(epoch);
  };
  std::vector<int64_t> seq = buffered ? buffered_share(0, 1, false) : Sequence(epoch);
  for (size_t i = 0; i < steps.size(); ++i) {
    const int64_t w = steps[i].world_size;
    std::vector<std::vector<int64_t>> shares(static_cast<size_t>(w));
    for (int64_t r = 0; r < w; ++r) {
      shares[static_cast<size_t>(r)] = i == 0 && buffered ? buffered_share(r, w, options_.drop_last) : Deal(seq, r, w);
    }
    const size_t read = static_cast<size_t>(steps[i].batch * options_.batch_size);
    std::unordered_set<int64_t> seen;
    for (const std::vector<int64_t>& share : shares) {
      seen.insert(share.begin(), share.begin() + static_cast<ptrdiff_t>(std::min(read, share.size())));
    }
    std::vector<int64_t> left;
    for (size_t at = read;; ++at) {
      bool any = false;
      for (const std::vector<int64_t>& share : shares) {
        if (at >= share.size()) continue;
        any = true;
        if (seen.insert(share[at]).second) left.push_back(share[at]);
      }
      if (!any) break;
    }
    for (int64_t item : seq) {
      if (seen.insert(item).second) left.push_back(item);
    }
    seq = std::move(left);
  }
  return Deal(seq, options_.rank, options_.world_size);
}

Status BatchPlan::Extend(const std::vector<int64_t>& batches) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return FailedPrecondition("the plan of epoch " + std::to_string(epoch_) + " is finished");
  batches_.insert(batches_.end(), batches.begin(), batches.end());
  cv_.notify_all();
  return Status::OK();
}

void BatchPlan::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = true;
  cv_.notify_all();
}

size_t BatchPlan::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return batches_.size();
}

bool BatchPlan::Take(size_t from, std::vector<int64_t>* out, int wait_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [&] { return finished_ || batches_.size() > from; });
  if (batches_.size() > from) out->insert(out->end(), batches_.begin() + static_cast<ptrdiff_t>(from), batches_.end());
  return finished_;
}

Status Sampler::SetElastic(int64_t epoch, std::vector<ElasticStep> steps) const {
  if (!steps.empty() && buckets_) {
    return InvalidArgument("batches of similar durations resume only at the number of ranks they were "
                           "saved at (" + std::to_string(steps.back().world_size) + ")");
  }
  for (const ElasticStep& s : steps) {
    if (s.world_size < 1 || s.batch < 0) return InvalidArgument("an elastic step needs world_size >= 1, batch >= 0");
  }
  std::lock_guard<std::mutex> lock(lazy_->mu);
  lazy_->elastic_epoch = steps.empty() ? -1 : epoch;
  lazy_->elastic_steps = std::move(steps);
  lazy_->elastic_batches = -1;
  return Status::OK();
}

int64_t Sampler::BatchesInEpoch(int64_t epoch) const {
  {
    std::lock_guard<std::mutex> lock(lazy_->mu);
    if (lazy_->elastic_epoch != epoch || lazy_->elastic_steps.empty()) return BatchesPerEpoch();
    if (lazy_->elastic_batches >= 0) return lazy_->elastic_batches;
  }
  const int64_t n = static_cast<int64_t>(EpochOrder(epoch).size());
  const int64_t b = (n + options_.batch_size - 1) / options_.batch_size;
  std::lock_guard<std::mutex> lock(lazy_->mu);
  if (lazy_->elastic_epoch == epoch) lazy_->elastic_batches = b;
  return b;
}

}  // namespace nostall
