// LazyShards (lazy_shards.h): a few shards indexed at a time in the order
// the buffered epoch asks for, then the whole index put together once.
#include "source/index/lazy_shards.h"

#include <malloc.h>

#include <algorithm>
#include <numeric>
#include <system_error>

#include "source/index/tar_index.h"

namespace nostall {

LazyShards::LazyShards(std::vector<std::string> shards, Index header, int at_once,
                       IndexOne index_one, Finish finish)
    : shards_(std::move(shards)),
      at_once_(std::max(1, at_once)),
      index_one_(std::move(index_one)),
      finish_(std::move(finish)),
      parts_(shards_.size()),
      header_(std::move(header)),
      counts_(shards_.size(), -1),
      running_(shards_.size(), 0),
      failed_(shards_.size()) {}

LazyShards::~LazyShards() { Stop(); }

void LazyShards::Stop() {
  std::vector<std::thread> threads;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    threads = std::move(threads_);  // (no thread is started once stopping)
  }
  cv_.notify_all();
  for (std::thread& t : threads) {
    if (t.joinable()) t.join();
  }
}

void LazyShards::Begin(const std::vector<int64_t>& order) {
  MutexLock lock(&mu_);
  if (!order_.empty() || stopping_) return;
  order_ = order;
  // One thread: the first shard alone (the first batch waits for it, and
  // for nothing else), then the next; the others start when the epoch asks
  // for a shard past the first, or for the whole index (RampUp).
  try {
    threads_.emplace_back([this] { Work(); });
  } catch (const std::system_error& e) {
    error_ = ResourceExhausted(std::string("cannot start an indexing thread: ") + e.what());
  }
}

void LazyShards::RampUp() {
  if (stopping_ || order_.empty()) return;
  const size_t n = std::min<size_t>(static_cast<size_t>(at_once_), order_.size());
  try {
    while (threads_.size() < n) threads_.emplace_back([this] { Work(); });
  } catch (const std::system_error&) {
    // Fewer threads index the shards more slowly; at least one is at work.
  }
}

void LazyShards::Work() {
  while (true) {
    int64_t s = 0;
    {
      MutexLock lock(&mu_);
      if (stopping_ || !error_.ok() || next_ >= order_.size()) return;
      s = order_[next_++];
      running_[static_cast<size_t>(s)] = 1;
    }
    Index part;
    Status st = index_one_(static_cast<size_t>(s), &part);
    const int64_t count = static_cast<int64_t>(part.items.size());
    if (st.ok()) {
      std::unique_lock<std::shared_mutex> parts(parts_mu_);
      parts_[static_cast<size_t>(s)] = std::move(part);
    }
    bool last = false;
    {
      MutexLock lock(&mu_);
      running_[static_cast<size_t>(s)] = 0;
      if (!st.ok()) {
        failed_[static_cast<size_t>(s)] = st;
        if (error_.ok()) error_ = std::move(st);
      } else {
        counts_[static_cast<size_t>(s)] = count;
        last = ++indexed_ == shards_.size();
      }
    }
    cv_.notify_all();
    if (last) {
      Assemble();
      return;
    }
  }
}

// Every shard is indexed: the parts appended in shard order (the index a
// cold build makes), saved and mapped. Reads of samples by packed id wait
// meanwhile (the parts are moved into the whole), then go to the mapping.
void LazyShards::Assemble() {
  Status st;
  std::string origin;
  {
    std::unique_lock<std::shared_mutex> parts(parts_mu_);
    Index whole;
    {
      MutexLock lock(&mu_);
      whole = std::move(header_);
    }
    std::vector<int64_t> base(shards_.size());
    int64_t n = 0;
    for (size_t s = 0; s < parts_.size(); ++s) {
      base[s] = n;
      n += static_cast<int64_t>(parts_[s].items.size());
      AppendIndex(std::move(parts_[s]), &whole);
      parts_[s] = Index{};
    }
    if (whole.items.empty()) {
      st = NotFound("no samples in the tar shards");
    } else {
      Result<IndexViewPtr> mapped = finish_(std::move(whole), &origin);
      if (mapped.ok()) {
        base_ = std::move(base);
        whole_ = std::move(mapped).value();
        view_.store(whole_.get(), std::memory_order_release);
      } else {
        st = mapped.status();
      }
    }
    parts_ = {};
  }
  ::malloc_trim(0);  // the parts' many small strings are gone
  {
    MutexLock lock(&mu_);
    if (!st.ok() && error_.ok()) error_ = std::move(st);
    origin_ = std::move(origin);
  }
  cv_.notify_all();
}

Result<int64_t> LazyShards::Count(int64_t s) {
  if (s < 0 || s >= shard_count()) return InvalidArgument("no shard " + std::to_string(s));
  // A shard being indexed is waited for even after another failed: the
  // epoch breaks at the first shard in its order that cannot be read.
  const size_t k = static_cast<size_t>(s);
  MutexLock lock(&mu_);
  if (!order_.empty() && s != order_.front()) RampUp();  // the first batches are under way
  while (!(counts_[k] >= 0 || !failed_[k].ok() || (!running_[k] && (!error_.ok() || stopping_)))) {
    cv_.wait(lock.native());
  }
  if (counts_[k] >= 0) return counts_[k];
  if (!failed_[k].ok()) return failed_[k];
  if (!error_.ok()) return error_;
  return Cancelled("the loader shut down while its shards were indexed");
}

const IndexView* LazyShards::Whole(Status* error) {
  std::vector<int64_t> order(shards_.size());
  std::iota(order.begin(), order.end(), 0);
  Begin(order);  // (nothing asked for them yet: in shard order)
  MutexLock lock(&mu_);
  RampUp();
  while (view() == nullptr && error_.ok() && !stopping_) cv_.wait(lock.native());
  if (view() != nullptr) return view();
  *error = error_.ok() ? Cancelled("the loader shut down while its shards were indexed") : error_;
  return nullptr;
}

Result<int64_t> LazyShards::Total() {
  Status error;
  const IndexView* v = Whole(&error);
  if (v == nullptr) return error;
  return v->size();
}

std::string LazyShards::origin() const {
  MutexLock lock(&mu_);
  return origin_;
}

int64_t LazyShards::Id(int64_t s, int64_t member) const {
  if (complete()) return base_[static_cast<size_t>(s)] + member;
  return Packed(s, member);
}

int64_t LazyShards::Unpacked(int64_t id) const {
  return base_[static_cast<size_t>(ShardOfKey(id))] + MemberOfKey(id);
}

int64_t LazyShards::StableKey(int64_t id) const {
  if (IsPacked(id)) return id;
  // (A number of the whole index: complete.) Its shard is the last whose
  // first item is not after it.
  const size_t s = static_cast<size_t>(std::upper_bound(base_.begin(), base_.end(), id) - base_.begin()) - 1;
  return Packed(static_cast<int64_t>(s), id - base_[s]);
}

// A packed id is read from its shard's part while the index is incomplete,
// else (as every id of the whole index, which only exists once it is) from
// the mapping.
template <typename FromPart, typename FromView>
auto LazyShards::Lookup(int64_t id, FromPart from_part, FromView from_view) const {
  if (!complete() && IsPacked(id)) {
    std::shared_lock<std::shared_mutex> parts(parts_mu_);
    if (!complete()) {
      return from_part(parts_[static_cast<size_t>(ShardOfKey(id))].items[static_cast<size_t>(MemberOfKey(id))]);
    }
  }
  return from_view(IsPacked(id) ? Unpacked(id) : id);
}

LazyShards::Where LazyShards::WhereIs(int64_t id) const {
  return Lookup(
      id, [](const IndexEntry& e) { return Where{e.shard, e.offset, e.size}; },
      [this](int64_t i) {
        const IndexView::Item& e = view()->item(i);
        return Where{e.container, e.offset, e.size};
      });
}

std::string LazyShards::Key(int64_t id) const {
  return Lookup(id, [](const IndexEntry& e) { return e.key; }, [this](int64_t i) { return view()->key(i); });
}

int64_t LazyShards::Label(int64_t id) const {
  return Lookup(
      id, [](const IndexEntry& e) { return e.label; },
      [this](int64_t i) { return static_cast<int64_t>(view()->item(i).label); });
}

}  // namespace nostall
