#include "common/fd.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

namespace nostall {

namespace {

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "a special file";
}

}  // namespace

Result<UniqueFd> OpenReadOnly(const std::string& path, uint64_t* size) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait, forever,
  // for a writer. Anything but a regular file is refused before any read;
  // on a regular file the flag changes nothing (reads of regular files
  // always complete), so it stays set.
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoError("cannot open", errno);
  UniqueFd owned(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoError("cannot stat", errno);
  if (!S_ISREG(st.st_mode)) {
    return DataError(std::string("not a regular file (it is ") + FileKind(st.st_mode) + ")");
  }
  if (size != nullptr) *size = static_cast<uint64_t>(st.st_size);
  return owned;
}

Status PreadExact(int fd, uint64_t offset, size_t size, uint8_t* out) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, out + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("read failed", errno);
    }
    if (n == 0) {
      return DataError("truncated: expected " + std::to_string(size) +
                       " bytes, file ends after " + std::to_string(done));
    }
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

Result<UniqueFd> OpenWithinLimit(const std::string& path, size_t max_bytes, uint64_t* size) {
  NOSTALL_ASSIGN_OR_RETURN(UniqueFd fd, OpenReadOnly(path, size));
  if (*size > max_bytes) {
    return DataError("file is " + std::to_string(*size) + " bytes, over the " + std::to_string(max_bytes) +
                     "-byte item limit");
  }
  return fd;
}

Status ReadWholeFile(const std::string& path, size_t max_bytes,
                     std::vector<uint8_t>* out, bool drop_cached) {
  uint64_t file_size = 0;
  NOSTALL_ASSIGN_OR_RETURN(UniqueFd fd, OpenWithinLimit(path, max_bytes, &file_size));
  const size_t size = static_cast<size_t>(file_size);
  out->resize(size);
  Status read = PreadExact(fd.get(), 0, size, out->data());
  if (drop_cached) ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);
  return read;
}

Status DropFromPageCache(const std::string& path, uint64_t offset, uint64_t size) {
  NOSTALL_ASSIGN_OR_RETURN(UniqueFd fd, OpenReadOnly(path));
  const int rc = ::posix_fadvise(fd.get(), static_cast<off_t>(offset), static_cast<off_t>(size),
                                 POSIX_FADV_DONTNEED);
  if (rc != 0) return ErrnoError("cannot drop " + path + " from the page cache", rc);
  return Status::OK();
}

std::string ModeText(unsigned mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0%03o", mode & 07777);
  return buf;
}

std::string UserText(unsigned uid) {
  std::string text = "uid " + std::to_string(uid);
  struct passwd pw, *found = nullptr;
  char buf[4096];
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found != nullptr) {
    text += std::string(" (") + found->pw_name + ")";
  }
  return text;
}

}  // namespace nostall
