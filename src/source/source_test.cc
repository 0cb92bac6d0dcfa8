#include "nostall/source.h"

#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "common/fd.h"
#include "testing/test_images.h"

namespace nostall {
namespace {

using testing::AppendTarMember;
using testing::EncodeJpeg;
using testing::FinishTar;
using testing::MakePixels;
using testing::TempDir;
using testing::WriteFile;

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

SourceOptions NoCache() {
  SourceOptions o;
  o.use_index_cache = false;
  return o;
}

TEST(ImageFolderTest, ClassesSortedFilesRecursiveOthersIgnored) {
  TempDir dir;
  auto jpg = EncodeJpeg(MakePixels(8, 8, 3, 0), 8, 8, 3);
  WriteFile(dir.path() + "/zebra/b.jpg", jpg);
  WriteFile(dir.path() + "/zebra/a.JPEG", jpg);
  WriteFile(dir.path() + "/Apple/x.png", jpg);
  WriteFile(dir.path() + "/Apple/deep/y.jpg", jpg);
  WriteFile(dir.path() + "/Apple/notes.txt", Bytes("hello"));
  auto src = OpenSource(dir.path(), NoCache());
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  const Source& s = *src.value();
  // Byte order puts "Apple" before "zebra", as Python's sorted() does.
  EXPECT_EQ(s.classes(), (std::vector<std::string>{"Apple", "zebra"}));
  ASSERT_EQ(s.size(), 4);
  EXPECT_EQ(s.key(0), dir.path() + "/Apple/x.png");
  EXPECT_EQ(s.key(1), dir.path() + "/Apple/deep/y.jpg");
  EXPECT_EQ(s.key(2), dir.path() + "/zebra/a.JPEG");
  EXPECT_EQ(s.label(1), 0);
  EXPECT_EQ(s.label(3), 1);
  std::vector<uint8_t> out;
  ASSERT_TRUE(s.Read(3, &out).ok());
  EXPECT_EQ(out, jpg);
}

TEST(ImageFolderTest, MissingAndEmptyFoldersAreClearErrors) {
  TempDir dir;
  auto missing = OpenSource(dir.path() + "/nope", NoCache());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto no_classes = OpenSource(dir.path(), NoCache());
  EXPECT_EQ(no_classes.status().code(), StatusCode::kNotFound);
  std::filesystem::create_directories(dir.path() + "/empty_class");
  auto empty = OpenSource(dir.path(), NoCache());
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty_class"), std::string::npos);
}

TEST(ImageFolderTest, IndexIsCachedAndRebuiltWhenTheFolderChanges) {
  TempDir dir, cache;
  auto jpg = EncodeJpeg(MakePixels(8, 8, 3, 0), 8, 8, 3);
  WriteFile(dir.path() + "/a/1.jpg", jpg);
  SourceOptions o;
  o.index_cache_dir = cache.path();
  ASSERT_EQ(OpenSource(dir.path(), o).value()->size(), 1);
  ASSERT_FALSE(std::filesystem::is_empty(cache.path()));
  // A file added under a class folder changes that folder's mtime.
  usleep(20000);
  WriteFile(dir.path() + "/a/2.jpg", jpg);
  EXPECT_EQ(OpenSource(dir.path(), o).value()->size(), 2);
  // A corrupt cache file is ignored, not trusted.
  for (auto& e : std::filesystem::directory_iterator(cache.path())) WriteFile(e.path(), Bytes("junk"));
  EXPECT_EQ(OpenSource(dir.path(), o).value()->size(), 2);
}

TEST(TarSourceTest, GroupsMembersByKeyAndReadsLabels) {
  TempDir dir;
  auto a = EncodeJpeg(MakePixels(8, 8, 3, 1), 8, 8, 3);
  auto b = EncodeJpeg(MakePixels(8, 8, 3, 2), 8, 8, 3);
  std::vector<uint8_t> tar;
  AppendTarMember(&tar, "s/0001.jpg", a);
  AppendTarMember(&tar, "s/0001.cls", Bytes("3\n"));
  AppendTarMember(&tar, "s/0002.cls", Bytes("7"));
  AppendTarMember(&tar, "s/0002.png", b);
  FinishTar(&tar);
  WriteFile(dir.path() + "/train-0000.tar", tar);
  WriteFile(dir.path() + "/train-0001.tar", tar);
  auto src = OpenSource(dir.path() + "/train-{0000..0001}.tar", NoCache());
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  const Source& s = *src.value();
  ASSERT_EQ(s.size(), 4);
  EXPECT_EQ(s.label(0), 3);
  EXPECT_EQ(s.label(1), 7);
  EXPECT_EQ(s.key(0), dir.path() + "/train-0000.tar:s/0001.jpg");
  std::vector<uint8_t> out;
  ASSERT_TRUE(s.Read(3, &out).ok());
  EXPECT_EQ(out, b);
  EXPECT_EQ(std::string(s.kind()), "tar-shards");
}

TEST(TarSourceTest, BadSamplesFailOrAreSkipped) {
  TempDir dir;
  std::vector<uint8_t> tar;
  AppendTarMember(&tar, "0001.jpg", EncodeJpeg(MakePixels(8, 8, 3, 1), 8, 8, 3));
  AppendTarMember(&tar, "0001.cls", Bytes("1"));
  AppendTarMember(&tar, "0002.cls", Bytes("2"));  // no image
  AppendTarMember(&tar, "0003.jpg", EncodeJpeg(MakePixels(8, 8, 3, 1), 8, 8, 3));
  AppendTarMember(&tar, "0003.cls", Bytes("cat"));  // not a number
  FinishTar(&tar);
  WriteFile(dir.path() + "/a.tar", tar);
  auto strict = OpenSource(dir.path() + "/a.tar", NoCache());
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), StatusCode::kDataError);
  EXPECT_EQ(strict.status().item(), dir.path() + "/a.tar:0002");
  SourceOptions skip = NoCache();
  skip.skip_bad_samples = true;
  auto lenient = OpenSource(dir.path() + "/a.tar", skip);
  ASSERT_TRUE(lenient.ok());
  EXPECT_EQ(lenient.value()->size(), 1);
  EXPECT_EQ(lenient.value()->skipped_at_index(), 2);
}

TEST(TarSourceTest, TruncatedOrForeignShardIsADataErrorNamingIt) {
  TempDir dir;
  std::vector<uint8_t> tar;
  AppendTarMember(&tar, "0001.jpg", std::vector<uint8_t>(5000, 1));
  tar.resize(2000);  // cut inside the member
  WriteFile(dir.path() + "/cut.tar", tar);
  auto cut = OpenSource(dir.path() + "/cut.tar", NoCache());
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().item(), dir.path() + "/cut.tar");
  EXPECT_NE(cut.status().message().find("past the end"), std::string::npos);
  WriteFile(dir.path() + "/junk.tar", std::vector<uint8_t>(4096, 'x'));
  auto junk = OpenSource(dir.path() + "/junk.tar", NoCache());
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("checksum"), std::string::npos);
  EXPECT_EQ(OpenSource(dir.path() + "/none-{0..3}.tar", NoCache()).status().code(),
            StatusCode::kNotFound);
}

TEST(ExpandBracesTest, RangesKeepPaddingAndListsExpand) {
  auto r = ExpandBraces("d/t-{008..011}-{a,b}.tar");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.value().size(), 8u);
  EXPECT_EQ(r.value()[0], "d/t-008-a.tar");
  EXPECT_EQ(r.value()[7], "d/t-011-b.tar");
  EXPECT_FALSE(ExpandBraces("x{1..").ok());
  EXPECT_FALSE(ExpandBraces("x{5..1}").ok());
}

}  // namespace
}  // namespace nostall

namespace nostall {
namespace {

// Reads `n` items with `threads` threads at once; returns the wall seconds.
double ReadAll(const Source& s, int threads) {
  auto t0 = std::chrono::steady_clock::now();
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      std::vector<uint8_t> buf;
      for (int64_t i; (i = next.fetch_add(1)) < s.size();) EXPECT_TRUE(s.Read(i, &buf).ok());
    });
  }
  for (auto& t : pool) t.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(ThrottleTest, BandwidthIsSharedByAllReads) {
  testing::TempDir dir;
  for (int i = 0; i < 20; ++i) {
    testing::WriteFile(dir.path() + "/a/" + std::to_string(i) + ".jpg",
                       std::vector<uint8_t>(50000, 1));
  }
  SourceOptions o = NoCache();
  o.throttle_bytes_per_second = 2e6;  // 20 x 50 KB = 1 MB -> 0.5 s, however many readers
  auto src = OpenSource(dir.path(), o).value();
  for (int threads : {1, 4}) {
    double secs = ReadAll(*src, threads);
    EXPECT_GT(secs, 0.45) << threads << " threads";
    EXPECT_LT(secs, 0.75) << threads << " threads";
  }
}

TEST(ThrottleTest, LatencyOverlapsAcrossConcurrentReads) {
  testing::TempDir dir;
  for (int i = 0; i < 8; ++i) {
    testing::WriteFile(dir.path() + "/a/" + std::to_string(i) + ".jpg", std::vector<uint8_t>(10, 1));
  }
  SourceOptions o = NoCache();
  o.throttle_latency_ms = 100;
  auto src = OpenSource(dir.path(), o).value();
  double serial = ReadAll(*src, 1);    // 8 x 100 ms
  double parallel = ReadAll(*src, 8);  // all at once: about 100 ms
  EXPECT_GT(serial, 0.75);
  EXPECT_LT(parallel, 0.4);
  EXPECT_GT(parallel, 0.09);
  o.throttle_latency_ms = -1;
  EXPECT_EQ(OpenSource(dir.path(), o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nostall

namespace nostall {
namespace {

// Pages of `path` in the page cache, asked of the kernel with mincore().
size_t ResidentPages(const std::string& path) {
  auto fd = OpenReadOnly(path).value();
  struct stat st;
  ::fstat(fd.get(), &st);
  void* map = ::mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd.get(), 0);
  size_t pages = (st.st_size + 4095) / 4096, resident = 0;
  std::vector<unsigned char> vec(pages);
  ::mincore(map, st.st_size, vec.data());
  for (unsigned char v : vec) resident += v & 1;
  ::munmap(map, st.st_size);
  return resident;
}

// A fresh folder holding one 1 MiB file, a/1.jpg, on a disk: tmpfs pages
// cannot be dropped (they are the only copy), so when the temp dir is tmpfs
// the working directory (the build tree) is used.
std::string DiskFolderWithOneFile(const char* name) {
  struct statfs fs;
  std::string base = std::filesystem::temp_directory_path().string();
  if (::statfs(base.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC) base = ".";
  std::string root = base + "/" + name + "-" + std::to_string(::getpid());
  std::filesystem::remove_all(root);
  testing::WriteFile(root + "/a/1.jpg", std::vector<uint8_t>(1 << 20, 7));
  ::sync();
  return root;
}

TEST(DropPageCacheTest, ReadItemsLeaveNoPagesBehind) {
  std::string root = DiskFolderWithOneFile("nostall-fadvise-test");
  for (bool drop : {false, true}) {
    SourceOptions o = NoCache();
    o.drop_page_cache = drop;
    auto src = OpenSource(root, o).value();
    std::vector<uint8_t> buf;
    ASSERT_TRUE(src->Read(0, &buf).ok());
    EXPECT_EQ(buf.size(), size_t{1} << 20);
    if (drop) {
      EXPECT_EQ(ResidentPages(root + "/a/1.jpg"), 0u);
    } else {
      EXPECT_GT(ResidentPages(root + "/a/1.jpg"), 200u);
    }
  }
  std::filesystem::remove_all(root);
}

TEST(DropPageCacheTest, EvictDropsAnItemThatWasRead) {
  std::string root = DiskFolderWithOneFile("nostall-evict-test");
  auto src = OpenSource(root, NoCache()).value();
  std::vector<uint8_t> buf;
  ASSERT_TRUE(src->Read(0, &buf).ok());
  EXPECT_GT(ResidentPages(root + "/a/1.jpg"), 200u);
  ASSERT_TRUE(src->Evict(0).ok());
  EXPECT_EQ(ResidentPages(root + "/a/1.jpg"), 0u);
  std::filesystem::remove_all(root + "/a/1.jpg");
  EXPECT_FALSE(src->Evict(0).ok());  // vanished: an error, not a crash
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace nostall
