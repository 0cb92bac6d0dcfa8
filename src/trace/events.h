// The events of a torch.profiler trace as the reader keeps them: only the
// fields the graph needs, names interned (a 300 MB trace holds about a
// million events and a few thousand distinct names).
#ifndef NOSTALL_TRACE_EVENTS_H_
#define NOSTALL_TRACE_EVENTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "nostall/status.h"

namespace nostall::trace {

// Kineto's categories ("cat"); the rest are kOther and not used.
enum class Cat : uint8_t {
  kCpuOp,            // cpu_op: ATen operators
  kUserAnnotation,   // user_annotation: record_function, ProfilerStep#N
  kPython,           // python_function (with_stack)
  kRuntime,          // cuda_runtime
  kDriver,           // cuda_driver
  kKernel,           // kernel
  kMemcpy,           // gpu_memcpy
  kMemset,           // gpu_memset
  kOther,
};

inline bool OnGpu(Cat c) { return c == Cat::kKernel || c == Cat::kMemcpy || c == Cat::kMemset; }
inline bool OnCpu(Cat c) {
  return c == Cat::kCpuOp || c == Cat::kUserAnnotation || c == Cat::kPython ||
         c == Cat::kRuntime || c == Cat::kDriver;
}

struct Event {
  double ts = 0;            // microseconds, as in the file
  double dur = 0;
  int64_t correlation = -1; // args.correlation (runtime call <-> GPU work)
  uint32_t name = 0;        // into Events::names
  uint32_t lane = 0;        // into Events::lanes
  Cat cat = Cat::kOther;
};

struct Lane {
  std::string pid, tid;     // as written (numbers or strings)
  bool gpu = false;
};

struct Events {
  std::vector<Event> events;
  std::vector<std::string> names;
  std::vector<Lane> lanes;
  int64_t counts[static_cast<int>(Cat::kOther) + 1] = {};
  int64_t flows = 0;        // "s"/"f" events (not needed: correlation ids say the same)
  int64_t not_kept = 0;     // complete events past kMaxEvents: counted, not kept
  // The numbers of the trace's "nostall" metadata object (what
  // nostall.trace.mark(prof) adds: the loop's intra-op threads, its cores,
  // the DataLoader's workers), at most kMaxMarks of them.
  std::map<std::string, double> marks;
};

inline constexpr size_t kMaxMarks = 64;

// The events kept of one trace, in file order: memory stays bounded (the
// graph costs some 400 bytes an event) whatever the trace's size, and a
// trace of a few steps holds far fewer. The analysis says how many were not.
inline constexpr int64_t kMaxEvents = 2'000'000;

// Reads the file (gzip or plain) as a stream; complete ("X") events only.
Result<Events> ReadEvents(const std::string& path);

// The same from bytes in memory (the fuzz target and tests).
// `max_events`: the bound on events kept (kMaxEvents; tests give less).
Result<Events> ParseEvents(const char* data, size_t size, const std::string& what,
                           int64_t max_events = kMaxEvents);

}  // namespace nostall::trace

#endif  // NOSTALL_TRACE_EVENTS_H_
