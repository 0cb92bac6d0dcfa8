// Arrow IPC's layout as the arrow driver reads it (arrow_ipc_layout.h).
#include "source/columnar/arrow_ipc_layout.h"

#include <arrow/util/compression.h>

#include <cstring>

#include "source/columnar/flat_reader.h"

namespace nostall::pq {
namespace {

template <typename T>
T IpcValue(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

Status IpcFieldsOf(const std::string& name, const arrow::FieldVector& fields, int parent,
                   const std::string& prefix, std::vector<IpcField>* out, std::vector<Leaf>* leaves) {
  for (const auto& f : fields) {
    IpcField x;
    x.parent = parent;
    x.type = f->type();
    const std::string path = prefix + f->name();
    const arrow::Type::type id = f->type()->id();
    const int self = static_cast<int>(out->size());
    if (id == arrow::Type::STRUCT) {
      x.buffers = 1;
      out->push_back(x);
      NOSTALL_RETURN_IF_ERROR(IpcFieldsOf(name, f->type()->fields(), self, path + ".", out, leaves));
      continue;
    }
    Leaf l;
    l.index = static_cast<int>(leaves->size());
    l.path = path;
    l.max_def = 1;
    l.physical = kIpcOther;
    if (id == arrow::Type::BINARY || id == arrow::Type::STRING || id == arrow::Type::LARGE_BINARY ||
        id == arrow::Type::LARGE_STRING) {
      x.buffers = 3;
      l.physical = kIpcBytes;
      l.string = id == arrow::Type::STRING || id == arrow::Type::LARGE_STRING;
    } else if (id == arrow::Type::NA) {
      x.buffers = 0;
    } else if (arrow::is_fixed_width(id) && id != arrow::Type::FIXED_SIZE_BINARY && id != arrow::Type::DICTIONARY) {
      x.buffers = 2;
      if (id == arrow::Type::BOOL) l.physical = kIpcBoolean;
      if (id == arrow::Type::INT8 || id == arrow::Type::INT16 || id == arrow::Type::INT32 ||
          id == arrow::Type::UINT8 || id == arrow::Type::UINT16) {
        l.physical = kIpcInt32;
      }
      if (id == arrow::Type::INT64 || id == arrow::Type::UINT32 || id == arrow::Type::UINT64) l.physical = kIpcInt64;
      if (id == arrow::Type::FLOAT) l.physical = kIpcFloat;
      if (id == arrow::Type::DOUBLE) l.physical = kIpcDouble;
    } else if (id == arrow::Type::FIXED_SIZE_BINARY || id == arrow::Type::DICTIONARY) {
      x.buffers = 2;  // a dictionary's indices; its values are in messages of their own
    } else if (id == arrow::Type::LIST || id == arrow::Type::LARGE_LIST || id == arrow::Type::MAP ||
               id == arrow::Type::FIXED_SIZE_LIST) {
      // A list: a leaf of its own (max_rep: the driver refuses it by name);
      // its child's buffers are walked past.
      x.buffers = id == arrow::Type::FIXED_SIZE_LIST ? 1 : 2;
      l.max_rep = 1;
    } else {
      return InvalidArgument(name + ": the column " + path + " is of Arrow type " + f->type()->ToString() +
                             ", whose layout nostall does not read (union, view and run-end encoded columns)");
    }
    x.leaf = l.index;
    leaves->push_back(l);
    out->push_back(x);
    if (l.max_rep > 0) {
      // The list's child fields follow it in the batch, depth first.
      std::vector<IpcField> inner;
      std::vector<Leaf> ignored;
      NOSTALL_RETURN_IF_ERROR(IpcFieldsOf(name, f->type()->fields(), -1, path + ".", &inner, &ignored));
      for (IpcField& c : inner) {
        c.leaf = -1;
        c.parent = -1;
        out->push_back(c);
      }
    }
  }
  return Status::OK();
}


Status IpcUnpack(int codec, std::string_view raw, std::string* out) {
  if (codec < 0 || raw.empty()) {
    out->assign(raw);
    return Status::OK();
  }
  if (raw.size() < 8) return DataError("a compressed buffer of " + std::to_string(raw.size()) + " bytes");
  const auto length = static_cast<int64_t>(FlatLe64(reinterpret_cast<const uint8_t*>(raw.data())));
  if (length == -1) {
    out->assign(raw.substr(8));
    return Status::OK();
  }
  // A claim: bounded by what the codecs can expand to (not a 2^62 allocation).
  if (length < 0 || static_cast<uint64_t>(length) > (raw.size() - 8) * 4096 + 4096 ||
      length > (int64_t{1} << 34)) {
    return DataError("a compressed buffer claiming " + std::to_string(length) + " bytes from " +
                     std::to_string(raw.size()) + "");
  }
  auto c = arrow::util::Codec::Create(codec == 0 ? arrow::Compression::LZ4_FRAME : arrow::Compression::ZSTD);
  if (!c.ok()) return InvalidArgument("this Arrow build cannot decompress: " + c.status().message());
  out->resize(static_cast<size_t>(length));
  auto n = c.ValueOrDie()->Decompress(static_cast<int64_t>(raw.size() - 8),
                                      reinterpret_cast<const uint8_t*>(raw.data() + 8), length,
                                      reinterpret_cast<uint8_t*>(out->data()));
  if (!n.ok() || n.ValueOrDie() != length) {
    return DataError("a compressed buffer that does not decompress to its " + std::to_string(length) + " bytes" +
                     (n.ok() ? "" : ": " + n.status().message()));
  }
  return Status::OK();
}


Status IpcAppendValue(arrow::Type::type id, const char* v, std::string_view data, bool large, size_t k,
                      Values* out) {
  switch (id) {
    case arrow::Type::BINARY: case arrow::Type::STRING: case arrow::Type::LARGE_BINARY: case arrow::Type::LARGE_STRING: {
      const int64_t a = large ? IpcValue<int64_t>(v + k * 8) : IpcValue<int32_t>(v + k * 4);
      const int64_t z = large ? IpcValue<int64_t>(v + k * 8 + 8) : IpcValue<int32_t>(v + k * 4 + 4);
      if (a < 0 || z < a || static_cast<uint64_t>(z) > data.size()) {
        return DataError("row " + std::to_string(k) + "'s value lies outside its data buffer");
      }
      out->blob.append(data.data() + a, static_cast<size_t>(z - a));
      break;
    }
    case arrow::Type::BOOL: AppendBoolean((static_cast<uint8_t>(v[k / 8]) >> (k % 8) & 1) != 0, out); break;
    case arrow::Type::INT8: AppendInteger(IpcValue<int8_t>(v + k), out); break;
    case arrow::Type::INT16: AppendInteger(IpcValue<int16_t>(v + k * 2), out); break;
    case arrow::Type::INT32: AppendInteger(IpcValue<int32_t>(v + k * 4), out); break;
    case arrow::Type::INT64: AppendInteger(IpcValue<int64_t>(v + k * 8), out); break;
    case arrow::Type::UINT8: AppendInteger(IpcValue<uint8_t>(v + k), out); break;
    case arrow::Type::UINT16: AppendInteger(IpcValue<uint16_t>(v + k * 2), out); break;
    case arrow::Type::UINT32: AppendInteger(IpcValue<uint32_t>(v + k * 4), out); break;
    case arrow::Type::UINT64: AppendInteger(static_cast<int64_t>(IpcValue<uint64_t>(v + k * 8)), out); break;
    case arrow::Type::FLOAT: AppendReal(IpcValue<float>(v + k * 4), out); break;
    case arrow::Type::DOUBLE: AppendReal(IpcValue<double>(v + k * 8), out); break;
    default:
      return InvalidArgument(std::string("a column of a type nostall does not read") +
                             (id == arrow::Type::DICTIONARY ? " (dictionary-encoded: write it plain, as datasets does)"
                                                            : ""));
  }
  return Status::OK();
}

}  // namespace nostall::pq
