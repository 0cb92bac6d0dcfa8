// What moves between the pipeline's parts: a fetched item on its way to a
// prep thread, each stage's counters, and a ring slot's bookkeeping. The
// parts: the scheduler (scheduler.h) hands out positions and slots, the
// fetcher (fetcher.h) reads an item, the preparer (preparer.h) decodes it
// into its slot, the loader (pipeline_loader.h) runs their threads.
#ifndef NOSTALL_PIPELINE_WORK_H_
#define NOSTALL_PIPELINE_WORK_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/mutex.h"
#include "nostall/item_file.h"
#include "nostall/record.h"
#include "nostall/stats.h"
#include "nostall/status.h"
#include "ring/ring.h"

namespace nostall {

// One stage's running totals (LoaderStats::StageStats).
struct StageCounters {
  std::atomic<int64_t> items{0}, bytes{0}, busy_cpu_ns{0}, work_ns{0}, starved_ns{0},
      blocked_ns{0}, peak_in_flight{0};
  StageStats Snapshot(int threads) const {
    return {items.load(),      bytes.load(),      busy_cpu_ns.load(), work_ns.load(),
            starved_ns.load(), blocked_ns.load(), threads,          peak_in_flight.load()};
  }
  void InFlight(int64_t n) {  // called with the count just entered
    int64_t peak = peak_in_flight.load(std::memory_order_relaxed);
    while (n > peak && !peak_in_flight.compare_exchange_weak(peak, n)) {
    }
  }
};

// A position of a batch that holds fewer samples than its slot (batches of
// similar durations, whose counts vary: sampler.h): nothing is read or
// prepared there, and the batch closes up around it (not a skip).
inline constexpr int64_t kHole = -1;

struct FetchedItem {
  uint64_t generation;
  int64_t epoch;
  int64_t batch;
  uint64_t slot;
  int64_t pos;   // within the batch
  int64_t item;  // dataset index
  bool buffered = false;  // of the buffered epoch (its random draws key on shard and member)
  std::vector<uint8_t> bytes;
  // Set: `bytes` are the first bytes of this file, whose rest the kind reads
  // where it wants (SampleKind::ReadsPart).
  std::shared_ptr<const ItemFile> file;
  Status status;  // a failed read travels on so the batch can complete
  // Set on a batch's first position: the items the cache is asked for in
  // one go (Cache::Prefetch; this batch's when it is an epoch's first, and
  // the next batch's), before this item is looked up.
  std::vector<int64_t> prefetch;
};

// Per-slot bookkeeping that only this process needs.
struct SlotWork {
  int64_t remaining = 0;        // samples not yet prepared
  std::vector<uint8_t> bad;     // per position: 1 = skipped
  Status error;                 // first error by position (raise policy)
  int64_t error_pos = -1;
  int64_t bad_items = 0;        // counted into the stats when handed out
  int64_t skipped = 0;
  int64_t holes = 0;            // positions of no sample (kHole)
};

// A slot's life in the pipeline (docs/ring_format.md):
//   free -> filling (a fetch thread claims it for a batch) -> ready (the
//   thread that prepares its last sample) -> leased (Next) -> free (the last
//   lease goes); StartEpoch frees every slot not leased.
enum class SlotState { kFree, kFilling, kReady, kLeased };
struct PipelineSlot {
  SlotState state = SlotState::kFree;
  uint32_t leases = 0;  // Batches holding it
  int64_t epoch = 0, batch_index = 0;
  int64_t count = 0;    // samples (fewer at the epoch's end or after skips)
};

// Sample `pos`'s bytes of extra field `f` in slot `s` of `seg`.
inline FieldView SlotField(const ring::Segment& seg, uint32_t s, int f, int64_t pos) {
  const uint32_t field = static_cast<uint32_t>(f);
  const int64_t length = seg.field_lengths(s, field)[pos];
  // (Another process writes the slot: a length past the field's room is
  // never followed.)
  if (length < 0 || static_cast<uint64_t>(length) > seg.g.field_room[field]) return {};
  return {seg.field_data(s, field) + static_cast<size_t>(pos) * seg.g.field_room[field], length};
}

// State shared between the scheduler and the leases it hands out, so a
// Batch outliving its Loader can still be released safely.
struct RingState {
  std::shared_ptr<ring::Segment> seg;  // the slots' memory (ring/ring.h)
  // Guards the slots' states and the scheduler's state (its GUARDED_BY
  // members).
  Mutex mu;
  std::condition_variable slot_freed;  // fetchers wait for a free slot
  std::vector<PipelineSlot> slots GUARDED_BY(mu);
  void Release(uint64_t slot) EXCLUDES(mu) {
    MutexLock lock(&mu);
    PipelineSlot& h = slots[slot];
    if (--h.leases == 0) {
      h.state = SlotState::kFree;
      slot_freed.notify_all();
    }
  }
};

}  // namespace nostall

#endif  // NOSTALL_PIPELINE_WORK_H_
