// libFuzzer target: an Arrow IPC file's schema, record batch headers, row
// offsets and buffers as the arrow driver reads them (arrow_ipc_file.cc,
// column_file_fuzz.h).
#include "source/columnar/column_file_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return nostall::FuzzColumnFile("fuzz.arrow", data, size);
}
