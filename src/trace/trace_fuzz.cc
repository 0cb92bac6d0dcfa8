// Fuzz target: a profiler trace (a file a user hands to `nostall analyze
// --trace`, from anywhere): parsed, built into its graph, replayed with
// every kind of change. Nothing may crash, hang or leak; bad input is a
// DataError.
#include <cstddef>
#include <cstdint>

#include "nostall/trace.h"
#include "trace/events.h"
#include "trace/graph.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nostall::trace;
  // A small bound on the events kept, so that inputs reach it.
  auto ev = ParseEvents(reinterpret_cast<const char*>(data), size, "fuzz.json", /*max_events=*/128);
  if (!ev.ok()) return 0;
  auto g = BuildGraph(std::move(ev).value(), "fuzz.json");
  if (!g.ok()) return 0;
  (void)FactsJson(g.value());
  for (const char* change : {"{}", "{\"loader_free\": true}", "{\"loader_period\": 0.01}",
                             "{\"gpu_speedup\": 2, \"amp\": true, \"pinned_copies\": true}",
                             "{\"fused_optimizer\": true, \"threads_from\": 1, \"threads_to\": 4}"}) {
    auto c = ChangeFromJson(change);
    if (c.ok()) (void)SimulateJson(g.value(), c.value());
  }
  return 0;
}
