// Philox4x32-10, the counter-based generator of Salmon et al. (SC'11), written
// out here because it is twenty lines and must give the same numbers on every
// platform: nostall derives each epoch's order and each sample's augmentation
// parameters from (seed, epoch, sample index) alone, never from thread timing.
#ifndef NOSTALL_COMMON_PHILOX_H_
#define NOSTALL_COMMON_PHILOX_H_

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>

namespace nostall {

class Philox {
 public:
  // `seed` is the key; (a, b) select an independent stream (e.g. epoch and
  // sample index). Draws advance a private counter.
  Philox(uint64_t seed, uint64_t a, uint64_t b)
      : key_{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)},
        stream_a_(a),
        stream_b_(b) {}

  uint32_t Next32() {
    if (pos_ == 4) Refill();
    return buf_[pos_++];
  }
  uint64_t Next64() {
    uint64_t hi = Next32();
    return (hi << 32) | Next32();
  }
  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next64() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [0, n) (Lemire's multiply-shift; bias < 2^-64 * n).
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next64()) * n) >> 64);
  }
  // Standard normal (Box-Muller, two uniforms a value).
  double Normal() {
    const double u1 = 1.0 - Uniform(), u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
  }
  // Uniform integer in [lo, hi], inclusive.
  int64_t Between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Below(static_cast<uint64_t>(hi - lo) + 1));
  }

 private:
  void Refill() {
    std::array<uint32_t, 4> c = {static_cast<uint32_t>(counter_),
                                 static_cast<uint32_t>(counter_ >> 32),
                                 static_cast<uint32_t>(stream_a_) ^
                                     static_cast<uint32_t>(stream_b_ >> 32),
                                 static_cast<uint32_t>(stream_b_) ^
                                     static_cast<uint32_t>(stream_a_ >> 32) * 0x9E3779B9u};
    std::array<uint32_t, 2> k = key_;
    for (int round = 0; round < 10; ++round) {
      uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c[0];
      uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c[2];
      c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
      k[0] += 0x9E3779B9u;
      k[1] += 0xBB67AE85u;
    }
    buf_ = c;
    pos_ = 0;
    ++counter_;
  }

  std::array<uint32_t, 2> key_;
  uint64_t stream_a_, stream_b_;
  uint64_t counter_ = 0;
  std::array<uint32_t, 4> buf_{};
  int pos_ = 4;
};

}  // namespace nostall

#endif  // NOSTALL_COMMON_PHILOX_H_
