// Shared loader, the consumer's side of the ring (docs/ring_format.md):
// attaching, epochs, and batches cut from chunks as zero-copy views or
// copies. Getting the chunks is ChunkFeed (chunk_feed.cc).
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
#include "ring/ragged.h"
#include "ring/ring.h"
#include "shared/consumer.h"

namespace nostall {

using namespace ring;  // NOLINT: this file is the ring's consumer

Status Consumer::StartEpoch(int64_t epoch, int64_t first_batch) {
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
    if (feed_.RejoinAtEpoch(&at)) next = at;
    SetBase(next);
  }
  started_ = true;
  label_epoch_ = epoch;
  batch_ = 0;
  consumer_.EpochStarted();
  return Status::OK();
}

Status Consumer::Resume(int64_t epoch, int64_t first_batch,
                        const std::optional<StreamPosition>& at) {
  if (!at) {
    if (first_batch == 0) return StartEpoch(epoch, 0);
    return InvalidArgument("a consumer resumes mid-epoch from its stream position");
  }
  const StreamPosition& position = *at;
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
  feed_.GoPrivate("resumed from a saved position");
  return Status::OK();
}

Status Consumer::Next(int64_t timeout_ms, NextStatus* status, std::shared_ptr<Batch>* out) {
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
  Status st = first == last ? BatchInOneChunk(lo, hi, first, deadline, &batch)
                            : BatchAcrossChunks(lo, hi, deadline, &batch);
  if (!st.ok()) {
    consumer_.Waited(label_epoch_, NowNs() - t0);
    return st;
  }
  if (!batch) return timed_out();
  consumer_.Waited(label_epoch_, NowNs() - t0);
  ++batch_;
  consumer_.Delivered(label_epoch_, hi - lo, NowNs());
  // Bytes of each extra field handed out (stats()["fields"]).
  field_bytes_.resize(seg_->g.field_count, 0);
  for (uint32_t f = 0; f < seg_->g.field_count; ++f) {
    for (int64_t p = 0; p < batch->size(); ++p) {
      field_bytes_[f] += std::max<int64_t>(0, batch->field(static_cast<int>(f), p).size);
    }
  }
  CrashPoint("consumer.batch_made");
  *out = std::move(batch);
  *status = NextStatus::kBatch;
  return Status::OK();
}

void Consumer::CopyFields(const ChunkLease& c, int64_t from, int64_t to, int64_t count,
                          FieldCopies* out) const {
  const int fields = static_cast<int>(seg_->g.field_count);
  if (out->fields() != fields) out->Resize(fields, to + count);
  for (int f = 0; f < fields; ++f) {
    for (int64_t k = 0; k < count; ++k) out->Set(f, to + k, c.field(f, from + k));
  }
}

Status Consumer::BatchInOneChunk(int64_t lo, int64_t hi, int64_t first, int64_t deadline, std::shared_ptr<ConsumerBatch>* out) {
  std::shared_ptr<ChunkLease> c;
  NOSTALL_RETURN_IF_ERROR(feed_.Acquire(EpochBase() + first, deadline, &c));
  if (!c) return Status::OK();
  NOSTALL_RETURN_IF_ERROR(c->damaged);
  const uint64_t sb = c->stride;
  auto batch = std::make_shared<ConsumerBatch>(label_epoch_, batch_, hi - lo);
  const int64_t off = lo - prefix_[first];
  batch->padded_ = c->padded;
  if (feed_.live_views() <= kMaxLiveViews) {
    batch->lease = c;
    batch->lease_offset = off;
    batch->images_ = c->images + off * sb;
    batch->labels_ = c->labels + off;
    batch->indices_ = c->indices + off;
    if (!c->dims.empty()) batch->dims_ = c->dims.data() + 3 * off;
  } else {
    ++copied_batches_;
    batch->own_images.assign(c->images + off * sb, c->images + (off + hi - lo) * sb);
    batch->own_labels.assign(c->labels + off, c->labels + off + (hi - lo));
    batch->own_indices.assign(c->indices + off, c->indices + off + (hi - lo));
    CopyFields(*c, off, 0, hi - lo, &batch->own_fields);
    batch->images_ = batch->own_images.data();
    batch->labels_ = batch->own_labels.data();
    batch->indices_ = batch->own_indices.data();
    if (!c->dims.empty()) {
      batch->own_dims.assign(c->dims.begin() + 3 * off, c->dims.begin() + 3 * (off + hi - lo));
      batch->dims_ = batch->own_dims.data();
    }
  }
  feed_.Hold(std::move(c), EpochBase() + first);
  *out = std::move(batch);
  return Status::OK();
}

Status Consumer::BatchAcrossChunks(int64_t lo, int64_t hi, int64_t deadline, std::shared_ptr<ConsumerBatch>* out) {
  // Each sample takes the ring's sample bytes here (the bound, for samples
  // of many sizes: copied dense in their own shape, the batch padded to its
  // largest once complete).
  const uint64_t sb = seg_->g.sample_bytes;
  const bool ragged = seg_->g.ragged();
  const size_t elem = seg_->g.elem_bytes();
  if (!partial_ || partial_->index() != batch_ || partial_->epoch() != label_epoch_) {
    partial_ = std::make_shared<ConsumerBatch>(label_epoch_, batch_, hi - lo);
    partial_->own_images.resize(static_cast<size_t>(hi - lo) * sb);
    partial_->own_labels.resize(static_cast<size_t>(hi - lo));
    partial_->own_indices.resize(static_cast<size_t>(hi - lo));
    partial_->own_fields.Resize(static_cast<int>(seg_->g.field_count), hi - lo);
    if (ragged) partial_->own_dims.resize(static_cast<size_t>(3 * (hi - lo)));
    partial_pos_ = lo;
  }
  while (partial_pos_ < hi) {
    const int64_t i = ChunkIndex(partial_pos_);
    std::shared_ptr<ChunkLease> c;
    Status st = feed_.Acquire(EpochBase() + i, deadline, &c);
    if (st.ok() && c) st = c->damaged;
    if (!st.ok()) {
      partial_.reset();
      return st;
    }
    if (!c) return Status::OK();
    const int64_t from = partial_pos_ - prefix_[i];
    const int64_t take = std::min(hi, prefix_[i + 1]) - partial_pos_;
    const int64_t to = partial_pos_ - lo;
    uint8_t* images = partial_->own_images.data();
    if (ragged) {
      const uint64_t cs = c->stride;
      for (int64_t k = 0; k < take; ++k) {
        const int64_t* dims = &c->dims[static_cast<size_t>(3 * (from + k))];
        std::copy(dims, dims + 3, &partial_->own_dims[static_cast<size_t>(3 * (to + k))]);
        CopyPadded(c->images + (from + k) * cs, c->padded.data(), dims, images + (to + k) * sb, dims, elem);
      }
    } else {
      std::memcpy(images + to * sb, c->images + from * sb, take * sb);
    }
    std::memcpy(partial_->own_labels.data() + to, c->labels + from, take * sizeof(int64_t));
    std::memcpy(partial_->own_indices.data() + to, c->indices + from, take * sizeof(int64_t));
    CopyFields(*c, from, to, take, &partial_->own_fields);
    partial_pos_ += take;
    // Kept: the next batch most likely starts in it; the one before goes
    // when the next chunk is acquired.
    feed_.Hold(std::move(c), EpochBase() + i);
  }
  ++copied_batches_;
  std::shared_ptr<ConsumerBatch> batch = std::move(partial_);
  if (ragged) {
    int64_t padded[3];
    // (Every shape was checked against the bound with its chunk.)
    NOSTALL_RETURN_IF_ERROR(PaddedShape(seg_->g, batch->own_dims.data(), hi - lo, padded));
    std::vector<int64_t> all(static_cast<size_t>(hi - lo));
    for (size_t k = 0; k < all.size(); ++k) all[k] = static_cast<int64_t>(k);
    PadInPlace(batch->own_images.data(), sb, elem, batch->own_dims.data(), all, padded);
    batch->padded_.assign(padded, padded + 3);
    batch->dims_ = batch->own_dims.data();
  }
  batch->images_ = batch->own_images.data();
  batch->labels_ = batch->own_labels.data();
  batch->indices_ = batch->own_indices.data();
  *out = std::move(batch);
  return Status::OK();
}

LoaderStats Consumer::Stats() const {
  LoaderStats st;
  MutexLock lock(&mu_);
  feed_.AddStats(&st);
  consumer_.Fill(&st);
  for (const auto& e : st.consumer_epochs) {
    st.batches += e.batches;
    st.samples += e.samples;
  }
  st.has_shared = true;
  st.shared_name = seg_->label;
  st.copied_batches = copied_batches_;
  const std::vector<FieldSpec> extra = ExtraFields(spec_);
  for (size_t f = 0; f < extra.size(); ++f) {
    st.field_bytes.push_back({extra[f].name, f < field_bytes_.size() ? field_bytes_[f] : 0});
  }
  st.elapsed_ns = NowNs() - created_ns_;
  return st;
}

namespace {

// A row of the consumer table: owned once its pid is ours.
Result<std::shared_ptr<Registration>> ClaimRow(const std::shared_ptr<Segment>& seg,
                                               const std::string& name) {
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
  return reg;
}

}  // namespace

Result<std::unique_ptr<Loader>> AttachShared(const std::string& name, const AttachOptions& options) {
  NOSTALL_ASSIGN_OR_RETURN(SegmentRef ref, ParseSegmentRef(name));
  NOSTALL_RETURN_IF_ERROR(ValidName(ref.name));
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
    const uint32_t state = h->state.load();
    const std::string why = state == kFailed ? "its producer failed: " + std::string(h->error, strnlen(h->error, sizeof h->error))
                            : state == kClosed ? "its producer stopped"
                                               : "its producer (pid " + std::to_string(h->producer_pid) + ") died";
    return FailedPrecondition("shared loader '" + name + "' has no running producer (" + why + ")");
  }
  Result<LoaderSpec> served = LoaderSpec::FromJson(seg->Spec());
  if (!served.ok()) {
    return FailedPrecondition("shared loader '" + name + "' is damaged (its spec: " +
                              served.status().message() + ")");
  }
  LoaderSpec producer_spec = std::move(served).value();
  if (ref.others) {
    // Another user's pipeline: its spec (the dataset it names, the cache it
    // uses) is run by this process only if it is the one this user gave.
    if (options.expect_spec_json.empty()) {
      return PermissionDenied("shared loader '" + name + "' is " + UserText(ref.owner) +
                              "'s: attach to another user's loader with your own spec "
                              "(Loader.attach(..., spec=...)), which it must serve");
    }
    NOSTALL_ASSIGN_OR_RETURN(LoaderSpec mine, LoaderSpec::FromJson(options.expect_spec_json));
    auto normal = [](LoaderSpec s) {
      s.batch_size = 1;
      s.shuffle_block = 0;
      s.drop_last = false;
      return s.BatchJson();
    };
    if (normal(mine) != normal(producer_spec)) {
      return FailedPrecondition("shared loader '" + name + "' serves another pipeline than the "
                                "spec given");
    }
    // From here on this consumer runs its own spec (its dataset, endpoint,
    // caches, threads): only the stream's geometry is the producer's.
    mine.batch_size = producer_spec.batch_size;
    mine.shuffle_block = producer_spec.shuffle_block;
    mine.drop_last = producer_spec.drop_last;
    producer_spec = std::move(mine);
  }
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

  NOSTALL_ASSIGN_OR_RETURN(std::shared_ptr<Registration> reg, ClaimRow(seg, name));
  const uint32_t me = reg->me;
  int64_t start = 0;
  if (!seg->EnterStream(me, kClaimed, 1000, &start)) {
    return Internal("could not find a starting chunk in '" + name + "'");
  }
  return std::unique_ptr<Loader>(new Consumer(std::move(seg), std::move(reg), producer_spec,
                                              std::move(spec), std::move(source), std::move(sampler),
                                              options, start));
}

Result<SharedPosition> SharedPositionOf(const Loader& loader) {
  std::optional<StreamPosition> p = loader.stream_position();
  if (!p) return InvalidArgument("not a consumer of a shared loader");
  return *p;
}

Status ResumeShared(Loader* loader, int64_t epoch, const SharedPosition& position,
                    int64_t first_batch) {
  if (!loader->stream_position()) return InvalidArgument("not a consumer of a shared loader");
  return loader->Resume(epoch, first_batch, position);
}

}  // namespace nostall
