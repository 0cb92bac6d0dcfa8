// The shared-memory MinIO cache (format and protocol: docs/cache_format.md).
//
// Entries are published with one atomic store: an entry's state word goes
// EMPTY -> CLAIMED(pid) by compare-and-swap, the bytes and (offset, length)
// are written, then the word becomes READY with release ordering. Readers
// load the word with acquire and read only READY entries, so a writer killed
// at any point leaves at worst a CLAIMED entry (a miss), never a torn one; a
// later writer that finds the claimer dead takes the entry over. Space is a
// bump allocator (compare-and-swap on `used`); nothing is ever freed.
#include "cache/driver.h"
#include "nostall/cache.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <thread>

#include <xxhash.h>

#include "common/fd.h"
#include "common/process.h"
#include "common/shm.h"

namespace nostall {
namespace {

constexpr char kMagic[8] = {'N', 'S', 'T', 'C', 'A', 'C', 'H', '1'};
constexpr uint32_t kVersion = 2;
constexpr uint64_t kReady = 1ull << 63;
// Claimed: bits 0-31 the claimer's pid, bits 32-61 the low 30 bits of its
// process start time (so a reused pid is not taken for the claimer).
constexpr uint64_t kClaimed = 1ull << 62;
constexpr uint64_t kStartMask = (1ull << 30) - 1;

uint64_t ClaimWord() {
  return kClaimed | ((SelfStartTime() & kStartMask) << 32) | static_cast<uint32_t>(::getpid());
}

bool ClaimerAlive(uint64_t word) {
  const uint64_t start = ProcessStartTime(static_cast<uint32_t>(word));
  return start != 0 && (start & kStartMask) == ((word >> 32) & kStartMask);
}

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t reserved;
  uint64_t dataset_fingerprint;
  int64_t num_items;
  uint64_t budget_bytes;   // size of the data area
  uint64_t data_offset;
  std::atomic<uint64_t> used;
  std::atomic<int64_t> items;
  std::atomic<int64_t> hits;
  std::atomic<int64_t> misses;
};

struct Entry {
  std::atomic<uint64_t> state;
  uint64_t offset;  // within the data area
  uint64_t length;
  // XXH3-64 of the bytes, seeded with the item: the entry must prove it is
  // the item asked for. (offset, length) pointed at another item's bytes
  // (damage, a bug, a tampering process), even with that item's checksum,
  // fail it: a miss, never the wrong sample.
  uint64_t checksum;
};

uint64_t RecordChecksum(int64_t item, const uint8_t* bytes, size_t n) {
  return XXH3_64bits_withSeed(bytes, n, static_cast<uint64_t>(item));
}

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// The caller's own cache NAME: /nostall-cache-UID-NAME. Caches are per user
// (every job using one writes pixels into it: sharing one across users
// would be trusting them with the job's data).
std::string SegmentName(const std::string& name) {
  SegmentRef ref;
  ref.owner = ::geteuid();
  ref.name = name;
  return SegmentPath("nostall-cache", ref);
}

Status ValidName(const std::string& name) {
  if (name.empty() || name.size() > 200) return InvalidArgument("cache name must be 1-200 characters");
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return InvalidArgument("cache name '" + name + "' may hold only letters, digits, - _ .");
    }
  }
  return Status::OK();
}

}  // namespace

struct MinioCache::Impl {
  Mapping mapping;
  Header* header = nullptr;
  Entry* entries = nullptr;
  uint8_t* data = nullptr;
  // The geometry as checked against the mapping at attach. Other processes
  // can write the header at any time; these copies are what this process
  // trusts, and every offset and length read later is checked against them.
  int64_t num_items = 0;
  uint64_t budget = 0;

  // Where item `item`'s bytes lie, if entry `e`'s (offset, length) fit the
  // data area and the bytes there are the item's (its checksum).
  bool Span(int64_t item, const Entry& e, uint64_t* offset, uint64_t* length) const {
    *offset = e.offset;
    *length = e.length;
    return *length <= budget && *offset <= budget - *length &&
           e.checksum == RecordChecksum(item, data + *offset, *length);
  }

  bool Insert(int64_t item, const uint8_t* bytes, size_t size, void (*between)()) {
    if (item < 0 || item >= num_items) return false;
    Entry& e = entries[item];
    uint64_t seen = e.state.load(std::memory_order_acquire);
    const uint64_t mine = ClaimWord();
    while (true) {
      if (seen & kReady) return false;  // cached already
      if (seen & kClaimed) {
        // Being cached, unless the claimer died mid-insert (its pid gone, or
        // reused by another process): then take the entry over.
        if (ClaimerAlive(seen)) return false;
      }
      if (e.state.compare_exchange_weak(seen, mine, std::memory_order_acq_rel)) break;
    }
    // Reserve space only if it fits, so one large item that does not fit
    // leaves the rest of the budget to smaller ones.
    const uint64_t need = RoundUp(size, 8);
    uint64_t offset = header->used.load(std::memory_order_relaxed);
    do {
      if (need > budget || offset > budget - need) {
        e.state.store(0, std::memory_order_release);  // no room: release the claim
        return false;
      }
    } while (!header->used.compare_exchange_weak(offset, offset + need, std::memory_order_relaxed));
    if (between != nullptr) between();
    std::memcpy(data + offset, bytes, size);
    e.offset = offset;
    e.length = size;
    e.checksum = RecordChecksum(item, bytes, size);
    e.state.store(kReady, std::memory_order_release);  // visible only now, complete
    header->items.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
};

MinioCache::MinioCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MinioCache::~MinioCache() = default;

namespace {
SegmentKind CacheKind(const std::string& name) {
  SegmentKind kind;
  kind.magic = kMagic;
  kind.version = kVersion;
  kind.header_bytes = sizeof(Header);
  kind.what = "cache '" + name + "'";
  kind.not_ours = "shared memory " + SegmentName(name) + " is not a nostall cache";
  kind.fix = "remove it (nostall cache rm " + name + ")";
  kind.seg_name = SegmentName(name);
  kind.owner = ::geteuid();
  return kind;
}
}  // namespace

namespace {

// Creates the cache's segment (`*created`), or opens the one there; one of
// another user's is refused, naming its owner.
Result<UniqueFd> OpenCacheShm(const std::string& seg, const std::string& name, bool* created) {
  int raw = ::shm_open(seg.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (raw >= 0) {
    *created = true;
  } else if (errno == EEXIST) {
    raw = ::shm_open(seg.c_str(), O_RDWR | O_CLOEXEC, 0600);
  }
  if (raw < 0 && errno == EACCES) {
    struct stat st;
    const bool seen = ::stat(("/dev/shm" + seg).c_str(), &st) == 0;
    return PermissionDenied("shared memory " + seg + " (cache '" + name + "') exists and is not yours" +
                            (seen ? " (owned by " + UserText(st.st_uid) + ", mode " + ModeText(st.st_mode) + ")"
                                  : std::string()) +
                            ": nostall will not use it; ask its owner or root to remove it, or "
                            "pick another name");
  }
  if (raw < 0) return ErrnoError("cannot open shared-memory cache " + seg, errno);
  return UniqueFd(raw);
}

// An existing cache's header: of this dataset, and with the layout this
// process computes for its item count, inside the mapping's `size` bytes (a
// damaged or hostile header is refused, never followed out of bounds).
// `*budget`: the data's bytes, as read once and checked (another process
// may write the header at any time).
Status CheckHeader(const Header& h, const std::string& name, uint64_t dataset_fingerprint,
                   int64_t num_items, uint64_t data_offset, uint64_t size, uint64_t* budget) {
  if (h.dataset_fingerprint != dataset_fingerprint || h.num_items != num_items) {
    return FailedPrecondition("cache '" + name + "' holds another dataset (" +
                              std::to_string(h.num_items) + " items); use another name or "
                              "remove it (nostall cache rm " + name + ")");
  }
  const uint64_t claimed_offset = h.data_offset, claimed_budget = h.budget_bytes;
  if (claimed_offset != data_offset || claimed_budget % 4096 != 0 ||
      claimed_budget > size - data_offset) {
    return FailedPrecondition("cache '" + name + "' is damaged or truncated (its layout does "
                              "not fit its " + std::to_string(size) + " bytes); remove it "
                              "(nostall cache rm " + name + ")");
  }
  *budget = claimed_budget;
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<MinioCache>> MinioCache::Open(const std::string& name,
                                                     uint64_t budget_bytes,
                                                     uint64_t dataset_fingerprint,
                                                     int64_t num_items) {
  NOSTALL_RETURN_IF_ERROR(ValidName(name));
  if (num_items <= 0) return InvalidArgument("a cache needs a dataset with items");
  if (num_items > (int64_t{1} << 40)) return InvalidArgument("a cache holds at most 2^40 items");
  if (budget_bytes > (uint64_t{1} << 56)) {
    return InvalidArgument("cache size " + FormatBytes(budget_bytes) + " is absurd");
  }
  const std::string seg = SegmentName(name);
  const uint64_t table = RoundUp(sizeof(Header), 64) + static_cast<uint64_t>(num_items) * sizeof(Entry);
  const uint64_t data_offset = RoundUp(table, 4096);
  const uint64_t total = data_offset + RoundUp(budget_bytes, 4096);

  bool created = false;
  NOSTALL_ASSIGN_OR_RETURN(UniqueFd fd, OpenCacheShm(seg, name, &created));
  uint64_t size = total;
  uint64_t budget = RoundUp(budget_bytes, 4096);
  if (created) {
    Status reserved = ReserveShm(fd.get(), total, "cache '" + name + "'",
                                 "choose a smaller size, or enlarge /dev/shm");
    if (!reserved.ok()) {
      ::shm_unlink(seg.c_str());
      return reserved;
    }
  }
  SegmentKind kind = CacheKind(name);
  Mapping mapping;
  if (created) {
    void* addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (addr == MAP_FAILED) return ErrnoError("cannot map cache " + seg, errno);
    mapping = Mapping(addr, size);
  } else {
    // The creator may still be sizing it and writing its header.
    NOSTALL_ASSIGN_OR_RETURN(mapping, MapNostallSegment(fd.get(), true, true, kind));
    size = mapping.size();
    if (size < data_offset) {
      return FailedPrecondition("cache '" + name + "' is truncated or holds another dataset (" +
                                std::to_string(size) + " bytes); remove it (nostall cache rm " +
                                name + ")");
    }
  }
  void* addr = mapping.data();
  auto impl = std::make_unique<Impl>();
  impl->mapping = std::move(mapping);
  auto* h = static_cast<Header*>(addr);
  if (created) {
    new (h) Header{};
    h->version = kVersion;
    h->dataset_fingerprint = dataset_fingerprint;
    h->num_items = num_items;
    h->budget_bytes = RoundUp(budget_bytes, 4096);
    h->data_offset = data_offset;
    std::atomic_thread_fence(std::memory_order_release);
    std::memcpy(h->magic, kMagic, sizeof kMagic);  // last: the header is complete
  } else {
    NOSTALL_RETURN_IF_ERROR(
        CheckHeader(*h, name, dataset_fingerprint, num_items, data_offset, size, &budget));
  }
  impl->header = h;
  impl->num_items = num_items;
  impl->budget = budget;
  impl->entries = reinterpret_cast<Entry*>(static_cast<uint8_t*>(addr) + RoundUp(sizeof(Header), 64));
  impl->data = static_cast<uint8_t*>(addr) + data_offset;
  return std::unique_ptr<MinioCache>(new MinioCache(std::move(impl)));
}

std::vector<std::string> MinioCache::List() {
  std::vector<std::string> names;
  const std::string prefix = "nostall-cache-" + std::to_string(::geteuid()) + "-";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    std::string f = e.path().filename().string();
    if (f.rfind(prefix, 0) == 0) names.push_back(f.substr(prefix.size()));
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<MinioCache::Info> MinioCache::Inspect(const std::string& name) {
  NOSTALL_RETURN_IF_ERROR(ValidName(name));
  const std::string seg = SegmentName(name);
  int raw = ::shm_open(seg.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (raw < 0) return ErrnoError("no cache '" + name + "'", errno);
  UniqueFd fd(raw);
  NOSTALL_ASSIGN_OR_RETURN(Mapping map, MapNostallSegment(fd.get(), false, false, CacheKind(name)));
  const auto* h = static_cast<const Header*>(map.data());
  Info info;
  info.name = name;
  info.version = h->version;
  info.dataset_fingerprint = h->dataset_fingerprint;
  info.num_items = h->num_items;
  info.segment_bytes = map.size();
  info.stats.budget_bytes = h->budget_bytes;
  info.stats.used_bytes = std::min(h->used.load(), h->budget_bytes);
  info.stats.items = h->items.load();
  info.stats.hits = h->hits.load();
  info.stats.misses = h->misses.load();
  return info;
}

Status MinioCache::Remove(const std::string& name) {
  NOSTALL_RETURN_IF_ERROR(ValidName(name));
  if (::shm_unlink(SegmentName(name).c_str()) != 0) {
    return ErrnoError("cannot remove cache '" + name + "'", errno);
  }
  return Status::OK();
}

Result<bool> MinioCache::Lookup(int64_t item, std::vector<uint8_t>* out) {
  Impl& m = *impl_;
  if (item < 0 || item >= m.num_items) return false;
  const Entry& e = m.entries[item];
  uint64_t offset = 0, length = 0;
  if (!(e.state.load(std::memory_order_acquire) & kReady) || !m.Span(item, e, &offset, &length)) {
    // Not cached, or an entry whose span lies outside the data area or
    // holds another item's bytes or damaged ones: a miss, and the item is
    // read from storage.
    m.header->misses.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  out->assign(m.data + offset, m.data + offset + length);
  m.header->hits.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool MinioCache::Insert(int64_t item, const uint8_t* data, size_t size) {
  return impl_->Insert(item, data, size, nullptr);
}

bool MinioCache::InsertForTest(int64_t item, const uint8_t* data, size_t size, void (*between)()) {
  return impl_->Insert(item, data, size, between);
}

CacheStats MinioCache::Stats() const {
  const Header& h = *impl_->header;
  CacheStats s;
  s.tier = "minio";
  s.budget_bytes = impl_->budget;
  s.used_bytes = std::min(h.used.load(), impl_->budget);
  s.items = h.items.load();
  s.hits = h.hits.load();
  s.misses = h.misses.load();
  return s;
}

CacheDriver MinioDriver() {
  return {"minio", [](const CacheConfig& c) -> Result<std::unique_ptr<Cache>> {
            NOSTALL_ASSIGN_OR_RETURN(
                std::unique_ptr<MinioCache> cache,
                MinioCache::Open(c.name, c.budget_bytes, c.dataset_fingerprint, c.num_items));
            return std::unique_ptr<Cache>(std::move(cache));
          },
          [](const nlohmann::json& given) { return NoCacheOptions("minio", given); }};
}

}  // namespace nostall
