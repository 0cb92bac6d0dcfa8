// The scheduler (scheduler.h): positions, slots and generations, handed
// over between the caller, the fetch threads and the prep threads.
#include "pipeline/scheduler.h"

#include <algorithm>
#include <chrono>

#include "common/clock.h"

namespace nostall {
Scheduler::Scheduler(const Sampler& sampler, std::shared_ptr<RingState> ring,
                     ConsumerRecorder* consumer, const Options& options)
    : sampler_(sampler), ring_(std::move(ring)), consumer_(consumer), opt_(options),
      order_(options.batch_size) {
  MutexLock lock(&ring_->mu);
  slots_.emplace(&ring_->slots, opt_.batch_size, opt_.slot_limit, opt_.own_ring);
  prep_active_ = opt_.prep_threads;
  prep_threads_.store(opt_.prep_threads);
  fetch_active_ = opt_.fetch_threads;
  read_limit_.store(opt_.read_limit);
}

// ---- room ------------------------------------------------------------------

// Fetched items wait for a prep thread in the prep queue. Its bound counts
// the reads in flight too (memory stays bounded), but it leaves room for
// every read: bounded by the queue alone, items waiting for prep would take
// the places of reads and fewer than reads_in_flight reads would run
// whenever prep is busy (on slow storage, a loss of throughput).
bool Scheduler::RoomToFetch() const {
  const size_t limit = static_cast<size_t>(ReadLimitNow());
  if (!opt_.async) return prep_queue_.size() + fetching_ < limit + PrepQueueRoom();
  return static_cast<size_t>(fetching_) < limit &&
         prep_queue_.size() + fetching_ < limit + PrepQueueRoom();
}

// ---- the consumer's side ----------------------------------------------------

Status Scheduler::StartEpoch(int64_t epoch, int64_t first_batch) {
  if (epoch < 0) return InvalidArgument("epoch must be >= 0");
  if (first_batch < 0) return InvalidArgument("batch " + std::to_string(first_batch) + " is negative");
  if (first_batch > 0) {  // (a buffered epoch's count waits for its shards)
    const int64_t nb = sampler_.BatchesPerEpoch();
    if (first_batch > nb) {
      return InvalidArgument("batch " + std::to_string(first_batch) + " is outside the epoch's " +
                             std::to_string(nb) + " batches");
    }
  }
  MutexLock lock(&ring_->mu);
  if (first_batch == 0 && RunOnInto(lock.native(), epoch)) {
    consumer_->EpochStarted();
    lock.Unlock();
    ring_->slot_freed.notify_all();
    return Status::OK();
  }
  lock.Unlock();
  std::unique_ptr<EpochStream> order = sampler_.OpenEpoch(epoch);  // outside the lock
  lock.Lock();
  Restart(lock.native(), epoch, first_batch, std::move(order));
  consumer_->EpochStarted();
  lock.Unlock();
  work_cv_.notify_all();
  ring_->slot_freed.notify_all();
  return Status::OK();
}

// The fetchers ran on into `epoch` when the last one ran out: keep that
// work. Batches of other epochs still being made finish first, then every
// slot not holding this epoch (or leased) is freed. False: they did not.
bool Scheduler::RunOnInto(std::unique_lock<std::mutex>& native, int64_t epoch) {
  if (!started_ || order_.epoch() != epoch || epoch_ == epoch) return false;
  if (sampler_.Elastic(epoch) || sampler_.Planned()) return false;  // run on into as a whole epoch: not this one
  while (!cancelled_ && slots().FillingOtherThan(epoch)) ready_cv_.wait(native);
  slots().FreeAll(SlotState::kReady, /*but_epoch=*/epoch);
  epoch_ = epoch;
  consume_batch_ = 0;
  NoteOrderEnd();
  return true;
}

// A new generation from `first_batch` of `epoch`. Work of the old epoch
// already running must finish before its slots are handed to the new one;
// it takes one decode at most. Meanwhile no fetcher may start a batch: it
// would carry the new generation with the old epoch's position, and its
// samples would land in a slot of the new epoch.
void Scheduler::Restart(std::unique_lock<std::mutex>& native, int64_t epoch, int64_t first_batch,
                        std::unique_ptr<EpochStream> order) {
  ++generation_;
  restarting_ = true;
  while (active_preps_ != 0) idle_cv_.wait(native);
  prep_queue_.Clear();
  slots().FreeAllButLeased();
  epoch_ = epoch;
  order_.Reset(epoch, std::move(order), first_batch);
  extending_ = false;  // a read of the old stream still running is dropped when it returns
  consume_batch_ = first_batch;
  NoteOrderEnd();
  started_ = true;
  restarting_ = false;
}

void Scheduler::NoteOrderEnd() {
  const bool mine = order_.epoch() == epoch_;
  num_batches_ = mine && order_.final() ? order_.batches() : -1;
  order_error_ = mine ? order_.error() : Status::OK();
}

// The order's stream is read without the lock (a buffered epoch's next
// shard may take a while to be indexed); the other fetchers wait meanwhile.
void Scheduler::ExtendOrder(std::unique_lock<std::mutex>& native) {
  std::unique_ptr<EpochStream> stream = order_.TakeStream();
  const uint64_t generation = generation_;
  extending_ = true;
  native.unlock();
  std::vector<int64_t> more;
  bool final = false;
  Status st = stream->More(&more, &final);
  native.lock();
  if (generation_ != generation || cancelled_) return;  // a new epoch began meanwhile
  extending_ = false;
  order_.Extend(std::move(stream), std::move(more), final, std::move(st));
  if (order_.final() && order_.epoch() == epoch_) {
    NoteOrderEnd();
    ready_cv_.notify_all();  // the caller may be at the epoch's end
  }
  work_cv_.notify_all();
}

Status Scheduler::Next(int64_t timeout_ms, NextStatus* status, std::shared_ptr<Batch>* out) {
  int64_t t0 = NowNs();
  MutexLock lock(&ring_->mu);
  if (!started_) return FailedPrecondition("StartEpoch was not called");
  consumer_->CallStarted(epoch_, t0);
  while (true) {
    Status error;
    const int64_t found = WaitReady(lock.native(), timeout_ms, t0, status, &error);
    if (found < 0) return error;
    bool again = false;
    Status st = HandOut(static_cast<uint64_t>(found), status, out, &again);
    if (!again) return st;
    t0 = NowNs();
  }
}

// Waits for the next batch of this epoch to be ready: its slot, or -1 with
// *status (end of epoch, timeout) or *error set.
int64_t Scheduler::WaitReady(std::unique_lock<std::mutex>& native, int64_t timeout_ms, int64_t t0,
                             NextStatus* status, Status* error) {
  auto over = [&]() REQUIRES(ring_->mu) {
    if (!EpochOver()) return false;
    if (order_error_.ok()) {
      *status = NextStatus::kEndOfEpoch;
    } else {
      *error = order_error_;  // where the order broke (a shard that cannot be indexed)
    }
    return true;
  };
  if (over()) return -1;
  int64_t found = -1;
  bool starved_by_caller = false;
  auto ready = [&]() REQUIRES(ring_->mu) {
    found = slots().Find(SlotState::kReady, consume_batch_, epoch_);
    // Every slot leased to the caller: no batch can be made until it lets
    // one go, so waiting would be forever. Its own ring has a spare slot
    // for that: the next batch is made there and leaves as a copy.
    // (Not while the batch waited for is being made in a slot already: it
    // comes without any other slot.)
    starved_by_caller = found < 0 && slots().AllLeased() &&
                        slots().Find(SlotState::kFilling, consume_batch_, epoch_) < 0;
    if (starved_by_caller && slots().OpenSpare()) {
      starved_by_caller = false;
      work_cv_.notify_all();
      ring_->slot_freed.notify_all();
    }
    return cancelled_ || found >= 0 || starved_by_caller || EpochOver();
  };
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0));
  bool ok = true;
  while (!ready()) {
    if (timeout_ms < 0) {
      ready_cv_.wait(native);
    } else if (ready_cv_.wait_until(native, deadline) == std::cv_status::timeout) {
      ok = ready();
      break;
    }
  }
  consumer_->Waited(epoch_, NowNs() - t0);
  if (!ok) {
    consumer_->TimedOut();
    *status = NextStatus::kTimeout;
    return -1;
  }
  if (cancelled_) {
    *error = Cancelled("loader shut down");
    return -1;
  }
  if (found < 0 && over()) return -1;
  if (starved_by_caller) {
    // A loader's own ring opens its spare slot instead (above); a shared
    // producer's ring, which has none, gets here.
    *error = FailedPrecondition(
        "all " + std::to_string(slots().size()) +
        " batch slots are held by batches still referenced, so no new batch can be made; "
        "drop references to old batches, or keep copies (copy=True), or raise prefetch");
    return -1;
  }
  return found;
}

// Hands out the ready batch in `s`: as a lease on its slot, or a copy when
// the caller holds every other slot. *again: it was empty and dropped.
Status Scheduler::HandOut(uint64_t s, NextStatus* status, std::shared_ptr<Batch>* out,
                          bool* again) {
  PipelineSlot& h = slots()[s];
  const int64_t index = consume_batch_++;
  SlotWork& w = slots().work(s);
  // Counted as the caller meets them, not as made (the pipeline may be
  // working ahead, even into the next epoch).
  met_.errors.fetch_add(w.bad_items);
  met_.skipped.fetch_add(w.skipped);
  if (!w.error.ok()) {
    consumer_->Delivered(epoch_, 0, NowNs());  // the caller met the batch, as an error
    Status err = w.error;
    w.error = Status::OK();
    Free(s);
    return err;
  }
  if (h.count == 0 && opt_.own_ring) {
    // Every item of the batch was skipped: a batch of no samples would make
    // the caller's loss NaN. Dropped (counted), and the next one is taken.
    met_.empty_dropped.fetch_add(1);
    Free(s);
    *again = true;
    return Status::OK();
  }
  met_.samples.fetch_add(h.count);
  met_.batches.fetch_add(1);
  consumer_->Delivered(epoch_, h.count, NowNs());
  *status = NextStatus::kBatch;
  *out = slots().HandOut(s, index, ring_);
  if ((*out)->copied()) {
    met_.private_copies.fetch_add(1);
    ring_->slot_freed.notify_all();
  }
  return Status::OK();
}

void Scheduler::Free(uint64_t s) {
  slots()[s].state = SlotState::kFree;
  ring_->slot_freed.notify_all();
}

// ---- the fetchers -----------------------------------------------------------

// Waits until a sample position can be fetched (an epoch started, a slot
// for its batch, room in the prep queue), or until this epoch is all
// dispatched (then `*current` is the epoch to run on from), or shutdown.
// Time spent waiting goes into the fetch stage's starved or blocked time.
Scheduler::Position Scheduler::WaitForPosition(std::unique_lock<std::mutex>& native,
                                               int64_t* current, StageCounters* fetch) {
  const int64_t t0 = NowNs();
  // Starved: no sample left to fetch. Blocked: the next batch's slot is
  // still in use, or the prep queue is full.
  bool blocked = false;
  Position result = Position::kCancelled;
  while (!cancelled_) {
    if (restarting_ || !started_ || (order_.done() && (order_.epoch() != epoch_ || sampler_.Planned()))) {
      blocked = false;  // nothing to fetch until the caller starts an epoch (planned: another pass)
    } else if (order_.done()) {
      *current = epoch_;
      result = Position::kNextEpoch;
      break;
    } else if (!order_.Ready()) {
      blocked = false;  // the order must grow: one thread reads it, the others wait
      if (!extending_) {
        result = Position::kExtend;
        break;
      }
    } else {
      // A new batch needs a free slot; any will do, so a batch the
      // caller still holds never blocks the ones after it.
      if ((!order_.NeedsSlot() || slots().ToClaim() >= 0) && RoomToFetch()) {
        result = Position::kReady;
        break;
      }
      blocked = true;
    }
    if (blocked) {
      ring_->slot_freed.wait(native);
    } else {
      work_cv_.wait(native);
    }
  }
  (blocked ? fetch->blocked_ns : fetch->starved_ns).fetch_add(NowNs() - t0);
  return result;
}

// This epoch is all dispatched: run on into the next one (its order `next`
// made without the lock), so its first batches are ready when the caller
// asks (no bubble between epochs). StartEpoch keeps this work if it asks for
// that epoch; if it started another meanwhile, `next` is dropped.
void Scheduler::RunOn(int64_t current, std::unique_ptr<EpochStream> next) {
  if (epoch_ == current && order_.epoch() == current && order_.done() && !cancelled_) {
    order_.Reset(current + 1, std::move(next), 0);
  }
}

// Takes the next position: its batch claims a free slot when it starts.
FetchedItem Scheduler::ClaimPosition(bool prefetch) {
  const int64_t b = order_.next_batch();
  if (order_.NeedsSlot()) {
    const uint64_t s = static_cast<uint64_t>(slots().ToClaim());
    slots().Claim(s, order_.epoch(), b, order_.BatchCount(b));
    order_.set_slot(static_cast<int64_t>(s));
  }
  FetchedItem fi;
  fi.generation = generation_;
  fi.epoch = order_.epoch();
  fi.batch = b;
  fi.slot = static_cast<uint64_t>(order_.slot());
  fi.pos = order_.next_in_batch();
  fi.item = order_.Take();
  fi.buffered = sampler_.Buffered(fi.epoch);
  fi.bytes = prep_queue_.Buffer();
  // A batch's first position lists what the cache is asked for: this batch
  // and the next (the first of an epoch: the next only).
  if (prefetch && fi.pos == 0) {
    for (int64_t batch = b == 0 ? 0 : b + 1; batch <= b + 1; ++batch) {
      order_.AppendBatch(batch, &fi.prefetch);
    }
  }
  return fi;
}

bool Scheduler::NextFetch(int index, bool prefetch, FetchedItem* done, FetchedItem* fi,
                          StageCounters* fetch) {
  MutexLock lock(&ring_->mu);
  if (done != nullptr) Queue(std::move(*done));
  // Beyond the fetch threads asked for now: parked until the tuner asks for more.
  while (!cancelled_ && index >= 0 && index >= fetch_active_) park_cv_.wait(lock.native());
  while (true) {
    int64_t current = 0;
    const Position p = WaitForPosition(lock.native(), &current, fetch);
    if (p == Position::kCancelled) return false;
    if (p == Position::kReady) break;
    if (p == Position::kExtend) {
      ExtendOrder(lock.native());
      continue;
    }
    lock.Unlock();
    std::unique_ptr<EpochStream> next = sampler_.OpenEpoch(current + 1);
    lock.Lock();
    RunOn(current, std::move(next));
  }
  *fi = ClaimPosition(prefetch);
  fetch->InFlight(++fetching_);
  return true;
}

void Scheduler::Fetched(FetchedItem fi) {
  MutexLock lock(&ring_->mu);
  Queue(std::move(fi));
  if (opt_.async) {
    ring_->slot_freed.notify_all();  // room for the dispatcher
    if (fetching_ == 0) reads_done_cv_.notify_all();
  }
}

void Scheduler::Queue(FetchedItem fi) {
  --fetching_;
  prep_queue_.Push(std::move(fi));
  prep_cv_.notify_one();
}

// ---- the preparers ----------------------------------------------------------

Scheduler::PrepTurn Scheduler::PrepStep(int index, FetchedItem* fi, const Status* result,
                                        StageCounters* prep, Finished* finished) {
  MutexLock lock(&ring_->mu);
  if (result != nullptr) {
    prep_queue_.Recycle(std::move(fi->bytes));
    if (slots().SampleDone(fi->slot, fi->pos, *result, opt_.on_error_skip, fi->item == kHole)) {
      // The slot is this thread's alone until published: StartEpoch waits
      // for it (active_preps_ stays counted).
      *finished = Finished{fi->slot, slots()[fi->slot].count, &slots().work(fi->slot).bad};
      return PrepTurn::kBatchDone;
    }
    if (--active_preps_ == 0) idle_cv_.notify_all();
  }
  return TakeForPrep(lock.native(), index, fi, prep) ? PrepTurn::kItem : PrepTurn::kStop;
}

bool Scheduler::TakeForPrep(std::unique_lock<std::mutex>& native, int index, FetchedItem* fi,
                            StageCounters* prep) {
  while (true) {
    // Beyond the threads asked for now: parked, not starved.
    while (!cancelled_ && index >= prep_active_) park_cv_.wait(native);
    const int64_t t0 = NowNs();
    while (!cancelled_ && index < prep_active_ && prep_queue_.empty()) prep_cv_.wait(native);
    prep->starved_ns.fetch_add(NowNs() - t0);
    if (cancelled_) return false;
    if (index >= prep_active_) continue;
    *fi = prep_queue_.Pop();
    // Room in the prep queue for one more read: one waiter is woken. Every
    // fetcher waits for the same thing (the next position, its slot, room),
    // so any of them can take it; waking them all cost a wake-up per waiting
    // fetcher per item (with 64 fetch threads, a quarter of the throughput
    // on two cores).
    ring_->slot_freed.notify_one();
    if (fi->generation != generation_) {
      prep_queue_.Recycle(std::move(fi->bytes));
      continue;
    }
    ++active_preps_;
    return true;
  }
}

void Scheduler::Publish(const FetchedItem& fi, const Finished& f, int64_t kept) {
  MutexLock lock(&ring_->mu);
  slots().Complete(f.slot, f.count, kept);
  if (--active_preps_ == 0) idle_cv_.notify_all();
  if (fi.generation == generation_) {
    slots()[f.slot].state = SlotState::kReady;
    ready_cv_.notify_all();
  }
}

// ---- knobs, shutdown, counts ------------------------------------------------

Scheduler::Knobs Scheduler::knobs() const {
  MutexLock lock(&ring_->mu);
  return {prep_active_, fetch_active_, read_limit(), slots().limit()};
}

void Scheduler::SetKnobs(const Knobs& k) {
  {
    MutexLock lock(&ring_->mu);
    prep_active_ = k.prep_threads;
    fetch_active_ = k.fetch_threads;
    slots().set_limit(k.slot_limit);
    prep_threads_.store(k.prep_threads, std::memory_order_relaxed);
  }
  SetReadLimit(k.read_limit);
  park_cv_.notify_all();
  prep_cv_.notify_all();
  work_cv_.notify_all();
  ring_->slot_freed.notify_all();
}

void Scheduler::Cancel() {
  {
    MutexLock lock(&ring_->mu);
    cancelled_ = true;
  }
  ring_->slot_freed.notify_all();
  work_cv_.notify_all();
  prep_cv_.notify_all();
  park_cv_.notify_all();
  ready_cv_.notify_all();
}

void Scheduler::WaitForReads() {
  MutexLock lock(&ring_->mu);
  while (fetching_ != 0) reads_done_cv_.wait(lock.native());
}

Scheduler::Counts Scheduler::counts() const {
  Counts c;
  {
    MutexLock lock(&ring_->mu);
    c.consumer_epoch = started_ ? epoch_ : -1;
  }
  c.batches = met_.batches.load();
  c.samples = met_.samples.load();
  c.errors = met_.errors.load();
  c.skipped = met_.skipped.load();
  c.empty_dropped = met_.empty_dropped.load();
  c.private_copies = met_.private_copies.load();
  return c;
}

}  // namespace nostall
