// One schema per transform: its arguments declared once, in C++, with their
// types, defaults, ranges and docs (as DALI's operator schemas declare an
// operator's arguments once). OpArgs reads a spec entry through the schema
// (the only place an argument is checked); the Python classes
// (python/nostall/_ops.py), their signatures and the argument tables of
// docs/transforms.md are generated from TransformSchemasJson() by
// `python -m nostall._schema` (`make generate`), and a test keeps them equal.
#ifndef NOSTALL_OPS_SCHEMA_H_
#define NOSTALL_OPS_SCHEMA_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nostall {

enum class ArgType {
  kFloat,   // a number in [lo, hi]
  kInt,     // an integer in [lo, hi]
  kBool,
  kRange,   // a number x: [center - x, center + x] (clamped at lo); or [min, max] in [lo, hi]
  kPair,    // [min, max], lo <= min <= max <= hi
  kFill,    // a number or one per channel, 0-255 (None: 0)
  kChoice,  // one of `choices`
  kAny,     // read by the op itself (OpArgs::Raw), its type in `py`
};

struct ArgSchema {
  std::string name;
  ArgType type = ArgType::kAny;
  nlohmann::json def;  // null: None
  bool required = false;
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  double center = 0;                 // kRange
  std::vector<std::string> choices;  // kChoice
  std::string py;                    // the Python type, for signatures and docs
  std::string doc;
  // Accepted for torchvision's signature with its default value only (any
  // other is an error saying why); not written back to the spec.
  bool accepted_only = false;
  // Accepted for torchvision's signature with any value of its type, which
  // changes nothing (e.g. inplace: batches are written once); not written
  // back to the spec.
  bool ignored = false;
  // None (null) is a value of its own, kept as given (MFCC's norm=None: no
  // normalisation), where the default is another.
  bool nullable = false;
};

// Where a transform works. Declared once, in its schema, and read by every
// pipeline (image, detection) and by the Python side: it fixes where the
// transform may stand in a list and which stage runs it.
enum class OpRole {
  kGeometry,   // crops, resizes, flips, zoom-outs: composed into one map before any pixel is decoded
  kPixels,     // on the resampled pixels
  kNormalize,  // the pixels to the normalised float32 tensor
  kTensor,     // on the laid-out tensor, after Normalize (RandomErasing)
  kBoxes,      // on the boxes alone (SanitizeBoundingBoxes, ClampBoundingBoxes)
  // Audio (src/audio): how files are decoded; on the waveform; a waveform to
  // a spectrogram (features); on a spectrogram.
  kAudioDecode,
  kWaveform,
  kFeatures,
  kSpectrum,
};
const char* OpRoleName(OpRole role);

struct OpSchema {
  std::string name;
  std::string doc;
  std::vector<ArgSchema> args;
  OpRole role = OpRole::kPixels;
  // Moves pixels (a crop, flip, rotation, affine map): a sample's boxes and
  // masks must follow it, so a detection spec takes it only where it makes
  // them follow (src/detect); the others are refused there, by name.
  bool moves_pixels = false;
  // Needs the sample's boxes: a detection spec's only.
  bool needs_boxes = false;
  const ArgSchema* Find(const std::string& key) const;
};

// Builders, so a schema reads as a list.
ArgSchema FloatArg(std::string name, double def, double lo, double hi, std::string doc);
ArgSchema IntArg(std::string name, int64_t def, int64_t lo, int64_t hi, std::string doc);
ArgSchema BoolArg(std::string name, bool def, std::string doc);
ArgSchema RangeArg(std::string name, double center, double lo, double hi, std::string doc);
ArgSchema PairArg(std::string name, double def_min, double def_max, double lo, double hi,
                  std::string doc);
ArgSchema FillArg(std::string name, nlohmann::json def, std::string doc);
ArgSchema ChoiceArg(std::string name, std::string def, std::vector<std::string> choices,
                    std::string doc);
ArgSchema AnyArg(std::string name, nlohmann::json def, std::string py, std::string doc);
// `arg` without a default: the caller must give it.
ArgSchema Required(ArgSchema arg);
ArgSchema AcceptedOnly(ArgSchema arg);
ArgSchema Ignored(ArgSchema arg);
// `arg` with None a value of its own (ArgSchema::nullable).
ArgSchema Nullable(ArgSchema arg);
// `arg` with another default (a JSON value: a pair, null).
ArgSchema Default(ArgSchema arg, nlohmann::json def);

// Every transform a spec takes: the geometry and Normalize, then the ops of
// the registry (NOSTALL_IMAGE_OPS), in order.
const std::vector<OpSchema>& TransformSchemas();
const OpSchema* FindTransformSchema(const std::string& name);
// [{"name", "doc", "args": [{"name", "type", "default", "required", "lo",
// "hi", "choices", "py", "doc", "accepted_only", "ignored", "nullable"}], "role",
// "moves_pixels", "needs_boxes"}]: what the generator
// reads.
std::string TransformSchemasJson();
// The same, of any list of schemas (the audio transforms': src/audio).
std::string SchemasJson(const std::vector<OpSchema>& schemas);

}  // namespace nostall

#endif  // NOSTALL_OPS_SCHEMA_H_
