// Video clips as a kind of sample (ops/sample_kind.h): the spec's "video"
// list, a clip of frames from each file, the same draw of geometry for
// every frame, a (C, T, H, W) or (T, C, H, W) tensor out.
//
// The list: a Clip first ({"type": "Clip", "num_frames": 16, "step": 4,
// "sampling": "random" | "uniform", "layout": "CTHW" | "TCHW", "clips": N,
// "frame_rate": fps}), then
// optionally Resize (a short side, or (h, w)), one crop (RandomCrop,
// CenterCrop, RandomResizedCrop), RandomHorizontalFlip, ops on the pixels
// (ColorJitter, ...) and Normalize, in that order (docs/video.md). The geometry becomes one box of the source
// frame resampled to the output: Resize then a crop is one resample.
#ifndef NOSTALL_VIDEO_KIND_H_
#define NOSTALL_VIDEO_KIND_H_

#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/sample_key.h"
#include "nostall/status.h"
#include "nostall/transforms.h"
#include "ops/sample_kind.h"
#include "video/backend.h"

namespace nostall::video {

enum class Sampling { kRandom, kUniform };
enum class CropKind { kNone, kRandom, kCenter, kRandomResized };

struct Spec {
  int num_frames = 16;
  int step = 1;  // frames between the clip's frames (1: consecutive)
  Sampling sampling = Sampling::kRandom;
  // Clips per sample: 0, one clip without a clips axis; N, an (N, ...) axis
  // of N clips, each with its own start and draws, decoded in one pass.
  int clips = 0;
  // The video resampled to this rate first (torchvision's VideoClips
  // frame_rate): position r is frame floor(r * fps / frame_rate); 0: every frame.
  double frame_rate = 0;
  // Frames by time (torchcodec's clips_at_random_timestamps): the frames
  // shown at start + t * seconds_between_frames, the start drawn in seconds;
  // exact on variable frame rates. 0: by index (step, frame_rate).
  double seconds_between_frames = 0;
  bool tchw = false;  // (T, C, H, W) per sample; else (C, T, H, W)
  int resize_short = 0, max_size = 0, resize_h = 0, resize_w = 0;
  // RandomResize(min_size, max_size): the short side drawn per clip from
  // [resize_min, resize_max) (torchvision v2's; PyTorchVideo's
  // RandomShortSideScale, inclusive, is RandomResize(lo, hi + 1)); 0: none.
  int resize_min = 0, resize_max = 0;
  CropKind crop = CropKind::kNone;
  int crop_h = 0, crop_w = 0;
  double scale_min = 0.08, scale_max = 1, ratio_min = 3.0 / 4, ratio_max = 4.0 / 3;
  double flip_p = 0;
  // Ops on the pixels (ColorJitter, RandomGrayscale, ...: the image ops of
  // role "pixels"), after the flip, one draw for the whole clip.
  std::vector<Transform> ops;
  bool normalize = false;
  float mul[3] = {1, 1, 1}, add[3] = {0, 0, 0};  // x -> x * mul + add (Normalize on x / 255)
  // RandomErasing, last: one box per clip, erased in every frame (as
  // torchvision's on a video tensor); its value per channel (empty: 0), or
  // standard normal noise for each element.
  struct Erase {
    std::shared_ptr<const ImageOp> op;  // its draws (ops/random_erasing.cc)
    std::vector<double> value;
    bool random = false;
  };
  std::vector<Erase> erase;
  // The clip's audio (an Audio in the list; audio_rate 0: none): from the
  // time of the clip's first frame, `audio_samples` samples a channel at
  // audio_rate, float32 (channels, samples) per clip, written to the
  // spec's clip_audio field; silence where the file has no audio.
  int audio_rate = 0, audio_channels = 1;
  int64_t audio_samples = 0;
  int out_h = 0, out_w = 0;
  nlohmann::json resolved;

  int ClipCount() const { return clips > 0 ? clips : 1; }
  bool audio() const { return audio_rate > 0; }
  size_t AudioBytes() const {
    return static_cast<size_t>(ClipCount()) * audio_channels * static_cast<size_t>(audio_samples) * sizeof(float);
  }
  std::vector<int64_t> Shape() const;
  size_t SampleBytes(DType dtype) const;
};

Result<std::shared_ptr<const Spec>> SpecFromJson(const nlohmann::json& list);

// The frames clip `c` (of ClipCount()) takes from a video of `frames`
// frames at `fps`: num_frames positions `step` apart (positions: frames, or
// the video resampled to frame_rate), the start drawn (random), central
// (uniform, one clip) or the c-th of evenly spaced starts from the first
// to the last (uniform, several clips: torchcodec's clips_at_regular_indices);
// a video shorter than the clip repeats its last frame.
Result<std::vector<int64_t>> ClipIndices(const Spec& spec, int64_t frames, double fps, int c, Philox& rng);
// With seconds_between_frames: the frames shown at the clip's times
// (`times`: each frame's presentation time, ascending; the video ends at
// `end` seconds): the start uniform over [times[0], end - the clip's
// duration] (random), the central one (uniform, one clip) or the c-th of
// evenly spaced starts; a time past the last frame repeats it.
std::vector<int64_t> ClipIndicesAtTimes(const Spec& spec, const std::vector<double>& times, double end, int c,
                                        Philox& rng);

struct Scratch;
struct ScratchDeleter {
  void operator()(Scratch* s) const;
};
std::unique_ptr<Scratch, ScratchDeleter> NewScratch();

// What a clip took: the frames and the box of the source (for sample_params
// and the decode's waste).
struct ClipDraw {
  std::vector<int64_t> indices;
  double x = 0, y = 0, w = 0, h = 0;
  bool flip = false;
  double time = 0;  // the first frame's presentation time, seconds (where its audio starts)
};

// The scans of the files a loader's clips come from (each frame's time,
// the keyframes: Backend::Open), by item, so that a file is opened again
// without reading all its packets (for a long file, all of it) for every
// clip; the least recently used are dropped past `limit` bytes.
class ScanCache {
 public:
  explicit ScanCache(size_t limit) : limit_(limit) {}
  std::shared_ptr<const Scanned> Get(int64_t item);
  void Put(int64_t item, std::shared_ptr<const Scanned> scanned);
  size_t bytes() const;

 private:
  using Entry = std::pair<int64_t, std::shared_ptr<const Scanned>>;
  const size_t limit_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<int64_t, std::list<Entry>::iterator> at_;
  size_t bytes_ = 0;
};

// A sample's clips from a video file's bytes into `dst` (Shape(), `dtype`),
// their audio (if the spec has it) into `audio` (AudioBytes()), and (if
// asked) each clip's draws and the frames the decoder produced. With
// `scans`, the file's scan is taken from it (key.index) and kept there.
Status Prepare(const Spec& spec, const Bytes& bytes, const SampleKey& key, DType dtype, void* dst, float* audio,
               Scratch* scratch, ScanCache* scans = nullptr, std::vector<ClipDraw>* draws = nullptr,
               int64_t* decoded = nullptr);

std::shared_ptr<const SampleKind> MakeKind(std::shared_ptr<const Spec> spec);

// The video spec `prep` holds, or null when its samples are not video.
const Spec* SpecOf(const PrepSpec& prep);

}  // namespace nostall::video

#endif  // NOSTALL_VIDEO_KIND_H_
