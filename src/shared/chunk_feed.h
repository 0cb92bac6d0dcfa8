// Where a shared loader's consumer gets its chunks (docs/ring_format.md):
// the segment while it is served there (pinning a slot), else a private
// pipeline at the exact position (the producer is gone, or this consumer
// fell behind), rejoining the segment when it holds what comes next.
// Not thread-safe: the consumer calls it under its own lock.
#ifndef NOSTALL_SHARED_CHUNK_FEED_H_
#define NOSTALL_SHARED_CHUNK_FEED_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "nostall/loader.h"
#include "nostall/shared.h"
#include "pipeline/work.h"
#include "ring/ring.h"

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
  // A ragged ring's chunk (ring/ragged.h): each sample's own shape, copied
  // out of the slot and checked once (a shape past the ring's bound, which
  // only damage gives, is `damaged`), and the shape its samples are padded
  // to in `images`. Empty: samples of one shape.
  std::vector<int64_t> dims, padded;
  Status damaged;
  uint64_t stride = 0;  // bytes of one sample in `images`
  // Sample `pos`'s extra field `f`: from the private batch, else the slot.
  FieldView field(int f, int64_t pos) const {
    return private_batch ? private_batch->field(f, pos) : SlotField(*seg, slot, f, pos);
  }
  ~ChunkLease() {
    if (seg) {
      seg->pin(slot, me).fetch_sub(1);
      Bump(&seg->h->released_gen);
    }
    if (live) live->fetch_sub(1);
  }
};

// Chunks a consumer may hold views of before it hands out copies instead:
// views the caller keeps must not hold the producer (or the consumer's own
// private pipeline) back.
constexpr int kMaxLiveViews = 3;

class ChunkFeed {
 public:
  ChunkFeed(std::shared_ptr<Segment> seg, std::shared_ptr<Registration> reg,
            LoaderSpec producer_spec, AttachOptions options);

  // Gets chunk `seq`: from the segment while this consumer is served there,
  // else from its private pipeline. Null with OK status: the deadline passed.
  Status Acquire(int64_t seq, int64_t deadline, std::shared_ptr<ChunkLease>* out);
  // Keeps `chunk` (chunk `seq`): the next batch most likely starts in it.
  void Hold(std::shared_ptr<ChunkLease> chunk, int64_t seq);
  // At an epoch's start, off the segment: back on it, at the block
  // boundary `*at` it serves next (true), or not (the producer is gone, or
  // the segment cannot take it).
  bool RejoinAtEpoch(int64_t* at);
  // From the private pipeline from now on (until a rejoin), for `why`.
  void GoPrivate(const std::string& why);
  // Views of chunks handed out and still alive.
  int live_views() const { return live_->load(); }
  // The private pipeline's stages, the mode and its reason, the counts.
  void AddStats(LoaderStats* st) const;

 private:
  std::shared_ptr<ChunkLease> SharedLease(uint32_t s);
  // Pins chunk `seq` if a slot holds it: 1 found, 0 not there (yet or any
  // more), -1 being written (look again).
  int TryPin(int64_t seq, std::shared_ptr<ChunkLease>* out);
  // Why the producer can no longer serve, or "" while it can.
  std::string ProducerGone() const;
  Status Fallback(const std::string& why, int64_t seq, int64_t deadline,
                  std::shared_ptr<ChunkLease>* out);
  // Back to the segment if it still holds (or will hold) chunk `seq`.
  bool TryRejoin(int64_t seq, std::shared_ptr<ChunkLease>* out);
  Status FromPrivate(int64_t seq, int64_t deadline, std::shared_ptr<ChunkLease>* out);

  std::shared_ptr<Segment> seg_;
  std::shared_ptr<Registration> reg_;
  uint32_t me_ = 0;
  const LoaderSpec producer_spec_;
  const AttachOptions options_;
  std::shared_ptr<ChunkLease> held_;
  int64_t held_seq_ = -1;
  std::shared_ptr<std::atomic<int>> live_ = std::make_shared<std::atomic<int>>(0);
  std::unique_ptr<Loader> private_;
  int64_t private_next_ = -1;
  bool producer_gone_ = false;
  std::string mode_ = "shared";
  std::string reason_;
  int64_t shared_chunks_ = 0, private_chunks_ = 0, fallbacks_ = 0, rejoins_ = 0;
};

}  // namespace nostall

#endif  // NOSTALL_SHARED_CHUNK_FEED_H_
