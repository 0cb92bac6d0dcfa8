// The on-disk index of a dataset (format in docs/index_format.md).
#ifndef NOSTALL_SOURCE_INDEX_INDEX_FILE_H_
#define NOSTALL_SOURCE_INDEX_INDEX_FILE_H_

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nostall/status.h"
#include "store/file_stamp.h"

namespace nostall {

struct IndexEntry {
  std::string key;     // file path, or "shard:member"
  int64_t label;
  int32_t shard;       // -1: `key` is a whole file
  uint64_t offset;     // within the shard
  int64_t size;        // bytes; -1 if unknown (whole files are not stat'ed)
};


// A member of a tar sample besides its image and its `.cls` label (a
// `.json`, a `.txt`, a second image ...), kept for the fields a spec may
// ask for (nostall/record.h).
struct IndexMember {
  uint32_t ext;     // into Index::member_exts
  uint64_t offset;  // within the item's shard
  int64_t size;
};

struct Index {
  std::vector<IndexStamp> stamps;
  std::vector<std::string> classes;
  std::vector<std::string> shards;
  std::vector<IndexEntry> items;
  int64_t skipped = 0;
  // Files the walk found and left out, not being images nostall reads:
  // (extension, lower case, "" for none; count), by extension.
  std::vector<std::pair<std::string, int64_t>> left_out;
  // Tar samples' other members: item i's are members[member_begin[i] ..
  // member_begin[i + 1]) (both empty when no sample has one).
  std::vector<std::string> member_exts;  // WebDataset extensions, lower case
  std::vector<IndexMember> members;
  std::vector<uint32_t> member_begin;
  // How it was built (IndexVariant: the error policy, labels needed).
  std::string variant;
};

// The index as every process reads it (format version 5,
// docs/index_format.md): one read-only mapping of the index file, shared
// through the page cache by every process that opens the same dataset, its
// hash and structure checked when opened. Items are fixed 32-byte records;
// names are in one pool; paths (stamps, shards, folders) are relative to
// the dataset's root, which the opener gives, so the same file serves the
// dataset wherever it is mounted. Nothing per item is copied into the
// process.
class IndexView {
 public:
  struct Item {
    uint64_t offset;    // within the shard (0 for whole files)
    int64_t size;       // bytes; -1 when not known (a local folder's files)
    uint64_t name_at;   // into the name pool; the name ends where the next begins
    int32_t label;      // -1: none
    int32_t container;  // the shard (tar shards) or the directory (folders)
  };
  struct Member {
    uint64_t offset;  // within the item's shard (a folder's file beside: 0)
    int64_t size;     // a folder's file beside: -1
    uint32_t ext;     // into member_exts()
    uint32_t reserved;
  };
  static_assert(sizeof(Item) == 32 && sizeof(Member) == 24);

  IndexView(const IndexView&) = delete;
  IndexView& operator=(const IndexView&) = delete;
  ~IndexView();

  int64_t size() const { return static_cast<int64_t>(n_items_); }
  const Item& item(int64_t i) const { return items_[i]; }
  // The item's file name (folders) or member name (shards), as stored.
  std::string_view name(int64_t i) const;
  // What names the item to a person: DIR/NAME (folders), SHARD:MEMBER.
  std::string key(int64_t i) const;
  bool folder() const { return shards_.empty(); }
  bool has_members() const { return n_members_ > 0; }
  const Member* members_begin(int64_t i) const { return members_ + member_begin_[i]; }
  const Member* members_end(int64_t i) const { return members_ + member_begin_[i + 1]; }

  const std::string& root() const { return root_; }
  // Paths resolved against the root.
  const std::vector<IndexStamp>& stamps() const { return stamps_; }
  const std::vector<std::string>& shards() const { return shards_; }
  const std::vector<std::string>& dirs() const { return dirs_; }
  const std::vector<std::string>& classes() const { return classes_; }
  const std::vector<std::string>& member_exts() const { return member_exts_; }
  const std::vector<std::pair<std::string, int64_t>>& left_out() const { return left_out_; }
  int64_t skipped() const { return skipped_; }
  const std::string& variant() const { return variant_; }
  // Identifies the items (names, labels, spans, their shards and folders as
  // resolved): equal fingerprints mean equal indexes.
  uint64_t fingerprint() const { return fingerprint_; }
  // Whether the items lie in a shared file mapping (false: in this
  // process's memory, for an index that could not be saved).
  bool mapped() const { return map_ != nullptr; }
  size_t bytes() const { return len_; }
  // The index file's bytes, as mapped or held.
  std::string_view raw() const { return {reinterpret_cast<const char*>(base_), len_}; }

 private:
  friend struct IndexViewAccess;
  IndexView() = default;
  std::string owned_;
  void* map_ = nullptr;
  const uint8_t* base_ = nullptr;
  size_t len_ = 0;
  uint64_t n_items_ = 0, n_members_ = 0, pool_bytes_ = 0;
  const Item* items_ = nullptr;
  const uint32_t* member_begin_ = nullptr;
  const Member* members_ = nullptr;
  const char* pool_ = nullptr;
  std::string root_;
  std::vector<IndexStamp> stamps_;
  std::vector<std::string> classes_, shards_, dirs_, member_exts_;
  std::vector<std::pair<std::string, int64_t>> left_out_;
  int64_t skipped_ = 0;
  std::string variant_;
  uint64_t fingerprint_ = 0;
};

using IndexViewPtr = std::shared_ptr<const IndexView>;

// `index` in the index file format, its paths made relative to `root` (a
// path under the root is stored relative to it; any other as it is).
std::string SerializeIndex(const Index& index, const std::string& root);
// A view over bytes in this process's memory: an index just built (trusted:
// `checked` false skips the hash and structure checks), or bytes read from
// elsewhere (the fuzz target, an index object fetched from S3).
// `relative_only`: every path must lie under the root (an index that came
// with the data, as an object beside S3 shards).
Result<IndexViewPtr> ViewIndexBytes(std::string bytes, const std::string& path,
                                    const std::string& root, bool checked = true,
                                    bool relative_only = false);

// The index beside the data: an image folder's ROOT/.nostall-index, tar
// shards' PATTERN.nostall-index in the first shard's folder.
inline constexpr const char* kIndexBesideName = ".nostall-index";
inline constexpr const char* kIndexBesideSuffix = ".nostall-index";
// The file that caches the index of the dataset described by `canonical`.
std::string IndexCachePath(const std::string& dir, const std::string& canonical);
// Maps the index file at `path`, if it is this user's (owned by the caller,
// writable by no one else: a shared cache directory's files planted by
// another user are ignored) or, with `owner_ok`, owned by that uid too (the
// data's owner, for an index beside the data), has the right hash and is
// consistent: shard and folder numbers in range, members inside their shard,
// whole files right inside the folders walked, no relative path leading out
// of the root.
Result<IndexViewPtr> MapIndexFile(const std::string& path, const std::string& root,
                                  int64_t owner_ok = -1);
// Written to a fresh private temporary file (O_EXCL|O_NOFOLLOW, `mode`)
// and renamed, so readers never see half a file and no symlink is followed;
// a missing cache directory is made 0700.
Status WriteIndexFile(const std::string& path, const std::string& bytes, unsigned mode = 0600);
// Writes `bytes` over the file at `path`, which must already hold exactly
// as many: no reader that has it mapped can fault past its end (a reader
// meeting it half written fails its hash and does without it). No symlink
// is followed. For the second step of publishing an index beside the data
// (indexed_source.cc: WriteBeside).
Status OverwriteIndexSameSize(const std::string& path, const std::string& bytes);
// An index just built (`bytes`): saved to `cache_path` and mapped from
// there, so the node's other processes share it; when it cannot be saved
// ("" or an error), held in this process's memory. Appends to `origin`
// which it is.
Result<IndexViewPtr> SaveAndMapIndex(const std::string& cache_path, std::string bytes,
                                     const std::string& root, std::string* origin);
// SerializeIndex + WriteIndexFile, and MapIndexFile (tests, tools).
Status SaveIndex(const std::string& path, const Index& index, const std::string& root = "");
Result<IndexViewPtr> LoadIndex(const std::string& path, const std::string& root = "");
// Whether the data is still as the index's stamps say. `portable`: by what
// a copy keeps (mtime, size, a file's head and tail; `cp -a`, rsync -a, tar,
// a move, another node's mount), not by ctime and inode, which are this
// file system's own: how an index beside the data is checked.
bool StampsStillHold(const IndexView& index, bool portable = false);
// The hash an index file's header carries, over `bytes` as they are (the
// fuzz target sets it so that it reaches the checks behind it).
uint64_t IndexFileHash(const std::string& bytes);
inline constexpr size_t kIndexHeaderBytes = 64;
inline constexpr size_t kIndexHashAt = 56;

}  // namespace nostall

#endif  // NOSTALL_SOURCE_INDEX_INDEX_FILE_H_
