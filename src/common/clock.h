// Clocks used by the stats: wall time, this thread's and this process's CPU time;
// and a duration as messages say it.
#ifndef NOSTALL_COMMON_CLOCK_H_
#define NOSTALL_COMMON_CLOCK_H_

#include <time.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

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

// The time since `t0` as messages say it: "1.23 s".
inline std::string SecondsSince(std::chrono::steady_clock::time_point t0) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f s",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return text;
}

}  // namespace nostall

#endif  // NOSTALL_COMMON_CLOCK_H_
