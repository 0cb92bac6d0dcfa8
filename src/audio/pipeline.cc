// One sample of an audio field, from its file's bytes to its tensor
// (pipeline.h): the crop planned back through the resampling stages, the
// decode of just those frames, then every transform in order.
#include "audio/pipeline.h"

#include <algorithm>
#include <cmath>

#include "common/philox.h"

namespace nostall::audio {

using nlohmann::json;

namespace {

// A planar signal (channels rows) of frames [lo, lo + n) of a signal `len`
// long at `rate`; or, once a spectrogram, channels x bins x frames.
struct Signal {
  std::vector<float>* v;
  int channels = 1;
  int rate = 0;
  int64_t lo = 0, n = 0, len = 0;
  int bins = 0;
  int64_t frames = 0;
  float* row(int c) { return v->data() + static_cast<size_t>(c) * static_cast<size_t>(n); }
};

// The kernel for orig -> neu Hz, cached per thread; null with *why set
// when there is none (rates whose kernel would be too large).
const ResampleKernel* Kernel(Scratch* s, int64_t orig, int64_t neu, const Op& op, Status* why) {
  const auto key = std::make_tuple(orig, neu, op.lowpass_filter_width, op.rolloff,
                                   static_cast<int>(op.window), op.beta);
  auto it = s->kernels.find(key);
  if (it == s->kernels.end()) {
    auto k = MakeResampleKernel(orig, neu, op.lowpass_filter_width, op.rolloff, op.window, op.beta);
    if (!k.ok()) {
      *why = DataError("audio at " + std::to_string(orig) + " Hz: " + k.status().message());
      return nullptr;
    }
    if (s->kernels.size() > 64) s->kernels.clear();
    it = s->kernels.emplace(key, std::move(k).value()).first;
  }
  return &it->second;
}

// The rates a resampling op maps between for audio at `rate` (factor for
// SpeedPerturbation): (orig, new), equal when it changes nothing.
std::pair<int64_t, int64_t> Rates(const Op& op, int rate, double factor) {
  if (op.kind == OpKind::kResample) return {rate, op.new_freq};
  // torchaudio's Speed: int(factor * orig_freq) -> orig_freq.
  return {static_cast<int64_t>(factor * rate), rate};
}

// Output frames [k0, k1) of `k` on `in` into a buffer of frames [lo, hi)
// (zeros elsewhere), in `out`; `in` covers InputRange(k0, k1).
void ResampleInto(const ResampleKernel& k, Signal& in, int64_t k0, int64_t k1, int64_t lo, int64_t hi,
                  std::vector<float>* out) {
  out->assign(static_cast<size_t>(in.channels) * static_cast<size_t>(hi - lo), 0.0f);
  for (int c = 0; c < in.channels; ++c) {
    ResampleRange(k, in.row(c), in.lo, k0, k1, out->data() + static_cast<size_t>(c) * (hi - lo) + (k0 - lo));
  }
}

// A signal of `frames` x `channels` samples may be made (at most 2^28, a
// GiB of float32: a header that lies about its length, or an upsampling of
// a long file, is an error naming the size rather than an allocation).
constexpr int64_t kMaxSamples = int64_t{1} << 28;
Status CheckSize(int64_t frames, int channels, const char* what) {
  if (frames < 0 || frames > kMaxSamples / std::max(1, channels)) {
    return DataError(std::string(what) + " would hold " + std::to_string(frames) + " frames x " +
                     std::to_string(channels) + " channels, over 2^28 samples: crop it first (RandomCrop)");
  }
  return Status::OK();
}

// Draws the crop's start for audio `len` frames long into `want`.
int64_t CropStart(const Op& op, int64_t len, int64_t want, Philox& rng) {
  if (op.kind == OpKind::kCenterCrop) return len > want ? (len - want) / 2 : 0;
  return rng.Between(0, std::max<int64_t>(0, len - want));
}

Status CheckChannels(const Spec& spec, const AudioInfo& info) {
  if (!spec.mono && spec.channels != 0 && info.channels != spec.channels) {
    return DataError("audio has " + std::to_string(info.channels) + " channels; Decode(channels=" +
                     std::to_string(spec.channels) + ") keeps that many");
  }
  if (spec.sample_rate != 0 && info.sample_rate != spec.sample_rate) {
    return DataError("audio is at " + std::to_string(info.sample_rate) + " Hz; Decode(sample_rate=" +
                     std::to_string(spec.sample_rate) + ") expects every file at that rate (or add "
                     "Resample(new_freq))");
  }
  return Status::OK();
}

// Where a run's sample goes: the batch's memory (its shape fixed), or a
// vector of any length (Apply). Neither: the draws alone (Trace).
struct Sink {
  float* dst = nullptr;
  int64_t* dims = nullptr;  // a ragged spec's: the sample's own shape
  std::vector<float>* vec = nullptr;
  std::vector<int64_t>* shape = nullptr;
  bool any() const { return dst != nullptr || vec != nullptr; }
};

// A sample as the transforms see it: the signal, the buffer it is in and
// the one the next transform writes, the stream its draws come from, and
// what they drew (null without a trace). `run`: make the samples (else the
// draws alone: Trace).
struct Step {
  Signal sig;
  std::vector<float>* cur;
  std::vector<float>* other;
  Scratch* s;
  Philox* rng;
  json* drawn;
  bool run;
  // The other buffer, now holding frames [lo, hi), becomes the signal's.
  void Swap(int64_t lo, int64_t hi) {
    std::swap(cur, other);
    sig.v = cur;
    sig.lo = lo;
    sig.n = hi - lo;
  }
  void Drew(json d) {
    if (drawn != nullptr) drawn->push_back(std::move(d));
  }
};

// The stages before the crop that decides what is decoded (resamplings and
// gains), and the frames each must hold, planned back from the crop.
struct Plan {
  struct Stage {
    const ResampleKernel* k = nullptr;  // null: unchanged
    int64_t len = 0;
    int rate = 0;
  };
  size_t crop = 0;  // its index, 0: none
  std::vector<Stage> stages;
  std::vector<double> draws;  // each op's drawn value (gain, factor)
  int64_t start = 0, want = 0;
  // need [lo, hi) (zeros outside the signal), of which [vlo, vhi) lie inside it.
  std::vector<std::pair<int64_t, int64_t>> need, valid;
};

// The crop that decides what is decoded: the first, when only resampling
// and gains come before it (0: none).
size_t DecidingCrop(const std::vector<Op>& ops) {
  for (size_t i = 1; i < ops.size(); ++i) {
    const OpKind k = ops[i].kind;
    if (k == OpKind::kRandomCrop || k == OpKind::kCenterCrop) return i;
    if (k != OpKind::kResample && k != OpKind::kSpeedPerturbation && k != OpKind::kGain) break;
  }
  return 0;
}

// The lengths and rates through the ops before the crop, drawing their
// parameters in order, then the crop's window.
Status PlanStages(const std::vector<Op>& ops, Plan* p, Step& st) {
  for (size_t i = 1; i < p->crop; ++i) {
    const Op& op = ops[i];
    Plan::Stage stage = p->stages.back();
    stage.k = nullptr;
    if (op.kind == OpKind::kGain) {
      p->draws[i] = st.rng->Uniform(op.lo, op.hi);
      st.Drew({{"type", "Gain"}, {"gain_db", p->draws[i]}});
      continue;
    }
    double factor = 1.0;
    if (op.kind == OpKind::kSpeedPerturbation) {
      factor = op.factors[st.rng->Below(op.factors.size())];
      p->draws[i] = factor;
      st.Drew({{"type", "SpeedPerturbation"}, {"factor", factor}});
      if (op.orig_freq != stage.rate) {
        return DataError("audio reaches SpeedPerturbation at " + std::to_string(stage.rate) +
                         " Hz, not its orig_freq " + std::to_string(op.orig_freq));
      }
    } else if (op.orig_freq != 0 && op.orig_freq != stage.rate) {
      return DataError("audio is at " + std::to_string(stage.rate) + " Hz; Resample(orig_freq=" +
                       std::to_string(op.orig_freq) + ") expects that rate");
    }
    const auto [from, to] = Rates(op, stage.rate, factor);
    if (from != to) {
      Status why;
      stage.k = Kernel(st.s, from, to, op, &why);
      if (stage.k == nullptr) return why;
      stage.len = stage.k->OutLength(stage.len);
    }
    stage.rate = op.kind == OpKind::kResample ? static_cast<int>(op.new_freq) : stage.rate;
    p->stages.push_back(stage);
  }
  const Op& crop = ops[p->crop];
  p->want = Frames(crop.seconds, p->stages.back().rate);
  p->start = CropStart(crop, p->stages.back().len, p->want, *st.rng);
  st.Drew({{"type", crop.resolved["type"]}, {"start", p->start}, {"frames", p->want}, {"rate", p->stages.back().rate}});
  return Status::OK();
}

// The frames each stage must hold, back from the crop.
void PlanRanges(Plan* p, int64_t frames) {
  const size_t n = p->stages.size();
  p->need.assign(n, {0, 0});
  p->valid.assign(n, {0, 0});
  if (p->crop == 0) {
    p->need[0] = p->valid[0] = {0, frames};
    return;
  }
  p->need[n - 1] = {p->start, p->start + p->want};
  for (size_t st = n; st-- > 0;) {
    p->valid[st] = {std::clamp<int64_t>(p->need[st].first, 0, p->stages[st].len),
                    std::clamp<int64_t>(p->need[st].second, 0, p->stages[st].len)};
    if (st == 0) break;
    if (p->stages[st].k == nullptr) {
      p->need[st - 1] = p->need[st];  // unchanged: the same frames, zeros outside
    } else {
      int64_t lo, hi;
      p->stages[st].k->InputRange(p->valid[st].first, p->valid[st].second, &lo, &hi);
      p->need[st - 1] = {lo, hi};
    }
  }
}

// Decodes [vlo, vhi) of stage 0 into a buffer of need[0], zeros outside.
Status DecodeStart(const Spec& spec, AudioFile* file, const Plan& p, Step& st) {
  const auto [lo, hi] = p.need[0];
  const auto [vlo, vhi] = p.valid[0];
  NOSTALL_RETURN_IF_ERROR(file->Decode(vlo, vhi - vlo, spec.mono, &st.s->spec));
  st.cur->assign(static_cast<size_t>(st.sig.channels) * static_cast<size_t>(hi - lo), 0.0f);
  for (int c = 0; c < st.sig.channels; ++c) {
    std::copy(st.s->spec.begin() + c * (vhi - vlo), st.s->spec.begin() + (c + 1) * (vhi - vlo),
              st.sig.row(c) + (vlo - lo));
  }
  return Status::OK();
}

// The ops before the crop, on the ranges planned; the buffer then holds the crop.
void RunBeforeCrop(const std::vector<Op>& ops, const Plan& p, Step& st) {
  size_t stage = 0;
  for (size_t i = 1; i < p.crop; ++i) {
    if (ops[i].kind == OpKind::kGain) {
      if (st.run) {
        const float g = static_cast<float>(std::pow(10.0, p.draws[i] / 20.0));
        for (float& x : *st.cur) x *= g;
      }
      continue;
    }
    ++stage;
    const auto [lo, hi] = p.need[stage];
    if (p.stages[stage].k != nullptr && st.run) {
      ResampleInto(*p.stages[stage].k, st.sig, p.valid[stage].first, p.valid[stage].second, lo, hi, st.other);
      st.Swap(lo, hi);
    } else if (p.stages[stage].k != nullptr) {
      st.sig.lo = lo;
      st.sig.n = hi - lo;
    }
    st.sig.rate = p.stages[stage].rate;
    st.sig.len = p.stages[stage].len;
  }
  st.sig.len = p.want;  // the crop: the buffer is its frames (zeros past the end)
  st.sig.lo = 0;
}

Status RunResample(const Op& op, Step& st) {
  Signal& sig = st.sig;
  double factor = 1.0;
  if (op.kind == OpKind::kSpeedPerturbation) {
    factor = op.factors[st.rng->Below(op.factors.size())];
    st.Drew({{"type", "SpeedPerturbation"}, {"factor", factor}});
  }
  if (op.orig_freq != 0 && op.orig_freq != sig.rate) {
    return DataError("audio reaches " + op.resolved["type"].get<std::string>() + " at " + std::to_string(sig.rate) +
                     " Hz, not its orig_freq " + std::to_string(op.orig_freq));
  }
  const auto [from, to] = Rates(op, sig.rate, factor);
  if (from != to) {
    Status why;
    const ResampleKernel* k = Kernel(st.s, from, to, op, &why);
    if (k == nullptr) return why;
    const int64_t out = k->OutLength(sig.len);
    NOSTALL_RETURN_IF_ERROR(CheckSize(out + k->taps, sig.channels, "the resampled audio"));
    int64_t lo, hi;
    k->InputRange(0, out, &lo, &hi);
    if (st.run) {
      // Widen to the kernel's reach, zeros outside the signal.
      st.other->assign(static_cast<size_t>(sig.channels) * static_cast<size_t>(hi - lo), 0.0f);
      for (int c = 0; c < sig.channels; ++c) {
        std::copy(sig.row(c), sig.row(c) + sig.len, st.other->data() + static_cast<size_t>(c) * (hi - lo) + (0 - lo));
      }
      st.Swap(lo, hi);
      ResampleInto(*k, st.sig, 0, out, 0, out, st.other);
      st.Swap(0, out);
    }
    st.sig.len = out;
    st.sig.n = out;
    st.sig.lo = 0;
  }
  st.sig.rate = static_cast<int>(to);
  return Status::OK();
}

Status RunCrop(const Op& op, Step& st) {
  Signal& sig = st.sig;
  const int64_t w = Frames(op.seconds, sig.rate);
  const int64_t at = CropStart(op, sig.len, w, *st.rng);
  st.Drew({{"type", op.resolved["type"]}, {"start", at}, {"frames", w}, {"rate", sig.rate}});
  if (st.run) {
    st.other->assign(static_cast<size_t>(sig.channels) * static_cast<size_t>(w), 0.0f);
    const int64_t n = std::min(w, sig.len - at);
    for (int c = 0; c < sig.channels; ++c) {
      std::copy(sig.row(c) + at, sig.row(c) + at + n, st.other->data() + static_cast<size_t>(c) * w);
    }
    st.Swap(0, w);
  }
  st.sig.len = st.sig.n = w;
  return Status::OK();
}

Status RunGain(const Op& op, Step& st) {
  const double db = st.rng->Uniform(op.lo, op.hi);
  st.Drew({{"type", "Gain"}, {"gain_db", db}});
  if (st.run) {
    const float g = static_cast<float>(std::pow(10.0, db / 20.0));
    for (float& x : *st.cur) x *= g;
  }
  return Status::OK();
}

Status RunTimeShift(const Op& op, Step& st) {
  Signal& sig = st.sig;
  const int64_t most = Frames(op.seconds, sig.rate);
  const int64_t shift = st.rng->Between(-most, most);
  st.Drew({{"type", "TimeShift"}, {"frames", shift}});
  if (st.run) {
    st.other->assign(st.cur->size(), 0.0f);
    for (int c = 0; c < sig.channels; ++c) {
      const float* in = sig.row(c);
      float* out = st.other->data() + static_cast<size_t>(c) * sig.n;
      for (int64_t t = std::max<int64_t>(0, shift); t < std::min(sig.n, sig.n + shift); ++t) out[t] = in[t - shift];
    }
    st.Swap(0, sig.n);
  }
  return Status::OK();
}

Status RunAddNoise(const Op& op, Step& st) {
  Signal& sig = st.sig;
  const auto& set = *op.noise;
  const size_t which = st.rng->Below(set.size());
  const std::vector<float>& noise = set[which];
  const int64_t offset = static_cast<int64_t>(st.rng->Below(noise.size()));
  const double snr = st.rng->Uniform(op.lo, op.hi);
  st.Drew({{"type", "AddNoise"}, {"noise", which}, {"offset", offset}, {"snr_db", snr}});
  if (!st.run) return Status::OK();
  // torchaudio.functional.add_noise, per channel, the noise tiled from its offset.
  std::vector<float>& seg = st.s->spec;
  seg.resize(static_cast<size_t>(sig.n));
  const int64_t len = static_cast<int64_t>(noise.size());
  for (int64_t t = 0; t < sig.n; ++t) seg[static_cast<size_t>(t)] = noise[static_cast<size_t>((offset + t) % len)];
  double en = 0;
  for (float x : seg) en += static_cast<double>(x) * x;
  for (int c = 0; c < sig.channels && en > 0; ++c) {
    float* x = sig.row(c);
    double es = 0;
    for (int64_t t = 0; t < sig.n; ++t) es += static_cast<double>(x[t]) * x[t];
    if (es == 0) continue;
    const double original = 10 * (std::log10(es) - std::log10(en));
    const float scale = static_cast<float>(std::pow(10.0, (original - snr) / 20.0));
    for (int64_t t = 0; t < sig.n; ++t) x[t] += scale * seg[static_cast<size_t>(t)];
  }
  return Status::OK();
}

// MFCC from every channel's mels: torchaudio's AmplitudeToDB (top_db 80)
// floors the dB mels at the sample's maximum (over channel, mel and time)
// less 80 before the DCT; log_mels takes log(x + 1e-6) instead.
void MfccFromMels(const Op& op, Step& st, int64_t frames, float* out) {
  std::vector<std::vector<float>>& mels = st.s->mels;
  float top = -INFINITY;
  for (int c = 0; c < st.sig.channels && !op.log_mels; ++c) {
    for (float x : mels[static_cast<size_t>(c)]) top = std::max(top, x);
  }
  for (int c = 0; c < st.sig.channels; ++c) {
    std::vector<float>& mel = mels[static_cast<size_t>(c)];
    if (!op.log_mels) {
      const float floor = static_cast<float>(top - op.top_db);
      for (float& x : mel) x = std::max(x, floor);
    }
    ApplyFilterbank(op.dct, op.n_mels, op.n_mfcc, mel.data(), frames,
                    out + static_cast<size_t>(c) * op.n_mfcc * frames);
  }
}

Status RunFeatures(const Op& op, Step& st) {
  Signal& sig = st.sig;
  if (op.kind != OpKind::kSpectrogram && sig.rate != op.sample_rate) {
    return DataError("audio reaches " + op.resolved["type"].get<std::string>() + " at " + std::to_string(sig.rate) +
                     " Hz but its sample_rate is " + std::to_string(op.sample_rate) + " (add Resample(" +
                     std::to_string(op.sample_rate) + ") before it)");
  }
  const int64_t frames = op.stft.Frames(sig.len);
  if (frames < 1) return DataError("audio is too short for n_fft " + std::to_string(op.stft.n_fft));
  const int bins = op.stft.bins();
  const int out_bins = op.kind == OpKind::kSpectrogram ? bins : op.kind == OpKind::kMelSpectrogram ? op.n_mels : op.n_mfcc;
  if (st.run) {
    st.other->assign(static_cast<size_t>(sig.channels) * out_bins * static_cast<size_t>(frames), 0.0f);
    std::vector<float>& spec = st.s->spec;
    spec.resize(static_cast<size_t>(bins) * frames);
    st.s->mels.resize(static_cast<size_t>(sig.channels));
    for (int c = 0; c < sig.channels; ++c) {
      float* out = st.other->data() + static_cast<size_t>(c) * out_bins * frames;
      float* sp = op.kind == OpKind::kSpectrogram ? out : spec.data();
      NOSTALL_RETURN_IF_ERROR(st.s->stft.Run(op.stft, sig.row(c), sig.len, sp));
      if (op.kind == OpKind::kMelSpectrogram) ApplyFilterbank(op.fb, bins, op.n_mels, sp, frames, out);
      if (op.kind != OpKind::kMFCC) continue;
      std::vector<float>& mel = st.s->mels[static_cast<size_t>(c)];
      mel.resize(static_cast<size_t>(op.n_mels) * frames);
      ApplyFilterbank(op.fb, bins, op.n_mels, sp, frames, mel.data());
      if (op.log_mels) {
        for (float& x : mel) x = std::log(x + 1e-6f);
      } else {
        AmplitudeToDb(mel.data(), static_cast<int64_t>(mel.size()), 10.0, 0);
      }
    }
    if (op.kind == OpKind::kMFCC) MfccFromMels(op, st, frames, st.other->data());
    std::swap(st.cur, st.other);
    st.sig.v = st.cur;
  }
  st.sig.bins = out_bins;
  st.sig.frames = frames;
  return Status::OK();
}

Status RunMasking(const Op& op, Step& st) {
  const Signal& sig = st.sig;
  const bool time = op.kind == OpKind::kTimeMasking;
  const int64_t size = time ? sig.frames : sig.bins;
  // torchaudio's mask_along_axis: the width below mask_param (capped at p
  // of the axis), the start below size - width, the same mask for every
  // channel unless iid_masks.
  int64_t param = op.mask_param;
  if (time && op.p < 1.0) param = std::min<int64_t>(param, static_cast<int64_t>(size * op.p));
  json masks = json::array();
  for (int c = 0; c < (op.iid ? sig.channels : 1); ++c) {
    if (param < 1) break;
    const double value = st.rng->Uniform() * param;
    const double min_value = st.rng->Uniform() * (static_cast<double>(size) - value);
    const int64_t from = static_cast<int64_t>(min_value);
    const int64_t to = from + static_cast<int64_t>(value);
    if (st.drawn != nullptr) masks.push_back({from, to});
    if (!st.run) continue;
    for (int cc = op.iid ? c : 0; cc < (op.iid ? c + 1 : sig.channels); ++cc) {
      float* x = st.cur->data() + static_cast<size_t>(cc) * sig.bins * sig.frames;
      if (time) {
        for (int64_t f = 0; f < sig.bins; ++f) {
          std::fill(x + f * sig.frames + from, x + f * sig.frames + std::min(to, sig.frames), 0.0f);
        }
      } else {
        std::fill(x + from * sig.frames, x + std::min<int64_t>(to, sig.bins) * sig.frames, 0.0f);
      }
    }
  }
  st.Drew({{"type", op.resolved["type"]}, {"masks", masks}});
  return Status::OK();
}

Status RunOp(const Op& op, Step& st) {
  switch (op.kind) {
    case OpKind::kDecode: return Status::OK();
    case OpKind::kResample:
    case OpKind::kSpeedPerturbation: return RunResample(op, st);
    case OpKind::kRandomCrop:
    case OpKind::kCenterCrop: return RunCrop(op, st);
    case OpKind::kGain: return RunGain(op, st);
    case OpKind::kTimeShift: return RunTimeShift(op, st);
    case OpKind::kAddNoise: return RunAddNoise(op, st);
    case OpKind::kSpectrogram:
    case OpKind::kMelSpectrogram:
    case OpKind::kMFCC: return RunFeatures(op, st);
    case OpKind::kAmplitudeToDB:
      if (st.run) AmplitudeToDb(st.cur->data(), static_cast<int64_t>(st.cur->size()), op.multiplier, op.top_db);
      return Status::OK();
    case OpKind::kFrequencyMasking:
    case OpKind::kTimeMasking: return RunMasking(op, st);
  }
  return Status::OK();
}

// The sample into the sink: the batch's place (its shape checked) or a vector.
Status WriteOut(const Spec& spec, const Sink& sink, Step& st) {
  Signal& sig = st.sig;
  const int64_t got_frames = sig.bins > 0 ? sig.frames : sig.len;
  float* dst = sink.dst;
  if (sink.vec != nullptr) {
    *sink.shape = sig.bins > 0 ? std::vector<int64_t>{sig.channels, sig.bins, sig.frames}
                               : std::vector<int64_t>{sig.channels, sig.len};
    sink.vec->resize(static_cast<size_t>(sig.channels) * std::max(1, sig.bins) * static_cast<size_t>(got_frames));
    dst = sink.vec->data();
  } else if ((spec.ragged ? got_frames > spec.out_frames || got_frames < 1 : got_frames != spec.out_frames) ||
             sig.channels != spec.out_channels) {
    return DataError("audio gives a sample of " + std::to_string(sig.channels) + " channels x " +
                     std::to_string(got_frames) + " frames but the batch holds " + std::to_string(spec.out_channels) +
                     " x " + (spec.ragged ? "at most " : "") + std::to_string(spec.out_frames) +
                     (spec.ragged ? " (Decode's max_seconds)" : ""));
  }
  if (sink.dims != nullptr) {
    const int64_t shape[3] = {sig.channels, sig.bins > 0 ? sig.bins : got_frames, sig.bins > 0 ? got_frames : 1};
    std::copy(shape, shape + 3, sink.dims);
  }
  const size_t n = static_cast<size_t>(sig.channels) * std::max(1, sig.bins) * static_cast<size_t>(got_frames);
  if (sig.bins > 0) {
    std::copy(st.cur->begin(), st.cur->begin() + static_cast<int64_t>(n), dst);
  } else {
    for (int c = 0; c < sig.channels; ++c) std::copy(sig.row(c), sig.row(c) + sig.len, dst + static_cast<size_t>(c) * sig.len);
  }
  return Status::OK();
}

// The whole run, with or without the samples.
Status Run(const Spec& spec, AudioFile* file, const AudioInfo& info, const SampleKey& key, const Sink& sink,
           Scratch* s, json* trace) {
  NOSTALL_RETURN_IF_ERROR(CheckChannels(spec, info));
  Philox rng = key.Stream(SampleStream::kAudio);
  json drawn = json::array();
  const std::vector<Op>& ops = spec.ops;
  Step st{Signal{&s->a, spec.mono ? 1 : info.channels, info.sample_rate, 0, 0, info.frames},
          &s->a, &s->b, s, &rng, trace != nullptr ? &drawn : nullptr, sink.any()};
  Plan plan;
  plan.crop = DecidingCrop(ops);
  plan.stages = {{nullptr, info.frames, info.sample_rate}};
  plan.draws.assign(ops.size(), 0.0);
  if (plan.crop > 0) NOSTALL_RETURN_IF_ERROR(PlanStages(ops, &plan, st));
  PlanRanges(&plan, info.frames);
  const double seconds = static_cast<double>(plan.valid[0].second - plan.valid[0].first) / info.sample_rate;
  if (seconds > spec.max_seconds) {
    return DataError("would decode " + std::to_string(static_cast<int64_t>(seconds)) +
                     " s of audio, over max_seconds (" + std::to_string(static_cast<int64_t>(spec.max_seconds)) +
                     "): crop it (RandomCrop) or raise Decode(max_seconds=...)");
  }
  NOSTALL_RETURN_IF_ERROR(CheckSize(plan.need[0].second - plan.need[0].first, info.channels, "the decoded audio"));
  if (trace != nullptr) {
    (*trace)["decoded"] = {plan.valid[0].first, plan.valid[0].second};
    (*trace)["source"] = {{"frames", info.frames}, {"sample_rate", info.sample_rate}, {"channels", info.channels}};
  }
  st.sig.lo = plan.need[0].first;
  st.sig.n = plan.need[0].second - plan.need[0].first;
  if (st.run) NOSTALL_RETURN_IF_ERROR(DecodeStart(spec, file, plan, st));
  if (plan.crop > 0) RunBeforeCrop(ops, plan, st);
  for (size_t i = plan.crop > 0 ? plan.crop + 1 : 1; i < ops.size(); ++i) {
    NOSTALL_RETURN_IF_ERROR(RunOp(ops[i], st));
  }
  if (trace != nullptr) (*trace)["ops"] = drawn;
  if (!st.run) return Status::OK();
  return WriteOut(spec, sink, st);
}

}  // namespace

Status Prepare(const Spec& spec, const uint8_t* data, size_t size, const SampleKey& key, float* dst,
               Scratch* scratch, json* trace, int64_t* dims, const ItemFile* item) {
  AudioFile file;
  NOSTALL_RETURN_IF_ERROR(file.Open(data, size, item));
  Sink sink;
  sink.dst = dst;
  sink.dims = dims;
  return Run(spec, &file, file.info(), key, sink, scratch, trace);
}

Status Apply(const Spec& spec, const uint8_t* data, size_t size, const SampleKey& key, std::vector<float>* out,
             std::vector<int64_t>* shape, json* trace) {
  AudioFile file;
  NOSTALL_RETURN_IF_ERROR(file.Open(data, size));
  Scratch scratch;
  Sink sink;
  sink.vec = out;
  sink.shape = shape;
  return Run(spec, &file, file.info(), key, sink, &scratch, trace);
}

Status Trace(const Spec& spec, const AudioInfo& info, const SampleKey& key, json* out) {
  Scratch scratch;
  return Run(spec, nullptr, info, key, Sink(), &scratch, out);
}

}  // namespace nostall::audio
