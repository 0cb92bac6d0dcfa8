// Audio decoding through libsndfile (WAV PCM 8/16/24/32 and float, FLAC,
// MP3, Ogg Vorbis, Opus), from bytes in memory: the header alone for the
// length and rate, and any range of frames by seeking, so a crop of a long
// file decodes about the crop (docs/audio.md).
#ifndef NOSTALL_AUDIO_DECODE_H_
#define NOSTALL_AUDIO_DECODE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nostall/item_file.h"
#include "nostall/status.h"

namespace nostall::audio {

struct AudioInfo {
  int64_t frames = 0;   // per channel, as the header gives it
  int sample_rate = 0;
  int channels = 0;
  std::string format;  // "WAV", "FLAC", "MP3", "OGG/VORBIS", "OGG/OPUS", ...
};

// The header of the audio file in `data`: a DataError naming what is wrong
// when libsndfile does not read it as audio (an empty file, a JPEG named
// .mp3, a truncated header).
Status ProbeAudio(const uint8_t* data, size_t size, AudioInfo* info);

// Frames [start, start + count) of the file, each channel its own row of
// `out` (channels x count, planar), float32 in [-1, 1) as libsndfile scales
// integer PCM (x / 2^(bits-1), as soundfile and torchaudio.load give). With
// `mono`, the channels' mean in one row. A file that ends before the range
// it promised is a DataError (truncated).
Status DecodeFrames(const uint8_t* data, size_t size, int64_t start, int64_t count, bool mono,
                    std::vector<float>* out, AudioInfo* info);

// One file opened once: its header, then any ranges of its frames (each as
// DecodeFrames gives them). The bytes must outlive it.
class AudioFile {
 public:
  AudioFile();
  ~AudioFile();
  AudioFile(const AudioFile&) = delete;
  AudioFile& operator=(const AudioFile&) = delete;
  // `data` holds the file's first `size` bytes; with `file`, the file is
  // file->size() bytes and the rest is read where the decoder wants it (a
  // crop of a long recording reads its frames, not the whole file).
  Status Open(const uint8_t* data, size_t size, const ItemFile* file = nullptr);
  const AudioInfo& info() const { return info_; }
  Status Decode(int64_t start, int64_t count, bool mono, std::vector<float>* out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  AudioInfo info_;
};

// The same frames as 16-bit integers, interleaved (count x channels), as
// soundfile's dtype="int16" reads them.
Status DecodeFramesInt16(const uint8_t* data, size_t size, int64_t start, int64_t count,
                         std::vector<int16_t>* out, AudioInfo* info);

}  // namespace nostall::audio

#endif  // NOSTALL_AUDIO_DECODE_H_
