// The conformance suite every source driver passes (src/source/driver.h).
//
// A driver joins by adding a Maker below: it lays a dataset of given items
// out the way that driver reads it and returns the path to open. The suite
// checks what a loader relies on: every item, in order, with its label and
// its exact bytes; reads from many threads at once; a missing item's error
// (not a crash, not empty bytes); the index reused while the data holds and
// rebuilt when it changes; the driver's kind.
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cctype>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/ipc/writer.h>
#include <parquet/arrow/writer.h>
#include <parquet/properties.h>

#include "nostall/source.h"
#include "source/driver.h"
#include "testing/http_server.h"
#include "testing/s3_server.h"
#include "testing/test_images.h"

namespace nostall {
namespace {

using testing::EncodeJpeg;
using testing::MakePixels;
using testing::TempDir;
using testing::WriteFile;

struct Item {
  std::string name;  // unique, in index order
  int64_t label;     // non-decreasing
  std::vector<uint8_t> bytes;
};

std::vector<Item> MakeItems(int n) {
  std::vector<Item> items;
  for (int i = 0; i < n; ++i) {
    char name[16];
    std::snprintf(name, sizeof(name), "img%03d", i);
    items.push_back({name, i * 3 / n, EncodeJpeg(MakePixels(8 + i % 5, 8, 3, i), 8 + i % 5, 8, 3)});
  }
  return items;
}

// Local drivers: nothing to configure; they save their index.
struct LocalMaker {
  static constexpr bool kSavesIndex = true;
  static constexpr bool kKeyHasName = true;  // a key holds the item's file or member name
  static void Configure(SourceOptions*, const std::string&) {}
};

// One subfolder per label ("class0", ...), one .jpg per item.
struct ImageFolderMaker : LocalMaker {
  static constexpr const char* kKind = "image-folder";
  static std::string Write(const std::string& dir, const std::vector<Item>& items) {
    for (const Item& it : items) {
      std::filesystem::create_directories(dir + "/class" + std::to_string(it.label));
      WriteFile(Path(dir, it), it.bytes);
    }
    return dir;
  }
  static void Remove(const std::string& dir, const Item& it) { ::unlink(Path(dir, it).c_str()); }
  static std::string Path(const std::string& dir, const Item& it) {
    return dir + "/class" + std::to_string(it.label) + "/" + it.name + ".jpg";
  }
};

// The two WebDataset shards of `items`, split between them, labels in .cls.
std::vector<std::vector<uint8_t>> TwoShards(const std::vector<Item>& items) {
  std::vector<std::vector<uint8_t>> shards(2);
  const size_t half = items.size() / 2;
  for (size_t i = 0; i < items.size(); ++i) {
    std::vector<uint8_t>& tar = shards[i < half ? 0 : 1];
    testing::AppendTarMember(&tar, items[i].name + ".jpg", items[i].bytes);
    std::string cls = std::to_string(items[i].label);
    testing::AppendTarMember(&tar, items[i].name + ".cls", {cls.begin(), cls.end()});
  }
  for (auto& tar : shards) testing::FinishTar(&tar);
  return shards;
}

// Two WebDataset shards, the items split between them, labels in .cls.
struct TarShardsMaker : LocalMaker {
  static constexpr const char* kKind = "tar-shards";
  static std::string Write(const std::string& dir, const std::vector<Item>& items) {
    const auto shards = TwoShards(items);
    for (int s = 0; s < 2; ++s) WriteFile(dir + "/shard-" + std::to_string(s) + ".tar", shards[s]);
    return dir + "/shard-{0..1}.tar";
  }
  // A shard cut short: the members in its second half are gone.
  static void Remove(const std::string& dir, const Item&) {
    for (int s = 0; s < 2; ++s) {
      std::string path = dir + "/shard-" + std::to_string(s) + ".tar";
      ASSERT_EQ(::truncate(path.c_str(), 1024), 0);
    }
  }
};

// A COCO dataset: the images in one folder and an instances JSON beside it
// listing them, each with as many annotations as its label (the coco
// driver's label is an image's annotation count).
struct CocoMaker : LocalMaker {
  static constexpr const char* kKind = "coco";
  static void Configure(SourceOptions* o, const std::string& dir) {
    o->driver = "coco";
    o->driver_options = nlohmann::json{{"annotations", dir + "/instances.json"}}.dump();
  }
  static std::string Write(const std::string& dir, const std::vector<Item>& items) {
    std::filesystem::create_directories(dir + "/images");
    nlohmann::json images = nlohmann::json::array(), anns = nlohmann::json::array();
    for (size_t i = 0; i < items.size(); ++i) {
      WriteFile(Path(dir, items[i]), items[i].bytes);
      images.push_back({{"id", i + 1}, {"file_name", items[i].name + ".jpg"}});
      for (int64_t k = 0; k < items[i].label; ++k) {
        anns.push_back({{"id", anns.size() + 1}, {"image_id", i + 1}, {"bbox", {0, 0, 4, 4}}, {"category_id", 1}});
      }
    }
    const std::string text = nlohmann::json{{"images", images}, {"annotations", anns}}.dump();
    WriteFile(dir + "/instances.json", std::vector<uint8_t>(text.begin(), text.end()));
    return dir + "/images";
  }
  static void Remove(const std::string& dir, const Item& it) { ::unlink(Path(dir, it).c_str()); }
  static std::string Path(const std::string& dir, const Item& it) { return dir + "/images/" + it.name + ".jpg"; }
};

// Parquet: the items as two files of an image column (binary) and an int64
// label, row groups of 4 with their offset index (Arrow's own writer); an
// item cut away is both files truncated.
struct ParquetMaker : LocalMaker {
  static constexpr const char* kKind = "parquet";
  static constexpr bool kKeyHasName = false;  // rows have no names: a key is file[row]
  static std::string Write(const std::string& dir, const std::vector<Item>& items) {
    const size_t half = items.size() / 2;
    for (int f = 0; f < 2; ++f) {
      arrow::BinaryBuilder images;
      arrow::Int64Builder labels;
      for (size_t i = f == 0 ? 0 : half; i < (f == 0 ? half : items.size()); ++i) {
        EXPECT_TRUE(images.Append(items[i].bytes.data(), static_cast<int32_t>(items[i].bytes.size())).ok());
        EXPECT_TRUE(labels.Append(items[i].label).ok());
      }
      std::shared_ptr<arrow::Array> a, b;
      EXPECT_TRUE(images.Finish(&a).ok() && labels.Finish(&b).ok());
      auto table = arrow::Table::Make(
          arrow::schema({arrow::field("image", arrow::binary()), arrow::field("label", arrow::int64())}), {a, b});
      auto out = arrow::io::FileOutputStream::Open(File(dir, f)).ValueOrDie();
      auto props = parquet::WriterProperties::Builder().enable_write_page_index()->build();
      EXPECT_TRUE(parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), out, 4, props).ok());
      EXPECT_TRUE(out->Close().ok());
    }
    return dir + "/part-*.parquet";
  }
  static void Remove(const std::string& dir, const Item&) {
    for (int f = 0; f < 2; ++f) ASSERT_EQ(::truncate(File(dir, f).c_str(), 1024), 0);
  }
  static std::string File(const std::string& dir, int f) { return dir + "/part-" + std::to_string(f) + ".parquet"; }
};

// Arrow IPC: the items as two stream-format files (as `datasets` writes
// them) of an image column (binary) and an int64 label, record batches of
// 4 rows; an item cut away is both files truncated.
struct ArrowIpcMaker : LocalMaker {
  static constexpr const char* kKind = "arrow";
  static constexpr bool kKeyHasName = false;  // rows have no names: a key is file[row]
  static std::string Write(const std::string& dir, const std::vector<Item>& items) {
    const size_t half = items.size() / 2;
    auto schema = arrow::schema({arrow::field("image", arrow::binary()), arrow::field("label", arrow::int64())});
    for (int f = 0; f < 2; ++f) {
      auto out = arrow::io::FileOutputStream::Open(File(dir, f)).ValueOrDie();
      auto writer = arrow::ipc::MakeStreamWriter(out, schema).ValueOrDie();
      const size_t first = f == 0 ? 0 : half, end = f == 0 ? half : items.size();
      for (size_t at = first; at < end; at += 4) {
        arrow::BinaryBuilder images;
        arrow::Int64Builder labels;
        for (size_t i = at; i < std::min(end, at + 4); ++i) {
          EXPECT_TRUE(images.Append(items[i].bytes.data(), static_cast<int32_t>(items[i].bytes.size())).ok());
          EXPECT_TRUE(labels.Append(items[i].label).ok());
        }
        std::shared_ptr<arrow::Array> a, b;
        EXPECT_TRUE(images.Finish(&a).ok() && labels.Finish(&b).ok());
        EXPECT_TRUE(writer->WriteRecordBatch(*arrow::RecordBatch::Make(schema, a->length(), {a, b})).ok());
      }
      EXPECT_TRUE(writer->Close().ok() && out->Close().ok());
    }
    return dir + "/part-*.arrow";
  }
  static void Remove(const std::string& dir, const Item&) {
    for (int f = 0; f < 2; ++f) ASSERT_EQ(::truncate(File(dir, f).c_str(), 1024), 0);
  }
  static std::string File(const std::string& dir, int f) { return dir + "/part-" + std::to_string(f) + ".arrow"; }
};

// Parquet and Arrow IPC files behind a web server (nginx on loopback): the
// same files written into its root, read through the http store (ranged
// GETs; a glob listed from the folder's index page).
template <typename Files>
struct BehindWebServer : Files {
  static std::string Served(const std::string& dir) {
    return testing::HttpServer::Shared().root() + "/" + std::filesystem::path(dir).filename().string();
  }
  static std::string Write(const std::string& dir, const std::vector<Item>& items) {
    std::filesystem::create_directories(Served(dir));
    const std::string pattern = Files::Write(Served(dir), items);
    return testing::HttpServer::Shared().url() + pattern.substr(testing::HttpServer::Shared().root().size());
  }
  static void Remove(const std::string& dir, const Item& it) { Files::Remove(Served(dir), it); }
};
using HttpParquetMaker = BehindWebServer<ParquetMaker>;
using HttpArrowIpcMaker = BehindWebServer<ArrowIpcMaker>;
// WebDataset shards behind a web server: sizes and ETags by HEAD, the index
// kept in the index cache (a web server is not written to).
struct HttpTarMaker : BehindWebServer<TarShardsMaker> {
  static constexpr const char* kKind = "http-tar-shards";
};

// An image folder behind a web server: classes from the folder's index
// page, each class's images listed from its own (sizes by HEAD).
struct HttpFolderMaker : BehindWebServer<ImageFolderMaker> {
  static constexpr const char* kKind = "http-image-folder";
  static constexpr bool kSavesIndex = false;  // a folder's listing is its index
  static std::string Write(const std::string& dir, const std::vector<Item>& items) {
    return BehindWebServer<ImageFolderMaker>::Write(dir, items) + "/";
  }
};

// The S3 drivers, against a real S3-compatible server (moto's server mode
// on loopback): one bucket per test, named after its data folder.
struct S3Maker {
  static constexpr bool kSavesIndex = false;  // a folder's listing is its index
  static constexpr bool kKeyHasName = true;
  static void Configure(SourceOptions* o, const std::string&) {
    o->driver_options = nlohmann::json{{"endpoint", testing::S3Server::Shared().endpoint()},
                                       {"region", "us-east-1"},
                                       {"addressing", "path"}}.dump();
  }
  static std::string Bucket(const std::string& dir) {
    std::string b = "conformance-" + std::filesystem::path(dir).filename().string();
    for (char& c : b) c = std::isalnum(static_cast<unsigned char>(c)) ? std::tolower(c) : '-';
    static std::set<std::string> made;
    if (made.insert(b).second) testing::S3Server::Shared().MakeBucket(b);
    return b;
  }
};

// S3 "folders": one prefix per label under data/, one object per item.
struct S3FolderMaker : S3Maker {
  static constexpr const char* kKind = "s3-image-folder";
  static std::string Write(const std::string& dir, const std::vector<Item>& items) {
    const std::string b = Bucket(dir);
    for (const Item& it : items) testing::S3Server::Shared().Put(b, Key(it), it.bytes);
    return "s3://" + b + "/data/";
  }
  static void Remove(const std::string& dir, const Item& it) {
    testing::S3Server::Shared().Delete(Bucket(dir), Key(it));
  }
  static std::string Key(const Item& it) {
    return "data/class" + std::to_string(it.label) + "/" + it.name + ".jpg";
  }
};

// Two shard objects; a shard cut short is put again, shorter.
struct S3TarMaker : S3Maker {
  static constexpr const char* kKind = "s3-tar-shards";
  static constexpr bool kSavesIndex = true;
  static std::string Write(const std::string& dir, const std::vector<Item>& items) {
    const std::string b = Bucket(dir);
    const auto shards = TwoShards(items);
    for (int s = 0; s < 2; ++s) {
      testing::S3Server::Shared().Put(b, "shard-" + std::to_string(s) + ".tar", shards[s]);
    }
    return "s3://" + b + "/shard-{0..1}.tar";
  }
  static void Remove(const std::string& dir, const Item&) {
    for (int s = 0; s < 2; ++s) {
      std::vector<uint8_t> cut(1024, 0);
      testing::S3Server::Shared().Put(Bucket(dir), "shard-" + std::to_string(s) + ".tar", cut);
    }
  }
};

template <typename Maker>
class SourceConformance : public ::testing::Test {
 protected:
  SourceOptions Options(bool use_index_cache) {
    SourceOptions o;
    o.use_index_cache = use_index_cache;
    o.index_cache_dir = index_dir_.path();
    Maker::Configure(&o, data_.path());
    return o;
  }
  TempDir data_, index_dir_;
};

using Makers =
    ::testing::Types<ImageFolderMaker, TarShardsMaker, CocoMaker, ParquetMaker, ArrowIpcMaker, S3FolderMaker,
                     S3TarMaker, HttpParquetMaker, HttpArrowIpcMaker, HttpTarMaker, HttpFolderMaker>;
TYPED_TEST_SUITE(SourceConformance, Makers);

TYPED_TEST(SourceConformance, EveryItemInOrderWithItsLabelAndExactBytes) {
  const auto items = MakeItems(12);
  auto opened = OpenSource(TypeParam::Write(this->data_.path(), items), this->Options(false));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const Source& s = *opened.value();
  EXPECT_EQ(std::string(s.kind()), TypeParam::kKind);
  ASSERT_EQ(s.size(), static_cast<int64_t>(items.size()));
  std::vector<std::string> keys;
  for (int64_t i = 0; i < s.size(); ++i) {
    SCOPED_TRACE(items[i].name);
    if (TypeParam::kKeyHasName) EXPECT_NE(s.key(i).find(items[i].name), std::string::npos) << s.key(i);
    EXPECT_EQ(s.label(i), items[i].label);
    std::vector<uint8_t> out{1, 2, 3};  // stale contents must be replaced, not appended to
    ASSERT_TRUE(s.Read(i, &out).ok());
    EXPECT_EQ(out, items[i].bytes);
    if (s.byte_size(i) >= 0) {
      EXPECT_EQ(s.byte_size(i), static_cast<int64_t>(out.size()));
    }
    EXPECT_TRUE(s.Evict(i).ok());
    keys.push_back(s.key(i));
  }
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::unique(keys.begin(), keys.end()), keys.end()) << "keys must name one item each";
}

TYPED_TEST(SourceConformance, ManyThreadsReadAtOnce) {
  const auto items = MakeItems(16);
  auto opened = OpenSource(TypeParam::Write(this->data_.path(), items), this->Options(false));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const Source& s = *opened.value();
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> out;
      for (int round = 0; round < 20; ++round) {
        for (int64_t i = (t + round) % s.size(), k = 0; k < s.size(); ++k, i = (i + 1) % s.size()) {
          if (!s.Read(i, &out).ok() || out != items[i].bytes) ++wrong[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

TYPED_TEST(SourceConformance, AMissingItemIsAnErrorNotEmptyBytes) {
  const auto items = MakeItems(8);
  auto opened = OpenSource(TypeParam::Write(this->data_.path(), items), this->Options(false));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const Source& s = *opened.value();
  const int64_t last = s.size() - 1;
  TypeParam::Remove(this->data_.path(), items[last]);
  std::vector<uint8_t> out;
  Status st = s.Read(last, &out);
  EXPECT_FALSE(st.ok()) << "read " << out.size() << " bytes of a removed item";
  EXPECT_FALSE(st.message().empty());
}

TYPED_TEST(SourceConformance, IndexIsReusedWhileTheDataHoldsAndRebuiltWhenItChanges) {
  auto items = MakeItems(8);
  const std::string uri = TypeParam::Write(this->data_.path(), items);
  auto first = OpenSource(uri, this->Options(true));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  if (TypeParam::kSavesIndex) {
    EXPECT_FALSE(std::filesystem::is_empty(this->index_dir_.path())) << "no index was saved";
  }
  auto again = OpenSource(uri, this->Options(true));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again.value()->fingerprint(), first.value()->fingerprint());
  ASSERT_EQ(again.value()->size(), first.value()->size());
  for (int64_t i = 0; i < again.value()->size(); ++i) {
    EXPECT_EQ(again.value()->key(i), first.value()->key(i));
    EXPECT_EQ(again.value()->label(i), first.value()->label(i));
  }
  // One more item: the saved index no longer holds.
  auto more = MakeItems(9);
  ASSERT_EQ(TypeParam::Write(this->data_.path(), more), uri);
  auto changed = OpenSource(uri, this->Options(true));
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_EQ(changed.value()->size(), 9);
  EXPECT_NE(changed.value()->fingerprint(), first.value()->fingerprint());
  std::vector<uint8_t> out;
  ASSERT_TRUE(changed.value()->Read(8, &out).ok());
  EXPECT_EQ(out, more[8].bytes);
}

TEST(SourceRegistryTest, EveryDriverHasAKindAndThePathPicksIt) {
  ASSERT_FALSE(SourceDrivers().empty());
  for (const SourceDriver& d : SourceDrivers()) {
    EXPECT_NE(d.kind, nullptr);
    EXPECT_NE(d.claims, nullptr);
    EXPECT_NE(d.open, nullptr);
  }
  TempDir dir;
  auto unsupported = OpenSource(dir.path() + "/notes.txt");
  EXPECT_EQ(unsupported.status().code(), StatusCode::kNotFound);
  WriteFile(dir.path() + "/notes.txt", {'x'});
  unsupported = OpenSource(dir.path() + "/notes.txt");
  EXPECT_EQ(unsupported.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unsupported.status().message().find("image-folder"), std::string::npos)
      << unsupported.status().message();
}

}  // namespace
}  // namespace nostall
