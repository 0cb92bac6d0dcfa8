// For the shared-segment fuzz target only: makes the fuzzer's bytes claim
// a live producer (this process) of this format version, so that attaching
// gets past those checks and into the geometry and the tables.
#ifndef NOSTALL_SHARED_SHARED_FUZZ_SUPPORT_H_
#define NOSTALL_SHARED_SHARED_FUZZ_SUPPORT_H_

#include <cstddef>

namespace nostall {

void MakeHeaderClaimLiveProducerForFuzzing(void* bytes, size_t size);

}  // namespace nostall

#endif  // NOSTALL_SHARED_SHARED_FUZZ_SUPPORT_H_
