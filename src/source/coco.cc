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
//   options: annotations  the instances JSON (required)
//            empty        "keep" (default) or "drop": images without annotations
//            crowd        "keep" (default) or "drop": iscrowd annotations
//            segmentation keep polygons and RLE, for masks (default false)
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
#include "source/index_file.h"
#include "source/index_progress.h"

namespace nostall {
namespace {

struct CocoOptions {
  std::string annotations;
  annotations::CocoOptions table;
};

Result<CocoOptions> ReadOptions(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidArgument("the coco driver's options must be an object");
  NOSTALL_RETURN_IF_ERROR(CheckKeys(j, "the coco driver's options", {"annotations", "empty", "crowd", "segmentation"}));
  CocoOptions o;
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

Result<nlohmann::json> ResolveOptions(const nlohmann::json& given, bool) {
  NOSTALL_ASSIGN_OR_RETURN(CocoOptions o, ReadOptions(given));
  return nlohmann::json{{"annotations", o.annotations},
                        {"empty", o.table.keep_empty ? "keep" : "drop"},
                        {"crowd", o.table.keep_crowd ? "keep" : "drop"},
                        {"segmentation", o.table.segmentation}};
}

std::string OptionsKey(const CocoOptions& o) {
  return std::string(o.table.keep_empty ? "e" : "-") + (o.table.keep_crowd ? "c" : "-") +
         (o.table.segmentation ? "s" : "-");
}

class CocoSource final : public Source {
 public:
  CocoSource(std::string root, std::string table_bytes, Mapping map, annotations::CocoView view,
             bool with_targets, std::string origin)
      : root_(std::move(root)),
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
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < view_.size(); ++i) {
      for (char c : view_.file_name(i)) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
      for (char c : view_.record(i)) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    }
    fingerprint_ = h ^ (with_targets_ ? 0x74617267ull : 0);
  }

  int64_t size() const override { return static_cast<int64_t>(view_.size()); }
  std::string key(int64_t i) const override { return std::string(view_.file_name(static_cast<size_t>(i))); }
  int64_t label(int64_t i) const override { return view_.count(static_cast<size_t>(i)); }
  int64_t byte_size(int64_t) const override { return -1; }
  const std::vector<std::string>& classes() const override { return classes_; }
  uint64_t fingerprint() const override { return fingerprint_; }
  int64_t skipped_at_index() const override { return view_.dropped_empty(); }
  const FieldSpan* record(int64_t i) const override {
    return with_targets_ ? &spans_[static_cast<size_t>(i) * 2] : nullptr;
  }
  int extra_fields() const override { return with_targets_ ? 1 : 0; }
  int64_t field_room(int) const override { return static_cast<int64_t>(view_.max_record()); }
  int64_t max_annotations() const override { return view_.max_count(); }
  std::string index_origin() const override { return origin_; }
  const char* kind() const override { return "coco"; }

  Status Read(int64_t i, std::vector<uint8_t>* out) const override {
    const std::string path = root_ + "/" + key(i);
    uint64_t size = 0;
    NOSTALL_ASSIGN_OR_RETURN(UniqueFd fd, OpenReadOnly(path, &size));
    if (size > (1ull << 30)) return DataError("image file is over 1 GiB");
    const std::string_view rec = with_targets_ ? view_.record(static_cast<size_t>(i)) : std::string_view();
    out->resize(rec.size() + size);
    std::memcpy(out->data(), rec.data(), rec.size());
    return PreadExact(fd.get(), 0, size, out->data() + rec.size());
  }

 private:
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

bool Claims(const std::string&) { return false; }  // only when the spec names it

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

Result<std::unique_ptr<Source>> Open(const std::string& uri, const SourceOptions& options) {
  NOSTALL_ASSIGN_OR_RETURN(nlohmann::json j, DriverOptionsJson(options, "coco"));
  NOSTALL_ASSIGN_OR_RETURN(CocoOptions o, ReadOptions(j));
  std::string root = uri;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  struct stat rst;
  if (::stat(root.c_str(), &rst) != 0 || !S_ISDIR(rst.st_mode)) {
    return NotFound("image folder does not exist: " + root);
  }
  struct stat ast;
  if (::stat(o.annotations.c_str(), &ast) != 0) return NotFound("annotation file does not exist: " + o.annotations);
  bool with_targets = false;
  for (const FieldSpec& f : options.fields) with_targets |= f.kind == FieldKind::kTargets;
  const std::string key = OptionsKey(o);
  char real[PATH_MAX];
  const std::string canonical =
      std::string("coco\n") + (::realpath(o.annotations.c_str(), real) ? real : o.annotations) + "\n" + key;
  const std::string cache_path = options.use_index_cache ? IndexCachePath(options.index_cache_dir, canonical) : "";
  const int64_t mtime = MtimeNs(ast);
  const uint64_t size = static_cast<uint64_t>(ast.st_size);
  if (!cache_path.empty()) {
    auto mapped = MapTable(cache_path, size, mtime, key);
    if (mapped.ok()) {
      auto [map, view] = std::move(mapped).value();
      return std::unique_ptr<Source>(new CocoSource(root, "", std::move(map), view, with_targets,
                                                    "the index cache: " + cache_path));
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  annotations::CocoTable table;
  {
    IndexProgress progress(o.annotations, "annotation files", 1);
    NOSTALL_ASSIGN_OR_RETURN(table, annotations::ParseCocoFile(o.annotations, o.table));
    progress.Done(size, static_cast<int64_t>(table.images.size()));
  }
  std::string bytes = annotations::SerializeCoco(table, size, mtime, key);
  table = annotations::CocoTable();
  char took[64];
  std::snprintf(took, sizeof took, "parsed in %.1f s",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (!cache_path.empty() && WriteIndexFile(cache_path, bytes).ok()) {
    auto mapped = MapTable(cache_path, size, mtime, key);
    if (mapped.ok()) {
      auto [map, view] = std::move(mapped).value();
      return std::unique_ptr<Source>(new CocoSource(root, "", std::move(map), view, with_targets,
                                                    std::string(took) + "; saved to " + cache_path));
    }
  }
  NOSTALL_ASSIGN_OR_RETURN(annotations::CocoView view, annotations::CocoView::Open(bytes, size, mtime, key));
  // The view points into `bytes`, which the source keeps (moving a
  // std::string keeps its heap buffer).
  auto source = std::unique_ptr<Source>(new CocoSource(root, std::move(bytes), Mapping(), view, with_targets,
                                                       std::string(took) + "; held in memory"));
  return source;
}

}  // namespace

SourceDriver CocoDriver() { return {"coco", Claims, Open, ResolveOptions}; }

}  // namespace nostall
