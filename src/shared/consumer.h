// The shared loader's consumer (internal): the class, the chunk leases and
// batches it hands out. Split by role: attaching, epochs and batches in
// consumer.cc; getting chunks (from the segment, the private pipeline,
// falling back and rejoining) in chunks.cc. Protocol: docs/ring_format.md.
#ifndef NOSTALL_SHARED_CONSUMER_H_
#define NOSTALL_SHARED_CONSUMER_H_

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "nostall/shared.h"
#include "ring/ring.h"
#include "stats/consumer_recorder.h"

namespace nostall {

using ring::Bump;
using ring::ConsumerRow;
using ring::Segment;
using ring::kLagged;
using ring::kNone;

// The row a consumer holds in the segment; freed when the loader and every
// lease are gone.
struct Registration {
  std::shared_ptr<Segment> seg;
  uint32_t me = 0;
  ~Registration() { seg->ReleaseRow(me); }
};

// One chunk held by the consumer: a pinned slot of the segment, or a batch of
// the private pipeline. Destroying it lets the slot go.
struct ChunkLease {
  std::shared_ptr<Segment> seg;
  std::shared_ptr<Registration> reg;  // the row outlives every view
  uint32_t slot = 0, me = 0;
  std::shared_ptr<Batch> private_batch;
  std::shared_ptr<std::atomic<int>> live;
  const uint8_t* images = nullptr;
  const int64_t* labels = nullptr;
  const int64_t* indices = nullptr;
  int64_t count = 0;
  ~ChunkLease() {
    if (seg) {
      seg->pin(slot, me).fetch_sub(1);
      Bump(&seg->h->released_gen);
    }
    if (live) live->fetch_sub(1);
  }
};

class ConsumerBatch final : public Batch {
 public:
  ConsumerBatch(int64_t epoch, int64_t index, int64_t size) : epoch_(epoch), index_(index), size_(size) {}
  int64_t epoch() const override { return epoch_; }
  int64_t index() const override { return index_; }
  int64_t size() const override { return size_; }
  const void* images() const override { return images_; }
  const int64_t* labels() const override { return labels_; }
  const int64_t* indices() const override { return indices_; }

  std::shared_ptr<ChunkLease> lease;  // zero-copy: a view into this chunk
  std::vector<uint8_t> own_images;    // or copies
  std::vector<int64_t> own_labels, own_indices;
  const void* images_ = nullptr;
  const int64_t* labels_ = nullptr;
  const int64_t* indices_ = nullptr;

 private:
  int64_t epoch_, index_, size_;
};




// Chunks a consumer may hold views of before it hands out copies instead:
// views the caller keeps must not hold the producer (or the consumer's own
// private pipeline) back.
constexpr int kMaxLiveViews = 3;

class Consumer final : public Loader {
 public:
  Consumer(std::shared_ptr<Segment> seg, std::shared_ptr<Registration> reg, LoaderSpec producer_spec,
           LoaderSpec spec, std::unique_ptr<Source> source, Sampler sampler, AttachOptions options,
           int64_t start)
      : seg_(std::move(seg)), reg_(std::move(reg)), producer_spec_(std::move(producer_spec)),
        spec_(std::move(spec)), source_(std::move(source)), sampler_(std::move(sampler)),
        options_(options) {
    me_ = reg_->me;
    SetBase(start);
    mode_ = "shared";
  }

  ~Consumer() override {
    // Views the caller still holds keep their pins (and the row, through the
    // registration); the producer stops waiting for this consumer now.
    ConsumerRow& row = seg_->consumers[me_];
    row.state.store(kLagged);
    row.need.store(kNone);
    Bump(&seg_->h->released_gen);
  }

  Status StartEpoch(int64_t epoch, int64_t first_batch) override;

  // The first chunk of the current epoch (with the batch index, where a
  // resumed consumer continues).
  std::optional<StreamPosition> stream_position() const override {
    MutexLock lock(&mu_);
    return StreamPosition{base_, seg_->g.chunk, seg_->g.block_chunks};
  }

  Status Resume(int64_t epoch, int64_t first_batch,
                const std::optional<StreamPosition>& position) override;

  Status Next(int64_t timeout_ms, NextStatus* status, std::shared_ptr<Batch>* out) override;

  // Batch [lo, hi) of the epoch, inside chunk `first`: a zero-copy view of
  // it, unless this consumer already holds views of enough chunks (views
  // kept by the caller would hold the producer, or the private pipeline's
  // slots, back). `*out` stays null when the wait timed out.
  Status BatchInOneChunk(int64_t lo, int64_t hi, int64_t first, int64_t deadline, std::shared_ptr<ConsumerBatch>* out) REQUIRES(mu_);

  // Batch [lo, hi) spanning chunks: copied one chunk at a time, each let go
  // (but the newest) before the next is asked for, so a batch of any size
  // holds at most two chunks, never all the slots of the segment or of the
  // private pipeline. A wait that times out keeps what was copied for the
  // next call (`*out` stays null).
  Status BatchAcrossChunks(int64_t lo, int64_t hi, int64_t deadline, std::shared_ptr<ConsumerBatch>* out) REQUIRES(mu_);

  LoaderStats Stats() const override;

  Status EvictPageCache() const override {
    return FailedPrecondition("a shared loader's consumer reads no storage itself");
  }
  const Source& source() const override { return *source_; }
  const Sampler& sampler() const override { return sampler_; }
  const LoaderSpec& spec() const override { return spec_; }
  std::vector<int64_t> SampleShape() const override {
    return {seg_->g.shape[0], seg_->g.shape[1], seg_->g.shape[2]};
  }

 private:
  int64_t EpochBase() const { return base_; }
  // The current epoch is the K chunks from `base` (a block boundary).
  void SetBase(int64_t base) REQUIRES(mu_) {
    base_ = base;
    partial_.reset();
    prefix_.assign(1, 0);
    for (int64_t i = 0; i < seg_->g.chunks_per_epoch; ++i) {
      prefix_.push_back(prefix_.back() + seg_->ChunkCount(base + i));
    }
  }
  int64_t ChunkIndex(int64_t sample) const REQUIRES(mu_) {
    return static_cast<int64_t>(std::upper_bound(prefix_.begin(), prefix_.end(), sample) -
                                prefix_.begin()) - 1;
  }

  std::shared_ptr<ChunkLease> SharedLease(uint32_t s) REQUIRES(mu_);

  // Pins chunk `seq` if a slot holds it: 1 found, 0 not there (yet or any
  // more), -1 being written (look again).
  int TryPin(int64_t seq, std::shared_ptr<ChunkLease>* out) REQUIRES(mu_);

  // Why the producer can no longer serve, or "" while it can.
  std::string ProducerGone() const REQUIRES(mu_);

  // Gets chunk `seq`: from the segment while this consumer is served there,
  // else from its private pipeline. Null with OK status: the deadline passed.
  Status Acquire(int64_t seq, int64_t deadline, std::shared_ptr<ChunkLease>* out) REQUIRES(mu_);

  std::string spec_name() const { return seg_->label; }

  Status Fallback(const std::string& why, int64_t seq, int64_t deadline, std::shared_ptr<ChunkLease>* out) REQUIRES(mu_);

  // Back to the segment if it still holds (or will hold) chunk `seq`.
  bool TryRejoin(int64_t seq, std::shared_ptr<ChunkLease>* out) REQUIRES(mu_);

  Status FromPrivate(int64_t seq, int64_t deadline, std::shared_ptr<ChunkLease>* out) REQUIRES(mu_);

  std::shared_ptr<Segment> seg_;
  std::shared_ptr<Registration> reg_;
  uint32_t me_ = 0;
  const LoaderSpec producer_spec_;
  const LoaderSpec spec_;
  std::unique_ptr<Source> source_;
  Sampler sampler_;
  AttachOptions options_;
  int64_t base_ = 0;                // the chunk the current epoch starts at
  std::vector<int64_t> prefix_;     // samples before each chunk of the epoch

  mutable Mutex mu_;
  bool started_ GUARDED_BY(mu_) = false;
  int64_t label_epoch_ GUARDED_BY(mu_) = 0;
  int64_t batch_ GUARDED_BY(mu_) = 0;
  std::shared_ptr<ChunkLease> held_ GUARDED_BY(mu_);
  int64_t held_seq_ GUARDED_BY(mu_) = -1;
  // A batch spanning chunks, filled so far up to sample partial_pos_ of the
  // epoch (a wait for its next chunk timed out).
  std::shared_ptr<ConsumerBatch> partial_ GUARDED_BY(mu_);
  int64_t partial_pos_ GUARDED_BY(mu_) = 0;
  std::shared_ptr<std::atomic<int>> live_ GUARDED_BY(mu_) = std::make_shared<std::atomic<int>>(0);
  std::unique_ptr<Loader> private_ GUARDED_BY(mu_);
  int64_t private_next_ GUARDED_BY(mu_) = -1;
  bool producer_gone_ GUARDED_BY(mu_) = false;
  std::string mode_ GUARDED_BY(mu_);
  std::string reason_ GUARDED_BY(mu_);
  int64_t shared_chunks_ GUARDED_BY(mu_) = 0;
  int64_t private_chunks_ GUARDED_BY(mu_) = 0;
  int64_t copied_batches_ GUARDED_BY(mu_) = 0;
  int64_t fallbacks_ GUARDED_BY(mu_) = 0;
  int64_t rejoins_ GUARDED_BY(mu_) = 0;
  ConsumerRecorder consumer_;
  const int64_t created_ns_ = NowNs();
};

}  // namespace nostall

#endif  // NOSTALL_SHARED_CONSUMER_H_
