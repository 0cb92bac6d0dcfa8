#include "common/process.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace nostall {
namespace {

TEST(ProcessTest, StartTimeTellsAReusedPidApart) {
  const uint64_t mine = SelfStartTime();
  EXPECT_NE(mine, 0u);
  EXPECT_EQ(mine, ProcessStartTime(::getpid()));
  EXPECT_TRUE(ProcessAlive(::getpid(), mine));
  EXPECT_TRUE(ProcessAlive(::getpid(), 0));           // start unknown: the pid decides
  EXPECT_FALSE(ProcessAlive(::getpid(), mine + 1));   // same pid, another process
  pid_t child = ::fork();
  if (child == 0) {
    // A forked child has its own start time, not its parent's.
    ::_exit(SelfStartTime() == ProcessStartTime(::getpid()) ? 0 : 1);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(ProcessAlive(child, 0));  // reaped: gone
  EXPECT_EQ(ProcessStartTime(-1), 0u);
}

TEST(ProcessTest, AnExitedChildNotYetReapedIsDead) {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  // Until waitpid, the child is a zombie: its pid still has a /proc entry.
  for (int i = 0; i < 500 && ProcessAlive(child, 0); ++i) ::usleep(2000);
  EXPECT_FALSE(ProcessAlive(child, 0));
  EXPECT_EQ(::access(("/proc/" + std::to_string(child) + "/stat").c_str(), F_OK), 0)
      << "the zombie should still be there";
  ::waitpid(child, nullptr, 0);
}

}  // namespace
}  // namespace nostall
