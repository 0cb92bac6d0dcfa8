// The body of the libFuzzer targets of the parquet driver's files
// (parquet_fuzz.cc, arrow_ipc_fuzz.cc): a file's footer or headers, its
// row indexes and units as the driver reads them (parquet_file.h), over
// bytes the fuzzer writes. Invariants checked: no crash, no read outside
// the file, and every unit decodes to the rows its index says or is an
// error.
// (Arrow's own code is not instrumented here: the fuzzer is guided by
// nostall's side of it; a crash inside Arrow still stops it.)
#ifndef NOSTALL_SOURCE_COLUMNAR_COLUMN_FILE_FUZZ_H_
#define NOSTALL_SOURCE_COLUMNAR_COLUMN_FILE_FUZZ_H_

#include <cstdlib>
#include <cstring>

#include "source/columnar/parquet_columns.h"
#include "source/columnar/parquet_file.h"

namespace nostall {

// Opens `data` as the file `name` (its name says Parquet or Arrow IPC) and
// decodes some units of every leaf.
inline int FuzzColumnFile(const char* name, const uint8_t* data, size_t size) {
  const pq::ReadAt read = [&](uint64_t offset, uint64_t n, std::string* out) -> Status {
    if (offset > size || n > size - offset) return DataError("a read outside the file");
    out->assign(reinterpret_cast<const char*>(data) + offset, n);
    return Status::OK();
  };
  Result<std::shared_ptr<pq::File>> opened = pq::File::Open(name, size, read);
  if (!opened.ok()) return 0;
  pq::File& file = *opened.value();
  (void)pq::ReadHfFeatures(file);  // metadata whoever wrote the file chose
  std::vector<int> leaves;
  for (size_t l = 0; l < file.leaves().size() && l < 8; ++l) leaves.push_back(static_cast<int>(l));
  (void)file.ReadOffsetIndexes(leaves, read);
  int64_t budget = 4096;  // rows decoded per input, at most
  for (int g = 0; g < file.row_groups() && g < 8; ++g) {
    const int64_t rows = file.row_group_rows(g);
    for (int leaf : leaves) {
      for (int64_t row : {int64_t{-1}, int64_t{0}, rows / 2, rows - 1}) {
        if (rows <= 0 && row >= 0) continue;
        Result<pq::Unit> u = file.UnitOf(g, leaf, row);
        if (!u.ok()) continue;
        const pq::Unit& unit = u.value();
        for (const pq::Range& r : {unit.dictionary, unit.data}) {
          if (r.offset > size || r.length > size - r.offset) std::abort();  // a unit outside the file
        }
        if (unit.rows > budget || unit.rows < 0) continue;
        budget -= unit.rows;
        std::string dict, bytes;
        if (!read(unit.dictionary.offset, unit.dictionary.length, &dict).ok()) continue;
        if (!read(unit.data.offset, unit.data.length, &bytes).ok()) continue;
        Result<pq::Values> v = file.Decode(unit, dict, bytes);
        if (v.ok()) {
          const pq::Values& vals = v.value();
          if (vals.off.size() != vals.present.size() + 1 || vals.off.back() != vals.blob.size()) std::abort();
          // A unit decodes to exactly the rows its index gives it, or is an error.
          if (static_cast<int64_t>(vals.present.size()) != unit.rows) std::abort();
        }
      }
    }
  }
  return 0;
}

}  // namespace nostall

#endif  // NOSTALL_SOURCE_COLUMNAR_COLUMN_FILE_FUZZ_H_
