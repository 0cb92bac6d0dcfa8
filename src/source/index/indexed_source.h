// A Source over local files described by an Index (index_file.h): whole
// files (an image folder) or byte spans of files (tar shards). Both local
// drivers build their Index once and open it through OpenIndexed, which keeps
// it in the index cache between runs.
#ifndef NOSTALL_SOURCE_INDEX_INDEXED_SOURCE_H_
#define NOSTALL_SOURCE_INDEX_INDEXED_SOURCE_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "nostall/source.h"
#include "source/index/index_file.h"
#include "source/index/lazy_shards.h"
#include "source/index/tar_index.h"

namespace nostall {

// A spec's fields applied to an index (nostall/record.h): each item's span
// grown to cover the members asked for, and where each field lies in it.
struct RecordTable {
  int extra = 0;                 // fields besides the image and the label
  std::vector<FieldSpan> spans;  // items x (1 + extra); empty: no table
  std::vector<int64_t> room;     // per extra field: its largest member
  // An image folder's records: items x extra, the member extension
  // (Index::member_exts) of the file beside the image each field is read
  // from (-1: none). The record is those files' bytes in the fields'
  // order, then the image's, to the end (its span's size is -1).
  std::vector<int32_t> beside;
  // The index's items the fields keep (empty: every one; a sample missing a
  // field is dropped with skip_bad_samples), and for tar records each kept
  // item's span in its shard, grown to hold every member asked for (empty:
  // the item's own).
  std::vector<int64_t> kept;
  struct Span {
    uint64_t offset;
    int64_t size;
  };
  std::vector<Span> item_span;
  int64_t skipped = 0;  // samples dropped for a field
  // An image folder's files left out once the fields take some (unset: the
  // index's own list).
  bool left_out_changed = false;
  std::vector<std::pair<std::string, int64_t>> left_out;
};

// What identifies a source's items (Source::fingerprint): the index's
// fingerprint, and for an image folder's records their layout too (an item
// is then the files beside the image and the image, not the image alone: a
// cache of one is not the other's).
uint64_t RecordsFingerprint(const IndexView& index, const RecordTable& records);

// The file beside `image_path` with extension `ext`: img/a.jpg, json ->
// img/a.json.
std::string BesideImage(const std::string& image_path, const std::string& ext);

// Applies `options.fields` to `index`: a sample without a member for a
// field that is not optional (or with one over max_field_bytes) is an error
// naming the sample and the field, or, with skip_bad_samples, dropped and
// counted in the table's `skipped`. No fields, or only an image folder's
// image and label: an empty table, every item as the index has it. An image
// folder's other fields are the files beside each image (their sizes taken
// now).
Result<RecordTable> SelectFields(const SourceOptions& options, const IndexView& index);
// How tar shards are indexed for `options` (bad samples, labels needed).
TarIndexOptions TarOptionsOf(const SourceOptions& options);
// The part of an index cache's name that `options` change.
std::string IndexVariant(const SourceOptions& options);

// A Source whose items are an IndexView: the accessors every indexed driver
// (local files, S3) shares; a driver adds Read, kind and what else it has.
// Nothing per item is held in the process but what a spec's fields add.
//
// Or tar shards being indexed as they are read (LazyShards): items are then
// named by packed ids until the index is whole; what needs the whole index
// (size, classes, the fingerprint) waits for it.
class IndexSource : public Source {
 public:
  int64_t size() const override {
    const IndexView* w = Whole();
    if (w == nullptr) return 0;
    return records_.kept.empty() ? w->size() : static_cast<int64_t>(records_.kept.size());
  }
  std::string key(int64_t i) const override { return lazy_ ? lazy_->Key(i) : index_->key(Raw(i)); }
  int64_t label(int64_t i) const override {
    return lazy_ ? lazy_->Label(i) : index_->item(Raw(i)).label;
  }
  int64_t byte_size(int64_t i) const override { return Where(i).size; }
  const std::vector<std::string>& classes() const override;
  uint64_t fingerprint() const override;
  // (These two do not wait: while the shards are being indexed, none yet.)
  int64_t skipped_at_index() const override {
    const IndexView* w = lazy_ ? lazy_->view() : index_.get();
    return (w ? w->skipped() : 0) + records_.skipped;
  }
  std::vector<std::pair<std::string, int64_t>> left_out() const override {
    const IndexView* w = lazy_ ? lazy_->view() : index_.get();
    return records_.left_out_changed ? records_.left_out
                                     : (w ? w->left_out() : std::vector<std::pair<std::string, int64_t>>{});
  }
  const FieldSpan* record(int64_t i) const override {
    return records_.spans.empty() ? nullptr
                                  : &records_.spans[static_cast<size_t>(i) * (1 + records_.extra)];
  }
  int extra_fields() const override { return records_.extra; }
  int64_t field_room(int f) const override { return records_.room[static_cast<size_t>(f)]; }
  std::vector<std::pair<std::string, int64_t>> members_found() const override;
  std::string index_origin() const override;
  std::string index_note() const override { return note_; }
  std::shared_ptr<ShardedItems> sharded() const override;
  void SetIndexOrigin(std::string origin, std::string note) {
    origin_ = std::move(origin);
    note_ = std::move(note);
  }

 protected:
  IndexSource(IndexViewPtr index, RecordTable records)
      : index_(std::move(index)),
        records_(std::move(records)),
        fingerprint_(RecordsFingerprint(*index_, records_)) {}
  explicit IndexSource(std::shared_ptr<LazyShards> lazy) : lazy_(std::move(lazy)) {}
  // The whole index (a lazy one's: waits for it; null if it failed).
  const IndexView* Whole() const;
  bool folder() const { return !lazy_ && index_->folder(); }
  const std::string& ShardName(int32_t s) const {
    return lazy_ ? lazy_->shard_name(s) : index_->shards()[static_cast<size_t>(s)];
  }
  // Item `i` as the index numbers it.
  int64_t Raw(int64_t i) const { return records_.kept.empty() ? i : records_.kept[static_cast<size_t>(i)]; }
  // Where item `i`'s bytes lie: its shard or folder, offset and size (-1:
  // a whole file of unknown size).
  struct ItemWhere {
    int32_t container;
    uint64_t offset;
    int64_t size;
  };
  ItemWhere Where(int64_t i) const {
    if (lazy_) {
      const LazyShards::Where w = lazy_->WhereIs(i);
      return {w.shard, w.offset, w.size};
    }
    const IndexView::Item& e = index_->item(Raw(i));
    if (records_.item_span.empty()) return {e.container, e.offset, e.size};
    const RecordTable::Span& s = records_.item_span[static_cast<size_t>(i)];
    return {e.container, s.offset, s.size};
  }
  const IndexViewPtr index_;  // null while lazy_
  const RecordTable records_;
  const std::shared_ptr<LazyShards> lazy_;

 private:
  const uint64_t fingerprint_ = 0;
  std::string origin_, note_;
  mutable std::once_flag sharded_once_;
  mutable std::shared_ptr<ShardedItems> sharded_;
};

// A file or object name ending in .jpg, .jpeg or .png, in any case: an
// image of an image folder.
bool IsImageFileName(const std::string& name);
// The image extensions nostall reads (torchvision's IMG_EXTENSIONS),
// lower case, without the dot; a name's extension, lower case ("" if none).
const std::vector<std::string>& ImageExtensions();
std::string FileExtension(const std::string& name);
bool IsImageExtension(const std::string& ext);  // any case
// `s` with ASCII letters lower case (extensions compare so).
std::string LowerAscii(std::string s);
// The audio files nostall reads (wav, flac, mp3, ogg, opus), as above.
bool IsAudioExtension(const std::string& ext);
// The video files (mp4, mkv, webm, avi, mov, m4v, mpg, mpeg, ts, m2ts, flv,
// ogv, 3gp, wmv), as above.
bool IsVideoExtension(const std::string& ext);
// What makes an item of a folder or a tar sample: an image, or, when the
// spec's fields hold an audio (video) field, an audio (video) file.
bool IsMediaExtension(const std::string& ext, Media media);
bool IsMediaFileName(const std::string& name, Media media);
// What the options' fields make items of.
Media MediaOf(const SourceOptions& options);
// " audio", " video", or "" (images): an index's variant says which.
const char* MediaSuffix(Media media);

// A local dataset as OpenIndexed opens it.
struct IndexedDataset {
  const char* kind;
  std::string canonical;  // a string equal for equal datasets: the index cache's name
  std::string root;       // the index's paths are kept relative to it
  std::string beside;     // the index file beside the data ("": none for this layout)
  std::string variant;    // what the index depends on of the options (IndexVariant)
  std::function<Result<Index>()> build;
  // Tar shards: each shard indexed alone (into an empty part), for a source
  // that indexes them as they are read (SourceOptions::lazy_index); with
  // `header`, the index's tables before any shard (its shard names).
  std::function<Status(size_t, Index*)> index_one;
  Index header;
};
// Opens `d`: from the index beside the data if it is there, trusted (this
// user's or the data's owner's, writable by no one else, no path out of
// the root) and its stamps still hold; else from the index cache if its
// stamps still hold; else by building it, saving it to the cache (and
// beside the data as options.index_beside asks) and mapping the saved file
// (an index that cannot be saved anywhere is held in the process).
Result<std::unique_ptr<Source>> OpenIndexed(const IndexedDataset& d, const SourceOptions& options);
// Whether an index built as `built` (IndexVariant) serves a loader that
// wants `wanted`: the same, or built strictest (every sample good, every
// label there), which serves every loader.
bool VariantServes(const std::string& built, const std::string& wanted);

}  // namespace nostall

#endif  // NOSTALL_SOURCE_INDEX_INDEXED_SOURCE_H_
