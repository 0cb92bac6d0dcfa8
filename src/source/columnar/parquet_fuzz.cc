// libFuzzer target: a Parquet file's footer, offset indexes and pages as
// the parquet driver reads them, with its "huggingface" metadata
// (column_file_fuzz.h).
#include "source/columnar/column_file_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return nostall::FuzzColumnFile("fuzz.parquet", data, size);
}
