// libFuzzer target: attaching to and reading from a MinIO cache segment
// whose bytes the fuzzer writes (as a damaged or hostile process could).
// The magic and version are set so that attaching gets past them; the
// header's item count and fingerprint are taken as the dataset's, so the
// table and data area are read. Invariants: no crash, and a hit returns
// exactly the bytes its entry claims, inside the segment.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nostall/cache.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nostall;
  if (size < 64 || size > (1 << 20)) return 0;
  const std::string name = "fuzz-" + std::to_string(::getpid());
  const std::string seg = "/nostall-cache-" + std::to_string(::geteuid()) + "-" + name;
  std::vector<uint8_t> bytes(data, data + size);
  std::memcpy(bytes.data(), "NSTCACH1", 8);
  const uint32_t version = 2;
  std::memcpy(bytes.data() + 8, &version, 4);
  uint64_t fingerprint = 0;
  int64_t items = 0;
  std::memcpy(&fingerprint, bytes.data() + 16, 8);
  std::memcpy(&items, bytes.data() + 24, 8);
  if (items < 1 || items > 4096) items = 1 + static_cast<int64_t>(data[0] % 8);
  int fd = ::shm_open(seg.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) std::abort();
  if (::write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) std::abort();
  ::close(fd);
  auto cache = MinioCache::Open(name, /*budget_bytes=*/4096, fingerprint, items);
  if (cache.ok()) {
    std::vector<uint8_t> out;
    for (int64_t i = -1; i <= items; ++i) {
      Result<bool> hit = cache.value()->Lookup(i, &out);
      if (hit.ok() && hit.value() && out.size() > size) std::abort();
    }
    const uint8_t payload[100] = {1, 2, 3};
    for (int64_t i = 0; i < items && i < 4; ++i) {
      if (cache.value()->Insert(i, payload, sizeof payload) &&
          (!cache.value()->Lookup(i, &out).value_or(false) || out.size() != sizeof payload ||
           std::memcmp(out.data(), payload, sizeof payload) != 0)) {
        std::abort();  // an insert that reads back wrong
      }
    }
    (void)cache.value()->Stats();
  }
  (void)MinioCache::Inspect(name);
  ::shm_unlink(seg.c_str());
  return 0;
}
