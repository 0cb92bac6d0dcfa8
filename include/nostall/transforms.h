// The declarative transform spec: what the prep stage does to every image.
//
// Semantics follow torchvision's transforms on PIL images (same parameter
// names, defaults and random-parameter algorithms); see docs/transforms.md for
// where the pixels can differ (resampling filters). Geometry is composed
// before any pixel is touched, so a crop is decoded at the smallest JPEG DCT
// scale that still covers the output, and only the rows and columns it needs.
#ifndef NOSTALL_TRANSFORMS_H_
#define NOSTALL_TRANSFORMS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nostall/status.h"

namespace nostall {

class ImageOp;     // src/ops/op.h
struct OpSchema;   // src/ops/schema.h
class SampleKind;  // src/ops/sample_kind.h

enum class TransformKind {
  kRandomResizedCrop,
  kResize,
  kCenterCrop,
  kRandomHorizontalFlip,
  kNormalize,
  // Any op of the registry (ColorJitter, TrivialAugmentWide, RandomErasing,
  // ...): works on pixels after the geometry above has been resampled.
  kOp,
};

struct Transform {
  TransformKind kind;
  // RandomResizedCrop, CenterCrop, Resize((h, w)): the output size.
  int height = 0;
  int width = 0;
  // Resize(int): the smaller edge becomes this; the other keeps the aspect.
  int short_side = 0;
  int max_size = 0;  // Resize(int, max_size=...): cap on the longer edge
  // RandomResizedCrop.
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  // RandomHorizontalFlip.
  double p = 0.5;
  // Normalize, in [0, 1] units as torchvision's (applied to x / 255).
  std::vector<double> mean, std;
  // kOp: the op's name, its resolved arguments (a JSON object) and the op.
  std::string op_name;
  std::string op_args;
  std::shared_ptr<const ImageOp> op;
  // Its schema (name, arguments, role), set when read from a spec; else
  // found from `kind` (SchemaOf, src/ops/op.h).
  const OpSchema* schema = nullptr;
};

enum class DType { kUint8, kFloat32 };
enum class Layout { kNCHW, kNHWC };
enum class ColorMode { kRGB, kGray };

struct PrepSpec {
  std::vector<Transform> transforms;
  DType dtype = DType::kUint8;
  Layout layout = Layout::kNCHW;
  ColorMode mode = ColorMode::kRGB;
  // Images with more pixels than this are a DataError (PIL's default bomb
  // limit); checked from the header, before any pixel is decoded.
  int64_t max_pixels = 89478485;
  // Shrink JPEGs inside the decoder (DCT scaling by 1/2, 1/4, 1/8) when the output is
  // much smaller than the region it comes from. Much faster; the pixels then
  // differ a little from resampling the full-resolution image (see
  // docs/transforms.md). Off: every JPEG is decoded at full resolution.
  bool dct_scaling = true;
  // What a sample is, when not a plain image: an audio clip (the spec's
  // "audio" list, docs/audio.md), an image and its annotations (the spec's
  // "detection" object, docs/detection.md). That kind holds its own
  // transforms; `transforms` is then empty. Null: an image.
  std::shared_ptr<const SampleKind> kind;

  const SampleKind& sample_kind() const;
  int channels() const;
  Status Validate() const;
  // The (height, width) every output has, if the transforms fix it. Audio:
  // (bins, frames), bins 0 for a waveform.
  bool FixedOutputSize(int* height, int* width) const;
};

// Where in the source image a sample's output comes from, and how.
struct SamplePlan {
  double x = 0, y = 0, w = 0, h = 0;  // source rectangle, in source pixels
  int out_w = 0, out_h = 0;
  bool flip = false;
  // The source pixels the image still has when it is resampled: a crop of
  // the source made before any resize leaves only its own pixels (the
  // resampler clamps at its edges, as torchvision's crop-then-resize
  // does); a crop after a resize leaves the whole source (the resize saw
  // it). [clip_x0, clip_x1) x [clip_y0, clip_y1).
  int clip_x0 = 0, clip_y0 = 0, clip_x1 = 0, clip_y1 = 0;
};

// Composes the geometric transforms for one sample of a `src_w` x `src_h`
// image. Random draws come from the stream (seed, epoch, sample index) alone.
Status PlanSample(const PrepSpec& spec, int src_w, int src_h, uint64_t seed, int64_t epoch,
                  int64_t sample_index, SamplePlan* plan);

// The parameters sample (seed, epoch, index) of a src_w x src_h image would
// be augmented with, as JSON, without touching pixels: {"box": [x, y, w, h]
// (source pixels), "size": [h, w], "flip": bool, "ops": [one per op draw]}.
Result<std::string> TraceSampleJson(const PrepSpec& spec, int src_w, int src_h, uint64_t seed,
                                    int64_t epoch, int64_t index);

// One transform's documentation (its schema's), or "" for no such transform.
const char* ImageOpDoc(const std::string& type);

// Every transform's schema (src/ops/schema.h) as JSON: its name, what it
// does, and each argument's type, default, range and doc, in signature
// order. What the Python classes and docs/transforms.md are made from.
std::string TransformSchemasJson();
// One transform entry ({"type": ..., arguments}) checked against its schema
// alone (not against the rest of a pipeline), written back with every
// default spelled out.
Result<std::string> CheckTransformJson(const std::string& json);

}  // namespace nostall

#endif  // NOSTALL_TRANSFORMS_H_
