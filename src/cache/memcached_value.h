// A cluster cache value: a 64-byte header (magic, dataset fingerprint, item,
// length, HMAC-SHA256) and the item's bytes. The MAC, keyed with the job's
// secret, covers the header and the bytes: a value is taken only if it was
// written by a holder of the secret for this dataset and this item, whole.
#ifndef NOSTALL_CACHE_MEMCACHED_VALUE_H_
#define NOSTALL_CACHE_MEMCACHED_VALUE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

typedef struct evp_mac_ctx_st EVP_MAC_CTX;

namespace nostall {

class MemcachedValueCodec {
 public:
  static constexpr size_t kHeaderBytes = 64;
  // HMAC-SHA256 keyed with `secret` once (its pads); each value copies it.
  explicit MemcachedValueCodec(const std::string& secret);
  ~MemcachedValueCodec();
  MemcachedValueCodec(const MemcachedValueCodec&) = delete;
  MemcachedValueCodec& operator=(const MemcachedValueCodec&) = delete;
  bool ok() const { return base_ != nullptr; }

  std::string Encode(uint64_t fingerprint, int64_t item, const uint8_t* data, size_t size) const;
  // The bytes of `value` if it is (fingerprint, item)'s, whole and under this
  // secret; false (and `out` untouched) otherwise.
  bool Decode(uint64_t fingerprint, int64_t item, const uint8_t* value, size_t len,
              std::vector<uint8_t>* out) const;

 private:
  void MacOf(const uint8_t* header, const uint8_t* data, size_t n, uint8_t out[32]) const;
  EVP_MAC_CTX* base_ = nullptr;
};

}  // namespace nostall

#endif  // NOSTALL_CACHE_MEMCACHED_VALUE_H_
