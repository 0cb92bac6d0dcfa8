// One Parquet file as the parquet driver reads it (docs/parquet.md), on
// Apache Arrow's C++ Parquet library: the footer and the offset indexes are
// parsed by parquet::FileMetaData and parquet::OffsetIndex, pages decoded by
// its PageReader and ColumnReader. What is nostall's: which bytes to fetch
// (the storage, local or S3, is the caller's ReadAt), so that a row costs
// its page, not its row group, where the file has an offset index.
//
// Every error names the file, and where it is about a column chunk, the row
// group and the column. Arrow's exceptions never leave this file.
#ifndef NOSTALL_SOURCE_PARQUET_FILE_H_
#define NOSTALL_SOURCE_PARQUET_FILE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/mutex.h"
#include "nostall/status.h"

namespace parquet {
class FileMetaData;
class OffsetIndex;
}  // namespace parquet

namespace nostall::pq {

// Reads [offset, offset + length) of the file into *out (exactly; short is an
// error).
using ReadAt = std::function<Status(uint64_t offset, uint64_t length, std::string* out)>;

// A leaf column of the file's schema, by its dotted path ("label",
// "image.bytes").
struct Leaf {
  int index = -1;
  std::string path;
  int physical = 0;    // parquet::Type::type
  bool string = false;  // a BYTE_ARRAY annotated as a string (UTF8)
  int16_t max_def = 0, max_rep = 0;
};

// A byte range of a file.
struct Range {
  uint64_t offset = 0;
  uint64_t length = 0;
};

// What must be fetched to decode the values of some rows of one column
// chunk: its dictionary page (if any) and one data page where the file has
// an offset index, else the whole chunk.
struct Unit {
  int row_group = 0;
  int leaf = 0;
  int page = -1;          // -1: the whole chunk
  int64_t first_row = 0;  // within the row group
  int64_t rows = 0;
  Range dictionary;  // length 0: none (or inside `data`)
  Range data;
};

// A unit's values: row r (first_row + k) is blob[off[k], off[k + 1]) or
// absent (null) where !present[k]; integers also as `ints`.
struct Values {
  std::string blob;
  std::vector<uint64_t> off{0};
  std::vector<uint8_t> present;
  std::vector<int64_t> ints;  // INT32/INT64/BOOLEAN columns
  size_t bytes() const { return blob.size() + off.size() * 8 + present.size() + ints.size() * 8; }
};

class File {
 public:
  // Reads the footer of `name` (`size` bytes) through `read`: the magic,
  // the metadata and, for the leaves `wanted` (dotted paths; "" = none yet),
  // their offset indexes. `footer` and `indexes`, when given, are the saved
  // bytes of an earlier read (File::saved_*), so nothing is read.
  static Result<std::shared_ptr<File>> Open(const std::string& name, uint64_t size, const ReadAt& read);
  // From saved footer bytes (the index cache), nothing read.
  static Result<std::shared_ptr<File>> FromSaved(const std::string& name, uint64_t size,
                                                 const std::string& footer);

  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }
  int64_t rows() const { return rows_; }
  int row_groups() const { return static_cast<int>(rg_first_.size()); }
  int64_t row_group_rows(int rg) const;
  int64_t row_group_first(int rg) const { return rg_first_[static_cast<size_t>(rg)]; }
  // The row group holding row `row` of the file.
  int RowGroupOf(int64_t row) const;
  const std::vector<Leaf>& leaves() const { return leaves_; }
  // The top-level columns: name and whether it is a struct ("group").
  const std::vector<std::pair<std::string, bool>>& columns() const { return columns_; }
  // The leaf of dotted path `path`, -1 if none.
  int FindLeaf(const std::string& path) const;
  // The schema's key/value metadata entry `key` ("" if none).
  std::string Metadata(const std::string& key) const;
  // The footer as stored (for the index cache).
  const std::string& footer() const { return footer_; }

  // Reads the offset indexes of `leaves` (every row group), if the file has
  // them: one read covering them all. Without them (or for a chunk without
  // one) a unit is the whole chunk.
  Status ReadOffsetIndexes(const std::vector<int>& leaves, const ReadAt& read);
  // The same from bytes saved earlier (their file range: OffsetIndexRange).
  Status SetOffsetIndexes(const std::vector<int>& leaves, const std::string& bytes, uint64_t at);
  // The file range holding the offset indexes of `leaves` (length 0: none).
  Range OffsetIndexRange(const std::vector<int>& leaves) const;
  bool has_page_index(int leaf) const;
  // Chunks without an offset index: the pages found when a whole chunk was
  // decoded (Decode of a unit with page -1), by which later rows of that
  // chunk are read by their page. How many chunks are known so.
  int64_t pages_learned() const EXCLUDES(learned_mu_);

  // The whole column chunk of `leaf` in row group `rg`, as one unit.
  Result<Unit> ChunkUnit(int rg, int leaf) const;
  // Its uncompressed size (0 if the footer does not say).
  int64_t ChunkBytes(int rg, int leaf) const;
  // The unit holding row `row` (of the row group) of `leaf`.
  Result<Unit> UnitOf(int rg, int leaf, int64_t row) const;
  // Decodes a unit from its bytes (dictionary then data, as fetched).
  Result<Values> Decode(const Unit& u, const std::string& dictionary, const std::string& data) const;
  // "file.parquet (row group 3, column image.bytes)".
  std::string Where(int rg, int leaf) const;

 private:
  File() = default;
  Status Init();
  std::string name_;
  uint64_t size_ = 0;
  std::string footer_;
  std::shared_ptr<parquet::FileMetaData> meta_;
  std::vector<int64_t> rg_first_;
  int64_t rows_ = 0;
  std::vector<Leaf> leaves_;
  std::vector<std::pair<std::string, bool>> columns_;
  // [rg][leaf]: the chunk's offset index, when read.
  std::vector<std::vector<std::shared_ptr<parquet::OffsetIndex>>> offsets_;
  // A chunk's pages as its decoding found them: where each begins (file
  // offset), its bytes and first row; and where its data pages begin.
  struct Page {
    uint64_t offset;
    uint64_t size;
    int64_t first_row;
  };
  struct Learned {
    uint64_t data_start = 0;
    std::vector<Page> pages;
  };
  // Keeps the pages a whole chunk's decoding found (at `data_start`, each
  // (offset, bytes, first row) from there) when they tile the chunk's
  // `data_size` bytes and hold its `rows`, first rows rising from 0.
  void Learn(const Unit& u, uint64_t data_start, const std::vector<std::tuple<uint64_t, uint64_t, int64_t>>& pages,
             size_t data_size, int64_t rows) const;
  mutable Mutex learned_mu_;
  mutable std::map<std::pair<int, int>, std::shared_ptr<const Learned>> learned_ GUARDED_BY(learned_mu_);
};

}  // namespace nostall::pq

#endif  // NOSTALL_SOURCE_PARQUET_FILE_H_
