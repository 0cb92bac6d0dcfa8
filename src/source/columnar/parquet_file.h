// One file as the parquet driver reads it (docs/parquet.md): a Parquet file
// on Apache Arrow's C++ Parquet library (the footer and the offset indexes
// parsed by parquet::FileMetaData and parquet::OffsetIndex, pages decoded by
// its PageReader and ColumnReader), or an Arrow IPC file on Arrow's IPC
// reader. What is nostall's: which bytes to fetch (the storage, local or
// S3, is the caller's ReadAt), so that a row costs its page, not its row
// group, where the file has an offset index.
//
// Every error names the file, and where it is about a column chunk, the row
// group and the column. Arrow's exceptions never leave this file.
#ifndef NOSTALL_SOURCE_COLUMNAR_PARQUET_FILE_H_
#define NOSTALL_SOURCE_COLUMNAR_PARQUET_FILE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "nostall/status.h"

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

// A file of rows in columns, as the parquet driver reads it: a Parquet
// file (parquet_file.cc) or an Arrow IPC file, what Hugging Face's
// `datasets` writes (`save_to_disk`, its cache; arrow_ipc_file.cc). Row
// groups are Parquet's row groups or Arrow's record batches; leaves are
// the columns' values by dotted path; a unit is what one read fetches.
class File {
 public:
  virtual ~File() = default;
  // Reads what describes `name` (`size` bytes) through `read`: a Parquet
  // footer, or an Arrow IPC file's schema and record batch headers (by
  // the name: ".arrow" is Arrow IPC, anything else Parquet).
  static Result<std::shared_ptr<File>> Open(const std::string& name, uint64_t size, const ReadAt& read);
  // From saved bytes (footer(), the index cache), nothing read.
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
  virtual std::string Metadata(const std::string& key) const = 0;
  // What describes the file, as stored (for the index cache).
  const std::string& footer() const { return footer_; }

  // Reads what finds a row of `leaves` without its whole chunk (every row
  // group): Parquet's offset indexes, if the file has them (one read
  // covering them all), an Arrow IPC file's value offsets. Without them (or
  // for a chunk without one) a unit is the whole chunk. `saved` and `at`
  // (when given) are set to the bytes to save for SetOffsetIndexes.
  virtual Status ReadOffsetIndexes(const std::vector<int>& leaves, const ReadAt& read,
                                   std::string* saved = nullptr, uint64_t* at = nullptr) = 0;
  // The same from bytes saved earlier.
  virtual Status SetOffsetIndexes(const std::vector<int>& leaves, const std::string& bytes, uint64_t at) = 0;
  virtual bool has_page_index(int leaf) const = 0;
  // Chunks without an offset index: the pages found when a whole chunk was
  // decoded (Decode of a unit with page -1), by which later rows of that
  // chunk are read by their page. How many chunks are known so.
  virtual int64_t pages_learned() const = 0;

  // The first rows (within the row group) of `leaf`'s pages that the file's
  // offset index gives, which are the same on every read; {0} (the whole
  // chunk) without one.
  virtual std::vector<int64_t> IndexedPageRows(int rg, int leaf) const {
    (void)rg;
    (void)leaf;
    return {0};
  }
  // The whole column chunk of `leaf` in row group `rg`, as one unit.
  virtual Result<Unit> ChunkUnit(int rg, int leaf) const = 0;
  // Its uncompressed size (0 if the file does not say).
  virtual int64_t ChunkBytes(int rg, int leaf) const = 0;
  // The unit holding row `row` (of the row group) of `leaf`.
  virtual Result<Unit> UnitOf(int rg, int leaf, int64_t row) const = 0;
  // Decodes a unit from its bytes (dictionary then data, as fetched).
  virtual Result<Values> Decode(const Unit& u, const std::string& dictionary, const std::string& data) const = 0;
  // "file.parquet (row group 3, column image.bytes)".
  virtual std::string Where(int rg, int leaf) const = 0;

 protected:
  File() = default;
  std::string name_;
  uint64_t size_ = 0;
  std::string footer_;
  std::vector<int64_t> rg_first_;
  int64_t rows_ = 0;
  std::vector<Leaf> leaves_;
  std::vector<std::pair<std::string, bool>> columns_;
};

// A value appended to `out` as the driver reads it: an integer (also in
// `ints`), a boolean ("true"/"false", 1/0), a float or double (the shortest
// text that reads back the same, JSON's NaN and Infinity).
void AppendInteger(int64_t v, Values* out);
void AppendBoolean(bool v, Values* out);
void AppendReal(float v, Values* out);
void AppendReal(double v, Values* out);

// Arrow IPC files (arrow_ipc_file.cc): whether `name` is one, and File::Open
// and File::FromSaved for them.
bool IsArrowIpcName(const std::string& name);
Result<std::shared_ptr<File>> OpenArrowIpc(const std::string& name, uint64_t size, const ReadAt& read);
Result<std::shared_ptr<File>> ArrowIpcFromSaved(const std::string& name, uint64_t size, const std::string& saved);

}  // namespace nostall::pq

#endif  // NOSTALL_SOURCE_COLUMNAR_PARQUET_FILE_H_
