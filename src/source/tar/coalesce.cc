// Members read close together, joined into reads of their blocks (coalesce.h).
#include "source/tar/coalesce.h"

#include <algorithm>
#include <utility>

namespace nostall {

int64_t ReadCoalescer::blocks() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->blocks_read;
}

int64_t ReadCoalescer::joined() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->joined;
}

// (Under state_->mu.) A read that falls in block `id`: counted among the
// recent reads; the block to read whole when this is its kTouches-th, else
// null (the member is read alone).
std::shared_ptr<ReadCoalescer::Block> ReadCoalescer::Touch(const std::string& id, const Range& r, uint64_t start,
                                                           uint64_t end) const {
  State& s = *state_;
  s.recent.push_back(id);
  const int touched = ++s.touches[id];
  if (s.recent.size() > kRecentReads) {
    auto it = s.touches.find(s.recent.front());
    if (it != s.touches.end() && --it->second <= 0) s.touches.erase(it);
    s.recent.pop_front();
  }
  if (touched < kTouches) return nullptr;
  auto b = std::make_shared<Block>();
  b->id = id;
  b->key = r.key;
  b->start = start;
  b->end = end;
  s.blocks.push_front(b);
  ++s.blocks_read;
  size_t kept = 0;  // blocks in beyond the kept number go, the oldest first
  for (auto it = s.blocks.begin(); it != s.blocks.end();) {
    if ((*it)->in && ++kept > kKeptBlocks) {
      it = s.blocks.erase(it);
    } else {
      ++it;
    }
  }
  return b;
}

void ReadCoalescer::Read(const Range& r, std::vector<uint8_t> buffer, store::ObjectStore::Done done) const {
  const uint64_t k = r.offset / kBlockBytes;
  const uint64_t start = k * kBlockBytes, end = std::min(start + kBlockBytes, r.object_size);
  if (r.length == 0 || r.offset + r.length > end) {  // across a block's end (or past the object's): alone
    store_->ReadAsync(r.key, r.offset, static_cast<int64_t>(r.length), std::move(buffer), std::move(done));
    return;
  }
  const std::string id = r.key + '#' + std::to_string(k);
  std::shared_ptr<Block> ready, read;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    for (const std::shared_ptr<Block>& b : state_->blocks) {
      if (b->id != id) continue;
      ++state_->joined;
      if (!b->in) {  // on its way: answered when it is in
        b->waiters.push_back({r.offset, r.length, std::move(buffer), std::move(done)});
        return;
      }
      ready = b;
      break;
    }
    if (ready == nullptr) {
      read = Touch(id, r, start, end);
      if (read != nullptr) {
        ++state_->joined;
        read->waiters.push_back({r.offset, r.length, std::move(buffer), std::move(done)});
      }
    }
  }
  if (ready != nullptr) {  // (a block's bytes do not change once in)
    const uint8_t* from = ready->bytes.data() + (r.offset - ready->start);
    buffer.assign(from, from + r.length);
    done(Status::OK(), std::move(buffer));
    return;
  }
  if (read == nullptr) {
    store_->ReadAsync(r.key, r.offset, static_cast<int64_t>(r.length), std::move(buffer), std::move(done));
    return;
  }
  const store::ObjectStore* store = store_;
  std::shared_ptr<State> state = state_;
  store_->ReadAsync(read->key, read->start, static_cast<int64_t>(read->end - read->start), {},
                    [store, state, read](Status st, std::vector<uint8_t> bytes) {
                      Arrived(store, state, read, std::move(st), std::move(bytes));
                    });
}

// A block's answer: its members' reads answered from it; where it failed,
// each member read on its own (its error then names its own range), unless
// the reads were cancelled.
void ReadCoalescer::Arrived(const store::ObjectStore* store, const std::shared_ptr<State>& state,
                            const std::shared_ptr<Block>& b, Status st, std::vector<uint8_t> bytes) {
  std::vector<Waiter> waiters;
  bool in = false;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    waiters.swap(b->waiters);
    in = st.ok() && bytes.size() == b->end - b->start;
    if (in) {
      b->bytes = std::move(bytes);
      b->in = true;
    } else {
      state->blocks.remove(b);
    }
  }
  for (Waiter& m : waiters) {
    if (in) {
      const uint8_t* from = b->bytes.data() + (m.offset - b->start);
      m.buffer.assign(from, from + m.length);
      m.done(Status::OK(), std::move(m.buffer));
    } else if (st.code() == StatusCode::kCancelled) {
      m.done(st, std::move(m.buffer));
    } else {
      store->ReadAsync(b->key, m.offset, static_cast<int64_t>(m.length), std::move(m.buffer), std::move(m.done));
    }
  }
}

}  // namespace nostall
