// The S3 image-folder driver: s3://BUCKET/PREFIX/ laid out as an image
// folder (one first-level prefix per class, .jpg/.jpeg/.png objects under
// it at any depth), indexed by listing the classes, then every class at once
// (ListObjectsV2, every page; ListClasses), and ordered exactly as the
// image-folder driver orders the same files on disk, so batches are the same
// bytes either way. Each item is one GET over the client's kept-alive
// connections.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <map>
#include <system_error>
#include <thread>

#include "common/interrupt.h"
#include "source/driver.h"
#include "source/index_progress.h"
#include "source/remote_source.h"
#include "store/s3_client.h"
#include "store/s3_config.h"

namespace nostall {
namespace {

class S3FolderSource final : public RemoteSource {
 public:
  S3FolderSource(std::unique_ptr<S3Client> client, const std::string& bucket, IndexViewPtr index,
                 RecordTable records, uint64_t max_item_bytes)
      : RemoteSource(store::MakeS3Store(std::move(client), bucket), std::move(index), std::move(records),
                     max_item_bytes),
        uri_prefix_("s3://" + bucket + "/") {}

  const char* kind() const override { return "s3-image-folder"; }

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
  const std::string uri_prefix_;  // an item's key less this is its object's
};

bool S3FolderClaims(const std::string& uri) {
  return uri.rfind("s3://", 0) == 0 && !(uri.size() >= 4 && uri.compare(uri.size() - 4, 4, ".tar") == 0);
}

// Every object under the class prefixes of `prefix`: the classes from one
// listing with a delimiter, then each class listed on its own, up to
// kListingsInFlight at a time (a listing is one page of 1,000 keys per round
// trip: ImageNet's 1.28 M objects listed in one sequence take ~1,300 of
// them). Objects right under `prefix`, outside any class, are not listed.
constexpr int kListingsInFlight = 32;

Result<std::vector<S3Object>> ListClasses(S3Client* client, const std::string& bucket,
                                          const std::string& prefix) {
  NOSTALL_ASSIGN_OR_RETURN(std::vector<std::string> classes, client->ListFolders(bucket, prefix));
  std::vector<Result<std::vector<S3Object>>> each(classes.size(),
                                                  Result<std::vector<S3Object>>(std::vector<S3Object>{}));
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  IndexProgress progress("s3://" + bucket + "/" + prefix, "class prefixes listed",
                         static_cast<int64_t>(classes.size()));
  auto lister = [&] {
    for (size_t k; !failed.load() && (k = next.fetch_add(1)) < classes.size();) {
      each[k] = client->List(bucket, classes[k]);
      if (each[k].ok()) progress.Done(0, static_cast<int64_t>(each[k].value().size()));
      if (!each[k].ok() && !failed.exchange(true)) client->CancelAll();  // the rest end promptly
    }
  };
  std::vector<std::thread> threads;
  std::atomic<size_t> helpers_left{0};
  const size_t n = std::min<size_t>(kListingsInFlight, classes.size());
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
      client->CancelAll();
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
  std::vector<S3Object> objects;
  for (auto& r : each) {
    for (S3Object& o : r.value()) objects.push_back(std::move(o));
  }
  return objects;
}

Result<std::unique_ptr<Source>> S3FolderOpen(const std::string& uri, const SourceOptions& options) {
  NOSTALL_ASSIGN_OR_RETURN(S3Location loc, ParseS3Uri(uri));
  std::string prefix = loc.key;
  if (!prefix.empty() && prefix.back() != '/') prefix += '/';
  for (const FieldSpec& f : options.fields) {
    if (!IsMediaKind(f.kind) && f.kind != FieldKind::kLabel) {
      return InvalidArgument("field '" + f.name + "': an s3:// image folder gives each image and "
                             "its class folder's label; the files beside the images are read "
                             "from local image folders, and every member of a sample from tar "
                             "shards (local or s3://)");
    }
  }
  if (options.index_beside == "rebuild") {
    return InvalidArgument("an index beside s3:// data is not written by nostall yet: the S3 "
                           "drivers keep theirs in the index cache (" + uri + ")");
  }
  NOSTALL_ASSIGN_OR_RETURN(nlohmann::json given, DriverOptionsJson(options, "s3-image-folder"));
  NOSTALL_ASSIGN_OR_RETURN(S3Config config, ResolveS3Config(given, "s3-image-folder"));
  NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<S3Client> client, S3Client::Create(config));
  Result<std::vector<S3Object>> listed = ListClasses(client.get(), loc.bucket, prefix);
  if (!listed.ok()) {
    return Status(listed.status().code(), listed.status().message() + " [" +
                                               client->config().Describe() + "]");
  }
  // class -> (dir, name, object) as the local driver sorts (dir, file) pairs.
  std::map<std::string, std::vector<std::pair<std::pair<std::string, std::string>, S3Object>>> by_class;
  std::map<std::string, int64_t> left_out;  // objects that are not images, by extension
  for (S3Object& o : listed.value()) {
    const std::string rel = o.key.substr(prefix.size());
    const size_t slash = rel.find('/');
    if (slash == std::string::npos || slash == 0) continue;  // not inside a class prefix
    const std::string cls = rel.substr(0, slash);
    const size_t last = o.key.rfind('/');
    const std::string name = o.key.substr(last + 1);
    if (!IsMediaFileName(name, AudioMedia(options))) {
      ++left_out[FileExtension(name)];
      continue;
    }
    by_class[cls].push_back({{o.key.substr(0, last), name}, std::move(o)});
  }
  if (by_class.empty()) {
    return NotFound("no class prefixes with image objects (.jpg, .png, .webp, .tif, .bmp, ...) under " + uri +
                    " (expected PREFIX/CLASS/IMAGE, as an image folder) [" +
                    client->config().Describe() + "]");
  }
  Index index;
  index.left_out.assign(left_out.begin(), left_out.end());
  for (auto& [cls, objects] : by_class) {  // std::map: byte order, as sorted() orders str
    std::sort(objects.begin(), objects.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    const int64_t label = static_cast<int64_t>(index.classes.size());
    index.classes.push_back(cls);
    for (auto& [where, o] : objects) {
      index.items.push_back({"s3://" + loc.bucket + "/" + o.key, label, -1, 0, o.size});
    }
  }
  listed = std::vector<S3Object>{};
  by_class.clear();
  // The listing is this index: held in the process, names relative to the
  // prefix.
  std::string root = "s3://" + loc.bucket + "/" + prefix;
  while (root.size() > 5 && root.back() == '/') root.pop_back();
  NOSTALL_ASSIGN_OR_RETURN(IndexViewPtr view,
                           ViewIndexBytes(SerializeIndex(index, root), "(listing of " + uri + ")", root,
                                          /*checked=*/false));
  index = Index{};
  NOSTALL_ASSIGN_OR_RETURN(RecordTable records, SelectFields(options, *view));
  return std::unique_ptr<Source>(std::make_unique<S3FolderSource>(
      std::move(client), loc.bucket, std::move(view), std::move(records), options.max_item_bytes));
}

}  // namespace

SourceDriver S3FolderDriver() { return {"s3-image-folder", S3FolderClaims, S3FolderOpen, ResolveS3Options}; }

}  // namespace nostall
