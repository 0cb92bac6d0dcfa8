// The parquet driver's view of a dataset's files (src/source/parquet.cc):
// which files a path names, which column of them a field is (Hugging
// Face's features included), and a column's every value.
#ifndef NOSTALL_SOURCE_COLUMNAR_PARQUET_COLUMNS_H_
#define NOSTALL_SOURCE_COLUMNAR_PARQUET_COLUMNS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "nostall/record.h"
#include "nostall/status.h"
#include "source/columnar/parquet_file.h"
#include "source/columnar/parquet_saved.h"
#include "store/object_store.h"

namespace nostall::pq {

// The files a pattern names, in name order: braces expanded, then globs.
// `key`: the part of `uri` within `store` (a file, a glob or a brace pattern).
Result<std::vector<FileRef>> StoreFiles(const std::string& uri, const store::ObjectStore& store,
                                        const std::string& key);

// One field as the files hold it.
struct Column {
  std::string field;  // the field's name
  FieldKind kind = FieldKind::kBytes;
  bool optional = false;
  std::string name;  // the column
  int leaf = -1;     // its leaf: the column, or its struct's `bytes`
};

// The column of `file` a field's candidates name (exact, then in any case):
// its leaf, "" when none.
std::string FindColumn(const File& file, const std::vector<std::string>& candidates, bool media,
                       int* leaf);
// The file's columns, for an error message.
std::string ColumnList(const File& file);

// HF datasets' features, from the schema's "huggingface" metadata: the
// column of each feature type, and a ClassLabel's names. Whoever uploads a
// file writes that metadata: nested too deep it is a DataError naming the
// file (never parsed, copied or printed recursively); entries of another
// type than the features' are passed over.
struct HfFeatures {
  std::string image, audio;
  std::map<std::string, std::vector<std::string>> class_labels;  // column -> its names
};
Result<HfFeatures> ReadHfFeatures(const File& file);

// Every value of `leaf` in every row group of `file`, in row order.
Status ReadColumn(const File& file, int leaf, const ReadAt& read,
                  const std::function<Status(const Values&, int64_t first)>& each);

}  // namespace nostall::pq

#endif  // NOSTALL_SOURCE_COLUMNAR_PARQUET_COLUMNS_H_
