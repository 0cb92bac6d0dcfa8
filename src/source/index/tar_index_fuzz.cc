// libFuzzer target: the tar shard indexer over bytes the fuzzer writes.
// Invariants checked: no crash, every indexed item and member lies inside
// the shard, and members are matched to their samples.
#include <cstdlib>
#include <cstring>

#include "source/index/tar_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nostall;
  auto read = [&](uint64_t offset, size_t n, uint8_t* out) -> Status {
    if (offset > size || n > size - offset) return DataError("truncated");
    if (n > 0) std::memcpy(out, data + offset, n);
    return Status::OK();
  };
  for (int mode = 0; mode < 4; ++mode) {
    Index index;
    TarIndexOptions options;
    options.skip_bad = mode & 1;
    options.need_label = mode & 2;
    Status st = IndexTarShard("fuzz.tar", 0, size, read, options, &index);
    for (const IndexEntry& e : index.items) {
      if (e.size < 0 || e.offset > size || static_cast<uint64_t>(e.size) > size - e.offset) {
        std::abort();  // an item outside the shard
      }
    }
    for (const IndexMember& m : index.members) {
      if (m.size < 0 || m.offset > size || static_cast<uint64_t>(m.size) > size - m.offset ||
          m.ext >= index.member_exts.size()) {
        std::abort();  // a member outside the shard
      }
    }
    if (!index.members.empty() && index.member_begin.size() != index.items.size() + 1) {
      std::abort();  // members not matched to their samples
    }
    (void)st;
  }
  return 0;
}
