// The coco driver: a folder of images and COCO's instances annotation file
// (docs/detection.md). The annotation file is parsed once (streamed) into
// nostall's table (annotations/coco.h), saved in the index cache and mapped
// by every later run and process; the table is stale when the file's size
// or mtime changes, or the options that shape it do.
//
// Items are the images the file lists, by image id (torchvision's
// CocoDetection order), keyed by their file_name. An item's bytes are its
// annotations in record form, then the image: with a "targets" field, the
// record's table says so (field 1: the annotations, the image to the end),
// so the caches, the shared loader and resume carry both as one item.
//
// The folder may be in an object store, s3://BUCKET/PREFIX or
// https://HOST/PATH (each image one read through the store, many in
// flight), and the annotation file a local path or a remote object (read
// whole once; its size and version, from its ETag, then stamp the saved
// table, as a local file's size and mtime do).
//
//   options: annotations  the instances JSON (required)
//            empty        "keep" (default) or "drop": images without annotations
//            crowd        "keep" (default) or "drop": iscrowd annotations
//            segmentation keep polygons and RLE, for masks (default false)
//            endpoint, region, profile, addressing, unsigned, max_attempts:
//                         the S3 options (docs/s3.md), for s3:// paths;
//                         max_attempts for http(s):// ones
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/mman.h>
#include <climits>
#include <cstdio>
#include <cstring>
#include <chrono>

#include "annotations/coco.h"
#include "common/fd.h"
#include "common/json_fields.h"
#include "source/driver.h"
#include "source/index/index_file.h"
#include "source/index/index_progress.h"
#include "store/object_store.h"
#include "store/s3_config.h"

namespace nostall {
namespace {

struct CocoOptions {
  std::string annotations;
  annotations::CocoOptions table;
  nlohmann::json s3 = nlohmann::json::object();  // the store's options, for s3:// and http(s):// paths
};

Result<CocoOptions> CocoReadOptions(const nlohmann::json& given) {
  CocoOptions o;
  nlohmann::json j;
  // Whatever is not the coco driver's own is an S3 option.
  NOSTALL_RETURN_IF_ERROR(SplitS3Options(given, {"annotations", "empty", "crowd", "segmentation"}, "coco", &j, &o.s3));
  NOSTALL_RETURN_IF_ERROR(GetString(j, "source.options: ", "annotations", &o.annotations));
  if (o.annotations.empty()) {
    return InvalidArgument("the coco driver needs source.options.annotations: the instances JSON "
                           "(e.g. annotations/instances_train2017.json)");
  }
  std::string empty = "keep", crowd = "keep";
  NOSTALL_RETURN_IF_ERROR(GetString(j, "source.options: ", "empty", &empty));
  NOSTALL_RETURN_IF_ERROR(GetString(j, "source.options: ", "crowd", &crowd));
  for (const auto& [name, v] : {std::pair<const char*, std::string&>{"empty", empty}, {"crowd", crowd}}) {
    if (v != "keep" && v != "drop") {
      return InvalidArgument(std::string("source.options: ") + name + " must be \"keep\" or \"drop\", not \"" +
                             v.substr(0, 40) + "\"");
    }
  }
  o.table.keep_empty = empty == "keep";
  o.table.keep_crowd = crowd == "keep";
  NOSTALL_RETURN_IF_ERROR(GetBool(j, "source.options: ", "segmentation", &o.table.segmentation));
  return o;
}

Result<nlohmann::json> CocoResolveOptions(const nlohmann::json& given, bool) {
  NOSTALL_ASSIGN_OR_RETURN(CocoOptions o, CocoReadOptions(given));
  nlohmann::json out = o.s3;
  out.update(nlohmann::json{{"annotations", o.annotations},
                            {"empty", o.table.keep_empty ? "keep" : "drop"},
                            {"crowd", o.table.keep_crowd ? "keep" : "drop"},
                            {"segmentation", o.table.segmentation}});
  return out;
}

std::string OptionsKey(const CocoOptions& o) {
  return std::string(o.table.keep_empty ? "e" : "-") + (o.table.keep_crowd ? "c" : "-") +
         (o.table.segmentation ? "s" : "-");
}

class CocoSource final : public Source {
 public:
  CocoSource(std::string root, std::string table_bytes, Mapping map, annotations::CocoView view,
             bool with_targets, std::string origin, std::unique_ptr<store::ObjectStore> store = nullptr,
             std::string prefix = "", uint64_t max_item_bytes = 0)
      : store_(std::move(store)),
        max_item_bytes_(max_item_bytes),
        prefix_(std::move(prefix)),
        root_(std::move(root)),
        held_(std::move(table_bytes)),
        map_(std::move(map)),
        view_(view),
        with_targets_(with_targets),
        origin_(std::move(origin)) {
    if (with_targets_) {
      spans_.resize(view_.size() * 2);
      for (size_t i = 0; i < view_.size(); ++i) {
        const int64_t len = static_cast<int64_t>(view_.record(i).size());
        spans_[2 * i] = {static_cast<uint64_t>(len), -1};
        spans_[2 * i + 1] = {0, len};
      }
    }
    for (const auto& [id, name] : view_.categories()) {
      if (id < 0 || id > 100000) continue;
      if (classes_.size() <= static_cast<size_t>(id)) classes_.resize(static_cast<size_t>(id) + 1);
      classes_[static_cast<size_t>(id)] = name;
    }
    // The table's (its names, rows and records), and whether items carry
    // their annotations: a cache of images is not a cache of records.
    fingerprint_ = view_.fingerprint() ^ (with_targets_ ? 0x74617267ull : 0);
  }
  // The store's I/O thread answers what is in flight and is joined before
  // the table its callbacks read from goes.
  ~CocoSource() override {
    if (store_) store_->CancelAll();
    store_.reset();
  }

  int64_t size() const override { return static_cast<int64_t>(view_.size()); }
  std::string key(int64_t i) const override { return std::string(view_.file_name(static_cast<size_t>(i))); }
  int64_t label(int64_t i) const override { return view_.count(static_cast<size_t>(i)); }
  int64_t byte_size(int64_t) const override { return -1; }
  const std::vector<std::string>& classes() const override { return classes_; }
  uint64_t fingerprint() const override { return fingerprint_; }
  int64_t skipped_at_index() const override { return view_.dropped_empty(); }
  bool image_id(int64_t i, int64_t* id) const override {
    *id = view_.image_id(static_cast<size_t>(i));
    return true;
  }
  bool image_size(int64_t i, int* width, int* height) const override {
    uint32_t w = 0, h = 0;
    if (!view_.image_size(static_cast<size_t>(i), &w, &h) || w > (1u << 30) || h > (1u << 30)) return false;
    *width = static_cast<int>(w);
    *height = static_cast<int>(h);
    return true;
  }
  const FieldSpan* record(int64_t i) const override {
    return with_targets_ ? &spans_[static_cast<size_t>(i) * 2] : nullptr;
  }
  int extra_fields() const override { return with_targets_ ? 1 : 0; }
  int64_t field_room(int) const override { return static_cast<int64_t>(view_.max_record()); }
  int64_t max_annotations() const override { return view_.max_count(); }
  std::string index_origin() const override { return origin_; }
  const char* kind() const override { return "coco"; }
  std::optional<StorageStats> storage_stats() const override {
    return store_ ? store_->Stats() : std::nullopt;
  }
  bool ReadsAsync() const override { return store_ != nullptr && store_->ReadsAsync(); }
  double RequestLatencySeconds() const override { return store_ ? store_->LatencySeconds() : 0; }
  void CancelReads() const override {
    if (store_) store_->CancelAll();
  }
  void ReadAsync(int64_t i, std::vector<uint8_t> buffer, ReadDone done) const override {
    if (!store_) return Source::ReadAsync(i, std::move(buffer), std::move(done));
    store_->ReadAsync(ObjectKey(i), 0, -1, std::move(buffer),
                      [this, i, done = std::move(done)](Status st, std::vector<uint8_t> bytes) {
                        if (st.ok()) Prepend(i, &bytes);
                        done(std::move(st), std::move(bytes));
                      },
                      max_item_bytes_);
  }

  Status Read(int64_t i, std::vector<uint8_t>* out) const override {
    if (store_) {
      NOSTALL_RETURN_IF_ERROR(store_->Read(ObjectKey(i), 0, -1, out, max_item_bytes_));
      Prepend(i, out);
      return Status::OK();
    }
    const std::string path = root_ + "/" + key(i);
    uint64_t size = 0;
    NOSTALL_ASSIGN_OR_RETURN(UniqueFd fd, OpenReadOnly(path, &size));
    if (size > (1ull << 30)) return DataError("image file is over 1 GiB");
    const std::string_view rec = with_targets_ ? view_.record(static_cast<size_t>(i)) : std::string_view();
    out->resize(rec.size() + size);
    if (!rec.empty()) std::memcpy(out->data(), rec.data(), rec.size());
    return PreadExact(fd.get(), 0, size, out->data() + rec.size());
  }

 private:
  // For images in a store, the object is PREFIX/file_name (prefix_: the
  // root's key in the store, ending in '/', or "").
  std::string ObjectKey(int64_t i) const { return prefix_ + std::string(view_.file_name(static_cast<size_t>(i))); }
  void Prepend(int64_t i, std::vector<uint8_t>* bytes) const {
    if (!with_targets_) return;
    const std::string_view rec = view_.record(static_cast<size_t>(i));
    bytes->insert(bytes->begin(), rec.begin(), rec.end());
  }

  std::unique_ptr<store::ObjectStore> store_;  // remote images: their store (else null)
  const uint64_t max_item_bytes_;
  const std::string prefix_;
  std::string root_;
  std::string held_;  // the table, when it could not be saved and mapped
  Mapping map_;
  annotations::CocoView view_;
  bool with_targets_;
  std::string origin_;
  std::vector<FieldSpan> spans_;
  std::vector<std::string> classes_;
  uint64_t fingerprint_ = 0;
};

bool CocoClaims(const std::string&) { return false; }  // only when the spec names it

// The table in the index cache, if it is this user's, private and current.
Result<std::pair<Mapping, annotations::CocoView>> MapTable(const std::string& path, uint64_t size,
                                                          int64_t mtime, const std::string& key) {
  uint64_t bytes = 0;
  NOSTALL_ASSIGN_OR_RETURN(UniqueFd fd, OpenReadOnly(path, &bytes));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || st.st_uid != ::getuid() || (st.st_mode & 022) != 0) {
    return DataError("not this user's private file");
  }
  if (bytes == 0) return DataError("empty");
  void* addr = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (addr == MAP_FAILED) return ErrnoError("cannot map " + path, errno);
  Mapping map(addr, bytes);
  NOSTALL_ASSIGN_OR_RETURN(annotations::CocoView view,
                           annotations::CocoView::Open(std::string_view(static_cast<const char*>(addr), bytes),
                                                       size, mtime, key));
  return std::make_pair(std::move(map), view);
}

// The annotation file: its stamp (size, and mtime or the ETag's hash) and
// how to parse it.
struct AnnotationFile {
  uint64_t size = 0;
  int64_t stamp = 0;
  std::string canonical;
  std::function<Result<annotations::CocoTable>()> parse;
};

Result<AnnotationFile> FindAnnotations(const CocoOptions& o) {
  AnnotationFile f;
  if (store::IsRemoteUri(o.annotations)) {
    NOSTALL_ASSIGN_OR_RETURN(store::Located at, store::OpenStore(o.annotations, o.s3, "coco"));
    Result<store::ObjectInfo> info = at.store->Stat(at.key);
    if (info.status().code() == StatusCode::kNotFound) {
      return NotFound("annotation file does not exist: " + o.annotations);
    }
    NOSTALL_RETURN_IF_ERROR(info.status());
    f.size = info.value().size;
    f.stamp = info.value().version;
    f.canonical = o.annotations;
    std::shared_ptr<store::ObjectStore> held = std::move(at.store);
    f.parse = [o, held, key = at.key, size = f.size]() -> Result<annotations::CocoTable> {
      std::vector<uint8_t> bytes;
      NOSTALL_RETURN_IF_ERROR(held->Read(key, 0, -1, &bytes, size + 1));
      return annotations::ParseCocoBytes(
          std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), o.table, o.annotations);
    };
    return f;
  }
  struct stat ast;
  if (::stat(o.annotations.c_str(), &ast) != 0) return NotFound("annotation file does not exist: " + o.annotations);
  f.size = static_cast<uint64_t>(ast.st_size);
  f.stamp = FileStamp(o.annotations, ast);
  char real[PATH_MAX];
  f.canonical = ::realpath(o.annotations.c_str(), real) ? real : o.annotations;
  f.parse = [o] { return annotations::ParseCocoFile(o.annotations, o.table); };
  return f;
}

// The node's lock on parsing the file whose table goes to `cache_path`:
// one process parses, the others (the ranks of one job, started together)
// wait for its table rather than each parsing the file. Invalid when the
// lock file cannot be made (then each parses).
UniqueFd ParseLock(const std::string& cache_path) {
  const std::string dir = cache_path.substr(0, cache_path.rfind('/'));
  ::mkdir(dir.c_str(), 0700);
  UniqueFd lock(::open((cache_path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (lock.valid()) {
    while (::flock(lock.get(), LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  return lock;
}

// The annotation file parsed, with a progress line, into the table's bytes;
// `took` says how long it took.
Result<std::string> ParseTable(AnnotationFile& file, const CocoOptions& o, const std::string& key,
                               std::string* took) {
  const auto t0 = std::chrono::steady_clock::now();
  annotations::CocoTable table;
  {
    IndexProgress progress(o.annotations, "annotation files", 1);
    NOSTALL_ASSIGN_OR_RETURN(table, file.parse());
    progress.Done(file.size, static_cast<int64_t>(table.images.size()));
  }
  std::string bytes = annotations::SerializeCoco(table, file.size, file.stamp, key);
  char text[64];
  std::snprintf(text, sizeof text, "parsed in %.1f s",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  *took = text;
  return bytes;
}

Result<std::unique_ptr<Source>> CocoOpen(const std::string& uri, const SourceOptions& options) {
  NOSTALL_ASSIGN_OR_RETURN(nlohmann::json j, DriverOptionsJson(options, "coco"));
  NOSTALL_ASSIGN_OR_RETURN(CocoOptions o, CocoReadOptions(j));
  std::string root = uri;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  std::unique_ptr<store::ObjectStore> images;
  std::string prefix;
  if (store::IsRemoteUri(root)) {
    NOSTALL_ASSIGN_OR_RETURN(store::Located at, store::OpenStore(root, o.s3, "coco"));
    images = std::move(at.store);
    prefix = at.key;
    if (!prefix.empty() && prefix.back() != '/') prefix += '/';
  } else {
    struct stat rst;
    if (::stat(root.c_str(), &rst) != 0 || !S_ISDIR(rst.st_mode)) {
      return NotFound("image folder does not exist: " + root);
    }
  }
  NOSTALL_ASSIGN_OR_RETURN(AnnotationFile file, FindAnnotations(o));
  bool with_targets = false;
  for (const FieldSpec& f : options.fields) with_targets |= f.kind == FieldKind::kTargets;
  const std::string key = OptionsKey(o);
  const std::string canonical = "coco\n" + file.canonical + "\n" + key;
  const std::string cache_path = options.use_index_cache ? IndexCachePath(options.index_cache_dir, canonical) : "";
  // The table's bytes: mapped from the cache, else parsed now (and saved).
  auto make = [&](std::string held, Mapping map, annotations::CocoView view, std::string origin) {
    return std::unique_ptr<Source>(new CocoSource(root, std::move(held), std::move(map), view, with_targets,
                                                  std::move(origin), std::move(images), prefix,
                                                  options.max_item_bytes));
  };
  if (!cache_path.empty()) {
    auto mapped = MapTable(cache_path, file.size, file.stamp, key);
    if (mapped.ok()) {
      auto [map, view] = std::move(mapped).value();
      return make("", std::move(map), view, "the index cache: " + cache_path);
    }
  }
  // One process of the node parses; the others wait for its table.
  UniqueFd lock;
  if (!cache_path.empty()) {
    lock = ParseLock(cache_path);
    if (lock.valid()) {
      auto mapped = MapTable(cache_path, file.size, file.stamp, key);
      if (mapped.ok()) {
        auto [map, view] = std::move(mapped).value();
        return make("", std::move(map), view, "the index cache: " + cache_path + " (parsed by another process)");
      }
    }
  }
  std::string took;
  NOSTALL_ASSIGN_OR_RETURN(std::string bytes, ParseTable(file, o, key, &took));
  if (!cache_path.empty() && WriteIndexFile(cache_path, bytes).ok()) {
    auto mapped = MapTable(cache_path, file.size, file.stamp, key);
    if (mapped.ok()) {
      auto [map, view] = std::move(mapped).value();
      return make("", std::move(map), view, took + "; saved to " + cache_path);
    }
  }
  NOSTALL_ASSIGN_OR_RETURN(annotations::CocoView view, annotations::CocoView::Open(bytes, file.size, file.stamp, key));
  // The view points into `bytes`, which the source keeps (a moved
  // std::string keeps its heap buffer; the table is never short).
  return make(std::move(bytes), Mapping(), view, took + "; held in memory");
}

}  // namespace

SourceDriver CocoDriver() { return {"coco", CocoClaims, CocoOpen, CocoResolveOptions}; }

}  // namespace nostall
