// The WebDataset tar-shards driver: a path ending in .tar, possibly with
// brace ranges or lists ("train-{0000..0099}.tar", "a-{x,y}.tar"). The index
// is one sequential pass over each shard's headers (tar_index.cc); each item
// is the byte span of a sample's image member.
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <algorithm>

#include "common/fd.h"
#include "source/driver.h"
#include "source/local_options.h"
#include "source/index/index_progress.h"
#include "source/index/indexed_source.h"
#include "source/index/tar_index.h"

namespace nostall {
namespace {

Status IndexShard(const std::string& path, int32_t shard, const TarIndexOptions& options,
                  Index* index) {
  Result<UniqueFd> opened = OpenReadOnly(path);
  if (!opened.ok()) return opened.status().WithItem(path, "index");
  UniqueFd fd = std::move(opened).value();
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("cannot stat " + path, errno);
  uint64_t file_size = static_cast<uint64_t>(st.st_size);
  index->stamps.push_back(StampOf(path, st, fd.get()));
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  const int raw = fd.get();
  return IndexTarShard(path, shard, file_size,
                       [raw](uint64_t offset, size_t size, uint8_t* out) {
                         return PreadExact(raw, offset, size, out);
                       },
                       options, index);
}

// Shards indexed at once: their headers are read with many small reads,
// which a network file system or an SSD serves better several at a time,
// and parsed on as many cores (more threads than cores only contend).
int ShardsAtOnce() {
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 2u, 8u));
}

Result<Index> BuildTarIndex(const std::string& uri, const std::vector<std::string>& shards,
                            const TarIndexOptions& options) {
  Index index;
  index.shards = shards;
  IndexProgress progress(uri, "shards", static_cast<int64_t>(shards.size()));
  NOSTALL_RETURN_IF_ERROR(IndexShardsInParallel(
      shards.size(), ShardsAtOnce(),
      [&](size_t s, Index* part) {
        return IndexShard(shards[s], static_cast<int32_t>(s), options, part);
      },
      [&](size_t, const Index& part) {
        progress.Done(static_cast<uint64_t>(part.stamps.empty() ? 0 : part.stamps.back().size),
                      static_cast<int64_t>(part.items.size()));
      },
      &index));
  if (index.items.empty()) return NotFound("no samples in the tar shards");
  return index;
}

bool TarShardsClaims(const std::string& uri) {
  return uri.size() >= 4 && uri.compare(uri.size() - 4, 4, ".tar") == 0;
}

Result<std::unique_ptr<Source>> TarShardsOpen(const std::string& uri, const SourceOptions& options) {
  NOSTALL_ASSIGN_OR_RETURN(std::vector<std::string> shards, ExpandBraces(uri));
  std::string canonical;
  for (auto& s : shards) {
    struct stat st;
    if (::stat(s.c_str(), &st) != 0) return NotFound("tar shard does not exist: " + s);
    s = std::filesystem::absolute(s).lexically_normal().string();
    canonical += s + "\n";
  }
  // Paths in the index are kept relative to the first shard's folder, and
  // the index beside them is there, named for the pattern (when every shard
  // is in that folder).
  const std::string root = std::filesystem::path(shards.front()).parent_path().string();
  std::string beside;
  bool one_folder = true;
  for (const std::string& s : shards) {
    one_folder = one_folder && std::filesystem::path(s).parent_path().string() == root;
  }
  if (one_folder) beside = root + "/" + std::filesystem::path(uri).filename().string() + kIndexBesideSuffix;
  IndexedDataset d{"tar-shards", canonical, root, beside, IndexVariant(options),
                   [&] { return BuildTarIndex(uri, shards, TarOptionsOf(options)); }};
  d.index_one = [shards, options = TarOptionsOf(options)](size_t s, Index* part) {
    return IndexShard(shards[s], static_cast<int32_t>(s), options, part);
  };
  d.header.shards = shards;
  return OpenIndexed(d, options);
}

}  // namespace

Result<std::vector<std::string>> ExpandBraces(const std::string& pattern) {
  // The pattern as literal text and brace groups, each group's alternatives
  // listed once (no recursion, no copies of the rest per group); the
  // expansion's size is known before any of it is built.
  constexpr uint64_t kMaxShards = 10000000;
  std::vector<std::string> literals(1);
  std::vector<std::vector<std::string>> groups;
  uint64_t total = 1;
  for (size_t at = 0; at < pattern.size();) {
    const size_t open = pattern.find('{', at);
    if (open == std::string::npos) {
      literals.back() += pattern.substr(at);
      break;
    }
    literals.back() += pattern.substr(at, open - at);
    const size_t close = pattern.find('}', open);
    if (close == std::string::npos) return InvalidArgument("unclosed '{' in " + pattern.substr(0, 200));
    const std::string body = pattern.substr(open + 1, close - open - 1);
    std::vector<std::string> alts;
    const size_t dots = body.find("..");
    if (dots != std::string::npos) {
      const std::string a = body.substr(0, dots), b = body.substr(dots + 2);
      char* ea = nullptr;
      char* eb = nullptr;
      const long long lo = std::strtoll(a.c_str(), &ea, 10), hi = std::strtoll(b.c_str(), &eb, 10);
      if (a.empty() || b.empty() || *ea || *eb || hi < lo ||
          static_cast<uint64_t>(hi - lo) >= kMaxShards) {
        return InvalidArgument("bad brace range {" + body.substr(0, 60) + "} in " + pattern.substr(0, 200));
      }
      if (total * static_cast<uint64_t>(hi - lo + 1) > kMaxShards) {
        return InvalidArgument("the pattern " + pattern.substr(0, 200) + " names over " +
                               std::to_string(kMaxShards) + " shards");
      }
      for (long long v = lo; v <= hi; ++v) {
        std::string t = std::to_string(v);
        if (t.size() < a.size()) t.insert(0, a.size() - t.size(), '0');
        alts.push_back(std::move(t));
      }
    } else {
      for (size_t p = 0;;) {
        const size_t comma = body.find(',', p);
        alts.push_back(body.substr(p, comma == std::string::npos ? std::string::npos : comma - p));
        if (comma == std::string::npos) break;
        p = comma + 1;
      }
      if (total * alts.size() > kMaxShards) {
        return InvalidArgument("the pattern " + pattern.substr(0, 200) + " names over " +
                               std::to_string(kMaxShards) + " shards");
      }
    }
    total *= alts.size();
    if (alts.size() == 1) {
      literals.back() += alts[0];  // "{}" or "{a}": no choice, just text
    } else {
      groups.push_back(std::move(alts));
      literals.emplace_back();
    }
    at = close + 1;
  }
  // An odometer over the groups, the last turning fastest (the order the
  // recursive expansion gave: head alternatives outermost).
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(total));
  std::vector<size_t> pick(groups.size(), 0);
  while (true) {
    std::string name = literals[0];
    for (size_t g = 0; g < groups.size(); ++g) name += groups[g][pick[g]] + literals[g + 1];
    out.push_back(std::move(name));
    size_t g = groups.size();
    while (g > 0 && ++pick[g - 1] == groups[g - 1].size()) pick[--g] = 0;
    if (g == 0) break;
  }
  return out;
}

SourceDriver TarShardsDriver() { return {"tar-shards", TarShardsClaims, TarShardsOpen, ResolveTarShardsOptions}; }

}  // namespace nostall
