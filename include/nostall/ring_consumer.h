// What the batch ring says of one consumer (src/ring/): shared by the ring,
// which keeps the consumer table, and the serving API (nostall/shared.h),
// which reports it.
#ifndef NOSTALL_RING_CONSUMER_H_
#define NOSTALL_RING_CONSUMER_H_

#include <cstdint>
#include <string>

namespace nostall {

struct ConsumerInfo {
  int64_t pid = 0;
  std::string state;  // "active" or "lagged" ("dead" from InspectShared)
  int64_t need = 0;   // the next chunk it needs
};

}  // namespace nostall

#endif  // NOSTALL_RING_CONSUMER_H_
