// Audio signal processing with torchaudio's semantics (docs/audio.md): the
// band-limited resampler of torchaudio.functional.resample, the short-time
// Fourier transform of torch.stft as torchaudio.transforms.Spectrogram calls
// it, the mel filter bank and DCT of MelSpectrogram and MFCC, and
// AmplitudeToDB. Planar float32 signals (one row per channel). The FFT is
// PocketFFT's (third_party/pocketfft); the rest is written here because each is a few lines of the
// formulas torchaudio documents, applied to ranges of a signal (a crop
// decoded alone must resample exactly as the whole file would).
#ifndef NOSTALL_AUDIO_DSP_H_
#define NOSTALL_AUDIO_DSP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nostall/status.h"

namespace nostall::audio {

// torchaudio's _get_sinc_resample_kernel: `phases` (the reduced new rate)
// rows of `taps` = 2 * width + orig taps each, computed in float64 and kept
// as float32, as torchaudio does.
struct ResampleKernel {
  int64_t orig = 1, phases = 1;  // the rates divided by their gcd
  int64_t width = 0, taps = 0;
  std::vector<float> k;  // phases x taps
  // Each phase's non-zero taps, [first, end): the Hann or Kaiser window is
  // zero past lowpass_filter_width zero crossings, so of torchaudio's
  // 2 * width + orig taps only about 2 * width are not (the rest is the
  // kernel's padding to one length for conv1d). Summing those alone gives
  // the same sums.
  std::vector<int32_t> first, end;

  // Output frames of an input of `n` frames: ceil(n * new / orig).
  int64_t OutLength(int64_t n) const { return (n * phases + orig - 1) / orig; }
  // The input frames output frames [k0, k1) read: [*lo, *hi) (may lie
  // outside the signal, where it is zero).
  void InputRange(int64_t k0, int64_t k1, int64_t* lo, int64_t* hi) const;
};

enum class ResampleWindow { kHann, kKaiser };

// orig_freq -> new_freq with lowpass_filter_width, rolloff and, for the
// Kaiser window, beta (torchaudio's arguments and defaults).
Result<ResampleKernel> MakeResampleKernel(int64_t orig_freq, int64_t new_freq, int lowpass_filter_width,
                                          double rolloff, ResampleWindow window, double beta);

// Output frames [k0, k1) of resampling a signal whose frames [lo, hi) are
// in `in` (InputRange(k0, k1): frames outside the signal already zero),
// into `out` (k1 - k0 frames).
void ResampleRange(const ResampleKernel& kernel, const float* in, int64_t lo, int64_t k0, int64_t k1,
                   float* out);

// torch.stft(center=True, pad_mode="reflect" or "constant", onesided) with a
// periodic Hann window of win_length centred in n_fft, then |X|^power.
struct StftParams {
  int n_fft = 400;
  int win_length = 0;  // 0: n_fft
  int hop_length = 0;  // 0: win_length / 2
  int pad = 0;         // zeros both sides before the transform
  double power = 2.0;  // 1: magnitude, 2: power
  bool normalized = false;  // divided by the window's L2 norm ("window")
  bool center = true;
  bool reflect = true;  // pad_mode "reflect" (else "constant")
  bool onesided = true;

  int win() const { return win_length > 0 ? win_length : n_fft; }
  int hop() const { return hop_length > 0 ? hop_length : win() / 2; }
  int bins() const { return onesided ? n_fft / 2 + 1 : n_fft; }
  // Frames of a signal of n samples; < 1 when too short.
  int64_t Frames(int64_t n) const;
};

// One thread's STFT: the window and buffers, kept for the
// next call with the same n_fft.
class Stft {
 public:
  Stft();
  ~Stft();
  Stft(const Stft&) = delete;
  Stft& operator=(const Stft&) = delete;
  // The spectrogram of `n` samples at `x` into `out` (bins x frames,
  // row-major: out[f * frames + t]). A DataError when the signal is too
  // short for reflect padding (as torch refuses it).
  Status Run(const StftParams& p, const float* x, int64_t n, float* out);

 private:
  struct Plan;
  std::unique_ptr<Plan> plan_;
};

// torchaudio.functional.melscale_fbanks: (n_freqs x n_mels), row-major.
// mel_scale "htk" or "slaney"; norm "" or "slaney".
Result<std::vector<float>> MelFilterbank(int n_freqs, double f_min, double f_max, int n_mels,
                                         int sample_rate, const std::string& norm,
                                         const std::string& mel_scale);
// out (n_mels x frames) = fb^T x spec (n_freqs x frames).
void ApplyFilterbank(const std::vector<float>& fb, int n_freqs, int n_mels, const float* spec,
                     int64_t frames, float* out);

// torchaudio.functional.create_dct: (n_mels x n_mfcc), row-major; norm
// "ortho" or "".
std::vector<float> DctMatrix(int n_mfcc, int n_mels, const std::string& norm);

// torchaudio.functional.amplitude_to_DB with ref 1 and amin 1e-10:
// multiplier * log10(max(x, amin)), then (top_db > 0) floored at its
// maximum less top_db.
void AmplitudeToDb(float* x, int64_t n, double multiplier, double top_db);

}  // namespace nostall::audio

#endif  // NOSTALL_AUDIO_DSP_H_
