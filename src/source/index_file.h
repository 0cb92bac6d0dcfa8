// The on-disk index of a dataset (format in docs/index_format.md).
#ifndef NOSTALL_SOURCE_INDEX_FILE_H_
#define NOSTALL_SOURCE_INDEX_FILE_H_

#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nostall/status.h"

namespace nostall {

struct IndexEntry {
  std::string key;     // file path, or "shard:member"
  int64_t label;
  int32_t shard;       // -1: `key` is a whole file
  uint64_t offset;     // within the shard
  int64_t size;        // bytes; -1 if unknown (whole files are not stat'ed)
};

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

// A member of a tar sample besides its image and its `.cls` label (a
// `.json`, a `.txt`, a second image ...), kept for the fields a spec may
// ask for (nostall/record.h).
struct IndexMember {
  uint32_t ext;     // into Index::member_exts
  uint64_t offset;  // within the item's shard
  int64_t size;
};

struct Index {
  std::vector<IndexStamp> stamps;
  std::vector<std::string> classes;
  std::vector<std::string> shards;
  std::vector<IndexEntry> items;
  int64_t skipped = 0;
  // Files the walk found and left out, not being images nostall reads:
  // (extension, lower case, "" for none; count), by extension.
  std::vector<std::pair<std::string, int64_t>> left_out;
  // Tar samples' other members: item i's are members[member_begin[i] ..
  // member_begin[i + 1]) (both empty when no sample has one).
  std::vector<std::string> member_exts;  // WebDataset extensions, lower case
  std::vector<IndexMember> members;
  std::vector<uint32_t> member_begin;

  uint64_t Fingerprint() const;  // FNV-1a over keys, labels and spans
};

// The file that caches the index of the dataset described by `canonical`.
std::string IndexCachePath(const std::string& dir, const std::string& canonical);
// The index saved at `path`, if it is this user's (owned by the caller,
// writable by no one else: a shared cache directory's files planted by
// another user are ignored), parses, and is consistent: shard numbers in
// range, members inside their shard, whole files inside the folders walked.
Result<Index> LoadIndex(const std::string& path);
// The same checks on an index in memory (the fuzz target's entry).
Status CheckIndex(const Index& index, const std::string& path);
// Written to a fresh private temporary file (O_EXCL|O_NOFOLLOW, 0600) and
// renamed, so readers never see half a file and no symlink is followed; the
// cache directory is made 0700.
Status SaveIndex(const std::string& path, const Index& index);
// Reads the bytes of an index file (the parser LoadIndex runs, for fuzzing).
Result<Index> ParseIndex(const std::string& data, const std::string& path);
bool StampsStillHold(const Index& index);
// A file's mtime in nanoseconds, as stamps record it.
int64_t MtimeNs(const struct stat& st);

}  // namespace nostall

#endif  // NOSTALL_SOURCE_INDEX_FILE_H_
