// Shared loader, a consumer's chunks (chunk_feed.h, docs/ring_format.md):
// pinning a slot of the segment, noticing the producer is gone, falling back
// to a private pipeline at the exact position and rejoining the segment when
// it holds what comes next.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "common/clock.h"
#include "common/process.h"
#include "ring/ragged.h"
#include "shared/chunk_feed.h"

namespace nostall {

using namespace ring;  // NOLINT: this file is the ring's consumer

ChunkFeed::ChunkFeed(std::shared_ptr<Segment> seg, std::shared_ptr<Registration> reg,
                     LoaderSpec producer_spec, AttachOptions options)
    : seg_(std::move(seg)), reg_(std::move(reg)), me_(reg_->me),
      producer_spec_(std::move(producer_spec)), options_(options) {}

void ChunkFeed::Hold(std::shared_ptr<ChunkLease> chunk, int64_t seq) {
  held_ = std::move(chunk);
  held_seq_ = seq;
}

bool ChunkFeed::RejoinAtEpoch(int64_t* at) {
  if (mode_ != "private" || producer_gone_ || !seg_->EnterStream(me_, kLagged, 3, at)) return false;
  mode_ = "shared";
  ++rejoins_;
  return true;
}

void ChunkFeed::GoPrivate(const std::string& why) {
  ConsumerRow& row = seg_->consumers[me_];
  row.state.store(kLagged);
  row.need.store(kNone);
  Bump(&seg_->h->released_gen);
  held_.reset();
  mode_ = "private";
  reason_ = why;
}

void ChunkFeed::AddStats(LoaderStats* st) const {
  if (private_) {
    LoaderStats p = private_->Stats();
    st->fetch = p.fetch;
    st->prep = p.prep;
    st->batch = p.batch;
  }
  st->shared_mode = mode_;
  st->shared_reason = reason_;
  st->shared_chunks = shared_chunks_;
  st->private_chunks = private_chunks_;
  st->fallbacks = fallbacks_;
  st->rejoins = rejoins_;
}

std::shared_ptr<ChunkLease> ChunkFeed::SharedLease(uint32_t s) {
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
  c->stride = seg_->g.sample_bytes;
  if (seg_->g.ragged()) {
    // (The count is the producer's to write: never past the slot.)
    const int64_t n = std::clamp<int64_t>(c->count, 0, seg_->g.chunk);
    const int64_t* dims = seg_->dims(s);
    c->dims.assign(dims, dims + 3 * n);
    int64_t padded[3];
    c->damaged = PaddedShape(seg_->g, c->dims.data(), n, padded);
    c->padded.assign(padded, padded + 3);
    if (c->damaged.ok()) c->stride = seg_->g.padded_bytes(padded);
  }
  return c;
}

int ChunkFeed::TryPin(int64_t seq, std::shared_ptr<ChunkLease>* out) {
  uint32_t s = 0;
  const int r = seg_->Pin(me_, seq, &s);
  if (r == 1) *out = SharedLease(s);  // the lease takes over the pin
  return r;
}

std::string ChunkFeed::ProducerGone() const {
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

Status ChunkFeed::Acquire(int64_t seq, int64_t deadline, std::shared_ptr<ChunkLease>* out) {
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
          return FailedPrecondition("shared loader '" + seg_->label + "': " + gone +
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

Status ChunkFeed::Fallback(const std::string& why, int64_t seq, int64_t deadline, std::shared_ptr<ChunkLease>* out) {
  ConsumerRow& row = seg_->consumers[me_];
  uint32_t active = kActive;
  row.state.compare_exchange_strong(active, kLagged);  // stop holding the producer back
  Bump(&seg_->h->released_gen);
  mode_ = "private";
  reason_ = why;
  ++fallbacks_;
  return FromPrivate(seq, deadline, out);
}

bool ChunkFeed::TryRejoin(int64_t seq, std::shared_ptr<ChunkLease>* out) {
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

Status ChunkFeed::FromPrivate(int64_t seq, int64_t deadline, std::shared_ptr<ChunkLease>* out) {
  const int64_t k = seg_->g.chunks_per_epoch;
  if (!private_) {
    // Slots for the views this consumer may hand out (kMaxLiveViews),
    // the chunk it holds and one being made.
    LoaderSpec spec = producer_spec_;
    spec.prefetch = std::max(spec.prefetch, kMaxLiveViews);
    spec.first_epoch = "exact";  // the producer's order, chunk for chunk
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
  c->stride = seg_->g.sample_bytes;
  if (const int64_t* dims = b->sample_dims()) {
    c->dims.assign(dims, dims + 3 * b->size());
    c->padded = b->padded_shape();
    c->stride = seg_->g.padded_bytes(c->padded.data());
  }
  c->private_batch = std::move(b);
  c->live = live_;
  live_->fetch_add(1);
  ++private_chunks_;
  *out = std::move(c);
  return Status::OK();
}

}  // namespace nostall
