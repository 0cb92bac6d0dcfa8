// libFuzzer target: a saved index file (index_file.h) as a tampered or
// damaged cache directory, or a dataset's own folder, could hold it. The
// header's hash is set to match the input (a hostile file can carry a right
// hash), so the fuzzer reaches the structure checks behind it. Invariants:
// no crash, and an index that is accepted has every shard and folder number
// in range, every item's name inside the pool, every member inside its
// shard as stamped and of an extension that exists, and no relative path
// leading out of its root.
#include <cstdlib>
#include <cstring>
#include <string>

#include "source/index/index_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nostall;
  // The magic and version are given, so the fuzzer spends its time past them.
  std::string bytes("NSTIDX01\x05\0\0\0", 12);
  bytes.append(reinterpret_cast<const char*>(data), size);
  if (bytes.size() >= kIndexHeaderBytes) {
    const uint64_t hash = IndexFileHash(bytes);
    std::memcpy(bytes.data() + kIndexHashAt, &hash, 8);
  }
  Result<IndexViewPtr> idx = ViewIndexBytes(bytes, "fuzz.idx", "/data");
  if (!idx.ok()) return 0;
  const IndexView& index = *idx.value();
  const int64_t containers =
      static_cast<int64_t>(index.folder() ? index.dirs().size() : index.shards().size());
  for (int64_t i = 0; i < index.size(); ++i) {
    const IndexView::Item& e = index.item(i);
    if (e.container < 0 || e.container >= containers) std::abort();
    if (e.label < -1) std::abort();
    (void)index.key(i);  // reads the name: inside the pool
    if (!index.has_members()) continue;
    if (index.members_begin(i) > index.members_end(i)) std::abort();
    for (const IndexView::Member* m = index.members_begin(i); m != index.members_end(i); ++m) {
      if (m->ext >= index.member_exts().size()) std::abort();
      if (index.folder() ? (m->offset != 0 || m->size != -1) : m->size < 0) std::abort();
    }
  }
  for (const std::string& ext : index.member_exts()) {
    if (index.folder() && (ext.empty() || ext.find('/') != std::string::npos)) std::abort();
  }
  (void)index.fingerprint();
  return 0;
}
