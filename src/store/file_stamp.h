// A local file's identity, for what is derived from it and kept (an index,
// a saved table): reused only while the stamp holds.
#ifndef NOSTALL_STORE_FILE_STAMP_H_
#define NOSTALL_STORE_FILE_STAMP_H_

#include <sys/stat.h>

#include <cstdint>
#include <string>

namespace nostall {

// What the index was built from; it is reused only while all of these hold.
// mtime and size can be set back by anyone (reproducible builds, `touch`,
// container layers); ctime and the inode cannot, and a shard's first and
// last 4 KiB are hashed: a shard rewritten under the same stamps is indexed
// again.
struct IndexStamp {
  std::string path;
  int64_t mtime_ns = 0;
  int64_t size = 0;  // 0 for directories
  int64_t ctime_ns = 0;
  uint64_t inode = 0;
  uint64_t content = 0;  // FNV-1a of a file's first and last 4 KiB; 0 for directories
};
// The stamp of `path`, stat'ed as `st`; `fd` open on it hashes its content
// (a file's), -1 does not (a directory's).
IndexStamp StampOf(const std::string& path, const struct stat& st, int fd);
// StampOf a regular file `path` (stat'ed as `st`, its content hashed) as
// one number, for what keeps a derived table keyed by it (the COCO table,
// Parquet's saved index): a file replaced with its size and mtime kept
// (`cp -p`, `rsync -a`, `tar x`) gets another.
int64_t FileStamp(const std::string& path, const struct stat& st);
// A file's mtime in nanoseconds, as stamps record it.
int64_t MtimeNs(const struct stat& st);

}  // namespace nostall

#endif  // NOSTALL_STORE_FILE_STAMP_H_
