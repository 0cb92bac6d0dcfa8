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
struct IndexStamp {
  std::string path;
  int64_t mtime_ns;
  int64_t size;  // 0 for directories
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

  uint64_t Fingerprint() const;  // FNV-1a over keys, labels and spans
};

// The file that caches the index of the dataset described by `canonical`.
std::string IndexCachePath(const std::string& dir, const std::string& canonical);
Result<Index> LoadIndex(const std::string& path);
// Written to a temporary file and renamed, so readers never see half a file.
Status SaveIndex(const std::string& path, const Index& index);
bool StampsStillHold(const Index& index);
// A file's mtime in nanoseconds, as stamps record it.
int64_t MtimeNs(const struct stat& st);

}  // namespace nostall

#endif  // NOSTALL_SOURCE_INDEX_FILE_H_
