#include "cache/memcached_value.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <cstring>

namespace nostall {
namespace {

constexpr char kValueMagic[4] = {'N', 'S', 'M', '3'};

struct ValueHeader {
  char magic[4];
  uint32_t reserved;
  uint64_t fingerprint;
  int64_t item;
  uint64_t length;
  uint8_t mac[32];  // HMAC-SHA256(secret, this header with the mac zeroed, then the bytes)
};
static_assert(sizeof(ValueHeader) == MemcachedValueCodec::kHeaderBytes);

}  // namespace

MemcachedValueCodec::MemcachedValueCodec(const std::string& secret) {
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (mac == nullptr) return;
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
  EVP_MAC_free(mac);
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0), OSSL_PARAM_construct_end()};
  if (ctx != nullptr &&
      EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), params) == 1) {
    base_ = ctx;
  } else {
    EVP_MAC_CTX_free(ctx);
  }
}

MemcachedValueCodec::~MemcachedValueCodec() { EVP_MAC_CTX_free(base_); }

void MemcachedValueCodec::MacOf(const uint8_t* header, const uint8_t* data, size_t n,
                                uint8_t out[32]) const {
  ValueHeader bare;
  std::memcpy(&bare, header, sizeof bare);
  std::memset(bare.mac, 0, sizeof bare.mac);
  EVP_MAC_CTX* ctx = base_ != nullptr ? EVP_MAC_CTX_dup(base_) : nullptr;
  size_t len = 0;
  if (ctx == nullptr ||
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(&bare), sizeof bare) != 1 ||
      (n > 0 && EVP_MAC_update(ctx, data, n) != 1) || EVP_MAC_final(ctx, out, &len, 32) != 1 ||
      len != 32) {
    // No MAC: nothing written matches it (Decode also refuses without one).
    std::memset(out, 0xA5, 32);
  }
  EVP_MAC_CTX_free(ctx);
}

std::string MemcachedValueCodec::Encode(uint64_t fingerprint, int64_t item, const uint8_t* data,
                                        size_t size) const {
  std::string value(sizeof(ValueHeader) + size, '\0');
  ValueHeader h{};
  std::memcpy(h.magic, kValueMagic, sizeof kValueMagic);
  h.fingerprint = fingerprint;
  h.item = item;
  h.length = size;
  MacOf(reinterpret_cast<const uint8_t*>(&h), data, size, h.mac);
  std::memcpy(value.data(), &h, sizeof h);
  if (size > 0) std::memcpy(value.data() + sizeof h, data, size);
  return value;
}

bool MemcachedValueCodec::Decode(uint64_t fingerprint, int64_t item, const uint8_t* value, size_t len,
                                 std::vector<uint8_t>* out) const {
  if (base_ == nullptr || value == nullptr || len < sizeof(ValueHeader)) return false;
  ValueHeader h;
  std::memcpy(&h, value, sizeof h);
  if (std::memcmp(h.magic, kValueMagic, sizeof kValueMagic) != 0 || h.fingerprint != fingerprint ||
      h.item != item || h.length != len - sizeof(ValueHeader)) {
    return false;
  }
  uint8_t mac[32];
  MacOf(value, value + sizeof h, h.length, mac);
  if (CRYPTO_memcmp(mac, h.mac, sizeof mac) != 0) return false;
  out->assign(value + sizeof h, value + len);
  return true;
}

}  // namespace nostall
