// The ring: the shared-memory segment of batch slots a pipeline writes into
// (docs/ring_format.md). One format for both uses:
//   private  a Loader's own ring, unlinked at creation (no consumer table);
//   named    /nostall-shared-NAME, a served pipeline's, read by every
//            consumer on the node (Loader.attach).
// This is the format and the operations every side shares: creation,
// header, consumer rows, slot rows, pins, futex waits, geometry checks and
// opening a named ring. The pipeline fills slots (pipeline_loader.cc); the
// producer publishes them (src/shared/producer.cc), consumers read them
// (src/shared/consumer.cc), inspection reads the header (src/shared/admin.cc).
#ifndef NOSTALL_RING_RING_H_
#define NOSTALL_RING_RING_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/shm.h"
#include "nostall/ring_consumer.h"
#include "nostall/status.h"

namespace nostall::ring {

constexpr char kMagic[8] = {'N', 'S', 'T', 'R', 'I', 'N', 'G', '2'};
constexpr uint32_t kVersion = 5;
// A slot's extra fields (nostall/record.h) at most: each is, per sample, a
// length (int64; -1: none) and room for its bytes.
constexpr uint32_t kMaxFields = 16;
constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
enum : uint32_t { kRunning = 1, kClosed = 2, kFailed = 3 };
enum : uint32_t { kFree = 0, kActive = 1, kLagged = 2, kClaimed = 3 };
enum : uint32_t { kEmpty = 0, kWriting = 1, kReady = 2 };

struct alignas(64) Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t spec_fingerprint;
  uint64_t dataset_fingerprint;
  int64_t producer_pid;
  uint64_t producer_start_time;
  std::atomic<int64_t> heartbeat_ns;  // CLOCK_MONOTONIC, every 100 ms
  std::atomic<uint32_t> state;
  uint32_t max_consumers;
  uint32_t slot_count;
  uint32_t dtype;  // 0 uint8, 1 float32
  int64_t chunk, samples_per_epoch, chunks_per_epoch, block_chunks;
  uint64_t sample_bytes;
  int64_t shape[3];
  std::atomic<int64_t> produced;  // chunks published: the next seq
  // Futex words: bumped (and woken) when a chunk is published, and when a
  // consumer lets go of something the producer may be waiting for.
  std::atomic<uint32_t> published_gen;
  std::atomic<uint32_t> released_gen;
  std::atomic<int64_t> evictions;
  std::atomic<int64_t> reaped;
  uint64_t consumers_offset, slots_offset, pins_offset, spec_offset, spec_bytes;
  uint64_t data_offset, slot_stride;
  uint32_t field_count;
  uint64_t field_room[kMaxFields];  // bytes per sample, per extra field
  // Samples of many sizes (a ragged ring): the axes of `shape` a sample may
  // be smaller on (bit i: axis i; 0: every sample is `shape`), and the
  // multiple a batch's size on them is rounded up to. `shape` is then the
  // bound, and each slot holds each sample's own shape (Segment::dims).
  uint32_t ragged_axes, pad_multiple;
  char error[512];
};

struct alignas(64) ConsumerRow {
  std::atomic<uint32_t> state;
  std::atomic<int64_t> pid;  // the owner; 0: free
  std::atomic<uint64_t> start_time;
  std::atomic<int64_t> need;
};

struct alignas(64) SlotRow {
  std::atomic<int64_t> seq;  // -1: never written
  std::atomic<uint32_t> state;
  std::atomic<int64_t> published_ns;  // CLOCK_MONOTONIC when it became READY
  int64_t count, epoch, chunk_in_epoch;
};

inline uint64_t RoundUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }



// The POSIX shm name of the named ring `name` ("NAME", the caller's, or
// "OWNER:NAME"): /nostall-shared-UID-NAME. Unparseable names give "".
inline std::string SegmentName(const std::string& name) {
  Result<SegmentRef> ref = ParseSegmentRef(name);
  return ref.ok() ? SegmentPath("nostall-shared", ref.value()) : "";
}

// The header's layout fields, read once. Other processes can write the
// header at any time (a bug, damage, hostility): each process checks this
// copy against its mapping (CheckGeometry) and from then on uses only the
// copy, so a header changed after attach cannot move a read out of bounds.
struct Geometry {
  uint32_t header_bytes = 0, max_consumers = 0, slot_count = 0, dtype = 0;
  int64_t chunk = 0, samples_per_epoch = 0, chunks_per_epoch = 0, block_chunks = 0;
  uint64_t sample_bytes = 0;
  int64_t shape[3] = {0, 0, 0};
  uint64_t consumers_offset = 0, slots_offset = 0, pins_offset = 0, spec_offset = 0,
           spec_bytes = 0, data_offset = 0, slot_stride = 0;
  uint32_t field_count = 0;
  uint64_t field_room[kMaxFields] = {};
  uint32_t ragged_axes = 0, pad_multiple = 1;
  bool ragged() const { return ragged_axes != 0; }
  // Bytes of one value of the batch tensor (dtype 1: float32).
  size_t elem_bytes() const { return dtype == 1 ? 4 : 1; }
  // Bytes of one sample of shape `padded` (a ragged batch's, PaddedShape).
  uint64_t padded_bytes(const int64_t padded[3]) const {
    return static_cast<uint64_t>(padded[0] * padded[1] * padded[2]) * elem_bytes();
  }
};

// A mapped segment with typed views; shared by the loader and every lease.
struct Segment {
  Mapping mapping;
  std::string name;   // the shm name, /nostall-shared-UID-NAME
  std::string label;  // as the user named it: NAME or OWNER:NAME
  Geometry g;  // checked; the only layout this process trusts
  Header* h = nullptr;
  ConsumerRow* consumers = nullptr;
  SlotRow* slots = nullptr;
  std::atomic<uint32_t>* pins = nullptr;
  uint8_t* data = nullptr;

  // Points the views into the mapping by `geometry` (already checked).
  void Bind(const Geometry& geometry) {
    g = geometry;
    auto* base = static_cast<uint8_t*>(mapping.data());
    h = reinterpret_cast<Header*>(base);
    consumers = reinterpret_cast<ConsumerRow*>(base + g.consumers_offset);
    slots = reinterpret_cast<SlotRow*>(base + g.slots_offset);
    pins = reinterpret_cast<std::atomic<uint32_t>*>(base + g.pins_offset);
    data = base + g.data_offset;
  }
  std::atomic<uint32_t>& pin(uint32_t slot, uint32_t consumer) const {
    return pins[static_cast<size_t>(slot) * g.max_consumers + consumer];
  }
  uint8_t* images(uint32_t s) const { return data + s * g.slot_stride; }
  int64_t* labels(uint32_t s) const {
    return reinterpret_cast<int64_t*>(images(s) + RoundUp(g.chunk * g.sample_bytes, 64));
  }
  int64_t* indices(uint32_t s) const { return labels(s) + g.chunk; }
  // A ragged ring's slot `s`: sample p's own shape at [3 * p, 3 * p + 3)
  // (written dense at p * sample_bytes, then the batch padded in place:
  // pipeline/ragged.h). Null for a ring of one shape.
  int64_t* dims(uint32_t s) const { return g.ragged() ? indices(s) + g.chunk : nullptr; }
  // Extra field `f` of slot `s`: each sample's length (-1: none), then its
  // bytes, sample p's at p * g.field_room[f].
  int64_t* field_lengths(uint32_t s, uint32_t f) const {
    uint8_t* p = reinterpret_cast<uint8_t*>(indices(s) + g.chunk + DimsCount(g));
    for (uint32_t k = 0; k < f; ++k) p += FieldBytes(g, k);
    return reinterpret_cast<int64_t*>(p);
  }
  uint8_t* field_data(uint32_t s, uint32_t f) const {
    return reinterpret_cast<uint8_t*>(field_lengths(s, f) + g.chunk);
  }
  // The int64s of a slot's table of sample shapes (0: not ragged).
  static uint64_t DimsCount(const Geometry& g) {
    return g.ragged() ? 3 * static_cast<uint64_t>(g.chunk) : 0;
  }
  static uint64_t FieldBytes(const Geometry& g, uint32_t f) {
    const uint64_t chunk = static_cast<uint64_t>(g.chunk);
    return RoundUp(chunk * sizeof(int64_t) + chunk * g.field_room[f], 64);
  }
  int64_t ChunkCount(int64_t seq) const {
    const int64_t k = seq % g.chunks_per_epoch;
    return k == g.chunks_per_epoch - 1 ? g.samples_per_epoch - k * g.chunk : g.chunk;
  }
  std::string Spec() const {
    return std::string(reinterpret_cast<const char*>(mapping.data()) + g.spec_offset,
                       g.spec_bytes);
  }
  // The first chunk from which the segment holds every chunk up to the
  // newest published one (`produced` when it holds none): where a consumer
  // may start or rejoin. Older chunks may still sit in a slot, but with gaps
  // after them (a slot nobody needed was reused), so they are no start.
  int64_t HeldFrom() const;
  // The owned rows of consumers that attached (claimed rows that have not
  // yet are left out); with `check_alive`, a dead one's state says "dead".
  std::vector<ConsumerInfo> Consumers(bool check_alive = false) const;
  // The serving protocol's transitions (docs/ring_format.md, "A slot's life
  // when served"). Two races are settled Dekker-style, with sequentially
  // consistent operations on both sides:
  //   overwrite vs need: TakeBack marks a slot WRITING, then reads every
  //     active consumer's `need`; EnterStream publishes `need` and ACTIVE,
  //     then reads the slots. One of them sees the other.
  //   overwrite vs pin: TakeBack marks WRITING, then reads the slot's pins;
  //     Pin adds its pin, then re-reads the slot's state and seq.
  //
  // Producer: the smallest `need` of the ACTIVE consumers (kNone: nobody).
  int64_t MinActiveNeed() const;
  // Producer: marks slot `s` WRITING if no active consumer needs its chunk
  // (given `min_need`) and nobody views it; else leaves it untouched.
  bool TakeBack(uint32_t s, int64_t min_need) const;
  // Producer: chunk `seq` is in slot `s` (written there by the pipeline):
  // READY, then `produced`, then the consumers are woken.
  void Publish(uint32_t s, int64_t seq, int64_t count, int64_t epoch, int64_t chunk_in_epoch) const;
  // Consumer `me`: pins the slot holding chunk `seq`. 1: pinned (`*slot`),
  // 0: no slot holds it, -1: a slot holds it but is changing hands.
  int Pin(uint32_t me, int64_t seq, uint32_t* slot) const;
  // Consumer `me`: enters the stream at the first block boundary from which
  // the segment holds every chunk up to the newest (publishing `need` and
  // ACTIVE, then checking again); tries `attempts` times, leaving the row in
  // `fallback_state` on failure.
  bool EnterStream(uint32_t me, uint32_t fallback_state, int attempts, int64_t* start) const;
  // Lets go of consumer row `i` and everything it holds; the pid goes last,
  // so the row is free for another claim only once it is clean.
  void ReleaseRow(uint32_t i) const;
};

// Blocks while *word == expected, at most `timeout_ns` (futex on shared
// memory: works across processes).
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns);
// Adds one to *word and wakes every waiter on it.
void Bump(std::atomic<uint32_t>* word);
// A name of letters, digits, '-', '_' and '.'.
Status ValidName(const std::string& name);
Geometry ReadGeometry(const Header& h);
// Whether the header describes a segment that fits in `size` bytes, with
// every table where the code will look for it.
Status CheckGeometry(const Geometry& h, uint64_t size, const std::string& name);
// Maps `fd` (read-write) as segment `seg_name`, unbound.
Result<std::shared_ptr<Segment>> MapSegment(const std::string& seg_name, int fd, size_t size);

// What a ring is made for.
struct RingLayout {
  uint32_t max_consumers = 0;  // 0: a private ring
  uint32_t slot_count = 0;
  int64_t chunk = 0;           // samples per slot (the pipeline's batch size)
  uint64_t sample_bytes = 0;
  int64_t shape[3] = {1, 1, 1};
  uint32_t dtype = 0;          // 0 uint8, 1 float32
  // Extra fields: how many, and each one's room per sample.
  uint32_t field_count = 0;
  uint64_t field_room[kMaxFields] = {};
  // Samples of many sizes: Header::ragged_axes and pad_multiple (`shape`
  // is then each axis's bound, a multiple of pad_multiple on ragged axes).
  uint32_t ragged_axes = 0, pad_multiple = 1;
  int64_t samples_per_epoch = 0, chunks_per_epoch = 0, block_chunks = 1;
  uint64_t spec_fingerprint = 0, dataset_fingerprint = 0;
  std::string spec_json;
  // Private rings: memory is reserved for the first this many slots (0:
  // all); the rest are reserved by ReserveSlots before they are used.
  uint32_t reserved_slots = 0;
  // A named ring shared with a group (`serve --group`): its gid, the
  // segment then 0660 (-1: the owner's alone, 0600).
  int64_t share_gid = -1;
};

// Reserves the memory of slots [first, first + count) of a ring created
// with fewer reserved (prefaulted, so a full /dev/shm is an error here, not
// a SIGBUS when a batch is written).
Status ReserveSlots(const Segment& seg, uint32_t first, uint32_t count);

// Creates a ring, every byte reserved (a full /dev/shm is an error now, not
// a SIGBUS later), its header complete (the magic written last) and RUNNING.
// `name` empty: private, unlinked at once, so it lives exactly as long as
// its mappings and a crash leaves nothing in /dev/shm. Otherwise named
// /nostall-shared-NAME, mode 0600: a name whose producer is alive is
// refused, a dead producer's is replaced. `what` names it in errors.
Result<std::shared_ptr<Segment>> CreateRing(const std::string& name, const RingLayout& layout);

// Opens the named ring `name` ("NAME", the caller's, or "OWNER:NAME") and
// checks that it is its owner's and closed to others (CheckSegmentOwner),
// then that it is one: magic, format
// version (a different one is an error naming both) and geometry, against
// the segment's size. `writable`: map it read-write (a consumer), else
// read-only (inspection); the slots (the batches) are read-only to a
// consumer either way: no consumer can change another's batches. `wait_s`: how long to wait for the name to appear
// (a producer starting); a segment being created is waited for briefly.
Result<std::shared_ptr<Segment>> OpenNamedRing(const std::string& name, bool writable,
                                               double wait_s);

}  // namespace nostall::ring

#endif  // NOSTALL_RING_RING_H_
