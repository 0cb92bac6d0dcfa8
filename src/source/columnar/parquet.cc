// The parquet driver: datasets published as Parquet shards (the Hugging Face
// layout: data/train-00000-of-00042.parquet, an image column stored as a
// struct of bytes and path, a ClassLabel integer column), local or on S3
// (docs/parquet.md).
//
// The path is a file, a glob ("data/train-*.parquet") or brace pattern
// ("train-{00000..00041}-of-00042.parquet"), locally or as s3://BUCKET/KEY.
// Items are the rows of the files in name order. The fields name columns:
// the image (or audio) column, HF's struct (its `bytes`) or plain binary;
// the label column, integers (HF's ClassLabel names, from the schema's
// metadata, are the classes) or strings (the sorted distinct values are);
// every other field a column of one value per row (binary, string,
// integer, float, boolean), read as the field's kind asks.
//
// What is read: the footers (and their offset indexes) when the source
// opens, then the label column and the small fields' columns whole (their
// values' sizes make each item's record); and per item, of each column
// asked for, the page holding its row (with the chunk's dictionary page),
// where the file has an offset index (written by `datasets`, or pyarrow's
// write_page_index=True), else its row group's whole column chunk.
// Decoded pages and chunks are kept in a cache of `decoded_cache_mb`, so
// rows read near each other in time (shard_shuffle, or no shuffle) decode
// each page once. On S3 each range is one ranged GET, many in flight; the
// pages are decoded on the source's own threads, never on the I/O thread.
//
//   options: decoded_cache_mb  the decoded-page cache (default 256)
//            endpoint, region, profile, addressing, unsigned, max_attempts:
//                              the S3 options (docs/s3.md), for s3:// paths
#include <dirent.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <list>
#include <map>
#include <set>
#include <thread>
#include <optional>
#include <unordered_map>

#include "common/clock.h"
#include "common/fd.h"
#include "common/json_fields.h"
#include "common/mutex.h"
#include "source/driver.h"
#include "source/index/index_file.h"
#include "source/index/index_progress.h"
#include "source/columnar/parquet_columns.h"
#include "source/columnar/parquet_index.h"
#include "source/columnar/parquet_file.h"
#include "source/columnar/parquet_saved.h"
#include "source/columnar/parquet_units.h"
#include "store/object_store.h"
#include "store/s3_config.h"

namespace nostall {
namespace {

using pq::Column;
using pq::DecodePool;
using pq::FileRef;
using pq::HfFeatures;
using pq::RowGroupShards;
using pq::Saved;
using pq::UnitCache;

constexpr const char* kDriver = "parquet";

struct ParquetOptions {
  int64_t decoded_cache_mb = 256;
  nlohmann::json s3 = nlohmann::json::object();
};

Result<ParquetOptions> ParquetReadOptions(const nlohmann::json& given) {
  ParquetOptions o;
  nlohmann::json j;
  NOSTALL_RETURN_IF_ERROR(SplitS3Options(given, {"decoded_cache_mb"}, kDriver, &j, &o.s3));
  NOSTALL_RETURN_IF_ERROR(GetInt(j, "source.options: ", "decoded_cache_mb", 0, 1 << 20, &o.decoded_cache_mb));
  return o;
}

Result<nlohmann::json> ParquetResolveOptions(const nlohmann::json& given, bool) {
  NOSTALL_ASSIGN_OR_RETURN(ParquetOptions o, ParquetReadOptions(given));
  nlohmann::json out = o.s3;
  out["decoded_cache_mb"] = o.decoded_cache_mb;
  return out;
}


bool ParquetClaims(const std::string& uri) {
  const std::string suffix = ".parquet";
  return uri.size() > suffix.size() && uri.compare(uri.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A folder `datasets` saved (`save_to_disk`): its state.json and
// dataset_info.json beside the data-*.arrow files.
bool IsSavedDataset(const std::string& uri) {
  struct stat st;
  return !store::IsRemoteUri(uri) && ::stat((uri + "/state.json").c_str(), &st) == 0 &&
         ::stat((uri + "/dataset_info.json").c_str(), &st) == 0;
}

// A folder `datasets` saved from a DatasetDict: one saved folder a split.
bool IsSavedDatasetDict(const std::string& uri) {
  struct stat st;
  return !store::IsRemoteUri(uri) && ::stat((uri + "/dataset_dict.json").c_str(), &st) == 0;
}

bool ArrowClaims(const std::string& uri) {
  return pq::IsArrowIpcName(uri) || IsSavedDataset(uri) || IsSavedDatasetDict(uri);
}

class ParquetSource final : public Source {
 public:
  ParquetSource(std::vector<std::shared_ptr<pq::File>> files, std::vector<FileRef> refs,
                std::vector<Column> columns, std::vector<int64_t> labels, std::vector<std::string> classes,
                std::vector<FieldSpan> spans, std::vector<int64_t> room, std::unique_ptr<store::ObjectStore> store,
                const ParquetOptions& o, uint64_t max_item_bytes, std::string origin,
                bool shard_order)
      : files_(std::move(files)),
        refs_(std::move(refs)),
        columns_(std::move(columns)),
        labels_(std::move(labels)),
        classes_(std::move(classes)),
        spans_(std::move(spans)),
        room_(std::move(room)),
        store_(std::move(store)),
        remote_(store_->ReadsAsync()),
        cache_(static_cast<uint64_t>(o.decoded_cache_mb) << 20),
        max_item_bytes_(max_item_bytes),
        origin_(std::move(origin)) {
    int64_t first = 0;
    std::vector<int64_t> starts;
    for (const auto& f : files_) {
      file_first_.push_back(first);
      for (int g = 0; g < f->row_groups(); ++g) starts.push_back(first + f->row_group_first(g));
      first += f->rows();
    }
    size_ = first;
    starts.push_back(first);
    shards_ = std::make_shared<RowGroupShards>(std::move(starts));
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](const std::string& s) {
      for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
      h = (h ^ 0xff) * 1099511628211ull;
    };
    for (const FileRef& r : refs_) mix(r.name + "/" + std::to_string(r.size) + "/" + std::to_string(r.stamp));
    for (const Column& c : columns_) mix(c.field + "=" + c.name + "/" + FieldKindName(c.kind));
    fingerprint_ = h;
    if (remote_) pool_ = std::make_unique<DecodePool>(2);
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (!files_.front()->has_page_index(columns_[c].leaf)) whole_chunks_ = !shard_order;
    }
  }
  ~ParquetSource() override {
    // In this order: the store's I/O thread answers what is in flight
    // (Cancelled) and is joined, so nothing posts to the pool any more; then
    // the pool finishes its jobs, which use this source's members.
    store_->CancelAll();
    store_.reset();
    pool_.reset();
  }

  int64_t size() const override { return size_; }
  std::string key(int64_t i) const override {
    const size_t f = FileOf(i);
    return refs_[f].name + "[" + std::to_string(i - file_first_[f]) + "]";
  }
  int64_t label(int64_t i) const override { return labels_.empty() ? 0 : labels_[static_cast<size_t>(i)]; }
  // A row's size is known only once its page is read.
  int64_t byte_size(int64_t) const override { return -1; }
  const std::vector<std::string>& classes() const override { return classes_; }
  uint64_t fingerprint() const override { return fingerprint_; }
  const FieldSpan* record(int64_t i) const override {
    return spans_.empty() ? nullptr : &spans_[static_cast<size_t>(i) * (1 + extra())];
  }
  int extra_fields() const override { return extra(); }
  int64_t field_room(int f) const override { return room_[static_cast<size_t>(f)]; }
  std::vector<std::pair<std::string, int64_t>> members_found() const override {
    std::vector<std::pair<std::string, int64_t>> out;
    for (const auto& [name, group] : files_.front()->columns()) out.push_back({name, size_});
    return out;
  }
  std::string index_origin() const override { return origin_; }
  std::string index_note() const override {
    if (!whole_chunks_) return "";
    if (std::string(kind_) != kDriver) {
      return "these Arrow IPC files are compressed: a row costs its record batch's column, decompressed "
             "whole (kept in the decoded cache, decoded_cache_mb), so an exact shuffle over more than the "
             "cache reads a batch for every row. Write them without compression (`datasets` does; pyarrow: "
             "compression=None) or read with shuffle_window=\"auto\" or shard_shuffle=True (docs/parquet.md)";
    }
    return "these Parquet files have no offset index (page index) for the columns read: the first read "
           "of a row group costs its whole column chunk (later ones its page, found then), so an exact "
           "shuffle reads the data about twice in its first epoch. Write the files with an offset index "
           "(pyarrow: write_page_index=True; `datasets` does) or read with shuffle_window=\"auto\" or "
           "shard_shuffle=True (docs/parquet.md)";
  }
  std::shared_ptr<ShardedItems> sharded() const override { return shards_; }
  // The media column's pages where the offset index gives them (the same on
  // every read and rank), else its row groups; the window from the cache and
  // the column's decoded bytes per row.
  ReadUnits read_units() const override {
    ReadUnits units;
    const int leaf = columns_.back().leaf;
    int64_t bytes = 0;
    for (size_t f = 0; f < files_.size(); ++f) {
      const pq::File& file = *files_[f];
      for (int g = 0; g < file.row_groups(); ++g) {
        for (int64_t row : file.IndexedPageRows(g, leaf)) {
          const int64_t start = file_first_[f] + file.row_group_first(g) + row;
          if (start < size_ && (units.starts.empty() || start > units.starts.back())) units.starts.push_back(start);
        }
        bytes += file.ChunkBytes(g, leaf);
      }
    }
    units.starts.push_back(size_);
    const double per_row = std::max(1.0, static_cast<double>(bytes) / static_cast<double>(std::max<int64_t>(1, size_)));
    units.window = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(cache_.budget()) / 2 / per_row));
    return units;
  }
  std::optional<StorageStats> storage_stats() const override {
    return store_->Stats();
  }
  const char* kind() const override { return kind_; }
  void set_kind(const char* kind) { kind_ = kind; }

  Status Read(int64_t i, std::vector<uint8_t>* out) const override {
    Plan plan = PlanOf(i);
    for (Need& n : plan.needs) {
      if (n.values != nullptr) continue;
      std::promise<Status> loaded;
      LoadUnit(plan.file, &n, [&loaded](Status s) { loaded.set_value(std::move(s)); });
      NOSTALL_RETURN_IF_ERROR(loaded.get_future().get());
    }
    return Finish(i, &plan, out);
  }

  bool ReadsAsync() const override { return remote_; }
  double RequestLatencySeconds() const override { return store_->LatencySeconds(); }
  void CancelReads() const override { store_->CancelAll(); }

  void ReadAsync(int64_t i, std::vector<uint8_t> buffer, ReadDone done) const override {
    if (!remote_) return Source::ReadAsync(i, std::move(buffer), std::move(done));
    struct State {
      Plan plan;
      std::vector<uint8_t> buffer;
      ReadDone done;
      std::atomic<int> left{1};
      Mutex mu;
      Status status GUARDED_BY(mu);
    };
    auto st = std::make_shared<State>();
    st->plan = PlanOf(i);
    st->buffer = std::move(buffer);
    st->done = std::move(done);
    // Called once per unit loaded, and once when every load is asked for;
    // the last call assembles the item (on whichever thread it is: a decode
    // thread, or this one when every unit was in the cache).
    auto arrived = [this, i, st](Status s) {
      if (!s.ok()) {
        MutexLock lock(&st->mu);
        if (st->status.ok()) st->status = s;
      }
      if (st->left.fetch_sub(1) != 1) return;
      Status status;
      {
        MutexLock lock(&st->mu);
        status = st->status;
      }
      if (status.ok()) status = Finish(i, &st->plan, &st->buffer);
      st->done(std::move(status), std::move(st->buffer));
    };
    for (Need& n : st->plan.needs) {
      if (n.values != nullptr) continue;
      st->left.fetch_add(1);
      LoadUnit(st->plan.file, &n, arrived);
    }
    arrived(Status::OK());
  }

 private:
  // One column's part of an item: the unit holding its row, decoded (from
  // the cache) or to be fetched.
  struct Need {
    pq::Unit unit;
    int64_t row = 0;  // within the row group
    std::shared_ptr<const pq::Values> values;
  };
  using Waiter = std::function<void(Status, std::shared_ptr<const pq::Values>)>;
  struct Plan {
    size_t file = 0;
    Status status;
    std::vector<Need> needs;  // per column, in field order (media last)
  };

  int extra() const { return static_cast<int>(columns_.size()) - 1; }
  size_t FileOf(int64_t i) const {
    auto it = std::upper_bound(file_first_.begin(), file_first_.end(), i);
    return static_cast<size_t>(it - file_first_.begin()) - 1;
  }

  UnitCache::Key KeyOf(size_t file, const pq::Unit& u, bool dictionary) const {
    return {static_cast<int32_t>(file), u.row_group, u.leaf, dictionary ? -2 : u.page};
  }

  Plan PlanOf(int64_t i) const {
    Plan p;
    p.file = FileOf(i);
    const pq::File& file = *files_[p.file];
    const int64_t row = i - file_first_[p.file];
    const int rg = file.RowGroupOf(row);
    for (const Column& c : columns_) {
      Need n;
      n.row = row - file.row_group_first(rg);
      // A whole chunk decoded and still cached serves its rows (a chunk
      // without an offset index, before or after its pages were learned).
      const UnitCache::Key whole{static_cast<int32_t>(p.file), rg, c.leaf, -1};
      std::shared_ptr<const pq::Values> chunk = cache_.Get(whole);
      Result<pq::Unit> u = chunk != nullptr ? file.ChunkUnit(rg, c.leaf) : file.UnitOf(rg, c.leaf, n.row);
      if (!u.ok()) {
        p.status = u.status();
        p.needs.clear();
        return p;
      }
      n.unit = u.value();
      n.values = chunk != nullptr ? chunk : cache_.Get(KeyOf(p.file, n.unit, false));
      p.needs.push_back(std::move(n));
    }
    return p;
  }

  // Loads `n`'s unit into n->values: from the cache; or by joining a load of
  // it already under way (rows of one page or chunk read at once fetch and
  // decode it once); or by fetching its bytes (pread, or ranged GETs in
  // flight) and decoding them (on a decode thread for S3), then caching
  // it. `then` is called once, when n->values is set or with the error.
  void LoadUnit(size_t file, Need* n, std::function<void(Status)> then) const EXCLUDES(pending_mu_) {
    const UnitCache::Key key = KeyOf(file, n->unit, false);
    {
      MutexLock lock(&pending_mu_);
      if ((n->values = cache_.Get(key)) != nullptr) {
        lock.Unlock();
        return then(Status::OK());
      }
      auto it = pending_.find(key);
      if (it != pending_.end()) {
        it->second.push_back([n, then](Status s, std::shared_ptr<const pq::Values> v) {
          n->values = std::move(v);
          then(std::move(s));
        });
        return;
      }
      pending_[key];  // this caller loads it
    }
    auto finish = [this, file, n, key, then](Status s, std::string dict, std::string data) {
      std::shared_ptr<const pq::Values> values;
      if (s.ok()) {
        Result<std::shared_ptr<const pq::Values>> v = DecodeUnit(file, n->unit, std::move(dict), std::move(data));
        if (v.ok()) {
          values = v.value();
        } else {
          s = v.status();
        }
      }
      std::vector<Waiter> waiters;
      {
        MutexLock lock(&pending_mu_);
        auto it = pending_.find(key);
        waiters = std::move(it->second);
        pending_.erase(it);
      }
      n->values = values;
      then(s);
      for (Waiter& w : waiters) w(s, values);
    };
    const pq::Unit& u = n->unit;
    std::shared_ptr<const pq::Values> dict_cached =
        u.dictionary.length > 0 ? cache_.Get(KeyOf(file, u, true)) : nullptr;
    const pq::Range dict = dict_cached != nullptr ? pq::Range{} : u.dictionary;
    for (const pq::Range& r : {dict, u.data}) {
      if (r.length > max_item_bytes_ * 4 + (64ull << 20)) {
        return finish(DataError(files_[file]->Where(u.row_group, u.leaf) + ": " + std::to_string(r.length) +
                                " bytes to read for one row (over the item size limit)"),
                      "", "");
      }
    }
    if (!remote_) {
      std::string d, b;
      Status s = ReadLocal(file, dict, &d);
      if (s.ok()) s = ReadLocal(file, u.data, &b);
      if (dict_cached != nullptr) d = dict_cached->blob;
      return finish(std::move(s), std::move(d), std::move(b));
    }
    FetchRemote(file, dict, u.data, dict_cached, std::move(finish));
  }

  // The unit's dictionary (unless cached: `dict_cached`) and data pages by
  // ranged GETs in flight; `finish` runs on a decode thread once both are
  // in, or one failed.
  void FetchRemote(size_t file, const pq::Range& dict, const pq::Range& data,
                   std::shared_ptr<const pq::Values> dict_cached,
                   std::function<void(Status, std::string, std::string)> finish) const {
    struct Fetch {
      std::atomic<int> left{2};
      std::string parts[2];
      Mutex mu;
      Status status GUARDED_BY(mu);
    };
    auto f = std::make_shared<Fetch>();
    if (dict_cached != nullptr) f->parts[0] = dict_cached->blob;
    auto arrived = [this, f, finish]() {
      if (f->left.fetch_sub(1) != 1) return;
      pool_->Post([f, finish]() {
        Status s;
        {
          MutexLock lock(&f->mu);
          s = f->status;
        }
        finish(std::move(s), std::move(f->parts[0]), std::move(f->parts[1]));
      });
    };
    for (int part = 0; part < 2; ++part) {
      const pq::Range r = part == 0 ? dict : data;
      if (r.length == 0) {
        arrived();
        continue;
      }
      store_->ReadAsync(refs_[file].key, r.offset, static_cast<int64_t>(r.length), {},
                        [f, part, r, arrived](Status s, std::vector<uint8_t> bytes) {
                          if (s.ok() && bytes.size() != r.length) s = DataError("a short ranged read");
                          if (s.ok()) {
                            f->parts[part].assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
                          } else {
                            MutexLock lock(&f->mu);
                            if (f->status.ok()) f->status = s;
                          }
                          arrived();
                        });
    }
  }

  Status ReadLocal(size_t f, const pq::Range& r, std::string* out) const {
    if (r.length == 0) return Status::OK();
    out->resize(r.length);
    return store_->ReadExact(refs_[f].key, r.offset, r.length, reinterpret_cast<uint8_t*>(out->data()));
  }

  // A unit's values from its bytes, checked and cached (and its dictionary
  // page's bytes, for the other pages of its chunk).
  Result<std::shared_ptr<const pq::Values>> DecodeUnit(size_t file, const pq::Unit& u, std::string dict,
                                                       std::string data) const {
    const pq::File& f = *files_[file];
    NOSTALL_ASSIGN_OR_RETURN(pq::Values v, f.Decode(u, dict, data));
    if (static_cast<int64_t>(v.present.size()) != u.rows) {
      return DataError(f.Where(u.row_group, u.leaf) + ": " + std::to_string(v.present.size()) +
                       " values where its page index says " + std::to_string(u.rows));
    }
    auto values = std::make_shared<const pq::Values>(std::move(v));
    cache_.Put(KeyOf(file, u, false), values);
    if (u.dictionary.length > 0 && !dict.empty()) {
      auto d = std::make_shared<pq::Values>();
      d->blob = std::move(dict);
      cache_.Put(KeyOf(file, u, true), std::move(d));
    }
    return values;
  }

  // Writes the item's bytes from its units' values: the extra fields'
  // values in order, then the image's.
  Status Finish(int64_t i, Plan* plan, std::vector<uint8_t>* out) const {
    NOSTALL_RETURN_IF_ERROR(plan->status);
    const pq::File& file = *files_[plan->file];
    out->clear();
    for (size_t c = 0; c < plan->needs.size(); ++c) {
      Need& n = plan->needs[c];
      if (n.values == nullptr) return Internal("a unit not loaded");
      const size_t k = static_cast<size_t>(n.row - n.unit.first_row);
      const Column& col = columns_[c];
      const bool media = c + 1 == plan->needs.size();
      if (!n.values->present[k]) {
        if (media) {
          return DataError("the row's " + col.name + " has no bytes (" + file.Where(n.unit.row_group, n.unit.leaf) +
                           "): a null, or a `datasets` Image stored by path rather than embedded; nostall reads "
                           "the bytes in the file (the Hub's shards embed them)");
        }
        if (spans_.empty() || spans_[static_cast<size_t>(i) * (1 + extra()) + 1 + c].size >= 0) {
          return DataError("the row's " + col.name + " is null, and was not when the loader was made");
        }
        continue;
      }
      const uint64_t a = n.values->off[k], b = n.values->off[k + 1];
      if (!media && !spans_.empty()) {
        const int64_t want = spans_[static_cast<size_t>(i) * (1 + extra()) + 1 + c].size;
        if (want != static_cast<int64_t>(b - a)) {
          return DataError("the row's " + col.name + " changed while the loader ran (" + std::to_string(want) +
                           " bytes when it was made, " + std::to_string(b - a) + " now)");
        }
      }
      if (out->size() + (b - a) > max_item_bytes_) return DataError("the row is over the item size limit");
      out->insert(out->end(), n.values->blob.begin() + static_cast<std::ptrdiff_t>(a),
                  n.values->blob.begin() + static_cast<std::ptrdiff_t>(b));
    }
    return Status::OK();
  }

  const std::vector<std::shared_ptr<pq::File>> files_;
  const std::vector<FileRef> refs_;
  const std::vector<Column> columns_;  // extra fields in order, then the media column
  const std::vector<int64_t> labels_;
  const std::vector<std::string> classes_;
  const std::vector<FieldSpan> spans_;
  const std::vector<int64_t> room_;
  std::unique_ptr<store::ObjectStore> store_;  // reset first as this source goes
  const bool remote_;  // reads are requests to a server: many in flight, decoded on the pool
  mutable UnitCache cache_;
  // Units being loaded, and who else waits for each.
  mutable Mutex pending_mu_;
  mutable std::map<UnitCache::Key, std::vector<Waiter>> pending_ GUARDED_BY(pending_mu_);
  const uint64_t max_item_bytes_;
  const std::string origin_;
  const char* kind_ = kDriver;
  std::vector<int64_t> file_first_;
  int64_t size_ = 0;
  uint64_t fingerprint_ = 0;
  bool whole_chunks_ = false;  // a column without an offset index, read in no shard or unit order
  std::shared_ptr<RowGroupShards> shards_;
  std::unique_ptr<DecodePool> pool_;
};

// How a file is read while it is indexed: through its store (on a remote
// one each read is a round trip).
pq::ReadAt FileReader(const store::ObjectStore* s, const FileRef& r) {
  return [s, r](uint64_t offset, uint64_t length, std::string* out) -> Status {
    if (offset + length > r.size) {
      return DataError(r.name + ": a read past its end (" + std::to_string(offset + length) + " of " +
                       std::to_string(r.size) + " bytes)");
    }
    out->resize(length);
    return s->ReadExact(r.key, offset, length, reinterpret_cast<uint8_t*>(out->data()));
  };
}

// The saved index at `cache_path`, if it is there and still holds.
std::optional<Saved> LoadSaved(const std::string& cache_path, const std::vector<FileRef>& refs) {
  if (cache_path.empty()) return std::nullopt;
  Result<std::string> bytes = pq::ReadSaved(cache_path);
  if (!bytes.ok()) return std::nullopt;
  Result<Saved> s = pq::ParseSaved(bytes.value(), refs);
  if (!s.ok()) return std::nullopt;
  return std::move(s.value());
}

// The saved index, if it fits these files and columns (its offset indexes
// set on the files); else nothing (a key collision: built again).
std::optional<Saved> Fitting(std::optional<Saved> saved, const std::vector<std::shared_ptr<pq::File>>& files,
                             const pq::FieldColumns& c, int64_t total) {
  if (!saved) return saved;
  std::vector<int> per_item;
  for (const Column& col : c.columns) per_item.push_back(col.leaf);
  if (static_cast<int64_t>(saved->labels.size()) != (c.label.leaf >= 0 ? total : 0) ||
      static_cast<int64_t>(saved->sizes.size()) != total * c.extra()) {
    return std::nullopt;
  }
  for (size_t k = 0; k < files.size(); ++k) {
    if (!files[k]->SetOffsetIndexes(per_item, saved->indexes[k], saved->index_at[k]).ok()) return std::nullopt;
  }
  return saved;
}

// The extra fields' records: each value's size, then the image to the end;
// and each field's largest value.
void RecordSpans(const std::vector<int64_t>& sizes, int64_t total, int extra, std::vector<FieldSpan>* spans,
                 std::vector<int64_t>* room) {
  room->assign(static_cast<size_t>(extra), 0);
  if (extra == 0) return;
  spans->assign(static_cast<size_t>(total) * static_cast<size_t>(1 + extra), FieldSpan{});
  for (int64_t item = 0; item < total; ++item) {
    uint64_t at = 0;
    FieldSpan* sp = &(*spans)[static_cast<size_t>(item) * (1 + extra)];
    for (int e = 0; e < extra; ++e) {
      const int64_t n = sizes[static_cast<size_t>(item) * extra + e];
      sp[1 + e] = {at, n};
      (*room)[static_cast<size_t>(e)] = std::max((*room)[static_cast<size_t>(e)], n);
      if (n > 0) at += static_cast<uint64_t>(n);
    }
    sp[0] = {at, -1};
  }
}


// The files `uri` names, Parquet or Arrow IPC (File::Open tells them apart
// by name), as the source of kind `kind`.
Result<std::unique_ptr<Source>> OpenColumnFiles(const std::string& uri, const SourceOptions& options,
                                                const char* kind) {
  NOSTALL_ASSIGN_OR_RETURN(nlohmann::json j, DriverOptionsJson(options, kind));
  NOSTALL_ASSIGN_OR_RETURN(ParquetOptions o, ParquetReadOptions(j));
  const auto t0 = std::chrono::steady_clock::now();
  NOSTALL_ASSIGN_OR_RETURN(store::Located at, store::OpenStore(uri, o.s3, kind));
  NOSTALL_ASSIGN_OR_RETURN(std::vector<FileRef> refs, pq::StoreFiles(uri, *at.store, at.key));
  const store::ObjectStore* s = at.store.get();
  pq::IndexFiles in;
  in.threads = s->ReadsAsync() ? 32 : 4;  // files read at once (remote: each read is a round trip)
  in.reader = [&](size_t k) { return FileReader(s, refs[k]); };
  in.max_field_bytes = options.max_field_bytes;
  const std::string cache_path =
      options.use_index_cache ? IndexCachePath(options.index_cache_dir, pq::SavedKey(uri, options)) : "";
  std::optional<Saved> saved = LoadSaved(cache_path, refs);

  // The footers: saved (parsed on every core), or read many files at a time.
  std::vector<std::shared_ptr<pq::File>> files(refs.size());
  const size_t parse_threads = std::max<size_t>(1, std::thread::hardware_concurrency());
  NOSTALL_RETURN_IF_ERROR(pq::ForEachFile(refs.size(), saved ? parse_threads : in.threads, [&](size_t k) -> Status {
    NOSTALL_ASSIGN_OR_RETURN(files[k], saved ? pq::File::FromSaved(refs[k].name, refs[k].size, saved->footers[k])
                                             : pq::File::Open(refs[k].name, refs[k].size, in.reader(k)));
    return Status::OK();
  }));
  in.files = &files;
  NOSTALL_ASSIGN_OR_RETURN(const HfFeatures hf, ReadHfFeatures(*files.front()));
  NOSTALL_ASSIGN_OR_RETURN(pq::FieldColumns cols, pq::ResolveColumns(*files.front(), options.fields, hf));
  NOSTALL_RETURN_IF_ERROR(pq::CheckSameColumns(files, cols));
  for (const auto& f : files) {
    in.file_first.push_back(in.total);
    in.total += f->rows();
  }
  if (in.total == 0) return InvalidArgument("the files " + uri + " hold no rows");
  std::string origin;
  saved = Fitting(std::move(saved), files, cols, in.total);
  if (!saved) {
    NOSTALL_ASSIGN_OR_RETURN(saved, pq::BuildIndex(in, cols, hf));
    origin = "read from " + std::to_string(files.size()) + (std::string(kind) == kDriver ? " Parquet file" : " Arrow IPC file") +
             (files.size() == 1 ? "" : "s") +
             " in " + SecondsSince(t0);
    if (!cache_path.empty()) {
      Status w = WriteIndexFile(cache_path, pq::SerializeSaved(refs, *saved));
      origin += w.ok() ? "; saved to " + cache_path : "; not saved (" + w.message() + ")";
    }
  } else {
    origin = "the index cache: " + cache_path + " (" + SecondsSince(t0) + ")";
  }
  std::vector<FieldSpan> spans;
  std::vector<int64_t> room;
  RecordSpans(saved->sizes, in.total, cols.extra(), &spans, &room);
  auto source = std::make_unique<ParquetSource>(std::move(files), std::move(refs), std::move(cols.columns),
                                                std::move(saved->labels), std::move(saved->classes),
                                                std::move(spans), std::move(room), std::move(at.store), o, options.max_item_bytes, origin,
                                                options.shard_order);
  source->set_kind(kind);
  return std::unique_ptr<Source>(std::move(source));
}

Result<std::unique_ptr<Source>> ParquetOpen(const std::string& uri, const SourceOptions& options) {
  return OpenColumnFiles(uri, options, kDriver);
}

// Arrow IPC files: a file, a glob or brace pattern of them, a folder
// `datasets` saved, or on S3 a prefix ending in "/" (its *.arrow objects).
Result<std::unique_ptr<Source>> ArrowOpen(const std::string& uri, const SourceOptions& options) {
  if (IsSavedDatasetDict(uri) && !IsSavedDataset(uri)) {
    std::string splits;
    if (DIR* d = ::opendir(uri.c_str())) {
      while (dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != ".." && IsSavedDataset(uri + "/" + name)) {
          splits += (splits.empty() ? "" : ", ") + uri + "/" + name;
        }
      }
      ::closedir(d);
    }
    return InvalidArgument(uri + " is a DatasetDict `datasets` saved, a folder a split: read one split" +
                           (splits.empty() ? std::string() : " (" + splits + ")"));
  }
  std::string files = uri;
  if (IsSavedDataset(uri) || (store::IsRemoteUri(uri) && !uri.empty() && uri.back() == '/')) {
    while (files.size() > 1 && files.back() == '/') files.pop_back();
    files += "/*.arrow";
  }
  return OpenColumnFiles(files, options, "arrow");
}

}  // namespace

SourceDriver ParquetDriver() { return {kDriver, ParquetClaims, ParquetOpen, ParquetResolveOptions}; }

SourceDriver ArrowDriver() { return {"arrow", ArrowClaims, ArrowOpen, ParquetResolveOptions}; }

}  // namespace nostall
