// Indexing WebDataset tar shards: one sequential pass over the member
// headers, no member data read but `.cls` labels and long names.
//
// Every size and offset in a tar header is a claim made by the file: each is
// checked against the shard's real size with overflow-safe arithmetic before
// it is used, so a hostile shard is an error naming the shard and the byte,
// never a loop, a wrap-around or a huge allocation.
#ifndef NOSTALL_SOURCE_TAR_INDEX_H_
#define NOSTALL_SOURCE_TAR_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "nostall/status.h"
#include "source/index_file.h"

namespace nostall {

// Reads exactly `size` bytes at `offset` of the shard into `out`.
using ReadAt = std::function<Status(uint64_t offset, size_t size, uint8_t* out)>;

// Appends the samples of one shard (`file_size` bytes, read through `read`)
// to `index` as shard number `shard`. A sample without an image member or a
// valid `.cls` label is an error naming it, or, with `skip_bad`, counted in
// `index->skipped`.
Status IndexTarShard(const std::string& shard_path, int32_t shard, uint64_t file_size,
                     const ReadAt& read, bool skip_bad, Index* index);

// `bytes` with every byte outside printable ASCII written as \xNN: safe to
// put a file's bytes (a label, a name) into an error message.
std::string Printable(const std::string& bytes);

}  // namespace nostall

#endif  // NOSTALL_SOURCE_TAR_INDEX_H_
