// Video decoding behind an interface: the kind (video/kind.h) asks for the
// frames a clip needs; FFmpeg's libraries do the demuxing, decoding and
// YUV -> RGB conversion (video/ffmpeg.cc, nothing hand-written).
//
// The FFmpeg side is its own shared library (_nostall_video.so beside the
// module), loaded the first time a video spec is made, so that the rest of
// nostall loads on a machine without FFmpeg's libraries, and the binary
// wheel ships none of them (nor the codecs they link, some under the GPL):
// video uses the system's FFmpeg, as torchcodec does. Tests and fuzz
// targets link it directly (RegisterBackend).
#ifndef NOSTALL_VIDEO_BACKEND_H_
#define NOSTALL_VIDEO_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nostall/status.h"

namespace nostall::video {

// What the container and the stream say, and what one scan of the packets
// (no decoding) found: each frame's presentation time, in order, and which
// of them a decoder can start at.
struct StreamInfo {
  int width = 0, height = 0;  // as shown: the display matrix applied (video/plugin/orient.h)
  int rotation = 0;           // degrees the decoded frames are turned by, counter-clockwise: 0, 90, 180, 270
  bool mirrored = false;      // and flipped
  int64_t frames = 0;         // frames in presentation order
  double fps = 0;             // average frame rate
  double duration = 0;        // seconds
  std::string codec;          // "h264", "vp9", ...
  int64_t keyframes = 0;
  std::string audio_codec;    // the audio stream's ("aac", "opus", ...); empty: none
  int audio_rate = 0, audio_channels = 0;
};

// A video's bytes: the first `have` at `data` (they outlive the decoder),
// the rest, to `size`, read where the demuxer wants them (`read`: a long
// file is not read whole for a clip; empty when all are at hand).
struct Bytes {
  const uint8_t* data = nullptr;
  size_t have = 0;
  uint64_t size = 0;
  std::function<Status(uint64_t offset, size_t n, uint8_t* out)> read;
};

// What one scan of a file's packets found (each frame's time, the
// keyframes), as the backend keeps it: given back to Open for the same
// file, the file opens without reading its packets again. `bytes`: its
// memory; `prefix` and `size`: what the file it was made from began with
// and how long it was (Open refuses it for another).
struct Scanned {
  virtual ~Scanned() = default;
  size_t bytes = 0;
  uint64_t size = 0;
  std::vector<uint8_t> prefix;
};

// One decoded frame: packed RGB24 rows.
struct Frame {
  const uint8_t* rgb = nullptr;
  size_t stride = 0;
  int width = 0, height = 0;
};

// Called for each wanted frame in order: k-th of the indices asked for.
using FrameSink = std::function<Status(int k, const Frame& frame)>;

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual const StreamInfo& info() const = 0;
  // Decodes the frames at `indices` (presentation order, ascending; repeats
  // allowed) and hands each to `sink`: from the keyframe before the first,
  // stopping after the last, seeking again where a later keyframe is nearer,
  // and skipping frames no other frame needs that are not wanted.
  // `decoded` (if given) gets the count of frames the decoder produced.
  virtual Status Decode(const int64_t* indices, int count, const FrameSink& sink, int64_t* decoded) = 0;
  // Frame `index`'s presentation time, in seconds on the file's timeline.
  virtual double FrameTime(int64_t index) const = 0;
  // The audio from `start` seconds (the file's timeline, as FrameTime),
  // `count` samples a channel at `rate`, `channels` (1: mixed down, 2)
  // planar float32 into `dst`: resampled by libswresample on a grid that
  // starts at the timeline's zero (the samples ffmpeg's own resample of the
  // whole stream gives), silence before and after the stream and where the
  // file has no audio (StreamInfo::audio_codec empty).
  virtual Status DecodeAudio(double start, int rate, int channels, int64_t count, float* dst) = 0;
  // The scan this decoder opened with (its own, or the one it was given).
  virtual std::shared_ptr<const Scanned> scanned() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Opens a video; a DataError says what is wrong with its bytes. With
  // `scanned` (a decoder's scanned() of the same file) its packets are not
  // read again.
  virtual Result<std::unique_ptr<Decoder>> Open(const Bytes& bytes,
                                                std::shared_ptr<const Scanned> scanned = nullptr) const = 0;
  Result<std::unique_ptr<Decoder>> Open(const uint8_t* data, size_t size) const {
    return Open(Bytes{data, size, size, {}});
  }
  // "FFmpeg 5.1.x (libavformat 59.x, libavcodec 59.x)".
  virtual std::string version() const = 0;
};

// The backend: one registered, or else the plugin beside the module (or at
// $NOSTALL_VIDEO_PLUGIN), loaded once. An error says what to install.
Result<const Backend*> GetBackend();
void RegisterBackend(const Backend* backend);

}  // namespace nostall::video

// The plugin's one entry point.
extern "C" const nostall::video::Backend* nostall_video_backend();

#endif  // NOSTALL_VIDEO_BACKEND_H_
