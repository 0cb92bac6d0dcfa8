// libFuzzer target: the tar shard indexer over bytes the fuzzer writes.
// Invariants checked: no crash, and every indexed member lies inside the
// shard.
#include <cstdlib>
#include <cstring>

#include "source/tar_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nostall;
  auto read = [&](uint64_t offset, size_t n, uint8_t* out) -> Status {
    if (offset > size || n > size - offset) return DataError("truncated");
    if (n > 0) std::memcpy(out, data + offset, n);
    return Status::OK();
  };
  for (bool skip : {false, true}) {
    Index index;
    Status st = IndexTarShard("fuzz.tar", 0, size, read, skip, &index);
    for (const IndexEntry& e : index.items) {
      if (e.size < 0 || e.offset > size || static_cast<uint64_t>(e.size) > size - e.offset) {
        std::abort();  // an item outside the shard
      }
    }
    (void)st;
  }
  return 0;
}
