// The fetcher: an item's encoded bytes, from the cache's tiers when they
// have it, else from storage (then into the cache). One code path for both
// ways of reading: a local source is read on the calling fetch thread, a
// remote one (Source::ReadsAsync) is started here and completes on the
// source's I/O thread. Either way `done` gets the item, its bytes or its
// error named by the item. Counts the fetch stage and the cache per epoch.
#ifndef NOSTALL_PIPELINE_FETCHER_H_
#define NOSTALL_PIPELINE_FETCHER_H_

#include <condition_variable>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "nostall/cache.h"
#include "nostall/source.h"
#include "pipeline/work.h"

namespace nostall {

class Fetcher {
 public:
  using Done = std::function<void(FetchedItem)>;
  // `partial`: the kind reads parts of long items (SampleKind::ReadsPart),
  // so a local file over kPartialMin is handed on as its first bytes and the
  // file, not read whole (never with a cache, which keeps items whole).
  Fetcher(const Source& source, Cache* cache, bool partial = false);
  static constexpr uint64_t kPartialMin = 256 << 10;
  static constexpr size_t kFirstBytes = 64 << 10;

  bool async() const { return async_; }
  bool has_cache() const { return cache_ != nullptr; }

  // Fetches `fi` and hands it to `done` (at once for a local source or a
  // cache hit; on the I/O thread for a remote read).
  void Fetch(FetchedItem fi, const Done& done);

  const StageCounters& counters() const { return fetch_; }
  StageCounters* mutable_counters() { return &fetch_; }
  // The source's I/O thread's CPU since this fetcher began (remote sources),
  // from the source's stats `now` when the caller already has them.
  int64_t IoCpuNs(const StorageStats* now = nullptr) const;
  // The cache's fields of `st`, its epochs up to `consumer_epoch`.
  void FillCacheStats(const std::string& name, int64_t consumer_epoch, LoaderStats* st) const
      EXCLUDES(cache_mu_);

 private:
  void PrefetchFromCache(FetchedItem* fi);
  void ReadLocal(FetchedItem* fi);
  void Stored(FetchedItem* fi, bool lookup_failed);
  void HandOn(FetchedItem fi, int64_t wall0, const Done& done);
  void CountCache(int64_t epoch, bool hit, bool error, size_t bytes) EXCLUDES(cache_mu_);
  // With a cache: an item already being read from storage (for another
  // epoch's batch: the fetchers run on into the next epoch while the last
  // one's reads finish) is not read again; this fetch waits for that read
  // and takes its bytes, as the cache would have given them. True: `fi`
  // joined a read (it is handed on when the read ends); false: it is the
  // item's read.
  // A remote source's fetch joins the read (its `done` is called later, on
  // the I/O thread, as a read's is); a local one's fetch thread waits for
  // the read to end (WaitedForRead: true) and then looks in the cache again,
  // so that `done` is called before Fetch returns, as always.
  bool JoinRead(FetchedItem* fi, int64_t wall0, const Done& done) EXCLUDES(reads_mu_);
  bool WaitedForRead(int64_t item) EXCLUDES(reads_mu_);
  // The read of `fi` ended: the fetches that joined it get its bytes (or
  // its error) and are handed on.
  void EndRead(const FetchedItem& fi) EXCLUDES(reads_mu_);

  const Source& source_;
  Cache* const cache_;  // may be null
  const bool async_;
  const bool partial_;
  const int64_t io_cpu_at_start_;
  StageCounters fetch_;
  mutable Mutex cache_mu_;
  std::map<int64_t, LoaderStats::CacheEpoch> cache_epochs_ GUARDED_BY(cache_mu_);
  std::atomic<int64_t> cache_inserted_bytes_{0};
  struct Joined {
    FetchedItem fi;
    int64_t wall0;
    Done done;
  };
  Mutex reads_mu_;
  std::condition_variable reads_ended_;
  std::map<int64_t, std::vector<Joined>> reads_ GUARDED_BY(reads_mu_);  // item -> joined
};

}  // namespace nostall

#endif  // NOSTALL_PIPELINE_FETCHER_H_
