#include "source/index_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <unordered_map>

#include <fcntl.h>

#include "common/fd.h"

namespace nostall {
namespace {

constexpr char kMagic[8] = {'N', 'S', 'T', 'I', 'D', 'X', '0', '1'};
constexpr uint32_t kVersion = 4;

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
  std::string& buf() { return buf_; }

 private:
  std::string buf_;
};

class Reader {
 public:
  explicit Reader(std::string data) : d_(std::move(data)) {}
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

 private:
  std::string d_;
  size_t p_ = 0;
};

}  // namespace

uint64_t Index::Fingerprint() const {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& e : items) {
    h = Fnv(h, e.key.data(), e.key.size());
    h = Fnv(h, &e.label, sizeof e.label);
    h = Fnv(h, &e.offset, sizeof e.offset);
    h = Fnv(h, &e.size, sizeof e.size);
  }
  return h;
}

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

uint64_t HashHeadAndTail(int fd, uint64_t size) {
  constexpr uint64_t kPart = 4096;
  uint8_t buf[kPart];
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t at : {uint64_t{0}, size > kPart ? size - kPart : uint64_t{0}}) {
    const ssize_t n = ::pread(fd, buf, kPart, static_cast<off_t>(at));
    if (n > 0) h = Fnv(h, buf, static_cast<size_t>(n));
  }
  return h | 1;  // never 0, which means "not hashed"
}

}  // namespace

IndexStamp StampOf(const std::string& path, const struct stat& st, int fd) {
  IndexStamp s;
  s.path = path;
  s.mtime_ns = MtimeNs(st);
  s.size = S_ISDIR(st.st_mode) ? 0 : static_cast<int64_t>(st.st_size);
  s.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  s.inode = static_cast<uint64_t>(st.st_ino);
  s.content = fd >= 0 ? HashHeadAndTail(fd, static_cast<uint64_t>(st.st_size)) : 0;
  return s;
}

Result<Index> ParseIndex(const std::string& data, const std::string& path) {
  if (data.size() < 12 || std::memcmp(data.data(), kMagic, 8) != 0) {
    return DataError("not an index file: " + path);
  }
  uint32_t version;
  std::memcpy(&version, data.data() + 8, 4);
  if (version != kVersion) return DataError("index file of another version: " + path);
  Reader r(data.substr(12));
  Index idx;
  uint64_t n;
  bool ok = r.Count(&n);
  for (uint64_t i = 0; ok && i < n; ++i) {
    IndexStamp s;
    ok = r.Str(&s.path) && r.I64(&s.mtime_ns) && r.I64(&s.size) && r.I64(&s.ctime_ns) &&
         r.U64(&s.inode) && r.U64(&s.content);
    idx.stamps.push_back(std::move(s));
  }
  ok = ok && r.Count(&n);
  for (uint64_t i = 0; ok && i < n; ++i) {
    idx.classes.emplace_back();
    ok = r.Str(&idx.classes.back());
  }
  ok = ok && r.Count(&n);
  for (uint64_t i = 0; ok && i < n; ++i) {
    idx.shards.emplace_back();
    ok = r.Str(&idx.shards.back());
  }
  ok = ok && r.Count(&n);
  for (uint64_t i = 0; ok && i < n; ++i) {
    IndexEntry e;
    int64_t shard = 0;
    uint64_t off = 0;
    ok = r.Str(&e.key) && r.I64(&e.label) && r.I64(&shard) && r.U64(&off) && r.I64(&e.size);
    // The shard number is range-checked before it is narrowed.
    ok = ok && shard >= -1 && shard < static_cast<int64_t>(idx.shards.size());
    e.shard = static_cast<int32_t>(ok ? shard : -1);
    e.offset = off;
    idx.items.push_back(std::move(e));
  }
  ok = ok && r.I64(&idx.skipped);
  ok = ok && r.Count(&n);
  for (uint64_t i = 0; ok && i < n; ++i) {
    std::pair<std::string, int64_t> e;
    ok = r.Str(&e.first) && r.I64(&e.second);
    idx.left_out.push_back(std::move(e));
  }
  ok = ok && r.Count(&n);
  for (uint64_t i = 0; ok && i < n; ++i) {
    idx.member_exts.emplace_back();
    ok = r.Str(&idx.member_exts.back());
  }
  ok = ok && r.Count(&n);
  if (ok && n > 0) idx.member_begin.assign(idx.items.size() + 1, 0);
  for (uint64_t i = 0, last = 0; ok && i < n; ++i) {
    uint64_t item = 0, ext = 0;
    IndexMember m{};
    ok = r.U64(&item) && r.U64(&ext) && r.U64(&m.offset) && r.I64(&m.size);
    // Members come in item order, each of an item and an extension there is.
    ok = ok && item >= last && item < idx.items.size() && ext < idx.member_exts.size() &&
         idx.members.size() < UINT32_MAX;
    if (!ok) break;
    m.ext = static_cast<uint32_t>(ext);
    last = item;
    idx.members.push_back(m);
    idx.member_begin[item + 1] = static_cast<uint32_t>(idx.members.size());
  }
  // Items without members begin where the item before them ends.
  for (size_t i = 1; ok && i < idx.member_begin.size(); ++i) {
    idx.member_begin[i] = std::max(idx.member_begin[i], idx.member_begin[i - 1]);
  }
  if (!ok) return DataError("corrupt index file: " + path);
  NOSTALL_RETURN_IF_ERROR(CheckIndex(idx, path));
  return idx;
}

Status CheckIndex(const Index& idx, const std::string& path) {
  auto bad = [&](const std::string& why) { return DataError("inconsistent index file " + path + ": " + why); };
  std::unordered_map<std::string, int64_t> stamped;  // path -> size (0: a directory)
  for (const IndexStamp& s : idx.stamps) stamped[s.path] = s.size;
  const int64_t classes = static_cast<int64_t>(idx.classes.size());
  for (const IndexEntry& e : idx.items) {
    if (e.label < -1 || (classes > 0 && e.label >= classes)) return bad("a label out of range");
    if (idx.shards.empty()) {
      // A folder's items are whole files, each right inside a folder walked.
      if (e.shard != -1) return bad("a member of a shard in a folder's index");
      const size_t slash = e.key.rfind('/');
      if (slash == std::string::npos) return bad("a file outside the folders walked");
      auto it = stamped.find(e.key.substr(0, slash));
      if (it == stamped.end() || it->second != 0) return bad("a file outside the folders walked");
    } else {
      // A shard's items lie inside the shard as it was stamped.
      if (e.shard < 0 || e.shard >= static_cast<int64_t>(idx.shards.size())) {
        return bad("a shard number out of range");
      }
      if (e.size < 0) return bad("a member of negative size");
      auto it = stamped.find(idx.shards[static_cast<size_t>(e.shard)]);
      if (it != stamped.end() &&
          (e.offset > static_cast<uint64_t>(it->second) ||
           static_cast<uint64_t>(e.size) > static_cast<uint64_t>(it->second) - e.offset)) {
        return bad("a member beyond the end of its shard");
      }
    }
  }
  if (idx.members.empty()) return Status::OK();
  if (idx.member_begin.size() != idx.items.size() + 1) return bad("members without their samples");
  for (const std::string& ext : idx.member_exts) {
    // A folder's member is the file STEM.EXT beside its image: EXT names no
    // other directory.
    if (idx.shards.empty() && (ext.empty() || ext.find('/') != std::string::npos)) {
      return bad("a bad member extension");
    }
  }
  for (size_t i = 0; i < idx.items.size(); ++i) {
    const IndexEntry& e = idx.items[i];
    if (idx.shards.empty()) {
      // A folder's members are files beside the image, their sizes not kept.
      for (uint32_t k = idx.member_begin[i]; k < idx.member_begin[i + 1]; ++k) {
        const IndexMember& m = idx.members[k];
        if (m.offset != 0 || m.size != -1 || m.ext >= idx.member_exts.size()) {
          return bad("a bad member");
        }
      }
      continue;
    }
    auto it = stamped.find(idx.shards[static_cast<size_t>(e.shard)]);
    for (uint32_t k = idx.member_begin[i]; k < idx.member_begin[i + 1]; ++k) {
      const IndexMember& m = idx.members[k];
      if (m.size < 0 || m.ext >= idx.member_exts.size()) return bad("a bad member");
      if (it != stamped.end() &&
          (m.offset > static_cast<uint64_t>(it->second) ||
           static_cast<uint64_t>(m.size) > static_cast<uint64_t>(it->second) - m.offset)) {
        return bad("a member beyond the end of its shard");
      }
    }
  }
  return Status::OK();
}

Result<Index> LoadIndex(const std::string& path) {
  if (path.empty()) return NotFound("no index cache");
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) return NotFound("no index file " + path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return NotFound("no index file " + path);
  if (st.st_uid != ::geteuid() || (st.st_mode & 022) != 0) {
    return PermissionDenied("index file " + path + " is owned by uid " + std::to_string(st.st_uid) +
                            " with mode " + ModeText(st.st_mode) + ": not this user's own, ignored");
  }
  if (st.st_size > (off_t{1} << 36)) return DataError("index file " + path + " is absurdly large");
  std::string data(static_cast<size_t>(st.st_size), '\0');
  NOSTALL_RETURN_IF_ERROR(PreadExact(fd.get(), 0, data.size(), reinterpret_cast<uint8_t*>(data.data())));
  return ParseIndex(data, path);
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

Status SaveIndex(const std::string& path, const Index& index) {
  if (path.empty()) return Status::OK();
  MakePrivateDirs(std::filesystem::path(path).parent_path());
  Writer w;
  w.buf().append(kMagic, 8);
  w.buf().append(reinterpret_cast<const char*>(&kVersion), 4);
  w.U64(index.stamps.size());
  for (const auto& s : index.stamps) {
    w.Str(s.path);
    w.I64(s.mtime_ns);
    w.I64(s.size);
    w.I64(s.ctime_ns);
    w.U64(s.inode);
    w.U64(s.content);
  }
  w.U64(index.classes.size());
  for (const auto& c : index.classes) w.Str(c);
  w.U64(index.shards.size());
  for (const auto& s : index.shards) w.Str(s);
  w.U64(index.items.size());
  for (const auto& e : index.items) {
    w.Str(e.key);
    w.I64(e.label);
    w.I64(e.shard);
    w.U64(e.offset);
    w.I64(e.size);
  }
  w.I64(index.skipped);
  w.U64(index.left_out.size());
  for (const auto& [ext, count] : index.left_out) {
    w.Str(ext);
    w.I64(count);
  }
  w.U64(index.member_exts.size());
  for (const auto& e : index.member_exts) w.Str(e);
  w.U64(index.members.size());
  for (size_t i = 0; i + 1 < index.member_begin.size(); ++i) {
    for (uint32_t k = index.member_begin[i]; k < index.member_begin[i + 1]; ++k) {
      const IndexMember& m = index.members[k];
      w.U64(i);
      w.U64(m.ext);
      w.U64(m.offset);
      w.I64(m.size);
    }
  }
  // A fresh file of our own: never one planted under the name, never
  // through a symlink.
  std::random_device rd;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rd());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.get() < 0) return ErrnoError("cannot write index file " + tmp, errno);
  const std::string& buf = w.buf();
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
    ::unlink(tmp.c_str());
    return IoError("cannot rename index file to " + path);
  }
  return Status::OK();
}

bool StampsStillHold(const Index& index) {
  for (const auto& s : index.stamps) {
    UniqueFd fd(::open(s.path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st;
    if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) return false;
    const IndexStamp now = StampOf(s.path, st, s.content != 0 ? fd.get() : -1);
    if (now.mtime_ns != s.mtime_ns || now.ctime_ns != s.ctime_ns || now.inode != s.inode ||
        now.content != s.content || (s.size != 0 && now.size != s.size)) {
      return false;
    }
  }
  return !index.stamps.empty();
}

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace nostall
