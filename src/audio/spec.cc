// An audio field's transform list read, checked and resolved (pipeline.h):
// each transform's arguments with torchaudio's names and defaults, what the
// audio is at each point (rate, channels, length, bins), and the sample's
// shape a batch holds.
#include "audio/pipeline.h"

#include <dirent.h>

#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <set>

#include "audio/ops.h"
#include "common/json_fields.h"

namespace nostall::audio {
namespace {

using nlohmann::json;

}  // namespace

Args::Args(const json& j, std::string where, const OpSchema& schema)
    : j_(j), where_(std::move(where)), schema_(schema) {
  resolved_["type"] = j.at("type");
}

const ArgSchema& Args::Declared(const char* key) const {
  const ArgSchema* a = schema_.Find(key);
  // A read the schema does not declare is a bug of this file, caught by
  // every test that resolves the transform.
  if (a == nullptr) std::abort();
  return *a;
}

std::string Args::Num(double x) {
  json j = x;
  return j.dump();
}

const json* Args::Get(const char* key) {
  seen_.insert(key);
  auto it = j_.find(key);
  return it == j_.end() || it->is_null() ? nullptr : &*it;
}

Status Args::Double(const char* key, double* out) {
  const ArgSchema& s = Declared(key);
  const json* v = Get(key);
  if (v == nullptr && s.required) return Error(std::string(key) + " is required");
  if (v != nullptr && !v->is_number()) return Error(std::string(key) + " must be a number, not " + Shown(*v));
  *out = v != nullptr ? v->get<double>() : s.def.get<double>();
  if (!(*out >= s.lo && *out <= s.hi)) {
    return Error(std::string(key) + " must be in [" + Num(s.lo) + ", " + Num(s.hi) + "], not " + Num(*out));
  }
  resolved_[key] = *out;
  return Status::OK();
}

Status Args::OptionalDouble(const char* key, double* out, bool* given) {
  const ArgSchema& s = Declared(key);
  const json* v = Get(key);
  *given = v != nullptr;
  if (v == nullptr) {
    *out = 0;
    resolved_[key] = nullptr;
    return Status::OK();
  }
  if (!v->is_number() || !(v->get<double>() >= s.lo && v->get<double>() <= s.hi)) {
    std::string range = std::isfinite(s.lo) || std::isfinite(s.hi)
                            ? " in [" + Num(s.lo) + ", " + Num(s.hi) + "]" : "";
    if (s.lo == 0 && !std::isfinite(s.hi)) range = " (non-negative)";
    return Error(std::string(key) + " must be a number" + range + " or None, not " + Shown(*v));
  }
  *out = v->get<double>();
  resolved_[key] = *out;
  return Status::OK();
}

Status Args::Int(const char* key, int64_t* out) {
  const ArgSchema& s = Declared(key);
  const json* v = Get(key);
  if (v == nullptr && s.required) return Error(std::string(key) + " is required");
  if (v == nullptr && s.def.is_null()) {
    *out = 0;
    resolved_[key] = nullptr;
    return Status::OK();
  }
  if (v != nullptr && !(v->is_number_integer() ||
                        (v->is_number_float() && v->get<double>() == std::floor(v->get<double>())))) {
    return Error(std::string(key) + " must be an integer, not " + Shown(*v));
  }
  const double x = v != nullptr ? v->get<double>() : s.def.get<double>();
  if (x < s.lo || x > s.hi) {
    return Error(std::string(key) + " must be in [" + std::to_string(static_cast<int64_t>(s.lo)) + ", " +
                 std::to_string(static_cast<int64_t>(s.hi)) + "], not " +
                 (std::abs(x) < 1e15 ? std::to_string(static_cast<int64_t>(x)) : Num(x)));
  }
  *out = static_cast<int64_t>(x);
  resolved_[key] = *out;
  return Status::OK();
}

Status Args::Bool(const char* key, bool* out) {
  const ArgSchema& s = Declared(key);
  const json* v = Get(key);
  if (v != nullptr && !v->is_boolean()) return Error(std::string(key) + " must be true or false, not " + Shown(*v));
  *out = v != nullptr ? v->get<bool>() : s.def.get<bool>();
  resolved_[key] = *out;
  return Status::OK();
}

Status Args::Choice(const char* key, std::string* out) {
  const ArgSchema& s = Declared(key);
  const bool none_allowed = s.nullable || s.def.is_null();
  // null is None, a value of its own where the schema allows it (MFCC's norm).
  const bool none = j_.contains(key) && j_[key].is_null();
  const json* v = Get(key);
  if ((none && none_allowed) || (v == nullptr && s.def.is_null())) {
    out->clear();
    resolved_[key] = nullptr;
    return Status::OK();
  }
  if (v != nullptr && !v->is_string()) return Error(std::string(key) + " must be a string, not " + Shown(*v));
  *out = v != nullptr ? v->get<std::string>() : s.def.get<std::string>();
  if (std::find(s.choices.begin(), s.choices.end(), *out) == s.choices.end()) {
    std::string names = none_allowed ? "None" : "";
    for (const std::string& c : s.choices) names += (names.empty() ? "" : ", ") + ("\"" + c + "\"");
    return Error(std::string(key) + " must be one of " + names + ", not " + Shown(*v));
  }
  resolved_[key] = *out;
  return Status::OK();
}

Status Args::Range(const char* key, double* lo, double* hi) {
  const ArgSchema& s = Declared(key);
  const json* v = Get(key);
  const json& x = v != nullptr ? *v : s.def;
  if (x.is_null()) return Error(std::string(key) + " is required");
  if (x.is_number()) {
    *lo = -std::abs(x.get<double>());
    *hi = std::abs(x.get<double>());
  } else if (x.is_array() && x.size() == 2 && x[0].is_number() && x[1].is_number()) {
    *lo = x[0].get<double>();
    *hi = x[1].get<double>();
  } else {
    return Error(std::string(key) + " must be a number or a pair [lo, hi], not " + Shown(x));
  }
  if (!(*lo <= *hi) || *lo < s.lo || *hi > s.hi) {
    return Error(std::string(key) + " must be lo <= hi within [" + Num(s.lo) + ", " + Num(s.hi) + "]");
  }
  resolved_[key] = {*lo, *hi};
  return Status::OK();
}

void Args::Record(const char* key, json v) {
  seen_.insert(key);
  resolved_[key] = std::move(v);
}

Status Args::Done() const {
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    if (it.key() != "type" && schema_.Find(it.key()) == nullptr) {
      std::string known;
      for (const ArgSchema& a : schema_.args) known += (known.empty() ? "" : ", ") + a.name;
      return Error("unknown argument '" + it.key().substr(0, 60) + "' (it takes " + known + ")");
    }
  }
  return Status::OK();
}

namespace {

// The STFT arguments torchaudio's Spectrogram and MelSpectrogram share.
Status StftArgs(Args& a, StftParams* p) {
  int64_t n_fft, win, hop, pad;
  NOSTALL_RETURN_IF_ERROR(a.Int("n_fft", &n_fft));
  NOSTALL_RETURN_IF_ERROR(a.Int("win_length", &win));
  if (win > n_fft) return a.Error("win_length must be in [1, n_fft], not " + std::to_string(win));
  NOSTALL_RETURN_IF_ERROR(a.Int("hop_length", &hop));
  NOSTALL_RETURN_IF_ERROR(a.Int("pad", &pad));
  p->n_fft = static_cast<int>(n_fft);
  p->win_length = static_cast<int>(win);
  p->hop_length = static_cast<int>(hop);
  p->pad = static_cast<int>(pad);
  if (p->hop() < 1) return a.Error("hop_length must be positive (win_length // 2 is 0)");
  const json* pw = a.Get("power");
  if (pw != nullptr && !pw->is_number()) {
    return a.Error("power must be a positive number (a complex spectrogram, power=None, is not "
                   "batched)");
  }
  NOSTALL_RETURN_IF_ERROR(a.Double("power", &p->power));
  NOSTALL_RETURN_IF_ERROR(a.Bool("normalized", &p->normalized));
  NOSTALL_RETURN_IF_ERROR(a.Bool("center", &p->center));
  std::string mode;
  NOSTALL_RETURN_IF_ERROR(a.Choice("pad_mode", &mode));
  p->reflect = mode == "reflect";
  NOSTALL_RETURN_IF_ERROR(a.Bool("onesided", &p->onesided));
  return Status::OK();
}

// MelSpectrogram's own arguments beyond the STFT's, and its bank.
Status MelArgs(Args& a, int rate, Op* op) {
  int64_t sr, n_mels;
  NOSTALL_RETURN_IF_ERROR(a.Int("sample_rate", &sr));
  if (sr == 0) sr = rate;
  if (sr == 0) {
    return a.Error("sample_rate is unknown here: give it, or put Resample(new_freq) before (or "
                   "Decode(sample_rate=...))");
  }
  if (rate != 0 && sr != rate) {
    return a.Error("sample_rate=" + std::to_string(sr) + " but the audio reaching it is at " +
                   std::to_string(rate) + " Hz");
  }
  a.Record("sample_rate", sr);
  double f_min, f_max;
  bool f_max_given;
  NOSTALL_RETURN_IF_ERROR(a.Double("f_min", &f_min));
  if (f_min > sr / 2.0) return a.Error("f_min must be in [0, sample_rate / 2]");
  NOSTALL_RETURN_IF_ERROR(a.OptionalDouble("f_max", &f_max, &f_max_given));
  if (!f_max_given) f_max = static_cast<double>(sr / 2);
  if (!(f_max > f_min && f_max <= sr / 2.0 + 1e-9)) return a.Error("f_max must be in (f_min, sample_rate / 2]");
  NOSTALL_RETURN_IF_ERROR(a.Int("n_mels", &n_mels));
  std::string norm, scale;
  NOSTALL_RETURN_IF_ERROR(a.Choice("norm", &norm));
  NOSTALL_RETURN_IF_ERROR(a.Choice("mel_scale", &scale));
  op->sample_rate = static_cast<int>(sr);
  op->n_mels = static_cast<int>(n_mels);
  if (!op->stft.onesided) return a.Error("onesided must be true for a mel spectrogram");
  auto fb = MelFilterbank(op->stft.bins(), f_min, f_max, op->n_mels, op->sample_rate, norm, scale);
  if (!fb.ok()) return a.Error(fb.status().message());
  op->fb = std::move(fb).value();
  return Status::OK();
}

// Every file of `paths` (files, or folders whose audio files are taken),
// decoded to mono at `rate`.
Result<std::shared_ptr<const std::vector<std::vector<float>>>> LoadNoise(Args& a, const json& paths, int rate) {
  std::vector<std::string> files;
  std::vector<std::string> given;
  if (paths.is_string()) given.push_back(paths.get<std::string>());
  if (paths.is_array()) {
    for (const json& p : paths) {
      if (!p.is_string()) return a.Error("noise must be a path or a list of paths");
      given.push_back(p.get<std::string>());
    }
  }
  if (given.empty()) return a.Error("noise must be a path or a list of paths (files or folders)");
  for (const std::string& g : given) {
    DIR* d = ::opendir(g.c_str());
    if (d == nullptr) {
      files.push_back(g);
      continue;
    }
    std::vector<std::string> in;
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      const size_t dot = n.rfind('.');
      if (dot == std::string::npos) continue;
      std::string ext = n.substr(dot + 1);
      for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (ext == "wav" || ext == "flac" || ext == "mp3" || ext == "ogg" || ext == "opus") in.push_back(g + "/" + n);
    }
    ::closedir(d);
    std::sort(in.begin(), in.end());
    if (in.empty()) return a.Error("the noise folder " + g + " holds no audio file");
    files.insert(files.end(), in.begin(), in.end());
  }
  auto out = std::make_shared<std::vector<std::vector<float>>>();
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) return a.Error("cannot read the noise file " + f);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    AudioInfo info;
    std::vector<float> x;
    Status st = ProbeAudio(bytes.data(), bytes.size(), &info);
    if (st.ok() && info.frames > static_cast<int64_t>(info.sample_rate) * 3600) {
      st = DataError("over an hour long");
    }
    if (st.ok()) st = DecodeFrames(bytes.data(), bytes.size(), 0, info.frames, true, &x, &info);
    if (!st.ok()) return a.Error("noise file " + f + ": " + st.message());
    if (info.sample_rate != rate) {
      auto k = MakeResampleKernel(info.sample_rate, rate, 6, 0.99, ResampleWindow::kHann, 0);
      if (!k.ok()) return a.Error("noise file " + f + ": " + k.status().message());
      const int64_t n = k.value().OutLength(info.frames);
      int64_t lo, hi;
      k.value().InputRange(0, n, &lo, &hi);
      std::vector<float> padded(static_cast<size_t>(hi - lo), 0.0f);
      std::copy(x.begin(), x.end(), padded.begin() + (0 - lo));
      x.assign(static_cast<size_t>(n), 0.0f);
      ResampleRange(k.value(), padded.data(), lo, 0, n, x.data());
    }
    if (x.empty()) return a.Error("noise file " + f + " is empty");
    out->push_back(std::move(x));
  }
  return std::shared_ptr<const std::vector<std::vector<float>>>(std::move(out));
}

}  // namespace

std::vector<int64_t> Spec::Shape() const {
  if (out_bins > 0) return {out_channels, out_bins, out_frames};
  return {out_channels, out_frames};
}

size_t Spec::SampleBytes() const {
  return static_cast<size_t>(out_channels) * static_cast<size_t>(std::max(1, out_bins)) *
         static_cast<size_t>(out_frames) * sizeof(float);
}

json Spec::ToJson() const {
  json out = json::array();
  for (const Op& op : ops) out.push_back(op.resolved);
  return out;
}

namespace {

Status ResolveDecode(Args& a, Chain& c, Spec* spec, Op*) {
  int64_t sr, ch;
  NOSTALL_RETURN_IF_ERROR(a.Bool("mono", &spec->mono));
  NOSTALL_RETURN_IF_ERROR(a.Int("sample_rate", &sr));
  NOSTALL_RETURN_IF_ERROR(a.Int("channels", &ch));
  NOSTALL_RETURN_IF_ERROR(a.Double("max_seconds", &spec->max_seconds));
  if (spec->mono && ch > 1) return a.Error("mono=true gives one channel; channels=" + std::to_string(ch) + " needs mono=false");
  spec->sample_rate = static_cast<int>(sr);
  spec->channels = spec->mono ? 1 : static_cast<int>(ch);
  c.rate = spec->sample_rate;
  c.channels = spec->channels;
  c.seconds = spec->max_seconds;
  return Status::OK();
}

// The most frames a waveform of the chain may have (its rate known): its
// most seconds at the rate, and the resamplers' rounding.
int64_t WaveBound(const Chain& c) {
  return static_cast<int64_t>(std::ceil(c.seconds * c.rate)) + 2;
}

// orig_freq, checked against the rate reaching the op when both are known.
Status OrigFreq(Args& a, const Chain& c, Op* op) {
  NOSTALL_RETURN_IF_ERROR(a.Int("orig_freq", &op->orig_freq));
  if (op->orig_freq != 0 && c.rate != 0 && op->orig_freq != c.rate) {
    return a.Error("orig_freq=" + std::to_string(op->orig_freq) + " but the audio reaching it is at " +
                   std::to_string(c.rate) + " Hz");
  }
  return Status::OK();
}

Status ResolveResample(Args& a, Chain& c, Spec*, Op* op) {
  NOSTALL_RETURN_IF_ERROR(OrigFreq(a, c, op));
  NOSTALL_RETURN_IF_ERROR(a.Int("new_freq", &op->new_freq));
  std::string method;
  NOSTALL_RETURN_IF_ERROR(a.Choice("resampling_method", &method));
  op->window = method == "sinc_interp_hann" ? ResampleWindow::kHann : ResampleWindow::kKaiser;
  int64_t w;
  NOSTALL_RETURN_IF_ERROR(a.Int("lowpass_filter_width", &w));
  op->lowpass_filter_width = static_cast<int>(w);
  NOSTALL_RETURN_IF_ERROR(a.Double("rolloff", &op->rolloff));
  bool beta_given;
  double beta;
  NOSTALL_RETURN_IF_ERROR(a.OptionalDouble("beta", &beta, &beta_given));
  if (beta_given) op->beta = beta;
  c.rate = static_cast<int>(op->new_freq);
  if (c.frames > 0 && op->orig_freq != 0) {
    auto k = MakeResampleKernel(op->orig_freq, op->new_freq, op->lowpass_filter_width, op->rolloff, op->window,
                                op->beta);
    if (!k.ok()) return a.Error(k.status().message());
    c.frames = k.value().OutLength(c.frames);
  } else {
    c.frames = 0;  // the rate comes from each file: checked there
  }
  return Status::OK();
}

Status ResolveSpeedPerturbation(Args& a, Chain& c, Spec*, Op* op) {
  NOSTALL_RETURN_IF_ERROR(OrigFreq(a, c, op));
  if (op->orig_freq == 0) op->orig_freq = c.rate;
  if (op->orig_freq == 0) {
    return a.Error("orig_freq is unknown here: give it, or put Resample(new_freq) before (or "
                   "Decode(sample_rate=...))");
  }
  a.Record("orig_freq", op->orig_freq);
  const json* f = a.Get("factors");
  if (f == nullptr || !f->is_array() || f->empty()) return a.Error("factors must be a non-empty list of speeds");
  for (const json& x : *f) {
    if (!x.is_number() || !(x.get<double>() >= 0.1 && x.get<double>() <= 10)) {
      return a.Error("each factor must be a number in [0.1, 10], not " + Shown(x));
    }
    op->factors.push_back(x.get<double>());
    auto k = MakeResampleKernel(static_cast<int64_t>(x.get<double>() * op->orig_freq), op->orig_freq, 6, 0.99,
                                ResampleWindow::kHann, 0);
    if (!k.ok()) return a.Error(k.status().message());
  }
  a.Record("factors", op->factors);
  if (op->factors.size() > 1 || op->factors[0] != 1.0) c.frames = 0;
  // (A speed below 1 lengthens the audio: int(factor * rate) -> rate.)
  c.seconds /= *std::min_element(op->factors.begin(), op->factors.end());
  return Status::OK();
}

Status NeedRate(Args& a, const Chain& c) {
  if (c.rate != 0) return Status::OK();
  return a.Error("needs the sample rate: put Resample(new_freq) or Decode(sample_rate=...) before it");
}

Status ResolveCrop(Args& a, Chain& c, Spec*, Op* op) {
  NOSTALL_RETURN_IF_ERROR(a.Double("seconds", &op->seconds));
  if (c.rate == 0) {
    return a.Error("needs the sample rate to count its frames: put Resample(new_freq) before it, or "
                   "Decode(sample_rate=...) first when every file has one rate");
  }
  c.frames = Frames(op->seconds, c.rate);
  if (c.frames < 1) return a.Error("is shorter than one frame");
  if (c.frames > (int64_t{1} << 28) / std::max(1, c.channels)) return a.Error("is over 2^28 samples long");
  return Status::OK();
}

Status ResolveGain(Args& a, Chain&, Spec*, Op* op) { return a.Range("gain_db", &op->lo, &op->hi); }

Status ResolveTimeShift(Args& a, Chain& c, Spec*, Op* op) {
  NOSTALL_RETURN_IF_ERROR(a.Double("seconds", &op->seconds));
  return NeedRate(a, c);
}

Status ResolveAddNoise(Args& a, Chain& c, Spec*, Op* op) {
  NOSTALL_RETURN_IF_ERROR(a.Range("snr_db", &op->lo, &op->hi));
  NOSTALL_RETURN_IF_ERROR(NeedRate(a, c));
  const json* n = a.Get("noise");
  if (n == nullptr) return a.Error("noise (a file, a folder, or a list of them) is required");
  a.Record("noise", *n);
  NOSTALL_ASSIGN_OR_RETURN(op->noise, LoadNoise(a, *n, c.rate));
  return Status::OK();
}

// The frames of a spectrogram of the chain's audio: of its length, or, where
// that varies, of its bound (the rate known).
void SpectrogramFrames(const StftParams& stft, Chain* c) {
  if (c->frames > 0) {
    c->frames = stft.Frames(c->frames);
  } else {
    c->bound = c->rate > 0 ? stft.Frames(WaveBound(*c)) : 0;
  }
}

Status ResolveSpectrogram(Args& a, Chain& c, Spec*, Op* op) {
  NOSTALL_RETURN_IF_ERROR(StftArgs(a, &op->stft));
  c.bins = op->stft.bins();
  if (op->kind == OpKind::kMelSpectrogram) {
    NOSTALL_RETURN_IF_ERROR(MelArgs(a, c.rate, op));
    c.bins = op->n_mels;
  }
  SpectrogramFrames(op->stft, &c);
  return Status::OK();
}

Status ResolveMFCC(Args& a, Chain& c, Spec*, Op* op) {
  int64_t sr, n_mfcc, dct_type;
  NOSTALL_RETURN_IF_ERROR(a.Int("sample_rate", &sr));
  NOSTALL_RETURN_IF_ERROR(a.Int("n_mfcc", &n_mfcc));
  NOSTALL_RETURN_IF_ERROR(a.Int("dct_type", &dct_type));
  std::string norm;
  NOSTALL_RETURN_IF_ERROR(a.Choice("norm", &norm));
  NOSTALL_RETURN_IF_ERROR(a.Bool("log_mels", &op->log_mels));
  const json* mk = a.Get("melkwargs");
  json mel = mk != nullptr ? *mk : json::object();
  if (!mel.is_object()) return a.Error("melkwargs must be a dict of MelSpectrogram's arguments");
  if (mel.contains("sample_rate")) return a.Error("give sample_rate to MFCC, not in melkwargs");
  mel["type"] = "MelSpectrogram";
  if (sr != 0) mel["sample_rate"] = sr;
  Args ma(mel, a.where() + " melkwargs", *FindAudioSchema("MelSpectrogram"));
  NOSTALL_RETURN_IF_ERROR(StftArgs(ma, &op->stft));
  NOSTALL_RETURN_IF_ERROR(MelArgs(ma, c.rate, op));
  NOSTALL_RETURN_IF_ERROR(ma.Done());
  if (n_mfcc > op->n_mels) {
    return a.Error("n_mfcc (" + std::to_string(n_mfcc) + ") cannot exceed n_mels (" + std::to_string(op->n_mels) + ")");
  }
  json mres = ma.resolved();
  a.Record("sample_rate", mres["sample_rate"]);
  mres.erase("type");
  mres.erase("sample_rate");
  a.Record("melkwargs", mres);
  op->n_mfcc = static_cast<int>(n_mfcc);
  op->dct = DctMatrix(op->n_mfcc, op->n_mels, norm);
  op->top_db = 80.0;
  c.bins = op->n_mfcc;
  SpectrogramFrames(op->stft, &c);
  return Status::OK();
}

Status ResolveAmplitudeToDB(Args& a, Chain&, Spec*, Op* op) {
  std::string stype;
  NOSTALL_RETURN_IF_ERROR(a.Choice("stype", &stype));
  op->multiplier = stype == "power" ? 10.0 : 20.0;
  bool given;
  NOSTALL_RETURN_IF_ERROR(a.OptionalDouble("top_db", &op->top_db, &given));
  return Status::OK();
}

Status ResolveMasking(Args& a, Chain& c, Spec*, Op* op) {
  const bool time = op->kind == OpKind::kTimeMasking;
  int64_t m;
  NOSTALL_RETURN_IF_ERROR(a.Int(time ? "time_mask_param" : "freq_mask_param", &m));
  op->mask_param = static_cast<int>(m);
  NOSTALL_RETURN_IF_ERROR(a.Bool("iid_masks", &op->iid));
  if (time) NOSTALL_RETURN_IF_ERROR(a.Double("p", &op->p));
  if (c.bins == 0) return a.Error("masks a spectrogram: put it after Spectrogram, MelSpectrogram or MFCC");
  return Status::OK();
}

// One entry of the list resolved into `spec`, following `chain`.
Status ResolveEntry(const json& j, size_t i, Chain& chain, Spec* spec) {
  const std::string at = "audio[" + std::to_string(i) + "]";
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return InvalidArgument(at + " must be an object with a \"type\", not " + Shown(j));
  }
  const std::string type = j["type"].get<std::string>();
  const OpDef* def = FindOpDef(type);
  if (def == nullptr) {
    std::string names;
    for (const OpDef& d : OpDefs()) names += (names.empty() ? "" : ", ") + std::string(d.name);
    return InvalidArgument(at + ": unknown audio transform '" + type.substr(0, 60) + "' (known: " + names + ")");
  }
  const OpSchema& schema = *FindAudioSchema(type);
  Args a(j, at + " " + type, schema);
  Op op;
  op.kind = def->kind;
  if (op.kind == OpKind::kDecode && i != 0) return a.Error("Decode must come first");
  if (chain.bins > 0 && (schema.role == OpRole::kWaveform || schema.role == OpRole::kFeatures)) {
    return a.Error("works on a waveform, and comes after the spectrogram; put it before");
  }
  NOSTALL_RETURN_IF_ERROR(def->resolve(a, chain, spec, &op));
  NOSTALL_RETURN_IF_ERROR(a.Done());
  op.resolved = a.resolved();
  spec->ops.push_back(std::move(op));
  return Status::OK();
}

}  // namespace

const std::vector<OpDef>& OpDefs() {
  static const std::vector<OpDef> all = {
      {OpKind::kDecode, "Decode", ResolveDecode},
      {OpKind::kResample, "Resample", ResolveResample},
      {OpKind::kSpeedPerturbation, "SpeedPerturbation", ResolveSpeedPerturbation},
      {OpKind::kRandomCrop, "RandomCrop", ResolveCrop},
      {OpKind::kCenterCrop, "CenterCrop", ResolveCrop},
      {OpKind::kGain, "Gain", ResolveGain},
      {OpKind::kTimeShift, "TimeShift", ResolveTimeShift},
      {OpKind::kAddNoise, "AddNoise", ResolveAddNoise},
      {OpKind::kSpectrogram, "Spectrogram", ResolveSpectrogram},
      {OpKind::kMelSpectrogram, "MelSpectrogram", ResolveSpectrogram},
      {OpKind::kMFCC, "MFCC", ResolveMFCC},
      {OpKind::kAmplitudeToDB, "AmplitudeToDB", ResolveAmplitudeToDB},
      {OpKind::kFrequencyMasking, "FrequencyMasking", ResolveMasking},
      {OpKind::kTimeMasking, "TimeMasking", ResolveMasking},
  };
  return all;
}

const OpDef* FindOpDef(const std::string& name) {
  for (const OpDef& d : OpDefs()) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

Result<std::shared_ptr<const Spec>> SpecFromJson(const json& list, bool fixed) {
  if (!list.is_array()) return InvalidArgument("audio must be a list of audio transforms, not " + Shown(list));
  auto spec = std::make_shared<Spec>();
  Chain chain;
  // Decode first, with its defaults when the list does not give it.
  const bool decode_given = !list.empty() && list[0].is_object() && list[0].value("type", json()) == "Decode";
  if (!decode_given) NOSTALL_RETURN_IF_ERROR(ResolveEntry(json{{"type", "Decode"}}, 0, chain, spec.get()));
  for (size_t i = 0; i < list.size(); ++i) {
    NOSTALL_RETURN_IF_ERROR(ResolveEntry(list[i], i, chain, spec.get()));
  }
  if (!spec->mono && spec->channels == 0 && fixed) {
    return InvalidArgument("audio Decode(mono=false) needs channels=N (the count every file must have) to "
                           "batch its samples");
  }
  spec->out_channels = chain.channels == 0 ? spec->channels : chain.channels;
  spec->out_bins = chain.bins;
  spec->out_frames = chain.frames;
  if (chain.frames == 0 && fixed) {
    // Samples of many lengths, each batch padded to its longest: bounded by
    // Decode's max_seconds at the output's rate.
    const int64_t bound = chain.bins > 0 ? chain.bound : chain.rate > 0 ? WaveBound(chain) : 0;
    if (bound <= 0) {
      return InvalidArgument("the audio transforms give samples of many lengths, and the batch's memory "
                             "is sized from the longest: the rate must be known at the end (Resample or "
                             "Decode(sample_rate=...)); or give every sample one length with "
                             "RandomCrop(seconds=...) or CenterCrop(seconds=...)");
    }
    const uint64_t bytes = static_cast<uint64_t>(bound) * std::max(1, chain.bins) *
                           static_cast<uint64_t>(std::max(1, spec->out_channels)) * sizeof(float);
    if (bytes > (uint64_t{64} << 20)) {
      return InvalidArgument("samples of many lengths are padded per batch, and the batch's memory holds "
                             "each at its longest: Decode's max_seconds (" + std::to_string(spec->max_seconds) +
                             " s) makes that " + std::to_string(bytes >> 20) + " MiB a sample; give "
                             "Decode(max_seconds=...) the longest you keep (e.g. 20), or crop");
    }
    spec->out_frames = bound;
    spec->ragged = true;
  }
  return std::shared_ptr<const Spec>(std::move(spec));
}

}  // namespace nostall::audio
