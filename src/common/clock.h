// Clocks used by the stats: wall time, this thread's and this process's CPU time.
#ifndef NOSTALL_COMMON_CLOCK_H_
#define NOSTALL_COMMON_CLOCK_H_

#include <time.h>

#include <cstdint>

namespace nostall {

inline int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline int64_t ProcessCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace nostall

#endif  // NOSTALL_COMMON_CLOCK_H_
