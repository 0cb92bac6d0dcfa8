// The shared loader's test fixture: a small image folder, a spec over it,
// serving it in a thread, and reading epochs (shared_test.cc,
// shared_crash_test.cc).
#ifndef NOSTALL_SHARED_SHARED_TEST_SUPPORT_H_
#define NOSTALL_SHARED_SHARED_TEST_SUPPORT_H_

#include "nostall/shared.h"
#include "pipeline/pipeline.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <numeric>
#include <string>
#include <thread>

#include "common/fd.h"
#include "common/process.h"
#include "testing/test_images.h"

namespace nostall {


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
  static inline TempDir* dir_ = nullptr;
};

// Indices of one epoch of `loader`.
inline std::vector<int64_t> Epoch(Loader* loader, int64_t epoch, Status* error = nullptr) {
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

// The indices of each batch `loader` gives until its epoch ends.
inline std::vector<std::vector<int64_t>> RestOfEpoch(Loader* loader) {
  std::vector<std::vector<int64_t>> batches;
  while (true) {
    NextStatus ns;
    std::shared_ptr<Batch> b;
    Status st = loader->Next(10000, &ns, &b);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok() || ns != NextStatus::kBatch) break;
    batches.emplace_back(b->indices(), b->indices() + b->size());
  }
  return batches;
}

inline std::vector<int64_t> All(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace nostall

#endif  // NOSTALL_SHARED_SHARED_TEST_SUPPORT_H_
