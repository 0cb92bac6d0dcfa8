// Reads of a remote shard's members joined into fewer, larger requests when
// many members of one part of a shard are read close together (an epoch in
// shard order: shard_shuffle, the buffered first epoch, whose reads visit a
// shard's members within its shuffle buffer's reach): the shard is seen as
// blocks of kBlockBytes, and once kTouches members of one block are asked
// for among the last kRecentReads reads, the block is read whole in one
// ranged GET; the reads of its members then wait for it, or are answered at
// once when it is in. An exact shuffle over a dataset of many blocks rarely
// reads four members of one block that close together: its reads go to the
// store as they are.
#ifndef NOSTALL_SOURCE_TAR_COALESCE_H_
#define NOSTALL_SOURCE_TAR_COALESCE_H_

#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "nostall/status.h"
#include "store/object_store.h"

namespace nostall {

class ReadCoalescer {
 public:
  // One member's place: its object (of `object_size` bytes) and byte range.
  struct Range {
    std::string key;
    uint64_t offset = 0;
    uint64_t length = 0;
    uint64_t object_size = 0;
  };
  static constexpr uint64_t kBlockBytes = 1 << 20;
  static constexpr int kTouches = 4;
  static constexpr size_t kRecentReads = 64;
  // Blocks kept once in, for members read after them (the newest first).
  static constexpr size_t kKeptBlocks = 8;

  explicit ReadCoalescer(const store::ObjectStore* store) : store_(store) {}
  // Reads a member, as ObjectStore::ReadAsync: `done` once, on the store's
  // I/O thread, or at once when a block already holds it.
  void Read(const Range& range, std::vector<uint8_t> buffer, store::ObjectStore::Done done) const;
  // Blocks read, and member reads blocks answered.
  int64_t blocks() const;
  int64_t joined() const;

 private:
  struct Waiter {
    uint64_t offset, length;
    std::vector<uint8_t> buffer;
    store::ObjectStore::Done done;
  };
  struct Block {
    std::string id;  // key '#' block number
    std::string key;
    uint64_t start = 0, end = 0;
    bool in = false;  // its bytes are here
    std::vector<uint8_t> bytes;
    std::vector<Waiter> waiters;  // reads of members inside it, until it is in
  };
  // Shared with the store's callbacks, which may run after the coalescer is gone.
  struct State {
    std::mutex mu;
    std::list<std::shared_ptr<Block>> blocks;  // the newest first
    std::deque<std::string> recent;            // the blocks the last reads fell in
    std::unordered_map<std::string, int> touches;
    int64_t blocks_read = 0, joined = 0;
  };
  std::shared_ptr<Block> Touch(const std::string& id, const Range& r, uint64_t start, uint64_t end) const;
  static void Arrived(const store::ObjectStore* store, const std::shared_ptr<State>& state,
                      const std::shared_ptr<Block>& b, Status st, std::vector<uint8_t> bytes);

  const store::ObjectStore* const store_;
  const std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace nostall

#endif  // NOSTALL_SOURCE_TAR_COALESCE_H_
