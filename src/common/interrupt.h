// A process-wide "has the user asked to stop?" that long waits on the
// caller's thread (an S3 listing, a request retried) ask now and then: the
// Python binding sets it to check for Ctrl-C on the main thread, so a
// constructor that waits on a server can be interrupted.
#ifndef NOSTALL_COMMON_INTERRUPT_H_
#define NOSTALL_COMMON_INTERRUPT_H_

namespace nostall {

using InterruptCheck = bool (*)();
// Sets the check (nullptr: none). Set once, before any wait.
void SetInterruptCheck(InterruptCheck check);
// True if the check says so; false without one. Cheap enough for a wait
// that wakes every 100 ms.
bool Interrupted();

}  // namespace nostall

#endif  // NOSTALL_COMMON_INTERRUPT_H_
