#include "common/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include <pwd.h>

namespace nostall {

uint64_t ShmBytesFree() {
  struct statvfs vfs;
  if (::statvfs("/dev/shm", &vfs) != 0) return 0;
  return static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

std::string FormatBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

uint64_t MemoryAvailable() {
  std::FILE* f = std::fopen("/proc/meminfo", "re");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long long v = 0;
    if (std::sscanf(line, "MemAvailable: %llu kB", &v) == 1) {
      kib = v;
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

namespace {

Status NoShmRoom(uint64_t size, uint64_t shm_free, const std::string& what,
                 const std::string& hint) {
  return ResourceExhausted("not enough shared memory for " + what + ": need " +
                           FormatBytes(size) + " in /dev/shm, " + FormatBytes(shm_free) +
                           " free (" + hint + ")");
}

}  // namespace

Status CheckShmRoom(uint64_t size, uint64_t shm_free, uint64_t mem_available,
                    const std::string& what, const std::string& hint) {
  if (shm_free != 0 && size > shm_free) return NoShmRoom(size, shm_free, what, hint);
  // /dev/shm is memory: it may be larger than what the machine can back
  // (tmpfs is sized apart from RAM), and a segment that passes the /dev/shm
  // check but not this one would be reserved and then end in the OOM killer.
  // Some memory is left for the processes themselves.
  const uint64_t margin = std::min<uint64_t>(mem_available / 16, uint64_t{1} << 30);
  if (mem_available != 0 && size > mem_available - margin) {
    return ResourceExhausted("not enough memory for " + what + ": need " + FormatBytes(size) +
                             ", only " + FormatBytes(mem_available) +
                             " of memory is available (MemAvailable in /proc/meminfo; /dev/shm is "
                             "held in memory, so its free space alone does not make room): free "
                             "some memory, or ask for less");
  }
  return Status::OK();
}

Status ReserveShm(int fd, uint64_t size, const std::string& what, const std::string& hint) {
  // fchmod because the umask may have narrowed (never widened) 0600; be exact.
  ::fchmod(fd, 0600);
  NOSTALL_RETURN_IF_ERROR(CheckShmRoom(size, ShmBytesFree(), MemoryAvailable(), what, hint));
  int err = ::posix_fallocate(fd, 0, static_cast<off_t>(size));
  if (err == ENOSPC) return NoShmRoom(size, ShmBytesFree(), what, hint);
  if (err != 0) return ErrnoError("cannot reserve " + FormatBytes(size) + " of shared memory", err);
  return Status::OK();
}

Result<SegmentRef> ParseSegmentRef(const std::string& text) {
  SegmentRef ref;
  ref.owner = ::geteuid();
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    ref.name = text;
    return ref;
  }
  const std::string owner = text.substr(0, colon);
  ref.name = text.substr(colon + 1);
  if (owner.empty()) return InvalidArgument("'" + text + "': no owner before ':' (OWNER:NAME)");
  if (std::all_of(owner.begin(), owner.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
      owner.size() < 10) {
    ref.owner = static_cast<unsigned>(std::stoul(owner));
  } else {
    struct passwd pw, *found = nullptr;
    char buf[4096];
    if (::getpwnam_r(owner.c_str(), &pw, buf, sizeof buf, &found) != 0 || found == nullptr) {
      return NotFound("'" + text + "': no user named '" + owner + "' on this node");
    }
    ref.owner = found->pw_uid;
  }
  ref.others = ref.owner != ::geteuid();
  return ref;
}

std::string SegmentPath(const std::string& prefix, const SegmentRef& ref) {
  return "/" + prefix + "-" + std::to_string(ref.owner) + "-" + ref.name;
}

Status CheckSegmentOwner(int fd, unsigned owner, const std::string& seg_name, const std::string& what) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoError("cannot stat " + what, errno);
  const std::string found = "shared memory " + seg_name + " (" + what + ") is owned by " +
                            UserText(st.st_uid) + " with mode " + ModeText(st.st_mode);
  if (st.st_uid != owner) {
    return PermissionDenied(found + ", not by " + UserText(owner) + ": it was not made for this "
                            "job (another user took the name?); nostall will not map it. Ask " +
                            UserText(st.st_uid) + " or root to remove it (rm /dev/shm" + seg_name +
                            "), or pick another name");
  }
  if ((st.st_mode & 07) != 0) {
    return PermissionDenied(found + ": open to every user of this node, who could change or cut "
                            "what the job reads; nostall will not map it (remove it and serve "
                            "again: nostall makes segments 0600, or 0660 for a group with --group)");
  }
  return Status::OK();
}

Result<Mapping> MapNostallSegment(int fd, bool writable, bool wait, const SegmentKind& kind) {
  NOSTALL_RETURN_IF_ERROR(CheckSegmentOwner(fd, kind.owner, kind.seg_name, kind.what));
  struct stat st;
  // A creator sizes a segment in one step and writes the magic last: an
  // empty segment or an all-zero magic may still be being made (waited
  // for); any other size or magic is final, and refused at once. Reserving
  // a large segment (a 40 GiB cache) takes a while, its blocks growing as
  // it goes: waited for as long as they grow (up to 10 minutes), given up
  // after 2 s without progress (a creator that died part-way).
  int64_t last_blocks = -1;
  auto last_progress = std::chrono::steady_clock::now();
  const auto started = last_progress;
  while (true) {
    if (::fstat(fd, &st) != 0) return ErrnoError("cannot stat " + kind.what, errno);
    if (st.st_size > 0 || !wait) break;
    const auto now = std::chrono::steady_clock::now();
    if (st.st_blocks != last_blocks) {
      last_blocks = st.st_blocks;
      last_progress = now;
    }
    if (now - last_progress > std::chrono::seconds(2) || now - started > std::chrono::minutes(10)) {
      return FailedPrecondition(kind.what + " (" + kind.seg_name + ") is empty: another process "
                                "began making it and has not finished (or died doing so); if "
                                "none is, remove it: " + kind.fix);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size < kind.header_bytes) return FailedPrecondition(kind.not_ours);
  void* addr = ::mmap(nullptr, size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
                      fd, 0);
  if (addr == MAP_FAILED) return ErrnoError("cannot map " + kind.what, errno);
  Mapping mapping(addr, size);
  const auto* bytes = static_cast<const uint8_t*>(addr);
  static const char kUnwritten[8] = {};
  for (int i = 0; wait && i < 200 && std::memcmp(bytes, kUnwritten, 8) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (std::memcmp(bytes, kind.magic, 8) != 0) return FailedPrecondition(kind.not_ours);
  uint32_t version = 0;
  std::memcpy(&version, bytes + 8, sizeof version);
  if (version != kind.version) {
    return FailedPrecondition(kind.what + " has format version " + std::to_string(version) +
                              ", this nostall reads " + std::to_string(kind.version) + "; " +
                              kind.fix);
  }
  return mapping;
}

}  // namespace nostall
