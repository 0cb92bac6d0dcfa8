// The remote tar-shards drivers: WebDataset shards in an object store,
// s3://BUCKET/shards/train-{0000..1023}.tar (s3-tar-shards) or behind a web
// server, https://HOST/shards/train-{0000..1023}.tar (http-tar-shards); one
// implementation over the store seam (store/object_store.h). The shards'
// sizes and ETags come from the store (on S3 one listing of their prefix, on
// a web server a HEAD each); each shard is indexed in one sequential pass
// over its headers (tar_index.cc), read through 4 MiB ranged GETs; the index
// is kept in the local index cache under a name made of every shard's key,
// ETag and size, so it is reused exactly while the objects are unchanged.
// Each item is one ranged GET of its member's bytes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "source/driver.h"
#include "source/index/index_progress.h"
#include "source/index/remote_source.h"
#include "source/index/tar_index.h"
#include "source/tar/coalesce.h"
#include "store/object_store.h"
#include "store/s3_config.h"

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

class RemoteTarSource final : public RemoteSource {
 public:
  RemoteTarSource(const char* kind, std::unique_ptr<store::ObjectStore> store, std::vector<std::string> keys,
                  std::vector<uint64_t> sizes, IndexViewPtr index, RecordTable records, uint64_t max_item_bytes)
      : RemoteSource(std::move(store), std::move(index), std::move(records), max_item_bytes),
        kind_(kind),
        keys_(std::move(keys)),
        sizes_(std::move(sizes)) {}
  RemoteTarSource(const char* kind, std::unique_ptr<store::ObjectStore> store, std::vector<std::string> keys,
                  std::vector<uint64_t> sizes, std::shared_ptr<LazyShards> lazy, uint64_t max_item_bytes)
      : RemoteSource(std::move(store), std::move(lazy), max_item_bytes),
        kind_(kind),
        keys_(std::move(keys)),
        sizes_(std::move(sizes)) {}

  const char* kind() const override { return kind_; }

  // Members read close together are joined into reads of their blocks (coalesce.h).
  void ReadAsync(int64_t i, std::vector<uint8_t> buffer, ReadDone done) const override {
    Result<ReadCoalescer::Range> r = RangeOf(i);
    if (!r.ok()) return done(r.status(), std::move(buffer));
    coalescer_.Read(r.value(), std::move(buffer), std::move(done));
  }

 private:
  Result<Span> Where(int64_t i) const override {
    NOSTALL_ASSIGN_OR_RETURN(ReadCoalescer::Range r, RangeOf(i));
    return Span{std::move(r.key), r.offset, static_cast<int64_t>(r.length)};
  }
  // Item i's member: its shard (and the shard's size) and byte range.
  Result<ReadCoalescer::Range> RangeOf(int64_t i) const {
    const ItemWhere w = IndexSource::Where(i);
    if (static_cast<uint64_t>(w.size) > max_item_bytes_) {
      return DataError("member is over the item size limit");
    }
    const auto shard = static_cast<size_t>(w.container);
    return ReadCoalescer::Range{keys_[shard], w.offset, static_cast<uint64_t>(w.size), sizes_[shard]};
  }
  const char* const kind_;
  const std::vector<std::string> keys_;  // per shard
  const std::vector<uint64_t> sizes_;    // per shard
  const ReadCoalescer coalescer_{store_.get()};
};

// Reads a shard front to back through ranged GETs of kWindow bytes, the
// windows at fixed places (window k: bytes [k * kWindow, (k + 1) * kWindow)):
// the indexer's small forward reads are served from the current window, and
// the next `ahead` windows are already being fetched meanwhile (at 20 ms a
// request, one window at a time spends most of a shard's time waiting).
class WindowReader {
 public:
  WindowReader(const store::ObjectStore* store, std::string key, uint64_t size, int ahead)
      : store_(store), key_(std::move(key)), size_(size),
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
      store_->ReadAsync(key_, offset, static_cast<int64_t>(std::min(kWindow, size_ - offset)), {},
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

  const store::ObjectStore* store_;
  uint64_t fetched_ = 0;
  const std::string key_;
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

bool S3TarClaims(const std::string& uri) { return IsS3Uri(uri) && NamesATar(uri); }
bool HttpTarClaims(const std::string& uri) { return IsHttpUri(uri) && NamesATar(uri); }

// The shards a pattern names, as one listing of their common prefix gives
// them (sizes, ETags), and where their index is kept.
struct S3Shards {
  const char* kind;
  std::unique_ptr<store::ObjectStore> store;
  std::vector<std::string> keys, etags;
  std::vector<uint64_t> sizes;
  std::string cache_path;  // this node's index cache ("" when off)
  std::string root;        // paths in the index are relative to the first shard's "folder"
  std::string beside_key;  // PATTERN.nostall-index beside them ("" when none)

  std::string uri(size_t s) const { return store->Uri(keys[s]); }
  std::string beside_uri() const { return store->Uri(beside_key); }

  // A saved index must be of these shards, its members inside them (a file
  // damaged or planted is rebuilt, never followed out of bounds).
  bool Fits(const IndexView& idx) const {
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
  }
  // Its stamps are each shard's size and ETag as this listing gives them.
  bool StampsHold(const IndexView& idx) const {
    if (idx.stamps().size() != keys.size()) return false;
    for (size_t s = 0; s < keys.size(); ++s) {
      const IndexStamp& st = idx.stamps()[s];
      if (idx.shards()[s] != uri(s) || st.path != idx.shards()[s] || st.size != static_cast<int64_t>(sizes[s]) ||
          st.content != EtagStamp(etags[s])) {
        return false;
      }
    }
    return true;
  }
};

Result<S3Shards> ListShards(const std::string& uri, const SourceOptions& options, const char* kind) {
  NOSTALL_ASSIGN_OR_RETURN(nlohmann::json given, DriverOptionsJson(options, kind));
  NOSTALL_ASSIGN_OR_RETURN(store::Located at, store::OpenStore(uri, given, kind));
  S3Shards out;
  out.kind = kind;
  out.store = std::move(at.store);
  NOSTALL_ASSIGN_OR_RETURN(out.keys, ExpandBraces(at.key));
  // Every size and ETag: on S3 one listing of the shards' common prefix.
  Result<std::vector<store::ObjectInfo>> listed = out.store->StatAll(out.keys);
  if (!listed.ok()) {
    const std::string what = listed.status().code() == StatusCode::kNotFound ? "tar shard does not exist: " : "";
    return Status(listed.status().code(), what + listed.status().message() + " [" + out.store->Describe() + "]");
  }
  std::string canonical = std::string(kind) + "\n";
  for (size_t s = 0; s < out.keys.size(); ++s) {
    const store::ObjectInfo& o = listed.value()[s];
    out.sizes.push_back(o.size);
    out.etags.push_back(o.tag);
    canonical += out.uri(s) + " " + o.tag + " " + std::to_string(o.size) + "\n";
  }
  canonical += IndexVariant(options);
  // The ETags are part of the cache's name: a saved index is reused only
  // while every shard is the object it was built from.
  out.cache_path = options.use_index_cache ? IndexCachePath(options.index_cache_dir, canonical) : "";
  out.root = out.uri(0);
  out.root.resize(out.root.rfind('/'));
  // The index object beside the shards: in the first shard's "folder", when
  // every shard is in it.
  const std::string& mode = options.index_beside;
  if (mode != "read" && mode != "write" && mode != "rebuild" && mode != "off") {
    return InvalidArgument("index_beside must be \"read\", \"write\", \"rebuild\" or \"off\", not \"" + mode + "\"");
  }
  const size_t slash = out.keys.front().rfind('/');
  const std::string dir = slash == std::string::npos ? "" : out.keys.front().substr(0, slash + 1);
  bool one_folder = true;
  for (const std::string& k : out.keys) {
    one_folder = one_folder && k.compare(0, dir.size(), dir) == 0 && k.find('/', dir.size()) == std::string::npos;
  }
  if (one_folder && mode != "off") out.beside_key = dir + uri.substr(uri.rfind('/') + 1) + kIndexBesideSuffix;
  if (mode == "rebuild" && out.beside_key.empty()) {
    return InvalidArgument("tar shards in more than one folder have no place for an index beside them: " + uri);
  }
  return out;
}

// The index object beside the shards, if it is there, serves this loader
// and still holds; else null, and `note` says why when it is there.
IndexViewPtr ReadS3Beside(const S3Shards& sh, const std::string& uri, const SourceOptions& options,
                        std::string* note) {
  std::vector<uint8_t> got;
  Status st = sh.store->ReadIfThere(sh.beside_key, uint64_t{1} << 36, &got);
  if (!st.ok()) {
    if (st.code() != StatusCode::kNotFound) *note = "the index beside the data could not be read: " + st.message();
    return nullptr;
  }
  Result<IndexViewPtr> r = ViewIndexBytes(std::string(got.begin(), got.end()), sh.beside_uri(), sh.root,
                                          /*checked=*/true, /*relative_only=*/true);
  got = {};
  const std::string fix = "; run `nostall index " + uri + "` to write it again";
  if (!r.ok()) {
    *note = "the index beside the data is not used: " + r.status().message() + fix;
  } else if (!VariantServes(r.value()->variant(), IndexVariant(options))) {
    *note = "the index beside the data (" + sh.beside_uri() + ") was built with skip_bad_samples: it is "
            "not used by a loader that raises on bad samples";
  } else if (!sh.StampsHold(*r.value()) || !sh.Fits(*r.value())) {
    *note = "the index beside the data (" + sh.beside_uri() + ") is stale: a shard changed (size or "
            "ETag) after it was written, so it is not used" + fix;
  } else {
    return std::move(r).value();
  }
  return nullptr;
}

// How the index is built: one shard a sequence of ranged GETs (`fetched`:
// its bytes read), and the whole written beside the shards as asked, saved
// to the cache and mapped from there.
struct S3IndexBuilder {
  using IndexOne = std::function<Status(size_t s, Index* part, int ahead, uint64_t* fetched)>;
  using Finish = std::function<Result<IndexViewPtr>(Index whole, std::string* origin, std::string* note)>;
  Index index;  // its shards and stamps, no items yet
  IndexOne index_one;
  Finish finish;
};

S3IndexBuilder MakeBuilder(const S3Shards& sh, const SourceOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  S3IndexBuilder b;
  b.index.variant = IndexVariant(options);
  for (size_t s = 0; s < sh.keys.size(); ++s) {
    b.index.shards.push_back(sh.uri(s));
    IndexStamp stamp;
    stamp.path = sh.uri(s);
    stamp.size = static_cast<int64_t>(sh.sizes[s]);
    stamp.content = EtagStamp(sh.etags[s]);
    b.index.stamps.push_back(stamp);
  }
  const store::ObjectStore* const c = sh.store.get();
  b.index_one = [c, keys = sh.keys, sizes = sh.sizes, shard_uris = b.index.shards,
                 tar_options = TarOptionsOf(options)](size_t s, Index* part, int ahead, uint64_t* fetched) {
    WindowReader reader(c, keys[s], sizes[s], ahead);
    Status st = IndexTarShard(
        shard_uris[s], static_cast<int32_t>(s), sizes[s],
        [&reader](uint64_t offset, size_t size, uint8_t* out) { return reader.Read(offset, size, out); },
        tar_options, part);
    *fetched = reader.fetched();
    return st;
  };
  const std::string mode = options.index_beside;
  // (A web server is read, never written: the index stays in the cache.)
  const bool write_beside = !sh.beside_key.empty() && mode != "read" && c->Writable();
  b.finish = [c, beside_key = sh.beside_key, beside_uri = sh.beside_uri(), write_beside, mode,
              cache_path = sh.cache_path, root = sh.root,
              t0](Index whole, std::string* origin, std::string* note) -> Result<IndexViewPtr> {
    std::string bytes = SerializeIndex(whole, root);
    whole = Index{};
    char took[32];
    std::snprintf(took, sizeof took, "%.1f s",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    *origin = std::string("built in ") + took;
    if (write_beside) {
      Status st = c->Write(beside_key, bytes);
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
  return b;
}

// Every shard indexed, many at once, each a sequence of ranged GETs: at
// 20 ms a request, one at a time would take 1,024 round trips per 4 GB.
Result<IndexViewPtr> BuildNow(S3IndexBuilder b, const std::string& uri, size_t shards, std::string* origin,
                              std::string* note) {
  IndexProgress progress(uri, "shards", static_cast<int64_t>(shards));
  std::vector<uint64_t> fetched(shards);
  NOSTALL_RETURN_IF_ERROR(IndexShardsInParallel(
      shards, kShardsAtOnce, [&](size_t s, Index* part) { return b.index_one(s, part, kWindowsAhead, &fetched[s]); },
      [&](size_t s, const Index& part) { progress.Done(fetched[s], static_cast<int64_t>(part.items.size())); },
      &b.index));
  if (b.index.items.empty()) return NotFound("no samples in the tar shards " + uri);
  return b.finish(std::move(b.index), origin, note);
}

// A loader that starts before its index is whole (lazy_index): the shards
// indexed a few at a time as the first epoch reads them.
std::unique_ptr<Source> LazySource(S3Shards sh, S3IndexBuilder b, const SourceOptions& options, std::string note) {
  std::vector<std::string> shard_uris = b.index.shards;
  auto lazy = std::make_shared<LazyShards>(
      std::move(shard_uris), std::move(b.index), kLazyShardsAtOnce,
      [index_one = b.index_one](size_t s, Index* part) {
        uint64_t fetched = 0;
        return index_one(s, part, kLazyWindowsAhead, &fetched);
      },
      [finish = b.finish, note](Index whole, std::string* origin) mutable {
        return finish(std::move(whole), origin, &note);
      });
  auto source = std::make_unique<RemoteTarSource>(sh.kind, std::move(sh.store), std::move(sh.keys), sh.sizes, std::move(lazy),
                                                  options.max_item_bytes);
  source->SetIndexOrigin("", std::move(note));
  return source;
}

Result<std::unique_ptr<Source>> RemoteTarOpen(const std::string& uri, const SourceOptions& options,
                                              const char* kind) {
  NOSTALL_ASSIGN_OR_RETURN(S3Shards sh, ListShards(uri, options, kind));
  if (options.index_beside == "rebuild" && !sh.store->Writable()) {
    return InvalidArgument(std::string(kind) + ": " + uri + " is read, never written: an index beside it is "
                           "not written by nostall (it is kept in the index cache)");
  }
  const bool rebuild = options.index_beside == "rebuild";
  IndexViewPtr view;
  std::string origin, note;
  if (!sh.cache_path.empty() && !rebuild) {
    Result<IndexViewPtr> cached = MapIndexFile(sh.cache_path, sh.root);
    if (cached.ok() && sh.Fits(*cached.value())) {
      view = std::move(cached).value();
      origin = "the index cache: " + sh.cache_path;
    }
  }
  if (view == nullptr && !sh.beside_key.empty() && !rebuild) {
    view = ReadS3Beside(sh, uri, options, &note);
    if (view != nullptr) {
      origin = "beside the data: " + sh.beside_uri();
      // Saved to this node's cache and mapped from there, so every process
      // on the node shares one copy.
      const std::string bytes(view->raw());
      if (!sh.cache_path.empty() && WriteIndexFile(sh.cache_path, bytes).ok()) {
        Result<IndexViewPtr> mapped = MapIndexFile(sh.cache_path, sh.root);
        if (mapped.ok() && sh.Fits(*mapped.value())) view = std::move(mapped).value();
      }
    }
  }
  if (view == nullptr) {
    S3IndexBuilder b = MakeBuilder(sh, options);
    if (options.lazy_index) return LazySource(std::move(sh), std::move(b), options, std::move(note));
    NOSTALL_ASSIGN_OR_RETURN(view, BuildNow(std::move(b), uri, sh.keys.size(), &origin, &note));
  }
  NOSTALL_ASSIGN_OR_RETURN(RecordTable records, SelectFields(options, *view));
  auto source = std::make_unique<RemoteTarSource>(sh.kind, std::move(sh.store), std::move(sh.keys), sh.sizes, std::move(view),
                                                  std::move(records), options.max_item_bytes);
  source->SetIndexOrigin(std::move(origin), std::move(note));
  return std::unique_ptr<Source>(std::move(source));
}

}  // namespace

Result<std::unique_ptr<Source>> S3TarOpen(const std::string& uri, const SourceOptions& options) {
  return RemoteTarOpen(uri, options, "s3-tar-shards");
}

Result<std::unique_ptr<Source>> HttpTarOpen(const std::string& uri, const SourceOptions& options) {
  return RemoteTarOpen(uri, options, "http-tar-shards");
}

SourceDriver S3TarDriver() { return {"s3-tar-shards", S3TarClaims, S3TarOpen, ResolveS3Options}; }

SourceDriver HttpTarDriver() { return {"http-tar-shards", HttpTarClaims, HttpTarOpen, ResolveHttpOptions}; }

}  // namespace nostall
