// Loader: the whole pipeline, source to batch ring, driven by C++ threads.
//
//   Source -> Sampler -> fetch pool -> prep pool -> batch ring -> Next()
//
// Create() validates the spec, opens the source, reserves the ring and starts
// the threads; StartEpoch() fixes the order and begins filling; Next() hands
// out ready batches in order. A Batch is a lease on its ring slot: the slot is
// refilled only after every copy of the shared_ptr<Batch> is gone. Destroying
// the Loader cancels the work, wakes every waiter and joins every thread;
// Batches still alive stay valid (they keep the ring mapped).
//
// Thread-safety: StartEpoch/Next/Stats may be called from any one thread at a
// time; Batch destruction may happen on any thread.
#ifndef NOSTALL_LOADER_H_
#define NOSTALL_LOADER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nostall/cache.h"
#include "nostall/sampler.h"
#include "nostall/source.h"
#include "nostall/stats.h"
#include "nostall/status.h"
#include "nostall/transforms.h"

namespace nostall {

enum class ErrorPolicy { kRaise, kSkip };

// Upper limits on the thread counts of a spec (each is a real thread).
inline constexpr int kMaxThreads = 256;
inline constexpr int kMaxReadsInFlight = 1024;

// How samples are put together in batches beyond batch_size
// (docs/sampling.md). `by`:
//   ""             in the epoch's order;
//   "aspect_ratio" images of one aspect-ratio bin batched together, as
//                  torchvision's detection references do
//                  (GroupedBatchSampler with create_aspect_ratio_groups(k =
//                  group_factor): bins at 2^linspace(-1, 1, 2k + 1) of
//                  width / height; k = 0: one edge, at 1), so that a padded
//                  batch of images of many sizes pads little; needs each
//                  item's size from the index (a COCO file's);
//   "duration"     clips of similar durations batched together, as many as
//                  fit max_duration seconds padded (SamplerOptions'
//                  durations: num_buckets, quadratic_duration), at most
//                  batch_size: batches of varying counts, the same number
//                  on every rank; each item's duration read from its header
//                  when the loader is made.
struct BucketingSpec {
  std::string by;
  int64_t group_factor = 3;
  double max_duration = 0;
  int64_t num_buckets = 10;
  double quadratic_duration = 0;
};

// LoaderSpec::shuffle_window: sized from the source's decoded cache
// ("auto" in JSON).
constexpr int64_t kAutoShuffleWindow = -1;

// Everything that defines a pipeline; serialisable to JSON (docs/spec.md).
struct LoaderSpec {
  std::string source;
  SourceOptions source_options;
  int64_t batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;
  int64_t rank = 0;
  int64_t world_size = 1;
  bool drop_last = false;
  bool pad_ranks = true;  // equal shares per rank (see SamplerOptions)
  int64_t subset = 0;  // > 0: use this many items, a fixed random sample (see SamplerOptions)
  int64_t shuffle_block = 0;  // > 0: shuffle within fixed blocks (see SamplerOptions)
  BucketingSpec bucketing;
  // Tar shards with no index yet (docs/sampling.md): "buffered" starts at
  // once and indexes each shard as the first epoch reads it, that epoch in
  // WebDataset's order (shards shuffled, samples through a shuffle buffer);
  // "exact" builds the whole index first; "auto": buffered for shards on
  // S3, exact for local ones. Every later epoch is exact either way.
  std::string first_epoch = "auto";
  int64_t shuffle_buffer = 0;  // the buffered epoch's buffer, samples (0: 8192)
  // The window shuffle (SamplerOptions::shuffle_window), samples: 0 off,
  // kAutoShuffleWindow sized from the source's decoded cache.
  int64_t shuffle_window = 0;
  // Every epoch in the buffered order: shards (tar shards, Parquet row
  // groups) shuffled, samples through the shuffle buffer (docs/sampling.md).
  bool shard_shuffle = false;
  PrepSpec prep;
  int num_threads = 0;      // prep threads; 0 = tuned (autotune), else the cores this process may use
  // Reads at once: the threads that read a local source (0: 4, moved by
  // the autotuner), or the requests in flight to a remote one (S3, a web
  // server; 0: sized by Little's law from the measured latency as it runs).
  int reads_in_flight = 0;
  int prefetch = -1;        // batches prepared ahead of the one being used; -1 = tuned, else 2
  // The autotuner (src/pipeline/autotune.h): "auto" tunes the knobs above
  // left unset while the pipeline runs; "on" tunes all three, starting from
  // the values given; "off" tunes none (unset knobs take the defaults).
  std::string autotune = "auto";
  ErrorPolicy on_error = ErrorPolicy::kRaise;
  // The caches of encoded bytes, front first (empty: none; docs/spec.md):
  // a MinIO cache shared by every loader on the node that names it, a
  // cluster tier on memcached servers, or both, the node's in front.
  std::vector<CacheTierSpec> cache;
  // What FromJson said of the spec it read, for the user to see: the old
  // flat storage fields it read in the new form, one line each. Not part
  // of the spec (ToJson writes the new form).
  std::vector<std::string> notes;

  static Result<LoaderSpec> FromJson(const std::string& json);
  // A spec's JSON text with the old flat storage fields written in the new
  // form (the rest as it was, unchecked), and a note for each rewrite (as
  // FromJson gives in `notes`): for front ends that edit a spec before
  // building from it.
  static Result<std::string> UpgradeJson(const std::string& json, std::vector<std::string>* notes);
  // Every field FromJson reads, and ToJson writes (ToJson(FromJson(x)) keeps all).
  static const std::vector<std::string>& FieldNames();
  std::string ToJson() const;
  // JSON text nested deeper than `max_depth` arrays and objects is refused
  // before it is parsed (a value nested 200,000 deep overflowed the stack of
  // the code that printed it in an error). Linear, no recursion.
  static Status CheckJsonDepth(const std::string& text, int max_depth, const std::string& what);
  // The fields that make the batches (ToJson less thread counts, where the
  // index and cached copies are kept, where S3 objects are fetched from),
  // as canonical JSON; Fingerprint is its FNV-1a.
  std::string BatchJson() const;
  uint64_t Fingerprint() const;
};

class Batch {
 public:
  virtual ~Batch() = default;
  virtual int64_t epoch() const = 0;
  virtual int64_t index() const = 0;   // batch number within the epoch
  virtual int64_t size() const = 0;    // samples (fewer at epoch end or after skips)
  virtual const void* images() const = 0;
  virtual const int64_t* labels() const = 0;
  virtual const int64_t* indices() const = 0;  // dataset indices of the samples
  // A private copy, not a view of a ring slot (the caller held every other
  // slot; see LoaderStats::private_copies).
  virtual bool copied() const { return false; }
  // The whole memory the batch lives in (its ring slot: images, labels,
  // indices and fields), for registering with a device driver as page-locked
  // once per slot; {nullptr, 0} for a private copy. A shared loader's
  // consumer's view is of the producer's slot, mapped read-only there.
  virtual std::pair<const void*, size_t> memory() const { return {nullptr, 0}; }
  // Sample `pos`'s bytes of extra field `f` (the spec's fields besides the
  // image and the label, in their order; nostall/record.h): absent when the
  // sample has no such member (an optional field). Valid while the Batch is.
  virtual FieldView field(int f, int64_t pos) const {
    (void)f;
    (void)pos;
    return {};
  }
  // A batch of samples of many sizes (Loader::Ragged): each sample's own
  // shape, three int64s per sample (SampleShape's rank, then 1s), valid
  // while the Batch is; and the shape each sample has in images(), padded
  // to the batch's largest (rounded up as the spec says), three int64s.
  // Null and empty for a batch of one shape.
  virtual const int64_t* sample_dims() const { return nullptr; }
  virtual std::vector<int64_t> padded_shape() const { return {}; }
};

// The spec's fields besides the image and the label, in order (what
// Batch::field numbers).
std::vector<FieldSpec> ExtraFields(const LoaderSpec& spec);

enum class NextStatus { kBatch, kEndOfEpoch, kTimeout };

// Where a shared loader's consumer's epoch began in the producer's stream,
// and the stream's geometry (which must match on resume; nostall/shared.h).
struct StreamPosition {
  int64_t stream_base = 0;   // the chunk (of the stream) the epoch began at
  int64_t chunk = 0;         // samples per chunk
  int64_t block_chunks = 0;  // shuffle block, in chunks
};

class Loader {
 public:
  static Result<std::unique_ptr<Loader>> Create(const LoaderSpec& spec);
  virtual ~Loader() = default;

  // Begins `epoch` at batch `first_batch` (for exact resume), abandoning
  // whatever the previous epoch had not handed out.
  virtual Status StartEpoch(int64_t epoch, int64_t first_batch = 0) = 0;
  // Waits at most `timeout_ms` (< 0: forever) for the next batch. A bad item
  // under on_error=raise is returned here as a DataError naming the item.
  virtual Status Next(int64_t timeout_ms, NextStatus* status, std::shared_ptr<Batch>* out) = 0;

  virtual LoaderStats Stats() const = 0;
  // Drops the bytes of every item this loader reads from the page cache, so
  // the next reads come from storage (no root needed; see Source::Evict).
  virtual Status EvictPageCache() const = 0;
  virtual const Source& source() const = 0;
  virtual const Sampler& sampler() const = 0;
  virtual const LoaderSpec& spec() const = 0;  // with defaults resolved
  // One sample's shape: (C, H, W) for NCHW, (H, W, C) for NHWC.
  virtual std::vector<int64_t> SampleShape() const = 0;

  // Makes the loader's threads (running, and started later) run only when
  // their cores have nothing else to run (Linux SCHED_IDLE): prep beside a
  // training step on the same cores that it must never slow (the trainer's
  // share of remote prep, docs/remote.md). Still work-conserving: a core
  // the step leaves idle is theirs.
  virtual Status RunInBackground() {
    return FailedPrecondition("this loader's threads are another process's");
  }

  // A consumer of a shared loader: where its current epoch began in the
  // producer's stream. A loader of its own has none.
  virtual std::optional<StreamPosition> stream_position() const { return std::nullopt; }
  // Continues `epoch` at `first_batch` (a resumed checkpoint): a loader of
  // its own starts the epoch there; a consumer needs where the epoch began
  // in the stream (`position`, from the checkpoint) when first_batch > 0.
  virtual Status Resume(int64_t epoch, int64_t first_batch,
                        const std::optional<StreamPosition>& position) {
    return StartEpoch(epoch, first_batch);
  }
};

// The cores this process may run on (sched_getaffinity).
int AvailableCores();

}  // namespace nostall

#endif  // NOSTALL_LOADER_H_
