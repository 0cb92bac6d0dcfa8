// What the parquet driver saves in the index cache (docs/parquet.md): the
// files' footers and offset indexes as stored, each row's label and its
// small fields' sizes, used again while every file's size and stamp hold.
#ifndef NOSTALL_SOURCE_COLUMNAR_PARQUET_SAVED_H_
#define NOSTALL_SOURCE_COLUMNAR_PARQUET_SAVED_H_

#include <cstdint>
#include <string>
#include <vector>

#include "nostall/source.h"
#include "nostall/status.h"

namespace nostall::pq {

// One file of a Parquet dataset: its URI (a path, s3://bucket/key,
// https://host/key), its key in its store, its size and stamp (the store's
// version: a local file's FileStamp, an ETag's hash).
struct FileRef {
  std::string name;
  std::string key;
  uint64_t size = 0;
  int64_t stamp = 0;
};

struct Saved {
  std::vector<std::string> footers;
  std::vector<uint64_t> index_at;
  std::vector<std::string> indexes;
  std::vector<int64_t> labels;
  std::vector<std::string> classes;
  std::vector<int64_t> sizes;  // items x extra fields (-1: null)
};

std::string SerializeSaved(const std::vector<FileRef>& refs, const Saved& s);
// The saved index in `bytes`, if it is whole (its hash) and describes these
// files as they are now; else an error saying why it is not used.
Result<Saved> ParseSaved(const std::string& bytes, const std::vector<FileRef>& refs);
// The saved index's bytes, if it is this user's private file.
Result<std::string> ReadSaved(const std::string& path);
// What the saved index depends on besides the files: the path and the fields asked for.
std::string SavedKey(const std::string& uri, const SourceOptions& options);

}  // namespace nostall::pq

#endif  // NOSTALL_SOURCE_COLUMNAR_PARQUET_SAVED_H_
