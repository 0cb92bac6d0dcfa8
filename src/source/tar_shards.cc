// The WebDataset tar-shards driver: a path ending in .tar, possibly with
// brace ranges or lists ("train-{0000..0099}.tar", "a-{x,y}.tar"). The index
// is one sequential pass over each shard's headers (tar_index.cc); each item
// is the byte span of a sample's image member.
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "common/fd.h"
#include "source/driver.h"
#include "source/indexed_source.h"
#include "source/tar_index.h"

namespace nostall {
namespace {

Status IndexShard(const std::string& path, int32_t shard, bool skip_bad, Index* index) {
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
                       skip_bad, index);
}

Result<Index> BuildTarIndex(const std::vector<std::string>& shards, bool skip_bad) {
  Index index;
  index.shards = shards;
  for (size_t s = 0; s < shards.size(); ++s) {
    NOSTALL_RETURN_IF_ERROR(IndexShard(shards[s], static_cast<int32_t>(s), skip_bad, &index));
  }
  if (index.items.empty()) return NotFound("no samples in the tar shards");
  return index;
}

bool Claims(const std::string& uri) {
  return uri.size() >= 4 && uri.compare(uri.size() - 4, 4, ".tar") == 0;
}

Result<std::unique_ptr<Source>> Open(const std::string& uri, const SourceOptions& options) {
  NOSTALL_ASSIGN_OR_RETURN(std::vector<std::string> shards, ExpandBraces(uri));
  std::string canonical;
  for (auto& s : shards) {
    struct stat st;
    if (::stat(s.c_str(), &st) != 0) return NotFound("tar shard does not exist: " + s);
    s = std::filesystem::absolute(s).lexically_normal().string();
    canonical += s + "\n";
  }
  return OpenIndexed("tar-shards", canonical,
                     [&] { return BuildTarIndex(shards, options.skip_bad_samples); }, options);
}

}  // namespace

Result<std::vector<std::string>> ExpandBraces(const std::string& pattern) {
  size_t open = pattern.find('{');
  if (open == std::string::npos) return std::vector<std::string>{pattern};
  size_t close = pattern.find('}', open);
  if (close == std::string::npos) return InvalidArgument("unclosed '{' in " + pattern);
  std::string body = pattern.substr(open + 1, close - open - 1);
  std::string head = pattern.substr(0, open);
  NOSTALL_ASSIGN_OR_RETURN(std::vector<std::string> tails,
                           ExpandBraces(pattern.substr(close + 1)));
  std::vector<std::string> alts;
  size_t dots = body.find("..");
  if (dots != std::string::npos) {
    std::string a = body.substr(0, dots), b = body.substr(dots + 2);
    char* ea = nullptr;
    char* eb = nullptr;
    long long lo = std::strtoll(a.c_str(), &ea, 10), hi = std::strtoll(b.c_str(), &eb, 10);
    if (a.empty() || b.empty() || *ea || *eb || hi < lo || hi - lo > 10000000) {
      return InvalidArgument("bad brace range {" + body + "} in " + pattern);
    }
    for (long long v = lo; v <= hi; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < a.size()) s.insert(0, a.size() - s.size(), '0');
      alts.push_back(s);
    }
  } else {
    size_t p = 0;
    while (true) {
      size_t comma = body.find(',', p);
      alts.push_back(body.substr(p, comma - p));
      if (comma == std::string::npos) break;
      p = comma + 1;
    }
  }
  std::vector<std::string> out;
  for (const auto& alt : alts) {
    for (const auto& tail : tails) out.push_back(head + alt + tail);
  }
  return out;
}

SourceDriver TarShardsDriver() { return {"tar-shards", Claims, Open, /*local_files=*/true}; }

}  // namespace nostall
