// The layout of an Arrow IPC file as the arrow driver reads it
// (arrow_ipc_file.cc): the schema's fields depth first with the buffers
// each has in a record batch's body, a batch's buffers, a compressed
// buffer unpacked, a value appended. Private to the source layer.
#ifndef NOSTALL_SOURCE_COLUMNAR_ARROW_IPC_LAYOUT_H_
#define NOSTALL_SOURCE_COLUMNAR_ARROW_IPC_LAYOUT_H_

#include <arrow/type.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nostall/status.h"
#include "source/columnar/parquet_file.h"

namespace nostall::pq {

enum IpcPhysical { kIpcBoolean = 0, kIpcInt32 = 1, kIpcInt64 = 2, kIpcFloat = 4, kIpcDouble = 5, kIpcBytes = 6,
                   kIpcOther = 7 };

// One field's node and buffers within a batch's body (body-relative):
// validity (length 0: none), then offsets and data for binary, values (as
// data) for the rest.
struct IpcBuffers {
  Range validity, offsets, data;
  int64_t length = 0, null_count = 0;
};

// One record batch: where its header and body lie, its rows, each field's
// buffers, and for the binary leaves asked for, each row's value (file
// offset and bytes; bytes -1: absent).
struct IpcBatch {
  std::string header;
  uint64_t body = 0, body_length = 0;
  int64_t rows = 0;
  int codec = -1;  // each buffer compressed: 0 LZ4 frame, 1 ZSTD; -1 none
  std::vector<IpcBuffers> fields;
  std::map<int, std::vector<std::pair<uint64_t, int64_t>>> values;
};

// What each field of the schema is, depth first: its buffers' count and,
// for a leaf the driver may read, its leaf.
struct IpcField {
  int buffers = 0;
  int parent = -1;  // the struct above it, -1 at the top (or inside a list)
  int leaf = -1;    // its leaf's index, -1 for a struct or inside a list
  std::shared_ptr<arrow::DataType> type;
};

// The fields of `fields` (under `parent`, paths from `prefix`) appended to
// *out depth first, their leaves to *leaves; a type whose buffers cannot be
// walked is an error naming the file `name` and the column.
Status IpcFieldsOf(const std::string& name, const arrow::FieldVector& fields, int parent,
                   const std::string& prefix, std::vector<IpcField>* out, std::vector<Leaf>* leaves);

// A buffer as stored in a batch of codec `codec` (-1: as it is) into *out:
// Arrow IPC's compressed buffer is its uncompressed length (-1: stored
// uncompressed), then the codec's bytes.
Status IpcUnpack(int codec, std::string_view raw, std::string* out);

// Row k's value of a leaf of Arrow type `id` appended to *out: `v` its
// values (or offsets, for binary: `data` then holds the bytes; `large`:
// 64-bit offsets). A value outside `data` is a DataError; a type not read,
// InvalidArgument.
Status IpcAppendValue(arrow::Type::type id, const char* v, std::string_view data, bool large, size_t k,
                      Values* out);

}  // namespace nostall::pq

#endif  // NOSTALL_SOURCE_COLUMNAR_ARROW_IPC_LAYOUT_H_
