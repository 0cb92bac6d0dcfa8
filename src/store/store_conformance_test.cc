// Every object store behaves alike (object_store.h): local files, a real S3
// server (moto's server mode) and a real web server (nginx with autoindex),
// each on loopback. A new store joins with a Maker that puts objects where
// it reads them.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "store/object_store.h"
#include "testing/http_server.h"
#include "testing/s3_server.h"
#include "testing/test_images.h"

namespace nostall::store {
namespace {

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return b;
}

// Local files: a fresh folder per test.
struct LocalMaker {
  testing::TempDir dir;
  std::string Root() const { return dir.path() + "/"; }
  nlohmann::json Options() const { return nlohmann::json::object(); }
  void Put(const std::string& rel, const std::vector<uint8_t>& bytes) {
    const std::filesystem::path p = dir.path() + "/" + rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  }
};

// S3: a fresh bucket per test.
struct S3Maker {
  std::string bucket;
  S3Maker() {
    static std::atomic<int> n{0};
    bucket = "store-conformance-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
    testing::S3Server::Shared().MakeBucket(bucket);
  }
  std::string Root() const { return "s3://" + bucket + "/"; }
  nlohmann::json Options() const {
    return {{"endpoint", testing::S3Server::Shared().endpoint()}, {"region", "us-east-1"}, {"addressing", "path"}};
  }
  void Put(const std::string& rel, const std::vector<uint8_t>& bytes) {
    testing::S3Server::Shared().Put(bucket, rel, bytes);
  }
};

// A web server: a fresh folder of nginx's root per test.
struct HttpMaker {
  std::string folder;
  HttpMaker() {
    static std::atomic<int> n{0};
    folder = "t" + std::to_string(::getpid()) + "-" + std::to_string(n++);
  }
  std::string Root() const { return testing::HttpServer::Shared().url() + "/" + folder + "/"; }
  nlohmann::json Options() const { return nlohmann::json::object(); }
  void Put(const std::string& rel, const std::vector<uint8_t>& bytes) {
    testing::HttpServer::Shared().Put(folder + "/" + rel, bytes);
  }
};

template <typename Maker>
class StoreConformance : public ::testing::Test {
 protected:
  // The store of the maker's root and the key prefix the root is in it.
  Located Open(const std::string& rel = "") {
    auto at = OpenStore(maker_.Root() + rel, maker_.Options(), "test");
    EXPECT_TRUE(at.ok()) << at.status().ToString();
    return std::move(at).value();
  }
  Maker maker_;
};

using Makers = ::testing::Types<LocalMaker, S3Maker, HttpMaker>;
TYPED_TEST_SUITE(StoreConformance, Makers);

TYPED_TEST(StoreConformance, ListingGivesEveryObjectUnderAPrefixInKeyOrderWithItsSize) {
  this->maker_.Put("data/b.bin", Bytes(300, 1));
  this->maker_.Put("data/a.bin", Bytes(10, 2));
  this->maker_.Put("data/sub/c.bin", Bytes(0, 3));
  this->maker_.Put("data/sub/deeper/d.bin", Bytes(5000, 4));
  this->maker_.Put("other/e.bin", Bytes(1, 5));
  this->maker_.Put("data-not/f.bin", Bytes(1, 6));
  Located at = this->Open("data/");
  auto listed = at.store->List(at.key);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  std::vector<std::pair<std::string, uint64_t>> got;
  for (const ObjectInfo& o : listed.value()) got.push_back({o.key.substr(at.key.size()), o.size});
  EXPECT_EQ(got, (std::vector<std::pair<std::string, uint64_t>>{
                     {"a.bin", 10}, {"b.bin", 300}, {"sub/c.bin", 0}, {"sub/deeper/d.bin", 5000}}));
  // A prefix that ends mid-name: what starts with it, any depth.
  auto mid = at.store->List(at.key + "s");
  ASSERT_TRUE(mid.ok()) << mid.status().ToString();
  EXPECT_EQ(mid.value().size(), 2u);
  // Each object as a user names it.
  EXPECT_EQ(at.store->Uri(listed.value()[0].key), this->maker_.Root() + "data/a.bin");
}

TYPED_TEST(StoreConformance, FoldersRightUnderAFolderAreListedOnceEachInKeyOrder) {
  this->maker_.Put("root/dog/a.jpg", Bytes(10, 1));
  this->maker_.Put("root/cat/deep/b.jpg", Bytes(10, 2));
  this->maker_.Put("root/cat/c.jpg", Bytes(10, 3));
  this->maker_.Put("root/loose.jpg", Bytes(10, 4));
  this->maker_.Put("rooted/x/d.jpg", Bytes(10, 5));
  Located at = this->Open("root/");
  auto folders = at.store->ListFolders(at.key);
  ASSERT_TRUE(folders.ok()) << folders.status().ToString();
  EXPECT_EQ(folders.value(), (std::vector<std::string>{at.key + "cat/", at.key + "dog/"}));
  auto none = at.store->ListFolders(at.key + "dog/");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none.value().empty());
  // The default a new store gets (the folders read off its List) agrees with
  // each store's own answer.
  auto derived = at.store->ObjectStore::ListFolders(at.key);
  ASSERT_TRUE(derived.ok()) << derived.status().ToString();
  EXPECT_EQ(derived.value(), folders.value());
  auto derived_none = at.store->ObjectStore::ListFolders(at.key + "dog/");
  ASSERT_TRUE(derived_none.ok()) << derived_none.status().ToString();
  EXPECT_TRUE(derived_none.value().empty());
}

TYPED_TEST(StoreConformance, PatternsMatchWithinOneFolderAndANameIsOneObjectOrNotFound) {
  for (const char* name : {"train-0.parquet", "train-1.parquet", "test-0.parquet", "sub/train-2.parquet"}) {
    this->maker_.Put(name, Bytes(64, 9));
  }
  Located at = this->Open("train-*.parquet");
  auto matched = at.store->Match(at.key);
  ASSERT_TRUE(matched.ok()) << matched.status().ToString();
  ASSERT_EQ(matched.value().size(), 2u);
  EXPECT_EQ(at.store->Uri(matched.value()[1].key), this->maker_.Root() + "train-1.parquet");
  Located one = this->Open("test-0.parquet");
  auto exact = one.store->Match(one.key);
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  ASSERT_EQ(exact.value().size(), 1u);
  EXPECT_EQ(exact.value()[0].size, 64u);
  Located none = this->Open("nothing.parquet");
  EXPECT_EQ(none.store->Match(none.key).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(none.store->Stat(none.key).status().code(), StatusCode::kNotFound);
}

TYPED_TEST(StoreConformance, StatGivesTheSizeAndAVersionThatChangesWithTheBytes) {
  this->maker_.Put("x.bin", Bytes(1000, 1));
  Located at = this->Open("x.bin");
  auto before = at.store->Stat(at.key);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_EQ(before.value().size, 1000u);
  auto again = at.store->Stat(at.key);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value().version, before.value().version);
  this->maker_.Put("x.bin", Bytes(1001, 2));
  auto after = at.store->Stat(at.key);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after.value().size, 1001u);
  EXPECT_NE(after.value().version, before.value().version);
}

TYPED_TEST(StoreConformance, RangedReadsAreExactAndAReadPastTheEndIsAnErrorNamingTheObject) {
  const std::vector<uint8_t> bytes = Bytes(100000, 3);
  this->maker_.Put("big.bin", bytes);
  Located at = this->Open("big.bin");
  std::vector<uint8_t> out;
  ASSERT_TRUE(at.store->Read(at.key, 0, -1, &out).ok());
  EXPECT_EQ(out, bytes);
  ASSERT_TRUE(at.store->Read(at.key, 99990, 10, &out).ok());
  EXPECT_EQ(out, std::vector<uint8_t>(bytes.end() - 10, bytes.end()));
  ASSERT_TRUE(at.store->Read(at.key, 12345, 1, &out).ok());
  EXPECT_EQ(out, std::vector<uint8_t>{bytes[12345]});
  std::vector<uint8_t> exact(500);
  ASSERT_TRUE(at.store->ReadExact(at.key, 1000, 500, exact.data()).ok());
  EXPECT_TRUE(std::equal(exact.begin(), exact.end(), bytes.begin() + 1000));
  Status past = at.store->Read(at.key, 99990, 20, &out);
  EXPECT_FALSE(past.ok());
  EXPECT_NE(past.message().find("big.bin"), std::string::npos) << past.ToString();
  // A whole object over what it was listed at is refused, not taken in.
  EXPECT_FALSE(at.store->Read(at.key, 0, -1, &out, /*most=*/1000).ok());
  Located gone = this->Open("gone.bin");
  Status missing = gone.store->Read(gone.key, 0, 10, &out);
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("gone.bin"), std::string::npos) << missing.ToString();
}

TYPED_TEST(StoreConformance, ManyReadsInFlightEachGetTheirBytes) {
  const std::vector<uint8_t> bytes = Bytes(1 << 20, 5);
  this->maker_.Put("shard.bin", bytes);
  Located at = this->Open("shard.bin");
  constexpr int kReads = 200;
  std::mutex mu;
  std::condition_variable cv;
  int done = 0, wrong = 0;
  for (int r = 0; r < kReads; ++r) {
    const uint64_t offset = static_cast<uint64_t>(r) * 5003 % (bytes.size() - 4096);
    at.store->ReadAsync(at.key, offset, 4096, {}, [&, offset](Status s, std::vector<uint8_t> got) {
      const bool ok = s.ok() && got.size() == 4096 && std::equal(got.begin(), got.end(), bytes.begin() + offset);
      std::lock_guard<std::mutex> lock(mu);
      wrong += !ok;
      ++done;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done == kReads; }));
  EXPECT_EQ(wrong, 0);
}

// Each URI goes to the store of its scheme, and the key is what follows.
TEST(StoreRegistry, EachSchemeHasItsStore) {
  auto s3 = OpenStore("s3://bucket/a/b.parquet", nlohmann::json::object(), "test");
  ASSERT_TRUE(s3.ok()) << s3.status().ToString();
  EXPECT_STREQ(s3.value().store->name(), "s3");
  EXPECT_EQ(s3.value().key, "a/b.parquet");
  auto http = OpenStore("https://example.org/data/train%20set/x.arrow", nlohmann::json::object(), "test");
  ASSERT_TRUE(http.ok()) << http.status().ToString();
  EXPECT_STREQ(http.value().store->name(), "http");
  EXPECT_EQ(http.value().key, "data/train set/x.arrow");
  EXPECT_EQ(http.value().store->Uri("a b"), "https://example.org/a b");
  auto local = OpenStore("/data/x.parquet", nlohmann::json::object(), "test");
  ASSERT_TRUE(local.ok());
  EXPECT_STREQ(local.value().store->name(), "local");
  EXPECT_FALSE(IsRemoteUri("/data/x.parquet"));
  EXPECT_TRUE(IsRemoteUri("http://h/x"));
  // A signed URL's query is not a path: refused, said why.
  auto query = OpenStore("https://cdn.example.org/x.parquet?token=abc", nlohmann::json::object(), "test");
  EXPECT_EQ(query.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nostall::store
