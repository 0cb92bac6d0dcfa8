// The ring's slots as the scheduler sees them: the batch each holds and its
// state (work.h: free -> filling -> ready -> leased -> free), each slot's
// bookkeeping while its batch is made (samples left, skipped positions, the
// first error), and how many slots batches may take at once. Not
// thread-safe: the scheduler holds it under the ring's mutex.
#ifndef NOSTALL_PIPELINE_SLOT_TABLE_H_
#define NOSTALL_PIPELINE_SLOT_TABLE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "nostall/loader.h"
#include "pipeline/work.h"

namespace nostall {

class SlotTable {
 public:
  // `slots`: the ring's (RingState::slots, which leases free). `own_ring`:
  // a loader's own ring, which has one spare slot beyond `limit`.
  SlotTable(std::vector<PipelineSlot>* slots, int64_t batch_size, int64_t limit, bool own_ring);

  size_t size() const { return slots_->size(); }
  PipelineSlot& operator[](uint64_t s) { return (*slots_)[s]; }
  SlotWork& work(uint64_t s) { return work_[s]; }
  int64_t limit() const { return limit_; }
  void set_limit(int64_t limit) { limit_ = limit; }

  // A free slot a new batch may take (the slots in use are below the
  // limit, or the spare is open), or -1.
  int64_t ToClaim() const;
  // A slot in `state` (holding `batch` of `epoch`, if batch >= 0), or -1.
  int64_t Find(SlotState state, int64_t batch, int64_t epoch) const;
  int64_t Leased() const;
  bool AllLeased() const { return Leased() >= limit_; }
  // The caller holds every slot a batch may take: a loader's own ring opens
  // its spare for one batch, which then leaves as a copy. False: no spare.
  bool OpenSpare();
  void CloseSpare() { spare_open_ = false; }
  bool MoreLeasedThanAllowed() const { return own_ring_ && Leased() > limit_; }

  // Slot `s` starts batch `batch` of `epoch`, of `count` samples.
  void Claim(uint64_t s, int64_t epoch, int64_t batch, int64_t count);
  // The sample at `pos` of slot `s` was prepared with `result` (`skip`: a
  // bad one is dropped, else the first by position is the batch's error).
  // True when it was the batch's last.
  bool SampleDone(uint64_t s, int64_t pos, const Status& result, bool skip, bool hole = false);
  // The batch in `s` is complete with `kept` samples of `count`.
  void Complete(uint64_t s, int64_t count, int64_t kept);
  // Hands the ready batch in `s` (number `index` of its epoch) to the
  // caller: a lease on the slot (the slot is freed when the last copy of the
  // Batch goes), or, when the caller holds every other slot, a copy (the
  // slot is free again at once: copied() says so).
  std::shared_ptr<Batch> HandOut(uint64_t s, int64_t index, const std::shared_ptr<RingState>& ring);
  // Frees every slot in `from` not holding `epoch` (-1: any epoch).
  void FreeAll(SlotState from, int64_t but_epoch = -1);
  // Frees every slot that is not leased.
  void FreeAllButLeased();
  bool FillingOtherThan(int64_t epoch) const;

 private:
  std::vector<PipelineSlot>* const slots_;
  std::vector<SlotWork> work_;
  int64_t limit_;
  const bool own_ring_;
  bool spare_open_ = false;
};

}  // namespace nostall

#endif  // NOSTALL_PIPELINE_SLOT_TABLE_H_
