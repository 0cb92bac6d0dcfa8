// Source: where the items of a dataset come from.
//
// A Source has a fixed index of items (built once, then reused; see
// docs/index_format.md), each with a key that names it to a person (a path, or
// shard:member), an integer label and a byte span. Reading an item copies its
// encoded bytes into a caller-provided buffer. Sources know nothing of
// decoding or caching.
#ifndef NOSTALL_SOURCE_H_
#define NOSTALL_SOURCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nostall/item_file.h"
#include "nostall/record.h"
#include "nostall/sampler.h"
#include "nostall/stats.h"
#include "nostall/status.h"

namespace nostall {

struct SourceOptions {
  // Where index files are kept between runs ("" = $NOSTALL_CACHE_DIR,
  // else $XDG_CACHE_HOME/nostall, else ~/.cache/nostall). Set
  // `use_index_cache` false to always rebuild.
  std::string index_cache_dir;
  bool use_index_cache = true;
  // The index kept beside the dataset, where every node and job finds it
  // (an image folder's PATH/.nostall-index; tar shards' PATTERN.nostall-index
  // in the first shard's folder; docs/index_format.md): "read" uses it when
  // it is there, trusted and still matches the data (the default); "write"
  // also writes it whenever the index had to be built; "rebuild" builds and
  // writes it whatever is there (`nostall index PATH`); "off" never looks.
  std::string index_beside = "read";
  // Tar shards with no index yet: open at once and index each shard as the
  // first epoch first reads it (Source::sharded; the loader sets this when
  // its first epoch may be buffered: docs/sampling.md). Else the whole
  // index is built before the source opens.
  bool lazy_index = false;
  // The loader reads in shard order (LoaderSpec::shard_shuffle), or a read
  // unit's items together (shuffle_window): a driver whose random reads
  // cost a shard's worth need not say so.
  bool shard_order = false;
  // Items larger than this are a DataError rather than a huge allocation.
  uint64_t max_item_bytes = 256ull << 20;
  // Tar shards: a sample with no image member or a bad .cls label is an
  // error at index time, unless `skip_bad_samples` (then counted).
  bool skip_bad_samples = false;
  // The fields a batch carries (nostall/record.h; empty: the image and its
  // label, as always). Each item's bytes are then the span of its sample
  // holding every member asked for, and record(i) says where each lies.
  std::vector<FieldSpec> fields;
  // A member of an extra field over this many bytes is an error naming it
  // (each field's room per sample in a batch is its largest member).
  uint64_t max_field_bytes = 16ull << 20;
  // The driver that reads the dataset: "" = the first registered one that
  // claims the path (an s3:// prefix, a .tar suffix, a folder), else one of
  // "image-folder", "tar-shards", "s3-image-folder", "s3-tar-shards".
  std::string driver;
  // That driver's own options, a JSON object that the driver alone reads
  // and checks (docs/spec.md lists each driver's): the local drivers'
  // storage emulation (throttle_bandwidth, throttle_latency_ms) and page
  // cache use (drop_page_cache); the S3 drivers' endpoint, region, profile,
  // addressing and unsigned. "{}": every option at its default.
  std::string driver_options = "{}";
};

class Source {
 public:
  virtual ~Source() = default;

  // Number of items.
  virtual int64_t size() const = 0;
  // Human-readable name of item `i`, used in every error about it.
  virtual std::string key(int64_t i) const = 0;
  virtual int64_t label(int64_t i) const = 0;
  // Encoded size in bytes as indexed (-1 if the index does not know).
  virtual int64_t byte_size(int64_t i) const = 0;
  // Class names in label order (empty when labels are plain numbers).
  virtual const std::vector<std::string>& classes() const = 0;
  // Identifies the dataset: equal fingerprints mean equal indexes.
  virtual uint64_t fingerprint() const = 0;
  // Samples dropped while indexing (only with skip_bad_samples).
  virtual int64_t skipped_at_index() const { return 0; }
  // Files of the dataset left out because they are not images nostall
  // reads: (extension, lower case, "" for none; count), by extension.
  virtual std::vector<std::pair<std::string, int64_t>> left_out() const { return {}; }
  // With SourceOptions::fields: where the image (element 0) and each extra
  // field (1..extra_fields()) of item i lie in the bytes Read gives, or
  // nullptr when the bytes are the image alone.
  virtual const FieldSpan* record(int64_t i) const {
    (void)i;
    return nullptr;
  }
  virtual int extra_fields() const { return 0; }
  // Item i's image size, where the index knows it without reading the item
  // (a COCO file's width and height): what grouping batches by aspect ratio
  // reads. False: not known.
  virtual bool image_size(int64_t i, int* width, int* height) const {
    (void)i, (void)width, (void)height;
    return false;
  }
  // Item i's image id in its annotations (a COCO file's), what evaluators
  // match predictions by. False: none.
  virtual bool image_id(int64_t i, int64_t* id) const {
    (void)i, (void)id;
    return false;
  }
  // The most annotations one item holds, where the source knows (a COCO
  // dataset's table); -1 otherwise. Sizes a targets field's room.
  virtual int64_t max_annotations() const { return -1; }
  // The largest member extra field `f` has in any item: its room per sample.
  virtual int64_t field_room(int f) const {
    (void)f;
    return 0;
  }
  // What the samples hold: (member extension, samples that have one), most
  // common first; empty for sources whose items are single files.
  virtual std::vector<std::pair<std::string, int64_t>> members_found() const { return {}; }
  // Where the index came from, for a person: "beside the data: PATH",
  // "the index cache: PATH", "built in 1.2 s; saved to PATH" ... ("" for
  // sources without one); and what a person should know about an index
  // beside the data that was there and not used (stale, damaged, another
  // user's), "" when nothing.
  virtual std::string index_origin() const { return ""; }
  virtual std::string index_note() const { return ""; }
  // Tar shards: their samples by shard, for the buffered epoch (sampler.h),
  // which is also how a source whose index is still being built (shards
  // indexed as they are read) says so. Null: not in shards, or records that
  // keep only some samples.
  virtual std::shared_ptr<ShardedItems> sharded() const { return nullptr; }
  // Items that cost one read together (a Parquet page's rows), for the
  // window shuffle (SamplerOptions::shuffle_window): `starts` are the first
  // items of runs that cover the items in order, then size() (empty: each
  // item alone); `window` the items a window may hold for its units to fit
  // half the source's cache of decoded units (0: no such cache).
  struct ReadUnits {
    std::vector<int64_t> starts;
    int64_t window = 0;
  };
  virtual ReadUnits read_units() const { return {}; }
  // A local item that is one whole file (no record around it), opened for
  // reads where they are wanted (ItemFile); null where the item is read only
  // whole (remote, in a shard, a record of several files). Errors as Read's.
  virtual Result<std::shared_ptr<const ItemFile>> OpenItem(int64_t i) const {
    (void)i;
    return std::shared_ptr<const ItemFile>();
  }
  // Remote sources: their requests so far; local files: none.
  virtual std::optional<StorageStats> storage_stats() const { return std::nullopt; }
  // The driver's name: "image-folder", "tar-shards", "s3-image-folder",
  // "s3-tar-shards" (NOSTALL_SOURCE_DRIVERS in src/source/driver.h).
  virtual const char* kind() const = 0;

  // Copies item `i`'s bytes into `out` (resized). Thread-safe. Errors are
  // not yet annotated with the key; the caller adds it.
  virtual Status Read(int64_t i, std::vector<uint8_t>* out) const = 0;

  // Remote sources keep many reads in flight without a thread each: with
  // ReadsAsync() true, ReadAsync starts reading item `i` (into `buffer`'s
  // storage) and returns at once; `done` is called exactly once, on the
  // source's own I/O thread (keep it short). CancelReads answers every read
  // not yet done with Cancelled, promptly. RequestLatencySeconds: the recent
  // mean time a read takes (0 before the first), which the pipeline sizes its
  // reads in flight by.
  using ReadDone = std::function<void(Status, std::vector<uint8_t>)>;
  virtual bool ReadsAsync() const { return false; }
  virtual void ReadAsync(int64_t i, std::vector<uint8_t> buffer, ReadDone done) const {
    Status st = Read(i, &buffer);
    done(std::move(st), std::move(buffer));
  }
  virtual void CancelReads() const {}
  virtual double RequestLatencySeconds() const { return 0; }
  // Sources over local files: asks the kernel to drop item `i`'s bytes
  // from the page cache (posix_fadvise DONTNEED: clean pages go, no root
  // needed), so its next read comes from storage. A source that does not
  // read through the page cache reads from storage every time: nothing to do.
  virtual Status Evict(int64_t i) const {
    (void)i;
    return Status::OK();
  }
};

// Opens a dataset with the first driver that claims the path
// (src/source/driver.h):
//   - a directory: image-folder layout (one subfolder per class, classes
//     sorted by name, image files (.jpg .jpeg .png .webp .tif .tiff .bmp
//     .ppm .pgm) found recursively, as torchvision's ImageFolder does);
//   - a path ending in .tar, possibly with brace ranges or lists
//     ("shards/train-{0000..0099}.tar", "a-{x,y}.tar"): WebDataset shards;
//   - "s3://bucket/prefix/" (an image folder laid out under the prefix) or
//     "s3://bucket/shards/train-{0000..1023}.tar" (shards): the same two
//     layouts on S3-compatible storage (docs/s3.md).
// The registry (NOSTALL_SOURCE_DRIVERS) lists the drivers; an unclaimed path
// is an error naming every kind.
// What a dataset holds that is not read ("" when nothing): "5 files left
// out, not images nostall reads: 3 .txt, 2 .gif".
std::string DescribeLeftOut(const Source& source, const char* what = "images");

Result<std::unique_ptr<Source>> OpenSource(const std::string& uri,
                                           const SourceOptions& options = {});

// Wraps `inner` so that its reads take the time the given storage would take
// (see SourceOptions::throttle_*). Thread-safe.
std::unique_ptr<Source> ThrottleSource(std::unique_ptr<Source> inner, double bytes_per_second,
                                       double latency_ms);

// Expands "{0000..0012}" ranges (zero padding kept) and "{a,b}" lists.
Result<std::vector<std::string>> ExpandBraces(const std::string& pattern);

}  // namespace nostall

#endif  // NOSTALL_SOURCE_H_
