// Audio DSP (dsp.h).
#include "audio/dsp.h"

#include <algorithm>
#include <cmath>
#include <complex>
#include <numeric>

#include "pocketfft_hdronly.h"

namespace nostall::audio {

Result<ResampleKernel> MakeResampleKernel(int64_t orig_freq, int64_t new_freq, int lowpass_filter_width,
                                          double rolloff, ResampleWindow window, double beta) {
  if (orig_freq <= 0 || new_freq <= 0) return InvalidArgument("resample rates must be positive");
  if (lowpass_filter_width <= 0) return InvalidArgument("lowpass_filter_width must be positive");
  if (!(rolloff > 0 && rolloff <= 1)) return InvalidArgument("rolloff must be in (0, 1]");
  const int64_t g = std::gcd(orig_freq, new_freq);
  ResampleKernel r;
  r.orig = orig_freq / g;
  r.phases = new_freq / g;
  double base = std::min(r.orig, r.phases) * rolloff;
  r.width = static_cast<int64_t>(std::ceil(lowpass_filter_width * static_cast<double>(r.orig) / base));
  r.taps = 2 * r.width + r.orig;
  // torchaudio's kernel has (new / gcd) x (2 width + orig / gcd) taps: rates
  // with a small common divisor (a file at 44101 Hz) make it huge. Refused
  // past 2^23 taps (32 MB; 44.1 -> 16 kHz takes 76,000; audio_fuzz found a
  // file whose rate made one of 10^10).
  constexpr double kMaxTaps = 1 << 23;
  if (static_cast<double>(r.phases) * static_cast<double>(r.taps) > kMaxTaps) {
    return InvalidArgument("resampling " + std::to_string(orig_freq) + " -> " + std::to_string(new_freq) +
                           " Hz needs a kernel of " +
                           std::to_string(static_cast<int64_t>(static_cast<double>(r.phases) * r.taps)) +
                           " taps (the rates' greatest common divisor is " + std::to_string(g) +
                           "), over 2^23");
  }
  r.k.resize(static_cast<size_t>(r.phases * r.taps));
  const double lw = lowpass_filter_width;
  const double i0beta = window == ResampleWindow::kKaiser ? std::cyl_bessel_i(0.0, beta) : 1.0;
  const double scale = base / static_cast<double>(r.orig);
  for (int64_t p = 0; p < r.phases; ++p) {
    for (int64_t j = 0; j < r.taps; ++j) {
      // torchaudio: t = (-p / new + idx / orig) * base_freq, idx in [-width, width + orig).
      double t = (-static_cast<double>(p) / static_cast<double>(r.phases) +
                  static_cast<double>(j - r.width) / static_cast<double>(r.orig)) * base;
      t = std::clamp(t, -lw, lw);
      double w;
      if (window == ResampleWindow::kHann) {
        const double c = std::cos(t * M_PI / lw / 2);
        w = c * c;
      } else {
        w = std::cyl_bessel_i(0.0, beta * std::sqrt(std::max(0.0, 1 - (t / lw) * (t / lw)))) / i0beta;
      }
      t *= M_PI;
      const double s = t == 0 ? 1.0 : std::sin(t) / t;
      r.k[static_cast<size_t>(p * r.taps + j)] = static_cast<float>(s * w * scale);
    }
  }
  r.first.assign(static_cast<size_t>(r.phases), 0);
  r.end.assign(static_cast<size_t>(r.phases), 0);
  for (int64_t p = 0; p < r.phases; ++p) {
    const float* row = r.k.data() + p * r.taps;
    int64_t a = 0, b = r.taps;
    while (a < b && row[a] == 0.0f) ++a;
    while (b > a && row[b - 1] == 0.0f) --b;
    r.first[static_cast<size_t>(p)] = static_cast<int32_t>(a);
    r.end[static_cast<size_t>(p)] = static_cast<int32_t>(b);
  }
  return r;
}

void ResampleKernel::InputRange(int64_t k0, int64_t k1, int64_t* lo, int64_t* hi) const {
  if (k1 <= k0) {
    *lo = *hi = 0;
    return;
  }
  // Output k = i * phases + p reads input [i * orig - width, i * orig - width + taps).
  *lo = (k0 / phases) * orig - width;
  *hi = ((k1 - 1) / phases) * orig - width + taps;
}

namespace {

// Eight partial sums, so the compiler keeps them in vector registers.
inline __attribute__((always_inline)) float Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int u = 0; u < 8; ++u) acc[u] += a[j + u] * b[j + u];
  }
  float s = 0;
  for (; j < n; ++j) s += a[j] * b[j];
  return s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

}  // namespace

// Built for AVX2 too, chosen at run time: the eight partial sums stay in
// their lanes and no FMA is used, so every build gives the same bits. (Not
// under ThreadSanitizer: the ifunc that picks the build runs before its
// runtime is up, and the program crashes at start.)
#if defined(__SANITIZE_THREAD__)
#define NOSTALL_AUDIO_CLONES
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NOSTALL_AUDIO_CLONES
#endif
#endif
#ifndef NOSTALL_AUDIO_CLONES
#define NOSTALL_AUDIO_CLONES __attribute__((target_clones("avx2", "default")))
#endif
NOSTALL_AUDIO_CLONES void ResampleRange(const ResampleKernel& r, const float* in,
                                                                    int64_t lo, int64_t k0, int64_t k1,
                                                                    float* out) {
  for (int64_t k = k0; k < k1; ++k) {
    const int64_t i = k / r.phases, p = k % r.phases;
    const int32_t a = r.first[static_cast<size_t>(p)];
    const float* x = in + (i * r.orig - r.width - lo) + a;
    out[k - k0] = Dot(x, r.k.data() + p * r.taps + a, r.end[static_cast<size_t>(p)] - a);
  }
}

int64_t StftParams::Frames(int64_t n) const {
  int64_t len = n + 2 * static_cast<int64_t>(pad);
  if (center) len += 2 * (n_fft / 2);
  if (len < n_fft) return 0;
  return 1 + (len - n_fft) / hop();
}

struct Stft::Plan {
  int n_fft = 0, win = 0;
  std::vector<float> window;  // n_fft long, the Hann window of win centred
  std::vector<float> padded, frames, power;
  std::vector<std::complex<float>> spectra;
};

Stft::Stft() = default;
Stft::~Stft() = default;

namespace {

// |X|^power of each frame's one-sided spectrum (`frames` rows of nfft/2 + 1),
// time-major, `bins` a row (two-sided: the other half mirrors, a real
// signal's conjugate symmetry).
void PowerRows(const std::complex<float>* spectra, int64_t frames, int nfft, int bins, double power,
               float scale2, float* rows) {
  const int half = nfft / 2 + 1;
  for (int64_t t = 0; t < frames; ++t) {
    const std::complex<float>* c = spectra + t * half;
    float* row = rows + t * bins;
    for (int k = 0; k < half; ++k) row[k] = (c[k].real() * c[k].real() + c[k].imag() * c[k].imag()) * scale2;
    for (int k = half; k < bins; ++k) row[k] = row[nfft - k];
    if (power == 1.0) {
      for (int k = 0; k < bins; ++k) row[k] = std::sqrt(row[k]);
    } else if (power != 2.0) {
      const float e = static_cast<float>(power / 2);
      for (int k = 0; k < bins; ++k) row[k] = std::pow(row[k], e);
    }
  }
}

// frames x bins rows into bins x frames, in cache-sized blocks.
void TransposeBlocks(const float* rows, int64_t frames, int bins, float* out) {
  constexpr int64_t kBlock = 32;
  for (int64_t t0 = 0; t0 < frames; t0 += kBlock) {
    const int64_t t1 = std::min(frames, t0 + kBlock);
    for (int64_t k0 = 0; k0 < bins; k0 += kBlock) {
      const int64_t k1 = std::min<int64_t>(bins, k0 + kBlock);
      for (int64_t k = k0; k < k1; ++k) {
        for (int64_t t = t0; t < t1; ++t) out[k * frames + t] = rows[static_cast<size_t>(t * bins + k)];
      }
    }
  }
}

}  // namespace

Status Stft::Run(const StftParams& p, const float* x, int64_t n, float* out) {
  const int nfft = p.n_fft, win = p.win(), hop = p.hop();
  if (!plan_ || plan_->n_fft != nfft || plan_->win != win) {
    plan_ = std::make_unique<Plan>();
    plan_->n_fft = nfft;
    plan_->win = win;
    plan_->window.assign(static_cast<size_t>(nfft), 0.0f);
    const int left = (nfft - win) / 2;
    for (int m = 0; m < win; ++m) {
      // torch.hann_window(win, periodic=True), computed in float64.
      plan_->window[static_cast<size_t>(left + m)] =
          static_cast<float>(0.5 - 0.5 * std::cos(2 * M_PI * m / win));
    }
  }
  Plan& pl = *plan_;
  // The padded signal: `pad` zeros, then the centre padding (reflect or zeros).
  const int64_t c = p.center ? nfft / 2 : 0;
  const int64_t inner = n + 2 * static_cast<int64_t>(p.pad);
  if (p.center && p.reflect && inner <= c) {
    return DataError("the signal (" + std::to_string(inner) + " samples) is too short for a centred STFT of "
                     "n_fft " + std::to_string(nfft) + " with reflect padding (needs over " +
                     std::to_string(c) + ")");
  }
  const int64_t frames = p.Frames(n);
  if (frames < 1) return DataError("the signal is shorter than n_fft " + std::to_string(nfft));
  pl.padded.assign(static_cast<size_t>(inner + 2 * c), 0.0f);
  float* s = pl.padded.data() + c;
  std::copy(x, x + n, s + p.pad);
  if (p.center && p.reflect) {
    for (int64_t j = 1; j <= c; ++j) {
      s[-j] = s[j];
      s[inner - 1 + j] = s[inner - 1 - j];
    }
  }
  float norm = 1.0f;
  if (p.normalized) {
    double e = 0;
    for (float w : pl.window) e += static_cast<double>(w) * w;
    norm = static_cast<float>(1.0 / std::sqrt(e));
  }
  // Every frame windowed, then one batched real FFT (PocketFFT runs
  // several frames per SIMD vector); |X|^power time-major (PowerRows), then
  // transposed into bins x frames in blocks.
  const int bins = p.bins();
  const int half = nfft / 2 + 1;
  pl.frames.resize(static_cast<size_t>(frames) * nfft);
  for (int64_t t = 0; t < frames; ++t) {
    const float* f = pl.padded.data() + t * hop;
    float* dst = pl.frames.data() + t * nfft;
    for (int m = 0; m < nfft; ++m) dst[m] = f[m] * pl.window[static_cast<size_t>(m)];
  }
  pl.spectra.resize(static_cast<size_t>(frames) * half);
  const pocketfft::shape_t shape{static_cast<size_t>(frames), static_cast<size_t>(nfft)};
  const pocketfft::stride_t in_stride{static_cast<ptrdiff_t>(nfft * sizeof(float)), sizeof(float)};
  const pocketfft::stride_t out_stride{static_cast<ptrdiff_t>(half * sizeof(std::complex<float>)),
                                       sizeof(std::complex<float>)};
  pocketfft::r2c(shape, in_stride, out_stride, 1, pocketfft::FORWARD, pl.frames.data(), pl.spectra.data(), 1.0f, 1);
  pl.power.resize(static_cast<size_t>(frames) * bins);
  PowerRows(pl.spectra.data(), frames, nfft, bins, p.power, norm * norm, pl.power.data());
  TransposeBlocks(pl.power.data(), frames, bins, out);
  return Status::OK();
}

namespace {

double HzToMel(double f, bool htk) {
  if (htk) return 2595.0 * std::log10(1.0 + f / 700.0);
  const double f_sp = 200.0 / 3, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp;
  const double logstep = std::log(6.4) / 27.0;
  if (f >= min_log_hz) return min_log_mel + std::log(f / min_log_hz) / logstep;
  return f / f_sp;
}

double MelToHz(double m, bool htk) {
  if (htk) return 700.0 * (std::pow(10.0, m / 2595.0) - 1.0);
  const double f_sp = 200.0 / 3, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp;
  const double logstep = std::log(6.4) / 27.0;
  if (m >= min_log_mel) return min_log_hz * std::exp(logstep * (m - min_log_mel));
  return f_sp * m;
}

}  // namespace

Result<std::vector<float>> MelFilterbank(int n_freqs, double f_min, double f_max, int n_mels,
                                         int sample_rate, const std::string& norm,
                                         const std::string& mel_scale) {
  if (mel_scale != "htk" && mel_scale != "slaney") {
    return InvalidArgument("mel_scale must be \"htk\" or \"slaney\", not '" + mel_scale + "'");
  }
  if (!norm.empty() && norm != "slaney") return InvalidArgument("norm must be None or \"slaney\"");
  if (n_mels < 1 || n_freqs < 2) return InvalidArgument("n_mels and n_freqs must be positive");
  if (!(f_min >= 0 && f_min < f_max)) return InvalidArgument("f_min must be >= 0 and below f_max");
  const bool htk = mel_scale == "htk";
  // torchaudio computes the bank in float32 (linspace, then the triangles).
  std::vector<double> all(static_cast<size_t>(n_freqs));
  for (int i = 0; i < n_freqs; ++i) {
    all[static_cast<size_t>(i)] = static_cast<float>((sample_rate / 2) * static_cast<double>(i) / (n_freqs - 1));
  }
  const double m_min = HzToMel(f_min, htk), m_max = HzToMel(f_max, htk);
  std::vector<double> f_pts(static_cast<size_t>(n_mels + 2));
  for (int i = 0; i < n_mels + 2; ++i) {
    f_pts[static_cast<size_t>(i)] = MelToHz(m_min + (m_max - m_min) * i / (n_mels + 1), htk);
  }
  std::vector<float> fb(static_cast<size_t>(n_freqs) * n_mels);
  for (int i = 0; i < n_freqs; ++i) {
    for (int m = 0; m < n_mels; ++m) {
      const size_t mi = static_cast<size_t>(m);
      const double down = (all[static_cast<size_t>(i)] - f_pts[mi]) / (f_pts[mi + 1] - f_pts[mi]);
      const double up = (f_pts[mi + 2] - all[static_cast<size_t>(i)]) / (f_pts[mi + 2] - f_pts[mi + 1]);
      double v = std::max(0.0, std::min(down, up));
      if (norm == "slaney") v *= 2.0 / (f_pts[mi + 2] - f_pts[mi]);
      fb[static_cast<size_t>(i) * n_mels + mi] = static_cast<float>(v);
    }
  }
  return fb;
}

void ApplyFilterbank(const std::vector<float>& fb, int n_freqs, int n_mels, const float* spec,
                     int64_t frames, float* out) {
  std::fill(out, out + static_cast<int64_t>(n_mels) * frames, 0.0f);
  // Row by row (rows of spec are contiguous), skipping the bank's zeros.
  for (int f = 0; f < n_freqs; ++f) {
    const float* row = spec + static_cast<int64_t>(f) * frames;
    for (int m = 0; m < n_mels; ++m) {
      const float w = fb[static_cast<size_t>(f) * n_mels + m];
      if (w == 0.0f) continue;
      float* o = out + static_cast<int64_t>(m) * frames;
      for (int64_t t = 0; t < frames; ++t) o[t] += w * row[t];
    }
  }
}

std::vector<float> DctMatrix(int n_mfcc, int n_mels, const std::string& norm) {
  std::vector<float> d(static_cast<size_t>(n_mels) * n_mfcc);
  for (int k = 0; k < n_mfcc; ++k) {
    for (int n = 0; n < n_mels; ++n) {
      double v = std::cos(M_PI / n_mels * (n + 0.5) * k);
      if (norm == "ortho") {
        if (k == 0) v *= 1.0 / std::sqrt(2.0);
        v *= std::sqrt(2.0 / n_mels);
      } else {
        v *= 2.0;
      }
      d[static_cast<size_t>(n) * n_mfcc + k] = static_cast<float>(v);
    }
  }
  return d;
}

void AmplitudeToDb(float* x, int64_t n, double multiplier, double top_db) {
  // In float, as torchaudio computes it on float32 spectrograms.
  // multiplier * log10(x) as (multiplier / ln 10) * ln(x): glibc's logf is
  // several times faster than its log10f, and as exact to a float.
  const float mul = static_cast<float>(multiplier / std::log(10.0));
  float top = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = mul * std::log(std::max(x[i], 1e-10f));
    top = std::max(top, x[i]);
  }
  if (top_db > 0) {
    const float floor = static_cast<float>(top - top_db);
    for (int64_t i = 0; i < n; ++i) x[i] = std::max(x[i], floor);
  }
}

}  // namespace nostall::audio
