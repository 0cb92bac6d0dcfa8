#include "source/index_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace nostall {
namespace {

constexpr char kMagic[8] = {'N', 'S', 'T', 'I', 'D', 'X', '0', '1'};
constexpr uint32_t kVersion = 2;

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

Result<Index> LoadIndex(const std::string& path) {
  if (path.empty()) return NotFound("no index cache");
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("no index file " + path);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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
    ok = r.Str(&s.path) && r.I64(&s.mtime_ns) && r.I64(&s.size);
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
    e.shard = static_cast<int32_t>(shard);
    e.offset = off;
    if (ok && (e.shard >= static_cast<int64_t>(idx.shards.size()))) ok = false;
    idx.items.push_back(std::move(e));
  }
  ok = ok && r.I64(&idx.skipped);
  ok = ok && r.Count(&n);
  for (uint64_t i = 0; ok && i < n; ++i) {
    std::pair<std::string, int64_t> e;
    ok = r.Str(&e.first) && r.I64(&e.second);
    idx.left_out.push_back(std::move(e));
  }
  if (!ok) return DataError("corrupt index file: " + path);
  return idx;
}

Status SaveIndex(const std::string& path, const Index& index) {
  if (path.empty()) return Status::OK();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  Writer w;
  w.buf().append(kMagic, 8);
  w.buf().append(reinterpret_cast<const char*>(&kVersion), 4);
  w.U64(index.stamps.size());
  for (const auto& s : index.stamps) {
    w.Str(s.path);
    w.I64(s.mtime_ns);
    w.I64(s.size);
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
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return IoError("cannot write index file " + tmp);
    out.write(w.buf().data(), static_cast<std::streamsize>(w.buf().size()));
    if (!out) return IoError("cannot write index file " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return IoError("cannot rename index file to " + path);
  }
  return Status::OK();
}

bool StampsStillHold(const Index& index) {
  for (const auto& s : index.stamps) {
    struct stat st;
    if (::stat(s.path.c_str(), &st) != 0) return false;
    int64_t mtime = MtimeNs(st);
    if (mtime != s.mtime_ns) return false;
    if (s.size != 0 && st.st_size != s.size) return false;
  }
  return !index.stamps.empty();
}

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace nostall
