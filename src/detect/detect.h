// Detection and segmentation samples: an image and its annotations
// (annotations/targets.h) transformed together, with
// torchvision.transforms.v2's rules for boxes, masks and labels
// (docs/detection.md).
//
// A spec's "detection" object names the transforms (the same entries as
// "transforms", plus the ones that need boxes: RandomZoomOut, RandomIoUCrop,
// SanitizeBoundingBoxes, ClampBoundingBoxes, and the resizes and crop of the
// multi-scale and large-scale-jitter recipes: ScaleJitter,
// RandomShortestSize, RandomResize, FixedSizeCrop), the box format of the output
// and whether masks are made. The geometric transforms (zoom out, crops,
// resizes, flips) are composed into one map from the source image to the
// output, so the image is decoded once (only the region the output covers,
// at the smallest JPEG DCT scale that still covers it) and resampled once;
// the boxes go through each transform's own rule, step by step, as v2
// applies them; masks are rasterised at the source size and sampled once
// through the composed nearest-neighbour index maps, which equals v2's
// step-by-step pad/crop/flip/resize(nearest) exactly.
#ifndef NOSTALL_DETECT_DETECT_H_
#define NOSTALL_DETECT_DETECT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "annotations/targets.h"
#include "nostall/status.h"
#include "nostall/transforms.h"
#include "ops/prep.h"
#include "ops/sample_kind.h"

namespace nostall::detect {

enum class StepKind {
  kZoomOut,          // RandomZoomOut(fill, side_range, p)
  kIoUCrop,          // RandomIoUCrop(min_scale, max_scale, min/max_aspect_ratio, sampler_options, trials)
  kResizedCrop,      // RandomResizedCrop(size, scale, ratio)
  kResize,           // Resize(size, max_size)
  kCenterCrop,       // CenterCrop(size)
  kScaleJitter,      // ScaleJitter(target_size, scale_range)
  kShortestSize,     // RandomShortestSize(min_size, max_size)
  kRandomResize,     // RandomResize(min_size, max_size)
  kFixedSizeCrop,    // FixedSizeCrop(size, fill)
  kHFlip,            // RandomHorizontalFlip(p)
  kVFlip,            // RandomVerticalFlip(p)
  kSanitize,         // SanitizeBoundingBoxes(min_size, min_area)
  kClamp,            // ClampBoundingBoxes()
  kPixelOp,          // an op on pixels (ColorJitter, RandomPhotometricDistort, ...)
  kNormalize,
};

struct Step {
  StepKind kind;
  std::string name;
  // Its schema says it moves pixels (ops/schema.h): the boxes and masks go
  // through its rule; what comes after it is in the output's frame.
  bool moves_pixels = false;
  double p = 0.5;
  // ZoomOut, FixedSizeCrop
  std::vector<double> fill;
  double side_min = 1, side_max = 4;
  // IoUCrop
  double min_scale = 0.3, max_scale = 1, min_aspect = 0.5, max_aspect = 2;
  std::vector<double> options;
  int trials = 40;
  // Resize / crops (FixedSizeCrop: height x width)
  int height = 0, width = 0, short_side = 0, max_size = 0;
  // ScaleJitter: target_size and scale_range
  int target_h = 0, target_w = 0;
  double jitter_min = 0.1, jitter_max = 2.0;
  // RandomShortestSize: the shorter side's choices (max_size above, 0: none);
  // RandomResize: the shorter side drawn from [resize_min, resize_max)
  std::vector<int> min_sizes;
  int resize_min = 0, resize_max = 0;
  double scale_min = 0.08, scale_max = 1, ratio_min = 3.0 / 4, ratio_max = 4.0 / 3;
  // Sanitize
  double min_size = 1, min_area = 1;
  // pixel ops, Normalize
  Transform transform;
};

struct Spec {
  std::vector<Step> steps;
  annotations::BoxFormat box_format = annotations::BoxFormat::kXYXY;
  bool masks = false;
  // Output size when the steps fix it (a last Resize((h, w)), a crop after
  // every resize); else, for a loader's spec, the bound on each side of
  // samples of many sizes (`ragged`: a batch is padded to its largest,
  // rounded up to `size_divisible`; the bound is a multiple of it), and 0
  // when the steps set none.
  int out_h = 0, out_w = 0;
  bool ragged = false;
  int size_divisible = 32;
  // The largest number of annotations one sample has (the source's): sizes
  // the targets field's room in a batch.
  uint32_t max_count = 0;
  nlohmann::json resolved;  // the object as given, every default spelled out
};

// Reads a spec's "detection" object ({"transforms": [...], "box_format":
// "XYXY", "masks": false}), every error naming the transform and argument.
// `prep` carries dtype, layout and mode.
// `fixed` (a loader's batch): the steps must give every sample one size, or
// bound each side (samples of many sizes, padded per batch); else out_h and
// out_w are 0 when the steps do not fix them.
// Per-thread buffers: a sample's padded canvas, one instance's mask, the
// image resampled into its place of an output padded after it.
struct Scratch : KindScratch {
  std::vector<uint8_t> canvas, mask, placed, full_mask;
};

Result<std::shared_ptr<const Spec>> SpecFromJson(const nlohmann::json& j, const PrepSpec& prep,
                                                 bool fixed = true);

// Bytes the output targets of one sample take at most (its field room).
size_t TargetsRoom(const Spec& spec, uint32_t max_count, int out_h, int out_w);

// One sample: the image (`image`) and its annotations in record form
// (`record`; empty: none) to the out.out_h x out.out_w image at out.dst (as
// `prep` lays it out) and the output targets at out.targets (at most
// out.targets_room bytes; their length in *out.targets_len). A sample whose
// output size is not (out_h, out_w) is a DataError; for a spec of many
// sizes (spec.ragged) that is the bound, and the image is written dense in
// its own size, its shape in out.dims.
Status Prepare(const Spec& spec, const PrepSpec& prep, const SampleInput& in, const SampleKey& key,
               const SampleOutput& out, PrepScratch* scratch);

// What sample `key` of a width x height image with these annotations is
// given, without pixels: each step's draws ({"op": ..., ...}), the output
// size, the boxes, labels and crowd flags after every step (and which
// annotations were kept, by their index in the input).
// Images and their annotations as a kind of sample (ops/sample_kind.h).
std::shared_ptr<const SampleKind> MakeKind(std::shared_ptr<const Spec> spec);

// The detection spec `prep` holds, or null when its samples are plain images or audio.
const Spec* SpecOf(const PrepSpec& prep);

Status Trace(const Spec& spec, int width, int height, const uint8_t* record, size_t record_size,
             const SampleKey& key, nlohmann::json* out);

}  // namespace nostall::detect

#endif  // NOSTALL_DETECT_DETECT_H_
