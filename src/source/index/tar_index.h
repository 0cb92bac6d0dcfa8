// Indexing WebDataset tar shards: one sequential pass over the member
// headers, no member data read but `.cls` labels and long names.
//
// Every size and offset in a tar header is a claim made by the file: each is
// checked against the shard's real size with overflow-safe arithmetic before
// it is used, so a hostile shard is an error naming the shard and the byte,
// never a loop, a wrap-around or a huge allocation.
#ifndef NOSTALL_SOURCE_INDEX_TAR_INDEX_H_
#define NOSTALL_SOURCE_INDEX_TAR_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "nostall/record.h"
#include "nostall/status.h"
#include "source/index/index_file.h"

namespace nostall {

// Reads exactly `size` bytes at `offset` of the shard into `out`.
using ReadAt = std::function<Status(uint64_t offset, size_t size, uint8_t* out)>;

struct TarIndexOptions {
  // A bad sample is counted in `index->skipped` rather than an error.
  bool skip_bad = false;
  // A sample needs a valid `.cls` label (false: a fields spec without a
  // label field; a missing or bad one gives label -1).
  bool need_label = true;
  // A sample's item is its first audio member (wav, flac, mp3, ogg, opus)
  // or video member (mp4, mkv, webm, avi, mov) rather than its first image
  // member.
  Media media = Media::kImage;
};

// Appends the samples of one shard (`file_size` bytes, read through `read`)
// to `index` as shard number `shard`. A sample without an image member or
// (when needed) a valid `.cls` label is an error naming it, or, with
// `skip_bad`, counted in `index->skipped`. Each sample's other members
// (`.json`, `.txt`, ...) are kept in `index->members`.
Status IndexTarShard(const std::string& shard_path, int32_t shard, uint64_t file_size,
                     const ReadAt& read, const TarIndexOptions& options, Index* index);

// Appends `part` (the index of one or more shards, their numbers already
// set) to `into`: its items, stamps and skipped count, and its members with
// their extensions mapped into `into`'s.
void AppendIndex(Index part, Index* into);

// Indexes shards 0..n-1 with `index_one(s, &part)` (appending shard s to an
// empty `part`), up to `threads` at once, and appends them to `into` in
// shard order: the same index a loop over the shards makes. `done(s,
// part)` is called as each shard is done (from its thread). The first error
// (by shard) is returned, and no shard is started after one.
Status IndexShardsInParallel(size_t n, int threads,
                             const std::function<Status(size_t, Index*)>& index_one,
                             const std::function<void(size_t, const Index&)>& done, Index* into);

// WebDataset's rule: a member's key is its path up to the first dot of the
// file name, its extension the rest, lower case ("a/x.seg.png": "a/x",
// "seg.png").
void SplitMemberName(const std::string& path, std::string* key, std::string* ext);

// `bytes` with every byte outside printable ASCII written as \xNN: safe to
// put a file's bytes (a label, a name) into an error message.
std::string Printable(const std::string& bytes);

}  // namespace nostall

#endif  // NOSTALL_SOURCE_INDEX_TAR_INDEX_H_
