#include "common/shm.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace nostall
