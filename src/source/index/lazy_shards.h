// Tar shards indexed as they are first read (docs/sampling.md, "The
// buffered first epoch"): a loader that finds no index starts at once; its
// first epoch asks for the shards in its own order (Begin); the first is
// indexed alone (the first batch waits for it and nothing else), then, once
// the epoch asks for another, a few at a time in that order, and each sample is known, and read, as
// soon as its shard is. When every shard is, the whole index is put
// together in shard order, exactly as a cold build makes it, saved (the
// index cache, and beside the data when asked) and mapped; from then on the
// items are the mapped index's.
//
// Item ids: while the index is incomplete a sample is named by its shard
// and its place in it (ShardMemberKey, beyond every index's item count); once it
// is complete, by its number in the index. Both name it for good: a packed
// id handed out early still reads the right sample later.
#ifndef NOSTALL_SOURCE_INDEX_LAZY_SHARDS_H_
#define NOSTALL_SOURCE_INDEX_LAZY_SHARDS_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "nostall/sampler.h"
#include "source/index/index_file.h"

namespace nostall {

class LazyShards final : public ShardedItems {
 public:
  // Indexes shard s into an empty part, as the cold build does.
  using IndexOne = std::function<Status(size_t s, Index* part)>;
  // Saves and maps the whole index (or holds it); says where it went.
  using Finish = std::function<Result<IndexViewPtr>(Index whole, std::string* origin)>;

  // `shards`: every shard's name as the index keeps it (a path, an s3://
  // URI), in shard order. `header`: the index's other tables (stamps,
  // variant) as the cold build starts them.
  LazyShards(std::vector<std::string> shards, Index header, int at_once, IndexOne index_one,
             Finish finish);
  ~LazyShards() override;
  // Stops indexing (a shard under way finishes first): a source calls it
  // before what its indexing reads through goes away.
  void Stop();

  int64_t shard_count() const override { return static_cast<int64_t>(shards_.size()); }
  bool complete() const override { return view_.load(std::memory_order_acquire) != nullptr; }
  void Begin(const std::vector<int64_t>& order) override EXCLUDES(mu_);
  Result<int64_t> Count(int64_t s) override EXCLUDES(mu_);
  Result<int64_t> Total() override;
  int64_t Id(int64_t s, int64_t member) const override;
  int64_t StableKey(int64_t id) const override;

  // The whole index, waiting for it; null (with the error in `*error`)
  // when a shard could not be indexed.
  const IndexView* Whole(Status* error);
  const IndexView* view() const { return view_.load(std::memory_order_acquire); }
  // Where the whole index came from ("" before it is).
  std::string origin() const;

  // An item by id (packed or not): what Source asks of it.
  struct Where {
    int32_t shard;
    uint64_t offset;
    int64_t size;
  };
  static bool IsPacked(int64_t id) { return IsShardMemberKey(id); }
  Where WhereIs(int64_t id) const;
  std::string Key(int64_t id) const;
  int64_t Label(int64_t id) const;
  const std::string& shard_name(int32_t s) const { return shards_[static_cast<size_t>(s)]; }

 private:
  static int64_t Packed(int64_t s, int64_t m) { return ShardMemberKey(s, m); }
  // A packed id as the whole index numbers it.
  int64_t Unpacked(int64_t id) const;
  // An item's `from_part(entry)` (a packed id, the index incomplete), else
  // its `from_view(number in the whole index)`.
  template <typename FromPart, typename FromView>
  auto Lookup(int64_t id, FromPart from_part, FromView from_view) const;
  void Work();
  // The other indexing threads, once more than the first shard is needed.
  void RampUp() REQUIRES(mu_);
  void Assemble();  // every shard indexed: the whole index, saved and mapped

  const std::vector<std::string> shards_;
  const int at_once_;
  const IndexOne index_one_;
  const Finish finish_;

  mutable std::shared_mutex parts_mu_;  // the parts, read per item; replaced once whole
  std::vector<Index> parts_;            // per shard

  mutable Mutex mu_;
  std::condition_variable cv_;
  Index header_ GUARDED_BY(mu_);                // moved into the whole index
  std::vector<int64_t> order_ GUARDED_BY(mu_);  // the shards, in the order asked
  size_t next_ GUARDED_BY(mu_) = 0;             // the next of order_ to index
  std::vector<int64_t> counts_ GUARDED_BY(mu_);  // per shard, -1 until indexed
  std::vector<char> running_ GUARDED_BY(mu_);    // per shard, being indexed now
  std::vector<Status> failed_ GUARDED_BY(mu_);   // per shard, why it could not be
  size_t indexed_ GUARDED_BY(mu_) = 0;
  Status error_ GUARDED_BY(mu_);                 // the first shard's that failed
  bool stopping_ GUARDED_BY(mu_) = false;
  std::string origin_ GUARDED_BY(mu_);
  std::vector<std::thread> threads_ GUARDED_BY(mu_);
  std::vector<int64_t> base_;       // per shard: its first item in the whole index (set once)
  IndexViewPtr whole_;              // owns view_ (set once, under parts_mu_)
  std::atomic<const IndexView*> view_{nullptr};
};

}  // namespace nostall

#endif  // NOSTALL_SOURCE_INDEX_LAZY_SHARDS_H_
