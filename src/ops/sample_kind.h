// A kind of sample: what the preparer, the loader's shapes and the spec
// writer ask of one, whatever it is (an image, an audio clip, an image with
// its annotations; what comes next). The image kind is this layer's own;
// the others implement the interface in their layers above (audio/kind.h,
// detect/kind.h) and a spec holds one (PrepSpec::kind), so nothing here
// knows of them.
#ifndef NOSTALL_OPS_SAMPLE_KIND_H_
#define NOSTALL_OPS_SAMPLE_KIND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/sample_key.h"
#include "nostall/item_file.h"
#include "nostall/status.h"

namespace nostall {

struct PrepSpec;
struct PrepScratch;

// The bytes one sample is made from: its main member (an image, an audio
// file) and, for a kind with targets, its annotations (may be empty).
struct SampleInput {
  const uint8_t* data = nullptr;
  size_t size = 0;
  const uint8_t* annotations = nullptr;
  size_t annotations_size = 0;
  // For a kind that ReadsPart(): set when `data` holds only the item's first
  // `size` bytes, and the rest (file->size() in all) is read from here.
  const ItemFile* file = nullptr;
};

// Where it goes: its place in the batch tensor (out_h x out_w, as the batch
// is; a bound, for a kind of samples of many sizes) and, for a kind that
// writes a field (written_field()), that field's place, its room and the
// length written.
// A kind of many sizes (RaggedAxes) writes the sample dense in its own
// shape at `dst` and that shape (SampleShape's rank, then 1s) to `dims`.
struct SampleOutput {
  void* dst = nullptr;
  int out_h = 0, out_w = 0;
  int64_t* dims = nullptr;
  uint8_t* targets = nullptr;
  size_t targets_room = 0;
  int64_t* targets_len = nullptr;
};

// The fields a kind may write itself (SampleKind::written_field).
enum class WrittenField { kTargets, kClipAudio };

// A kind's own per-thread buffers, kept in PrepScratch from sample to sample.
struct KindScratch {
  virtual ~KindScratch() = default;
};

class SampleKind {
 public:
  virtual ~SampleKind() = default;
  // The spec's key for it: "image", "audio", "detection".
  virtual const char* name() const = 0;
  // What one sample is called in rates and reports: "images", "clips".
  virtual const char* unit() const { return "images"; }
  // The spec's rules that belong to this kind (its transforms, dtype, sizes).
  virtual Status Validate(const PrepSpec& spec) const = 0;
  virtual int channels(const PrepSpec& spec) const = 0;
  // The (height, width) every output has, if the spec fixes it (audio:
  // (bins, frames)).
  virtual bool FixedOutputSize(const PrepSpec& spec, int* height, int* width) const = 0;
  // One sample's tensor shape and bytes in a batch of out_h x out_w.
  virtual std::vector<int64_t> SampleShape(const PrepSpec& spec, int out_h, int out_w) const = 0;
  virtual size_t SampleBytes(const PrepSpec& spec, int out_h, int out_w) const = 0;
  // Samples of many sizes: the axes of SampleShape a sample may be smaller
  // on (bit i: axis i; 0, the default: every sample has SampleShape, which
  // is otherwise the bound), and the multiple a batch is padded up to on
  // them (the bound is one).
  virtual uint32_t RaggedAxes(const PrepSpec& spec) const {
    (void)spec;
    return 0;
  }
  virtual int PadMultiple(const PrepSpec& spec) const {
    (void)spec;
    return 1;
  }
  // The field of the sample the kind writes itself (SampleOutput::targets):
  // a detection sample's transformed targets, a video clip's audio (the
  // fields of kind "targets" and "clip_audio"); none for most kinds.
  virtual std::optional<WrittenField> written_field() const { return std::nullopt; }
  // The kind may read only part of a long item (an audio crop): the fetcher
  // may then hand it the item's first bytes and the file for the rest
  // (SampleInput::file).
  virtual bool ReadsPart() const { return false; }
  // One sample, from its bytes, into its place; a DataError names what is
  // wrong with the bytes (the caller adds the item).
  virtual Status Prepare(const PrepSpec& spec, const SampleInput& in, const SampleKey& key,
                         const SampleOutput& out, PrepScratch* scratch) const = 0;
  // The spec's object for it, every default spelled out (null for images:
  // their transforms are the spec's "transforms").
  virtual nlohmann::json ToJson() const = 0;
};

// Plain images: the spec's "transforms" on a decoded image.
const SampleKind& ImageKind();

}  // namespace nostall

#endif  // NOSTALL_OPS_SAMPLE_KIND_H_
