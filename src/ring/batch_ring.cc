#include "ring/batch_ring.h"

#include "common/process.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <new>
#include <sstream>

namespace nostall {
namespace {
constexpr uint64_t kPage = 4096;
// Slot headers start on a cache line of their own after the ring header.
constexpr uint64_t kSlotTableOffset = (sizeof(RingHeader) + 63) / 64 * 64;
uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
uint64_t ImagesBytes(const RingHeader& h) { return RoundUp(h.batch_size * h.sample_bytes, 64); }
}  // namespace

Result<std::unique_ptr<BatchRing>> BatchRing::Create(const RingGeometry& g,
                                                     uint64_t spec_fingerprint,
                                                     const ExternalSlots* external) {
  if (g.slot_count == 0 || g.batch_size == 0 || g.sample_bytes == 0) {
    return InvalidArgument("ring geometry must be positive");
  }
  if (g.sample_bytes > (1ull << 44) / g.batch_size || g.slot_count > 4096) {
    return InvalidArgument("absurd batch geometry: " + std::to_string(g.batch_size) +
                           " samples of " + std::to_string(g.sample_bytes) + " bytes");
  }
  const uint64_t header_bytes = RoundUp(kSlotTableOffset + g.slot_count * sizeof(SlotHeader), kPage);
  const uint64_t per_slot = RoundUp(g.batch_size * g.sample_bytes, 64) + 2 * g.batch_size * sizeof(int64_t);
  if (external != nullptr && (external->count != g.slot_count || external->stride < per_slot ||
                              external->data == nullptr)) {
    return InvalidArgument("external slots do not fit the ring's geometry");
  }
  const uint64_t stride = external ? external->stride : RoundUp(per_slot, kPage);
  const uint64_t total = header_bytes + (external ? 0 : stride * g.slot_count);
  NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<ShmSegment> shm,
                           ShmSegment::Create("nostall-ring", total, /*keep_name=*/false));
  auto* h = new (shm->data()) RingHeader{};
  h->version = kRingVersion;
  h->header_bytes = static_cast<uint32_t>(header_bytes);
  h->spec_fingerprint = spec_fingerprint;
  h->slot_count = g.slot_count;
  h->batch_size = g.batch_size;
  h->sample_bytes = g.sample_bytes;
  h->slot_stride = stride;
  h->data_offset = header_bytes;
  h->creator_pid = ::getpid();
  h->creator_start_time = SelfStartTime();
  auto ring = std::unique_ptr<BatchRing>(new BatchRing(std::move(shm)));
  ring->stride_ = stride;
  ring->data_ = external ? external->data : ring->shm_->data() + header_bytes;
  if (external) ring->external_owner_ = external->owner;
  for (uint64_t i = 0; i < g.slot_count; ++i) {
    SlotHeader* s = new (&ring->slot(i)) SlotHeader{};
    s->state.store(static_cast<uint32_t>(SlotState::kFree), std::memory_order_relaxed);
  }
  // The magic goes in last: a reader that sees it sees a complete header.
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(h->magic, kRingMagic, sizeof kRingMagic);
  return ring;
}

SlotHeader& BatchRing::slot(uint64_t i) const {
  return reinterpret_cast<SlotHeader*>(shm_->data() + kSlotTableOffset)[i];
}

uint8_t* BatchRing::images(uint64_t i) const {
  return data_ + i * stride_;
}

int64_t* BatchRing::labels(uint64_t i) const {
  return reinterpret_cast<int64_t*>(images(i) + ImagesBytes(header()));
}

int64_t* BatchRing::indices(uint64_t i) const { return labels(i) + header().batch_size; }

}  // namespace nostall
