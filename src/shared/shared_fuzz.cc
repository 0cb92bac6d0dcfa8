// libFuzzer target: inspecting, attaching to and reading from a shared
// loader segment whose bytes the fuzzer writes. The header is made to claim
// a live producer (this process), so attaching reaches the geometry checks,
// the tables and the served spec; the seed corpus holds real segments of a
// producer serving a tiny dataset made at start-up (fuzz/make_seeds.sh).
// Invariants: no crash, no hang (every wait here is bounded), and a batch
// read lies inside the process's memory (ASan).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <cstring>
#include <string>
#include <vector>

#include "nostall/shared.h"
#include "ring/ring.h"
#include "shared/shared_fuzz_support.h"
#include "testing/test_images.h"

namespace {
// The dataset the seed segments' spec names.
constexpr const char* kDataset = "/tmp/nostall-fuzz-shared-data";
}  // namespace

// With NOSTALL_FUZZ_WRITE_SEED=FILE: serves the dataset, writes the live
// segment's bytes to FILE (a seed) and exits.
void WriteSeed(const char* path) {
  using namespace nostall;
  LoaderSpec spec;
  spec.source = kDataset;
  spec.batch_size = 2;
  spec.num_threads = 1;
  spec.reads_in_flight = 1;
  Transform resize{TransformKind::kResize};
  resize.height = resize.width = 4;
  spec.prep.transforms = {resize};
  ServeOptions so;
  so.max_consumers = 2;
  so.slots = 3;
  auto producer = SharedProducer::Create("fuzz-seed", spec, so);
  if (!producer.ok()) std::abort();
  std::atomic<bool> stop{false};
  std::thread run([&] { (void)producer.value()->Run(stop); });
  while (producer.value()->Snapshot().produced < 3) usleep(1000);
  stop.store(true);
  run.join();
  int fd = ::shm_open(ring::SegmentName("fuzz-seed").c_str(), O_RDONLY, 0);
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0) std::abort();
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  if (::pread(fd, bytes.data(), bytes.size(), 0) != st.st_size) std::abort();
  ::close(fd);
  FILE* out = std::fopen(path, "wb");
  if (out == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), out) != bytes.size()) std::abort();
  std::fclose(out);
  ::shm_unlink(ring::SegmentName("fuzz-seed").c_str());
  std::exit(0);
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (::access(kDataset, F_OK) != 0) {
    nostall::testing::MakeImageFolder(kDataset, /*classes=*/2, /*per_class=*/5, 16, 12);
  }
  if (const char* seed = std::getenv("NOSTALL_FUZZ_WRITE_SEED")) WriteSeed(seed);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nostall;
  if (size > (1 << 20)) return 0;
  const std::string name = "fuzz-" + std::to_string(::getpid());
  const std::string seg = ring::SegmentName(name);
  // At least a header's worth: a shorter segment is one its creator is
  // still sizing, which an attach waits (2 s) to see grow.
  std::vector<uint8_t> bytes(data, data + size);
  if (bytes.size() < 4096) bytes.resize(4096, 0);
  MakeHeaderClaimLiveProducerForFuzzing(bytes.data(), bytes.size());
  // A spec naming object storage would send the attach to the network (and
  // wait on it): not this target's business, so no s3:// survives.
  for (size_t i = 0; i + 5 <= bytes.size(); ++i) {
    if (std::memcmp(bytes.data() + i, "s3://", 5) == 0) bytes[i + 3] = '_';
  }
  int fd = ::shm_open(seg.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) std::abort();
  if (!bytes.empty() && ::write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
    std::abort();
  }
  ::close(fd);
  (void)InspectShared(name);
  AttachOptions o;
  o.batch_size = 1 + (size % 7);
  o.producer_timeout_s = 0.01;
  auto c = AttachShared(name, o);
  if (c.ok()) {
    Loader* l = c.value().get();
    if (l->StartEpoch(0).ok()) {
      for (int i = 0; i < 4; ++i) {
        NextStatus ns;
        std::shared_ptr<Batch> b;
        if (!l->Next(/*timeout_ms=*/0, &ns, &b).ok() || ns != NextStatus::kBatch) break;
        volatile uint8_t sink = 0;
        const auto* px = static_cast<const uint8_t*>(b->images());
        const std::vector<int64_t> shape = l->SampleShape();
        const int64_t sample = shape[0] * shape[1] * shape[2];
        for (int64_t j = 0; j < b->size() * sample; j += 61) sink = sink + px[j];
        for (int64_t j = 0; j < b->size(); ++j) sink = sink + static_cast<uint8_t>(b->labels()[j]);
      }
    }
  }
  ::shm_unlink(seg.c_str());
  return 0;
}
