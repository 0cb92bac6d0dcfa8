#include "common/shm.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <gtest/gtest.h>

#include <algorithm>

namespace nostall {
namespace {

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

}  // namespace
}  // namespace nostall
