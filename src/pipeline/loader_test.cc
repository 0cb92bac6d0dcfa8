#include "nostall/loader.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include "nostall/sampler.h"
#include "ops/prep.h"
#include "ops/sample_kind.h"
#include "testing/test_images.h"

namespace nostall {
namespace {

using testing::MakeImageFolder;
using testing::TempDir;
using testing::WriteFile;

LoaderSpec Spec(const std::string& root, int threads, int64_t batch = 8) {
  LoaderSpec s;
  s.source = root;
  s.source_options.use_index_cache = false;
  s.batch_size = batch;
  s.shuffle = true;
  s.seed = 3;
  s.num_threads = threads;
  s.reads_in_flight = 2;
  Transform rrc{TransformKind::kRandomResizedCrop};
  rrc.height = rrc.width = 32;
  Transform flip{TransformKind::kRandomHorizontalFlip};
  s.prep.transforms = {rrc, flip};
  return s;
}

struct Epoch {
  std::vector<int64_t> indices, labels;
  std::vector<uint8_t> pixels;
};

Epoch RunEpoch(Loader* loader, int64_t epoch, int64_t first_batch = 0) {
  Epoch e;
  EXPECT_TRUE(loader->StartEpoch(epoch, first_batch).ok());
  size_t sample = 32 * 32 * 3;
  while (true) {
    NextStatus ns;
    std::shared_ptr<Batch> b;
    Status st = loader->Next(10000, &ns, &b);
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_NE(ns, NextStatus::kTimeout);
    if (!st.ok() || ns != NextStatus::kBatch) break;
    e.indices.insert(e.indices.end(), b->indices(), b->indices() + b->size());
    e.labels.insert(e.labels.end(), b->labels(), b->labels() + b->size());
    auto* px = static_cast<const uint8_t*>(b->images());
    e.pixels.insert(e.pixels.end(), px, px + b->size() * sample);
  }
  return e;
}

class LoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    MakeImageFolder(dir_->path(), /*classes=*/3, /*per_class=*/10, 80, 60);
  }
  static void TearDownTestSuite() { delete dir_; }
  static TempDir* dir_;
};
TempDir* LoaderTest::dir_ = nullptr;

TEST_F(LoaderTest, EveryItemOnceWithItsLabel) {
  auto loader = Loader::Create(Spec(dir_->path(), 2)).value();
  Epoch e = RunEpoch(loader.get(), 0);
  ASSERT_EQ(e.indices.size(), 30u);
  std::set<int64_t> seen(e.indices.begin(), e.indices.end());
  EXPECT_EQ(seen.size(), 30u);
  for (size_t i = 0; i < e.indices.size(); ++i) {
    EXPECT_EQ(e.labels[i], loader->source().label(e.indices[i]));
  }
  EXPECT_EQ(loader->Stats().samples, 30);
}

TEST_F(LoaderTest, SameSeedSameBatchesWhateverTheThreadCount) {
  auto one = Loader::Create(Spec(dir_->path(), 1)).value();
  auto three = Loader::Create(Spec(dir_->path(), 3)).value();
  Epoch a = RunEpoch(one.get(), 4), b = RunEpoch(three.get(), 4);
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_TRUE(a.pixels == b.pixels);
  Epoch c = RunEpoch(one.get(), 5);
  EXPECT_NE(a.indices, c.indices);
}

TEST_F(LoaderTest, StartingMidEpochGivesTheRestOfThatEpoch) {
  auto loader = Loader::Create(Spec(dir_->path(), 2)).value();
  Epoch full = RunEpoch(loader.get(), 2);
  Epoch rest = RunEpoch(loader.get(), 2, /*first_batch=*/2);
  ASSERT_EQ(rest.indices.size(), full.indices.size() - 16);
  EXPECT_TRUE(std::equal(rest.indices.begin(), rest.indices.end(), full.indices.begin() + 16));
  EXPECT_TRUE(std::equal(rest.pixels.begin(), rest.pixels.end(),
                         full.pixels.begin() + 16 * 32 * 32 * 3));
}

TEST_F(LoaderTest, NextEpochIsPreparedBeforeItIsAskedFor) {
  auto loader = Loader::Create(Spec(dir_->path(), 2)).value();
  RunEpoch(loader.get(), 0);
  // Give the pipeline time to run on into epoch 1: until epoch 1's first
  // batch is complete (4 batches of 8 make epoch 0's 30 items), plus a moment
  // for the thread that completed it to mark it ready (slow under ASan).
  for (int i = 0; i < 500 && loader->Stats().batch.items < 4 + 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(loader->StartEpoch(1).ok());
  NextStatus ns;
  std::shared_ptr<Batch> first;
  ASSERT_TRUE(loader->Next(/*timeout_ms=*/0, &ns, &first).ok());
  EXPECT_EQ(ns, NextStatus::kBatch);  // ready at once: no bubble between epochs
  first.reset();
  // And what it made ahead is exactly epoch 1, as a fresh loader makes it.
  auto fresh = Loader::Create(Spec(dir_->path(), 1)).value();
  Epoch want = RunEpoch(fresh.get(), 1);
  Epoch got = RunEpoch(loader.get(), 1);
  EXPECT_EQ(got.indices, want.indices);
  EXPECT_TRUE(got.pixels == want.pixels);
}

TEST_F(LoaderTest, EveryReadInFlightRunsEvenWhenPrepHasFewThreads) {
  // Slow storage (each read waits 300 ms) is what reads in flight are for:
  // 16 of them must be 16 reads at once, whatever the prep thread count.
  // (They were held to 8 when items waiting for prep and reads shared one
  // bound of max(8, 2 x prep threads).)
  LoaderSpec spec = Spec(dir_->path(), /*threads=*/1, /*batch=*/16);
  spec.reads_in_flight = 16;
  spec.source_options.driver_options = R"({"throttle_latency_ms": 300})";
  auto loader = Loader::Create(spec).value();
  Epoch e = RunEpoch(loader.get(), 0);
  ASSERT_EQ(e.indices.size(), 30u);
  const LoaderStats st = loader->Stats();
  EXPECT_EQ(st.fetch.threads, 16);
  EXPECT_EQ(st.fetch.peak_in_flight, 16);
}

TEST_F(LoaderTest, ASlotIsReusedOnlyAfterEveryLeaseIsGone) {
  LoaderSpec spec = Spec(dir_->path(), 2, /*batch=*/2);
  spec.prefetch = 0;  // two slots
  auto loader = Loader::Create(spec).value();
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  NextStatus ns;
  std::shared_ptr<Batch> b0, b1, b2;
  ASSERT_TRUE(loader->Next(10000, &ns, &b0).ok());
  ASSERT_TRUE(loader->Next(10000, &ns, &b1).ok());
  ASSERT_EQ(ns, NextStatus::kBatch);
  std::vector<uint8_t> before(static_cast<const uint8_t*>(b0->images()),
                              static_cast<const uint8_t*>(b0->images()) + 2 * 32 * 32 * 3);
  // Both slots are held: the third batch is made in the spare slot and
  // leaves as a private copy (the held batches stay untouched).
  ASSERT_TRUE(loader->Next(10000, &ns, &b2).ok());
  ASSERT_EQ(ns, NextStatus::kBatch);
  EXPECT_EQ(b2->index(), 2);
  EXPECT_TRUE(b2->copied());
  EXPECT_FALSE(b0->copied());
  EXPECT_EQ(loader->Stats().private_copies, 1);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), static_cast<const uint8_t*>(b0->images())));
  b0.reset();
  b2.reset();
  std::shared_ptr<Batch> b3;
  Status st = loader->Next(10000, &ns, &b3);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ns, NextStatus::kBatch);
  EXPECT_EQ(b3->index(), 3);
  EXPECT_FALSE(b3->copied());  // zero-copy again once a slot is let go
  EXPECT_EQ(loader->Stats().private_copies, 1);
}

TEST_F(LoaderTest, BatchesOutliveTheLoader) {
  auto loader = Loader::Create(Spec(dir_->path(), 2)).value();
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  NextStatus ns;
  std::shared_ptr<Batch> b;
  ASSERT_TRUE(loader->Next(10000, &ns, &b).ok());
  int64_t label = b->labels()[0];
  loader.reset();  // joins every thread
  EXPECT_EQ(b->labels()[0], label);
}

// A plan grown from another thread while the loader makes it (remote prep's
// workers): its batches, in its order, byte-identical to the whole epoch's,
// and the pass ends where the plan does; a plan never grown shuts down promptly.
TEST_F(LoaderTest, APlanGrownWhileRunningGivesItsBatchesInItsOrder) {
  auto loader = Loader::Create(Spec(dir_->path(), 2)).value();
  Epoch full = RunEpoch(loader.get(), 6);  // 30 items: batches of 8, 8, 8, 6
  auto plan = std::make_shared<BatchPlan>(6, std::vector<ElasticStep>{});
  loader->sampler().SetPlan(plan);
  std::thread grower([&] {
    for (int64_t b : {3, 1, 0, 1}) {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      ASSERT_TRUE(plan->Extend({b}).ok());
    }
    plan->Finish();
  });
  Epoch got = RunEpoch(loader.get(), 6);
  grower.join();
  std::vector<int64_t> want;
  for (int64_t b : {3, 1, 0, 1}) {
    for (int64_t p = b * 8; p < std::min<int64_t>(30, (b + 1) * 8); ++p) want.push_back(full.indices[p]);
  }
  EXPECT_EQ(got.indices, want);
  const size_t sample = 32 * 32 * 3;
  EXPECT_TRUE(std::equal(got.pixels.begin(), got.pixels.begin() + 6 * sample, full.pixels.begin() + 24 * sample));
  auto idle = std::make_shared<BatchPlan>(7, std::vector<ElasticStep>{});
  loader->sampler().SetPlan(idle);
  ASSERT_TRUE(loader->StartEpoch(7, 0).ok());
  NextStatus ns;
  std::shared_ptr<Batch> b;
  EXPECT_TRUE(loader->Next(100, &ns, &b).ok());
  EXPECT_EQ(ns, NextStatus::kTimeout);  // nothing planned yet
  loader.reset();  // the fetcher waiting on the plan sees the shutdown
}

TEST(LoaderBadInputTest, BadItemsRaiseWithNameAndStageOrAreSkipped) {
  TempDir dir;
  MakeImageFolder(dir.path(), 1, 6, 64, 48);
  WriteFile(dir.path() + "/c0/img_bad.jpg", {'n', 'o', 't', ' ', 'j', 'p', 'e', 'g'});
  WriteFile(dir.path() + "/c0/img_empty.jpg", {});
  for (ErrorPolicy policy : {ErrorPolicy::kRaise, ErrorPolicy::kSkip}) {
    LoaderSpec spec = Spec(dir.path(), 2, /*batch=*/4);
    spec.shuffle = false;
    spec.on_error = policy;
    auto loader = Loader::Create(spec).value();
    ASSERT_TRUE(loader->StartEpoch(0).ok());
    int64_t good = 0;
    std::vector<std::string> errors;
    while (true) {
      NextStatus ns;
      std::shared_ptr<Batch> b;
      Status st = loader->Next(10000, &ns, &b);
      if (!st.ok()) {
        EXPECT_EQ(st.code(), StatusCode::kDataError);
        EXPECT_EQ(st.stage(), "decode");
        errors.push_back(st.item());
        continue;
      }
      if (ns != NextStatus::kBatch) break;
      good += b->size();
    }
    if (policy == ErrorPolicy::kSkip) {
      EXPECT_EQ(good, 6);
      EXPECT_TRUE(errors.empty());
      EXPECT_EQ(loader->Stats().skipped, 2);
    } else {
      // Sorted order puts both bad files in the first batch; its first bad
      // item is the one reported.
      ASSERT_EQ(errors.size(), 1u);
      EXPECT_EQ(errors[0], dir.path() + "/c0/img_bad.jpg");
      EXPECT_EQ(good, 4);
    }
  }
}

TEST(LoaderBadInputTest, FileRemovedAfterIndexingIsAFetchError) {
  TempDir dir;
  MakeImageFolder(dir.path(), 1, 3, 64, 48);
  LoaderSpec spec = Spec(dir.path(), 1, 3);
  spec.shuffle = false;
  auto loader = Loader::Create(spec).value();
  std::filesystem::remove(dir.path() + "/c0/img001.jpg");
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  NextStatus ns;
  std::shared_ptr<Batch> b;
  Status st = loader->Next(10000, &ns, &b);
  EXPECT_EQ(st.code(), StatusCode::kDataError);
  EXPECT_EQ(st.stage(), "fetch");
  EXPECT_NE(st.message().find("No such file"), std::string::npos);
  EXPECT_EQ(st.item(), dir.path() + "/c0/img001.jpg");
}

TEST(LoaderBadInputTest, ShutdownWhileThreadsAreBusyIsPrompt) {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 20, 200, 150);
  auto loader = Loader::Create(Spec(dir.path(), 2, 4)).value();
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  auto t0 = std::chrono::steady_clock::now();
  loader.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

// A kind of sample is one class: the loader asks it for the sample's shape,
// bytes and contents, and nothing else of the pipeline changes. This one
// writes each file's size and its sample index as two floats.
class FileSizeKind final : public SampleKind {
 public:
  const char* name() const override { return "file_size"; }
  Status Validate(const PrepSpec&) const override { return Status::OK(); }
  int channels(const PrepSpec&) const override { return 1; }
  bool FixedOutputSize(const PrepSpec&, int* height, int* width) const override {
    *height = 1;
    *width = 2;
    return true;
  }
  std::vector<int64_t> SampleShape(const PrepSpec&, int, int) const override { return {2}; }
  size_t SampleBytes(const PrepSpec&, int, int) const override { return 2 * sizeof(float); }
  Status Prepare(const PrepSpec&, const SampleInput& in, const SampleKey& key, const SampleOutput& out,
                 PrepScratch* scratch) const override {
    KindScratchOf<Counter>(scratch).samples++;
    float* dst = static_cast<float*>(out.dst);
    dst[0] = static_cast<float>(in.size);
    dst[1] = static_cast<float>(key.index);
    return Status::OK();
  }
  nlohmann::json ToJson() const override { return nullptr; }

 private:
  struct Counter : KindScratch {
    int64_t samples = 0;
  };
};

TEST_F(LoaderTest, ANewKindOfSampleIsOneClassThePreparerCalls) {
  LoaderSpec spec = Spec(dir_->path(), 2, 4);
  spec.prep.transforms.clear();
  spec.prep.dtype = DType::kFloat32;
  spec.prep.kind = std::make_shared<FileSizeKind>();
  auto loader = Loader::Create(spec).value();
  EXPECT_EQ(loader->SampleShape(), (std::vector<int64_t>{2}));
  ASSERT_TRUE(loader->StartEpoch(0, 0).ok());
  std::set<int64_t> seen;
  while (true) {
    NextStatus ns;
    std::shared_ptr<Batch> b;
    ASSERT_TRUE(loader->Next(10000, &ns, &b).ok());
    if (ns != NextStatus::kBatch) break;
    const auto* values = static_cast<const float*>(b->images());
    for (int64_t i = 0; i < b->size(); ++i) {
      const int64_t index = b->indices()[i];
      EXPECT_EQ(values[2 * i], static_cast<float>(std::filesystem::file_size(loader->source().key(index))));
      EXPECT_EQ(values[2 * i + 1], static_cast<float>(index));
      seen.insert(index);
    }
  }
  EXPECT_EQ(seen.size(), 30u);
}

}  // namespace
}  // namespace nostall
