#include "source/index/index_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <unordered_map>

#include <fcntl.h>
#include <malloc.h>
#include <sys/mman.h>
#include <xxhash.h>

#include "common/fd.h"

namespace nostall {
namespace {

constexpr char kMagic[8] = {'N', 'S', 'T', 'I', 'D', 'X', '0', '1'};
constexpr uint32_t kVersion = 5;

uint64_t Fnv(uint64_t h, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

class Writer {
 public:
  void U64(uint64_t v) { buf_.append(reinterpret_cast<const char*>(&v), 8); }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void Str(const std::string& s) {
    U64(s.size());
    buf_ += s;
  }
  void Raw(const void* p, size_t n) { buf_.append(static_cast<const char*>(p), n); }
  void Pad8() { buf_.resize((buf_.size() + 7) & ~size_t{7}, '\0'); }
  std::string& buf() { return buf_; }

 private:
  std::string buf_;
};

class Reader {
 public:
  explicit Reader(std::string_view data) : d_(data) {}
  bool U64(uint64_t* v) {
    if (p_ + 8 > d_.size()) return false;
    std::memcpy(v, d_.data() + p_, 8);
    p_ += 8;
    return true;
  }
  bool I64(int64_t* v) { return U64(reinterpret_cast<uint64_t*>(v)); }
  bool Str(std::string* s) {
    uint64_t n;
    if (!U64(&n) || n > d_.size() - p_) return false;
    s->assign(d_.data() + p_, n);
    p_ += n;
    return true;
  }
  bool Count(uint64_t* n) { return U64(n) && *n <= d_.size(); }  // sanity bound
  bool AtEnd() const { return p_ == d_.size(); }

 private:
  std::string_view d_;
  size_t p_ = 0;
};

}  // namespace

std::string IndexCachePath(const std::string& dir, const std::string& canonical) {
  std::string base = dir;
  if (base.empty()) {
    if (const char* e = std::getenv("NOSTALL_CACHE_DIR"); e && *e) {
      base = e;
    } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
      base = std::string(x) + "/nostall";
    } else if (const char* home = std::getenv("HOME"); home && *home) {
      base = std::string(home) + "/.cache/nostall";
    } else {
      return "";
    }
  }
  char name[40];
  std::snprintf(name, sizeof name, "/index-%016llx.idx",
                static_cast<unsigned long long>(
                    Fnv(0xcbf29ce484222325ull, canonical.data(), canonical.size())));
  return base + name;
}


namespace {

// The file's first 64 bytes.
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t flags;  // bit 0: an image folder's index
  uint64_t items, members, meta_bytes, pool_bytes, fingerprint, hash;
};
static_assert(sizeof(Header) == kIndexHeaderBytes && offsetof(Header, hash) == kIndexHashAt);

constexpr uint32_t kFolderFlag = 1;

size_t Align8(size_t n) { return (n + 7) & ~size_t{7}; }

bool IsAbsolute(const std::string& p) {
  return (!p.empty() && p[0] == '/') || p.find("://") != std::string::npos;
}

std::string RootPrefix(const std::string& root) {
  return !root.empty() && root.back() == '/' ? root : root + "/";
}

// `path` as the file stores it: relative to `root` when under it.
std::string Relative(const std::string& path, const std::string& root) {
  if (root.empty()) return path;
  if (path == root) return ".";
  const std::string prefix = RootPrefix(root);
  if (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0) {
    return path.substr(prefix.size());
  }
  return path;
}

std::string Resolve(const std::string& stored, const std::string& root) {
  if (root.empty() || IsAbsolute(stored)) return stored;
  if (stored == ".") return root;
  return RootPrefix(root) + stored;
}

// A relative path with a ".." in it would lead out of the root.
bool LeadsOut(const std::string& p) {
  if (IsAbsolute(p)) return false;
  for (size_t at = 0; at <= p.size();) {
    size_t end = p.find('/', at);
    if (end == std::string::npos) end = p.size();
    if (p.compare(at, end - at, "..") == 0 && end - at == 2) return true;
    at = end + 1;
  }
  return false;
}

uint64_t HashBytes(const uint8_t* data, size_t len) {
  const uint64_t head = XXH3_64bits(data, kIndexHashAt);
  return XXH3_64bits_withSeed(data + kIndexHeaderBytes, len - kIndexHeaderBytes, head);
}

}  // namespace

uint64_t IndexFileHash(const std::string& bytes) {
  if (bytes.size() < kIndexHeaderBytes) return 0;
  return HashBytes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

namespace {

// The meta section: the stamps, classes, shards, folders (`dirs`), what was
// left out, members' extensions and the variant, paths relative to `root`
// (what ReadTables reads back).
std::string MetaSection(const Index& index, const std::vector<std::string>& dirs, const std::string& root) {
  Writer meta;
  meta.U64(index.stamps.size());
  for (const auto& s : index.stamps) {
    meta.Str(Relative(s.path, root));
    meta.I64(s.mtime_ns);
    meta.I64(s.size);
    meta.I64(s.ctime_ns);
    meta.U64(s.inode);
    meta.U64(s.content);
  }
  meta.U64(index.classes.size());
  for (const auto& c : index.classes) meta.Str(c);
  meta.U64(index.shards.size());
  for (const auto& s : index.shards) meta.Str(Relative(s, root));
  meta.U64(dirs.size());
  for (const auto& d : dirs) meta.Str(Relative(d, root));
  meta.I64(index.skipped);
  meta.U64(index.left_out.size());
  for (const auto& [ext, count] : index.left_out) {
    meta.Str(ext);
    meta.I64(count);
  }
  meta.U64(index.member_exts.size());
  for (const auto& e : index.member_exts) meta.Str(e);
  meta.Str(index.variant);
  return std::move(meta.buf());
}

}  // namespace

std::string SerializeIndex(const Index& index, const std::string& root) {
  const bool folder = index.shards.empty();
  // Items: a folder's keys split into their directory (one list) and name;
  // a shard's into the shard and the member's name.
  std::vector<std::string> dirs;
  std::unordered_map<std::string, int32_t> dir_ids;
  std::vector<IndexView::Item> items(index.items.size());
  std::string pool;
  for (size_t i = 0; i < index.items.size(); ++i) {
    const IndexEntry& e = index.items[i];
    std::string_view name = e.key;
    int32_t container = e.shard;
    if (folder) {
      const size_t slash = e.key.rfind('/');
      const std::string dir = slash == std::string::npos ? "" : e.key.substr(0, slash);
      auto [it, added] = dir_ids.emplace(dir, static_cast<int32_t>(dirs.size()));
      if (added) dirs.push_back(dir);
      container = it->second;
      name = std::string_view(e.key).substr(slash == std::string::npos ? 0 : slash + 1);
    } else {
      const std::string& shard = e.shard >= 0 && static_cast<size_t>(e.shard) < index.shards.size()
                                     ? index.shards[static_cast<size_t>(e.shard)]
                                     : e.key;
      if (e.key.size() > shard.size() && e.key.compare(0, shard.size(), shard) == 0 &&
          e.key[shard.size()] == ':') {
        name = std::string_view(e.key).substr(shard.size() + 1);
      }
    }
    items[i] = {e.offset, e.size, pool.size(), static_cast<int32_t>(e.label), container};
    pool.append(name.data(), name.size());
  }
  const std::string meta = MetaSection(index, dirs, root);

  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.flags = folder ? kFolderFlag : 0;
  h.items = items.size();
  h.members = index.members.size();
  h.meta_bytes = meta.size();
  h.pool_bytes = pool.size();
  // The items' names, labels and spans, and in which shard or folder.
  h.fingerprint = XXH3_64bits_withSeed(pool.data(), pool.size(),
                                       XXH3_64bits(items.data(), items.size() * sizeof(IndexView::Item)));
  Writer w;
  w.Raw(&h, sizeof h);
  w.Raw(meta.data(), meta.size());
  w.Pad8();
  w.Raw(items.data(), items.size() * sizeof(IndexView::Item));
  if (!index.members.empty()) {
    std::vector<uint32_t> begin(index.items.size() + 1, 0);
    for (size_t i = 0; i < begin.size() && i < index.member_begin.size(); ++i) begin[i] = index.member_begin[i];
    w.Raw(begin.data(), begin.size() * sizeof(uint32_t));
    w.Pad8();
    for (const IndexMember& m : index.members) {
      const IndexView::Member r{m.offset, m.size, m.ext, 0};
      w.Raw(&r, sizeof r);
    }
  }
  w.Raw(pool.data(), pool.size());
  std::string out = std::move(w.buf());
  const uint64_t hash = HashBytes(reinterpret_cast<const uint8_t*>(out.data()), out.size());
  std::memcpy(out.data() + kIndexHashAt, &hash, 8);
  return out;
}

IndexView::~IndexView() {
  if (map_ != nullptr) ::munmap(map_, len_);
}

std::string_view IndexView::name(int64_t i) const {
  const uint64_t begin = items_[i].name_at;
  const uint64_t end = static_cast<uint64_t>(i) + 1 < n_items_ ? items_[i + 1].name_at : pool_bytes_;
  return std::string_view(pool_ + begin, end - begin);
}

std::string IndexView::key(int64_t i) const {
  const std::string_view n = name(i);
  const int32_t c = items_[i].container;
  if (folder()) {
    const std::string& dir = dirs_[static_cast<size_t>(c)];
    return dir.empty() ? std::string(n) : dir + "/" + std::string(n);
  }
  return shards_[static_cast<size_t>(c)] + ":" + std::string(n);
}

struct IndexViewAccess {
  struct Trust {
    bool checked = true;
    bool relative_only = false;
  };
  // The small tables of the meta section into `v` (the stamps, classes,
  // shards, folders, what was left out, members' extensions, the variant),
  // paths resolved against `root`; `stored`: every path as stored. False
  // where they do not parse, whole.
  static bool ReadTables(std::string_view meta, const std::string& root, IndexView* v,
                         std::vector<std::string>* stored) {
    Reader r(meta);
    uint64_t n = 0;
    bool ok = r.Count(&n);
    for (uint64_t i = 0; ok && i < n; ++i) {
      IndexStamp s;
      ok = r.Str(&s.path) && r.I64(&s.mtime_ns) && r.I64(&s.size) && r.I64(&s.ctime_ns) &&
           r.U64(&s.inode) && r.U64(&s.content);
      stored->push_back(s.path);
      s.path = Resolve(s.path, root);
      v->stamps_.push_back(std::move(s));
    }
    auto strings = [&](std::vector<std::string>* out, bool paths) {
      ok = ok && r.Count(&n);
      for (uint64_t i = 0; ok && i < n; ++i) {
        std::string s;
        ok = r.Str(&s);
        if (paths) {
          stored->push_back(s);
          s = Resolve(s, root);
        }
        out->push_back(std::move(s));
      }
    };
    strings(&v->classes_, false);
    strings(&v->shards_, true);
    strings(&v->dirs_, true);
    ok = ok && r.I64(&v->skipped_);
    ok = ok && r.Count(&n);
    for (uint64_t i = 0; ok && i < n; ++i) {
      std::pair<std::string, int64_t> e;
      ok = r.Str(&e.first) && r.I64(&e.second);
      v->left_out_.push_back(std::move(e));
    }
    strings(&v->member_exts_, false);
    ok = ok && r.Str(&v->variant_);
    return ok && r.AtEnd();
  }

  // Lays `v` over its bytes (v->base_, v->len_): the header, the sections,
  // the small tables read into the process; with `trust.checked`, the hash
  // and every item checked.
  static Status Attach(IndexView* v, const std::string& path, const std::string& root, Trust trust) {
    auto corrupt = [&](const std::string& why) {
      return DataError("corrupt index file " + path + ": " + why);
    };
    if (v->len_ < sizeof(Header) || std::memcmp(v->base_, kMagic, 8) != 0) {
      return DataError("not an index file: " + path);
    }
    Header h;
    std::memcpy(&h, v->base_, sizeof h);
    if (h.version != kVersion) {
      return DataError("index file of another version (" + std::to_string(h.version) + ", not " +
                       std::to_string(kVersion) + "): " + path);
    }
    if (trust.checked && HashBytes(v->base_, v->len_) != h.hash) {
      return corrupt("its hash does not match its bytes (damaged or edited)");
    }
    // The sections, each checked to fit before the next is placed.
    const uint64_t len = v->len_;
    uint64_t at = sizeof(Header);
    if (h.meta_bytes > len - at) return corrupt("sections past the end of the file");
    const std::string_view meta(reinterpret_cast<const char*>(v->base_ + at), h.meta_bytes);
    at = Align8(at + h.meta_bytes);
    if (at > len || h.items > (len - at) / sizeof(IndexView::Item)) return corrupt("sections past the end of the file");
    v->items_ = reinterpret_cast<const IndexView::Item*>(v->base_ + at);
    at += h.items * sizeof(IndexView::Item);
    if (h.members > 0) {
      if (h.items + 1 > (len - at) / sizeof(uint32_t) || h.members >= UINT32_MAX) {
        return corrupt("sections past the end of the file");
      }
      v->member_begin_ = reinterpret_cast<const uint32_t*>(v->base_ + at);
      at = Align8(at + (h.items + 1) * sizeof(uint32_t));
      if (at > len || h.members > (len - at) / sizeof(IndexView::Member)) {
        return corrupt("sections past the end of the file");
      }
      v->members_ = reinterpret_cast<const IndexView::Member*>(v->base_ + at);
      at += h.members * sizeof(IndexView::Member);
    }
    if (h.pool_bytes != len - at) return corrupt("its sections do not add up to its size");
    v->pool_ = reinterpret_cast<const char*>(v->base_ + at);
    v->n_items_ = h.items;
    v->n_members_ = h.members;
    v->pool_bytes_ = h.pool_bytes;
    v->root_ = root;

    std::vector<std::string> stored;  // every path as stored
    if (!ReadTables(meta, root, v, &stored)) return corrupt("its tables do not parse");
    // What identifies the dataset: the items, and where their shards and
    // folders are now.
    uint64_t fp = h.fingerprint;
    for (const auto* list : {&v->shards_, &v->dirs_}) {
      for (const std::string& p : *list) fp = XXH3_64bits_withSeed(p.data(), p.size(), fp);
    }
    v->fingerprint_ = fp;
    if (((h.flags & kFolderFlag) != 0) != v->shards_.empty()) return corrupt("a folder's index with shards");
    if (h.members > 0 && v->member_begin_[h.items] != h.members) return corrupt("members without their samples");
    if (!trust.checked) return Status::OK();
    return Check(*v, stored, trust, path);
  }

  static Status Check(const IndexView& v, const std::vector<std::string>& stored, Trust trust,
                      const std::string& path) {
    auto bad = [&](const std::string& why) {
      return DataError("inconsistent index file " + path + ": " + why);
    };
    for (const std::string& p : stored) {
      if (LeadsOut(p)) return bad("a path leading out of the dataset's root: " + p);
      if (trust.relative_only && IsAbsolute(p)) return bad("a path outside the dataset: " + p);
    }
    std::unordered_map<std::string, int64_t> stamped;  // path -> size (0: a directory)
    for (const IndexStamp& s : v.stamps_) stamped[s.path] = s.size;
    // Each container's size as stamped (-1: not stamped, e.g. on S3); a
    // folder's directories must each be one walked.
    const bool folder = v.folder();
    const std::vector<std::string>& containers = folder ? v.dirs_ : v.shards_;
    std::vector<int64_t> limit(containers.size(), -1);
    for (size_t c = 0; c < containers.size(); ++c) {
      auto it = stamped.find(containers[c]);
      if (it != stamped.end()) limit[c] = it->second;
      if (folder && !v.stamps_.empty() && (it == stamped.end() || it->second != 0)) {
        return bad("a file outside the folders walked");
      }
    }
    for (const std::string& ext : v.member_exts_) {
      // A folder's member is the file STEM.EXT beside its image: EXT names no
      // other directory.
      if (folder && (ext.empty() || ext.find('/') != std::string::npos)) return bad("a bad member extension");
    }
    const int64_t classes = static_cast<int64_t>(v.classes_.size());
    const int64_t ncont = static_cast<int64_t>(containers.size());
    auto inside = [&](int32_t c, uint64_t offset, int64_t size) {
      const int64_t lim = limit[static_cast<size_t>(c)];
      return lim < 0 || (offset <= static_cast<uint64_t>(lim) &&
                         static_cast<uint64_t>(size) <= static_cast<uint64_t>(lim) - offset);
    };
    uint64_t prev_name = 0;
    for (uint64_t i = 0; i < v.n_items_; ++i) {
      const IndexView::Item& e = v.items_[i];
      // The name runs to where the next one begins: both checked before
      // any of it is read.
      const uint64_t name_end = i + 1 < v.n_items_ ? v.items_[i + 1].name_at : v.pool_bytes_;
      if (e.name_at < prev_name || e.name_at > name_end || name_end > v.pool_bytes_) {
        return bad("names out of order");
      }
      prev_name = e.name_at;
      if (e.label < -1 || (classes > 0 && e.label >= classes)) return bad("a label out of range");
      if (e.container < 0 || e.container >= ncont) return bad(folder ? "a folder number out of range" : "a shard number out of range");
      if (folder) {
        const std::string_view n = v.name(static_cast<int64_t>(i));
        if (n.empty() || n == "." || n == ".." || n.find('/') != std::string_view::npos ||
            n.find('\0') != std::string_view::npos) {
          return bad("a file outside the folders walked");
        }
        if (e.size < -1) return bad("a file of negative size");
      } else {
        if (e.size < 0) return bad("a member of negative size");
        if (!inside(e.container, e.offset, e.size)) return bad("a member beyond the end of its shard");
      }
      if (v.n_members_ == 0) continue;
      const uint32_t b = v.member_begin_[i], end = v.member_begin_[i + 1];
      if (b > end || end > v.n_members_ || (i == 0 && b != 0)) return bad("members without their samples");
      for (uint32_t k = b; k < end; ++k) {
        const IndexView::Member& m = v.members_[k];
        if (m.ext >= v.member_exts_.size()) return bad("a bad member");
        if (folder ? (m.offset != 0 || m.size != -1) : m.size < 0) return bad("a bad member");
        if (!folder && !inside(e.container, m.offset, m.size)) return bad("a member beyond the end of its shard");
      }
    }
    return Status::OK();
  }

  static IndexView* New() { return new IndexView(); }
  static void Own(IndexView* v, std::string bytes) {
    v->owned_ = std::move(bytes);
    v->base_ = reinterpret_cast<const uint8_t*>(v->owned_.data());
    v->len_ = v->owned_.size();
  }
  static void Map(IndexView* v, void* map, size_t len) {
    v->map_ = map;
    v->base_ = static_cast<const uint8_t*>(map);
    v->len_ = len;
  }
};

Result<IndexViewPtr> ViewIndexBytes(std::string bytes, const std::string& path, const std::string& root,
                                    bool checked, bool relative_only) {
  std::shared_ptr<IndexView> v(IndexViewAccess::New());
  IndexViewAccess::Own(v.get(), std::move(bytes));
  NOSTALL_RETURN_IF_ERROR(IndexViewAccess::Attach(v.get(), path, root, {checked, relative_only}));
  return IndexViewPtr(std::move(v));
}

Result<IndexViewPtr> MapIndexFile(const std::string& path, const std::string& root, int64_t owner_ok) {
  if (path.empty()) return NotFound("no index cache");
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) return NotFound("no index file " + path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return NotFound("no index file " + path);
  const bool owner = st.st_uid == ::geteuid() || (owner_ok >= 0 && st.st_uid == static_cast<uid_t>(owner_ok));
  if (!owner || (st.st_mode & 022) != 0) {
    return PermissionDenied("index file " + path + " is owned by uid " + std::to_string(st.st_uid) +
                            " with mode " + ModeText(st.st_mode) +
                            (owner_ok >= 0 ? ": neither this user's nor the data's owner's, or writable by others; ignored"
                                           : ": not this user's own, ignored"));
  }
  if (st.st_size < static_cast<off_t>(kIndexHeaderBytes)) return DataError("not an index file: " + path);
  if (st.st_size > (off_t{1} << 40)) return DataError("index file " + path + " is absurdly large");
  const size_t len = static_cast<size_t>(st.st_size);
  void* map = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (map == MAP_FAILED) return ErrnoError("cannot map index file " + path, errno);
  std::shared_ptr<IndexView> v(IndexViewAccess::New());
  IndexViewAccess::Map(v.get(), map, len);
  NOSTALL_RETURN_IF_ERROR(IndexViewAccess::Attach(v.get(), path, root, {true, owner_ok >= 0}));
  return IndexViewPtr(std::move(v));
}

namespace {

// Makes `dir` and its missing parents; the ones made here are 0700 (an
// index names the dataset's paths: no one else's business).
void MakePrivateDirs(const std::filesystem::path& dir) {
  if (dir.empty() || ::access(dir.c_str(), F_OK) == 0) return;
  MakePrivateDirs(dir.parent_path());
  ::mkdir(dir.c_str(), 0700);
}

}  // namespace

Status WriteIndexFile(const std::string& path, const std::string& buf, unsigned mode) {
  if (path.empty()) return Status::OK();
  MakePrivateDirs(std::filesystem::path(path).parent_path());
  // A fresh file of our own: never one planted under the name, never
  // through a symlink.
  std::random_device rd;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rd());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (fd.get() < 0) return ErrnoError("cannot write index file " + tmp, errno);
  ::fchmod(fd.get(), mode);  // exactly `mode`, whatever the umask
  for (size_t done = 0; done < buf.size();) {
    const ssize_t n = ::write(fd.get(), buf.data() + done, buf.size() - done);
    if (n <= 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      return ErrnoError("cannot write index file " + tmp, err);
    }
    done += static_cast<size_t>(n);
  }
  fd = UniqueFd();
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoError("cannot rename index file to " + path, err);
  }
  return Status::OK();
}

Status OverwriteIndexSameSize(const std::string& path, const std::string& buf) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError("cannot write the index " + path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) != buf.size()) {
    return IoError("cannot write the index " + path + ": another file took its place");
  }
  for (size_t done = 0; done < buf.size();) {
    const ssize_t n = ::pwrite(fd.get(), buf.data() + done, buf.size() - done, static_cast<off_t>(done));
    if (n <= 0) return ErrnoError("cannot write the index " + path, errno);
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) return ErrnoError("cannot write the index " + path, errno);
  return Status::OK();
}

Result<IndexViewPtr> SaveAndMapIndex(const std::string& cache_path, std::string bytes,
                                     const std::string& root, std::string* origin) {
  if (!cache_path.empty() && WriteIndexFile(cache_path, bytes).ok()) {
    Result<IndexViewPtr> mapped = MapIndexFile(cache_path, root);
    if (mapped.ok()) {
      *origin += "; saved to the index cache: " + cache_path;
      return mapped;
    }
  }
  *origin += "; held in memory";
  return ViewIndexBytes(std::move(bytes), "(in memory)", root, /*checked=*/false);
}

Status SaveIndex(const std::string& path, const Index& index, const std::string& root) {
  return WriteIndexFile(path, SerializeIndex(index, root));
}

Result<IndexViewPtr> LoadIndex(const std::string& path, const std::string& root) {
  return MapIndexFile(path, root);
}


bool StampsStillHold(const IndexView& index, bool portable) {
  for (const auto& s : index.stamps()) {
    UniqueFd fd(::open(s.path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st;
    if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) return false;
    const IndexStamp now = StampOf(s.path, st, s.content != 0 ? fd.get() : -1);
    if (now.mtime_ns != s.mtime_ns || now.content != s.content || (s.size != 0 && now.size != s.size)) {
      return false;
    }
    if (!portable && (now.ctime_ns != s.ctime_ns || now.inode != s.inode)) return false;
  }
  return !index.stamps().empty();
}


}  // namespace nostall
