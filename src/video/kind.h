// Video clips as a kind of sample (ops/sample_kind.h): the spec's "video"
// list, a clip of frames from each file, the same draw of geometry for
// every frame, a (C, T, H, W) or (T, C, H, W) tensor out.
//
// The list: a Clip first ({"type": "Clip", "num_frames": 16, "step": 4,
// "sampling": "random" | "uniform", "layout": "CTHW" | "TCHW"}), then
// optionally Resize (a short side, or (h, w)), one crop (RandomCrop,
// CenterCrop, RandomResizedCrop), RandomHorizontalFlip, ops on the pixels
// (ColorJitter, ...) and Normalize, in that order (docs/video.md). The geometry becomes one box of the source
// frame resampled to the output: Resize then a crop is one resample.
#ifndef NOSTALL_VIDEO_KIND_H_
#define NOSTALL_VIDEO_KIND_H_

#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/sample_key.h"
#include "nostall/status.h"
#include "nostall/transforms.h"
#include "ops/sample_kind.h"

namespace nostall::video {

enum class Sampling { kRandom, kUniform };
enum class CropKind { kNone, kRandom, kCenter, kRandomResized };

struct Spec {
  int num_frames = 16;
  int step = 1;  // frames between the clip's frames (1: consecutive)
  Sampling sampling = Sampling::kRandom;
  bool tchw = false;  // (T, C, H, W) per sample; else (C, T, H, W)
  int resize_short = 0, max_size = 0, resize_h = 0, resize_w = 0;
  CropKind crop = CropKind::kNone;
  int crop_h = 0, crop_w = 0;
  double scale_min = 0.08, scale_max = 1, ratio_min = 3.0 / 4, ratio_max = 4.0 / 3;
  double flip_p = 0;
  // Ops on the pixels (ColorJitter, RandomGrayscale, ...: the image ops of
  // role "pixels"), after the flip, one draw for the whole clip.
  std::vector<Transform> ops;
  bool normalize = false;
  float mul[3] = {1, 1, 1}, add[3] = {0, 0, 0};  // x -> x * mul + add (Normalize on x / 255)
  int out_h = 0, out_w = 0;
  nlohmann::json resolved;

  std::vector<int64_t> Shape() const;
  size_t SampleBytes(DType dtype) const;
};

Result<std::shared_ptr<const Spec>> SpecFromJson(const nlohmann::json& list);

// The frames a clip takes from a video of `frames` frames: num_frames
// indices `step` apart, the start drawn (random) or central (uniform);
// a video shorter than the clip repeats its last frame.
std::vector<int64_t> ClipIndices(const Spec& spec, int64_t frames, Philox& rng);

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
  int64_t decoded = 0;  // frames the decoder produced
};

// One clip from a video file's bytes into `dst` (Shape(), `dtype`).
Status Prepare(const Spec& spec, const uint8_t* data, size_t size, const SampleKey& key, DType dtype, void* dst,
               Scratch* scratch, ClipDraw* draw = nullptr);

std::shared_ptr<const SampleKind> MakeKind(std::shared_ptr<const Spec> spec);

// The video spec `prep` holds, or null when its samples are not video.
const Spec* SpecOf(const PrepSpec& prep);

}  // namespace nostall::video

#endif  // NOSTALL_VIDEO_KIND_H_
