// An audio field's transform list read, checked and resolved (pipeline.h):
// each transform's arguments with torchaudio's names and defaults, what the
// audio is at each point (rate, channels, length, bins), and the sample's
// shape a batch holds.
#include "audio/pipeline.h"

#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <set>

#include "common/json_fields.h"

namespace nostall::audio {
namespace {

using nlohmann::json;

// One transform's arguments, read as its entry gives them (else the
// default) and written back resolved; unknown keys are an error.
class Args {
 public:
  Args(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    resolved_["type"] = j.at("type");
  }
  Status Error(const std::string& msg) const { return InvalidArgument(where_ + ": " + msg); }
  const json* Get(const char* key) {
    seen_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  Status Double(const char* key, double def, double lo, double hi, double* out) {
    const json* v = Get(key);
    if (v != nullptr && !v->is_number()) return Error(std::string(key) + " must be a number, not " + Shown(*v));
    *out = v != nullptr ? v->get<double>() : def;
    if (!(*out >= lo && *out <= hi)) {
      return Error(std::string(key) + " must be in [" + Num(lo) + ", " + Num(hi) + "], not " + Num(*out));
    }
    resolved_[key] = *out;
    return Status::OK();
  }
  // An integer; `def` < 0 with none given: required.
  Status Int(const char* key, int64_t def, int64_t lo, int64_t hi, int64_t* out) {
    const json* v = Get(key);
    if (v == nullptr && def < 0) return Error(std::string(key) + " is required");
    if (v != nullptr && !(v->is_number_integer() || (v->is_number_float() && v->get<double>() == std::floor(v->get<double>())))) {
      return Error(std::string(key) + " must be an integer, not " + Shown(*v));
    }
    *out = v != nullptr ? static_cast<int64_t>(v->get<double>()) : def;
    if (*out < lo || *out > hi) {
      return Error(std::string(key) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                   "], not " + std::to_string(*out));
    }
    resolved_[key] = *out;
    return Status::OK();
  }
  // An integer or null (0).
  Status OptionalInt(const char* key, int64_t lo, int64_t hi, int64_t* out) {
    const json* v = Get(key);
    if (v == nullptr) {
      *out = 0;
      resolved_[key] = nullptr;
      return Status::OK();
    }
    return Int(key, 0, lo, hi, out);
  }
  Status Bool(const char* key, bool def, bool* out) {
    const json* v = Get(key);
    if (v != nullptr && !v->is_boolean()) return Error(std::string(key) + " must be true or false, not " + Shown(*v));
    *out = v != nullptr ? v->get<bool>() : def;
    resolved_[key] = *out;
    return Status::OK();
  }
  Status Choice(const char* key, const std::string& def, const std::vector<std::string>& allowed,
                std::string* out) {
    // null is None, a value of its own where "" is allowed (MFCC's norm).
    const bool none = j_.contains(key) && j_[key].is_null();
    const json* v = Get(key);
    if (none && std::find(allowed.begin(), allowed.end(), "") != allowed.end()) {
      out->clear();
      resolved_[key] = nullptr;
      return Status::OK();
    }
    if (v != nullptr && !v->is_string()) return Error(std::string(key) + " must be a string, not " + Shown(*v));
    *out = v != nullptr ? v->get<std::string>() : def;
    if (std::find(allowed.begin(), allowed.end(), *out) == allowed.end()) {
      std::string names;
      for (const std::string& a : allowed) names += (names.empty() ? "" : ", ") + (a.empty() ? "None" : "\"" + a + "\"");
      return Error(std::string(key) + " must be one of " + names + ", not " + Shown(*v));
    }
    resolved_[key] = out->empty() ? json(nullptr) : json(*out);
    return Status::OK();
  }
  // A number x as [-x, x] (centred at `center` when given: x -> [c - x, c + x])
  // or a pair [lo, hi].
  Status Range(const char* key, bool required, double lo_limit, double hi_limit, double* lo, double* hi) {
    const json* v = Get(key);
    if (v == nullptr) {
      if (required) return Error(std::string(key) + " is required");
      *lo = *hi = 0;
    } else if (v->is_number()) {
      *lo = -std::abs(v->get<double>());
      *hi = std::abs(v->get<double>());
    } else if (v->is_array() && v->size() == 2 && (*v)[0].is_number() && (*v)[1].is_number()) {
      *lo = (*v)[0].get<double>();
      *hi = (*v)[1].get<double>();
    } else {
      return Error(std::string(key) + " must be a number or a pair [lo, hi], not " + Shown(*v));
    }
    if (!(*lo <= *hi) || *lo < lo_limit || *hi > hi_limit) {
      return Error(std::string(key) + " must be lo <= hi within [" + Num(lo_limit) + ", " + Num(hi_limit) + "]");
    }
    resolved_[key] = {*lo, *hi};
    return Status::OK();
  }
  void Record(const char* key, json v) {
    seen_.insert(key);
    resolved_[key] = std::move(v);
  }
  Status Done() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (it.key() != "type" && !seen_.count(it.key())) {
        std::string known;
        for (const std::string& k : seen_) known += (known.empty() ? "" : ", ") + k;
        return Error("unknown argument '" + it.key().substr(0, 60) + "' (it takes " + known + ")");
      }
    }
    return Status::OK();
  }
  json resolved() const { return resolved_; }

 private:
  static std::string Num(double x) {
    json j = x;
    return j.dump();
  }
  const json& j_;
  std::string where_;
  std::set<std::string> seen_;
  json resolved_ = json::object();
};

const std::vector<std::pair<std::string, OpKind>>& OpNames() {
  static const std::vector<std::pair<std::string, OpKind>> k = {
      {"Decode", OpKind::kDecode},
      {"Resample", OpKind::kResample},
      {"SpeedPerturbation", OpKind::kSpeedPerturbation},
      {"RandomCrop", OpKind::kRandomCrop},
      {"CenterCrop", OpKind::kCenterCrop},
      {"Gain", OpKind::kGain},
      {"TimeShift", OpKind::kTimeShift},
      {"AddNoise", OpKind::kAddNoise},
      {"Spectrogram", OpKind::kSpectrogram},
      {"MelSpectrogram", OpKind::kMelSpectrogram},
      {"MFCC", OpKind::kMFCC},
      {"AmplitudeToDB", OpKind::kAmplitudeToDB},
      {"FrequencyMasking", OpKind::kFrequencyMasking},
      {"TimeMasking", OpKind::kTimeMasking},
  };
  return k;
}

bool IsWaveOp(OpKind k) {
  return k == OpKind::kResample || k == OpKind::kSpeedPerturbation || k == OpKind::kRandomCrop ||
         k == OpKind::kCenterCrop || k == OpKind::kTimeShift || k == OpKind::kAddNoise ||
         k == OpKind::kSpectrogram || k == OpKind::kMelSpectrogram || k == OpKind::kMFCC;
}

// The STFT arguments torchaudio's Spectrogram and MelSpectrogram share.
Status StftArgs(Args& a, StftParams* p, bool with_power) {
  int64_t n_fft, win, hop, pad;
  NOSTALL_RETURN_IF_ERROR(a.Int("n_fft", 400, 2, 1 << 16, &n_fft));
  NOSTALL_RETURN_IF_ERROR(a.OptionalInt("win_length", 1, n_fft, &win));
  NOSTALL_RETURN_IF_ERROR(a.OptionalInt("hop_length", 1, 1 << 20, &hop));
  NOSTALL_RETURN_IF_ERROR(a.Int("pad", 0, 0, 1 << 20, &pad));
  p->n_fft = static_cast<int>(n_fft);
  p->win_length = static_cast<int>(win);
  p->hop_length = static_cast<int>(hop);
  p->pad = static_cast<int>(pad);
  if (p->hop() < 1) return a.Error("hop_length must be positive (win_length // 2 is 0)");
  if (with_power) {
    const json* pw = a.Get("power");
    if (pw != nullptr && !pw->is_number()) {
      return a.Error("power must be a positive number (a complex spectrogram, power=None, is not "
                     "batched)");
    }
    NOSTALL_RETURN_IF_ERROR(a.Double("power", 2.0, 1e-6, 100, &p->power));
  }
  NOSTALL_RETURN_IF_ERROR(a.Bool("normalized", false, &p->normalized));
  NOSTALL_RETURN_IF_ERROR(a.Bool("center", true, &p->center));
  std::string mode;
  NOSTALL_RETURN_IF_ERROR(a.Choice("pad_mode", "reflect", {"reflect", "constant"}, &mode));
  p->reflect = mode == "reflect";
  NOSTALL_RETURN_IF_ERROR(a.Bool("onesided", true, &p->onesided));
  return Status::OK();
}

// MelSpectrogram's own arguments beyond the STFT's, and its bank.
Status MelArgs(Args& a, int rate, Op* op) {
  int64_t sr, n_mels;
  NOSTALL_RETURN_IF_ERROR(a.OptionalInt("sample_rate", 1, 768000, &sr));
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
  NOSTALL_RETURN_IF_ERROR(a.Double("f_min", 0.0, 0.0, sr / 2.0, &f_min));
  const json* fm = a.Get("f_max");
  f_max = fm != nullptr && fm->is_number() ? fm->get<double>() : static_cast<double>(sr / 2);
  if (fm != nullptr && !fm->is_number()) return a.Error("f_max must be a number or None");
  if (!(f_max > f_min && f_max <= sr / 2.0 + 1e-9)) return a.Error("f_max must be in (f_min, sample_rate / 2]");
  a.Record("f_max", fm != nullptr ? json(f_max) : json(nullptr));
  NOSTALL_RETURN_IF_ERROR(a.Int("n_mels", 128, 1, 4096, &n_mels));
  std::string norm, scale;
  NOSTALL_RETURN_IF_ERROR(a.Choice("norm", "", {"", "slaney"}, &norm));
  NOSTALL_RETURN_IF_ERROR(a.Choice("mel_scale", "htk", {"htk", "slaney"}, &scale));
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

Result<std::shared_ptr<const Spec>> SpecFromJson(const json& list, bool fixed) {
  if (!list.is_array()) return InvalidArgument("audio must be a list of audio transforms, not " + Shown(list));
  auto spec = std::make_shared<Spec>();
  // What the audio is at each point: rate (0 unknown), frames (0 varies),
  // channels (0 each file's), bins (0: a waveform).
  int rate = 0, channels = 1, bins = 0;
  int64_t frames = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& j = list[i];
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
      return InvalidArgument("audio[" + std::to_string(i) + "] must be an object with a \"type\", not " + Shown(j));
    }
    const std::string type = j["type"].get<std::string>();
    auto named = std::find_if(OpNames().begin(), OpNames().end(), [&](const auto& n) { return n.first == type; });
    if (named == OpNames().end()) {
      std::string names;
      for (const auto& n : OpNames()) names += (names.empty() ? "" : ", ") + n.first;
      return InvalidArgument("audio[" + std::to_string(i) + "]: unknown audio transform '" + type.substr(0, 60) +
                             "' (known: " + names + ")");
    }
    Args a(j, "audio[" + std::to_string(i) + "] " + type);
    Op op;
    op.kind = named->second;
    if (op.kind == OpKind::kDecode && i != 0) return a.Error("Decode must come first");
    if (i == 0 && op.kind != OpKind::kDecode) {
      json d = {{"type", "Decode"}};
      Args da(d, "audio Decode");
      NOSTALL_RETURN_IF_ERROR(da.Bool("mono", true, &spec->mono));
      spec->sample_rate = 0;
      da.Record("sample_rate", nullptr);
      da.Record("channels", nullptr);
      NOSTALL_RETURN_IF_ERROR(da.Double("max_seconds", 3600, 0.001, 1e7, &spec->max_seconds));
      spec->ops.push_back({OpKind::kDecode, da.resolved()});
    }
    if (bins > 0 && IsWaveOp(op.kind)) {
      return a.Error("works on a waveform, and comes after the spectrogram; put it before");
    }
    switch (op.kind) {
      case OpKind::kDecode: {
        int64_t sr, ch;
        NOSTALL_RETURN_IF_ERROR(a.Bool("mono", true, &spec->mono));
        NOSTALL_RETURN_IF_ERROR(a.OptionalInt("sample_rate", 1, 768000, &sr));
        NOSTALL_RETURN_IF_ERROR(a.OptionalInt("channels", 1, 64, &ch));
        NOSTALL_RETURN_IF_ERROR(a.Double("max_seconds", 3600, 0.001, 1e7, &spec->max_seconds));
        if (spec->mono && ch > 1) return a.Error("mono=true gives one channel; channels=" + std::to_string(ch) + " needs mono=false");
        spec->sample_rate = static_cast<int>(sr);
        spec->channels = spec->mono ? 1 : static_cast<int>(ch);
        rate = spec->sample_rate;
        channels = spec->channels;
        break;
      }
      case OpKind::kResample:
      case OpKind::kSpeedPerturbation: {
        const bool speed = op.kind == OpKind::kSpeedPerturbation;
        NOSTALL_RETURN_IF_ERROR(a.OptionalInt("orig_freq", 1, 768000, &op.orig_freq));
        if (op.orig_freq != 0 && rate != 0 && op.orig_freq != rate) {
          return a.Error("orig_freq=" + std::to_string(op.orig_freq) + " but the audio reaching it is at " +
                         std::to_string(rate) + " Hz");
        }
        if (!speed) {
          NOSTALL_RETURN_IF_ERROR(a.Int("new_freq", -1, 1, 768000, &op.new_freq));
          std::string method;
          NOSTALL_RETURN_IF_ERROR(a.Choice("resampling_method", "sinc_interp_hann",
                                           {"sinc_interp_hann", "sinc_interp_kaiser"}, &method));
          op.window = method == "sinc_interp_hann" ? ResampleWindow::kHann : ResampleWindow::kKaiser;
          int64_t w;
          NOSTALL_RETURN_IF_ERROR(a.Int("lowpass_filter_width", 6, 1, 1024, &w));
          op.lowpass_filter_width = static_cast<int>(w);
          NOSTALL_RETURN_IF_ERROR(a.Double("rolloff", 0.99, 1e-3, 1.0, &op.rolloff));
          const json* b = a.Get("beta");
          if (b != nullptr && !b->is_number()) return a.Error("beta must be a number or None");
          if (b != nullptr) op.beta = b->get<double>();
          a.Record("beta", b != nullptr ? json(op.beta) : json(nullptr));
          rate = static_cast<int>(op.new_freq);
          if (frames > 0 && op.orig_freq != 0) {
            auto k = MakeResampleKernel(op.orig_freq, op.new_freq, op.lowpass_filter_width, op.rolloff, op.window, op.beta);
            if (!k.ok()) return a.Error(k.status().message());
            frames = k.value().OutLength(frames);
          } else if (frames > 0) {
            // The rate comes from each file: checked there.
            frames = 0;
          }
        } else {
          if (op.orig_freq == 0) op.orig_freq = rate;
          if (op.orig_freq == 0) {
            return a.Error("orig_freq is unknown here: give it, or put Resample(new_freq) before (or "
                           "Decode(sample_rate=...))");
          }
          a.Record("orig_freq", op.orig_freq);
          const json* f = a.Get("factors");
          if (f == nullptr || !f->is_array() || f->empty()) return a.Error("factors must be a non-empty list of speeds");
          for (const json& x : *f) {
            if (!x.is_number() || !(x.get<double>() >= 0.1 && x.get<double>() <= 10)) {
              return a.Error("each factor must be a number in [0.1, 10], not " + Shown(x));
            }
            op.factors.push_back(x.get<double>());
            auto k = MakeResampleKernel(static_cast<int64_t>(x.get<double>() * op.orig_freq), op.orig_freq, 6, 0.99,
                                        ResampleWindow::kHann, 0);
            if (!k.ok()) return a.Error(k.status().message());
          }
          a.Record("factors", op.factors);
          if (op.factors.size() > 1 || op.factors[0] != 1.0) frames = 0;
        }
        break;
      }
      case OpKind::kRandomCrop:
      case OpKind::kCenterCrop:
        NOSTALL_RETURN_IF_ERROR(a.Double("seconds", -1, 1e-4, 1e5, &op.seconds));
        if (rate == 0) {
          return a.Error("needs the sample rate to count its frames: put Resample(new_freq) before it, or "
                         "Decode(sample_rate=...) first when every file has one rate");
        }
        frames = Frames(op.seconds, rate);
        if (frames < 1) return a.Error("is shorter than one frame");
        if (frames > (int64_t{1} << 28) / std::max(1, channels)) return a.Error("is over 2^28 samples long");
        break;
      case OpKind::kGain:
        NOSTALL_RETURN_IF_ERROR(a.Range("gain_db", true, -120, 120, &op.lo, &op.hi));
        break;
      case OpKind::kTimeShift:
        NOSTALL_RETURN_IF_ERROR(a.Double("seconds", -1, 0, 1e4, &op.seconds));
        if (rate == 0) return a.Error("needs the sample rate: put Resample(new_freq) or Decode(sample_rate=...) before it");
        break;
      case OpKind::kAddNoise: {
        NOSTALL_RETURN_IF_ERROR(a.Range("snr_db", true, -100, 200, &op.lo, &op.hi));
        if (rate == 0) return a.Error("needs the sample rate: put Resample(new_freq) or Decode(sample_rate=...) before it");
        const json* n = a.Get("noise");
        if (n == nullptr) return a.Error("noise (a file, a folder, or a list of them) is required");
        a.Record("noise", *n);
        NOSTALL_ASSIGN_OR_RETURN(op.noise, LoadNoise(a, *n, rate));
        break;
      }
      case OpKind::kSpectrogram:
      case OpKind::kMelSpectrogram: {
        NOSTALL_RETURN_IF_ERROR(StftArgs(a, &op.stft, true));
        bins = op.stft.bins();
        if (op.kind == OpKind::kMelSpectrogram) {
          NOSTALL_RETURN_IF_ERROR(MelArgs(a, rate, &op));
          bins = op.n_mels;
        }
        if (frames > 0) frames = op.stft.Frames(frames);
        break;
      }
      case OpKind::kMFCC: {
        int64_t sr, n_mfcc, dct_type;
        NOSTALL_RETURN_IF_ERROR(a.OptionalInt("sample_rate", 1, 768000, &sr));
        NOSTALL_RETURN_IF_ERROR(a.Int("n_mfcc", 40, 1, 4096, &n_mfcc));
        NOSTALL_RETURN_IF_ERROR(a.Int("dct_type", 2, 2, 2, &dct_type));
        std::string norm;
        NOSTALL_RETURN_IF_ERROR(a.Choice("norm", "ortho", {"ortho", ""}, &norm));
        NOSTALL_RETURN_IF_ERROR(a.Bool("log_mels", false, &op.log_mels));
        const json* mk = a.Get("melkwargs");
        json mel = mk != nullptr ? *mk : json::object();
        if (!mel.is_object()) return a.Error("melkwargs must be a dict of MelSpectrogram's arguments");
        if (mel.contains("sample_rate")) return a.Error("give sample_rate to MFCC, not in melkwargs");
        mel["type"] = "MelSpectrogram";
        if (sr != 0) mel["sample_rate"] = sr;
        Args ma(mel, "audio[" + std::to_string(i) + "] MFCC melkwargs");
        NOSTALL_RETURN_IF_ERROR(StftArgs(ma, &op.stft, true));
        NOSTALL_RETURN_IF_ERROR(MelArgs(ma, rate, &op));
        NOSTALL_RETURN_IF_ERROR(ma.Done());
        if (n_mfcc > op.n_mels) return a.Error("n_mfcc (" + std::to_string(n_mfcc) + ") cannot exceed n_mels (" + std::to_string(op.n_mels) + ")");
        json mres = ma.resolved();
        a.Record("sample_rate", mres["sample_rate"]);
        mres.erase("type");
        mres.erase("sample_rate");
        a.Record("melkwargs", mres);
        op.n_mfcc = static_cast<int>(n_mfcc);
        op.dct = DctMatrix(op.n_mfcc, op.n_mels, norm);
        op.top_db = 80.0;
        bins = op.n_mfcc;
        if (frames > 0) frames = op.stft.Frames(frames);
        break;
      }
      case OpKind::kAmplitudeToDB: {
        std::string stype;
        NOSTALL_RETURN_IF_ERROR(a.Choice("stype", "power", {"power", "magnitude"}, &stype));
        op.multiplier = stype == "power" ? 10.0 : 20.0;
        const json* t = a.Get("top_db");
        if (t != nullptr && !(t->is_number() && t->get<double>() >= 0)) return a.Error("top_db must be a non-negative number or None");
        op.top_db = t != nullptr ? t->get<double>() : 0.0;
        a.Record("top_db", t != nullptr ? json(op.top_db) : json(nullptr));
        break;
      }
      case OpKind::kFrequencyMasking:
      case OpKind::kTimeMasking: {
        const bool time = op.kind == OpKind::kTimeMasking;
        int64_t m;
        NOSTALL_RETURN_IF_ERROR(a.Int(time ? "time_mask_param" : "freq_mask_param", -1, 0, 1 << 20, &m));
        op.mask_param = static_cast<int>(m);
        NOSTALL_RETURN_IF_ERROR(a.Bool("iid_masks", false, &op.iid));
        if (time) NOSTALL_RETURN_IF_ERROR(a.Double("p", 1.0, 0.0, 1.0, &op.p));
        if (bins == 0) return a.Error("masks a spectrogram: put it after Spectrogram, MelSpectrogram or MFCC");
        break;
      }
    }
    NOSTALL_RETURN_IF_ERROR(a.Done());
    op.resolved = a.resolved();
    spec->ops.push_back(std::move(op));
  }
  if (spec->ops.empty()) {
    json d = {{"type", "Decode"}};
    return SpecFromJson(json::array({d}), fixed);
  }
  if (!spec->mono && spec->channels == 0 && fixed) {
    return InvalidArgument("audio Decode(mono=false) needs channels=N (the count every file must have) to "
                           "batch its samples");
  }
  spec->out_channels = channels == 0 ? spec->channels : channels;
  spec->out_bins = bins;
  spec->out_frames = frames;
  if (frames == 0 && fixed) {
    return InvalidArgument("the audio transforms do not give every sample one length: add "
                           "RandomCrop(seconds=...) or CenterCrop(seconds=...) (after any "
                           "SpeedPerturbation), with the rate known (Resample or Decode(sample_rate=...))");
  }
  return std::shared_ptr<const Spec>(std::move(spec));
}

}  // namespace nostall::audio
