// The S3 tar-shards driver: s3://BUCKET/shards/train-{0000..1023}.tar, as
// WebDataset shards. The shards' sizes and ETags come from one listing of
// their prefix; each shard is indexed in one sequential pass over its
// headers (tar_index.cc), read through 4 MiB ranged GETs; the index is kept
// in the local index cache under a name made of every shard's key, ETag and
// size, so it is reused exactly while the objects are unchanged. Each item
// is one ranged GET of its member's bytes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>

#include "source/driver.h"
#include "source/index_progress.h"
#include "source/s3_source.h"
#include "source/tar_index.h"

namespace nostall {
namespace {

constexpr uint64_t kWindow = 4 << 20;
constexpr int kShardsAtOnce = 16;
// Indexed as read: a few shards ahead of the first epoch, leaving the
// connection to the epoch's own reads.
constexpr int kLazyShardsAtOnce = 4;
// Windows fetched ahead of the one being parsed: a shard indexed as read is
// waited for (3 ahead: 16 MiB per shard in flight); a whole build has many
// shards at once to keep the connection busy (1 ahead).
constexpr int kLazyWindowsAhead = 3;
constexpr int kWindowsAhead = 1;

class S3TarSource final : public S3Source {
 public:
  S3TarSource(std::unique_ptr<S3Client> client, std::string bucket, std::vector<std::string> keys,
              IndexViewPtr index, RecordTable records, uint64_t max_item_bytes)
      : S3Source(std::move(client), std::move(bucket), std::move(index), std::move(records), max_item_bytes),
        keys_(std::move(keys)) {}
  S3TarSource(std::unique_ptr<S3Client> client, std::string bucket, std::vector<std::string> keys,
              std::shared_ptr<LazyShards> lazy, uint64_t max_item_bytes)
      : S3Source(std::move(client), std::move(bucket), std::move(lazy), max_item_bytes),
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

// Reads a shard front to back through ranged GETs of kWindow bytes, the
// windows at fixed places (window k: bytes [k * kWindow, (k + 1) * kWindow)):
// the indexer's small forward reads are served from the current window, and
// the next `ahead` windows are already being fetched meanwhile (at 20 ms a
// request, one window at a time spends most of a shard's time waiting).
class WindowReader {
 public:
  WindowReader(S3Client* client, std::string bucket, std::string key, uint64_t size, int ahead)
      : client_(client), bucket_(std::move(bucket)), key_(std::move(key)), size_(size),
        ahead_(static_cast<uint64_t>(std::max(0, ahead))) {}
  Status Read(uint64_t offset, size_t n, uint8_t* out) {
    if (offset > size_ || n > size_ - offset) return DataError("read past the end of the shard");
    while (n > 0) {
      const uint64_t k = offset / kWindow;
      NOSTALL_RETURN_IF_ERROR(Load(k));
      const uint64_t start = k * kWindow;
      const size_t take = std::min<size_t>(n, static_cast<size_t>(start + window_.size() - offset));
      if (take == 0) return DataError("the shard's window ended early");
      std::copy_n(window_.data() + (offset - start), take, out);
      out += take;
      offset += take;
      n -= take;
    }
    return Status::OK();
  }
  uint64_t fetched() const { return fetched_; }

 private:
  // A window asked for; its answer (on the client's I/O thread) lands here,
  // kept alive by the callback even if the reader is gone first.
  struct Pending {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
    std::vector<uint8_t> bytes;
  };
  // Window k becomes the current one; it and the `ahead` after it are asked for.
  Status Load(uint64_t k) {
    if (loaded_ && current_ == k) return Status::OK();
    const uint64_t last = (size_ + kWindow - 1) / kWindow;  // windows in the shard
    while (!pending_.empty() && pending_.begin()->first < k) pending_.erase(pending_.begin());
    for (uint64_t j = k; j < std::min(last, k + 1 + ahead_); ++j) {
      if (pending_.count(j)) continue;
      auto p = std::make_shared<Pending>();
      pending_[j] = p;
      const uint64_t offset = j * kWindow;
      client_->GetAsync(bucket_, key_, offset, static_cast<int64_t>(std::min(kWindow, size_ - offset)), {},
                        [p](Status st, std::vector<uint8_t> bytes) {
                          std::lock_guard<std::mutex> lock(p->mu);
                          p->status = std::move(st);
                          p->bytes = std::move(bytes);
                          p->done = true;
                          p->cv.notify_all();
                        });
    }
    std::shared_ptr<Pending> p = pending_.at(k);
    pending_.erase(k);
    std::unique_lock<std::mutex> lock(p->mu);
    p->cv.wait(lock, [&] { return p->done; });
    NOSTALL_RETURN_IF_ERROR(p->status);
    window_ = std::move(p->bytes);
    fetched_ += window_.size();
    current_ = k;
    loaded_ = true;
    return Status::OK();
  }

  S3Client* client_;
  uint64_t fetched_ = 0;
  const std::string bucket_, key_;
  const uint64_t size_, ahead_;
  std::map<uint64_t, std::shared_ptr<Pending>> pending_;  // windows asked for, by number
  bool loaded_ = false;
  uint64_t current_ = 0;
  std::vector<uint8_t> window_;
};

// A shard's stamp in an index of S3 shards: its ETag, hashed (never 0).
uint64_t EtagStamp(const std::string& etag) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : etag) h = (h ^ c) * 0x100000001b3ull;
  return h | 1;
}

bool S3TarClaims(const std::string& uri) {
  return uri.rfind("s3://", 0) == 0 && uri.size() >= 4 && uri.compare(uri.size() - 4, 4, ".tar") == 0;
}

Result<std::unique_ptr<Source>> S3TarOpen(const std::string& uri, const SourceOptions& options) {
  NOSTALL_ASSIGN_OR_RETURN(std::vector<std::string> uris, ExpandBraces(uri));
  NOSTALL_ASSIGN_OR_RETURN(S3Location first, ParseS3Uri(uris.front()));
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
  std::vector<std::string> etags;
  for (const std::string& k : keys) {
    auto it = objects.find(k);
    if (it == objects.end()) {
      return NotFound("tar shard does not exist: s3://" + first.bucket + "/" + k + " [" +
                      client->config().Describe() + "]");
    }
    sizes.push_back(static_cast<uint64_t>(it->second.size));
    etags.push_back(it->second.etag);
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
  // The index object beside the shards: PATTERN.nostall-index in the
  // first shard's "folder" (when every shard is in it), its stamps each
  // shard's size and ETag as this listing gives them.
  const std::string& mode = options.index_beside;
  if (mode != "read" && mode != "write" && mode != "rebuild" && mode != "off") {
    return InvalidArgument("index_beside must be \"read\", \"write\", \"rebuild\" or \"off\", not \"" +
                           mode + "\"");
  }
  std::string beside_key;
  {
    const size_t slash = keys.front().rfind('/');
    const std::string dir = slash == std::string::npos ? "" : keys.front().substr(0, slash + 1);
    bool one_folder = true;
    for (const std::string& k : keys) {
      one_folder = one_folder && k.compare(0, dir.size(), dir) == 0 &&
                   k.find('/', dir.size()) == std::string::npos;
    }
    if (one_folder && mode != "off") beside_key = dir + uri.substr(uri.rfind('/') + 1) + kIndexBesideSuffix;
  }
  if (mode == "rebuild" && beside_key.empty()) {
    return InvalidArgument("tar shards in more than one folder have no place for an index beside them: " + uri);
  }
  const std::string beside_uri = "s3://" + first.bucket + "/" + beside_key;
  auto stamps_hold = [&](const IndexView& idx) {
    if (idx.stamps().size() != keys.size()) return false;
    for (size_t s = 0; s < keys.size(); ++s) {
      const IndexStamp& st = idx.stamps()[s];
      if (idx.shards()[s] != "s3://" + first.bucket + "/" + keys[s] || st.path != idx.shards()[s] || st.size != static_cast<int64_t>(sizes[s]) ||
          st.content != EtagStamp(etags[s])) {
        return false;
      }
    }
    return true;
  };
  IndexViewPtr view;
  std::string origin, note;
  if (!cache_path.empty() && mode != "rebuild") {
    Result<IndexViewPtr> cached = MapIndexFile(cache_path, root);
    if (cached.ok() && fits(*cached.value())) {
      view = std::move(cached).value();
      origin = "the index cache: " + cache_path;
    }
  }
  if (view == nullptr && !beside_key.empty() && mode != "rebuild") {
    std::vector<uint8_t> got;
    Status st = client->GetIfThere(first.bucket, beside_key, uint64_t{1} << 36, &got);
    if (st.ok()) {
      Result<IndexViewPtr> r = ViewIndexBytes(std::string(got.begin(), got.end()), beside_uri, root,
                                              /*checked=*/true, /*relative_only=*/true);
      got = {};
      const std::string fix = "; run `nostall index " + uri + "` to write it again";
      if (!r.ok()) {
        note = "the index beside the data is not used: " + r.status().message() + fix;
      } else if (!VariantServes(r.value()->variant(), IndexVariant(options))) {
        note = "the index beside the data (" + beside_uri + ") was built with skip_bad_samples: it is "
               "not used by a loader that raises on bad samples";
      } else if (!stamps_hold(*r.value()) || !fits(*r.value())) {
        note = "the index beside the data (" + beside_uri + ") is stale: a shard changed (size or "
               "ETag) after it was written, so it is not used" + fix;
      } else {
        view = std::move(r).value();
        origin = "beside the data: " + beside_uri;
      }
    } else if (st.code() != StatusCode::kNotFound) {
      note = "the index beside the data could not be read: " + st.message();
    }
  }
  if (view == nullptr) {
    const auto t0 = std::chrono::steady_clock::now();
    Index index;
    index.variant = IndexVariant(options);
    for (size_t s = 0; s < keys.size(); ++s) {
      const std::string shard_uri = "s3://" + first.bucket + "/" + keys[s];
      index.shards.push_back(shard_uri);
      IndexStamp stamp;
      stamp.path = shard_uri;
      stamp.size = static_cast<int64_t>(sizes[s]);
      stamp.content = EtagStamp(etags[s]);
      index.stamps.push_back(stamp);
    }
    S3Client* const c = client.get();
    const std::string bucket = first.bucket;
    const TarIndexOptions tar_options = TarOptionsOf(options);
    const std::vector<std::string> shard_uris = index.shards;
    // One shard, a sequence of ranged GETs; `fetched`: its bytes read.
    auto index_one = [c, bucket, keys, sizes, shard_uris, tar_options](size_t s, Index* part, int ahead,
                                                                        uint64_t* fetched) {
      WindowReader reader(c, bucket, keys[s], sizes[s], ahead);
      Status st = IndexTarShard(
          shard_uris[s], static_cast<int32_t>(s), sizes[s],
          [&reader](uint64_t offset, size_t size, uint8_t* out) { return reader.Read(offset, size, out); },
          tar_options, part);
      *fetched = reader.fetched();
      return st;
    };
    // The whole index: beside the shards as asked, saved to the cache and
    // mapped from there.
    const bool write_beside = !beside_key.empty() && mode != "read";
    auto finish = [c, bucket, beside_key, beside_uri, write_beside, mode, cache_path, root, t0](
                      Index whole, std::string* origin, std::string* note) -> Result<IndexViewPtr> {
      std::string bytes = SerializeIndex(whole, root);
      whole = Index{};
      char took[32];
      std::snprintf(took, sizeof took, "%.1f s",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      *origin = std::string("built in ") + took;
      if (write_beside) {
        Status st = c->Put(bucket, beside_key, bytes);
        if (!st.ok() && mode == "rebuild") return st;
        if (st.ok()) {
          *origin += "; written beside the data: " + beside_uri;
          note->clear();
        } else {
          *note = "the index could not be written beside the data: " + st.message();
        }
      }
      return SaveAndMapIndex(cache_path, std::move(bytes), root, origin);
    };
    if (options.lazy_index) {
      auto lazy = std::make_shared<LazyShards>(
          shard_uris, std::move(index), kLazyShardsAtOnce,
          [index_one](size_t s, Index* part) {
            uint64_t fetched = 0;
            return index_one(s, part, kLazyWindowsAhead, &fetched);
          },
          [finish, note](Index whole, std::string* origin) mutable {
            return finish(std::move(whole), origin, &note);
          });
      auto source = std::make_unique<S3TarSource>(std::move(client), first.bucket, std::move(keys),
                                                  std::move(lazy), options.max_item_bytes);
      source->SetIndexOrigin("", std::move(note));
      return std::unique_ptr<Source>(std::move(source));
    }
    IndexProgress progress(uri, "shards", static_cast<int64_t>(keys.size()));
    // Shards indexed at once, each a sequence of ranged GETs: at 20 ms a
    // request, one at a time would take 1,024 round trips per 4 GB.
    std::vector<uint64_t> fetched(keys.size());
    NOSTALL_RETURN_IF_ERROR(IndexShardsInParallel(
        keys.size(), kShardsAtOnce,
        [&](size_t s, Index* part) { return index_one(s, part, kWindowsAhead, &fetched[s]); },
        [&](size_t s, const Index& part) {
          progress.Done(fetched[s], static_cast<int64_t>(part.items.size()));
        },
        &index));
    if (index.items.empty()) return NotFound("no samples in the tar shards " + uri);
    NOSTALL_ASSIGN_OR_RETURN(view, finish(std::move(index), &origin, &note));
  } else if (origin.rfind("beside", 0) == 0 && !cache_path.empty()) {
    // Fetched from beside the data: saved to this node's cache and mapped
    // from there, so every process on the node shares one copy.
    const std::string bytes(view->raw());
    if (WriteIndexFile(cache_path, bytes).ok()) {
      Result<IndexViewPtr> mapped = MapIndexFile(cache_path, root);
      if (mapped.ok() && fits(*mapped.value())) view = std::move(mapped).value();
    }
  }
  NOSTALL_ASSIGN_OR_RETURN(RecordTable records, SelectFields(options, *view));
  auto source = std::make_unique<S3TarSource>(std::move(client), first.bucket, std::move(keys),
                                              std::move(view), std::move(records), options.max_item_bytes);
  source->SetIndexOrigin(std::move(origin), std::move(note));
  return std::unique_ptr<Source>(std::move(source));
}

}  // namespace

SourceDriver S3TarDriver() { return {"s3-tar-shards", S3TarClaims, S3TarOpen, ResolveS3Options}; }

}  // namespace nostall
