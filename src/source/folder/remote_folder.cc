// The remote image-folder drivers: an image folder in an object store
// (s3://BUCKET/PREFIX/, http(s)://HOST/PATH/: one first-level folder per
// class, images under it at any depth), indexed by listing the classes
// (ObjectStore::ListFolders: S3's common prefixes, a web server's index
// page), then every class at once (ListClasses), and ordered exactly as the
// image-folder driver orders the same files on disk, so batches are the same
// bytes either way. Each item is one read of its whole object over the
// store's kept-alive connections, many in flight.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <system_error>
#include <thread>

#include "common/interrupt.h"
#include "source/driver.h"
#include "source/index/index_progress.h"
#include "source/index/remote_source.h"
#include "store/object_store.h"
#include "store/s3_config.h"

namespace nostall {
namespace {

class RemoteFolderSource final : public RemoteSource {
 public:
  RemoteFolderSource(const char* kind, std::unique_ptr<store::ObjectStore> store, IndexViewPtr index,
                     RecordTable records, uint64_t max_item_bytes)
      : RemoteSource(std::move(store), std::move(index), std::move(records), max_item_bytes),
        kind_(kind),
        uri_prefix_(store_->Uri("")) {}

  const char* kind() const override { return kind_; }

 private:
  Result<Span> Where(int64_t i) const override {
    const int64_t size = byte_size(i);
    if (static_cast<uint64_t>(size) > max_item_bytes_) {
      return DataError("object is over the item size limit");
    }
    // The listed size bounds what is taken in (an empty object: one byte,
    // so that a body where none was listed is still caught).
    return Span{key(i).substr(uri_prefix_.size()), 0, -1,
                std::max<uint64_t>(1, static_cast<uint64_t>(size))};
  }
  const char* const kind_;
  const std::string uri_prefix_;  // an item's key less this is its object's
};

bool S3FolderClaims(const std::string& uri) { return IsS3Uri(uri) && !NamesATar(uri); }
bool HttpFolderClaims(const std::string& uri) { return IsHttpUri(uri) && !NamesATar(uri); }

// Every object under the class folders of `prefix`: the classes from one
// folder listing, then each class listed on its own, as many at a time as
// the store says are worth it (ObjectStore::ListsAtOnce). Objects right
// under `prefix`, outside any class, are not listed.
using Listed = std::vector<store::ObjectInfo>;

Result<Listed> ListClasses(const store::ObjectStore& store, const std::string& prefix) {
  NOSTALL_ASSIGN_OR_RETURN(std::vector<std::string> classes, store.ListFolders(prefix));
  std::vector<Result<Listed>> each(classes.size(), Result<Listed>(Listed{}));
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  IndexProgress progress(store.Uri(prefix), "class folders listed", static_cast<int64_t>(classes.size()));
  auto lister = [&] {
    for (size_t k; !failed.load() && (k = next.fetch_add(1)) < classes.size();) {
      each[k] = store.List(classes[k]);
      if (each[k].ok()) progress.Done(0, static_cast<int64_t>(each[k].value().size()));
      if (!each[k].ok() && !failed.exchange(true)) store.CancelAll();  // the rest end promptly
    }
  };
  std::vector<std::thread> threads;
  std::atomic<size_t> helpers_left{0};
  const size_t n = std::min<size_t>(static_cast<size_t>(std::max(1, store.ListsAtOnce())), classes.size());
  // Fewer listing threads than asked for (a process at its thread limit)
  // is slower, not an error: this thread lists too.
  try {
    for (size_t t = 1; t < n; ++t) {
      helpers_left.fetch_add(1);
      threads.emplace_back([&] {
        lister();
        helpers_left.fetch_sub(1);
      });
    }
  } catch (const std::system_error&) {
    helpers_left.fetch_sub(1);
  }
  lister();
  // Only the caller's thread sees Ctrl-C (Interrupted() asks on Python's
  // main thread): when the other threads took every class, it waits for
  // them here, asking, and an interrupt cancels every request in flight.
  while (helpers_left.load() > 0) {
    if (Interrupted()) {
      store.CancelAll();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& t : threads) t.join();
  // The error that stopped the listing, not the cancellations it caused.
  const Status* first = nullptr;
  for (auto& r : each) {
    if (!r.ok() && (first == nullptr || first->code() == StatusCode::kCancelled)) first = &r.status();
  }
  if (first != nullptr) return *first;
  Listed objects;
  for (auto& r : each) {
    for (store::ObjectInfo& o : r.value()) objects.push_back(std::move(o));
  }
  return objects;
}

Result<std::unique_ptr<Source>> RemoteFolderOpen(const std::string& uri, const SourceOptions& options,
                                                 const char* kind) {
  for (const FieldSpec& f : options.fields) {
    if (!IsMediaKind(f.kind) && f.kind != FieldKind::kLabel) {
      return InvalidArgument("field '" + f.name + "': an image folder in s3:// or http(s):// gives each "
                             "image and its class folder's label; the files beside the images are read "
                             "from local image folders, and every member of a sample from tar "
                             "shards (local, s3:// or http(s)://)");
    }
  }
  if (options.index_beside == "rebuild") {
    return InvalidArgument("an index beside " + uri + " is not written by nostall: the " + kind +
                           " driver keeps its listing in the process");
  }
  NOSTALL_ASSIGN_OR_RETURN(nlohmann::json given, DriverOptionsJson(options, kind));
  NOSTALL_ASSIGN_OR_RETURN(store::Located at, store::OpenStore(uri, given, kind));
  const store::ObjectStore& store = *at.store;
  std::string prefix = at.key;
  if (!prefix.empty() && prefix.back() != '/') prefix += '/';
  Result<Listed> listed = ListClasses(store, prefix);
  if (!listed.ok()) {
    return Status(listed.status().code(), listed.status().message() + " [" + store.Describe() + "]");
  }
  // class -> (dir, name, object) as the local driver sorts (dir, file) pairs.
  std::map<std::string, std::vector<std::pair<std::pair<std::string, std::string>, store::ObjectInfo>>> by_class;
  std::map<std::string, int64_t> left_out;  // objects that are not images, by extension
  for (store::ObjectInfo& o : listed.value()) {
    const std::string rel = o.key.substr(prefix.size());
    const size_t slash = rel.find('/');
    if (slash == std::string::npos || slash == 0) continue;  // not inside a class folder
    const std::string cls = rel.substr(0, slash);
    const size_t last = o.key.rfind('/');
    const std::string name = o.key.substr(last + 1);
    if (!IsMediaFileName(name, MediaOf(options))) {
      ++left_out[FileExtension(name)];
      continue;
    }
    by_class[cls].push_back({{o.key.substr(0, last), name}, std::move(o)});
  }
  if (by_class.empty()) {
    const std::string folders = std::string(store.name()) == "s3" ? "class prefixes" : "class folders";
    return NotFound("no " + folders + " with image objects (.jpg, .png, .webp, .tif, .bmp, ...) under " + uri +
                    " (expected PREFIX/CLASS/IMAGE, as an image folder) [" + store.Describe() + "]");
  }
  Index index;
  index.left_out.assign(left_out.begin(), left_out.end());
  for (auto& [cls, objects] : by_class) {  // std::map: byte order, as sorted() orders str
    std::sort(objects.begin(), objects.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const int64_t label = static_cast<int64_t>(index.classes.size());
    index.classes.push_back(cls);
    for (auto& [where, o] : objects) {
      index.items.push_back({store.Uri(o.key), label, -1, 0, static_cast<int64_t>(o.size)});
    }
  }
  listed = Listed{};
  by_class.clear();
  // The listing is this index: held in the process, names relative to the
  // prefix.
  std::string root = store.Uri(prefix);
  while (root.size() > 5 && root.back() == '/') root.pop_back();
  NOSTALL_ASSIGN_OR_RETURN(IndexViewPtr view,
                           ViewIndexBytes(SerializeIndex(index, root), "(listing of " + uri + ")", root,
                                          /*checked=*/false));
  index = Index{};
  NOSTALL_ASSIGN_OR_RETURN(RecordTable records, SelectFields(options, *view));
  return std::unique_ptr<Source>(std::make_unique<RemoteFolderSource>(
      kind, std::move(at.store), std::move(view), std::move(records), options.max_item_bytes));
}

Result<std::unique_ptr<Source>> S3FolderOpen(const std::string& uri, const SourceOptions& options) {
  return RemoteFolderOpen(uri, options, "s3-image-folder");
}
Result<std::unique_ptr<Source>> HttpFolderOpen(const std::string& uri, const SourceOptions& options) {
  return RemoteFolderOpen(uri, options, "http-image-folder");
}

}  // namespace

SourceDriver S3FolderDriver() { return {"s3-image-folder", S3FolderClaims, S3FolderOpen, ResolveS3Options}; }
SourceDriver HttpFolderDriver() {
  return {"http-image-folder", HttpFolderClaims, HttpFolderOpen, ResolveHttpOptions};
}

}  // namespace nostall
