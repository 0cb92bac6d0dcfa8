// RAII owners for POSIX file descriptors and memory mappings.
#ifndef NOSTALL_COMMON_FD_H_
#define NOSTALL_COMMON_FD_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nostall/status.h"

namespace nostall {

// Owns one file descriptor; closes it on destruction. Movable, not copyable.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Owns one mmap'd region; unmaps it on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* addr, size_t size) : addr_(addr), size_(size) {}
  ~Mapping() { Reset(); }
  Mapping(Mapping&& o) noexcept
      : addr_(std::exchange(o.addr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  Mapping& operator=(Mapping&& o) noexcept {
    if (this != &o) {
      Reset();
      addr_ = std::exchange(o.addr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  void* data() const { return addr_; }
  size_t size() const { return size_; }
  void Reset() {
    if (addr_ != nullptr) ::munmap(addr_, size_);
    addr_ = nullptr;
    size_ = 0;
  }

 private:
  void* addr_ = nullptr;
  size_t size_ = 0;
};

// Opens regular file `path` read-only (O_CLOEXEC). Anything else (a FIFO, a
// device, a directory) is a DataError, refused without blocking.
// With `size`, also gives the file's size (from the same fstat).
Result<UniqueFd> OpenReadOnly(const std::string& path, uint64_t* size = nullptr);

// Reads exactly `size` bytes at `offset`; a short file is a DataError
// ("truncated"), EINTR is retried.
Status PreadExact(int fd, uint64_t offset, size_t size, uint8_t* out);

// OpenReadOnly, and a file over `max_bytes` (an item's limit) is a
// DataError saying so. `size`: the file's size.
Result<UniqueFd> OpenWithinLimit(const std::string& path, size_t max_bytes, uint64_t* size);

// Reads the whole file into `out` (resized). `max_bytes` guards against
// absurd files. With `drop_cached`, the file's pages are then dropped from the
// page cache (posix_fadvise DONTNEED).
Status ReadWholeFile(const std::string& path, size_t max_bytes,
                     std::vector<uint8_t>* out, bool drop_cached = false);

// A file's permission bits as `ls` writes them in octal ("0600").
std::string ModeText(unsigned mode);
// "uid 1001 (bob)", or "uid 1001" when the name is unknown.
std::string UserText(unsigned uid);

// Drops bytes [offset, offset + size) of `path` from the page cache
// (size 0: to the end of the file).
Status DropFromPageCache(const std::string& path, uint64_t offset = 0, uint64_t size = 0);

}  // namespace nostall

#endif  // NOSTALL_COMMON_FD_H_
