#include "source/columnar/parquet_file.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <tuple>

#include <arrow/buffer.h>
#include <arrow/io/memory.h>
#include <arrow/memory_pool.h>
#include <arrow/util/key_value_metadata.h>
#include <parquet/column_page.h>
#include <parquet/column_reader.h>
#include <parquet/exception.h>
#include <parquet/metadata.h>
#include <parquet/page_index.h>
#include <parquet/properties.h>
#include <parquet/schema.h>

#include "common/mutex.h"

namespace nostall::pq {

// A Parquet file (File).
class ParquetFile final : public File {
 public:
  static Result<std::shared_ptr<File>> Open(const std::string& name, uint64_t size, const ReadAt& read);
  static Result<std::shared_ptr<File>> FromSaved(const std::string& name, uint64_t size,
                                                 const std::string& footer);
  std::string Metadata(const std::string& key) const override;
  Status ReadOffsetIndexes(const std::vector<int>& leaves, const ReadAt& read, std::string* saved,
                           uint64_t* at) override;
  Status SetOffsetIndexes(const std::vector<int>& leaves, const std::string& bytes, uint64_t at) override;
  bool has_page_index(int leaf) const override;
  std::vector<int64_t> IndexedPageRows(int rg, int leaf) const override;
  int64_t pages_learned() const override EXCLUDES(learned_mu_);
  Result<Unit> ChunkUnit(int rg, int leaf) const override;
  int64_t ChunkBytes(int rg, int leaf) const override;
  Result<Unit> UnitOf(int rg, int leaf, int64_t row) const override;
  Result<Values> Decode(const Unit& u, const std::string& dictionary, const std::string& data) const override;
  std::string Where(int rg, int leaf) const override;

 private:
  ParquetFile() = default;
  Status Init();
  // The file range holding the offset indexes of `leaves` (length 0: none).
  Range OffsetIndexRange(const std::vector<int>& leaves) const;
  std::shared_ptr<parquet::FileMetaData> meta_;
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

namespace {

constexpr uint64_t kMaxFooter = 256ull << 20;  // a footer larger than this is not believed

// Arrow allocates from the system allocator here (not its bundled jemalloc),
// so the sanitizers see every allocation.
const parquet::ReaderProperties& Properties() {
  static const parquet::ReaderProperties props(arrow::system_memory_pool());
  return props;
}

// Arrow's allocations while one unit is decoded, each refused past a bound:
// a page header's sizes and a dictionary page's value count are claims, and
// Arrow sizes its buffers by them (a dictionary page of 18 KB claiming 2^30
// values asks for 23 GB). The bound is far above what a page can hold:
// 32 times the unit's bytes, and never under 256 MiB.
class BoundedPool final : public arrow::MemoryPool {
 public:
  explicit BoundedPool(int64_t limit) : limit_(limit) {}
  arrow::Status Allocate(int64_t size, int64_t alignment, uint8_t** out) override {
    if (size > limit_) return Refused(size);
    return base_->Allocate(size, alignment, out);
  }
  arrow::Status Reallocate(int64_t old_size, int64_t new_size, int64_t alignment, uint8_t** ptr) override {
    if (new_size > limit_) return Refused(new_size);
    return base_->Reallocate(old_size, new_size, alignment, ptr);
  }
  void Free(uint8_t* buffer, int64_t size, int64_t alignment) override { base_->Free(buffer, size, alignment); }
  int64_t bytes_allocated() const override { return base_->bytes_allocated(); }
  int64_t total_bytes_allocated() const override { return base_->total_bytes_allocated(); }
  int64_t num_allocations() const override { return base_->num_allocations(); }
  std::string backend_name() const override { return base_->backend_name(); }

 private:
  arrow::Status Refused(int64_t size) const {
    return arrow::Status::OutOfMemory("the page claims ", size, " bytes of memory, over the ", limit_,
                                      " its bytes can need");
  }
  arrow::MemoryPool* const base_ = arrow::system_memory_pool();
  const int64_t limit_;
};

uint32_t LittleEndian32(const char* p) {
  return static_cast<uint32_t>(static_cast<unsigned char>(p[0])) |
         static_cast<uint32_t>(static_cast<unsigned char>(p[1])) << 8 |
         static_cast<uint32_t>(static_cast<unsigned char>(p[2])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(p[3])) << 24;
}

template <typename T>
void AppendNumber(T v, Values* out) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->blob.append(buf, r.ptr);
}

template <typename T>
void AppendFloating(T x, Values* out) {
  if (x != x) {
    out->blob += "NaN";  // JSON's reading of a float column, as Python's json writes it
  } else if (x == std::numeric_limits<T>::infinity() || x == -std::numeric_limits<T>::infinity()) {
    out->blob += x > 0 ? "Infinity" : "-Infinity";
  } else {
    const size_t at = out->blob.size();
    AppendNumber(x, out);
    if (out->blob.find_first_of(".e", at) == std::string::npos) out->blob += ".0";  // a float stays one
  }
}

// Reads every value of a column reader positioned at its first row into
// `out` (rows values; non-repeated leaves: one level per row).
template <typename DType>
Status ReadAll(parquet::ColumnReader* base, const Leaf& leaf, int64_t rows, Values* out) {
  auto* r = static_cast<parquet::TypedColumnReader<DType>*>(base);
  using T = typename DType::c_type;
  constexpr int64_t kBatch = 1024;
  std::vector<int16_t> def(kBatch);
  std::unique_ptr<T[]> vals(new T[kBatch]);
  int64_t done = 0;
  while (done < rows) {
    const int64_t want = std::min(kBatch, rows - done);
    int64_t got_values = 0;
    const int64_t levels = r->ReadBatch(want, leaf.max_def > 0 ? def.data() : nullptr, nullptr, vals.get(),
                                        &got_values);
    if (levels <= 0) return DataError("the column chunk ends after " + std::to_string(done) + " of " +
                                      std::to_string(rows) + " rows");
    int64_t v = 0;
    for (int64_t k = 0; k < levels; ++k) {
      const bool present = leaf.max_def == 0 || def[static_cast<size_t>(k)] == leaf.max_def;
      out->present.push_back(present ? 1 : 0);
      if (present) {
        if (v >= got_values) return DataError("the page's levels and values disagree");
        const T& x = vals[v++];
        if constexpr (std::is_same_v<DType, parquet::ByteArrayType>) {
          out->blob.append(reinterpret_cast<const char*>(x.ptr), x.len);
        } else if constexpr (std::is_same_v<DType, parquet::BooleanType>) {
          AppendBoolean(x, out);
        } else if constexpr (std::is_integral_v<T>) {
          AppendInteger(static_cast<int64_t>(x), out);
        } else {
          AppendReal(x, out);
        }
      } else if constexpr (std::is_integral_v<T> || std::is_same_v<DType, parquet::BooleanType>) {
        out->ints.push_back(0);
      }
      out->off.push_back(out->blob.size());
    }
    done += levels;
  }
  return Status::OK();
}

}  // namespace

void AppendInteger(int64_t v, Values* out) {
  AppendNumber(v, out);
  out->ints.push_back(v);
}

void AppendBoolean(bool v, Values* out) {
  out->blob += v ? "true" : "false";
  out->ints.push_back(v ? 1 : 0);
}

void AppendReal(float v, Values* out) { AppendFloating(v, out); }
void AppendReal(double v, Values* out) { AppendFloating(v, out); }

Result<std::shared_ptr<File>> File::Open(const std::string& name, uint64_t size, const ReadAt& read) {
  if (IsArrowIpcName(name)) return OpenArrowIpc(name, size, read);
  return ParquetFile::Open(name, size, read);
}

Result<std::shared_ptr<File>> File::FromSaved(const std::string& name, uint64_t size, const std::string& footer) {
  if (IsArrowIpcName(name)) return ArrowIpcFromSaved(name, size, footer);
  return ParquetFile::FromSaved(name, size, footer);
}

int64_t File::row_group_rows(int rg) const {
  const size_t g = static_cast<size_t>(rg);
  return (g + 1 < rg_first_.size() ? rg_first_[g + 1] : rows_) - rg_first_[g];
}

int File::RowGroupOf(int64_t row) const {
  auto it = std::upper_bound(rg_first_.begin(), rg_first_.end(), row);
  return static_cast<int>(it - rg_first_.begin()) - 1;
}

int File::FindLeaf(const std::string& path) const {
  for (const Leaf& l : leaves_) {
    if (l.path == path) return l.index;
  }
  return -1;
}

Result<std::shared_ptr<File>> ParquetFile::Open(const std::string& name, uint64_t size, const ReadAt& read) {
  if (size < 12) {
    return DataError(name + ": not a Parquet file: " + std::to_string(size) + " bytes, fewer than a footer's 12");
  }
  std::string tail;
  const uint64_t guess = std::min<uint64_t>(size, 64 << 10);  // most footers: one read
  NOSTALL_RETURN_IF_ERROR(read(size - guess, guess, &tail));
  if (tail.size() != guess) return DataError(name + ": short read of the footer");
  const char* end = tail.data() + tail.size();
  if (std::memcmp(end - 4, "PAR1", 4) != 0) {
    if (std::memcmp(end - 4, "PARE", 4) == 0) {
      return DataError(name + ": an encrypted Parquet file (nostall does not read encrypted footers)");
    }
    return DataError(name + ": not a Parquet file (no PAR1 magic at its end; truncated, or another format)");
  }
  const uint64_t len = LittleEndian32(end - 8);
  if (len == 0 || len + 12 > size || len > kMaxFooter) {
    return DataError(name + ": the footer's length (" + std::to_string(len) + " bytes) does not fit the file's " +
                     std::to_string(size) + " bytes (truncated?)");
  }
  std::string footer;
  if (len + 8 <= guess) {
    footer.assign(end - 8 - len, len);
  } else {
    NOSTALL_RETURN_IF_ERROR(read(size - 8 - len, len, &footer));
  }
  return FromSaved(name, size, footer);
}

Result<std::shared_ptr<File>> ParquetFile::FromSaved(const std::string& name, uint64_t size,
                                                     const std::string& footer) {
  std::shared_ptr<ParquetFile> f(new ParquetFile());
  f->name_ = name;
  f->size_ = size;
  f->footer_ = footer;
  NOSTALL_RETURN_IF_ERROR(f->Init());
  return std::shared_ptr<File>(std::move(f));
}

Status ParquetFile::Init() {
  try {
    meta_ = parquet::FileMetaData::Make(footer_.data(), static_cast<int64_t>(footer_.size()), Properties());
    const parquet::SchemaDescriptor* schema = meta_->schema();
    for (int i = 0; i < schema->num_columns(); ++i) {
      const parquet::ColumnDescriptor* d = schema->Column(i);
      Leaf l;
      l.index = i;
      l.path = d->path()->ToDotString();
      l.physical = d->physical_type();
      l.string = d->logical_type() != nullptr && d->logical_type()->is_string();
      l.max_def = d->max_definition_level();
      l.max_rep = d->max_repetition_level();
      leaves_.push_back(l);
    }
    const parquet::schema::GroupNode* root = schema->group_node();
    for (int i = 0; i < root->field_count(); ++i) {
      columns_.push_back({root->field(i)->name(), root->field(i)->is_group()});
    }
    // Row counts are the footer's claims: each row group's must agree with
    // the value counts of its columns (one per row in a flat column), and
    // all of them with the file's size (a row of a dataset costs more than
    // a bit), before any memory is sized by them.
    int64_t first = 0;
    for (int g = 0; g < meta_->num_row_groups(); ++g) {
      rg_first_.push_back(first);
      auto rg = meta_->RowGroup(g);
      const int64_t n = rg->num_rows();
      if (n < 0) return DataError(name_ + ": row group " + std::to_string(g) + " has a negative row count");
      if (n > static_cast<int64_t>(std::min<uint64_t>(size_, uint64_t{1} << 56)) * 8 - first) {
        return DataError(name_ + ": its row groups claim over " + std::to_string(first + n) + " rows in " +
                         std::to_string(size_) + " bytes");
      }
      for (const Leaf& l : leaves_) {
        const int64_t values = rg->ColumnChunk(l.index)->num_values();
        if (l.max_rep == 0 ? values != n : values < n) {
          return DataError(Where(g, l.index) + ": the row group says " + std::to_string(n) + " rows, the column " +
                           std::to_string(values) + " values");
        }
      }
      first += n;
    }
    rows_ = first;
    if (rows_ != meta_->num_rows()) {
      return DataError(name_ + ": its row groups hold " + std::to_string(rows_) + " rows, its footer says " +
                       std::to_string(meta_->num_rows()));
    }
  } catch (const std::exception& e) {
    return DataError(name_ + ": a damaged footer: " + e.what());
  }
  offsets_.assign(rg_first_.size(), std::vector<std::shared_ptr<parquet::OffsetIndex>>(leaves_.size()));
  return Status::OK();
}

std::string ParquetFile::Metadata(const std::string& key) const {
  const auto& kv = meta_->key_value_metadata();
  if (kv == nullptr) return "";
  const int i = kv->FindKey(key);
  return i < 0 ? "" : kv->value(i);
}

std::string ParquetFile::Where(int rg, int leaf) const {
  return name_ + " (row group " + std::to_string(rg) + ", column " + leaves_[static_cast<size_t>(leaf)].path + ")";
}

Range ParquetFile::OffsetIndexRange(const std::vector<int>& leaves) const {
  uint64_t lo = UINT64_MAX, hi = 0;
  try {
    for (int g = 0; g < row_groups(); ++g) {
      auto rg = meta_->RowGroup(g);
      for (int leaf : leaves) {
        auto loc = rg->ColumnChunk(leaf)->GetOffsetIndexLocation();
        if (!loc || loc->offset < 0 || loc->length <= 0) continue;
        lo = std::min<uint64_t>(lo, static_cast<uint64_t>(loc->offset));
        hi = std::max<uint64_t>(hi, static_cast<uint64_t>(loc->offset) + static_cast<uint64_t>(loc->length));
      }
    }
  } catch (const std::exception&) {
    return {};
  }
  if (hi <= lo || hi > size_) return {};
  return {lo, hi - lo};
}

Status ParquetFile::ReadOffsetIndexes(const std::vector<int>& leaves, const ReadAt& read, std::string* saved,
                                      uint64_t* at) {
  const Range r = OffsetIndexRange(leaves);
  if (at != nullptr) *at = r.offset;
  if (r.length == 0) return Status::OK();
  if (r.length > kMaxFooter) return DataError(name_ + ": its offset indexes span more than 256 MiB");
  std::string bytes;
  NOSTALL_RETURN_IF_ERROR(read(r.offset, r.length, &bytes));
  NOSTALL_RETURN_IF_ERROR(SetOffsetIndexes(leaves, bytes, r.offset));
  if (saved != nullptr) *saved = std::move(bytes);
  return Status::OK();
}

Status ParquetFile::SetOffsetIndexes(const std::vector<int>& leaves, const std::string& bytes, uint64_t at) {
  for (int g = 0; g < row_groups(); ++g) {
    for (int leaf : leaves) {
      try {
        auto cc = meta_->RowGroup(g)->ColumnChunk(leaf);
        auto loc = cc->GetOffsetIndexLocation();
        if (!loc || loc->offset < 0 || loc->length <= 0) continue;
        const uint64_t o = static_cast<uint64_t>(loc->offset), n = static_cast<uint64_t>(loc->length);
        if (o < at || o + n > at + bytes.size()) return DataError(Where(g, leaf) + ": its offset index lies outside the file");
        std::shared_ptr<parquet::OffsetIndex> oi =
            parquet::OffsetIndex::Make(bytes.data() + (o - at), static_cast<int64_t>(n), Properties());
        // Checked once here: the pages tile the chunk's data, in order, from
        // its first data page to its end, first rows rising from 0. (That
        // each page holds the rows the index gives it is checked as it is
        // decoded: ReadAll.)
        const auto& pages = oi->page_locations();
        const int64_t rows = row_group_rows(g);
        const int64_t start = cc->has_dictionary_page() && cc->dictionary_page_offset() > 0
                                  ? cc->dictionary_page_offset()
                                  : cc->data_page_offset();
        const int64_t end = start + cc->total_compressed_size();
        int64_t next_at = cc->data_page_offset();
        for (size_t k = 0; k < pages.size(); ++k) {
          const auto& p = pages[k];
          const bool rows_ok = p.first_row_index >= 0 && p.first_row_index < std::max<int64_t>(rows, 1) &&
                               (k == 0 ? p.first_row_index == 0 : p.first_row_index > pages[k - 1].first_row_index);
          if (!rows_ok || p.offset != next_at || p.compressed_page_size <= 0 ||
              p.compressed_page_size > end - p.offset) {
            return DataError(Where(g, leaf) + ": its offset index lies (page " + std::to_string(k) +
                             (rows_ok ? " does not follow the page before it in the chunk"
                                      : " starts at a row out of order") + ")");
          }
          next_at = p.offset + p.compressed_page_size;
        }
        if (!pages.empty() && next_at != end) {
          return DataError(Where(g, leaf) + ": its offset index lies (its pages end at byte " +
                           std::to_string(next_at) + ", the chunk at " + std::to_string(end) + ")");
        }
        if (pages.empty() && rows > 0) return DataError(Where(g, leaf) + ": its offset index lists no page");
        offsets_[static_cast<size_t>(g)][static_cast<size_t>(leaf)] = std::move(oi);
      } catch (const std::exception& e) {
        return DataError(Where(g, leaf) + ": a damaged offset index: " + e.what());
      }
    }
  }
  return Status::OK();
}

bool ParquetFile::has_page_index(int leaf) const {
  for (const auto& rg : offsets_) {
    if (rg[static_cast<size_t>(leaf)] == nullptr) return false;
  }
  return !offsets_.empty();
}

std::vector<int64_t> ParquetFile::IndexedPageRows(int rg, int leaf) const {
  const auto& oi = offsets_[static_cast<size_t>(rg)][static_cast<size_t>(leaf)];
  if (oi == nullptr || leaves_[static_cast<size_t>(leaf)].max_rep > 0) return {0};
  std::vector<int64_t> rows;
  for (const parquet::PageLocation& p : oi->page_locations()) {
    if (rows.empty() ? p.first_row_index != 0 : p.first_row_index <= rows.back()) return {0};
    rows.push_back(p.first_row_index);
  }
  if (rows.empty() || rows.back() >= row_group_rows(rg)) return {0};
  return rows;
}

Result<Unit> ParquetFile::ChunkUnit(int rg, int leaf) const { return UnitOf(rg, leaf, -1); }

int64_t ParquetFile::ChunkBytes(int rg, int leaf) const {
  try {
    return std::max<int64_t>(0, meta_->RowGroup(rg)->ColumnChunk(leaf)->total_uncompressed_size());
  } catch (const std::exception&) {
    return 0;
  }
}

// row -1: the whole chunk.
Result<Unit> ParquetFile::UnitOf(int rg, int leaf, int64_t row) const {
  Unit u;
  u.row_group = rg;
  u.leaf = leaf;
  try {
    auto cc = meta_->RowGroup(rg)->ColumnChunk(leaf);
    const int64_t rows = row_group_rows(rg);
    const bool dict = cc->has_dictionary_page() && cc->dictionary_page_offset() > 0;
    const int64_t start = dict ? cc->dictionary_page_offset() : cc->data_page_offset();
    const int64_t total = cc->total_compressed_size();
    if (start < 0 || total <= 0 || static_cast<uint64_t>(start) + static_cast<uint64_t>(total) > size_) {
      return DataError(Where(rg, leaf) + ": the column chunk lies outside the file (" + std::to_string(start) +
                       " + " + std::to_string(total) + " bytes of " + std::to_string(size_) + ")");
    }
    const auto& oi = offsets_[static_cast<size_t>(rg)][static_cast<size_t>(leaf)];
    if (oi == nullptr && row >= 0) {
      std::shared_ptr<const Learned> learned;
      {
        MutexLock lock(&learned_mu_);
        auto it = learned_.find({rg, leaf});
        if (it != learned_.end()) learned = it->second;
      }
      if (learned != nullptr && !learned->pages.empty()) {
        const auto& pages = learned->pages;
        auto it = std::upper_bound(pages.begin(), pages.end(), row,
                                   [](int64_t r, const Page& p) { return r < p.first_row; });
        const size_t k = static_cast<size_t>(it - pages.begin()) - 1;
        u.page = static_cast<int>(k);
        u.first_row = pages[k].first_row;
        u.rows = (k + 1 < pages.size() ? pages[k + 1].first_row : rows) - u.first_row;
        if (dict) u.dictionary = {static_cast<uint64_t>(start), learned->data_start - static_cast<uint64_t>(start)};
        u.data = {pages[k].offset, pages[k].size};
        return u;
      }
    }
    if (oi == nullptr || row < 0 || leaves_[static_cast<size_t>(leaf)].max_rep > 0) {
      u.first_row = 0;
      u.rows = rows;
      u.data = {static_cast<uint64_t>(start), static_cast<uint64_t>(total)};
      return u;
    }
    const auto& pages = oi->page_locations();
    auto it = std::upper_bound(pages.begin(), pages.end(), row,
                               [](int64_t r, const parquet::PageLocation& p) { return r < p.first_row_index; });
    const size_t k = static_cast<size_t>(it - pages.begin()) - 1;
    u.page = static_cast<int>(k);
    u.first_row = pages[k].first_row_index;
    u.rows = (k + 1 < pages.size() ? pages[k + 1].first_row_index : rows) - u.first_row;
    if (dict) {
      const int64_t first_data = pages.front().offset;
      u.dictionary = {static_cast<uint64_t>(start), static_cast<uint64_t>(first_data - start)};
    }
    u.data = {static_cast<uint64_t>(pages[k].offset), static_cast<uint64_t>(pages[k].compressed_page_size)};
  } catch (const std::exception& e) {
    return DataError(Where(rg, leaf) + ": " + e.what());
  }
  return u;
}

namespace {

// Arrow's page reader, with where each page ends in the chunk noted as it
// is read: a chunk without an offset index learns its pages by being
// decoded once.
// The physical types nostall reads, and their values read.
bool Readable(parquet::Type::type t) {
  return t == parquet::Type::BYTE_ARRAY || t == parquet::Type::INT32 || t == parquet::Type::INT64 ||
         t == parquet::Type::BOOLEAN || t == parquet::Type::FLOAT || t == parquet::Type::DOUBLE;
}

Status ReadValues(parquet::Type::type t, parquet::ColumnReader* reader, const Leaf& leaf, int64_t rows,
                  Values* out) {
  switch (t) {
    case parquet::Type::BYTE_ARRAY: return ReadAll<parquet::ByteArrayType>(reader, leaf, rows, out);
    case parquet::Type::INT32: return ReadAll<parquet::Int32Type>(reader, leaf, rows, out);
    case parquet::Type::INT64: return ReadAll<parquet::Int64Type>(reader, leaf, rows, out);
    case parquet::Type::BOOLEAN: return ReadAll<parquet::BooleanType>(reader, leaf, rows, out);
    case parquet::Type::FLOAT: return ReadAll<parquet::FloatType>(reader, leaf, rows, out);
    case parquet::Type::DOUBLE: return ReadAll<parquet::DoubleType>(reader, leaf, rows, out);
    default: return InvalidArgument("unreadable physical type");
  }
}

class NotingPageReader final : public parquet::PageReader {
 public:
  NotingPageReader(std::unique_ptr<parquet::PageReader> inner, std::shared_ptr<arrow::io::BufferReader> stream)
      : inner_(std::move(inner)), stream_(std::move(stream)) {}
  std::shared_ptr<parquet::Page> NextPage() override {
    std::shared_ptr<parquet::Page> page = inner_->NextPage();
    if (page == nullptr) return page;
    const int64_t end = stream_->Tell().ValueOr(-1);
    if (end < 0) {
      ok_ = false;
    } else if (page->type() == parquet::PageType::DICTIONARY_PAGE) {
      data_start_ = static_cast<uint64_t>(end);
    } else {
      const auto* data = static_cast<const parquet::DataPage*>(page.get());
      pages_.push_back({static_cast<uint64_t>(last_), static_cast<uint64_t>(end - last_), rows_});
      rows_ += data->num_values();
    }
    last_ = end;
    return page;
  }
  void set_max_page_header_size(uint32_t size) override { inner_->set_max_page_header_size(size); }
  bool ok() const { return ok_; }
  uint64_t data_start() const { return data_start_; }
  int64_t rows() const { return rows_; }
  // (offset within the chunk, size, first row)
  const std::vector<std::tuple<uint64_t, uint64_t, int64_t>>& pages() const { return pages_; }

 private:
  std::unique_ptr<parquet::PageReader> inner_;
  std::shared_ptr<arrow::io::BufferReader> stream_;
  int64_t last_ = 0, rows_ = 0;
  uint64_t data_start_ = 0;
  bool ok_ = true;
  std::vector<std::tuple<uint64_t, uint64_t, int64_t>> pages_;
};

}  // namespace

int64_t ParquetFile::pages_learned() const {
  MutexLock lock(&learned_mu_);
  return static_cast<int64_t>(learned_.size());
}

void ParquetFile::Learn(const Unit& u, uint64_t data_start,
                 const std::vector<std::tuple<uint64_t, uint64_t, int64_t>>& pages, size_t data_size,
                 int64_t rows) const {
  auto learned = std::make_shared<Learned>();
  learned->data_start = u.data.offset + data_start;
  uint64_t next_at = data_start;
  int64_t last_row = -1;
  bool tiles = true;
  for (const auto& [at, size, first] : pages) {
    tiles &= at == next_at && size > 0 && first > last_row && (last_row >= 0 || first == 0);
    next_at = at + size;
    last_row = first;
    learned->pages.push_back({u.data.offset + at, size, first});
  }
  if (!tiles || next_at != data_size || rows != u.rows) return;
  MutexLock lock(&learned_mu_);
  learned_.emplace(std::make_pair(u.row_group, u.leaf), std::move(learned));
}

Result<Values> ParquetFile::Decode(const Unit& u, const std::string& dictionary, const std::string& data) const {
  const Leaf& leaf = leaves_[static_cast<size_t>(u.leaf)];
  if (leaf.max_rep > 0) {
    return InvalidArgument(Where(u.row_group, u.leaf) + ": a repeated (list) column; nostall reads "
                           "columns of one value per row");
  }
  Values out;
  try {
    auto cc = meta_->RowGroup(u.row_group)->ColumnChunk(u.leaf);
    if (cc->crypto_metadata() != nullptr) return DataError(Where(u.row_group, u.leaf) + ": an encrypted column");
    // The dictionary page and the data page as one stream: joined only
    // when there is a dictionary page (the data alone is read in place).
    std::string joined;
    if (!dictionary.empty()) {
      joined.reserve(dictionary.size() + data.size());
      joined += dictionary;
      joined += data;
    }
    const std::string& bytes = dictionary.empty() ? data : joined;
    auto buffer = std::make_shared<arrow::Buffer>(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                  static_cast<int64_t>(bytes.size()));
    auto stream = std::make_shared<arrow::io::BufferReader>(buffer);
    const parquet::ColumnDescriptor* descr = meta_->schema()->Column(u.leaf);
    constexpr int64_t kMinBound = int64_t{256} << 20;
    BoundedPool pool(std::max<int64_t>(kMinBound, static_cast<int64_t>(std::min<size_t>(bytes.size(), size_t{1} << 40)) * 32));
    const parquet::ReaderProperties props(&pool);
    std::unique_ptr<parquet::PageReader> pages =
        parquet::PageReader::Open(stream, u.rows, cc->compression(), props, *descr);
    // A whole chunk of a column without an offset index: note its pages.
    NotingPageReader* noting = nullptr;
    const bool learn = u.page < 0 && leaf.max_rep == 0 &&
                       offsets_[static_cast<size_t>(u.row_group)][static_cast<size_t>(u.leaf)] == nullptr;
    if (learn) {
      auto n = std::make_unique<NotingPageReader>(std::move(pages), stream);
      noting = n.get();
      pages = std::move(n);
    }
    std::shared_ptr<parquet::ColumnReader> reader = parquet::ColumnReader::Make(descr, std::move(pages), &pool);
    out.present.reserve(static_cast<size_t>(u.rows));
    out.off.reserve(static_cast<size_t>(u.rows) + 1);
    // Values of binary columns (images) are about the page's size: room for
    // them at once, not a copy at each doubling.
    if (descr->physical_type() == parquet::Type::BYTE_ARRAY) out.blob.reserve(bytes.size());
    if (!Readable(descr->physical_type())) {
      return InvalidArgument(Where(u.row_group, u.leaf) + ": a column of physical type " +
                             parquet::TypeToString(descr->physical_type()) + ", which nostall does not read");
    }
    Status st = ReadValues(descr->physical_type(), reader.get(), leaf, u.rows, &out);
    if (st.ok() && reader->HasNext()) {
      st = DataError("it holds more values than the " + std::to_string(u.rows) + " rows " +
                     (u.page >= 0 ? "the offset index gives the page" : "of the row group"));
    }
    if (!st.ok()) {
      return DataError(Where(u.row_group, u.leaf) + (u.page >= 0 ? ", page " + std::to_string(u.page) : "") +
                       ": " + st.message());
    }
    if (noting != nullptr && noting->ok() && !noting->pages().empty() && dictionary.empty()) {
      Learn(u, noting->data_start(), noting->pages(), data.size(), noting->rows());
    }
  } catch (const std::exception& e) {
    return DataError(Where(u.row_group, u.leaf) + (u.page >= 0 ? ", page " + std::to_string(u.page) : "") + ": " +
                     e.what());
  }
  return out;
}

}  // namespace nostall::pq
