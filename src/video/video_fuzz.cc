// libFuzzer target: FFmpeg's demuxers and decoders behind nostall's
// in-memory reader (video/plugin/ffmpeg.cc), through a clip: the packet
// scan, a seek to a keyframe, the decode and the resample; with the pick's
// bit 7, two clips and their audio (the audio decoder, the resampler). The
// last input byte picks the clip; the rest is the file. Seeds: tiny
// H.264/MP4, VP9/WebM, MPEG-4/AVI and H.264/MKV files made by ffmpeg's
// testsrc, and MP4/WebM/AVI with AAC/Opus/MP3 (fuzz/make_seeds.py).
#include <cstring>
#include <vector>

#include "video/backend.h"
#include "video/kind.h"
#include "video/plugin/ffmpeg.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nostall;
  static const bool registered = (video::RegisterBackend(&video::FfmpegBackend()), true);
  (void)registered;
  if (size < 1) return 0;
  const uint8_t pick = data[size - 1];
  --size;
  nlohmann::json list = nlohmann::json::array(
      {{{"type", "Clip"}, {"num_frames", 1 + (pick & 7)}, {"step", 1 + ((pick >> 3) & 3)},
        {"sampling", (pick & 32) ? "random" : "uniform"}},
       {{"type", "Resize"}, {"size", {12, 16}}}});
  if (pick & 64) list.push_back({{"type", "RandomHorizontalFlip"}, {"p", 0.5}});
  if (pick & 128) {
    list[0]["clips"] = 2;
    list.push_back({{"type", "Audio"}, {"seconds", 0.3}, {"sample_rate", 8000}, {"channels", 1 + (pick & 1)}});
  }
  auto spec = video::SpecFromJson(list);
  if (!spec.ok()) return 0;
  std::vector<uint8_t> out(spec.value()->SampleBytes(DType::kUint8));
  std::vector<float> audio(spec.value()->AudioBytes() / sizeof(float));
  auto scratch = video::NewScratch();
  // Half the bytes at hand and the rest read where the demuxer asks (a long
  // local file's way), and the scan given back for a second open.
  video::Bytes bytes{data, size / 2, size, [data, size](uint64_t offset, size_t n, uint8_t* to) {
                       if (offset > size || n > size - offset) return nostall::DataError("past the end");
                       std::memcpy(to, data + offset, n);
                       return nostall::Status::OK();
                     }};
  video::ScanCache scans(1 << 20);
  (void)video::Prepare(*spec.value(), bytes, {1, 0, pick}, DType::kUint8, out.data(), audio.data(), scratch.get(),
                       &scans);
  (void)video::Prepare(*spec.value(), bytes, {1, 1, pick}, DType::kUint8, out.data(), audio.data(), scratch.get(),
                       &scans);
  return 0;
}
