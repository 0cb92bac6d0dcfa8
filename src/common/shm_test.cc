#include "common/shm.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <gtest/gtest.h>

#include <algorithm>

namespace nostall {
namespace {

TEST(ShmTest, SegmentIsPrivateToTheUserAndZeroed) {
  auto seg = ShmSegment::Create("nostall-test", 1 << 20, /*keep_name=*/true);
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  struct stat st;
  ASSERT_EQ(::stat(("/dev/shm" + seg.value()->name()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(static_cast<size_t>(st.st_size), size_t{1} << 20);
  // Fully reserved: the blocks are allocated now, not on first touch.
  EXPECT_GE(static_cast<size_t>(st.st_blocks) * 512, size_t{1} << 20);
  EXPECT_EQ(seg.value()->data()[12345], 0);
  seg.value()->data()[12345] = 7;
  EXPECT_EQ(seg.value()->data()[12345], 7);
}

TEST(ShmTest, UnnamedSegmentLeavesNothingInDevShm) {
  auto seg = ShmSegment::Create("nostall-test", 4096, /*keep_name=*/false);
  ASSERT_TRUE(seg.ok());
  struct stat st;
  EXPECT_NE(::stat(("/dev/shm" + seg.value()->name()).c_str(), &st), 0);
}

TEST(ShmTest, MoreThanDevShmHoldsIsAClearErrorAtCreation) {
  struct statvfs vfs;
  ASSERT_EQ(::statvfs("/dev/shm", &vfs), 0);
  uint64_t too_much = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize + (uint64_t{1} << 30);
  auto seg = ShmSegment::Create("nostall-test", too_much, /*keep_name=*/false);
  ASSERT_FALSE(seg.ok());
  EXPECT_EQ(seg.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(seg.status().message().find("free"), std::string::npos) << seg.status().message();
}

TEST(ShmTest, RoomIsCheckedAgainstMemoryAsWellAsDevShm) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  // /dev/shm with room, memory without: the error says memory.
  Status st = CheckShmRoom(20 * kGiB, /*shm_free=*/24 * kGiB, /*mem_available=*/16 * kGiB,
                           "the batch ring", "lower prefetch");
  ASSERT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("16.0 GiB of memory is available"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("the batch ring"), std::string::npos);
  EXPECT_NE(st.message().find("ask for less"), std::string::npos);
  // Near all of the memory: refused too (the processes need some).
  EXPECT_FALSE(CheckShmRoom(16 * kGiB - 1, 24 * kGiB, 16 * kGiB, "x", "y").ok());
  // Room in both: fine; /dev/shm full: the error says /dev/shm.
  EXPECT_TRUE(CheckShmRoom(8 * kGiB, 24 * kGiB, 16 * kGiB, "x", "y").ok());
  st = CheckShmRoom(8 * kGiB, 4 * kGiB, 16 * kGiB, "x", "y");
  ASSERT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("in /dev/shm"), std::string::npos) << st.message();
}

// Where /dev/shm is larger than the memory available (as on many hosts,
// tmpfs being sized apart from RAM), a segment between the two is refused at
// creation instead of being reserved and ending in the OOM killer.
TEST(ShmTest, SegmentLargerThanMemoryButNotDevShmIsRefused) {
  const uint64_t shm_free = ShmBytesFree(), mem = MemoryAvailable();
  ASSERT_GT(mem, 0u) << "no MemAvailable in /proc/meminfo";
  // Inside /dev/shm's free space, but into the margin kept for processes.
  const uint64_t margin = std::min<uint64_t>(mem / 16, uint64_t{1} << 30);
  const uint64_t size = mem - margin / 2;
  if (shm_free < size) {
    GTEST_SKIP() << "/dev/shm (" << FormatBytes(shm_free) << " free) is smaller than the "
                 << "memory available (" << FormatBytes(mem) << ") on this machine";
  }
  auto seg = ShmSegment::Create("nostall-test", size, /*keep_name=*/false);
  ASSERT_FALSE(seg.ok());
  EXPECT_EQ(seg.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(seg.status().message().find("of memory is available"), std::string::npos)
      << seg.status().message();
}

}  // namespace
}  // namespace nostall
