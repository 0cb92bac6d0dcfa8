#include "ring/batch_ring.h"
#include "common/process.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>

namespace nostall {
namespace {

TEST(BatchRingTest, HeaderDescribesTheGeometryAndItsCreator) {
  auto ring = BatchRing::Create({/*slot_count=*/3, /*batch_size=*/5, /*sample_bytes=*/27}, 0xabc);
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  const RingHeader& h = ring.value()->header();
  EXPECT_EQ(std::memcmp(h.magic, kRingMagic, 8), 0);
  EXPECT_EQ(h.version, kRingVersion);
  EXPECT_EQ(h.spec_fingerprint, 0xabcu);
  EXPECT_EQ(h.slot_count, 3u);
  EXPECT_EQ(h.creator_pid, ::getpid());
  EXPECT_EQ(h.creator_start_time, ProcessStartTime(::getpid()));
  EXPECT_NE(h.creator_start_time, 0u);
}

TEST(BatchRingTest, SlotRegionsAreAlignedAndDoNotOverlap) {
  auto ring = BatchRing::Create({4, 7, 13}, 0).value();
  for (uint64_t s = 0; s < 4; ++s) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ring->images(s)) % 4096, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ring->labels(s)) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(&ring->slot(s)) % 64, 0u);
    EXPECT_GE(reinterpret_cast<uint8_t*>(ring->labels(s)), ring->images(s) + 7 * 13);
    if (s + 1 < 4) {
      EXPECT_LE(reinterpret_cast<uint8_t*>(ring->indices(s) + 7), ring->images(s + 1));
    }
    EXPECT_EQ(ring->slot(s).state.load(), static_cast<uint32_t>(SlotState::kFree));
  }
  // The last slot's last index is inside the mapping.
  ring->indices(3)[6] = 42;
  EXPECT_EQ(ring->indices(3)[6], 42);
}

TEST(BatchRingTest, AbsurdGeometryIsRejectedBeforeAllocating) {
  EXPECT_EQ(BatchRing::Create({2, 1 << 20, 1ull << 40}, 0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(BatchRing::Create({0, 1, 1}, 0).ok());
}

}  // namespace
}  // namespace nostall
