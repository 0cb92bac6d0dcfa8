#include "ring/ring.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/clock.h"
#include "common/fd.h"
#include "common/process.h"
#include "common/shm.h"

namespace nostall::ring {

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000), static_cast<long>(timeout_ns % 1000000000)};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void Bump(std::atomic<uint32_t>* word) {
  word->fetch_add(1);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

Status ValidName(const std::string& name) {
  if (name.empty() || name.size() > 200) return InvalidArgument("shared loader name must be 1-200 characters");
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return InvalidArgument("shared loader name '" + name +
                             "' may hold only letters, digits, '-', '_' and '.'");
    }
  }
  return Status::OK();
}

Geometry ReadGeometry(const Header& h) {
  // volatile: one load per field, whatever the compiler would like to re-read.
  const volatile Header& v = h;
  Geometry g;
  g.header_bytes = v.header_bytes;
  g.max_consumers = v.max_consumers;
  g.slot_count = v.slot_count;
  g.dtype = v.dtype;
  g.chunk = v.chunk;
  g.samples_per_epoch = v.samples_per_epoch;
  g.chunks_per_epoch = v.chunks_per_epoch;
  g.block_chunks = v.block_chunks;
  g.sample_bytes = v.sample_bytes;
  for (int i = 0; i < 3; ++i) g.shape[i] = v.shape[i];
  g.consumers_offset = v.consumers_offset;
  g.slots_offset = v.slots_offset;
  g.pins_offset = v.pins_offset;
  g.spec_offset = v.spec_offset;
  g.spec_bytes = v.spec_bytes;
  g.data_offset = v.data_offset;
  g.slot_stride = v.slot_stride;
  g.field_count = v.field_count;
  for (uint32_t f = 0; f < kMaxFields; ++f) g.field_room[f] = v.field_room[f];
  g.ragged_axes = v.ragged_axes;
  g.pad_multiple = v.pad_multiple;
  return g;
}

int64_t Segment::HeldFrom() const {
  const int64_t produced = h->produced.load();
  std::vector<int64_t> ready;
  for (uint32_t s = 0; s < g.slot_count; ++s) {
    if (slots[s].state.load() == kReady) ready.push_back(slots[s].seq.load());
  }
  std::sort(ready.rbegin(), ready.rend());
  int64_t from = produced;
  for (int64_t seq : ready) {
    if (seq == from - 1) from = seq;
    else if (seq < from - 1) break;
  }
  return from;
}

std::vector<ConsumerInfo> Segment::Consumers(bool check_alive) const {
  std::vector<ConsumerInfo> out;
  for (uint32_t i = 0; i < g.max_consumers; ++i) {
    const ConsumerRow& c = consumers[i];
    const uint32_t state = c.state.load();
    const int64_t pid = c.pid.load();
    if (pid == 0 || (state != kActive && state != kLagged)) continue;
    std::string what = state == kActive ? "active" : "lagged";
    if (check_alive && !ProcessAlive(pid, c.start_time.load())) what = "dead";
    out.push_back({pid, what, c.need.load()});
  }
  return out;
}

void Segment::ReleaseRow(uint32_t i) const {
  ConsumerRow& c = consumers[i];
  for (uint32_t s = 0; s < g.slot_count; ++s) pin(s, i).store(0);
  CrashPoint("consumer.releasing");
  c.need.store(kNone);
  c.state.store(kFree);
  c.start_time.store(0);
  c.pid.store(0);
  Bump(&h->released_gen);
}

int64_t Segment::MinActiveNeed() const {
  int64_t min_need = kNone;
  for (uint32_t i = 0; i < g.max_consumers; ++i) {
    if (consumers[i].state.load() == kActive) min_need = std::min(min_need, consumers[i].need.load());
  }
  return min_need;
}

bool Segment::TakeBack(uint32_t s, int64_t min_need) const {
  SlotRow& row = slots[s];
  uint32_t state = row.state.load();
  const int64_t old = row.seq.load();
  if (state != kReady || min_need == kNone || old >= min_need) return false;
  if (!row.state.compare_exchange_strong(state, kWriting)) return false;
  CrashPoint("producer.slot_writing");
  // Now that the slot says WRITING: does anyone still need or view it?
  bool busy = false;
  for (uint32_t i = 0; i < g.max_consumers && !busy; ++i) {
    const ConsumerRow& c = consumers[i];
    if (c.state.load() == kActive && c.need.load() <= old) busy = true;
    if (pin(s, i).load() != 0) busy = true;
  }
  if (!busy) return true;
  row.state.store(state);  // give it back untouched
  return false;
}

void Segment::Publish(uint32_t s, int64_t seq, int64_t count, int64_t epoch,
                      int64_t chunk_in_epoch) const {
  CrashPoint("producer.slot_filled");
  SlotRow& row = slots[s];
  row.count = count;
  row.epoch = epoch;
  row.chunk_in_epoch = chunk_in_epoch;
  row.seq.store(seq);
  row.published_ns.store(NowNs());
  row.state.store(kReady);
  CrashPoint("producer.slot_ready");
  h->produced.store(seq + 1);
  Bump(&h->published_gen);
}

int Segment::Pin(uint32_t me, int64_t seq, uint32_t* slot) const {
  for (uint32_t s = 0; s < g.slot_count; ++s) {
    SlotRow& row = slots[s];
    if (row.seq.load() != seq) continue;
    if (row.state.load() != kReady) return -1;
    pin(s, me).fetch_add(1);
    CrashPoint("consumer.pin_added");
    if (row.state.load() == kReady && row.seq.load() == seq) {
      *slot = s;
      return 1;
    }
    pin(s, me).fetch_sub(1);
    return -1;
  }
  return 0;
}

bool Segment::EnterStream(uint32_t me, uint32_t fallback_state, int attempts,
                          int64_t* start) const {
  ConsumerRow& row = consumers[me];
  const int64_t k = g.chunks_per_epoch, bc = g.block_chunks;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    const int64_t from = HeldFrom();
    const int64_t epoch_start = from - from % k;
    int64_t block_start = epoch_start + (from % k + bc - 1) / bc * bc;
    if (block_start - epoch_start >= k) block_start = epoch_start + k;  // next epoch
    row.need.store(block_start);
    row.state.store(kActive);
    Bump(&h->released_gen);
    CrashPoint("consumer.need_published");
    if (HeldFrom() <= block_start) {
      *start = block_start;
      return true;
    }
    row.state.store(fallback_state);
  }
  row.need.store(kNone);
  Bump(&h->released_gen);
  return false;
}

// A segment that lies (damaged, from another build, or hostile) is refused
// instead of read out of bounds.
Status CheckGeometry(const Geometry& h, uint64_t size, const std::string& name) {
  auto bad = [&](const char* what) {
    return FailedPrecondition("shared loader '" + name + "' is damaged (" + what + ")");
  };
  if (h.header_bytes != sizeof(Header)) return bad("header size");
  if (h.max_consumers < 1 || h.max_consumers > 64) return bad("consumer count");
  if (h.slot_count < 2 || h.slot_count > 1024) return bad("slot count");
  if (h.dtype > 1) return bad("dtype");
  constexpr int64_t kMaxCount = int64_t{1} << 40;
  if (h.chunk < 1 || h.chunk > (1 << 20)) return bad("chunk size");
  if (h.samples_per_epoch < 1 || h.samples_per_epoch > kMaxCount) return bad("epoch size");
  if (h.chunks_per_epoch != (h.samples_per_epoch + h.chunk - 1) / h.chunk) return bad("chunks per epoch");
  if (h.block_chunks < 1 || h.block_chunks > h.chunks_per_epoch) return bad("shuffle block");
  uint64_t sample = h.elem_bytes();
  for (int64_t d : h.shape) {
    if (d < 1 || d > (1 << 16)) return bad("sample shape");
    sample *= static_cast<uint64_t>(d);
  }
  if (h.sample_bytes != sample) return bad("sample size");
  const uint64_t chunk = static_cast<uint64_t>(h.chunk);
  // Each part at or after the end of the one before it, 64-byte aligned.
  const uint64_t parts[][2] = {
      {RoundUp(sizeof(Header), 64), 0},
      {h.consumers_offset, uint64_t{sizeof(ConsumerRow)} * h.max_consumers},
      {h.slots_offset, uint64_t{sizeof(SlotRow)} * h.slot_count},
      {h.pins_offset, uint64_t{sizeof(std::atomic<uint32_t>)} * h.slot_count * h.max_consumers},
      {h.spec_offset, h.spec_bytes},
      {h.data_offset, 0},
  };
  uint64_t end = 0;
  for (const auto& part : parts) {
    if (part[0] < end || part[0] % 64 != 0 || part[0] > size || part[1] > size - part[0]) {
      return bad("table offsets");
    }
    end = part[0] + part[1];
  }
  if (sample > (uint64_t{1} << 40) / chunk) return bad("slot size");
  if (h.field_count > kMaxFields) return bad("field count");
  if (h.ragged_axes > 7 || h.pad_multiple < 1 || h.pad_multiple > 4096) return bad("ragged axes");
  for (int a = 0; a < 3; ++a) {
    if ((h.ragged_axes >> a & 1) != 0 && h.shape[a] % h.pad_multiple != 0) return bad("ragged bound");
  }
  uint64_t fields = 0;
  for (uint32_t f = 0; f < h.field_count; ++f) {
    if (h.field_room[f] > (uint64_t{1} << 30)) return bad("field size");
    fields += Segment::FieldBytes(h, f);
  }
  const uint64_t tables = (2 * chunk + Segment::DimsCount(h)) * sizeof(int64_t);
  if (h.slot_stride < RoundUp(chunk * sample, 64) + tables + fields ||
      h.slot_stride % 64 != 0 || h.slot_stride > (size - h.data_offset) / h.slot_count) {
    return bad("slot size");
  }
  return Status::OK();
}

Result<std::shared_ptr<Segment>> MapSegment(const std::string& seg_name, int fd, size_t size) {
  void* addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) return ErrnoError("cannot map " + seg_name, errno);
  auto seg = std::make_shared<Segment>();
  seg->mapping = Mapping(addr, size);
  seg->name = seg_name;
  seg->label = seg_name;
  return seg;
}

namespace {

// A fresh shm fd for the ring: a unique name for a private ring (unlinked
// by the caller once mapped); the given name for a named one, replacing the
// segment of a producer that is gone and refusing a live one's.
Result<UniqueFd> CreateRingFd(const std::string& name, std::string* seg_name) {
  const int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
  if (name.empty()) {
    static std::atomic<uint64_t> counter{0};
    *seg_name = "/nostall-ring-" + std::to_string(::getpid()) + "-" +
                std::to_string(counter.fetch_add(1));
    int raw = ::shm_open(seg_name->c_str(), flags, 0600);
    if (raw < 0) return ErrnoError("cannot create the batch ring " + *seg_name, errno);
    return UniqueFd(raw);
  }
  NOSTALL_ASSIGN_OR_RETURN(SegmentRef ref, ParseSegmentRef(name));
  if (ref.others) {
    return InvalidArgument("shared loader '" + name + "': a pipeline is served under its server's "
                           "own name (no OWNER: part)");
  }
  NOSTALL_RETURN_IF_ERROR(ValidName(ref.name));
  *seg_name = SegmentPath("nostall-shared", ref);
  int raw = ::shm_open(seg_name->c_str(), flags, 0600);
  if (raw < 0 && errno == EEXIST) {
    // Another producer's: refuse while it lives; replace a dead one's (or
    // anything else of ours under the name: it is in nostall's namespace).
    // A segment of another user's under our name is refused, naming them.
    UniqueFd old(::shm_open(seg_name->c_str(), O_RDONLY | O_CLOEXEC, 0));
    if (old.get() < 0 && errno == EACCES) {
      struct stat st;
      const bool seen = ::stat(("/dev/shm" + *seg_name).c_str(), &st) == 0;
      return PermissionDenied("shared memory " + *seg_name + " exists and is not yours" +
                              (seen ? " (owned by " + UserText(st.st_uid) + ", mode " +
                                          ModeText(st.st_mode) + ")" : std::string()) +
                              ": nostall will not use it; ask its owner or root to remove it, or "
                              "pick another name");
    }
    SegmentKind kind;
    kind.magic = kMagic;
    kind.version = kVersion;
    kind.header_bytes = sizeof(Header);
    kind.what = "shared loader '" + name + "'";
    kind.seg_name = *seg_name;
    kind.owner = ref.owner;
    if (old.get() >= 0) {
      NOSTALL_RETURN_IF_ERROR(CheckSegmentOwner(old.get(), ref.owner, *seg_name, kind.what));
      Result<Mapping> mapped = MapNostallSegment(old.get(), false, false, kind);
      if (mapped.ok()) {
        const auto* h = static_cast<const Header*>(mapped.value().data());
        if (h->state.load() == kRunning && ProcessAlive(h->producer_pid, h->producer_start_time)) {
          return FailedPrecondition("shared loader '" + name + "' is already served by pid " +
                                    std::to_string(h->producer_pid) + "; pick another name");
        }
      }
    }
    ::shm_unlink(seg_name->c_str());
    raw = ::shm_open(seg_name->c_str(), flags, 0600);
  }
  if (raw < 0) return ErrnoError("cannot create shared memory " + *seg_name, errno);
  return UniqueFd(raw);
}

// Writes the header and the empty tables of a freshly mapped ring.
void InitRing(Segment* seg, const RingLayout& l, const Geometry& g) {
  auto* h = new (seg->mapping.data()) Header{};
  h->version = kVersion;
  h->header_bytes = sizeof(Header);
  h->spec_fingerprint = l.spec_fingerprint;
  h->dataset_fingerprint = l.dataset_fingerprint;
  h->producer_pid = ::getpid();
  h->producer_start_time = SelfStartTime();
  h->heartbeat_ns.store(NowNs());
  h->max_consumers = g.max_consumers;
  h->slot_count = g.slot_count;
  h->dtype = g.dtype;
  h->chunk = g.chunk;
  h->samples_per_epoch = g.samples_per_epoch;
  h->chunks_per_epoch = g.chunks_per_epoch;
  h->block_chunks = g.block_chunks;
  h->sample_bytes = g.sample_bytes;
  for (int i = 0; i < 3; ++i) h->shape[i] = g.shape[i];
  h->consumers_offset = g.consumers_offset;
  h->slots_offset = g.slots_offset;
  h->pins_offset = g.pins_offset;
  h->spec_offset = g.spec_offset;
  h->spec_bytes = g.spec_bytes;
  h->data_offset = g.data_offset;
  h->slot_stride = g.slot_stride;
  h->field_count = g.field_count;
  for (uint32_t f = 0; f < kMaxFields; ++f) h->field_room[f] = g.field_room[f];
  h->ragged_axes = g.ragged_axes;
  h->pad_multiple = g.pad_multiple;
  seg->Bind(ReadGeometry(*h));
  for (uint32_t i = 0; i < g.max_consumers; ++i) {
    new (&seg->consumers[i]) ConsumerRow{};
    seg->consumers[i].need.store(kNone);
  }
  for (uint32_t s = 0; s < g.slot_count; ++s) {
    new (&seg->slots[s]) SlotRow{};
    seg->slots[s].seq.store(-1);
  }
  for (uint64_t i = 0; i < uint64_t{g.slot_count} * g.max_consumers; ++i) {
    new (&seg->pins[i]) std::atomic<uint32_t>(0);
  }
  std::memcpy(static_cast<uint8_t*>(seg->mapping.data()) + g.spec_offset, l.spec_json.data(),
              l.spec_json.size());
  h->state.store(kRunning);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::memcpy(h->magic, kMagic, sizeof kMagic);  // last: the segment is complete
}

}  // namespace

Result<std::shared_ptr<Segment>> CreateRing(const std::string& name, const RingLayout& l) {
  if (l.slot_count == 0 || l.chunk <= 0 || l.sample_bytes == 0) {
    return InvalidArgument("ring geometry must be positive");
  }
  if (l.sample_bytes > (uint64_t{1} << 40) / static_cast<uint64_t>(l.chunk) ||
      l.slot_count > 1024 || l.max_consumers > 64) {
    return InvalidArgument("absurd batch geometry: " + std::to_string(l.chunk) + " samples of " +
                           std::to_string(l.sample_bytes) + " bytes");
  }
  Geometry g;
  g.header_bytes = sizeof(Header);
  g.max_consumers = l.max_consumers;
  g.slot_count = l.slot_count;
  g.dtype = l.dtype;
  g.chunk = l.chunk;
  g.samples_per_epoch = l.samples_per_epoch;
  g.chunks_per_epoch = l.chunks_per_epoch;
  g.block_chunks = l.block_chunks;
  g.sample_bytes = l.sample_bytes;
  for (int i = 0; i < 3; ++i) g.shape[i] = l.shape[i];
  uint64_t off = RoundUp(sizeof(Header), 64);
  g.consumers_offset = off;
  off += RoundUp(sizeof(ConsumerRow) * l.max_consumers, 64);
  g.slots_offset = off;
  off += RoundUp(sizeof(SlotRow) * l.slot_count, 64);
  g.pins_offset = off;
  off += RoundUp(sizeof(std::atomic<uint32_t>) * l.slot_count * l.max_consumers, 64);
  g.spec_offset = off;
  g.spec_bytes = l.spec_json.size();
  off += RoundUp(l.spec_json.size(), 64);
  g.data_offset = RoundUp(off, 4096);
  const uint64_t chunk = static_cast<uint64_t>(l.chunk);
  if (l.field_count > kMaxFields) return InvalidArgument("over 16 extra fields");
  g.field_count = l.field_count;
  if (l.ragged_axes > 7 || l.pad_multiple < 1 || l.pad_multiple > 4096) {
    return InvalidArgument("ragged axes or pad multiple out of range");
  }
  g.ragged_axes = l.ragged_axes;
  g.pad_multiple = l.pad_multiple;
  uint64_t fields = 0;
  for (uint32_t f = 0; f < l.field_count; ++f) {
    if (l.field_room[f] > (uint64_t{1} << 30) / chunk) {
      return InvalidArgument("absurd field geometry: " + std::to_string(l.chunk) + " samples of " +
                             std::to_string(l.field_room[f]) + " bytes");
    }
    g.field_room[f] = l.field_room[f];
    fields += Segment::FieldBytes(g, f);
  }
  const uint64_t tables = (2 * chunk + Segment::DimsCount(g)) * sizeof(int64_t);
  g.slot_stride = RoundUp(RoundUp(chunk * l.sample_bytes, 64) + tables + fields, 4096);
  const uint64_t total = g.data_offset + g.slot_stride * l.slot_count;

  std::string seg_name;
  NOSTALL_ASSIGN_OR_RETURN(UniqueFd fd, CreateRingFd(name, &seg_name));
  const std::string what = name.empty() ? "the batch ring" : "shared loader '" + name + "'";
  const std::string hint = name.empty() ? "lower batch_size or prefetch, or enlarge /dev/shm"
                                        : "use a smaller chunk or fewer slots, or enlarge /dev/shm";
  const uint32_t reserved_slots =
      l.reserved_slots > 0 && name.empty() ? std::min(l.reserved_slots, l.slot_count) : l.slot_count;
  Status reserved = ReserveShm(fd.get(), g.data_offset + g.slot_stride * reserved_slots, what, hint);
  if (reserved.ok() && l.share_gid >= 0 && !name.empty() &&
      (::fchown(fd.get(), static_cast<uid_t>(-1), static_cast<gid_t>(l.share_gid)) != 0 ||
       ::fchmod(fd.get(), 0660) != 0)) {
    reserved = ErrnoError("cannot share " + what + " with group " + std::to_string(l.share_gid) +
                          " (a group you are in?)", errno);
  }
  if (reserved.ok() && reserved_slots < l.slot_count && ::ftruncate(fd.get(), static_cast<off_t>(total)) != 0) {
    reserved = ErrnoError("cannot size " + what, errno);
  }
  Result<std::shared_ptr<Segment>> mapped =
      reserved.ok() ? MapSegment(seg_name, fd.get(), total) : Result<std::shared_ptr<Segment>>(reserved);
  if (name.empty() || !mapped.ok()) ::shm_unlink(seg_name.c_str());
  if (!mapped.ok()) return mapped.status();
  std::shared_ptr<Segment> seg = std::move(mapped).value();
  InitRing(seg.get(), l, g);
  return seg;
}

Status ReserveSlots(const Segment& seg, uint32_t first, uint32_t count) {
  if (count == 0) return Status::OK();
  if (first + count > seg.g.slot_count) return Internal("slots beyond the ring");
  const uint64_t bytes = seg.g.slot_stride * count;
  NOSTALL_RETURN_IF_ERROR(CheckShmRoom(bytes, ShmBytesFree(), MemoryAvailable(), "the batch ring's "
                                       "slots", "lower batch_size or prefetch, or enlarge /dev/shm"));
  if (::madvise(seg.images(first), bytes, MADV_POPULATE_WRITE) != 0 && errno != EINVAL) {
    return ErrnoError("cannot reserve " + FormatBytes(bytes) + " for the batch ring's slots", errno);
  }
  return Status::OK();
}

Result<std::shared_ptr<Segment>> OpenNamedRing(const std::string& name, bool writable,
                                               double wait_s) {
  NOSTALL_ASSIGN_OR_RETURN(SegmentRef ref, ParseSegmentRef(name));
  NOSTALL_RETURN_IF_ERROR(ValidName(ref.name));
  const std::string seg_name = SegmentPath("nostall-shared", ref);
  const int64_t give_up = NowNs() + static_cast<int64_t>(wait_s * 1e9);
  const int flags = (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC;
  int raw = -1;
  while ((raw = ::shm_open(seg_name.c_str(), flags, 0)) < 0 && errno == ENOENT &&
         NowNs() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (raw < 0) {
    if (errno == ENOENT) {
      return NotFound("no shared loader '" + name + "' on this node (start one with "
                      "`nostall serve --spec SPEC --name " + ref.name + "`" +
                      (ref.others ? " as " + UserText(ref.owner) + ", with --group" : std::string()) + ")");
    }
    if (errno == EACCES) {
      struct stat st;
      const bool seen = ::stat(("/dev/shm" + seg_name).c_str(), &st) == 0;
      return PermissionDenied("cannot open shared loader '" + name + "' (" + seg_name +
                              (seen ? ", owned by " + UserText(st.st_uid) + ", mode " + ModeText(st.st_mode)
                                    : std::string()) +
                              "): its owner has not shared it with a group of yours (serve --group)");
    }
    return ErrnoError("cannot open shared loader '" + name + "'", errno);
  }
  UniqueFd fd(raw);
  SegmentKind kind;
  kind.magic = kMagic;
  kind.version = kVersion;
  kind.header_bytes = sizeof(Header);
  kind.what = "shared loader '" + name + "'";
  kind.not_ours = "shared memory " + seg_name + " is not a nostall shared loader";
  kind.fix = "serve it with this nostall, or remove it (nostall shared rm " + name + ")";
  kind.seg_name = seg_name;
  kind.owner = ref.owner;
  NOSTALL_ASSIGN_OR_RETURN(Mapping mapping, MapNostallSegment(fd.get(), writable, writable, kind));
  const uint64_t size = mapping.size();
  auto seg = std::make_shared<Segment>();
  seg->mapping = std::move(mapping);
  seg->name = seg_name;
  seg->label = name;
  const auto* h = static_cast<const Header*>(seg->mapping.data());
  const Geometry geometry = ReadGeometry(*h);
  NOSTALL_RETURN_IF_ERROR(CheckGeometry(geometry, size, name));
  seg->Bind(geometry);
  // The batches are the producer's to write: a consumer's in-place edit of
  // a batch (x.zero_(), a normalisation in place) must never reach another
  // consumer's. Its rows and pins stay writable.
  if (writable && ::mprotect(seg->data, size - geometry.data_offset, PROT_READ) != 0) {
    return ErrnoError("cannot make " + kind.what + "'s batches read-only", errno);
  }
  return seg;
}

}  // namespace nostall::ring
