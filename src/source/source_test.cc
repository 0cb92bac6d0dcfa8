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
#include <fstream>
#include <functional>
#include <thread>
#include <cstring>
#include <sys/types.h>

#include "common/fd.h"
#include "source/index/index_file.h"
#include "source/index/tar_index.h"
#include "testing/test_images.h"

namespace nostall {
namespace {

using testing::AppendTarMember;
using testing::Bytes;
using testing::EncodeJpeg;
using testing::FinishTar;
using testing::MakePixels;
using testing::TempDir;
using testing::WriteFile;


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

// Shards of `per` samples each, sample k of shard s holding the bytes
// "s/k" as its image and label 10 * s + k.
std::string WriteNumberedShards(const std::string& dir, int shards, int per) {
  for (int s = 0; s < shards; ++s) {
    std::vector<uint8_t> tar;
    for (int k = 0; k < per; ++k) {
      const std::string key = "x/" + std::to_string(s) + "-" + std::to_string(k);
      AppendTarMember(&tar, key + ".jpg", Bytes(std::to_string(s) + "/" + std::to_string(k)));
      AppendTarMember(&tar, key + ".cls", Bytes(std::to_string(10 * s + k)));
    }
    FinishTar(&tar);
    WriteFile(dir + "/train-" + std::to_string(s) + ".tar", tar);
  }
  return dir + "/train-{0.." + std::to_string(shards - 1) + "}.tar";
}

TEST(TarSourceTest, IndexedAsReadServesEachShardOnceItIsInThenTheWholeIndex) {
  TempDir dir, cache;
  const std::string uri = WriteNumberedShards(dir.path(), 5, 7);
  SourceOptions o;
  o.index_cache_dir = cache.path();
  o.lazy_index = true;
  auto src = OpenSource(uri, o);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  const Source& s = *src.value();
  std::shared_ptr<ShardedItems> shards = s.sharded();
  ASSERT_NE(shards, nullptr);
  EXPECT_EQ(shards->shard_count(), 5);
  shards->Begin({3, 0, 4, 1, 2});
  ASSERT_TRUE(shards->Count(3).ok());
  EXPECT_EQ(shards->Count(3).value(), 7);
  // A sample of an indexed shard reads, labels and names right by its key
  // (shard and place), whether or not the others are indexed yet.
  const int64_t id = ShardMemberKey(3, 5);
  std::vector<uint8_t> out;
  ASSERT_TRUE(s.Read(id, &out).ok());
  EXPECT_EQ(out, Bytes("3/5"));
  EXPECT_EQ(s.label(id), 35);
  EXPECT_EQ(s.key(id), dir.path() + "/train-3.tar:x/3-5.jpg");
  ASSERT_TRUE(shards->Total().ok());
  EXPECT_EQ(shards->Total().value(), 35);
  EXPECT_TRUE(shards->complete());
  EXPECT_EQ(s.size(), 35);
  // Once whole: the index a cold build makes (shard order), and an id
  // handed out before still reads its sample.
  const int64_t whole = shards->Id(3, 5);
  EXPECT_EQ(whole, 3 * 7 + 5);
  EXPECT_NE(whole, id);
  EXPECT_EQ(shards->StableKey(whole), shards->StableKey(id));
  ASSERT_TRUE(s.Read(id, &out).ok());
  EXPECT_EQ(out, Bytes("3/5"));
  ASSERT_TRUE(s.Read(whole, &out).ok());
  EXPECT_EQ(out, Bytes("3/5"));
  EXPECT_EQ(s.key(0), dir.path() + "/train-0.tar:x/0-0.jpg");
  EXPECT_NE(s.index_origin().find("indexed as the shards were first read"), std::string::npos) << s.index_origin();
  // Saved to the cache: the next loader opens it, exact, with the same items.
  o.lazy_index = false;
  auto next = OpenSource(uri, o);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next.value()->fingerprint(), s.fingerprint());
  EXPECT_NE(next.value()->index_origin().find("the index cache"), std::string::npos);
  // With the index there, even a loader that allows it does not index as it reads.
  o.lazy_index = true;
  auto again = OpenSource(uri, o);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again.value()->sharded()->complete());
}

TEST(TarSourceTest, IndexedAsReadNamesAShardThatCannotBeIndexed) {
  TempDir dir;
  const std::string uri = WriteNumberedShards(dir.path(), 3, 4);
  std::vector<uint8_t> bad(1024, 'z');  // not a tar header
  WriteFile(dir.path() + "/train-1.tar", bad);
  SourceOptions o = NoCache();
  o.lazy_index = true;
  auto src = OpenSource(uri, o);
  ASSERT_TRUE(src.ok()) << "opens at once: no shard is read yet";
  std::shared_ptr<ShardedItems> shards = src.value()->sharded();
  shards->Begin({0, 1, 2});
  EXPECT_TRUE(shards->Count(0).ok());
  Result<int64_t> total = shards->Total();
  ASSERT_FALSE(total.ok());
  EXPECT_NE(total.status().Describe().find("train-1.tar"), std::string::npos) << total.status().Describe();
  EXPECT_EQ(src.value()->size(), 0);
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

// Rewrites header field [at, at + n) of the tar member whose header starts
// at `header` and fixes the checksum, as a hostile tool could.
void PatchTarHeader(std::vector<uint8_t>* tar, size_t header, size_t at,
                    const std::vector<uint8_t>& field, char type = 0) {
  uint8_t* h = tar->data() + header;
  std::memcpy(h + at, field.data(), field.size());
  if (type != 0) h[156] = static_cast<uint8_t>(type);
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; ++i) sum += h[i];
  std::snprintf(reinterpret_cast<char*>(h) + 148, 8, "%06o", sum);
}

// Runs `f` on a thread; false (and the thread left behind) if it has not
// returned within 10 s, so a hang fails the test instead of the suite.
template <typename F>
bool FinishesWithin10s(F f) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread t([done, f]() mutable {
    f();
    done->store(true);
  });
  for (int i = 0; i < 1000 && !done->load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!done->load()) {
    t.detach();
    return false;
  }
  t.join();
  return true;
}

Result<std::unique_ptr<Source>> OpenWithin10s(const std::string& uri, const SourceOptions& o) {
  auto result = std::make_shared<Result<std::unique_ptr<Source>>>(Internal("hung"));
  if (!FinishesWithin10s([=] { *result = OpenSource(uri, o); })) {
    ADD_FAILURE() << "OpenSource(" << uri << ") hung";
    return Internal("hung");
  }
  return std::move(*result);
}

TEST(TarSourceTest, HostileSizeFieldsAreErrorsNotLoops) {
  TempDir dir;
  auto jpg = EncodeJpeg(MakePixels(8, 8, 3, 0), 8, 8, 3);
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    std::vector<uint8_t> tar;
    AppendTarMember(&tar, "a.jpg", jpg);
    AppendTarMember(&tar, "a.cls", Bytes("1"));
    FinishTar(&tar);
    std::vector<uint8_t> size(12, 0xff);  // GNU base-256 size: 2^88 - 1 (negative)
    if (variant == 1) {                   // 2^64 - 512: data + size wraps to data - 512
      size.assign(12, 0);
      size[0] = 0x80;
      for (int i = 4; i < 12; ++i) size[i] = 0xff;
      size[10] = 0xfe;
      size[11] = 0x00;
    }
    if (variant == 2) {  // 2^63 + 512 in base-256
      size.assign(12, 0);
      size[0] = 0x80;
      size[4] = 0x80;
      size[10] = 0x02;
    }
    PatchTarHeader(&tar, 0, 124, size);
    WriteFile(dir.path() + "/s.tar", tar);
    auto src = OpenWithin10s(dir.path() + "/s.tar", NoCache());
    ASSERT_FALSE(src.ok());
    EXPECT_EQ(src.status().code(), StatusCode::kDataError) << src.status().ToString();
    EXPECT_EQ(src.status().item(), dir.path() + "/s.tar");
  }
}

TEST(TarSourceTest, PaxRecordWithAWrappingLengthIsIgnoredNotLooped) {
  TempDir dir;
  auto jpg = EncodeJpeg(MakePixels(8, 8, 3, 0), 8, 8, 3);
  for (const std::string& recs : {std::string("18446744073709551606 path=x.jpg\n"),
                                  std::string("3 path=x.jpg\n"),
                                  std::string("99999999999999999999999 path=y\n"),
                                  std::string("0 \n"), std::string(" 5 a=b\n"),
                                  std::string()}) {
    SCOPED_TRACE(recs);
    std::vector<uint8_t> tar;
    AppendTarMember(&tar, "PaxHeader", Bytes(recs));
    PatchTarHeader(&tar, 0, 0, Bytes("PaxHeader"), 'x');
    AppendTarMember(&tar, "k.jpg", jpg);
    AppendTarMember(&tar, "k.cls", Bytes("3"));
    FinishTar(&tar);
    WriteFile(dir.path() + "/p.tar", tar);
    auto src = OpenWithin10s(dir.path() + "/p.tar", NoCache());
    ASSERT_TRUE(src.ok()) << src.status().ToString();
    ASSERT_EQ(src.value()->size(), 1);
    EXPECT_EQ(src.value()->label(0), 3);
  }
}

// A GNU long-name ('L') member of size 0 names nothing: the next member keeps
// its own name (this read a null buffer once).
TEST(TarSourceTest, EmptyLongNameMemberLeavesTheNextNameAlone) {
  TempDir dir;
  auto jpg = EncodeJpeg(MakePixels(8, 8, 3, 0), 8, 8, 3);
  std::vector<uint8_t> tar;
  AppendTarMember(&tar, "././@LongLink", {});
  PatchTarHeader(&tar, 0, 0, Bytes("././@LongLink"), 'L');
  AppendTarMember(&tar, "k.jpg", jpg);
  AppendTarMember(&tar, "k.cls", Bytes("4"));
  FinishTar(&tar);
  WriteFile(dir.path() + "/l.tar", tar);
  auto src = OpenWithin10s(dir.path() + "/l.tar", NoCache());
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  ASSERT_EQ(src.value()->size(), 1);
  EXPECT_EQ(src.value()->label(0), 4);
}

TEST(TarSourceTest, LabelsThatDoNotFitOrAreNotTextAreNamedErrors) {
  TempDir dir;
  auto jpg = EncodeJpeg(MakePixels(8, 8, 3, 0), 8, 8, 3);
  for (const std::string& label : {std::string("99999999999999999999"), std::string("\xff\xfe" "7"),
                                   std::string("-3"), std::string("4x")}) {
    SCOPED_TRACE(label);
    std::vector<uint8_t> tar;
    AppendTarMember(&tar, "a.jpg", jpg);
    AppendTarMember(&tar, "a.cls", Bytes(label));
    FinishTar(&tar);
    WriteFile(dir.path() + "/l.tar", tar);
    auto src = OpenSource(dir.path() + "/l.tar", NoCache());
    ASSERT_FALSE(src.ok());
    EXPECT_EQ(src.status().code(), StatusCode::kDataError);
    EXPECT_EQ(src.status().item(), dir.path() + "/l.tar:a");
    EXPECT_NE(src.status().message().find("bad .cls label"), std::string::npos);
    // The message is printable text: the file's bytes are escaped.
    for (unsigned char c : src.status().message()) EXPECT_TRUE(c >= 0x20 && c < 0x7f);
  }
}

TEST(TarSourceTest, FifoShardIsAnErrorNotAHang) {
  TempDir dir;
  const std::string fifo = dir.path() + "/x.tar";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto src = OpenWithin10s(fifo, NoCache());
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().item(), fifo);
  EXPECT_NE(src.status().message().find("FIFO"), std::string::npos) << src.status().ToString();
}

TEST(ImageFolderTest, FifoNamedLikeAnImageIsAnItemErrorNotAHang) {
  TempDir dir;
  WriteFile(dir.path() + "/a/1.jpg", EncodeJpeg(MakePixels(8, 8, 3, 0), 8, 8, 3));
  ASSERT_EQ(::mkfifo((dir.path() + "/a/x.jpg").c_str(), 0600), 0);
  auto src = OpenWithin10s(dir.path(), NoCache());
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  ASSERT_EQ(src.value()->size(), 2);
  EXPECT_EQ(src.value()->key(1), dir.path() + "/a/x.jpg");
  // Shared with the reader thread: it may outlive this test if it hangs.
  auto st = std::make_shared<Status>();
  std::shared_ptr<Source> source = std::move(src).value();
  ASSERT_TRUE(FinishesWithin10s([=] {
    std::vector<uint8_t> bytes;
    *st = source->Read(1, &bytes);
  })) << "reading a FIFO hung";
  EXPECT_EQ(st->code(), StatusCode::kDataError);
  EXPECT_NE(st->message().find("FIFO"), std::string::npos) << st->ToString();
}

TEST(ImageFolderTest, SymlinkLoopIsFollowedOnceAndCountsNothingTwice) {
  TempDir dir;
  auto jpg = EncodeJpeg(MakePixels(8, 8, 3, 0), 8, 8, 3);
  WriteFile(dir.path() + "/a/1.jpg", jpg);
  WriteFile(dir.path() + "/b/2.jpg", jpg);
  WriteFile(dir.path() + "/b/3.jpg", jpg);
  WriteFile(dir.path() + "/other/4.jpg", jpg);
  // a/loop -> .. (the root: a loop, and a way into b), a/more -> ../other/
  // (outside the classes? no: "other" is a class too), b/self -> . (a loop).
  ASSERT_EQ(::symlink("..", (dir.path() + "/a/loop").c_str()), 0);
  ASSERT_EQ(::symlink(".", (dir.path() + "/b/self").c_str()), 0);
  auto src = OpenSource(dir.path(), NoCache());
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  ASSERT_EQ(src.value()->size(), 4);
  EXPECT_EQ(src.value()->label(0), 0);  // a/1.jpg
  EXPECT_EQ(src.value()->label(1), 1);  // b/2.jpg, under b, not under a/loop/b
  EXPECT_EQ(src.value()->label(2), 1);
  EXPECT_EQ(src.value()->label(3), 2);
  EXPECT_EQ(src.value()->key(1), dir.path() + "/b/2.jpg");
  // A link to a folder outside the classes is followed, once.
  TempDir extra;
  WriteFile(extra.path() + "/5.jpg", jpg);
  ASSERT_EQ(::symlink(extra.path().c_str(), (dir.path() + "/a/ext").c_str()), 0);
  ASSERT_EQ(::symlink(extra.path().c_str(), (dir.path() + "/a/ext2").c_str()), 0);
  auto again = OpenSource(dir.path(), NoCache());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value()->size(), 5);
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
  o.driver_options = R"({"throttle_bandwidth": 2e6})";  // 20 x 50 KB = 1 MB -> 0.5 s, however many readers
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
  o.driver_options = R"({"throttle_latency_ms": 100})";
  auto src = OpenSource(dir.path(), o).value();
  double serial = ReadAll(*src, 1);    // 8 x 100 ms
  double parallel = ReadAll(*src, 8);  // all at once: about 100 ms
  EXPECT_GT(serial, 0.75);
  EXPECT_LT(parallel, 0.4);
  EXPECT_GT(parallel, 0.09);
  o.driver_options = R"({"throttle_latency_ms": -1})";
  Status negative = OpenSource(dir.path(), o).status();
  EXPECT_EQ(negative.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(negative.message().find("throttle_latency_ms must be in [0, 60000]"), std::string::npos)
      << negative.ToString();
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
    o.driver_options = drop ? R"({"drop_page_cache": true})" : "{}";
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

namespace nostall {
namespace {

// A saved index is the caller's own and consistent, or it is not used: a
// damaged or planted file is rebuilt, never followed out of bounds.
TEST(IndexFileTest, InconsistentOrForeignIndexFilesAreRefused) {
  const std::string dir = ::testing::TempDir() + "/nostall-index-file-test-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const std::string path = dir + "/sub/index-x.idx";
  Index tar;
  tar.shards = {"/data/s0.tar"};
  IndexStamp stamp;
  stamp.path = "/data/s0.tar";
  stamp.size = 4096;
  tar.stamps = {stamp};
  tar.items = {{"/data/s0.tar:a", 0, 0, 512, 100}};
  ASSERT_TRUE(SaveIndex(path, tar).ok());
  struct stat st;
  ASSERT_EQ(::stat((dir + "/sub").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);  // made private
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(LoadIndex(path).ok());
  // A negative shard, a shard past the list, a member past its shard, a
  // whole file in a shard index: refused.
  for (auto damage : std::vector<std::function<void(Index*)>>{
           [](Index* i) { i->items[0].shard = -5; },
           [](Index* i) { i->items[0].shard = 3; },
           [](Index* i) { i->items[0].offset = 4000; },
           [](Index* i) { i->items[0].shard = -1; i->items[0].key = "/etc/passwd"; }}) {
    Index bad = tar;
    damage(&bad);
    ASSERT_TRUE(SaveIndex(path, bad).ok());
    EXPECT_FALSE(LoadIndex(path).ok());
  }
  // A folder's index naming a file outside the folders walked: refused.
  Index folder;
  IndexStamp d;
  d.path = "/data/cat";
  folder.stamps = {d};
  folder.classes = {"cat"};
  folder.items = {{"/home/user/.aws/credentials", 0, -1, 0, -1}};
  ASSERT_TRUE(SaveIndex(path, folder).ok());
  EXPECT_FALSE(LoadIndex(path).ok());
  // Writable by others, or a symlink at the name: not used; a save
  // replaces the link, never writes through it.
  ASSERT_TRUE(SaveIndex(path, tar).ok());
  ::chmod(path.c_str(), 0666);
  EXPECT_EQ(LoadIndex(path).status().code(), StatusCode::kPermissionDenied);
  const std::string target = dir + "/target";
  { std::ofstream(target) << "keep"; }
  std::filesystem::remove(path);
  std::filesystem::create_symlink(target, path);
  EXPECT_FALSE(LoadIndex(path).ok());
  ASSERT_TRUE(SaveIndex(path, tar).ok());
  EXPECT_FALSE(std::filesystem::is_symlink(path));
  std::ifstream kept(target);
  std::string text;
  kept >> text;
  EXPECT_EQ(text, "keep");
  std::filesystem::remove_all(dir);
}

// The index keeps paths relative to the dataset's root, so the same file
// serves the dataset wherever it is mounted; a byte changed anywhere fails
// the hash, and a relative path leading out of the root is refused even
// under a good hash.
TEST(IndexFileTest, PathsAreRelativeToTheRootAndEveryByteIsChecked) {
  Index folder;
  IndexStamp root_stamp, cat_stamp;
  root_stamp.path = "/data/set";
  cat_stamp.path = "/data/set/cat";
  folder.stamps = {root_stamp, cat_stamp};
  folder.classes = {"cat"};
  folder.items = {{"/data/set/cat/a.jpg", 0, -1, 0, -1}, {"/data/set/cat/b.jpg", 0, -1, 0, -1}};
  const std::string bytes = SerializeIndex(folder, "/data/set");
  Result<IndexViewPtr> here = ViewIndexBytes(bytes, "x.idx", "/mnt/other");
  ASSERT_TRUE(here.ok()) << here.status().Describe();
  const IndexView& v = *here.value();
  EXPECT_EQ(v.size(), 2);
  EXPECT_EQ(v.key(1), "/mnt/other/cat/b.jpg");
  EXPECT_EQ(v.stamps()[0].path, "/mnt/other");
  EXPECT_EQ(v.stamps()[1].path, "/mnt/other/cat");
  EXPECT_FALSE(v.mapped());
  // The same items elsewhere are another dataset to the caches.
  EXPECT_NE(v.fingerprint(), ViewIndexBytes(bytes, "x.idx", "/data/set").value()->fingerprint());
  for (size_t at : {size_t{8}, size_t{70}, bytes.size() - 1}) {
    std::string damaged = bytes;
    damaged[at] ^= 1;
    Result<IndexViewPtr> r = ViewIndexBytes(damaged, "x.idx", "/mnt/other");
    ASSERT_FALSE(r.ok()) << at;
    EXPECT_NE(r.status().message().find("x.idx"), std::string::npos);
  }
  // A relative path with "..": refused though its hash is right.
  Index out = folder;
  out.stamps[1].path = "/data/set/../../etc";
  out.items = {{"/data/set/../../etc/passwd", 0, -1, 0, -1}};
  Result<IndexViewPtr> r = ViewIndexBytes(SerializeIndex(out, "/data/set"), "x.idx", "/mnt/other");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("leading out of the dataset's root"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace nostall

namespace nostall {
namespace {

// Shards indexed at once are appended in shard order, their members'
// extensions mapped into one table: the index a loop over them makes.
TEST(IndexFileTest, ShardsIndexedAtOnceMakeTheIndexOfALoop) {
  auto part = [](int32_t shard, std::vector<std::string> exts, bool members) {
    Index p;
    p.items = {{"s" + std::to_string(shard) + ":a", shard, shard, 512, 10},
               {"s" + std::to_string(shard) + ":b", shard, shard, 1536, 10}};
    p.member_exts = std::move(exts);
    if (members) {
      p.members = {{0, 600, 5}, {static_cast<uint32_t>(p.member_exts.size() - 1), 1600, 5}};
      p.member_begin = {0, 1, 2};
    }
    p.skipped = shard;
    return p;
  };
  std::vector<Index> parts = {part(0, {}, false), part(1, {"json"}, true), part(2, {"txt", "json"}, true)};
  Index merged;
  ASSERT_TRUE(IndexShardsInParallel(
                  3, 3, [&](size_t s, Index* out) { *out = parts[s]; return Status::OK(); },
                  [](size_t, const Index&) {}, &merged)
                  .ok());
  ASSERT_EQ(merged.items.size(), 6u);
  EXPECT_EQ(merged.items[2].key, "s1:a");
  EXPECT_EQ(merged.skipped, 3);
  EXPECT_EQ(merged.member_exts, (std::vector<std::string>{"json", "txt"}));
  EXPECT_EQ(merged.member_begin, (std::vector<uint32_t>{0, 0, 0, 1, 2, 3, 4}));
  // Shard 2's "txt" (its 0) is the merged 1, its "json" (its 1) the merged 0.
  EXPECT_EQ(merged.members[2].ext, 1u);
  EXPECT_EQ(merged.members[3].ext, 0u);
  // An error stops it, and is the one returned.
  Index failed;
  Status st = IndexShardsInParallel(
      3, 2, [](size_t s, Index*) { return s == 1 ? DataError("bad shard 1") : Status::OK(); },
      [](size_t, const Index&) {}, &failed);
  EXPECT_EQ(st.message(), "bad shard 1");
}

}  // namespace
}  // namespace nostall
