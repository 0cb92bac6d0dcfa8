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

// An item that is one local file, read where wanted (Source::OpenItem).
class LocalItemFile final : public ItemFile {
 public:
  LocalItemFile(UniqueFd fd, uint64_t size, uint64_t whole_limit)
      : fd_(std::move(fd)), size_(size), whole_limit_(whole_limit) {}
  uint64_t size() const override { return size_; }
  uint64_t whole_limit() const override { return whole_limit_; }
  Status ReadAt(uint64_t offset, size_t n, uint8_t* out) const override {
    if (offset > size_ || n > size_ - offset) return InvalidArgument("a read past the file's end");
    Status st = PreadExact(fd_.get(), offset, n, out);
    if (!st.ok()) return DataError("the file changed while it was read (" + st.message() + ")");
    return Status::OK();
  }

 private:
  UniqueFd fd_;
  uint64_t size_;
  uint64_t whole_limit_;
};

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

  Result<std::shared_ptr<const ItemFile>> OpenItem(int64_t i) const override {
    // (A record of several files, or pages to drop after the read: whole.)
    if (!folder() || HasBeside(i) || drop_page_cache_) return std::shared_ptr<const ItemFile>();
    // (Read in parts, a file may be over the item limit: a decoder that
    // reads it whole checks whole_limit().)
    uint64_t size = 0;
    NOSTALL_ASSIGN_OR_RETURN(UniqueFd fd, OpenReadOnly(key(i), &size));
    return std::shared_ptr<const ItemFile>(std::make_shared<LocalItemFile>(std::move(fd), size, max_item_bytes_));
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
  // Whether item i's record holds files beside its own.
  bool HasBeside(int64_t i) const {
    for (int f = 0; f < records_.extra && !records_.beside.empty(); ++f) {
      if (records_.beside[static_cast<size_t>(i) * records_.extra + f] >= 0) return true;
    }
    return false;
  }

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
      add(index->folder() ? LowerAscii(index->member_exts()[m->ext]) : index->member_exts()[m->ext]);
    }
  }
  std::stable_sort(counts.begin(), counts.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return counts;
}

}  // namespace nostall
