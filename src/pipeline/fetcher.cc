// The fetcher (fetcher.h): cache tiers, then storage.
#include "pipeline/fetcher.h"

#include "common/clock.h"

namespace nostall {
namespace {

// A file read in parts, its reads counted as the fetch stage's bytes where
// the decoder makes them.
class CountedItemFile final : public ItemFile {
 public:
  CountedItemFile(std::shared_ptr<const ItemFile> file, std::atomic<int64_t>* bytes)
      : file_(std::move(file)), bytes_(bytes) {}
  uint64_t size() const override { return file_->size(); }
  uint64_t whole_limit() const override { return file_->whole_limit(); }
  Status ReadAt(uint64_t offset, size_t n, uint8_t* out) const override {
    bytes_->fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
    return file_->ReadAt(offset, n, out);
  }

 private:
  std::shared_ptr<const ItemFile> file_;
  std::atomic<int64_t>* bytes_;
};

int64_t IoCpu(const Source& source) {
  std::optional<StorageStats> remote = source.storage_stats();
  return remote ? remote->io_cpu_ns : 0;
}

// Whether a sample's bytes are its item's file alone: no record, or one
// whose only bytes are the item, from its start (its other fields come from
// the folder or are written by the kind: a label, a video clip's audio).
bool OnlyTheItem(const FieldSpan* record, int extra) {
  if (record == nullptr) return true;
  if (record[0].offset != 0) return false;
  for (int f = 0; f < extra; ++f) {
    if (record[1 + f].size >= 0) return false;
  }
  return true;
}

}  // namespace

Fetcher::Fetcher(const Source& source, Cache* cache, bool partial)
    : source_(source), cache_(cache), async_(source.ReadsAsync()), partial_(partial && cache == nullptr),
      io_cpu_at_start_(IoCpu(source)) {}

// A local read: whole, or for a kind that reads parts of long items, a long
// file's first bytes and the file (one open either way).
void Fetcher::ReadLocal(FetchedItem* fi) {
  const FieldSpan* record = source_.record(fi->item);
  if (!partial_ || !OnlyTheItem(record, source_.extra_fields())) {
    fi->status = source_.Read(fi->item, &fi->bytes);
    return;
  }
  Result<std::shared_ptr<const ItemFile>> file = source_.OpenItem(fi->item);
  const bool whole_item = record == nullptr || record[0].size < 0 ||
                          (file.ok() && file.value() != nullptr &&
                           static_cast<uint64_t>(record[0].size) == file.value()->size());
  if (!file.ok() || file.value() == nullptr || !whole_item) {
    fi->status = file.ok() ? source_.Read(fi->item, &fi->bytes) : file.status();
    return;
  }
  const uint64_t size = file.value()->size();
  const bool part = size >= kPartialMin;
  fi->bytes.resize(part ? kFirstBytes : static_cast<size_t>(size));
  fi->status = file.value()->ReadAt(0, fi->bytes.size(), fi->bytes.data());
  if (part) fi->file = std::make_shared<CountedItemFile>(std::move(file).value(), &fetch_.bytes);
}

// A batch's first position asks the cache for the batch's items at once.
void Fetcher::PrefetchFromCache(FetchedItem* fi) {
  if (fi->prefetch.empty() || cache_ == nullptr) return;
  cache_->Prefetch(fi->prefetch.data(), fi->prefetch.size());
  fi->prefetch.clear();
}

void Fetcher::Fetch(FetchedItem fi, const Done& done) {
  if (fi.item == kHole) {  // nothing to read: on to the batch, which closes up around it
    PrefetchFromCache(&fi);
    done(std::move(fi));
    return;
  }
  const int64_t cpu0 = ThreadCpuNs(), wall0 = NowNs();
  PrefetchFromCache(&fi);
  // A tier that cannot answer costs a hit, never the item: it is read from storage.
  Result<bool> hit = cache_ ? cache_->Lookup(fi.item, &fi.bytes) : Result<bool>(false);
  const bool lookup_failed = !hit.ok();
  bool cached = hit.ok() && hit.value();
  if (!cached && cache_ != nullptr && !lookup_failed && !async_ && WaitedForRead(fi.item)) {
    // Another fetch thread was reading it into the cache: there now,
    // unless that read failed or found no room (then it is read here).
    Result<bool> again = cache_->Lookup(fi.item, &fi.bytes);
    cached = again.ok() && again.value();
  }
  if (cached) {
    CountCache(fi.epoch, /*hit=*/true, false, fi.bytes.size());
    fetch_.busy_cpu_ns.fetch_add(ThreadCpuNs() - cpu0);
    HandOn(std::move(fi), wall0, done);
  } else if (cache_ != nullptr && !lookup_failed && async_ && JoinRead(&fi, wall0, done)) {
    fetch_.busy_cpu_ns.fetch_add(ThreadCpuNs() - cpu0);
  } else if (async_) {
    const int64_t item = fi.item;
    std::vector<uint8_t> buffer = std::move(fi.bytes);
    source_.ReadAsync(item, std::move(buffer),
                      [this, fi = std::move(fi), wall0, lookup_failed, done](
                          Status st, std::vector<uint8_t> b) mutable {
                        fi.status = std::move(st);
                        fi.bytes = std::move(b);
                        Stored(&fi, lookup_failed);
                        EndRead(fi);
                        HandOn(std::move(fi), wall0, done);
                      });
    // The I/O thread's CPU is counted as the source reports it (IoCpuNs).
    fetch_.busy_cpu_ns.fetch_add(ThreadCpuNs() - cpu0);
  } else {
    ReadLocal(&fi);
    Stored(&fi, lookup_failed);
    EndRead(fi);
    fetch_.busy_cpu_ns.fetch_add(ThreadCpuNs() - cpu0);
    HandOn(std::move(fi), wall0, done);
  }
}

bool Fetcher::WaitedForRead(int64_t item) {
  MutexLock lock(&reads_mu_);
  if (reads_.find(item) == reads_.end()) {
    reads_.emplace(item, std::vector<Joined>{});
    return false;
  }
  while (reads_.find(item) != reads_.end()) reads_ended_.wait(lock.native());
  return true;
}

bool Fetcher::JoinRead(FetchedItem* fi, int64_t wall0, const Done& done) {
  MutexLock lock(&reads_mu_);
  auto it = reads_.find(fi->item);
  if (it == reads_.end()) {
    reads_.emplace(fi->item, std::vector<Joined>{});
    return false;
  }
  it->second.push_back(Joined{std::move(*fi), wall0, done});
  return true;
}

void Fetcher::EndRead(const FetchedItem& fi) {
  if (cache_ == nullptr) return;
  std::vector<Joined> joined;
  {
    MutexLock lock(&reads_mu_);
    auto it = reads_.find(fi.item);
    if (it == reads_.end()) return;  // a read after a failed lookup: nothing joined it
    joined = std::move(it->second);
    reads_.erase(it);
  }
  reads_ended_.notify_all();
  for (Joined& j : joined) {
    j.fi.status = fi.status;
    if (fi.status.ok()) j.fi.bytes = fi.bytes;
    // Its bytes came as the cache's would; a failed read fails it as its
    // own read would have.
    CountCache(j.fi.epoch, /*hit=*/fi.status.ok(), false, j.fi.bytes.size());
    HandOn(std::move(j.fi), j.wall0, j.done);
  }
}

// Read from storage: into the cache and counted as a miss; a failed read
// named by its item. A file that vanished or cannot be read is a bad item,
// handled by the error policy; running out of descriptors is not the
// item's fault.
void Fetcher::Stored(FetchedItem* fi, bool lookup_failed) {
  if (cache_) {
    CountCache(fi->epoch, /*hit=*/false, lookup_failed, fi->bytes.size());
    if (fi->status.ok() && cache_->Insert(fi->item, fi->bytes.data(), fi->bytes.size())) {
      cache_inserted_bytes_.fetch_add(static_cast<int64_t>(fi->bytes.size()));
    }
  }
  if (fi->status.ok()) return;
  const StatusCode code = fi->status.code() == StatusCode::kResourceExhausted
                              ? fi->status.code()
                              : StatusCode::kDataError;
  fi->status = Status(code, fi->status.message()).WithItem(source_.key(fi->item), "fetch");
}

void Fetcher::HandOn(FetchedItem fi, int64_t wall0, const Done& done) {
  fetch_.work_ns.fetch_add(NowNs() - wall0);
  fetch_.items.fetch_add(1);
  fetch_.bytes.fetch_add(static_cast<int64_t>(fi.bytes.size()));
  done(std::move(fi));
}

void Fetcher::CountCache(int64_t epoch, bool hit, bool error, size_t bytes) {
  MutexLock lock(&cache_mu_);
  auto& e = cache_epochs_[epoch];
  e.epoch = epoch;
  (hit ? e.hits : e.misses) += 1;
  e.errors += error ? 1 : 0;
  (hit ? e.hit_bytes : e.miss_bytes) += static_cast<int64_t>(bytes);
}

int64_t Fetcher::IoCpuNs(const StorageStats* now) const {
  if (!async_) return 0;
  return (now != nullptr ? now->io_cpu_ns : IoCpu(source_)) - io_cpu_at_start_;
}

void Fetcher::FillCacheStats(const std::string& name, int64_t consumer_epoch,
                             LoaderStats* st) const {
  if (cache_ == nullptr) return;
  CacheStats cs = cache_->Stats();
  st->has_cache = true;
  st->cache_name = name;
  st->cache_budget_bytes = cs.budget_bytes;
  st->cache_used_bytes = cs.used_bytes;
  st->cache_items = cs.items;
  for (const CacheStats& t : cache_->TierStats()) {
    st->cache_tiers.push_back({t.tier, t.budget_bytes, t.used_bytes, t.items, t.hits, t.misses,
                               t.errors, t.lookups, t.lookup_ns, t.hit_bytes});
  }
  st->cache_inserted_bytes = cache_inserted_bytes_.load();
  MutexLock lock(&cache_mu_);
  // Epochs the caller has reached: the fetchers read ahead into the next
  // one, which is not an epoch the caller ran (yet).
  for (const auto& [epoch, counts] : cache_epochs_) {
    if (epoch <= consumer_epoch) st->cache_epochs.push_back(counts);
  }
}

}  // namespace nostall
