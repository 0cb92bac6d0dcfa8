// The S3 tar-shards driver: s3://BUCKET/shards/train-{0000..1023}.tar, as
// WebDataset shards. The shards' sizes and ETags come from one listing of
// their prefix; each shard is indexed in one sequential pass over its
// headers (tar_index.cc), read through 4 MiB ranged GETs; the index is kept
// in the local index cache under a name made of every shard's key, ETag and
// size, so it is reused exactly while the objects are unchanged. Each item
// is one ranged GET of its member's bytes.
#include <algorithm>
#include <cstdlib>
#include <map>

#include "source/driver.h"
#include "source/s3_source.h"
#include "source/tar_index.h"

namespace nostall {
namespace {

constexpr uint64_t kWindow = 4 << 20;

class S3TarSource final : public S3Source {
 public:
  S3TarSource(std::unique_ptr<S3Client> client, std::string bucket, std::vector<std::string> keys,
              IndexViewPtr index, RecordTable records, uint64_t max_item_bytes)
      : S3Source(std::move(client), std::move(bucket), std::move(index), std::move(records), max_item_bytes),
        keys_(std::move(keys)) {}

  const char* kind() const override { return "s3-tar-shards"; }

 private:
  Result<Span> Where(int64_t i) const override {
    const ItemWhere w = IndexSource::Where(i);
    if (static_cast<uint64_t>(w.size) > max_item_bytes_) {
      return DataError("member is over the item size limit");
    }
    return Span{keys_[static_cast<size_t>(w.container)], w.offset, w.size};
  }
  const std::vector<std::string> keys_;  // per shard
};

// Reads a shard front to back through ranged GETs of kWindow bytes: the
// indexer's small sequential reads are served from the current window.
class WindowReader {
 public:
  WindowReader(S3Client* client, std::string bucket, std::string key, uint64_t size)
      : client_(client), bucket_(std::move(bucket)), key_(std::move(key)), size_(size) {}
  Status Read(uint64_t offset, size_t n, uint8_t* out) {
    if (offset > size_ || n > size_ - offset) return DataError("read past the end of the shard");
    while (n > 0) {
      if (offset < start_ || offset >= start_ + window_.size()) {
        start_ = offset;
        const uint64_t len = std::min<uint64_t>(std::max<uint64_t>(kWindow, n), size_ - offset);
        NOSTALL_RETURN_IF_ERROR(client_->Get(bucket_, key_, offset, static_cast<int64_t>(len), &window_));
      }
      const size_t take = std::min<size_t>(n, start_ + window_.size() - offset);
      std::copy_n(window_.data() + (offset - start_), take, out);
      out += take;
      offset += take;
      n -= take;
    }
    return Status::OK();
  }

 private:
  S3Client* client_;
  const std::string bucket_, key_;
  const uint64_t size_;
  uint64_t start_ = 0;
  std::vector<uint8_t> window_;
};

bool Claims(const std::string& uri) {
  return uri.rfind("s3://", 0) == 0 && uri.size() >= 4 && uri.compare(uri.size() - 4, 4, ".tar") == 0;
}

Result<std::unique_ptr<Source>> Open(const std::string& uri, const SourceOptions& options) {
  NOSTALL_ASSIGN_OR_RETURN(std::vector<std::string> uris, ExpandBraces(uri));
  NOSTALL_ASSIGN_OR_RETURN(S3Location first, ParseS3Uri(uris.front()));
  if (options.index_beside == "rebuild") {
    return InvalidArgument("an index beside s3:// data is not written by nostall yet: the S3 "
                           "drivers keep theirs in the index cache (" + uri + ")");
  }
  NOSTALL_ASSIGN_OR_RETURN(S3Config config, ResolveS3Config(options, "s3-tar-shards"));
  NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<S3Client> client, S3Client::Create(config));
  // One listing of the shards' common prefix gives every size and ETag.
  std::vector<std::string> keys;
  for (const std::string& u : uris) {
    NOSTALL_ASSIGN_OR_RETURN(S3Location loc, ParseS3Uri(u));
    if (loc.bucket != first.bucket) return InvalidArgument("tar shards in more than one bucket: " + uri);
    keys.push_back(loc.key);
  }
  std::string prefix = keys.front();
  for (const std::string& k : keys) {
    size_t n = 0;
    while (n < prefix.size() && n < k.size() && prefix[n] == k[n]) ++n;
    prefix.resize(n);
  }
  Result<std::vector<S3Object>> listed = client->List(first.bucket, prefix);
  if (!listed.ok()) {
    return Status(listed.status().code(),
                  listed.status().message() + " [" + client->config().Describe() + "]");
  }
  std::map<std::string, S3Object> objects;
  for (S3Object& o : listed.value()) objects[o.key] = std::move(o);
  std::string canonical = "s3-tar-shards\n";
  std::vector<uint64_t> sizes;
  for (const std::string& k : keys) {
    auto it = objects.find(k);
    if (it == objects.end()) {
      return NotFound("tar shard does not exist: s3://" + first.bucket + "/" + k + " [" +
                      client->config().Describe() + "]");
    }
    sizes.push_back(static_cast<uint64_t>(it->second.size));
    canonical += "s3://" + first.bucket + "/" + k + " " + it->second.etag + " " +
                 std::to_string(it->second.size) + "\n";
  }
  canonical += IndexVariant(options);
  // The ETags are part of the cache's name: a saved index is reused only
  // while every shard is the object it was built from.
  const std::string cache_path =
      options.use_index_cache ? IndexCachePath(options.index_cache_dir, canonical) : "";
  // Paths in the index are kept relative to the first shard's "folder".
  std::string root = "s3://" + first.bucket + "/" + keys.front();
  root.resize(root.rfind('/'));
  // A saved index must be of these shards, its members inside them (a file
  // damaged or planted is rebuilt, never followed out of bounds).
  auto fits = [&](const IndexView& idx) {
    if (idx.shards().size() != keys.size()) return false;
    for (int64_t i = 0; i < idx.size(); ++i) {
      const IndexView::Item& e = idx.item(i);
      const uint64_t shard = sizes[static_cast<size_t>(e.container)];
      if (e.offset > shard || static_cast<uint64_t>(e.size) > shard - e.offset) return false;
      if (!idx.has_members()) continue;
      for (const IndexView::Member* m = idx.members_begin(i); m != idx.members_end(i); ++m) {
        if (m->offset > shard || static_cast<uint64_t>(m->size) > shard - m->offset) return false;
      }
    }
    return true;
  };
  IndexViewPtr view;
  if (!cache_path.empty()) {
    Result<IndexViewPtr> cached = MapIndexFile(cache_path, root);
    if (cached.ok() && fits(*cached.value())) view = std::move(cached).value();
  }
  if (view == nullptr) {
    Index index;
    for (size_t s = 0; s < keys.size(); ++s) {
      const std::string shard_uri = "s3://" + first.bucket + "/" + keys[s];
      index.shards.push_back(shard_uri);
      WindowReader reader(client.get(), first.bucket, keys[s], sizes[s]);
      NOSTALL_RETURN_IF_ERROR(IndexTarShard(
          shard_uri, static_cast<int32_t>(s), sizes[s],
          [&reader](uint64_t offset, size_t size, uint8_t* out) {
            return reader.Read(offset, size, out);
          },
          TarOptionsOf(options), &index));
    }
    if (index.items.empty()) return NotFound("no samples in the tar shards " + uri);
    std::string bytes = SerializeIndex(index, root);
    index = Index{};
    if (!cache_path.empty() && WriteIndexFile(cache_path, bytes).ok()) {
      Result<IndexViewPtr> mapped = MapIndexFile(cache_path, root);
      if (mapped.ok()) view = std::move(mapped).value();
    }
    if (view == nullptr) {
      NOSTALL_ASSIGN_OR_RETURN(view, ViewIndexBytes(std::move(bytes), "(in memory)", root, false));
    }
  }
  NOSTALL_ASSIGN_OR_RETURN(RecordTable records, SelectFields(options, *view));
  return std::unique_ptr<Source>(std::make_unique<S3TarSource>(
      std::move(client), first.bucket, std::move(keys), std::move(view), std::move(records),
      options.max_item_bytes));
}

}  // namespace

SourceDriver S3TarDriver() { return {"s3-tar-shards", Claims, Open, ResolveS3Options}; }

}  // namespace nostall
