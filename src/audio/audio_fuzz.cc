// libFuzzer target: the audio header readers and decoders (libsndfile's
// WAV, FLAC, MP3, Ogg Vorbis and Opus behind nostall's in-memory I/O)
// through the whole per-sample pipeline: probe, a crop decoded by seeking,
// resampling, a mel spectrogram in dB and masks. The last input byte picks
// the transforms; the rest is the file.
#include <vector>

#include "audio/pipeline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nostall;
  if (size < 1) return 0;
  const uint8_t pick = data[size - 1];
  --size;
  audio::AudioInfo info;
  if (audio::ProbeAudio(data, size, &info).ok()) {
    std::vector<float> out;
    (void)audio::DecodeFrames(data, size, info.frames / 2, 2000, (pick & 1) != 0, &out, &info);
  }
  // Keeps each run small; the limit itself is under test too.
  nlohmann::json list = nlohmann::json::array(
      {{{"type", "Decode"}, {"mono", (pick & 2) == 0}, {"channels", (pick & 2) ? 2 : 1}, {"max_seconds", 5.0}}});
  if (pick & 4) list.push_back({{"type", "Resample"}, {"new_freq", (pick & 8) ? 8000 : 22050}});
  if (pick & 16) list.push_back({{"type", "SpeedPerturbation"}, {"factors", {0.9, 1.1}}, {"orig_freq", 8000}});
  list.push_back({{"type", (pick & 32) ? "RandomCrop" : "CenterCrop"}, {"seconds", 0.25}});
  if (pick & 64) {
    list.push_back({{"type", "MelSpectrogram"}, {"n_fft", 256}, {"n_mels", 20}});
    list.push_back({{"type", "AmplitudeToDB"}, {"top_db", 80}});
    list.push_back({{"type", "TimeMasking"}, {"time_mask_param", 5}});
  }
  if (!(pick & 4)) list[0]["sample_rate"] = 8000;
  auto spec = audio::SpecFromJson(list, false);
  if (!spec.ok()) return 0;
  std::vector<float> out;
  std::vector<int64_t> shape;
  nlohmann::json trace;
  (void)audio::Apply(*spec.value(), data, size, {1, 0, pick}, &out, &shape, &trace);
  return 0;
}
