#include "common/process.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include <fstream>
#include <sstream>
#include <string>

namespace nostall {

uint64_t ProcessStartTime(int64_t pid) {
  if (pid <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  // The command name (field 2) may hold spaces; fields resume after ')'.
  size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 > line.size()) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    // Field 3, the state: a zombie (Z) or a dying task (X) never runs again;
    // its pid lingers only until its parent reaps it.
    if (i == 3 && (field == "Z" || field == "X")) return 0;
    if (i == 22) return std::stoull(field);
  }
  return 0;
}

uint64_t SelfStartTime() {
  // Keyed by pid, so a forked child does not inherit its parent's answer.
  thread_local pid_t pid = 0;
  thread_local uint64_t start = 0;
  if (pid != ::getpid()) {
    pid = ::getpid();
    start = ProcessStartTime(pid);
  }
  return start;
}

bool ProcessAlive(int64_t pid, uint64_t start_time) {
  const uint64_t now = ProcessStartTime(pid);
  return now != 0 && (start_time == 0 || now == start_time);
}

namespace {
std::atomic<const char*> g_crash_point{nullptr};
std::atomic<int> g_crash_countdown{0};
}  // namespace

void CrashPoint(const char* name) {
  const char* armed = g_crash_point.load(std::memory_order_relaxed);
  if (armed == nullptr || std::strcmp(armed, name) != 0) return;
  if (g_crash_countdown.fetch_sub(1) == 1) ::raise(SIGKILL);
}

void KillAtCrashPointForTest(const char* name, int nth) {
  g_crash_countdown.store(nth);
  g_crash_point.store(name);
}

}  // namespace nostall
