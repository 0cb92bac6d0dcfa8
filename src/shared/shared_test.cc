#include "nostall/shared.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <numeric>
#include <thread>

#include "testing/test_images.h"

namespace nostall {
namespace {

using testing::MakeImageFolder;
using testing::TempDir;

class SharedTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    MakeImageFolder(dir_->path(), /*classes=*/3, /*per_class=*/15, 64, 48);  // 45 items
  }
  static void TearDownTestSuite() { delete dir_; }

  LoaderSpec Spec() const {
    LoaderSpec s;
    s.source = dir_->path();
    s.source_options.use_index_cache = false;
    s.batch_size = 8;
    s.shuffle = true;
    s.seed = 11;
    s.num_threads = 1;
    s.reads_in_flight = 1;
    Transform resize{TransformKind::kResize};
    resize.height = resize.width = 16;
    s.prep.transforms = {resize};
    return s;
  }

  // Serves in a thread until the returned stop flag is set and joined.
  struct Serving {
    std::unique_ptr<SharedProducer> producer;
    std::atomic<bool> stop{false};
    std::thread thread;
    Status result;
    ~Serving() {
      stop.store(true);
      if (thread.joinable()) thread.join();
    }
  };
  std::unique_ptr<Serving> Serve(const std::string& name, ServeOptions o = {}) {
    auto s = std::make_unique<Serving>();
    auto p = SharedProducer::Create(name, Spec(), o);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    s->producer = std::move(p).value();
    s->thread = std::thread([raw = s.get()] { raw->result = raw->producer->Run(raw->stop); });
    return s;
  }

  static std::string Name(const char* what) { return std::string(what) + "-" + std::to_string(::getpid()); }
  static TempDir* dir_;
};
TempDir* SharedTest::dir_ = nullptr;

// Indices of one epoch of `loader`.
std::vector<int64_t> Epoch(Loader* loader, int64_t epoch, Status* error = nullptr) {
  std::vector<int64_t> seen;
  EXPECT_TRUE(loader->StartEpoch(epoch).ok());
  while (true) {
    NextStatus ns;
    std::shared_ptr<Batch> b;
    Status st = loader->Next(10000, &ns, &b);
    if (!st.ok()) {
      if (error) *error = st;
      break;
    }
    EXPECT_NE(ns, NextStatus::kTimeout);
    if (ns != NextStatus::kBatch) break;
    seen.insert(seen.end(), b->indices(), b->indices() + b->size());
  }
  return seen;
}

std::vector<int64_t> All(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST_F(SharedTest, ConsumersWithOtherBatchSizesSeeEverySampleOncePerEpoch) {
  auto serving = Serve(Name("sizes"));
  AttachOptions o;
  o.batch_size = 4;
  auto a = AttachShared(Name("sizes"), o).value();
  o.batch_size = 7;  // spans chunks of 8: copies
  auto b = AttachShared(Name("sizes"), o).value();
  EXPECT_EQ(a->SampleShape(), (std::vector<int64_t>{3, 16, 16}));
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (Loader* l : {a.get(), b.get()}) {
      std::vector<int64_t> seen = Epoch(l, epoch);
      std::sort(seen.begin(), seen.end());
      EXPECT_EQ(seen, All(45)) << "epoch " << epoch;
    }
  }
  EXPECT_GT(b->Stats().copied_batches, 0);
  EXPECT_EQ(a->Stats().copied_batches, 0);
  EXPECT_EQ(a->Stats().shared_mode, "shared");
}

TEST_F(SharedTest, ProducerGoneIsAnErrorOrAPrivatePipeline) {
  auto serving = Serve(Name("gone"));
  AttachOptions o;
  o.batch_size = 8;
  auto strict = AttachShared(Name("gone"), o).value();
  o.fallback_to_private = true;
  auto lenient = AttachShared(Name("gone"), o).value();
  serving.reset();  // stops and closes the segment
  Status error;
  for (int epoch = 0; epoch < 4 && error.ok(); ++epoch) Epoch(strict.get(), epoch, &error);
  EXPECT_EQ(error.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(error.message().find("producer stopped"), std::string::npos) << error.ToString();
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> seen = Epoch(lenient.get(), epoch);
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, All(45));
  }
  EXPECT_EQ(lenient->Stats().shared_mode, "private");
}

TEST_F(SharedTest, KilledConsumerIsReleased) {
  // Fork while this process has one thread; the child waits for the segment.
  const std::string name = Name("kill");
  pid_t child = ::fork();
  if (child == 0) {
    AttachOptions o;
    o.batch_size = 8;
    o.attach_timeout_s = 20;
    auto c = AttachShared(name, o);
    if (!c.ok()) {
      std::fprintf(stderr, "child: %s\n", c.status().ToString().c_str());
      ::_exit(1);
    }
    ::pause();  // attached, waiting to be killed
    ::_exit(0);
  }
  auto serving = Serve(name);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (serving->producer->Snapshot().consumers.empty() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(serving->producer->Snapshot().consumers.size(), 1u);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  const auto killed = std::chrono::steady_clock::now();
  while (!serving->producer->Snapshot().consumers.empty()) {
    ASSERT_LT(std::chrono::steady_clock::now() - killed, std::chrono::seconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(serving->producer->Snapshot().reaped, 1);
}

TEST_F(SharedTest, MistakesAreClearErrors) {
  AttachOptions o;
  o.batch_size = 8;
  EXPECT_EQ(AttachShared(Name("nobody"), o).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(AttachShared("bad/name", o).status().code(), StatusCode::kInvalidArgument);
  auto serving = Serve(Name("twice"));
  EXPECT_EQ(SharedProducer::Create(Name("twice"), Spec(), {}).status().code(),
            StatusCode::kFailedPrecondition);
  o.expect_spec_fingerprint = 12345;
  EXPECT_NE(AttachShared(Name("twice"), o).status().message().find("another pipeline"),
            std::string::npos);
  LoaderSpec skip = Spec();
  skip.on_error = ErrorPolicy::kSkip;
  EXPECT_EQ(SharedProducer::Create(Name("skip"), skip, {}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nostall
