// Arrow IPC files as the parquet driver reads them (parquet_file.h): what
// Hugging Face's `datasets` writes (`save_to_disk`'s data-*.arrow, its cache
// files), pyarrow's `ipc.new_file`/`new_stream` and Feather v2, compressed
// or not. The layout (fields, buffers, compression) is arrow_ipc_layout.h.
//
// The file is a sequence of messages (the stream format; the file format
// wraps the same sequence in "ARROW1" and a footer): a schema, then record
// batches, each a flatbuffer header and a body of buffers. Opening reads
// the headers only: the schema is parsed by Arrow (ipc::ReadSchema); each
// record batch's header (its row count, and each column's buffers in the
// body) is read here, by hand, because Arrow decodes a batch's buffers only
// as a whole batch, never as "where is row r". A row group is a record
// batch. Binary and string leaves (images, audio, text) are read a row at a
// time: their offsets (and the validity of the leaf and the structs above
// it) are read when the file opens, so a row costs its own bytes, not its
// batch's; every other leaf is read a batch at a time, and so is every leaf
// of a compressed batch (each buffer is compressed whole, by Arrow's LZ4 or
// ZSTD codec).
#include <arrow/buffer.h>
#include <arrow/io/memory.h>
#include <arrow/ipc/dictionary.h>
#include <arrow/ipc/message.h>
#include <arrow/ipc/reader.h>
#include <arrow/type.h>
#include <arrow/util/key_value_metadata.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <string_view>

#include "source/columnar/arrow_ipc_layout.h"
#include "source/columnar/flat_reader.h"
#include "source/columnar/parquet_file.h"

namespace nostall::pq {
namespace {

constexpr uint64_t kIpcHeadRead = 64 << 10;  // a message's header: most in one read
constexpr uint64_t kIpcMaxHeader = 64 << 20;
constexpr char kIpcSavedMagic[] = "nostall-arrow-ipc-1";
class ArrowIpcFile final : public File {
 public:
  static Result<std::shared_ptr<File>> Open(const std::string& name, uint64_t size, const ReadAt& read);
  static Result<std::shared_ptr<File>> FromSaved(const std::string& name, uint64_t size, const std::string& saved);

  std::string Metadata(const std::string& key) const override {
    const auto& kv = schema_->metadata();
    if (kv == nullptr) return "";
    const int i = kv->FindKey(key);
    return i < 0 ? "" : kv->value(i);
  }
  Status ReadOffsetIndexes(const std::vector<int>& leaves, const ReadAt& read, std::string* saved,
                           uint64_t* at) override;
  Status SetOffsetIndexes(const std::vector<int>& leaves, const std::string& bytes, uint64_t at) override;
  // A row costs less than its batch's column: a binary leaf's rows are
  // found by their offsets; another leaf's batch column is a few bytes a row.
  bool has_page_index(int leaf) const override {
    return leaves_[static_cast<size_t>(leaf)].physical != kIpcBytes || batches_.empty() ||
           batches_.front().values.count(leaf) != 0;
  }
  int64_t pages_learned() const override { return 0; }
  Result<Unit> ChunkUnit(int rg, int leaf) const override { return UnitOf(rg, leaf, -1); }
  int64_t ChunkBytes(int rg, int leaf) const override {
    return static_cast<int64_t>(LeafRange(batches_[static_cast<size_t>(rg)], leaf).length);
  }
  Result<Unit> UnitOf(int rg, int leaf, int64_t row) const override;
  Result<Values> Decode(const Unit& u, const std::string& dictionary, const std::string& data) const override;
  std::string Where(int rg, int leaf) const override {
    return name_ + " (record batch " + std::to_string(rg) + ", column " + leaves_[static_cast<size_t>(leaf)].path +
           ")";
  }

 private:
  ArrowIpcFile() = default;
  Status ReadMessages(const ReadAt& read, std::vector<std::pair<std::string, uint64_t>>* batches);
  Status SetSchema(const std::string& header);
  Status ParseBatch(size_t index, IpcBatch* b) const;
  Status Finish(const std::vector<std::pair<std::string, uint64_t>>& batches);
  // The file range of `leaf`'s buffers in `b`, and the validity of the
  // structs above it.
  Range LeafRange(const IpcBatch& b, int leaf) const;
  // Whether each row of field `f` and of every struct above it is present,
  // from their validity buffers (`bytes` gives a range's bytes, or null
  // when they are not at hand).
  Result<std::vector<uint8_t>> PresentAll(const IpcBatch& b, int f,
                                          const std::function<std::string_view(const Range&)>& bytes) const;
  Status RowValues(size_t rg, int leaf, const ReadAt& read);
  std::string SaveValues(const std::vector<int>& leaves) const;

  std::string schema_header_;
  std::shared_ptr<arrow::Schema> schema_;
  std::vector<IpcField> fields_;
  std::vector<int> field_of_leaf_;
  std::vector<IpcBatch> batches_;
};

Status ArrowIpcFile::SetSchema(const std::string& header) {
  schema_header_ = header;
  auto buffer = std::make_shared<arrow::Buffer>(reinterpret_cast<const uint8_t*>(schema_header_.data()),
                                                static_cast<int64_t>(schema_header_.size()));
  auto message = arrow::ipc::Message::Open(buffer, nullptr);
  if (!message.ok()) return DataError(name_ + ": a damaged schema: " + message.status().message());
  if (message.ValueOrDie()->type() != arrow::ipc::MessageType::SCHEMA) {
    return DataError(name_ + ": not an Arrow IPC file (its first message is not a schema)");
  }
  arrow::ipc::DictionaryMemo memo;
  auto schema = arrow::ipc::ReadSchema(*message.ValueOrDie(), &memo);
  if (!schema.ok()) return DataError(name_ + ": a damaged schema: " + schema.status().message());
  schema_ = schema.ValueOrDie();
  NOSTALL_RETURN_IF_ERROR(IpcFieldsOf(name_, schema_->fields(), -1, "", &fields_, &leaves_));
  field_of_leaf_.assign(leaves_.size(), -1);
  for (size_t f = 0; f < fields_.size(); ++f) {
    if (fields_[f].leaf >= 0) field_of_leaf_[static_cast<size_t>(fields_[f].leaf)] = static_cast<int>(f);
  }
  for (const auto& f : schema_->fields()) columns_.push_back({f->name(), f->type()->id() == arrow::Type::STRUCT});
  return Status::OK();
}

// The batch's header: its rows and each field's node and buffers (Message:
// 1 header_type, 2 header, 3 bodyLength; RecordBatch: 0 length, 1 nodes,
// 2 buffers, 3 compression).
Status ArrowIpcFile::ParseBatch(size_t index, IpcBatch* b) const {
  const std::string where = name_ + " (record batch " + std::to_string(index) + ")";
  const Flat fb(b->header);
  size_t message = 0, batch = 0, nodes = 0, buffers = 0, n_nodes = 0, n_buffers = 0;
  if (!fb.Root(&message) || fb.Byte(message, 1) != 3 || !fb.Child(message, 2, &batch)) {
    return DataError(where + ": a damaged record batch header");
  }
  size_t compression = 0;
  if (fb.Child(batch, 3, &compression)) {  // BodyCompression: 0 codec, 1 method (0: each buffer)
    b->codec = fb.Byte(compression, 0);
    if (b->codec > 1 || fb.Byte(compression, 1) != 0) {
      return InvalidArgument(where + ": a compression nostall does not read (codec " + std::to_string(b->codec) +
                             "; LZ4 frame and ZSTD of each buffer are read)");
    }
  }
  int64_t body = 0;
  if (!fb.Int64(batch, 0, &b->rows) || b->rows < 0 || !fb.Vector(batch, 1, 16, &nodes, &n_nodes) ||
      !fb.Vector(batch, 2, 16, &buffers, &n_buffers) || !fb.Int64(message, 3, &body) || body < 0) {
    return DataError(where + ": a damaged record batch header");
  }
  b->body_length = static_cast<uint64_t>(body);
  if (b->body + b->body_length > size_) {
    return DataError(where + ": its body ends past the file's " + std::to_string(size_) + " bytes (truncated?)");
  }
  if (n_nodes != fields_.size()) {
    return DataError(where + ": " + std::to_string(n_nodes) + " field nodes for a schema of " +
                     std::to_string(fields_.size()) + " fields");
  }
  b->fields.assign(fields_.size(), IpcBuffers{});
  size_t next = 0;
  for (size_t f = 0; f < fields_.size(); ++f) {
    IpcBuffers& x = b->fields[f];
    x.length = fb.At64(nodes + 16 * f);
    x.null_count = fb.At64(nodes + 16 * f + 8);
    if (x.length < 0 || x.null_count < 0 || x.null_count > x.length) {
      return DataError(where + ": a damaged field node");
    }
    Range r[3];
    for (int k = 0; k < fields_[f].buffers; ++k, ++next) {
      if (next >= n_buffers) return DataError(where + ": fewer buffers than its fields need");
      const int64_t off = fb.At64(buffers + 16 * next), len = fb.At64(buffers + 16 * next + 8);
      if (off < 0 || len < 0 || static_cast<uint64_t>(off) + static_cast<uint64_t>(len) > b->body_length) {
        return DataError(where + ": a buffer lies outside its body");
      }
      r[k] = {b->body + static_cast<uint64_t>(off), static_cast<uint64_t>(len)};
    }
    x.validity = r[0];
    x.offsets = fields_[f].buffers == 3 ? r[1] : Range{};
    x.data = fields_[f].buffers == 3 ? r[2] : r[1];
    const bool top = fields_[f].parent < 0 && fields_[f].leaf >= 0;
    if ((top || fields_[f].buffers == 1) && fields_[f].parent < 0 && x.length != b->rows) {
      return DataError(where + ": a column of " + std::to_string(x.length) + " values in a batch of " +
                       std::to_string(b->rows) + " rows");
    }
    if (fields_[f].parent >= 0 && x.length != b->fields[static_cast<size_t>(fields_[f].parent)].length) {
      return DataError(where + ": a struct's fields of different lengths");
    }
  }
  return Status::OK();
}

// Every message's header, from the start: the schema first, then record
// batches (their headers and where their bodies begin), to the end of the
// stream (its end marker, or the file's end).
Status ArrowIpcFile::ReadMessages(const ReadAt& read, std::vector<std::pair<std::string, uint64_t>>* batches) {
  std::string head;
  NOSTALL_RETURN_IF_ERROR(read(0, std::min<uint64_t>(size_, 8), &head));
  uint64_t pos = head.compare(0, 6, "ARROW1") == 0 ? 8 : 0;  // the file format: the stream after its magic
  bool schema = false;
  while (pos < size_) {
    std::string chunk;
    NOSTALL_RETURN_IF_ERROR(read(pos, std::min<uint64_t>(size_ - pos, kIpcHeadRead), &chunk));
    const auto* p = reinterpret_cast<const uint8_t*>(chunk.data());
    if (chunk.size() < 4) return DataError(name_ + ": truncated after byte " + std::to_string(pos));
    uint64_t prefix = 4;
    uint64_t len = FlatLe32(p);
    if (len == 0xFFFFFFFFu) {  // the continuation marker, then the length
      if (chunk.size() < 8) return DataError(name_ + ": truncated after byte " + std::to_string(pos));
      len = FlatLe32(p + 4);
      prefix = 8;
    }
    if (len == 0) break;  // the end of the stream
    if (len > kIpcMaxHeader || pos + prefix + len > size_) {
      return DataError(name_ + ": a message header of " + std::to_string(len) + " bytes at byte " +
                       std::to_string(pos) + " does not fit the file's " + std::to_string(size_) +
                       " bytes (truncated, or not an Arrow IPC file)");
    }
    std::string header;
    if (prefix + len <= chunk.size()) {
      header = chunk.substr(prefix, len);
    } else {
      NOSTALL_RETURN_IF_ERROR(read(pos + prefix, len, &header));
    }
    const Flat fb(header);
    size_t message = 0;
    int64_t body = 0;
    if (!fb.Root(&message) || !fb.Int64(message, 3, &body)) body = 0;
    const uint8_t type = fb.Root(&message) ? fb.Byte(message, 1) : 0;
    if (!schema) {
      if (type != 1) return DataError(name_ + ": not an Arrow IPC file (no schema first)");
      NOSTALL_RETURN_IF_ERROR(SetSchema(header));
      schema = true;
    } else if (type == 2) {
      // A dictionary's values: read by no field (a dictionary-encoded
      // column is refused by name when a field asks for it).
    } else if (type == 3) {
      batches->push_back({std::move(header), pos + prefix + len});
    } else {
      return DataError(name_ + ": a message of type " + std::to_string(type) + " at byte " + std::to_string(pos) +
                       " (not a record batch)");
    }
    if (body < 0 || pos + prefix + len + static_cast<uint64_t>(body) > size_) {
      return DataError(name_ + ": the message at byte " + std::to_string(pos) + " ends past the file (truncated?)");
    }
    pos += prefix + len + static_cast<uint64_t>(body);
  }
  if (!schema) return DataError(name_ + ": not an Arrow IPC file (no schema)");
  return Status::OK();
}

Status ArrowIpcFile::Finish(const std::vector<std::pair<std::string, uint64_t>>& batches) {
  batches_.resize(batches.size());
  int64_t first = 0;
  for (size_t k = 0; k < batches.size(); ++k) {
    batches_[k].header = batches[k].first;
    batches_[k].body = batches[k].second;
    NOSTALL_RETURN_IF_ERROR(ParseBatch(k, &batches_[k]));
    rg_first_.push_back(first);
    first += batches_[k].rows;
  }
  rows_ = first;
  // What is saved: the schema's header, then each batch's header and body.
  footer_ = kIpcSavedMagic;
  auto put = [&](uint64_t v) { footer_.append(reinterpret_cast<const char*>(&v), 8); };
  put(schema_header_.size());
  footer_ += schema_header_;
  put(batches.size());
  for (const auto& [header, body] : batches) {
    put(body);
    put(header.size());
    footer_ += header;
  }
  return Status::OK();
}

Result<std::shared_ptr<File>> ArrowIpcFile::Open(const std::string& name, uint64_t size, const ReadAt& read) {
  std::shared_ptr<ArrowIpcFile> f(new ArrowIpcFile());
  f->name_ = name;
  f->size_ = size;
  if (size < 8) return DataError(name + ": not an Arrow IPC file (" + std::to_string(size) + " bytes)");
  std::vector<std::pair<std::string, uint64_t>> batches;
  NOSTALL_RETURN_IF_ERROR(f->ReadMessages(read, &batches));
  NOSTALL_RETURN_IF_ERROR(f->Finish(batches));
  return std::shared_ptr<File>(std::move(f));
}

Result<std::shared_ptr<File>> ArrowIpcFile::FromSaved(const std::string& name, uint64_t size,
                                                      const std::string& saved) {
  std::shared_ptr<ArrowIpcFile> f(new ArrowIpcFile());
  f->name_ = name;
  f->size_ = size;
  size_t at = std::strlen(kIpcSavedMagic);
  const auto damaged = [&]() { return DataError(name + ": a damaged saved index"); };
  if (saved.compare(0, at, kIpcSavedMagic) != 0) return damaged();
  auto get = [&](uint64_t* v) {
    if (saved.size() - at < 8) return false;
    std::memcpy(v, saved.data() + at, 8);
    at += 8;
    return true;
  };
  auto get_string = [&](std::string* s) {
    uint64_t n = 0;
    if (!get(&n) || n > saved.size() - at) return false;
    s->assign(saved, at, n);
    at += n;
    return true;
  };
  std::string schema;
  uint64_t count = 0;
  if (!get_string(&schema) || !get(&count) || count > saved.size()) return damaged();
  NOSTALL_RETURN_IF_ERROR(f->SetSchema(schema));
  std::vector<std::pair<std::string, uint64_t>> batches(count);
  for (auto& [header, body] : batches) {
    if (!get(&body) || !get_string(&header)) return damaged();
  }
  NOSTALL_RETURN_IF_ERROR(f->Finish(batches));
  return std::shared_ptr<File>(std::move(f));
}

Range ArrowIpcFile::LeafRange(const IpcBatch& b, int leaf) const {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int f = field_of_leaf_[static_cast<size_t>(leaf)]; f >= 0; f = fields_[static_cast<size_t>(f)].parent) {
    const IpcBuffers& x = b.fields[static_cast<size_t>(f)];
    for (const Range& r : {x.validity, x.offsets, x.data}) {
      if (r.length == 0) continue;
      lo = std::min(lo, r.offset);
      hi = std::max(hi, r.offset + r.length);
    }
  }
  return hi > lo ? Range{lo, hi - lo} : Range{};
}

Result<std::vector<uint8_t>> ArrowIpcFile::PresentAll(
    const IpcBatch& b, int f, const std::function<std::string_view(const Range&)>& bytes) const {
  std::vector<uint8_t> present(static_cast<size_t>(b.fields[static_cast<size_t>(f)].length), 1);
  for (; f >= 0; f = fields_[static_cast<size_t>(f)].parent) {
    const IpcBuffers& x = b.fields[static_cast<size_t>(f)];
    if (x.null_count == 0) continue;
    const std::string_view view = bytes(x.validity);
    const char* bits = view.data() != nullptr && view.size() * 8 >= present.size() ? view.data() : nullptr;
    if (bits == nullptr) return DataError("a validity buffer shorter than its values, or outside what was read");
    for (size_t k = 0; k < present.size(); ++k) {
      if ((static_cast<uint8_t>(bits[k / 8]) >> (k % 8) & 1) == 0) present[k] = 0;
    }
  }
  return present;
}

}  // namespace

Status ArrowIpcFile::RowValues(size_t rg, int leaf, const ReadAt& read) {
  IpcBatch& b = batches_[rg];
  const int f = field_of_leaf_[static_cast<size_t>(leaf)];
  const IpcBuffers& x = b.fields[static_cast<size_t>(f)];
  std::map<uint64_t, std::string> held;
  Status st;
  // (Only batches without compression get here: a row's place is in the
  // data buffer as stored.)
  auto fetch = [&](const Range& r) -> std::string_view {
    std::string& s = held[r.offset];
    if (s.size() != r.length) st = read(r.offset, r.length, &s);
    return st.ok() && s.size() == r.length ? std::string_view(s) : std::string_view();
  };
  Result<std::vector<uint8_t>> present = PresentAll(b, f, fetch);
  NOSTALL_RETURN_IF_ERROR(st);
  if (!present.ok()) return DataError(Where(static_cast<int>(rg), leaf) + ": " + present.status().message());
  const arrow::Type::type id = fields_[static_cast<size_t>(f)].type->id();
  const uint64_t width = id == arrow::Type::LARGE_BINARY || id == arrow::Type::LARGE_STRING ? 8 : 4;
  const auto n = static_cast<uint64_t>(x.length);
  std::vector<std::pair<uint64_t, int64_t>> values(n, {0, -1});
  if (n > 0) {
    if (x.offsets.length < (n + 1) * width) {
      return DataError(Where(static_cast<int>(rg), leaf) + ": an offsets buffer shorter than its values");
    }
    const char* o = fetch({x.offsets.offset, (n + 1) * width}).data();
    NOSTALL_RETURN_IF_ERROR(st);
    if (o == nullptr) return DataError(Where(static_cast<int>(rg), leaf) + ": a short read of its offsets");
    for (uint64_t k = 0; k < n; ++k) {
      const auto* p = reinterpret_cast<const uint8_t*>(o + k * width);
      const int64_t a = width == 8 ? static_cast<int64_t>(FlatLe64(p)) : static_cast<int32_t>(FlatLe32(p));
      const int64_t z = width == 8 ? static_cast<int64_t>(FlatLe64(p + width)) : static_cast<int32_t>(FlatLe32(p + width));
      if (a < 0 || z < a || static_cast<uint64_t>(z) > x.data.length) {
        return DataError(Where(static_cast<int>(rg), leaf) + ": row " + std::to_string(k) +
                         "'s value lies outside its data buffer");
      }
      if (present.value()[k]) values[k] = {x.data.offset + static_cast<uint64_t>(a), z - a};
    }
  }
  b.values[leaf] = std::move(values);
  return Status::OK();
}

Status ArrowIpcFile::ReadOffsetIndexes(const std::vector<int>& leaves, const ReadAt& read, std::string* saved,
                                       uint64_t* at) {
  std::vector<int> rows_of;
  for (int leaf : leaves) {
    const Leaf& l = leaves_[static_cast<size_t>(leaf)];
    if (l.physical != kIpcBytes || l.max_rep > 0 || batches_.empty() || batches_.front().values.count(leaf)) continue;
    // A compressed batch's data buffer is decompressed whole: its rows are
    // read with it (every batch of the file, so a unit is one kind).
    if (std::any_of(batches_.begin(), batches_.end(), [](const IpcBatch& b) { return b.codec >= 0; })) continue;
    for (size_t g = 0; g < batches_.size(); ++g) NOSTALL_RETURN_IF_ERROR(RowValues(g, leaf, read));
    rows_of.push_back(leaf);
  }
  if (saved != nullptr) *saved = SaveValues(rows_of);
  if (at != nullptr) *at = 0;
  return Status::OK();
}

// The rows of binary leaves, saved: per leaf, its index, then per batch
// each row's offset and bytes.
std::string ArrowIpcFile::SaveValues(const std::vector<int>& leaves) const {
  std::string out;
  auto put = [&](uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); };
  for (int leaf : leaves) {
    put(static_cast<uint64_t>(leaf));
    for (const IpcBatch& b : batches_) {
      for (const auto& [offset, bytes] : b.values.at(leaf)) {
        put(offset);
        put(static_cast<uint64_t>(bytes));
      }
    }
  }
  return out;
}

Status ArrowIpcFile::SetOffsetIndexes(const std::vector<int>& leaves, const std::string& bytes, uint64_t) {
  size_t at = 0;
  auto get = [&](uint64_t* v) {
    if (bytes.size() - at < 8) return false;
    std::memcpy(v, bytes.data() + at, 8);
    at += 8;
    return true;
  };
  while (at < bytes.size()) {
    uint64_t leaf = 0;
    if (!get(&leaf) || leaf >= leaves_.size() ||
        std::find(leaves.begin(), leaves.end(), static_cast<int>(leaf)) == leaves.end()) {
      return DataError(name_ + ": a damaged saved index");
    }
    for (IpcBatch& b : batches_) {
      std::vector<std::pair<uint64_t, int64_t>> values(static_cast<size_t>(b.rows));
      for (auto& [offset, n] : values) {
        uint64_t size = 0;
        if (!get(&offset) || !get(&size)) return DataError(name_ + ": a damaged saved index");
        n = static_cast<int64_t>(size);
        if (n >= 0 && offset + size > size_) return DataError(name_ + ": a damaged saved index");
      }
      b.values[static_cast<int>(leaf)] = std::move(values);
    }
  }
  return Status::OK();
}

Result<Unit> ArrowIpcFile::UnitOf(int rg, int leaf, int64_t row) const {
  const IpcBatch& b = batches_[static_cast<size_t>(rg)];
  Unit u;
  u.row_group = rg;
  u.leaf = leaf;
  auto it = b.values.find(leaf);
  if (row >= 0 && it != b.values.end()) {
    const auto& [offset, bytes] = it->second[static_cast<size_t>(row)];
    u.page = static_cast<int>(row);
    u.first_row = row;
    u.rows = 1;
    if (bytes >= 0) u.data = {offset, static_cast<uint64_t>(bytes)};
    return u;
  }
  u.first_row = 0;
  u.rows = b.rows;
  u.data = LeafRange(b, leaf);
  return u;
}


Result<Values> ArrowIpcFile::Decode(const Unit& u, const std::string&, const std::string& data) const {
  const Leaf& leaf = leaves_[static_cast<size_t>(u.leaf)];
  if (leaf.max_rep > 0) {
    return InvalidArgument(Where(u.row_group, u.leaf) + ": a list column; nostall reads columns of one value per row");
  }
  const IpcBatch& b = batches_[static_cast<size_t>(u.row_group)];
  Values out;
  if (data.size() != u.data.length) return DataError(Where(u.row_group, u.leaf) + ": a short read");
  if (u.page >= 0) {  // one row of a binary leaf
    const bool present = b.values.at(u.leaf)[static_cast<size_t>(u.page)].second >= 0;
    out.present.push_back(present ? 1 : 0);
    if (present) out.blob = data;
    out.off.push_back(out.blob.size());
    return out;
  }
  const int f = field_of_leaf_[static_cast<size_t>(u.leaf)];
  const IpcBuffers& x = b.fields[static_cast<size_t>(f)];
  std::map<uint64_t, std::string> unpacked;  // a compressed batch's buffers, decompressed
  Status unpack;
  auto bytes = [&](const Range& r) -> std::string_view {
    if (r.offset < u.data.offset || r.offset + r.length > u.data.offset + data.size()) return {};
    const std::string_view raw(data.data() + (r.offset - u.data.offset), r.length);
    if (b.codec < 0) return raw;
    auto [it, added] = unpacked.try_emplace(r.offset);
    if (added && unpack.ok()) unpack = IpcUnpack(b.codec, raw, &it->second);
    return unpack.ok() ? std::string_view(it->second) : std::string_view();
  };
  Result<std::vector<uint8_t>> present = PresentAll(b, f, bytes);
  if (!unpack.ok()) return DataError(Where(u.row_group, u.leaf) + ": " + unpack.message());
  if (!present.ok()) return DataError(Where(u.row_group, u.leaf) + ": " + present.status().message());
  out.present = std::move(present.value());
  const auto n = static_cast<size_t>(x.length);
  const arrow::Type::type id = fields_[static_cast<size_t>(f)].type->id();
  const bool large = id == arrow::Type::LARGE_BINARY || id == arrow::Type::LARGE_STRING;
  const size_t width = leaf.physical == kIpcBytes ? (large ? 8 : 4)
                       : id == arrow::Type::BOOL  ? 0
                                                  : static_cast<size_t>(fields_[static_cast<size_t>(f)].type->byte_width());
  const Range values = leaf.physical == kIpcBytes ? x.offsets : x.data;
  const uint64_t need = n == 0 ? 0 : width == 0 ? (n + 7) / 8 : (n + (leaf.physical == kIpcBytes ? 1 : 0)) * width;
  const std::string_view vbuf = need == 0 ? std::string_view(data) : bytes(values);
  const std::string_view dbuf = leaf.physical == kIpcBytes ? bytes(x.data) : std::string_view();
  if (!unpack.ok()) return DataError(Where(u.row_group, u.leaf) + ": " + unpack.message());
  const char* v = vbuf.size() >= need ? vbuf.data() : nullptr;
  if (v == nullptr || (leaf.physical == kIpcBytes && dbuf.data() == nullptr && x.data.length > 0)) {
    return DataError(Where(u.row_group, u.leaf) + ": a buffer shorter than its values");
  }
  for (size_t k = 0; k < n; ++k) {
    if (!out.present[k]) {
      if (leaf.physical == kIpcBoolean || leaf.physical == kIpcInt32 || leaf.physical == kIpcInt64) out.ints.push_back(0);
      out.off.push_back(out.blob.size());
      continue;
    }
    Status st = IpcAppendValue(id, v, dbuf, large, k, &out);
    if (!st.ok()) {
      return Status(st.code(), Where(u.row_group, u.leaf) + ": " + st.message() +
                                   (st.code() == StatusCode::kInvalidArgument
                                        ? " (Arrow type " + fields_[static_cast<size_t>(f)].type->ToString() + ")"
                                        : ""));
    }
    out.off.push_back(out.blob.size());
  }
  return out;
}

bool IsArrowIpcName(const std::string& name) {
  for (const char* ext : {".arrow", ".feather", ".ipc"}) {
    const size_t n = std::strlen(ext);
    if (name.size() > n && name.compare(name.size() - n, n, ext) == 0) return true;
  }
  return false;
}

Result<std::shared_ptr<File>> OpenArrowIpc(const std::string& name, uint64_t size, const ReadAt& read) {
  return ArrowIpcFile::Open(name, size, read);
}

Result<std::shared_ptr<File>> ArrowIpcFromSaved(const std::string& name, uint64_t size, const std::string& saved) {
  return ArrowIpcFile::FromSaved(name, size, saved);
}

}  // namespace nostall::pq
