// The parquet driver's index, built once from the files' footers (and
// saved, parquet_saved.h): which column each field reads, that every file
// holds them alike, and per row its label and its small fields' sizes,
// read from many files at once (docs/parquet.md).
#ifndef NOSTALL_SOURCE_COLUMNAR_PARQUET_INDEX_H_
#define NOSTALL_SOURCE_COLUMNAR_PARQUET_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nostall/record.h"
#include "nostall/status.h"
#include "source/columnar/parquet_columns.h"
#include "source/columnar/parquet_file.h"
#include "source/columnar/parquet_saved.h"

namespace nostall::pq {

// Runs `fn(k)` for every file k, `threads` at a time; the first error.
Status ForEachFile(size_t n, size_t threads, const std::function<Status(size_t)>& fn);

// The columns the fields read: `columns` holds the extra fields' and then
// the media column, last; `label` the label's (leaf -1: none).
struct FieldColumns {
  std::vector<Column> columns;
  Column label;
  int extra() const { return static_cast<int>(columns.size()) - 1; }
};

// The fields asked for (none: the image or audio column and the label,
// found by Hugging Face's features or by name) matched to `first`'s
// columns, each checked; then every file checked to hold them alike.
Result<FieldColumns> ResolveColumns(const File& first, const std::vector<FieldSpec>& asked, const HfFeatures& hf);
Status CheckSameColumns(const std::vector<std::shared_ptr<File>>& files, const FieldColumns& c);

// What building the index reads from.
struct IndexFiles {
  const std::vector<std::shared_ptr<File>>* files;
  std::function<ReadAt(size_t file)> reader;
  size_t threads = 4;                // files read at once
  std::vector<int64_t> file_first;  // each file's first row
  int64_t total = 0;                 // rows
  uint64_t max_field_bytes = 0;
};

// Each file's offset indexes (set on it), labels and extra fields' sizes;
// string labels become classes in sorted order, a ClassLabel's names are
// its classes.
Result<Saved> BuildIndex(const IndexFiles& in, const FieldColumns& c, const HfFeatures& hf);

}  // namespace nostall::pq

#endif  // NOSTALL_SOURCE_COLUMNAR_PARQUET_INDEX_H_
