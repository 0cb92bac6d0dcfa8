// The pipeline's workers: fetch threads (position, slot, read) and prep
// threads (decode into the slot, publish the batch). The class and the
// consumer's side (StartEpoch, Next) are pipeline_loader.h/.cc.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/clock.h"
#include "ops/prep.h"
#include "pipeline/pipeline_loader.h"

namespace nostall {

// Waits until a sample position can be fetched (an epoch started, a slot
// for its batch, room in the prep queue), or until this epoch is all
// dispatched (then `*current` is the epoch to run on from), or shutdown.
// Time spent waiting goes into the fetch stage's starved or blocked time.
PipelineLoader::Position PipelineLoader::WaitForPosition(std::unique_lock<std::mutex>& native,
                                                         int64_t t0, int64_t* current) {
  // Starved: no sample left to fetch. Blocked: the next batch's slot is
  // still in use, or the prep queue is full.
  bool blocked = false;
  Position result = Position::kCancelled;
  while (!cancelled_) {
    if (restarting_ || !started_ || (cursor_ >= SamplesThisEpoch() && fetch_epoch_ != epoch_)) {
      blocked = false;  // nothing to fetch until the caller starts an epoch
    } else if (cursor_ >= SamplesThisEpoch()) {
      *current = epoch_;
      result = Position::kNextEpoch;
      break;
    } else {
      // A new batch needs a free slot; any will do, so a batch the
      // caller still holds never blocks the ones after it.
      const bool have_slot = cursor_ % spec_.batch_size != 0 && fill_slot_ >= 0;
      if ((have_slot || SlotToClaim() >= 0) && RoomToFetch()) {
        result = Position::kReady;
        break;
      }
      blocked = true;
    }
    if (blocked) {
      state_->slot_freed.wait(native);
    } else {
      work_cv_.wait(native);
    }
  }
  (blocked ? fetch_.blocked_ns : fetch_.starved_ns).fetch_add(NowNs() - t0);
  return result;
}

// This epoch is all dispatched: run on into the next one (its order `next`
// made without the lock), so its first batches are ready when the caller
// asks (no bubble between epochs). StartEpoch keeps this work if it asks for
// that epoch; if it started another meanwhile, `next` is dropped.
void PipelineLoader::RunOn(int64_t current, std::vector<int64_t> next) {
  if (epoch_ == current && fetch_epoch_ == current && cursor_ >= SamplesThisEpoch() &&
      !cancelled_) {
    fetch_epoch_ = current + 1;
    order_ = std::move(next);
    cursor_ = 0;
    fill_slot_ = -1;
  }
}

// Takes the next position: its batch claims a free slot when it starts.
FetchedItem PipelineLoader::ClaimPosition() {
  const int64_t pos_in_epoch = cursor_++;
  const int64_t b = pos_in_epoch / spec_.batch_size;
  if (pos_in_epoch % spec_.batch_size == 0 || fill_slot_ < 0) {
    const uint64_t s = static_cast<uint64_t>(SlotToClaim());
    PipelineSlot& h = state_->slots[s];
    h.epoch = fetch_epoch_;
    h.batch_index = b;
    h.count = BatchCount(b);
    h.state = SlotState::kFilling;
    work_[s].remaining = h.count;
    work_[s].error = Status::OK();
    work_[s].error_pos = -1;
    work_[s].bad_items = 0;
    work_[s].skipped = 0;
    std::fill(work_[s].bad.begin(), work_[s].bad.end(), 0);
    fill_slot_ = static_cast<int64_t>(s);
  }
  FetchedItem fi;
  fi.generation = generation_;
  fi.epoch = fetch_epoch_;
  fi.batch = b;
  fi.slot = static_cast<uint64_t>(fill_slot_);
  fi.pos = pos_in_epoch % spec_.batch_size;
  fi.item = order_[static_cast<size_t>(pos_in_epoch)];
  if (!free_buffers_.empty()) {
    fi.bytes = std::move(free_buffers_.back());
    free_buffers_.pop_back();
  }
  if (cache_ && pos_in_epoch % spec_.batch_size == 0) {
    // (A loop, not a lambda: the lock analysis does not follow into one.)
    for (int64_t batch = b == 0 ? 0 : b + 1; batch <= b + 1; ++batch) {
      const int64_t first = batch * spec_.batch_size;
      const int64_t last = std::min(SamplesThisEpoch(), first + spec_.batch_size);
      for (int64_t p = first; p < last; ++p) fi.prefetch.push_back(order_[static_cast<size_t>(p)]);
    }
  }
  return fi;
}

void PipelineLoader::NameFetchError(FetchedItem* fi) const {
  if (fi->status.ok()) return;
  // A file that vanished or cannot be read is a bad item, handled by the
  // error policy; running out of descriptors is not the item's fault.
  const StatusCode code = fi->status.code() == StatusCode::kResourceExhausted
                              ? fi->status.code()
                              : StatusCode::kDataError;
  fi->status = Status(code, fi->status.message()).WithItem(source_->key(fi->item), "fetch");
}

void PipelineLoader::CacheMiss(FetchedItem* fi, bool lookup_failed) {
  if (!cache_) return;
  CountCache(fi->epoch, /*hit=*/false, lookup_failed, fi->bytes.size());
  if (fi->status.ok() && cache_->Insert(fi->item, fi->bytes.data(), fi->bytes.size())) {
    cache_inserted_bytes_.fetch_add(static_cast<int64_t>(fi->bytes.size()));
  }
}

// A batch's first position asks the cache for the batch's items at once.
void PipelineLoader::PrefetchFromCache(FetchedItem* fi) {
  if (fi->prefetch.empty()) return;
  cache_->Prefetch(fi->prefetch.data(), fi->prefetch.size());
  fi->prefetch.clear();
}

// Reads `fi`'s bytes (from the cache, else from the source, caching them),
// without the lock; a failed read travels on in `fi->status`.
void PipelineLoader::Fetch(FetchedItem* fi) {
  const int64_t cpu0 = ThreadCpuNs(), wall0 = NowNs();
  PrefetchFromCache(fi);
  // A tier that cannot answer costs a hit, never the item: it is read from storage.
  Result<bool> hit = cache_ ? cache_->Lookup(fi->item, &fi->bytes) : Result<bool>(false);
  if (hit.ok() && hit.value()) {
    CountCache(fi->epoch, /*hit=*/true, !hit.ok(), fi->bytes.size());
  } else {
    fi->status = source_->Read(fi->item, &fi->bytes);
    CacheMiss(fi, !hit.ok());
  }
  NameFetchError(fi);
  fetch_.busy_cpu_ns.fetch_add(ThreadCpuNs() - cpu0);
  fetch_.work_ns.fetch_add(NowNs() - wall0);
  fetch_.items.fetch_add(1);
  fetch_.bytes.fetch_add(static_cast<int64_t>(fi->bytes.size()));
}

// Waits for the next sample position (running on into the next epoch when
// this one is all dispatched) and claims it as a read in flight; false at
// shutdown.
bool PipelineLoader::TakePosition(std::unique_lock<std::mutex>& native, FetchedItem* fi) {
  while (true) {
    int64_t current = 0;
    const Position p = WaitForPosition(native, NowNs(), &current);
    if (p == Position::kCancelled) return false;
    if (p == Position::kReady) break;
    native.unlock();
    std::vector<int64_t> next = sampler_.EpochOrder(current + 1);
    native.lock();
    RunOn(current, std::move(next));
  }
  *fi = ClaimPosition();
  fetch_.InFlight(++fetching_);
  return true;
}

void PipelineLoader::FetchLoop(int index) {
  MutexLock lock(&state_->mu);
  FetchedItem fi{};
  while (true) {
    // Beyond the reads asked for now: parked until the tuner asks for more.
    while (!cancelled_ && index >= fetch_active_) park_cv_.wait(lock.native());
    if (!TakePosition(lock.native(), &fi)) return;
    lock.Unlock();
    Fetch(&fi);
    lock.Lock();
    --fetching_;
    prep_queue_.push_back(std::move(fi));
    prep_cv_.notify_one();
  }
}

// Remote sources: one thread starts every read (Source::ReadAsync); each
// completes on the source's I/O thread (ReadDone). Cache hits skip the
// source. The reads in flight are bounded by `read_limit_` (RoomToFetch).
void PipelineLoader::DispatchLoop() {
  MutexLock lock(&state_->mu);
  FetchedItem fi{};
  while (TakePosition(lock.native(), &fi)) {
    lock.Unlock();
    const int64_t cpu0 = ThreadCpuNs(), wall0 = NowNs();
    PrefetchFromCache(&fi);
    Result<bool> hit = cache_ ? cache_->Lookup(fi.item, &fi.bytes) : Result<bool>(false);
    if (hit.ok() && hit.value()) {
      CountCache(fi.epoch, /*hit=*/true, false, fi.bytes.size());
      fetch_.busy_cpu_ns.fetch_add(ThreadCpuNs() - cpu0);
      ReadDone(std::move(fi), wall0);
    } else {
      std::vector<uint8_t> buffer = std::move(fi.bytes);
      const int64_t item = fi.item;
      const bool lookup_failed = !hit.ok();
      source_->ReadAsync(item, std::move(buffer),
                         [this, fi = std::move(fi), wall0, lookup_failed](
                             Status st, std::vector<uint8_t> b) mutable {
                           fi.status = std::move(st);
                           fi.bytes = std::move(b);
                           CacheMiss(&fi, lookup_failed);
                           ReadDone(std::move(fi), wall0);
                         });
      fetch_.busy_cpu_ns.fetch_add(ThreadCpuNs() - cpu0);
    }
    lock.Lock();
  }
}

// A read is done (on the source's I/O thread, or a cache hit on the
// dispatcher): into the prep queue.
void PipelineLoader::ReadDone(FetchedItem fi, int64_t wall0) {
  NameFetchError(&fi);
  fetch_.work_ns.fetch_add(NowNs() - wall0);
  fetch_.items.fetch_add(1);
  fetch_.bytes.fetch_add(static_cast<int64_t>(fi.bytes.size()));
  MutexLock lock(&state_->mu);
  --fetching_;
  prep_queue_.push_back(std::move(fi));
  AdaptReadLimit();
  prep_cv_.notify_one();
  state_->slot_freed.notify_all();  // room for the dispatcher
  if (fetching_ == 0) reads_done_cv_.notify_all();
}

// Little's law (pipeline/read_limit.h): to keep prep fed, reads in flight
// = the rate prep takes items at x the time a read takes. A fixed
// reads_in_flight is kept as given.
void PipelineLoader::AdaptReadLimit() {
  if (spec_.reads_in_flight > 0 || tune_.reads) return;  // fixed, or the autotuner's
  const double latency = source_->RequestLatencySeconds();
  if (latency <= 0) return;
  const int64_t items = prep_.items.load(std::memory_order_relaxed);
  const double per_item = items >= 16 ? prep_.work_ns.load(std::memory_order_relaxed) / 1e9 / items
                                      : kAssumedPrepSeconds;
  const double rate = prep_active_ / std::max(per_item, 1e-6);
  const int64_t fetched = fetch_.items.load(std::memory_order_relaxed);
  const double item_bytes =
      fetched > 0 ? static_cast<double>(fetch_.bytes.load(std::memory_order_relaxed)) / fetched : 0;
  read_limit_.store(AutoReadsInFlight(rate, latency, item_bytes), std::memory_order_relaxed);
}

void PipelineLoader::PrepLoop(int index) {
  PrepScratch scratch;
  MutexLock lock(&state_->mu);
  while (true) {
    // Beyond the threads asked for now: parked, not starved.
    while (!cancelled_ && index >= prep_active_) park_cv_.wait(lock.native());
    int64_t t0 = NowNs();
    while (!cancelled_ && index < prep_active_ && prep_queue_.empty()) prep_cv_.wait(lock.native());
    prep_.starved_ns.fetch_add(NowNs() - t0);
    if (cancelled_) return;
    if (index >= prep_active_) continue;
    FetchedItem fi = std::move(prep_queue_.front());
    prep_queue_.pop_front();
    // Room in the prep queue for one more read: one waiter is woken. Every
    // fetcher waits for the same thing (the next position, its slot, room),
    // so any of them can take it; waking them all cost a wake-up per waiting
    // fetcher per item (with 64 fetch threads, a quarter of the throughput
    // on two cores).
    state_->slot_freed.notify_one();
    if (fi.generation != generation_) {
      free_buffers_.push_back(std::move(fi.bytes));
      continue;
    }
    const uint64_t s = fi.slot;
    ++active_preps_;
    lock.Unlock();

    const int64_t cpu0 = ThreadCpuNs(), wall0 = NowNs();
    Status st = fi.status;
    uint8_t* dst = state_->seg->images(s) + static_cast<size_t>(fi.pos) * sample_bytes_;
    if (st.ok()) {
      st = PrepareSample(spec_.prep, fi.bytes.data(), fi.bytes.size(),
                         {spec_.seed, fi.epoch, fi.item}, out_h_, out_w_, dst, &scratch);
      if (!st.ok()) st = st.WithItem(source_->key(fi.item), "decode");
    }
    state_->seg->labels(s)[fi.pos] = source_->label(fi.item);
    state_->seg->indices(s)[fi.pos] = fi.item;
    prep_.busy_cpu_ns.fetch_add(ThreadCpuNs() - cpu0);
    prep_.work_ns.fetch_add(NowNs() - wall0);
    prep_.items.fetch_add(1);
    prep_.bytes.fetch_add(static_cast<int64_t>(sample_bytes_));

    lock.Lock();
    --active_preps_;
    if (active_preps_ == 0) idle_cv_.notify_all();
    free_buffers_.push_back(std::move(fi.bytes));
    SlotWork& w = work_[s];
    if (!st.ok()) {
      ++w.bad_items;
      if (spec_.on_error == ErrorPolicy::kSkip) {
        w.bad[static_cast<size_t>(fi.pos)] = 1;
      } else if (w.error_pos < 0 || fi.pos < w.error_pos) {
        w.error = st;
        w.error_pos = fi.pos;
      }
    }
    if (--w.remaining == 0) {
      ++active_preps_;  // the slot is ours alone until published
      lock.Unlock();
      FinishBatch(s);
      lock.Lock();
      --active_preps_;
      if (active_preps_ == 0) idle_cv_.notify_all();
      if (fi.generation == generation_) {
        state_->slots[s].state = SlotState::kReady;
        ready_cv_.notify_all();
      }
    }
  }
}

// Closes the holes that skipped samples left, keeping the order of the
// good ones; this is the only copy of pixels nostall ever makes, and only
// when a batch had bad items. Runs without the lock: the slot's last
// sample is done and it is not yet READY, so no other thread touches its
// work entry (the analysis cannot see that ownership).
void PipelineLoader::FinishBatch(uint64_t s) {
  const int64_t cpu0 = ThreadCpuNs();
  PipelineSlot& h = state_->slots[s];
  SlotWork& w = work_[s];
  int64_t kept = 0;
  uint8_t* images = state_->seg->images(s);
  int64_t* labels = state_->seg->labels(s);
  int64_t* indices = state_->seg->indices(s);
  for (int64_t p = 0; p < h.count; ++p) {
    if (w.bad[static_cast<size_t>(p)]) {
      ++w.skipped;
      continue;
    }
    if (kept != p) {
      std::memmove(images + kept * sample_bytes_, images + p * sample_bytes_, sample_bytes_);
      labels[kept] = labels[p];
      indices[kept] = indices[p];
    }
    ++kept;
  }
  h.count = kept;
  batch_.items.fetch_add(1);
  batch_.bytes.fetch_add(kept * static_cast<int64_t>(sample_bytes_));
  batch_.busy_cpu_ns.fetch_add(ThreadCpuNs() - cpu0);
}

}  // namespace nostall
