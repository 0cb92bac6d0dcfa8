// Image-folder and WebDataset-tar sources over one shared index type.
//
// Both kinds reduce to an index of entries (key, label, shard, offset, size):
// an image-folder entry is a whole file, a tar entry a byte span inside a
// shard. The index is built once (a directory walk, or one sequential pass
// over each shard's headers) and saved, then reused while the stamps it
// recorded (directory and shard mtimes and sizes) still hold.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "common/fd.h"
#include "nostall/source.h"
#include "source/index_file.h"
#include "source/tar_index.h"

namespace nostall {
namespace {

bool HasImageExtension(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  for (const char* ext : {".jpg", ".jpeg", ".png"}) {
    size_t n = std::strlen(ext);
    if (lower.size() >= n && lower.compare(lower.size() - n, n, ext) == 0) return true;
  }
  return false;
}

class IndexedSource final : public Source {
 public:
  IndexedSource(Index index, const char* kind, uint64_t max_item_bytes, bool drop_page_cache)
      : index_(std::move(index)),
        kind_(kind),
        max_item_bytes_(max_item_bytes),
        drop_page_cache_(drop_page_cache) {
    fingerprint_ = index_.Fingerprint();
  }
  int64_t size() const override { return static_cast<int64_t>(index_.items.size()); }
  const std::string& key(int64_t i) const override { return index_.items[i].key; }
  int64_t label(int64_t i) const override { return index_.items[i].label; }
  int64_t byte_size(int64_t i) const override { return index_.items[i].size; }
  const std::vector<std::string>& classes() const override { return index_.classes; }
  uint64_t fingerprint() const override { return fingerprint_; }
  int64_t skipped_at_index() const override { return index_.skipped; }
  const char* kind() const override { return kind_; }

  Status Evict(int64_t i) const override {
    const IndexEntry& e = index_.items[i];
    if (e.shard < 0) return DropFromPageCache(e.key);
    return DropFromPageCache(index_.shards[e.shard], static_cast<uint64_t>(e.offset),
                             static_cast<uint64_t>(e.size));
  }

  Status Read(int64_t i, std::vector<uint8_t>* out) const override {
    const IndexEntry& e = index_.items[i];
    if (e.shard < 0) return ReadWholeFile(e.key, max_item_bytes_, out, drop_page_cache_);
    if (static_cast<uint64_t>(e.size) > max_item_bytes_) {
      return DataError("member is over the item size limit");
    }
    NOSTALL_ASSIGN_OR_RETURN(UniqueFd fd, OpenReadOnly(index_.shards[e.shard]));
    out->resize(static_cast<size_t>(e.size));
    Status st = PreadExact(fd.get(), e.offset, out->size(), out->data());
    if (drop_page_cache_) {
      ::posix_fadvise(fd.get(), static_cast<off_t>(e.offset), e.size, POSIX_FADV_DONTNEED);
    }
    return st;
  }

 private:
  Index index_;
  const char* kind_;
  uint64_t max_item_bytes_;
  bool drop_page_cache_;
  uint64_t fingerprint_;
};

// ---------------------------------------------------------------- folders

struct WalkState {
  // Directories already walked, and the dataset's root and class folders:
  // each is walked once, as itself, so a symlink back up the tree (a loop)
  // or into another class is not followed and nothing is counted twice.
  std::set<std::pair<dev_t, ino_t>> seen;
  std::vector<IndexStamp>* stamps;
};

// Collects (dir, file) pairs under `dir`, following symlinks like os.walk
// with followlinks=True, but into no directory walked already (or reserved:
// the root and the class folders). `top`: `dir` is a class folder itself.
Status Walk(const std::string& dir, bool top, WalkState* ws,
            std::vector<std::pair<std::string, std::string>>* files) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return ErrnoError("cannot stat " + dir, errno);
  if (!ws->seen.insert({st.st_dev, st.st_ino}).second && !top) return Status::OK();
  ws->stamps->push_back({dir, static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 +
                                  st.st_mtim.tv_nsec,
                         0});
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoError("cannot list " + dir, errno);
  std::vector<std::string> subdirs;
  while (dirent* ent = ::readdir(d)) {
    std::string name = ent->d_name;
    if (name == "." || name == "..") continue;
    std::string path = dir + "/" + name;
    bool is_dir = ent->d_type == DT_DIR;
    if (ent->d_type == DT_LNK || ent->d_type == DT_UNKNOWN) {
      struct stat lst;
      is_dir = ::stat(path.c_str(), &lst) == 0 && S_ISDIR(lst.st_mode);
    }
    if (is_dir) {
      subdirs.push_back(path);
    } else if (HasImageExtension(name)) {
      files->emplace_back(dir, name);
    }
  }
  ::closedir(d);
  for (const std::string& sub : subdirs) NOSTALL_RETURN_IF_ERROR(Walk(sub, false, ws, files));
  return Status::OK();
}

Result<Index> BuildFolderIndex(const std::string& root) {
  Index index;
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) return ErrnoError("cannot list dataset folder " + root, errno);
  while (dirent* ent = ::readdir(d)) {
    std::string name = ent->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (::stat((root + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      index.classes.push_back(name);
    }
  }
  ::closedir(d);
  // Byte order, as Python's sorted() orders str (torchvision's find_classes).
  std::sort(index.classes.begin(), index.classes.end());
  if (index.classes.empty()) {
    return NotFound("no class folders in " + root +
                    " (expected one subfolder per class, as torchvision's ImageFolder)");
  }
  struct stat rst;
  ::stat(root.c_str(), &rst);
  index.stamps.push_back(
      {root, static_cast<int64_t>(rst.st_mtim.tv_sec) * 1000000000 + rst.st_mtim.tv_nsec, 0});
  WalkState ws{{}, &index.stamps};
  ws.seen.insert({rst.st_dev, rst.st_ino});
  for (const std::string& cls : index.classes) {
    struct stat cst;
    if (::stat((root + "/" + cls).c_str(), &cst) == 0) ws.seen.insert({cst.st_dev, cst.st_ino});
  }
  for (size_t c = 0; c < index.classes.size(); ++c) {
    std::vector<std::pair<std::string, std::string>> files;
    NOSTALL_RETURN_IF_ERROR(Walk(root + "/" + index.classes[c], /*top=*/true, &ws, &files));
    if (files.empty()) {
      return NotFound("class folder " + root + "/" + index.classes[c] +
                      " has no .jpg/.jpeg/.png file");
    }
    std::sort(files.begin(), files.end());
    for (auto& [dir, name] : files) {
      index.items.push_back({dir + "/" + name, static_cast<int64_t>(c), -1, 0, -1});
    }
  }
  return index;
}

// ---------------------------------------------------------------- tar

Status IndexShard(const std::string& path, int32_t shard, bool skip_bad, Index* index) {
  Result<UniqueFd> opened = OpenReadOnly(path);
  if (!opened.ok()) return opened.status().WithItem(path, "index");
  UniqueFd fd = std::move(opened).value();
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("cannot stat " + path, errno);
  uint64_t file_size = static_cast<uint64_t>(st.st_size);
  index->stamps.push_back(
      {path, static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
       static_cast<int64_t>(file_size)});
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

namespace {
Result<std::unique_ptr<Source>> OpenUnthrottled(const std::string& uri,
                                                const SourceOptions& options) {
  if (uri.empty()) return InvalidArgument("empty dataset path");
  std::string dir_uri = uri;
  while (dir_uri.size() > 1 && dir_uri.back() == '/') dir_uri.pop_back();
  struct stat st;
  bool is_dir = ::stat(dir_uri.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  bool is_tar = !is_dir && uri.size() >= 4 && uri.compare(uri.size() - 4, 4, ".tar") == 0;
  if (!is_dir && !is_tar) {
    if (::stat(uri.c_str(), &st) != 0) return NotFound("dataset path does not exist: " + uri);
    return InvalidArgument("unsupported dataset " + uri +
                           ": expected an image folder or .tar shards");
  }
  std::string kind = is_dir ? "image-folder" : "tar-shards";
  std::vector<std::string> shards;
  std::string canonical, root;
  if (is_dir) {
    root = std::filesystem::absolute(dir_uri).lexically_normal().string();
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    canonical = root;
  } else {
    NOSTALL_ASSIGN_OR_RETURN(shards, ExpandBraces(uri));
    for (auto& s : shards) {
      if (::stat(s.c_str(), &st) != 0) return NotFound("tar shard does not exist: " + s);
      s = std::filesystem::absolute(s).lexically_normal().string();
      canonical += s + "\n";
    }
  }
  canonical = kind + "\n" + canonical + (options.skip_bad_samples ? "skip" : "raise");
  std::string cache_path;
  if (options.use_index_cache) {
    cache_path = IndexCachePath(options.index_cache_dir, canonical);
    Result<Index> cached = LoadIndex(cache_path);
    if (cached.ok() && StampsStillHold(cached.value())) {
      return std::unique_ptr<Source>(std::make_unique<IndexedSource>(
          std::move(cached).value(), is_dir ? "image-folder" : "tar-shards",
          options.max_item_bytes, options.drop_page_cache));
    }
  }
  Result<Index> built = is_dir ? BuildFolderIndex(root)
                               : BuildTarIndex(shards, options.skip_bad_samples);
  if (!built.ok()) return built.status();
  if (!cache_path.empty()) {
    // A cache that cannot be written only costs the next run a rebuild.
    (void)SaveIndex(cache_path, built.value());
  }
  return std::unique_ptr<Source>(std::make_unique<IndexedSource>(
      std::move(built).value(), is_dir ? "image-folder" : "tar-shards",
      options.max_item_bytes, options.drop_page_cache));
}

}  // namespace

Result<std::unique_ptr<Source>> OpenSource(const std::string& uri, const SourceOptions& options) {
  if (options.throttle_bytes_per_second < 0 || options.throttle_latency_ms < 0) {
    return InvalidArgument("storage throttle values must be >= 0");
  }
  NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<Source> source, OpenUnthrottled(uri, options));
  if (options.throttle_bytes_per_second > 0 || options.throttle_latency_ms > 0) {
    source = ThrottleSource(std::move(source), options.throttle_bytes_per_second,
                            options.throttle_latency_ms);
  }
  return source;
}

}  // namespace nostall
