// libFuzzer target: the audio header readers and decoders (libsndfile's
// WAV, FLAC, MP3, Ogg Vorbis and Opus behind nostall's in-memory I/O)
// through the whole per-sample pipeline: probe, a crop decoded by seeking,
// resampling, a mel spectrogram in dB and masks; and the file read in parts
// (its first bytes at hand, the rest where the decoder reads, as a long
// local file is). The last input byte picks the transforms; the rest is the
// file.
#include <algorithm>
#include <cstring>
#include <vector>

#include "audio/pipeline.h"

namespace {

// The input as an open file whose bytes past the first few are read on demand.
class BytesFile final : public nostall::ItemFile {
 public:
  BytesFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint64_t size() const override { return size_; }
  nostall::Status ReadAt(uint64_t offset, size_t n, uint8_t* out) const override {
    if (offset > size_ || n > size_ - offset) return nostall::DataError("a read past the end");
    std::memcpy(out, data_ + offset, n);
    return nostall::Status::OK();
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

}  // namespace

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
  if (pick & 128) {
    const BytesFile file(data, size);
    audio::AudioFile part;
    if (part.Open(data, std::min<size_t>(size, 40), &file).ok()) {
      std::vector<float> out;
      (void)part.Decode(part.info().frames / 3, 2000, (pick & 1) != 0, &out);
    }
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
