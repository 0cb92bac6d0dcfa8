// The batch ring: a shared-memory segment of fixed-size batch slots.
//
// Layout and slot states are described in docs/ring_format.md. This class
// owns the segment and knows the geometry; who may fill or read a slot is the
// pipeline's business (it keeps the slot states here, in the segment, so
// that other processes can read them).
#ifndef NOSTALL_RING_BATCH_RING_H_
#define NOSTALL_RING_BATCH_RING_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "common/shm.h"
#include "nostall/status.h"

namespace nostall {

enum class SlotState : uint32_t { kFree = 0, kFilling = 1, kReady = 2, kLeased = 3 };

struct RingGeometry {
  uint64_t slot_count = 0;
  uint64_t batch_size = 0;
  uint64_t sample_bytes = 0;  // one sample's pixels
};

constexpr char kRingMagic[8] = {'N', 'S', 'T', 'R', 'I', 'N', 'G', '1'};
constexpr uint32_t kRingVersion = 1;

struct alignas(64) SlotHeader {
  std::atomic<uint64_t> seq;      // bumped each time the slot starts a new batch
  std::atomic<uint32_t> state;    // SlotState
  uint32_t leases;                // readers holding the batch
  int64_t epoch;
  int64_t batch_index;
  int64_t count;                  // samples in the batch (< batch_size at epoch end)
};

struct RingHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t spec_fingerprint;
  uint64_t slot_count, batch_size, sample_bytes;
  uint64_t slot_stride;   // bytes from one slot's data to the next
  uint64_t data_offset;   // where slot 0's data starts
  int64_t creator_pid;
  uint64_t creator_start_time;  // /proc/<pid>/stat field 22, so a reused pid is told apart
};

// Slot memory owned by someone else (a named ring's data area) that a ring
// uses for its slots' data instead of its own segment's: same layout per
// slot (pixels, padded to 64 bytes, then labels, then dataset indices).
struct ExternalSlots {
  std::shared_ptr<void> owner;  // kept alive as long as the ring
  uint8_t* data = nullptr;      // slot 0's data
  uint64_t stride = 0;          // bytes from one slot's data to the next
  uint64_t count = 0;           // slots
};

class BatchRing {
 public:
  // With `external`, the segment holds only the header and slot table, and
  // slot i's data is at external->data + i * external->stride.
  static Result<std::unique_ptr<BatchRing>> Create(const RingGeometry& geometry,
                                                   uint64_t spec_fingerprint,
                                                   const ExternalSlots* external = nullptr);

  const RingHeader& header() const { return *reinterpret_cast<RingHeader*>(shm_->data()); }
  SlotHeader& slot(uint64_t i) const;
  uint8_t* images(uint64_t i) const;
  int64_t* labels(uint64_t i) const;   // batch_size entries
  int64_t* indices(uint64_t i) const;  // batch_size entries: dataset indices
  uint64_t slot_count() const { return header().slot_count; }
  size_t bytes() const { return shm_->size(); }

 private:
  explicit BatchRing(std::unique_ptr<ShmSegment> shm) : shm_(std::move(shm)) {}
  std::unique_ptr<ShmSegment> shm_;
  uint8_t* data_ = nullptr;  // slot 0's data
  uint64_t stride_ = 0;
  std::shared_ptr<void> external_owner_;
};

}  // namespace nostall

#endif  // NOSTALL_RING_BATCH_RING_H_
