// ItemFile: one item's bytes read where they are wanted rather than whole
// (a 3 s crop of a 30 s recording). Sources open them (Source::OpenItem);
// decoders that read parts of a file take them (SampleKind::ReadsPart).
#ifndef NOSTALL_ITEM_FILE_H_
#define NOSTALL_ITEM_FILE_H_

#include <cstddef>
#include <cstdint>

#include "nostall/status.h"

namespace nostall {

// An open item (a local file). ReadAt is const and may be called from any
// thread.
class ItemFile {
 public:
  virtual ~ItemFile() = default;
  virtual uint64_t size() const = 0;
  // Exactly `n` bytes at `offset`; a file that shrank since it was opened
  // is a DataError.
  virtual Status ReadAt(uint64_t offset, size_t n, uint8_t* out) const = 0;
  // The most of it a decoder may read whole into memory (the loader's
  // max_item_bytes): an item read in parts may be larger.
  virtual uint64_t whole_limit() const { return UINT64_MAX; }
};

}  // namespace nostall

#endif  // NOSTALL_ITEM_FILE_H_
