// POSIX shared-memory segments, fully reserved at creation.
#ifndef NOSTALL_COMMON_SHM_H_
#define NOSTALL_COMMON_SHM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/fd.h"
#include "nostall/status.h"

namespace nostall {

// A mapped shared-memory segment. Created with mode 0600 and with every byte
// reserved up front (posix_fallocate), so a full /dev/shm is an error here,
// at start, never a SIGBUS on first touch later.
class ShmSegment {
 public:
  // Creates "/<prefix>-<pid>-<n>" of `size` bytes. With `keep_name` false the
  // name is unlinked at once: the memory lives exactly as long as mappings
  // of it, and a crash leaves nothing behind in /dev/shm.
  static Result<std::unique_ptr<ShmSegment>> Create(const std::string& prefix, size_t size,
                                                    bool keep_name);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  uint8_t* data() const { return static_cast<uint8_t*>(mapping_.data()); }
  size_t size() const { return mapping_.size(); }
  const std::string& name() const { return name_; }

 private:
  ShmSegment(std::string name, Mapping mapping, bool owns_name)
      : name_(std::move(name)), mapping_(std::move(mapping)), owns_name_(owns_name) {}
  std::string name_;
  Mapping mapping_;
  bool owns_name_;
};

// Makes a freshly created shared-memory fd exactly 0600 and reserves `size`
// bytes of it (posix_fallocate). Too little /dev/shm is a ResourceExhausted
// naming `what` (e.g. "the batch ring"), what is needed, what is free, and
// `hint`; it is checked before fallocate so that an impossible request does
// not first touch (and give back) gigabytes.
Status ReserveShm(int fd, uint64_t size, const std::string& what, const std::string& hint);

// Bytes free in /dev/shm (0 if unknown).
uint64_t ShmBytesFree();
// MemAvailable from /proc/meminfo, in bytes (0 if unknown).
uint64_t MemoryAvailable();
// The check ReserveShm makes before reserving: `size` must fit both the free
// space of /dev/shm and the memory available (less a margin for the
// processes), since /dev/shm may be larger than RAM. 0 = unknown, unchecked.
Status CheckShmRoom(uint64_t size, uint64_t shm_free, uint64_t mem_available,
                    const std::string& what, const std::string& hint);
std::string FormatBytes(uint64_t bytes);

}  // namespace nostall

#endif  // NOSTALL_COMMON_SHM_H_
