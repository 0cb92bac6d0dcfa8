// The scans a video loader keeps (video::ScanCache): by item, within a byte
// budget, the least recently used dropped first.
#include <gtest/gtest.h>

#include <memory>

#include "video/kind.h"

namespace nostall::video {
namespace {

std::shared_ptr<const Scanned> ScanOf(size_t bytes) {
  auto s = std::make_shared<Scanned>();
  s->bytes = bytes;
  return s;
}

TEST(ScanCacheTest, KeepsScansByItemWithinItsBudgetDroppingTheLeastRecentlyUsed) {
  ScanCache cache(300);
  auto a = ScanOf(100), b = ScanOf(100), c = ScanOf(100), d = ScanOf(100);
  cache.Put(1, a);
  cache.Put(2, b);
  cache.Put(3, c);
  EXPECT_EQ(cache.bytes(), 300u);
  EXPECT_EQ(cache.Get(1), a);  // 1 is now the most recent: 2 goes first
  cache.Put(4, d);
  EXPECT_EQ(cache.Get(2), nullptr);
  EXPECT_EQ(cache.Get(1), a);
  EXPECT_EQ(cache.Get(3), c);
  EXPECT_EQ(cache.Get(4), d);
  EXPECT_EQ(cache.bytes(), 300u);
  // A scan given again for an item replaces the one kept; one over the
  // budget is not kept (and drops nothing).
  auto c2 = ScanOf(50);
  cache.Put(3, c2);
  EXPECT_EQ(cache.Get(3), c2);
  EXPECT_EQ(cache.bytes(), 250u);
  cache.Put(5, ScanOf(301));
  EXPECT_EQ(cache.Get(5), nullptr);
  EXPECT_EQ(cache.Get(1), a);
  cache.Put(6, nullptr);
  EXPECT_EQ(cache.Get(6), nullptr);
}

}  // namespace
}  // namespace nostall::video
