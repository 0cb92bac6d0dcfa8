// The audio transforms' schemas (ops.h): each one's arguments declared
// once, with torchaudio's names and defaults, their types, ranges and docs.
// SpecFromJson reads a spec's entries through them (Args), and the Python
// classes (python/nostall/_audio_ops.py) and the argument table of
// docs/audio.md are generated from them (`make generate`).
#include <limits>

#include "audio/ops.h"

namespace nostall::audio {
namespace {

using json = nlohmann::json;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kMaxRate = 768000;

ArgSchema OptionalInt(std::string name, int64_t lo, int64_t hi, std::string doc) {
  return Default(IntArg(std::move(name), 0, lo, hi, std::move(doc)), nullptr);
}

ArgSchema OptionalFloat(std::string name, double lo, double hi, std::string doc) {
  return Default(FloatArg(std::move(name), 0, lo, hi, std::move(doc)), nullptr);
}

ArgSchema RateArg(const char* doc) { return OptionalInt("sample_rate", 1, kMaxRate, doc); }

OpSchema Schema(std::string name, OpRole role, std::string doc, std::vector<ArgSchema> args) {
  OpSchema s;
  s.name = std::move(name);
  s.role = role;
  s.doc = std::move(doc);
  s.args = std::move(args);
  return s;
}

// The STFT's arguments, torchaudio's Spectrogram's and MelSpectrogram's.
std::vector<ArgSchema> StftArgs(bool mel) {
  std::vector<ArgSchema> v = {
      IntArg("n_fft", 400, 2, 1 << 16, "FFT size."),
      OptionalInt("win_length", 1, 1 << 16, "window length (None: n_fft)."),
      OptionalInt("hop_length", 1, 1 << 20, "hop (None: win_length // 2)."),
      IntArg("pad", 0, 0, 1 << 20, "zeros added to both sides first."),
      FloatArg("power", 2.0, 1e-6, 100,
               mel ? "2 for power, 1 for magnitude."
                   : "2 for power, 1 for magnitude (complex output is not batched)."),
      BoolArg("normalized", false, "divide by the window's L2 norm."),
      BoolArg("center", true, "pad n_fft // 2 on both sides (pad_mode)."),
      ChoiceArg("pad_mode", "reflect", {"reflect", "constant"}, "how center pads."),
      BoolArg("onesided", true, "only the n_fft // 2 + 1 non-negative frequencies."),
  };
  return v;
}

// torchaudio's MelSpectrogram's arguments, in its order.
std::vector<ArgSchema> MelArgs() {
  std::vector<ArgSchema> stft = StftArgs(true);  // n_fft, win, hop, pad, power, normalized, center, pad_mode, onesided
  std::vector<ArgSchema> v = {RateArg("the audio's rate (None: the rate the list fixes there; given, it must agree)."),
                              stft[0], stft[1], stft[2],
                              FloatArg("f_min", 0.0, 0.0, kInf, "lowest frequency."),
                              OptionalFloat("f_max", 0.0, kInf, "highest frequency (None: sample_rate // 2)."),
                              stft[3],
                              IntArg("n_mels", 128, 1, 4096, "mel bands.")};
  for (size_t i = 4; i < stft.size(); ++i) v.push_back(stft[i]);
  v.push_back(Default(ChoiceArg("norm", "", {"slaney"}, "None or \"slaney\" (area normalisation of the bands)."),
                      nullptr));
  v.push_back(ChoiceArg("mel_scale", "htk", {"htk", "slaney"}, "\"htk\" or \"slaney\"."));
  return v;
}

std::vector<OpSchema> Make() {
  return {
      Schema("Decode", OpRole::kAudioDecode,
             "How files are decoded; first in the list when given (else the defaults).",
             {BoolArg("mono", true, "mix the channels down to one (their mean); False keeps them."),
              RateArg("the rate every file has; a file at another rate is an error naming it. None: any "
                      "rate (a later Resample fixes it)."),
              OptionalInt("channels", 1, 64, "with mono=False, the channel count every file must have."),
              FloatArg("max_seconds", 3600, 0.001, 1e7,
                       "decoding more than this much of one file is an error naming it (a 6-hour file "
                       "given to a pipeline with no crop).")}),
      Schema("Resample", OpRole::kWaveform,
             "torchaudio.transforms.Resample: band-limited sinc interpolation.",
             {Required(IntArg("new_freq", 0, 1, kMaxRate,
                              "the rate out. (torchaudio's positional order is (orig_freq, new_freq); here "
                              "Resample(16000) is the new rate.)")),
              OptionalInt("orig_freq", 1, kMaxRate, "the rate in; None: each file's own (one kernel per rate)."),
              ChoiceArg("resampling_method", "sinc_interp_hann", {"sinc_interp_hann", "sinc_interp_kaiser"},
                        "the window of the sinc."),
              IntArg("lowpass_filter_width", 6, 1, 1024, "the filter's zero crossings on each side."),
              FloatArg("rolloff", 0.99, 1e-3, 1.0, "the cutoff as a fraction of the lower Nyquist rate."),
              OptionalFloat("beta", -kInf, kInf, "the Kaiser window's shape (None: torchaudio's 14.769656459379492).")}),
      Schema("SpeedPerturbation", OpRole::kWaveform,
             "torchaudio.transforms.SpeedPerturbation: one of factors per sample. A factor f resamples "
             "int(f * orig_freq) to orig_freq Hz, as torchaudio's Speed does: the audio plays f times as fast.",
             {Required(AnyArg("factors", nullptr, "Sequence[float]",
                              "the speeds to choose from, uniformly (each in [0.1, 10]).")),
              OptionalInt("orig_freq", 1, kMaxRate, "the rate reaching it; None: the rate the list fixes there.")}),
      Schema("RandomCrop", OpRole::kWaveform,
             "A random seconds-long window; shorter audio is padded with zeros at the end.",
             {Required(FloatArg("seconds", 0, 1e-4, 1e5, "the window's length (frames = round(seconds * rate))."))}),
      Schema("CenterCrop", OpRole::kWaveform,
             "The middle seconds (validation); shorter audio padded with zeros at the end.",
             {Required(FloatArg("seconds", 0, 1e-4, 1e5, "the window's length."))}),
      Schema("Gain", OpRole::kWaveform,
             "Multiplies by 10^(g/20), g drawn uniformly from gain_db (no clamping).",
             {Default(RangeArg("gain_db", 0, -120, 120, "a range (lo, hi) in dB, or x for (-x, x)."),
                      json::array({-6.0, 6.0}))}),
      Schema("TimeShift", OpRole::kWaveform,
             "Shifts by a whole number of frames drawn from [-seconds, seconds], filling with zeros.",
             {Required(FloatArg("seconds", 0, 0, 1e4, "the largest shift either way."))}),
      Schema("AddNoise", OpRole::kWaveform,
             "Mixes in a noise file at an SNR drawn from snr_db (torchaudio.functional.add_noise). The noise "
             "files are decoded to mono at the rate reaching the transform when the loader is made; each "
             "sample takes one file and an offset (the noise repeats when shorter), and the scale per channel "
             "that gives the SNR.",
             {Required(AnyArg("noise", nullptr, "str | os.PathLike | Sequence[str | os.PathLike]",
                              "an audio file, a folder of them, or a list of either.")),
              Default(RangeArg("snr_db", 0, -100, 200, "the SNR range (lo, hi) in dB."), json::array({5.0, 20.0}))}),
      Schema("Spectrogram", OpRole::kFeatures,
             "torchaudio.transforms.Spectrogram (a periodic Hann window; power 2 by default).", StftArgs(false)),
      Schema("MelSpectrogram", OpRole::kFeatures,
             "torchaudio.transforms.MelSpectrogram: a Spectrogram through a mel filter bank.", MelArgs()),
      Schema("MFCC", OpRole::kFeatures,
             "torchaudio.transforms.MFCC: log mel energies (in dB, floored 80 dB below the sample's peak, or "
             "log(x + 1e-6) with log_mels) through a DCT-II.",
             {RateArg("the audio's rate (None: the rate the list fixes there)."),
              IntArg("n_mfcc", 40, 1, 4096, "coefficients kept."),
              IntArg("dct_type", 2, 2, 2, "2 (the only one torchaudio has)."),
              Nullable(ChoiceArg("norm", "ortho", {"ortho"}, "\"ortho\" or None.")),
              BoolArg("log_mels", false, "natural log instead of dB."),
              AnyArg("melkwargs", nullptr, "dict | None",
                     "MelSpectrogram's arguments (n_fft, hop_length, n_mels, ...).")}),
      Schema("AmplitudeToDB", OpRole::kSpectrum, "torchaudio.transforms.AmplitudeToDB (ref 1, amin 1e-10).",
             {ChoiceArg("stype", "power", {"power", "magnitude"}, "\"power\" (10 log10) or \"magnitude\" (20 log10)."),
              OptionalFloat("top_db", 0, kInf, "floor each sample at its maximum less this (None: no floor).")}),
      Schema("FrequencyMasking", OpRole::kSpectrum,
             "torchaudio.transforms.FrequencyMasking (SpecAugment): one band of up to freq_mask_param bins set "
             "to 0, per sample.",
             {Required(IntArg("freq_mask_param", 0, 0, 1 << 20, "the widest band (the width is drawn in [0, param)).")),
              BoolArg("iid_masks", false, "a band of its own for each channel.")}),
      Schema("TimeMasking", OpRole::kSpectrum,
             "torchaudio.transforms.TimeMasking (SpecAugment): one span of up to time_mask_param frames set to "
             "0, per sample.",
             {Required(IntArg("time_mask_param", 0, 0, 1 << 20, "the widest span.")),
              BoolArg("iid_masks", false, "a span of its own for each channel."),
              FloatArg("p", 1.0, 0.0, 1.0, "the span is at most this fraction of the frames.")}),
  };
}

}  // namespace

const std::vector<OpSchema>& AudioSchemas() {
  static const std::vector<OpSchema> all = Make();
  return all;
}

const OpSchema* FindAudioSchema(const std::string& name) {
  for (const OpSchema& s : AudioSchemas()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::string AudioSchemasJson() { return SchemasJson(AudioSchemas()); }

}  // namespace nostall::audio
