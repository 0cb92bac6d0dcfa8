// The shared loader's consumer (internal): the class and the batches it
// hands out. Split by role: attaching, epochs and batches in consumer.cc;
// getting chunks (from the segment, the private pipeline, falling back and
// rejoining) in ChunkFeed (chunk_feed.h). Protocol: docs/ring_format.md.
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
#include "ops/sample_kind.h"
#include "ring/ring.h"
#include "shared/chunk_feed.h"
#include "stats/consumer_recorder.h"

namespace nostall {

class ConsumerBatch final : public Batch {
 public:
  ConsumerBatch(int64_t epoch, int64_t index, int64_t size) : epoch_(epoch), index_(index), size_(size) {}
  int64_t epoch() const override { return epoch_; }
  int64_t index() const override { return index_; }
  int64_t size() const override { return size_; }
  const void* images() const override { return images_; }
  const int64_t* labels() const override { return labels_; }
  const int64_t* indices() const override { return indices_; }
  FieldView field(int f, int64_t pos) const override {
    return lease ? lease->field(f, lease_offset + pos) : own_fields.Get(f, pos);
  }
  // A view's whole slot: the producer's (read-only here), or the private
  // pipeline's where this consumer fell back to one; none for a copy.
  std::pair<const void*, size_t> memory() const override {
    if (!lease) return {nullptr, 0};
    if (lease->private_batch) return lease->private_batch->memory();
    return {lease->seg->images(lease->slot), lease->seg->g.slot_stride};
  }
  const int64_t* sample_dims() const override { return dims_; }
  std::vector<int64_t> padded_shape() const override { return padded_; }

  std::shared_ptr<ChunkLease> lease;  // zero-copy: a view into this chunk
  int64_t lease_offset = 0;           // where the batch begins in it
  std::vector<uint8_t> own_images;    // or copies
  std::vector<int64_t> own_labels, own_indices;
  FieldCopies own_fields;
  const void* images_ = nullptr;
  const int64_t* labels_ = nullptr;
  const int64_t* indices_ = nullptr;
  // Samples of many sizes: each one's shape (the lease's, or own_dims) and
  // the shape they are padded to in images_.
  std::vector<int64_t> own_dims, padded_;
  const int64_t* dims_ = nullptr;

 private:
  int64_t epoch_, index_, size_;
};





class Consumer final : public Loader {
 public:
  Consumer(std::shared_ptr<Segment> seg, std::shared_ptr<Registration> reg, LoaderSpec producer_spec,
           LoaderSpec spec, std::unique_ptr<Source> source, Sampler sampler, AttachOptions options,
           int64_t start)
      : seg_(seg), me_(reg->me), spec_(std::move(spec)), source_(std::move(source)),
        sampler_(std::move(sampler)),
        feed_(std::move(seg), std::move(reg), std::move(producer_spec), options) {
    SetBase(start);
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
  // Samples [from, from + count) of chunk `c`'s extra fields into `out` at `to`.
  void CopyFields(const ChunkLease& c, int64_t from, int64_t to, int64_t count,
                  FieldCopies* out) const;
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
  // The ring's three axes, or the kind's own shape where the ring folded
  // more into them (a video clip's (C, T, H, W)) and the two agree in size.
  std::vector<int64_t> SampleShape() const override {
    const std::vector<int64_t> ring = {seg_->g.shape[0], seg_->g.shape[1], seg_->g.shape[2]};
    int h = 0, w = 0;
    if (!spec_.prep.FixedOutputSize(&h, &w)) return ring;
    const std::vector<int64_t> own = spec_.prep.sample_kind().SampleShape(spec_.prep, h, w);
    int64_t a = 1, b = 1;
    for (int64_t d : own) a *= d;
    for (int64_t d : ring) b *= d;
    return own.size() > 3 && a == b && own[own.size() - 1] == ring[2] && own[own.size() - 2] == ring[1] ? own
                                                                                                        : ring;
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


  std::shared_ptr<Segment> seg_;
  uint32_t me_ = 0;
  const LoaderSpec spec_;
  std::unique_ptr<Source> source_;
  Sampler sampler_;
  int64_t base_ = 0;                // the chunk the current epoch starts at
  std::vector<int64_t> prefix_;     // samples before each chunk of the epoch

  mutable Mutex mu_;
  bool started_ GUARDED_BY(mu_) = false;
  int64_t label_epoch_ GUARDED_BY(mu_) = 0;
  int64_t batch_ GUARDED_BY(mu_) = 0;
  // A batch spanning chunks, filled so far up to sample partial_pos_ of the
  // epoch (a wait for its next chunk timed out).
  std::shared_ptr<ConsumerBatch> partial_ GUARDED_BY(mu_);
  int64_t partial_pos_ GUARDED_BY(mu_) = 0;
  ChunkFeed feed_ GUARDED_BY(mu_);  // where the chunks come from
  int64_t copied_batches_ GUARDED_BY(mu_) = 0;
  std::vector<int64_t> field_bytes_ GUARDED_BY(mu_);  // per extra field, handed out
  ConsumerRecorder consumer_;
  const int64_t created_ns_ = NowNs();
};

}  // namespace nostall

#endif  // NOSTALL_SHARED_CONSUMER_H_
