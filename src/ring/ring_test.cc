#include "ring/ring.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "common/process.h"
#include "common/shm.h"

namespace nostall::ring {
namespace {

RingLayout Layout(uint32_t slots, int64_t chunk, uint64_t sample_bytes, uint32_t consumers = 0) {
  RingLayout l;
  l.max_consumers = consumers;
  l.slot_count = slots;
  l.chunk = chunk;
  l.sample_bytes = sample_bytes;
  l.shape[0] = static_cast<int64_t>(sample_bytes);
  l.samples_per_epoch = chunk * 3;
  l.chunks_per_epoch = 3;
  l.spec_fingerprint = 0xabc;
  l.spec_json = R"({"source": "d"})";
  return l;
}

int NamesInShm(const std::string& prefix) {
  int n = 0;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) n += std::string(e->d_name).rfind(prefix, 0) == 0;
    ::closedir(d);
  }
  return n;
}

TEST(RingTest, HeaderDescribesTheGeometryAndItsCreator) {
  auto ring = CreateRing("", Layout(3, 5, 27));
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  const Segment& seg = *ring.value();
  EXPECT_EQ(std::memcmp(seg.h->magic, kMagic, 8), 0);
  EXPECT_EQ(seg.h->version, kVersion);
  EXPECT_EQ(seg.h->spec_fingerprint, 0xabcu);
  EXPECT_EQ(seg.g.slot_count, 3u);
  EXPECT_EQ(seg.g.chunk, 5);
  EXPECT_EQ(seg.h->producer_pid, ::getpid());
  EXPECT_EQ(seg.h->producer_start_time, ProcessStartTime(::getpid()));
  EXPECT_EQ(seg.Spec(), R"({"source": "d"})");
  EXPECT_EQ(seg.h->state.load(), static_cast<uint32_t>(kRunning));
  for (uint32_t s = 0; s < 3; ++s) EXPECT_EQ(seg.slots[s].seq.load(), -1);
}

TEST(RingTest, SlotRegionsAreAlignedAndDoNotOverlap) {
  auto ring = CreateRing("", Layout(4, 7, 13)).value();
  for (uint32_t s = 0; s < 4; ++s) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ring->images(s)) % 4096, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ring->labels(s)) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(&ring->slots[s]) % 64, 0u);
    EXPECT_GE(reinterpret_cast<uint8_t*>(ring->labels(s)), ring->images(s) + 7 * 13);
    if (s + 1 < 4) {
      EXPECT_LE(reinterpret_cast<uint8_t*>(ring->indices(s) + 7), ring->images(s + 1));
    }
  }
  // The last slot's last index is inside the mapping.
  ring->indices(3)[6] = 42;
  EXPECT_EQ(ring->indices(3)[6], 42);
  EXPECT_LE(reinterpret_cast<uint8_t*>(ring->indices(3) + 7),
            static_cast<uint8_t*>(ring->mapping.data()) + ring->mapping.size());
}

TEST(RingTest, ExtraFieldsHaveTheirLengthsAndRoomInsideTheirSlot) {
  RingLayout l = Layout(3, 5, 27, /*consumers=*/2);
  l.field_count = 2;
  l.field_room[0] = 100;
  l.field_room[1] = 3;
  const std::string name = "ring-fields-" + std::to_string(::getpid());
  auto ring = CreateRing(name, l).value();
  ::shm_unlink(SegmentName(name).c_str());  // the mapping stays
  EXPECT_EQ(ring->g.field_count, 2u);
  for (uint32_t s = 0; s < 3; ++s) {
    // After the indices, each field's lengths then its bytes, in order, and
    // the last field's last byte before the next slot.
    uint8_t* after_indices = reinterpret_cast<uint8_t*>(ring->indices(s) + 5);
    EXPECT_GE(reinterpret_cast<uint8_t*>(ring->field_lengths(s, 0)), after_indices);
    EXPECT_GE(reinterpret_cast<uint8_t*>(ring->field_lengths(s, 1)), ring->field_data(s, 0) + 5 * 100);
    uint8_t* end = ring->field_data(s, 1) + 5 * 3;
    if (s + 1 < 3) {
      EXPECT_LE(end, ring->images(s + 1));
    }
    EXPECT_LE(end, static_cast<uint8_t*>(ring->mapping.data()) + ring->mapping.size());
    std::memset(ring->field_data(s, 1), 7, 15);  // writable, inside the mapping
  }
  // A header claiming more fields than a ring holds, or fields larger than
  // the slots, is refused by whoever checks it.
  Geometry g = ring->g;
  g.field_count = kMaxFields + 1;
  EXPECT_FALSE(CheckGeometry(g, ring->mapping.size(), "t").ok());
  g = ring->g;
  g.field_room[1] = 1 << 20;  // the slot stride no longer holds it
  EXPECT_FALSE(CheckGeometry(g, ring->mapping.size(), "t").ok());
  EXPECT_TRUE(CheckGeometry(ring->g, ring->mapping.size(), "t").ok());
}

TEST(RingTest, APrivateRingLeavesNoNameBehind) {
  const std::string prefix = "nostall-ring-" + std::to_string(::getpid()) + "-";
  auto ring = CreateRing("", Layout(2, 4, 8));
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  EXPECT_EQ(NamesInShm(prefix), 0);
}

TEST(RingTest, ANamedRingOpensAsCreatedAndItsLiveNameIsNotTaken) {
  const std::string name = "ring-test-" + std::to_string(::getpid());
  auto ring = CreateRing(name, Layout(3, 4, 8, /*consumers=*/2));
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  auto opened = OpenNamedRing(name, /*writable=*/false, /*wait_s=*/0);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(opened.value()->g.slot_stride, ring.value()->g.slot_stride);
  EXPECT_EQ(opened.value()->g.max_consumers, 2u);
  auto again = CreateRing(name, Layout(3, 4, 8, 2));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("already served"), std::string::npos);
  ::shm_unlink(SegmentName(name).c_str());
}

TEST(RingTest, AbsurdGeometryIsRejectedBeforeAllocating) {
  EXPECT_EQ(CreateRing("", Layout(2, 1 << 20, 1ull << 40)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(CreateRing("", Layout(0, 1, 1)).ok());
  EXPECT_FALSE(CreateRing("", Layout(2, 1, 1, /*consumers=*/65)).ok());
}

TEST(RingTest, ANamedRingIsPrivateToTheUserAndFullyReserved) {
  const std::string name = "ring-mode-" + std::to_string(::getpid());
  auto ring = CreateRing(name, Layout(2, 64, 4096, 1));
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  struct stat st;
  ASSERT_EQ(::stat(("/dev/shm" + SegmentName(name)).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), ring.value()->mapping.size());
  // Reserved now, not on first touch (a full /dev/shm is an error here).
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, ring.value()->mapping.size());
  EXPECT_EQ(ring.value()->images(1)[100], 0);
  ::shm_unlink(SegmentName(name).c_str());
}

TEST(RingTest, MoreThanDevShmHoldsIsAClearErrorAtCreation) {
  struct statvfs vfs;
  ASSERT_EQ(::statvfs("/dev/shm", &vfs), 0);
  const uint64_t too_much = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize + (uint64_t{1} << 30);
  auto ring = CreateRing("", Layout(1, 1024, too_much / 1024 + 1));
  ASSERT_FALSE(ring.ok());
  EXPECT_EQ(ring.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(ring.status().message().find("free"), std::string::npos) << ring.status().message();
  EXPECT_NE(ring.status().message().find("batch ring"), std::string::npos);
}

// Where /dev/shm is larger than the memory available (as on many hosts,
// tmpfs being sized apart from RAM), a ring between the two is refused at
// creation instead of being reserved and ending in the OOM killer.
TEST(RingTest, ARingLargerThanMemoryButNotDevShmIsRefused) {
  const uint64_t shm_free = ShmBytesFree(), mem = MemoryAvailable();
  ASSERT_GT(mem, 0u) << "no MemAvailable in /proc/meminfo";
  const uint64_t margin = std::min<uint64_t>(mem / 16, uint64_t{1} << 30);
  const uint64_t size = mem - margin / 2;
  if (shm_free < size) {
    GTEST_SKIP() << "/dev/shm (" << FormatBytes(shm_free) << " free) is smaller than the "
                 << "memory available (" << FormatBytes(mem) << ") on this machine";
  }
  auto ring = CreateRing("", Layout(1, 1024, size / 1024));
  ASSERT_FALSE(ring.ok());
  EXPECT_EQ(ring.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(ring.status().message().find("of memory is available"), std::string::npos)
      << ring.status().message();
}

}  // namespace
}  // namespace nostall::ring
