// An audio field's transforms (docs/audio.md): read from a spec's "audio"
// list, checked and resolved once, then run per sample from the file's
// bytes to its tensor. Each transform keeps torchaudio's name, arguments and
// defaults where torchaudio has it (Resample, SpeedPerturbation,
// Spectrogram, MelSpectrogram, MFCC, AmplitudeToDB, FrequencyMasking,
// TimeMasking); the rest are nostall's (Decode, RandomCrop, CenterCrop,
// Gain, TimeShift, AddNoise). Random draws come from (seed, epoch, index)
// alone, in the order of the list.
//
// A crop placed after nothing but Resample, SpeedPerturbation and Gain is
// drawn from the lengths the header gives, and only the source frames it
// needs (plus the resampler's filter width) are decoded: the audio
// counterpart of a JPEG region decode, and exactly the samples a whole
// decode would give.
#ifndef NOSTALL_AUDIO_PIPELINE_H_
#define NOSTALL_AUDIO_PIPELINE_H_

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "audio/decode.h"
#include "audio/dsp.h"
#include "common/sample_key.h"
#include "nostall/status.h"

namespace nostall::audio {

enum class OpKind {
  kDecode, kResample, kSpeedPerturbation, kRandomCrop, kCenterCrop, kGain, kTimeShift, kAddNoise,
  kSpectrogram, kMelSpectrogram, kMFCC, kAmplitudeToDB, kFrequencyMasking, kTimeMasking,
};

struct Op {
  OpKind kind = OpKind::kDecode;
  nlohmann::json resolved;  // {"type": ..., every argument}
  // Resample / SpeedPerturbation.
  int64_t orig_freq = 0, new_freq = 0;
  int lowpass_filter_width = 6;
  double rolloff = 0.99, beta = 14.769656459379492;
  ResampleWindow window = ResampleWindow::kHann;
  std::vector<double> factors;
  // Crops, TimeShift (seconds), Gain and AddNoise ranges (dB).
  double seconds = 0, lo = 0, hi = 0;
  // Features.
  StftParams stft;
  int sample_rate = 0, n_mels = 0, n_mfcc = 0;
  std::vector<float> fb, dct;
  bool log_mels = false;
  double multiplier = 10, top_db = 0;
  // Masking.
  int mask_param = 0;
  bool iid = false;
  double p = 1.0;
  // AddNoise: the noise set, decoded (mono, at the rate there).
  std::shared_ptr<const std::vector<std::vector<float>>> noise;
};

// A duration in frames at `rate`, as crops and shifts count them.
inline int64_t Frames(double seconds, int rate) { return std::llround(seconds * rate); }

struct Spec {
  std::vector<Op> ops;  // ops[0] is Decode (added when the list has none)
  bool mono = true;
  int channels = 0;      // kept channels (mono: 1; 0: each file's, which must then agree)
  int sample_rate = 0;   // the files' rate (0: any; then a Resample fixes it)
  double max_seconds = 3600;

  // What a sample is after the list: channels, then bins (0: a waveform)
  // and frames (0: varies from file to file).
  int out_channels = 1, out_bins = 0;
  int64_t out_frames = 0;
  // Samples of many lengths (a loader's list without a crop): out_frames is
  // then the bound (Decode's max_seconds at the output's rate), and each
  // sample is written dense in its own length, padded per batch.
  bool ragged = false;

  std::vector<int64_t> Shape() const;
  size_t SampleBytes() const;
  nlohmann::json ToJson() const;
};

// Reads and checks the list; names the transform and argument at fault.
// AddNoise's files are read here. `fixed` (a loader's batch): every sample
// must come out one length, or of many lengths bounded (ragged; the rate
// known at the end), else an error saying how to crop or bound them.
Result<std::shared_ptr<const Spec>> SpecFromJson(const nlohmann::json& list, bool fixed = true);

// Per-thread buffers and kernels, reused from sample to sample.
struct Scratch {
  std::vector<float> a, b, spec;
  std::vector<std::vector<float>> mels;
  Stft stft;
  std::map<std::tuple<int64_t, int64_t, int, double, int, double>, ResampleKernel> kernels;
};

// One sample from its file's bytes into `dst` (Shape(), float32), or a
// DataError naming what is wrong with the file. With `trace`, the drawn
// parameters and the source frames decoded are written there
// (nostall.audio.sample_params).
// A ragged spec's sample is written dense in its own shape, which goes to
// `dims` (3 int64s: Shape()'s rank, then 1s). With `file`, `data` holds the
// file's first `size` bytes and the rest is read where wanted
// (AudioFile::Open).
Status Prepare(const Spec& spec, const uint8_t* data, size_t size, const SampleKey& key, float* dst,
               Scratch* scratch, nlohmann::json* trace, int64_t* dims = nullptr, const ItemFile* file = nullptr);

// One sample of any shape (`fixed` need not hold): nostall.audio.apply.
Status Apply(const Spec& spec, const uint8_t* data, size_t size, const SampleKey& key, std::vector<float>* out,
             std::vector<int64_t>* shape, nlohmann::json* trace);

// The parameters a file of `info` would be given, without decoding it.
Status Trace(const Spec& spec, const AudioInfo& info, const SampleKey& key, nlohmann::json* out);

}  // namespace nostall::audio

#endif  // NOSTALL_AUDIO_PIPELINE_H_
