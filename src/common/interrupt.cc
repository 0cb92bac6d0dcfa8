#include "common/interrupt.h"

#include <atomic>

namespace nostall {
namespace {
std::atomic<InterruptCheck> g_check{nullptr};
}  // namespace

void SetInterruptCheck(InterruptCheck check) { g_check.store(check); }

bool Interrupted() {
  const InterruptCheck check = g_check.load(std::memory_order_relaxed);
  return check != nullptr && check();
}

}  // namespace nostall
