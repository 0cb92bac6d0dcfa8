// Shared loader, the consumer's side of the named ring (docs/ring_format.md):
// attaching, reading chunks as zero-copy views or copies, falling back to a
// private pipeline and rejoining, resuming.
#include "nostall/shared.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <limits>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/fd.h"
#include "common/process.h"
#include "common/shm.h"
#include "ring/ring.h"
#include "stats/consumer_recorder.h"

namespace nostall {
namespace {

using namespace ring;  // NOLINT: this file is the named ring's consumer

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



// Where a consumer enters the stream: the first block boundary from which
// the segment holds every chunk up to the newest (or the next chunk to come,
// rounded up to a block). Publishes `need` = that chunk and ACTIVE, then
// checks again: with the need visible, nothing from there on is overwritten
// any more, so if all of it is still there the consumer is in. Otherwise
// (the producer moved on meanwhile) tries again, `attempts` times, and on
// failure leaves the row in `fallback_state`.
bool EnterStream(const Segment& seg, uint32_t me, uint32_t fallback_state, int attempts,
                 int64_t* start) {
  ConsumerRow& row = seg.consumers[me];
  const int64_t k = seg.g.chunks_per_epoch, bc = seg.g.block_chunks;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    const int64_t from = seg.HeldFrom();
    const int64_t epoch_start = from - from % k;
    int64_t block_start = epoch_start + (from % k + bc - 1) / bc * bc;
    if (block_start - epoch_start >= k) block_start = epoch_start + k;  // next epoch
    row.need.store(block_start);
    row.state.store(kActive);
    Bump(&seg.h->released_gen);
    CrashPoint("consumer.need_published");
    if (seg.HeldFrom() <= block_start) {
      *start = block_start;
      return true;
    }
    row.state.store(fallback_state);
  }
  row.need.store(kNone);
  Bump(&seg.h->released_gen);
  return false;
}

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

  Status StartEpoch(int64_t epoch, int64_t first_batch) override {
    if (first_batch != 0) {
      return FailedPrecondition("a shared loader's consumer resumes mid-epoch only from the "
                                "stream position it saved (state_dict / load_state_dict)");
    }
    MutexLock lock(&mu_);
    if (started_) {
      // The next epoch, abandoning what is left of this one: the next K
      // chunks, or, off the segment, wherever the segment is now (any block
      // boundary starts a whole epoch).
      int64_t next = base_ + seg_->g.chunks_per_epoch;
      int64_t at = 0;
      if (mode_ == "private" && !producer_gone_ && EnterStream(*seg_, me_, kLagged, 3, &at)) {
        next = at;
        mode_ = "shared";
        ++rejoins_;
      }
      SetBase(next);
    }
    started_ = true;
    label_epoch_ = epoch;
    batch_ = 0;
    consumer_.EpochStarted();
    return Status::OK();
  }

  // The first chunk of the current epoch (with the batch index, where a
  // resumed consumer continues).
  SharedPosition Position() const {
    MutexLock lock(&mu_);
    return {base_, seg_->g.chunk, seg_->g.block_chunks};
  }

  Status Resume(int64_t epoch, const SharedPosition& position, int64_t first_batch) {
    const int64_t base = position.stream_base;
    if (position.chunk != seg_->g.chunk || position.block_chunks != seg_->g.block_chunks) {
      return InvalidArgument("the saved position is in a stream of chunks of " +
                             std::to_string(position.chunk) + " in blocks of " +
                             std::to_string(position.block_chunks) + "; this producer serves chunks of " +
                             std::to_string(seg_->g.chunk) + " in blocks of " + std::to_string(seg_->g.block_chunks) +
                             " (serve with the same --chunk and --block-chunks to resume)");
    }
    if (base < 0 || base % seg_->g.chunks_per_epoch % seg_->g.block_chunks != 0) {
      return InvalidArgument("stream position " + std::to_string(base) + " is not where an "
                             "epoch of this shared loader can start (a state from another one?)");
    }
    const int64_t batches = (seg_->g.samples_per_epoch + spec_.batch_size - 1) / spec_.batch_size;
    if (first_batch < 0 || first_batch > batches) {
      return InvalidArgument("batch " + std::to_string(first_batch) + " is outside the epoch's " +
                             std::to_string(batches));
    }
    MutexLock lock(&mu_);
    SetBase(base);
    started_ = true;
    label_epoch_ = epoch;
    batch_ = first_batch;
    consumer_.EpochStarted();
    // From its private pipeline at that exact position, until the segment
    // holds what it needs (Acquire tries to rejoin before every chunk).
    ConsumerRow& row = seg_->consumers[me_];
    row.state.store(kLagged);
    row.need.store(kNone);
    Bump(&seg_->h->released_gen);
    held_.reset();
    mode_ = "private";
    reason_ = "resumed from a saved position";
    return Status::OK();
  }

  Status Next(int64_t timeout_ms, NextStatus* status, std::shared_ptr<Batch>* out) override {
    const int64_t t0 = NowNs();
    MutexLock lock(&mu_);
    if (!started_) return FailedPrecondition("StartEpoch was not called");
    consumer_.CallStarted(label_epoch_, t0);
    const int64_t n = seg_->g.samples_per_epoch;
    const int64_t b = spec_.batch_size;
    const int64_t lo = batch_ * b;
    if (lo >= n) {
      *status = NextStatus::kEndOfEpoch;
      return Status::OK();
    }
    const int64_t hi = std::min(n, lo + b);
    const int64_t deadline = timeout_ms < 0 ? kNone : t0 + timeout_ms * 1000000;
    const uint64_t sb = seg_->g.sample_bytes;
    // The chunks this batch spans.
    const int64_t first = ChunkIndex(lo), last = ChunkIndex(hi - 1);
    // A timed-out wait returns here; a batch spanning several chunks keeps
    // what it has copied for the next call.
    auto timed_out = [&]() REQUIRES(mu_) {
      consumer_.Waited(label_epoch_, NowNs() - t0);
      consumer_.TimedOut();
      *status = NextStatus::kTimeout;
      return Status::OK();
    };
    std::shared_ptr<ConsumerBatch> batch;
    if (first == last) {
      std::shared_ptr<ChunkLease> c;
      Status st = Acquire(EpochBase() + first, deadline, &c);
      if (!st.ok()) {
        consumer_.Waited(label_epoch_, NowNs() - t0);
        return st;
      }
      if (!c) return timed_out();
      batch = std::make_shared<ConsumerBatch>(label_epoch_, batch_, hi - lo);
      const int64_t off = lo - prefix_[first];
      // Zero-copy, unless this consumer already holds views of enough chunks
      // (views kept by the caller would hold the producer, or the private
      // pipeline's slots, back).
      if (live_->load() <= kMaxLiveViews) {
        batch->lease = c;
        batch->images_ = c->images + off * sb;
        batch->labels_ = c->labels + off;
        batch->indices_ = c->indices + off;
      } else {
        ++copied_batches_;
        batch->own_images.assign(c->images + off * sb, c->images + (off + hi - lo) * sb);
        batch->own_labels.assign(c->labels + off, c->labels + off + (hi - lo));
        batch->own_indices.assign(c->indices + off, c->indices + off + (hi - lo));
        batch->images_ = batch->own_images.data();
        batch->labels_ = batch->own_labels.data();
        batch->indices_ = batch->own_indices.data();
      }
      held_ = std::move(c);
      held_seq_ = EpochBase() + first;
    } else {
      // Spanning chunks: copied one chunk at a time, each let go (but the
      // newest) before the next is asked for, so a batch of any size holds
      // at most two chunks — never all the slots of the segment or of the
      // private pipeline.
      if (!partial_ || partial_->index() != batch_ || partial_->epoch() != label_epoch_) {
        partial_ = std::make_shared<ConsumerBatch>(label_epoch_, batch_, hi - lo);
        partial_->own_images.resize(static_cast<size_t>(hi - lo) * sb);
        partial_->own_labels.resize(static_cast<size_t>(hi - lo));
        partial_->own_indices.resize(static_cast<size_t>(hi - lo));
        partial_pos_ = lo;
      }
      while (partial_pos_ < hi) {
        const int64_t i = ChunkIndex(partial_pos_);
        std::shared_ptr<ChunkLease> c;
        Status st = Acquire(EpochBase() + i, deadline, &c);
        if (!st.ok()) {
          consumer_.Waited(label_epoch_, NowNs() - t0);
          partial_.reset();
          return st;
        }
        if (!c) return timed_out();
        const int64_t from = partial_pos_ - prefix_[i];
        const int64_t take = std::min(hi, prefix_[i + 1]) - partial_pos_;
        const int64_t to = partial_pos_ - lo;
        std::memcpy(partial_->own_images.data() + to * sb, c->images + from * sb, take * sb);
        std::memcpy(partial_->own_labels.data() + to, c->labels + from, take * sizeof(int64_t));
        std::memcpy(partial_->own_indices.data() + to, c->indices + from, take * sizeof(int64_t));
        partial_pos_ += take;
        // Kept: the next batch most likely starts in it; the one before goes
        // when the next chunk is acquired.
        held_ = std::move(c);
        held_seq_ = EpochBase() + i;
      }
      ++copied_batches_;
      batch = std::move(partial_);
      batch->images_ = batch->own_images.data();
      batch->labels_ = batch->own_labels.data();
      batch->indices_ = batch->own_indices.data();
    }
    consumer_.Waited(label_epoch_, NowNs() - t0);
    ++batch_;
    consumer_.Delivered(label_epoch_, hi - lo, NowNs());
    CrashPoint("consumer.batch_made");
    *out = std::move(batch);
    *status = NextStatus::kBatch;
    return Status::OK();
  }

  LoaderStats Stats() const override {
    LoaderStats st;
    MutexLock lock(&mu_);
    if (private_) {
      LoaderStats p = private_->Stats();
      st.fetch = p.fetch;
      st.prep = p.prep;
      st.batch = p.batch;
    }
    consumer_.Fill(&st);
    for (const auto& e : st.consumer_epochs) {
      st.batches += e.batches;
      st.samples += e.samples;
    }
    st.has_shared = true;
    st.shared_name = seg_->name.substr(std::strlen("/nostall-shared-"));
    st.shared_mode = mode_;
    st.shared_reason = reason_;
    st.shared_chunks = shared_chunks_;
    st.private_chunks = private_chunks_;
    st.copied_batches = copied_batches_;
    st.fallbacks = fallbacks_;
    st.rejoins = rejoins_;
    st.elapsed_ns = NowNs() - created_ns_;
    return st;
  }

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

  std::shared_ptr<ChunkLease> SharedLease(uint32_t s) REQUIRES(mu_) {
    auto c = std::make_shared<ChunkLease>();
    c->seg = seg_;
    c->reg = reg_;
    c->slot = s;
    c->me = me_;
    c->live = live_;
    live_->fetch_add(1);
    c->images = seg_->images(s);
    c->labels = seg_->labels(s);
    c->indices = seg_->indices(s);
    c->count = seg_->slots[s].count;
    return c;
  }

  // Pins chunk `seq` if a slot holds it: 1 found, 0 not there (yet or any
  // more), -1 being written (look again).
  int TryPin(int64_t seq, std::shared_ptr<ChunkLease>* out) REQUIRES(mu_) {
    for (uint32_t s = 0; s < seg_->g.slot_count; ++s) {
      SlotRow& row = seg_->slots[s];
      if (row.seq.load() != seq) continue;
      if (row.state.load() != kReady) return -1;
      seg_->pin(s, me_).fetch_add(1);
      CrashPoint("consumer.pin_added");
      if (row.state.load() == kReady && row.seq.load() == seq) {
        // The lease takes over the pin just added.
        auto c = SharedLease(s);
        *out = std::move(c);
        return 1;
      }
      seg_->pin(s, me_).fetch_sub(1);
      return -1;
    }
    return 0;
  }

  // Why the producer can no longer serve, or "" while it can.
  std::string ProducerGone() const REQUIRES(mu_) {
    const Header& h = *seg_->h;
    const uint32_t state = h.state.load();
    if (state == kClosed) return "the producer stopped";
    if (state == kFailed) {
      return "the producer failed: " + std::string(h.error, strnlen(h.error, sizeof h.error));
    }
    if (!ProcessAlive(h.producer_pid, h.producer_start_time)) {
      return "the producer (pid " + std::to_string(h.producer_pid) + ") died";
    }
    const double silent = (NowNs() - h.heartbeat_ns.load()) / 1e9;
    if (silent > options_.producer_timeout_s) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "the producer (pid %lld) has been silent for %.1fs",
                    static_cast<long long>(h.producer_pid), silent);
      return buf;
    }
    return "";
  }

  // Gets chunk `seq`: from the segment while this consumer is served there,
  // else from its private pipeline. Null with OK status: the deadline passed.
  Status Acquire(int64_t seq, int64_t deadline, std::shared_ptr<ChunkLease>* out) REQUIRES(mu_) {
    if (held_ && held_seq_ == seq) {
      *out = held_;
      return Status::OK();
    }
    held_.reset();
    ConsumerRow& row = seg_->consumers[me_];
    if (mode_ == "private") {
      if (!producer_gone_ && TryRejoin(seq, out)) return Status::OK();
      return FromPrivate(seq, deadline, out);
    }
    if (row.need.load() < seq) {
      row.need.store(seq);
      Bump(&seg_->h->released_gen);
    }
    int64_t last_check = 0;
    while (true) {
      const uint32_t gen = seg_->h->published_gen.load();
      if (row.state.load() == kLagged) {
        return Fallback("it fell more than max_lag behind the others", seq, deadline, out);
      }
      const int r = TryPin(seq, out);
      if (r == 1) {
        ++shared_chunks_;
        return Status::OK();
      }
      if (r == 0 && seq < seg_->h->produced.load()) {
        // Overwritten: only a consumer that was left behind can meet that.
        return Fallback("its next chunk was overwritten", seq, deadline, out);
      }
      const int64_t now = NowNs();
      if (now - last_check > 100000000) {
        last_check = now;
        const std::string gone = ProducerGone();
        if (!gone.empty()) {
          producer_gone_ = true;
          if (!options_.fallback_to_private) {
            return FailedPrecondition("shared loader '" + spec_name() + "': " + gone +
                                      "; start it again and attach again, or attach with "
                                      "on_producer_exit=\"private\" to continue alone");
          }
          return Fallback(gone, seq, deadline, out);
        }
      }
      if (now >= deadline) return Status::OK();
      if (r < 0) {  // a slot changing hands: look again in a moment
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      } else {
        FutexWait(&seg_->h->published_gen, gen, std::min<int64_t>(deadline - now, 100000000));
      }
    }
  }

  std::string spec_name() const { return seg_->name.substr(std::strlen("/nostall-shared-")); }

  Status Fallback(const std::string& why, int64_t seq, int64_t deadline,
                  std::shared_ptr<ChunkLease>* out) REQUIRES(mu_) {
    ConsumerRow& row = seg_->consumers[me_];
    uint32_t active = kActive;
    row.state.compare_exchange_strong(active, kLagged);  // stop holding the producer back
    Bump(&seg_->h->released_gen);
    mode_ = "private";
    reason_ = why;
    ++fallbacks_;
    return FromPrivate(seq, deadline, out);
  }

  // Back to the segment if it still holds (or will hold) chunk `seq`.
  bool TryRejoin(int64_t seq, std::shared_ptr<ChunkLease>* out) REQUIRES(mu_) {
    const Header& h = *seg_->h;
    if (seq < seg_->HeldFrom() || seq >= h.produced.load() + seg_->g.slot_count) return false;
    ConsumerRow& row = seg_->consumers[me_];
    row.need.store(seq);
    row.state.store(kActive);
    // With the need visible, nothing from `seq` on is overwritten any more:
    // is everything from `seq` still there (or still to come)?
    if (seg_->HeldFrom() <= seq) {
      mode_ = "shared";
      ++rejoins_;
      if (TryPin(seq, out) == 1) {
        ++shared_chunks_;
        return true;
      }
      return false;  // registered; the chunk comes from the segment next time
    }
    row.state.store(kLagged);
    Bump(&seg_->h->released_gen);
    return false;
  }

  Status FromPrivate(int64_t seq, int64_t deadline, std::shared_ptr<ChunkLease>* out) REQUIRES(mu_) {
    const int64_t k = seg_->g.chunks_per_epoch;
    if (!private_) {
      // Slots for the views this consumer may hand out (kMaxLiveViews),
      // the chunk it holds and one being made.
      LoaderSpec spec = producer_spec_;
      spec.prefetch = std::max(spec.prefetch, kMaxLiveViews);
      NOSTALL_ASSIGN_OR_RETURN(private_, Loader::Create(spec));
      private_next_ = -1;
    }
    if (private_next_ != seq) {
      NOSTALL_RETURN_IF_ERROR(private_->StartEpoch(seq / k, seq % k));
      private_next_ = seq;
    }
    NextStatus ns;
    std::shared_ptr<Batch> b;
    while (true) {
      const int64_t left = deadline == kNone ? -1 : std::max<int64_t>(0, (deadline - NowNs()) / 1000000);
      NOSTALL_RETURN_IF_ERROR(private_->Next(left, &ns, &b));
      if (ns == NextStatus::kTimeout) return Status::OK();  // no chunk yet: the caller comes back
      if (ns == NextStatus::kBatch) break;
      if (ns == NextStatus::kEndOfEpoch) {
        NOSTALL_RETURN_IF_ERROR(private_->StartEpoch(seq / k + 1, 0));
      }
    }
    ++private_next_;
    if (private_next_ % k == 0) {
      // The epoch is done: the private pipeline runs on into the next one.
      NOSTALL_RETURN_IF_ERROR(private_->StartEpoch(private_next_ / k, 0));
    }
    auto c = std::make_shared<ChunkLease>();
    c->images = static_cast<const uint8_t*>(b->images());
    c->labels = b->labels();
    c->indices = b->indices();
    c->count = b->size();
    c->private_batch = std::move(b);
    c->live = live_;
    live_->fetch_add(1);
    ++private_chunks_;
    *out = std::move(c);
    return Status::OK();
  }

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

}  // namespace

Result<std::unique_ptr<Loader>> AttachShared(const std::string& name, const AttachOptions& options) {
  NOSTALL_RETURN_IF_ERROR(ValidName(name));
  if (options.batch_size <= 0) return InvalidArgument("batch_size must be positive");
  NOSTALL_ASSIGN_OR_RETURN(std::shared_ptr<Segment> seg,
                           OpenNamedRing(name, /*writable=*/true, options.attach_timeout_s));
  const Header* h = seg->h;
  if (options.expect_spec_fingerprint != 0 && options.expect_spec_fingerprint != h->spec_fingerprint) {
    return FailedPrecondition("shared loader '" + name + "' serves another pipeline (its spec "
                              "differs from the one given); attach without a spec, or serve "
                              "this one under another name");
  }
  if (h->state.load() != kRunning || !ProcessAlive(h->producer_pid, h->producer_start_time)) {
    return FailedPrecondition("shared loader '" + name + "' has no running producer");
  }
  Result<LoaderSpec> served = LoaderSpec::FromJson(seg->Spec());
  if (!served.ok()) {
    return FailedPrecondition("shared loader '" + name + "' is damaged (its spec: " +
                              served.status().message() + ")");
  }
  const LoaderSpec producer_spec = std::move(served).value();
  LoaderSpec spec = producer_spec;
  spec.batch_size = options.batch_size;
  NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<Source> source,
                           OpenSource(producer_spec.source, producer_spec.source_options));
  if (source->fingerprint() != h->dataset_fingerprint) {
    return FailedPrecondition("shared loader '" + name + "': the dataset at " + producer_spec.source +
                              " differs from the one the producer indexed");
  }
  SamplerOptions so;
  so.num_items = source->size();
  so.batch_size = options.batch_size;
  so.subset = producer_spec.subset;
  NOSTALL_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(so));

  // A row of the consumer table: owned once its pid is ours.
  uint32_t me = seg->g.max_consumers;
  for (uint32_t i = 0; i < seg->g.max_consumers; ++i) {
    int64_t free = 0;
    if (seg->consumers[i].pid.compare_exchange_strong(free, ::getpid())) {
      me = i;
      break;
    }
  }
  if (me == seg->g.max_consumers) {
    return ResourceExhausted("shared loader '" + name + "' already has its maximum of " +
                             std::to_string(seg->g.max_consumers) + " consumers (serve with "
                             "--max-consumers to allow more)");
  }
  ConsumerRow& row = seg->consumers[me];
  CrashPoint("consumer.row_claimed");
  row.start_time.store(SelfStartTime());
  row.state.store(kClaimed);
  auto reg = std::make_shared<Registration>();
  reg->seg = seg;
  reg->me = me;
  int64_t start = 0;
  if (!EnterStream(*seg, me, kClaimed, 1000, &start)) {
    return Internal("could not find a starting chunk in '" + name + "'");
  }
  return std::unique_ptr<Loader>(new Consumer(std::move(seg), std::move(reg), producer_spec,
                                              std::move(spec), std::move(source), std::move(sampler),
                                              options, start));
}

Result<SharedPosition> SharedPositionOf(const Loader& loader) {
  const auto* consumer = dynamic_cast<const Consumer*>(&loader);
  if (consumer == nullptr) return InvalidArgument("not a consumer of a shared loader");
  return consumer->Position();
}

Status ResumeShared(Loader* loader, int64_t epoch, const SharedPosition& position,
                    int64_t first_batch) {
  auto* consumer = dynamic_cast<Consumer*>(loader);
  if (consumer == nullptr) return InvalidArgument("not a consumer of a shared loader");
  return consumer->Resume(epoch, position, first_batch);
}

}  // namespace nostall
