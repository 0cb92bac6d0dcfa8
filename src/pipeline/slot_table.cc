// The scheduler's view of the ring's slots (slot_table.h).
#include "pipeline/slot_table.h"

#include <algorithm>
#include <memory>

#include "ring/ragged.h"

namespace nostall {
namespace {

// The padded shape of the `count` samples of slot `s` (empty: not ragged).
std::vector<int64_t> PaddedShapeOf(const ring::Segment& seg, uint32_t s, int64_t count) {
  if (!seg.g.ragged()) return {};
  int64_t padded[3];
  // (The pipeline padded the slot to exactly this: PadInPlace.)
  if (!ring::PaddedShape(seg.g, seg.dims(s), count, padded).ok()) return {};
  return {padded[0], padded[1], padded[2]};
}

// A batch handed out in its slot: the slot is freed when the last copy of
// the shared_ptr goes (RingState::Release), whichever thread drops it.
class LeasedBatch final : public Batch {
 public:
  LeasedBatch(std::shared_ptr<RingState> ring, uint64_t slot, int64_t epoch, int64_t index,
              int64_t size)
      : ring_(std::move(ring)), slot_(slot), epoch_(epoch), index_(index), size_(size),
        padded_(PaddedShapeOf(*ring_->seg, static_cast<uint32_t>(slot), size)) {}
  ~LeasedBatch() override { ring_->Release(slot_); }
  int64_t epoch() const override { return epoch_; }
  int64_t index() const override { return index_; }
  int64_t size() const override { return size_; }
  const void* images() const override { return ring_->seg->images(slot_); }
  const int64_t* labels() const override { return ring_->seg->labels(slot_); }
  const int64_t* indices() const override { return ring_->seg->indices(slot_); }
  FieldView field(int f, int64_t pos) const override {
    return SlotField(*ring_->seg, static_cast<uint32_t>(slot_), f, pos);
  }
  std::pair<const void*, size_t> memory() const override {
    return {ring_->seg->images(slot_), ring_->seg->g.slot_stride};
  }
  const int64_t* sample_dims() const override { return ring_->seg->dims(static_cast<uint32_t>(slot_)); }
  std::vector<int64_t> padded_shape() const override { return padded_; }

 private:
  std::shared_ptr<RingState> ring_;
  uint64_t slot_;
  int64_t epoch_, index_, size_;
  std::vector<int64_t> padded_;
};

// A batch copied out of its slot (the slot is free again at once): what the
// caller gets when it holds every other slot, so the pipeline never stops.
class CopiedBatch final : public Batch {
 public:
  CopiedBatch(const ring::Segment& seg, uint32_t slot, int64_t epoch, int64_t index, int64_t size)
      : epoch_(epoch),
        index_(index),
        padded_(PaddedShapeOf(seg, slot, size)),
        images_(static_cast<const uint8_t*>(seg.images(slot)),
                static_cast<const uint8_t*>(seg.images(slot)) + ImageBytes(seg, padded_, size)),
        labels_(seg.labels(slot), seg.labels(slot) + size),
        indices_(seg.indices(slot), seg.indices(slot) + size) {
    if (const int64_t* dims = seg.dims(slot)) dims_.assign(dims, dims + 3 * size);
    fields_.Resize(static_cast<int>(seg.g.field_count), size);
    for (uint32_t f = 0; f < seg.g.field_count; ++f) {
      for (int64_t p = 0; p < size; ++p) fields_.Set(static_cast<int>(f), p, SlotField(seg, slot, static_cast<int>(f), p));
    }
  }
  int64_t epoch() const override { return epoch_; }
  int64_t index() const override { return index_; }
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  const void* images() const override { return images_.data(); }
  const int64_t* labels() const override { return labels_.data(); }
  const int64_t* indices() const override { return indices_.data(); }
  bool copied() const override { return true; }
  FieldView field(int f, int64_t pos) const override { return fields_.Get(f, pos); }
  const int64_t* sample_dims() const override { return dims_.empty() ? nullptr : dims_.data(); }
  std::vector<int64_t> padded_shape() const override { return padded_; }

 private:
  // The bytes of `size` samples as the slot holds them.
  static size_t ImageBytes(const ring::Segment& seg, const std::vector<int64_t>& padded, int64_t size) {
    if (padded.empty()) return static_cast<size_t>(size) * seg.g.sample_bytes;
    return static_cast<size_t>(size) * seg.g.padded_bytes(padded.data());
  }

  int64_t epoch_, index_;
  std::vector<int64_t> padded_, dims_;
  std::vector<uint8_t> images_;
  std::vector<int64_t> labels_, indices_;
  FieldCopies fields_;
};

}  // namespace


SlotTable::SlotTable(std::vector<PipelineSlot>* slots, int64_t batch_size, int64_t limit,
                     bool own_ring)
    : slots_(slots), work_(slots->size()), limit_(limit), own_ring_(own_ring) {
  for (SlotWork& w : work_) w.bad.assign(static_cast<size_t>(batch_size), 0);
}

int64_t SlotTable::ToClaim() const {
  int64_t in_use = 0;
  for (const PipelineSlot& h : *slots_) in_use += h.state != SlotState::kFree;
  return in_use < limit_ + (spare_open_ ? 1 : 0) ? Find(SlotState::kFree, -1, 0) : -1;
}

int64_t SlotTable::Find(SlotState state, int64_t batch, int64_t epoch) const {
  for (uint64_t i = 0; i < slots_->size(); ++i) {
    const PipelineSlot& h = (*slots_)[i];
    if (h.state != state) continue;
    if (batch < 0 || (h.batch_index == batch && h.epoch == epoch)) return static_cast<int64_t>(i);
  }
  return -1;
}

int64_t SlotTable::Leased() const {
  int64_t leased = 0;
  for (const PipelineSlot& h : *slots_) leased += h.state == SlotState::kLeased;
  return leased;
}

bool SlotTable::OpenSpare() {
  if (!own_ring_ || spare_open_) return false;
  spare_open_ = true;
  return true;
}

void SlotTable::Claim(uint64_t s, int64_t epoch, int64_t batch, int64_t count) {
  PipelineSlot& h = (*slots_)[s];
  h.epoch = epoch;
  h.batch_index = batch;
  h.count = count;
  h.state = SlotState::kFilling;
  SlotWork& w = work_[s];
  w.remaining = count;
  w.error = Status::OK();
  w.error_pos = -1;
  w.bad_items = 0;
  w.skipped = 0;
  w.holes = 0;
  std::fill(w.bad.begin(), w.bad.end(), 0);
}

bool SlotTable::SampleDone(uint64_t s, int64_t pos, const Status& result, bool skip, bool hole) {
  SlotWork& w = work_[s];
  if (hole) {
    w.bad[static_cast<size_t>(pos)] = 1;
    ++w.holes;
  } else if (!result.ok()) {
    ++w.bad_items;
    if (skip) {
      w.bad[static_cast<size_t>(pos)] = 1;
    } else if (w.error_pos < 0 || pos < w.error_pos) {
      w.error = result;
      w.error_pos = pos;
    }
  }
  return --w.remaining == 0;
}

void SlotTable::Complete(uint64_t s, int64_t count, int64_t kept) {
  (*slots_)[s].count = kept;
  work_[s].skipped = count - kept - work_[s].holes;
}

void SlotTable::FreeAll(SlotState from, int64_t but_epoch) {
  for (PipelineSlot& h : *slots_) {
    if (h.state == from && (but_epoch < 0 || h.epoch != but_epoch)) h.state = SlotState::kFree;
  }
}

void SlotTable::FreeAllButLeased() {
  for (PipelineSlot& h : *slots_) {
    if (h.state != SlotState::kLeased) h.state = SlotState::kFree;
  }
}

bool SlotTable::FillingOtherThan(int64_t epoch) const {
  for (const PipelineSlot& h : *slots_) {
    if (h.state == SlotState::kFilling && h.epoch != epoch) return true;
  }
  return false;
}

std::shared_ptr<Batch> SlotTable::HandOut(uint64_t s, int64_t index,
                                          const std::shared_ptr<RingState>& ring) {
  PipelineSlot& h = (*slots_)[s];
  h.state = SlotState::kLeased;
  h.leases = 1;
  if (!MoreLeasedThanAllowed()) return std::make_shared<LeasedBatch>(ring, s, h.epoch, index, h.count);
  // The caller holds every other slot (list(loader), batches kept for
  // evaluation): this one leaves as a private copy and its slot is
  // refilled, so the pipeline goes on. Zero-copy resumes once the caller
  // lets old batches go.
  auto copy = std::make_shared<CopiedBatch>(*ring->seg, static_cast<uint32_t>(s), h.epoch, index, h.count);
  h.leases = 0;
  h.state = SlotState::kFree;
  spare_open_ = false;
  return copy;
}

}  // namespace nostall
