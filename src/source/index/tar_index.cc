#include "source/index/tar_index.h"
#include "source/index/indexed_source.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

namespace nostall {
namespace {

// An octal (or GNU base-256) number field; `*ok` false when it is not one.
// A base-256 value that does not fit 63 bits (or is negative) is refused.
uint64_t ParseNumber(const char* p, size_t n, bool* ok) {
  if (static_cast<unsigned char>(p[0]) & 0x80) {  // GNU base-256
    if (static_cast<unsigned char>(p[0]) & 0x40) {  // negative
      *ok = false;
      return 0;
    }
    uint64_t v = static_cast<unsigned char>(p[0]) & 0x3f;
    for (size_t i = 1; i < n; ++i) {
      if (v > (UINT64_MAX >> 9)) {  // would pass 2^63
        *ok = false;
        return 0;
      }
      v = (v << 8) | static_cast<unsigned char>(p[i]);
    }
    return v;
  }
  uint64_t v = 0;
  size_t i = 0;
  while (i < n && p[i] == ' ') ++i;
  bool any = false;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) {
    v = v * 8 + static_cast<uint64_t>(p[i] - '0');  // at most 12 digits: no overflow
    any = true;
  }
  for (; i < n; ++i) {
    if (p[i] != ' ' && p[i] != '\0') *ok = false;
  }
  if (!any) *ok = false;
  return v;
}

bool ChecksumOk(const uint8_t* h) {
  bool ok = true;
  uint64_t want = ParseNumber(reinterpret_cast<const char*>(h) + 148, 8, &ok);
  if (!ok) return false;
  uint64_t sum = 0;
  for (int i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? ' ' : h[i];
  return sum == want;
}

// `p` may be null when `n` is 0 (an empty GNU long-name member).
std::string CString(const uint8_t* p, size_t n) {
  if (n == 0) return std::string();
  const char* c = reinterpret_cast<const char*>(p);
  return std::string(c, strnlen(c, n));
}


struct PendingSample {
  std::string key;
  bool has_image = false;
  uint64_t offset = 0;
  int64_t size = 0;
  std::string member;
  bool has_label = false;
  int64_t label = -1;
  std::string label_error;
  std::vector<std::pair<std::string, IndexMember>> others;  // (extension, where)
};

uint32_t ExtId(const std::string& ext, Index* index) {
  auto& exts = index->member_exts;
  auto it = std::find(exts.begin(), exts.end(), ext);
  if (it != exts.end()) return static_cast<uint32_t>(it - exts.begin());
  exts.push_back(ext);
  return static_cast<uint32_t>(exts.size() - 1);
}

Status FlushSample(const std::string& shard_path, int32_t shard, PendingSample* s,
                   const TarIndexOptions& options, Index* index) {
  if (s->key.empty()) return Status::OK();
  std::string why;
  if (!s->has_image) {
    why = options.media == Media::kAudio   ? "sample has no audio member (.wav, .flac, .mp3, .ogg, .opus)"
          : options.media == Media::kVideo ? "sample has no video member (.mp4, .mkv, .webm, .avi, .mov)"
                                           : "sample has no image member (.jpg, .png, .webp, .tif, .bmp, .ppm, ...)";
  }
  else if (options.need_label && !s->label_error.empty()) why = s->label_error;
  else if (options.need_label && !s->has_label) why = "sample has no .cls label member";
  if (!why.empty()) {
    if (!options.skip_bad) {
      return DataError(why).WithItem(shard_path + ":" + s->key, "index");
    }
    ++index->skipped;
  } else {
    if (!s->others.empty() && index->member_begin.empty()) {
      index->member_begin.assign(index->items.size() + 1, 0);  // no member before this one
    }
    index->items.push_back({shard_path + ":" + s->member, s->has_label ? s->label : -1, shard,
                            s->offset, s->size});
    if (!index->member_begin.empty()) {
      for (auto& [ext, m] : s->others) {
        m.ext = ExtId(ext, index);
        index->members.push_back(m);
      }
      index->member_begin.push_back(static_cast<uint32_t>(index->members.size()));
    }
  }
  *s = PendingSample();
  return Status::OK();
}

// A `.cls` member's text: a non-negative decimal integer below 2^31 (the
// index keeps labels as int32), with surrounding white space.
void ParseLabel(const char* text, PendingSample* s) {
  const char* p = text;
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') ++p;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(p, &end, 10);
  const bool range = errno == ERANGE || v > INT32_MAX;
  while (end && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')) ++end;
  if (end == p || *end != '\0' || v < 0 || *p == '-' || *p == '+') {
    s->label_error = "bad .cls label member '" + Printable(text) +
                     "' (expected a non-negative integer)";
  } else if (range) {
    s->label_error = "bad .cls label member '" + Printable(text) +
                     "' (out of range: a label must be below 2^31)";
  } else {
    s->label = v;
    s->has_label = true;
  }
}

// pax extended-header records: "<len> key=value\n" each, `len` counting the
// whole record. Returns the `path` value, if any; a malformed record ends
// the parse (what came before it stands).
std::string PaxPath(const std::string& recs) {
  std::string path;
  size_t p = 0;
  while (p < recs.size()) {
    const size_t sp = recs.find(' ', p);
    if (sp == std::string::npos || sp == p || sp - p > 20) break;
    uint64_t len = 0;
    bool digits = true;
    for (size_t i = p; i < sp; ++i) {
      if (recs[i] < '0' || recs[i] > '9') digits = false;
      else len = len * 10 + static_cast<uint64_t>(recs[i] - '0');
    }
    // The record holds its length, the space, at least "k=" and the newline.
    if (!digits || len > recs.size() - p || len < sp - p + 2) break;
    const size_t end = p + len;  // one past the record's '\n'
    if (recs[end - 1] != '\n') break;
    std::string rec = recs.substr(sp + 1, end - sp - 2);
    if (rec.rfind("path=", 0) == 0) path = rec.substr(5);
    p = end;
  }
  return path;
}

}  // namespace

std::string Printable(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

void SplitMemberName(const std::string& path, std::string* key, std::string* ext) {
  size_t slash = path.rfind('/');
  size_t base = slash == std::string::npos ? 0 : slash + 1;
  size_t dot = path.find('.', base);
  if (dot == std::string::npos) {
    *key = path;
    ext->clear();
  } else {
    *key = path.substr(0, dot);
    *ext = path.substr(dot + 1);
    std::transform(ext->begin(), ext->end(), ext->begin(),
                   [](unsigned char c) { return std::tolower(c); });
  }
}

namespace {

// A header's member name: ustar's prefix, a slash, its name.
std::string HeaderName(const uint8_t h[512]) {
  std::string name = CString(h, 100);
  if (std::memcmp(h + 257, "ustar", 5) == 0 && h[345] != 0) name = CString(h + 345, 155) + "/" + name;
  return name;
}

// A regular member (`size` bytes at `data`) of the sample `pending` is
// gathering: its label (.cls), its media file, or another extension's.
Status AddMember(const std::string& name, const std::string& ext, uint64_t data, uint64_t size,
                 const ReadAt& read, const TarIndexOptions& options, PendingSample* pending) {
  if (ext == "cls") {
    char buf[32] = {};
    if (size == 0 || size >= sizeof(buf)) {
      pending->label_error = "bad .cls label member (empty or too long)";
      return Status::OK();
    }
    NOSTALL_RETURN_IF_ERROR(read(data, size, reinterpret_cast<uint8_t*>(buf)));
    if (std::memchr(buf, '\0', size) != nullptr) {
      pending->label_error = "bad .cls label member (holds a NUL byte)";
    } else {
      ParseLabel(buf, pending);
    }
  } else if (IsMediaExtension(ext, options.media) && !pending->has_image) {
    pending->has_image = true;
    pending->offset = data;
    pending->size = static_cast<int64_t>(size);
    pending->member = name;
  } else if (!ext.empty() && pending->others.size() < 64 &&
             std::none_of(pending->others.begin(), pending->others.end(),
                          [&](const auto& o) { return o.first == ext; })) {
    // The first member of each other extension (64 at most a sample).
    pending->others.push_back({ext, IndexMember{0, data, static_cast<int64_t>(size)}});
  }
  return Status::OK();
}

}  // namespace

Status IndexTarShard(const std::string& path, int32_t shard, uint64_t file_size,
                     const ReadAt& read, const TarIndexOptions& options, Index* index) {
  PendingSample pending;
  std::string long_name;  // from a GNU 'L' or pax 'x' record, for the next member
  uint64_t pos = 0;
  uint8_t h[512];
  auto bad = [&](const std::string& why) {
    return DataError(why + " at byte " + std::to_string(pos)).WithItem(path, "index");
  };
  while (true) {
    // pos <= file_size holds here: it only ever advances within the file.
    if (file_size - pos < 512) {
      if (pos == file_size) break;  // no end-of-archive blocks: accept, like tar
      return bad("truncated tar header");
    }
    NOSTALL_RETURN_IF_ERROR(read(pos, 512, h));
    bool zero = std::all_of(h, h + 512, [](uint8_t b) { return b == 0; });
    if (zero) break;  // end of archive
    if (!ChecksumOk(h)) return bad("bad tar header checksum (not a tar file, or corrupt)");
    bool ok = true;
    const uint64_t size = ParseNumber(reinterpret_cast<const char*>(h) + 124, 12, &ok);
    if (!ok) return bad("bad size field in tar header");
    const uint64_t data = pos + 512;
    if (size > file_size - data) return bad("tar member runs past the end of the shard");
    const char type = static_cast<char>(h[156]);
    std::string name = long_name.empty() ? HeaderName(h) : std::move(long_name);
    long_name.clear();
    if (type == 'L' || type == 'x') {
      if (size > (1u << 20)) return bad("oversized tar extended header");
      std::vector<uint8_t> buf(size);
      if (size > 0) NOSTALL_RETURN_IF_ERROR(read(data, size, buf.data()));
      if (type == 'L') {
        long_name = CString(buf.data(), buf.size());
      } else {
        long_name = PaxPath(std::string(buf.begin(), buf.end()));
      }
    } else if (type == '0' || type == '\0') {
      std::string key, ext;
      SplitMemberName(name, &key, &ext);
      if (key != pending.key) {
        NOSTALL_RETURN_IF_ERROR(FlushSample(path, shard, &pending, options, index));
        pending.key = key;
      }
      NOSTALL_RETURN_IF_ERROR(AddMember(name, ext, data, size, read, options, &pending));
    }
    // size <= file_size - data, so this neither wraps nor passes the end by
    // more than the padding; the check at the top of the loop sees the rest.
    const uint64_t padded = size + (512 - size % 512) % 512;
    if (padded > file_size - data) {
      pos = file_size;
    } else {
      pos = data + padded;
    }
  }
  return FlushSample(path, shard, &pending, options, index);
}

void AppendIndex(Index part, Index* into) {
  std::vector<uint32_t> ext(part.member_exts.size());
  for (size_t k = 0; k < part.member_exts.size(); ++k) {
    auto& all = into->member_exts;
    auto it = std::find(all.begin(), all.end(), part.member_exts[k]);
    ext[k] = static_cast<uint32_t>(it - all.begin());
    if (it == all.end()) all.push_back(part.member_exts[k]);
  }
  if (!part.members.empty() && into->member_begin.empty()) {
    into->member_begin.assign(into->items.size() + 1, 0);  // no member before these
  }
  for (size_t i = 0; i < part.items.size(); ++i) {
    into->items.push_back(std::move(part.items[i]));
    if (into->member_begin.empty()) continue;
    if (!part.members.empty()) {
      for (uint32_t k = part.member_begin[i]; k < part.member_begin[i + 1]; ++k) {
        IndexMember m = part.members[k];
        m.ext = ext[m.ext];
        into->members.push_back(m);
      }
    }
    into->member_begin.push_back(static_cast<uint32_t>(into->members.size()));
  }
  into->skipped += part.skipped;
  for (IndexStamp& s : part.stamps) into->stamps.push_back(std::move(s));
}

Status IndexShardsInParallel(size_t n, int threads,
                             const std::function<Status(size_t, Index*)>& index_one,
                             const std::function<void(size_t, const Index&)>& done, Index* into) {
  // Each shard's part is appended as soon as every shard before it is: the
  // parts waiting are the few indexed ahead, not all of them.
  std::vector<Index> parts(n);
  std::vector<char> ready(n, 0);
  std::mutex mu;
  size_t appended = 0;  // guarded by mu
  Status error;         // the first error by shard, guarded by mu
  size_t error_at = n;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto worker = [&] {
    for (size_t s; !failed.load() && (s = next.fetch_add(1)) < n;) {
      Index part;
      Status st = index_one(s, &part);
      if (st.ok()) done(s, part);
      std::lock_guard<std::mutex> lock(mu);
      if (!st.ok()) {
        failed.store(true);
        if (s < error_at) {
          error_at = s;
          error = std::move(st);
        }
        continue;
      }
      parts[s] = std::move(part);
      ready[s] = 1;
      while (appended < n && ready[appended] && appended < error_at) {
        AppendIndex(std::move(parts[appended]), into);
        parts[appended] = Index{};
        ++appended;
      }
    }
  };
  std::vector<std::thread> pool;
  // Fewer threads than asked (a process at its thread limit) is slower, not
  // an error: this thread indexes too.
  try {
    for (int t = 1; t < threads && static_cast<size_t>(t) < n; ++t) pool.emplace_back(worker);
  } catch (const std::system_error&) {
  }
  worker();
  for (auto& t : pool) t.join();
  return error;
}

}  // namespace nostall
