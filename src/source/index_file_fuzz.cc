// libFuzzer target: a saved index file (index_file.h) as a tampered or
// damaged cache directory could hold it. Invariants: no crash, and an
// index that is accepted has every shard number in range, every member
// inside its shard as stamped, and every sample's other members (format 4)
// matched to an item and an extension that exist (an image folder's: the
// files beside each image, never a path elsewhere).
#include <cstdlib>
#include <string>

#include "source/index_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nostall;
  // The magic and version are given, so the fuzzer spends its time past them.
  std::string bytes("NSTIDX01\x04\0\0\0", 12);
  bytes.append(reinterpret_cast<const char*>(data), size);
  Result<Index> idx = ParseIndex(bytes, "fuzz.idx");
  if (!idx.ok()) return 0;
  const Index& index = idx.value();
  for (const IndexEntry& e : index.items) {
    if (e.shard < -1 || e.shard >= static_cast<int64_t>(index.shards.size())) std::abort();
    if (!index.shards.empty() && e.shard < 0) std::abort();
  }
  // Members belong to items that exist, under extensions that exist.
  if (!index.members.empty() && index.member_begin.size() != index.items.size() + 1) std::abort();
  for (size_t i = 0; i + 1 < index.member_begin.size(); ++i) {
    if (index.member_begin[i] > index.member_begin[i + 1] ||
        index.member_begin[i + 1] > index.members.size()) {
      std::abort();
    }
  }
  for (const IndexMember& m : index.members) {
    if (m.ext >= index.member_exts.size()) std::abort();
  }
  if (!CheckIndex(index, "fuzz.idx").ok()) std::abort();
  // What CheckIndex passed: a shard's members lie in it (sizes known); a
  // folder's are files beside their image (offset 0, size -1), named by an
  // extension that leads to no other directory.
  for (const IndexMember& m : index.members) {
    if (index.shards.empty() ? (m.offset != 0 || m.size != -1) : m.size < 0) std::abort();
    const std::string& ext = index.member_exts[m.ext];
    if (index.shards.empty() && (ext.empty() || ext.find('/') != std::string::npos)) std::abort();
  }
  (void)index.Fingerprint();
  return 0;
}
