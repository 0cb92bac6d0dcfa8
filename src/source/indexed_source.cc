// IndexedSource: reads of whole files or spans of shards by index entry, and
// the index cache around building an Index.
#include "source/indexed_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "common/fd.h"

namespace nostall {
namespace {

class IndexedSource final : public IndexSource {
 public:
  IndexedSource(Index index, const char* kind, uint64_t max_item_bytes, bool drop_page_cache)
      : IndexSource(std::move(index)),
        kind_(kind),
        max_item_bytes_(max_item_bytes),
        drop_page_cache_(drop_page_cache) {}
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
  const char* kind_;
  uint64_t max_item_bytes_;
  bool drop_page_cache_;
};

}  // namespace

const std::vector<std::string>& ImageExtensions() {
  // torchvision's IMG_EXTENSIONS (ImageFolder's default), every one decoded.
  static const std::vector<std::string> kExtensions = {"jpg", "jpeg", "png", "ppm", "bmp",
                                                       "pgm", "tif", "tiff", "webp"};
  return kExtensions;
}

std::string FileExtension(const std::string& name) {
  const size_t slash = name.find_last_of('/');
  const size_t dot = name.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string ext = name.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext;
}

bool IsImageExtension(const std::string& ext) {
  std::string lower = ext;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  const auto& all = ImageExtensions();
  return std::find(all.begin(), all.end(), lower) != all.end();
}

bool IsImageFileName(const std::string& name) { return IsImageExtension(FileExtension(name)); }

Result<std::unique_ptr<Source>> OpenIndexed(const char* kind, const std::string& canonical,
                                            const std::function<Result<Index>()>& build,
                                            const SourceOptions& options) {
  const std::string key =
      std::string(kind) + "\n" + canonical + (options.skip_bad_samples ? "skip" : "raise");
  std::string cache_path;
  if (options.use_index_cache) {
    cache_path = IndexCachePath(options.index_cache_dir, key);
    Result<Index> cached = LoadIndex(cache_path);
    if (cached.ok() && StampsStillHold(cached.value())) {
      return std::unique_ptr<Source>(std::make_unique<IndexedSource>(
          std::move(cached).value(), kind, options.max_item_bytes, options.drop_page_cache));
    }
  }
  Result<Index> built = build();
  if (!built.ok()) return built.status();
  if (!cache_path.empty()) {
    // A cache that cannot be written only costs the next run a rebuild.
    (void)SaveIndex(cache_path, built.value());
  }
  return std::unique_ptr<Source>(std::make_unique<IndexedSource>(
      std::move(built).value(), kind, options.max_item_bytes, options.drop_page_cache));
}

}  // namespace nostall
