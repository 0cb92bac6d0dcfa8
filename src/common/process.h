// Telling a live process from a dead one across processes: a pid alone can
// be reused, so every record of "who holds this" pairs the pid with the
// process's start time.
#ifndef NOSTALL_COMMON_PROCESS_H_
#define NOSTALL_COMMON_PROCESS_H_

#include <cstdint>

namespace nostall {

// The start time of process `pid` in clock ticks since boot (/proc/<pid>/stat
// field 22); 0 if there is no such process, or if it has exited and only
// waits to be reaped (a zombie: it holds nothing and never runs again).
uint64_t ProcessStartTime(int64_t pid);

// This process's start time (computed once per process, fork included).
uint64_t SelfStartTime();

// Whether `pid` is alive and is the process that recorded `start_time`
// (0: unknown, the pid alone decides).
bool ProcessAlive(int64_t pid, uint64_t start_time);

// Crash points, for tests that kill a party of a cross-process protocol at
// each step that matters. Protocol code marks a step with CrashPoint("name");
// normally that is one relaxed load. After KillAtCrashPointForTest(name, n),
// the n-th time this process reaches that point it SIGKILLs itself (no
// destructors, no unwinding: as a real crash or `kill -9` would leave it).
void CrashPoint(const char* name);
void KillAtCrashPointForTest(const char* name, int nth);

}  // namespace nostall

#endif  // NOSTALL_COMMON_PROCESS_H_
