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

Result<Mapping> MapNostallSegment(int fd, bool writable, bool wait, const SegmentKind& kind) {
  struct stat st;
  // A creator sizes a segment in one step and writes the magic last: an
  // empty segment or an all-zero magic may still be being made (waited
  // for); any other size or magic is final, and refused at once.
  for (int i = 0;; ++i) {
    if (::fstat(fd, &st) != 0) return ErrnoError("cannot stat " + kind.what, errno);
    if (st.st_size > 0 || !wait || i >= 200) break;
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
