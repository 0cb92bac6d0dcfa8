// IndexedSource: reads of whole files or spans of shards by index entry, and
// the index cache around building an Index.
#include "source/index/indexed_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>

#include <malloc.h>
#include <xxhash.h>

#include "common/clock.h"
#include "common/fd.h"
#include "source/driver.h"
#include "source/local_options.h"

namespace nostall {
namespace {

using json = nlohmann::json;

class IndexedSource final : public IndexSource {
 public:
  IndexedSource(IndexViewPtr index, RecordTable records, const char* kind, uint64_t max_item_bytes,
                bool drop_page_cache)
      : IndexSource(std::move(index), std::move(records)),
        kind_(kind),
        max_item_bytes_(max_item_bytes),
        drop_page_cache_(drop_page_cache) {}
  IndexedSource(std::shared_ptr<LazyShards> lazy, const char* kind, uint64_t max_item_bytes,
                bool drop_page_cache)
      : IndexSource(std::move(lazy)),
        kind_(kind),
        max_item_bytes_(max_item_bytes),
        drop_page_cache_(drop_page_cache) {}
  const char* kind() const override { return kind_; }

  Status Evict(int64_t i) const override {
    if (folder()) {
      const std::string path = key(i);
      for (int f = 0; f < records_.extra && !records_.beside.empty(); ++f) {
        const int32_t ext = records_.beside[static_cast<size_t>(i) * records_.extra + f];
        if (ext >= 0) (void)DropFromPageCache(BesideImage(path, index_->member_exts()[ext]));
      }
      return DropFromPageCache(path);
    }
    const ItemWhere w = Where(i);
    return DropFromPageCache(ShardName(w.container), w.offset, static_cast<uint64_t>(w.size));
  }

  Status Read(int64_t i, std::vector<uint8_t>* out) const override {
    if (!records_.beside.empty()) return ReadBeside(i, out);
    if (folder()) return ReadWholeFile(key(i), max_item_bytes_, out, drop_page_cache_);
    const ItemWhere w = Where(i);
    if (static_cast<uint64_t>(w.size) > max_item_bytes_) {
      return DataError("member is over the item size limit");
    }
    NOSTALL_ASSIGN_OR_RETURN(UniqueFd fd, OpenReadOnly(ShardName(w.container)));
    out->resize(static_cast<size_t>(w.size));
    Status st = PreadExact(fd.get(), w.offset, out->size(), out->data());
    if (drop_page_cache_) {
      ::posix_fadvise(fd.get(), static_cast<off_t>(w.offset), w.size, POSIX_FADV_DONTNEED);
    }
    return st;
  }

 private:
  // An image folder's record: the files beside the image its fields take,
  // then the image (RecordTable::beside), each checked against the size it
  // had when the loader was made.
  Status ReadBeside(int64_t i, std::vector<uint8_t>* out) const {
    const std::string image = key(i);
    const FieldSpan* spans = record(i);
    out->clear();
    std::vector<uint8_t> bytes;
    for (int f = 0; f < records_.extra; ++f) {
      const int32_t ext = records_.beside[static_cast<size_t>(i) * records_.extra + f];
      if (ext < 0) continue;
      const std::string path = BesideImage(image, index_->member_exts()[ext]);
      NOSTALL_RETURN_IF_ERROR(ReadWholeFile(path, max_item_bytes_, &bytes, drop_page_cache_));
      if (static_cast<int64_t>(bytes.size()) != spans[1 + f].size) {
        return DataError(path + " changed while the loader ran: " +
                         std::to_string(spans[1 + f].size) + " bytes when the loader was made, " +
                         std::to_string(bytes.size()) + " now");
      }
      out->insert(out->end(), bytes.begin(), bytes.end());
    }
    if (out->size() >= max_item_bytes_) return DataError("the record is over the item size limit");
    NOSTALL_RETURN_IF_ERROR(ReadWholeFile(image, max_item_bytes_ - out->size(), &bytes, drop_page_cache_));
    out->insert(out->end(), bytes.begin(), bytes.end());
    return Status::OK();
  }

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

bool IsAudioExtension(const std::string& ext) {
  std::string lower = ext;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "wav" || lower == "flac" || lower == "mp3" || lower == "ogg" || lower == "opus";
}

bool IsVideoExtension(const std::string& ext) {
  std::string lower = ext;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "mp4" || lower == "mkv" || lower == "webm" || lower == "avi" || lower == "mov" || lower == "m4v";
}

bool IsMediaExtension(const std::string& ext, Media media) {
  switch (media) {
    case Media::kAudio: return IsAudioExtension(ext);
    case Media::kVideo: return IsVideoExtension(ext);
    case Media::kImage: break;
  }
  return IsImageExtension(ext);
}

bool IsMediaFileName(const std::string& name, Media media) {
  return IsMediaExtension(FileExtension(name), media);
}

Media MediaOf(const SourceOptions& options) {
  for (const FieldSpec& f : options.fields) {
    if (f.kind == FieldKind::kAudio) return Media::kAudio;
    if (f.kind == FieldKind::kVideo) return Media::kVideo;
  }
  return Media::kImage;
}

const char* MediaSuffix(Media media) {
  return media == Media::kAudio ? " audio" : media == Media::kVideo ? " video" : "";
}

bool VariantServes(const std::string& built, const std::string& wanted) {
  // An index of audio (video) items serves only audio (video), and one of
  // images only images; within each, the strictest build ("raise") serves
  // every policy.
  auto media = [](const std::string& v) -> std::string {
    for (const std::string s : {" audio", " video"}) {
      if (v.size() >= s.size() && v.compare(v.size() - s.size(), s.size(), s) == 0) return s;
    }
    return "";
  };
  if (media(built) != media(wanted)) return false;
  const std::string b = built.substr(0, built.size() - media(built).size());
  return built == wanted || b == "raise";
}

namespace {

// The index beside the data, if it is there and may be used: its origin, or
// why not (`note`; "" when there is none).
IndexViewPtr ReadBeside(const IndexedDataset& d, std::string* note) {
  struct stat st;
  if (::lstat(d.beside.c_str(), &st) != 0) return nullptr;
  // Trusted as the data is: this user's, or the data's owner's.
  struct stat rst;
  const int64_t owner = ::stat(d.root.c_str(), &rst) == 0 ? static_cast<int64_t>(rst.st_uid) : -1;
  Result<IndexViewPtr> r = MapIndexFile(d.beside, d.root, owner);
  const std::string fix = "; run `nostall index` on the dataset to write it again";
  if (!r.ok()) {
    *note = "the index beside the data is not used: " + r.status().message() + fix;
    return nullptr;
  }
  if (!VariantServes(r.value()->variant(), d.variant)) {
    *note = "the index beside the data (" + d.beside + ") was built with skip_bad_samples: it is "
            "not used by a loader that raises on bad samples";
    return nullptr;
  }
  if (!StampsStillHold(*r.value(), /*portable=*/true)) {
    *note = "the index beside the data (" + d.beside + ") is stale: the data changed after it was "
            "written, so it is not used" + fix;
    return nullptr;
  }
  return std::move(r).value();
}

// Writes the index beside the data. Published as a new file (renamed into
// place): a job that has the old one mapped keeps it, whatever the new one
// holds. Publishing it changes the folder it lies in, so the folder's own
// stamp is taken again after, and written over the new file: the same
// fields at the same size, so no reader can fault past its end.
Status WriteBeside(const IndexedDataset& d, Index index) {
  auto restamp = [&]() -> Status {
    for (IndexStamp& s : index.stamps) {
      if (s.path != d.root) continue;
      struct stat st;
      if (::stat(d.root.c_str(), &st) != 0) return ErrnoError("cannot stat " + d.root, errno);
      const IndexStamp now = StampOf(d.root, st, -1);
      if (now.inode != s.inode) return IoError(d.root + " changed while it was indexed");
      s = now;
    }
    return Status::OK();
  };
  NOSTALL_RETURN_IF_ERROR(restamp());
  const std::string first = SerializeIndex(index, d.root);
  NOSTALL_RETURN_IF_ERROR(WriteIndexFile(d.beside, first, /*mode=*/0644));
  NOSTALL_RETURN_IF_ERROR(restamp());
  const std::string stamped = SerializeIndex(index, d.root);
  if (stamped == first) return Status::OK();
  if (stamped.size() != first.size()) return Internal("the index changed size when stamped again");
  return OverwriteIndexSameSize(d.beside, stamped);
}

// Local shards indexed as read: a few ahead of the first epoch.
constexpr int kLazyShardsAtOnce = 4;

// The index already made, beside the data (`beside`) or in the index cache,
// where the mode lets it be read and its files' stamps still hold; null to
// build. `cache_path`: where the index cache keeps it (empty: no cache).
IndexViewPtr IndexFound(const IndexedDataset& d, const SourceOptions& options, bool beside,
                        std::string* cache_path, std::string* origin, std::string* note) {
  const bool rebuild = options.index_beside == "rebuild";
  if (options.use_index_cache) {
    const std::string key = std::string(d.kind) + "\n" + d.canonical + IndexVariant(options);
    *cache_path = IndexCachePath(options.index_cache_dir, key);
  }
  if (rebuild) return nullptr;
  if (beside) {
    IndexViewPtr index = ReadBeside(d, note);
    if (index != nullptr) {
      *origin = "beside the data: " + d.beside;
      return index;
    }
  }
  if (!options.use_index_cache) return nullptr;
  Result<IndexViewPtr> cached = MapIndexFile(*cache_path, d.root);
  if (!cached.ok() || !StampsStillHold(*cached.value())) return nullptr;
  *origin = "the index cache: " + *cache_path;
  return std::move(cached).value();
}

}  // namespace

Result<std::unique_ptr<Source>> OpenIndexed(const IndexedDataset& d, const SourceOptions& options) {
  NOSTALL_ASSIGN_OR_RETURN(json given, DriverOptionsJson(options, d.kind));
  NOSTALL_ASSIGN_OR_RETURN(LocalOptions local, ReadLocalOptions(given, /*cached=*/false, d.kind));
  const std::string& mode = options.index_beside;
  if (mode != "read" && mode != "write" && mode != "rebuild" && mode != "off") {
    return InvalidArgument("index_beside must be \"read\", \"write\", \"rebuild\" or \"off\", not \"" +
                           mode + "\"");
  }
  const bool beside = !d.beside.empty() && mode != "off";
  if (mode == "rebuild" && d.beside.empty()) {
    return InvalidArgument("this dataset's layout has no place for an index beside it (tar shards "
                           "in more than one folder)");
  }
  std::string cache_path, origin, note;
  IndexViewPtr index = IndexFound(d, options, beside, &cache_path, &origin, &note);
  const auto t0 = std::chrono::steady_clock::now();
  const bool write_beside = beside && mode != "read";
  // The built index: written beside the data as asked, then saved and
  // mapped (nothing per item stays in the process).
  auto finish = [d, write_beside, mode, cache_path, t0](Index built, std::string* origin,
                                                       std::string* note) -> Result<IndexViewPtr> {
    built.variant = d.variant;
    std::string bytes = SerializeIndex(built, d.root);
    *origin = "built in " + SecondsSince(t0);
    if (write_beside) {
      Status st = WriteBeside(d, std::move(built));
      if (!st.ok() && mode == "rebuild") return st;
      if (st.ok()) {
        *origin += "; written beside the data: " + d.beside;
        note->clear();
      } else {
        *note = "the index could not be written beside the data: " + st.message();
      }
    }
    built = Index{};
    // The builder's many small strings are gone: give their pages back.
    ::malloc_trim(0);
    // Saved, the index is mapped from the file, shared with every process
    // that opens the dataset; a cache that cannot be written only costs the
    // next run a rebuild, and this one the index in its own memory.
    return SaveAndMapIndex(cache_path, std::move(bytes), d.root, origin);
  };
  // (Fields beyond the media and its label need the whole index to select
  // their members, as on S3: the loader asks for lazy indexing only then.)
  const bool extra_fields = std::any_of(options.fields.begin(), options.fields.end(), [](const FieldSpec& f) {
    return !IsMediaKind(f.kind) && f.kind != FieldKind::kLabel;
  });
  if (index == nullptr && options.lazy_index && d.index_one && !extra_fields) {
    auto lazy = std::make_shared<LazyShards>(
        d.header.shards, d.header, kLazyShardsAtOnce, d.index_one,
        [finish, note](Index whole, std::string* origin) mutable {
          return finish(std::move(whole), origin, &note);
        });
    auto source = std::make_unique<IndexedSource>(std::move(lazy), d.kind, options.max_item_bytes,
                                                  local.drop_page_cache);
    source->SetIndexOrigin("", std::move(note));
    return Throttled(std::move(source), local);
  }
  if (index == nullptr) {
    NOSTALL_ASSIGN_OR_RETURN(Index built, d.build());
    NOSTALL_ASSIGN_OR_RETURN(index, finish(std::move(built), &origin, &note));
  }
  NOSTALL_ASSIGN_OR_RETURN(RecordTable records, SelectFields(options, *index));
  auto source = std::make_unique<IndexedSource>(std::move(index), std::move(records), d.kind,
                                                options.max_item_bytes, local.drop_page_cache);
  source->SetIndexOrigin(std::move(origin), std::move(note));
  return Throttled(std::move(source), local);
}

TarIndexOptions TarOptionsOf(const SourceOptions& options) {
  TarIndexOptions t;
  t.skip_bad = options.skip_bad_samples;
  t.media = MediaOf(options);
  t.need_label = options.fields.empty() ||
                 std::any_of(options.fields.begin(), options.fields.end(),
                             [](const FieldSpec& f) { return f.kind == FieldKind::kLabel; });
  return t;
}

std::string IndexVariant(const SourceOptions& options) {
  return std::string(options.skip_bad_samples ? "skip" : "raise") +
         (TarOptionsOf(options).need_label ? "" : " nolabel") + MediaSuffix(MediaOf(options));
}

namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Joined(const std::vector<std::string>& exts) {
  std::string out;
  for (const std::string& e : exts) out += (out.empty() ? "." : ", .") + e;
  return out;
}

}  // namespace

const IndexView* IndexSource::Whole() const {
  if (!lazy_) return index_.get();
  Status error;
  return lazy_->Whole(&error);
}

const std::vector<std::string>& IndexSource::classes() const {
  static const std::vector<std::string> kNone;
  const IndexView* w = Whole();
  return w ? w->classes() : kNone;
}

uint64_t IndexSource::fingerprint() const {
  if (!lazy_) return fingerprint_;
  const IndexView* w = Whole();
  return w ? RecordsFingerprint(*w, records_) : 0;
}

std::string IndexSource::index_origin() const {
  if (!lazy_) return origin_;
  if (!lazy_->complete()) return "being indexed as the shards are first read (the first epoch is buffered)";
  return "indexed as the shards were first read; " + lazy_->origin();
}

namespace {
// A whole index's shards as the buffered epoch counts them: the items are
// in shard order, so a shard's samples are a run of ids.
class IndexShards final : public ShardedItems {
 public:
  explicit IndexShards(const IndexView& index) : index_(index), base_(index.shards().size() + 1, 0) {
    for (int64_t i = 0; i < index.size(); ++i) ++base_[static_cast<size_t>(index.item(i).container) + 1];
    for (size_t s = 1; s < base_.size(); ++s) base_[s] += base_[s - 1];
  }
  int64_t shard_count() const override { return static_cast<int64_t>(base_.size()) - 1; }
  bool complete() const override { return true; }
  void Begin(const std::vector<int64_t>&) override {}
  Result<int64_t> Count(int64_t s) override {
    return base_[static_cast<size_t>(s) + 1] - base_[static_cast<size_t>(s)];
  }
  Result<int64_t> Total() override { return index_.size(); }
  int64_t Id(int64_t s, int64_t member) const override { return base_[static_cast<size_t>(s)] + member; }
  int64_t StableKey(int64_t id) const override {
    const size_t s = static_cast<size_t>(std::upper_bound(base_.begin(), base_.end() - 1, id) - base_.begin()) - 1;
    return ShardMemberKey(static_cast<int64_t>(s), id - base_[s]);
  }

 private:
  const IndexView& index_;
  std::vector<int64_t> base_;
};
}  // namespace

std::shared_ptr<ShardedItems> IndexSource::sharded() const {
  if (lazy_) return lazy_;
  if (index_->folder() || !records_.kept.empty()) return nullptr;
  std::call_once(sharded_once_, [&] { sharded_ = std::make_shared<IndexShards>(*index_); });
  return sharded_;
}

std::vector<std::pair<std::string, int64_t>> IndexSource::members_found() const {
  const IndexView* index = Whole();
  if (index == nullptr) return {};
  if (index->folder() && !index->has_members()) return {};
  std::vector<std::pair<std::string, int64_t>> counts;
  auto add = [&](const std::string& ext) {
    for (auto& [e, n] : counts) {
      if (e == ext) {
        ++n;
        return;
      }
    }
    counts.push_back({ext, 1});
  };
  for (int64_t i = 0; i < size(); ++i) {
    const int64_t raw = Raw(i);
    const std::string name(index->name(raw));
    if (index->folder()) {  // a folder's image file, and the files beside it
      add(FileExtension(name));
    } else {
      std::string sample, ext;
      SplitMemberName(name, &sample, &ext);
      add(ext);
      if (index->item(raw).label >= 0) add("cls");
    }
    if (!index->has_members()) continue;
    for (const IndexView::Member* m = index->members_begin(raw); m != index->members_end(raw); ++m) {
      add(index->folder() ? Lower(index->member_exts()[m->ext]) : index->member_exts()[m->ext]);
    }
  }
  std::stable_sort(counts.begin(), counts.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return counts;
}

uint64_t RecordsFingerprint(const IndexView& index, const RecordTable& records) {
  uint64_t h = index.fingerprint();
  auto mix = [&h](const void* p, size_t n) { h = XXH3_64bits_withSeed(p, n, h); };
  // The items kept and their records' spans: a cache of records is not one
  // of images.
  mix(records.kept.data(), records.kept.size() * sizeof(int64_t));
  mix(records.item_span.data(), records.item_span.size() * sizeof(RecordTable::Span));
  if (records.beside.empty()) return h;  // a tar record's span already tells it apart
  mix(records.spans.data(), records.spans.size() * sizeof(FieldSpan));
  for (int32_t ext : records.beside) {
    const std::string name = ext < 0 ? "" : index.member_exts()[static_cast<size_t>(ext)];
    mix(name.data(), name.size());
    mix("/", 1);
  }
  return h;
}

std::string BesideImage(const std::string& image_path, const std::string& ext) {
  return image_path.substr(0, image_path.rfind('.')) + "." + ext;
}

namespace {

// An image folder's fields besides the image and its class: the files
// beside each image (STEM.EXT), whose sizes are taken here, as they are
// when the loader is made (a file edited in place changes no directory's
// stamp, so the index cannot keep them).
Result<RecordTable> SelectFilesBeside(const SourceOptions& options,
                                      const std::vector<const FieldSpec*>& extra,
                                      const IndexView& index) {
  RecordTable t;
  t.extra = static_cast<int>(extra.size());
  t.room.assign(extra.size(), 0);
  std::vector<std::string> lower;  // member_exts as the fields name them
  for (const std::string& e : index.member_exts()) lower.push_back(Lower(e));
  const bool has_members = index.has_members();
  t.spans.reserve(static_cast<size_t>(index.size()) * (1 + extra.size()));
  t.beside.reserve(static_cast<size_t>(index.size()) * extra.size());
  std::vector<FieldSpan> spans(1 + extra.size());
  std::vector<int32_t> picks(extra.size());
  for (int64_t i = 0; i < index.size(); ++i) {
    const std::string image = index.key(i);
    std::string why;
    uint64_t offset = 0;
    for (size_t f = 0; f < extra.size() && why.empty(); ++f) {
      spans[1 + f] = FieldSpan{};
      picks[f] = -1;
      // The first of the field's extensions (preferred first) with a file.
      for (size_t x = 0; x < extra[f]->extensions.size() && picks[f] < 0 && has_members; ++x) {
        for (const IndexView::Member* m = index.members_begin(i); m != index.members_end(i); ++m) {
          struct stat st;
          if (lower[m->ext] == extra[f]->extensions[x] &&
              ::stat(BesideImage(image, index.member_exts()[m->ext]).c_str(), &st) == 0 &&
              S_ISREG(st.st_mode)) {
            picks[f] = static_cast<int32_t>(m->ext);
            spans[1 + f] = {offset, static_cast<int64_t>(st.st_size)};
            break;
          }
        }
      }
      if (picks[f] < 0) {
        if (!extra[f]->optional) {
          why = "field '" + extra[f]->name + "': no " + Joined(extra[f]->extensions) +
                " file beside the image (optional=true gives None instead)";
        }
      } else if (static_cast<uint64_t>(spans[1 + f].size) > options.max_field_bytes) {
        why = "field '" + extra[f]->name + "': " + BesideImage(image, index.member_exts()[picks[f]]) +
              " is " + std::to_string(spans[1 + f].size) + " bytes, over max_field_bytes=" +
              std::to_string(options.max_field_bytes);
      } else {
        offset += static_cast<uint64_t>(spans[1 + f].size);
      }
    }
    if (!why.empty()) {
      if (!options.skip_bad_samples) return DataError(why).WithItem(image, "index");
      ++t.skipped;
      continue;
    }
    spans[0] = {offset, -1};  // the image, read last, to the end
    for (size_t f = 0; f < spans.size(); ++f) {
      t.spans.push_back(spans[f]);
      if (f > 0) t.room[f - 1] = std::max(t.room[f - 1], spans[f].size);
    }
    t.beside.insert(t.beside.end(), picks.begin(), picks.end());
    t.kept.push_back(i);
  }
  if (t.kept.empty()) {
    return NotFound("no image of the folder has every field asked for beside it (" +
                    std::to_string(t.skipped) + " skipped)");
  }
  if (t.skipped == 0) t.kept = {};  // every item, as the index numbers them
  // The files the fields read are no longer left out.
  t.left_out_changed = true;
  t.left_out = index.left_out();
  for (const FieldSpec* f : extra) {
    for (const std::string& x : f->extensions) {
      const std::string last = FileExtension("f." + x);
      auto& left = t.left_out;
      left.erase(std::remove_if(left.begin(), left.end(),
                                [&](const auto& l) { return l.first == last; }),
                 left.end());
    }
  }
  return t;
}

}  // namespace

namespace {

// Each sample's members for the fields asked for, in a shard index with
// members: the image (its first image member if the field takes its
// extension, in the field's order of preference, else another member the
// field names) and each extra field's.
class MemberSelect {
 public:
  MemberSelect(const SourceOptions& options, const IndexView& index, const FieldSpec* image,
               std::vector<const FieldSpec*> extra)
      : options_(options), index_(index), image_(image), extra_(std::move(extra)) {
    image_ids_ = Ids(*image_);
    for (const FieldSpec* f : extra_) extra_ids_.push_back(Ids(*f));
  }

  // Sample i's absolute spans (image first; size -1: none), or why it cannot be read.
  std::string Locate(int64_t i, std::vector<std::pair<uint64_t, int64_t>>* at) const {
    const IndexView::Item& e = index_.item(i);
    std::string sample, main_ext;
    SplitMemberName(std::string(index_.name(i)), &sample, &main_ext);
    (*at)[0] = {0, -1};
    for (size_t k = 0; k < image_->extensions.size() && (*at)[0].second < 0; ++k) {
      if (image_->extensions[k] == main_ext) {
        (*at)[0] = {e.offset, e.size};
      } else if (const IndexView::Member* m = Member(i, image_ids_[k])) {
        (*at)[0] = {m->offset, m->size};
      }
    }
    if ((*at)[0].second < 0) {
      return "field '" + image_->name + "': the sample has no " + Joined(image_->extensions) + " member";
    }
    for (size_t f = 0; f < extra_.size(); ++f) {
      const IndexView::Member* m = Find(i, extra_ids_[f]);
      (*at)[1 + f] = m ? std::make_pair(m->offset, m->size) : std::make_pair(uint64_t{0}, int64_t{-1});
      if (!m && !extra_[f]->optional) {
        return "field '" + extra_[f]->name + "': the sample has no " + Joined(extra_[f]->extensions) +
               " member (optional=true gives None instead)";
      }
      if (m && static_cast<uint64_t>(m->size) > options_.max_field_bytes) {
        return "field '" + extra_[f]->name + "': its member is " + std::to_string(m->size) +
               " bytes, over max_field_bytes=" + std::to_string(options_.max_field_bytes);
      }
    }
    return "";
  }

 private:
  // A field's extensions as member_exts ids (-1: no sample has one).
  std::vector<int64_t> Ids(const FieldSpec& f) const {
    const std::vector<std::string>& exts = index_.member_exts();
    std::vector<int64_t> out;
    for (const std::string& e : f.extensions) {
      auto it = std::find(exts.begin(), exts.end(), e);
      out.push_back(it == exts.end() ? -1 : it - exts.begin());
    }
    return out;
  }
  // The member of item i with extension `id` (-1: none has it).
  const IndexView::Member* Member(int64_t i, int64_t id) const {
    if (!index_.has_members() || id < 0) return nullptr;
    for (const IndexView::Member* m = index_.members_begin(i); m != index_.members_end(i); ++m) {
      if (m->ext == static_cast<uint32_t>(id)) return m;
    }
    return nullptr;
  }
  // The member of item i with one of `want`'s extensions, first preferred.
  const IndexView::Member* Find(int64_t i, const std::vector<int64_t>& want) const {
    for (int64_t id : want) {
      if (const IndexView::Member* m = Member(i, id)) return m;
    }
    return nullptr;
  }

  const SourceOptions& options_;
  const IndexView& index_;
  const FieldSpec* image_;
  std::vector<const FieldSpec*> extra_;
  std::vector<int64_t> image_ids_;
  std::vector<std::vector<int64_t>> extra_ids_;
};

// Sample i's record: its spans relative to the bytes read for it (the
// smallest range holding every member).
void AddRecord(int64_t i, const std::vector<std::pair<uint64_t, int64_t>>& at, RecordTable* t) {
  uint64_t lo = at[0].first, hi = at[0].first + static_cast<uint64_t>(at[0].second);
  for (const auto& [off, size] : at) {
    if (size < 0) continue;
    lo = std::min(lo, off);
    hi = std::max(hi, off + static_cast<uint64_t>(size));
  }
  for (size_t f = 0; f < at.size(); ++f) {
    t->spans.push_back(at[f].second < 0 ? FieldSpan{} : FieldSpan{at[f].first - lo, at[f].second});
    if (f > 0) t->room[f - 1] = std::max(t->room[f - 1], at[f].second);
  }
  t->kept.push_back(i);
  t->item_span.push_back({lo, static_cast<int64_t>(hi - lo)});
}

}  // namespace

Result<RecordTable> SelectFields(const SourceOptions& options, const IndexView& index) {
  RecordTable t;
  if (options.fields.empty()) return t;
  NOSTALL_RETURN_IF_ERROR(ValidateFields(options.fields));
  const FieldSpec* image = nullptr;
  std::vector<const FieldSpec*> extra;
  for (const FieldSpec& f : options.fields) {
    if (IsMediaKind(f.kind)) image = &f;
    if (!IsMediaKind(f.kind) && f.kind != FieldKind::kLabel) extra.push_back(&f);
  }
  if (index.folder()) {
    if (extra.empty()) return t;  // the image and its label, as always
    return SelectFilesBeside(options, extra, index);
  }
  t.extra = static_cast<int>(extra.size());
  t.room.assign(extra.size(), 0);
  t.spans.reserve(static_cast<size_t>(index.size()) * (1 + extra.size()));
  t.item_span.reserve(static_cast<size_t>(index.size()));
  const MemberSelect select(options, index, image, extra);
  std::vector<std::pair<uint64_t, int64_t>> at(1 + extra.size());  // absolute spans
  for (int64_t i = 0; i < index.size(); ++i) {
    const std::string why = select.Locate(i, &at);
    if (why.empty()) {
      AddRecord(i, at, &t);
      continue;
    }
    if (!options.skip_bad_samples) {
      std::string sample, ext;
      SplitMemberName(std::string(index.name(i)), &sample, &ext);
      return DataError(why).WithItem(index.shards()[static_cast<size_t>(index.item(i).container)] + ":" + sample,
                                     "index");
    }
    ++t.skipped;
  }
  if (t.kept.empty()) {
    return NotFound("no sample of the dataset has every field asked for (" + std::to_string(t.skipped) + " skipped)");
  }
  if (t.skipped == 0) t.kept = {};  // every item, as the index numbers them
  return t;
}

}  // namespace nostall
