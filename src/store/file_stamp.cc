// Local files' stamps (file_stamp.h).
#include "store/file_stamp.h"

#include <fcntl.h>
#include <unistd.h>

namespace nostall {

namespace {

uint64_t Fnv(uint64_t h, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

uint64_t HashHeadAndTail(int fd, uint64_t size) {
  constexpr uint64_t kPart = 4096;
  uint8_t buf[kPart];
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t at : {uint64_t{0}, size > kPart ? size - kPart : uint64_t{0}}) {
    const ssize_t n = ::pread(fd, buf, kPart, static_cast<off_t>(at));
    if (n > 0) h = Fnv(h, buf, static_cast<size_t>(n));
  }
  return h | 1;  // never 0, which means "not hashed"
}

}  // namespace

IndexStamp StampOf(const std::string& path, const struct stat& st, int fd) {
  IndexStamp s;
  s.path = path;
  s.mtime_ns = MtimeNs(st);
  s.size = S_ISDIR(st.st_mode) ? 0 : static_cast<int64_t>(st.st_size);
  s.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  s.inode = static_cast<uint64_t>(st.st_ino);
  s.content = fd >= 0 ? HashHeadAndTail(fd, static_cast<uint64_t>(st.st_size)) : 0;
  return s;
}

int64_t FileStamp(const std::string& path, const struct stat& st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  const IndexStamp s = StampOf(path, st, fd);
  if (fd >= 0) ::close(fd);
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t v : {static_cast<uint64_t>(s.mtime_ns), static_cast<uint64_t>(s.size),
                     static_cast<uint64_t>(s.ctime_ns), s.inode, s.content}) {
    h = Fnv(h, reinterpret_cast<const uint8_t*>(&v), sizeof v);
  }
  return static_cast<int64_t>(h);
}

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace nostall
