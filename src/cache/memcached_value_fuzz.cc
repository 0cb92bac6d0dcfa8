// libFuzzer target: a cluster cache value as anyone who reaches a memcached
// port could write it. Invariants: no crash; bytes are taken only from a
// value encoded with the secret for that item (what the fuzzer writes never
// passes, however it is built from an honest value); an honest value
// decodes to its bytes.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cache/memcached_value.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nostall;
  static const MemcachedValueCodec codec("a secret the fuzzer does not know");
  std::vector<uint8_t> out;
  if (size < 1) return 0;
  const int64_t item = data[0];
  // 1. The fuzzer's bytes as a value: never accepted (it would need the MAC).
  if (codec.Decode(7, item, data + 1, size - 1, &out)) std::abort();
  // 2. An honest value of the fuzzer's bytes, then altered at one place.
  const std::string honest = codec.Encode(7, item, data + 1, size - 1);
  std::vector<uint8_t> v(honest.begin(), honest.end());
  if (!codec.Decode(7, item, v.data(), v.size(), &out) || out.size() != size - 1 ||
      (size > 1 && std::memcmp(out.data(), data + 1, size - 1) != 0)) {
    std::abort();
  }
  if (codec.Decode(7, item + 1, v.data(), v.size(), &out) || codec.Decode(8, item, v.data(), v.size(), &out)) {
    std::abort();  // another item's or another dataset's
  }
  const size_t at = (static_cast<size_t>(data[0]) * 131) % v.size();
  v[at] ^= static_cast<uint8_t>(1 + data[size - 1] % 255);
  if (codec.Decode(7, item, v.data(), v.size(), &out)) std::abort();
  if (codec.Decode(7, item, v.data(), v.size() - 1, &out)) std::abort();  // cut short
  return 0;
}
