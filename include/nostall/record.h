// Records: the named fields of a sample (docs/records.md).
//
// A WebDataset sample is every tar member sharing a key: `a/0001.jpg`,
// `a/0001.cls`, `a/0001.json` are the fields jpg, cls and json of sample
// `a/0001`. A LoaderSpec's `fields` name the ones a batch carries, each by
// the member extensions it may come from (in order of preference) and a
// kind that says how it is decoded and batched:
//   image  decoded, transformed and batched as today: one tensor (B, ...)
//          written in place in the ring slot (exactly one image field);
//   audio  decoded and transformed by the spec's "audio" list into the
//          batch's tensor instead of an image (docs/audio.md);
//   targets  a detection sample's annotations (a COCO source's, or a
//          `.json` member: boxes, labels, masks), transformed with the image
//          by the spec's "detection" transforms (docs/detection.md);
//   label  the `.cls` integer (image folders: the class folder): (B,) int64;
//   bytes, json, text  the member's bytes, one per sample: a list of B
//          values (Python: bytes, a parsed object, a str); or, for bytes
//          with batch "padded", one (B, longest) uint8 tensor padded with
//          zeros and a (B,) int64 tensor of lengths.
// The bytes of the fields a spec asks for are read as one span of the shard
// (the members of a sample lie together), cached as one item, and sliced by
// the record's table; an absent member of a field that is not optional is
// an error naming the sample and the field (skipped with on_error=skip).
#ifndef NOSTALL_RECORD_H_
#define NOSTALL_RECORD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "nostall/status.h"

namespace nostall {

// kClipAudio: the audio of a video clip, made by the video kind from the
// video file itself (it names no member; docs/video.md).
enum class FieldKind { kImage, kLabel, kBytes, kJson, kText, kAudio, kTargets, kVideo, kClipAudio };

// The field a batch's tensor is made from: an image, an audio file decoded
// and transformed by the spec's "audio" list (docs/audio.md), or a video
// file's clip, by the "video" list (docs/video.md).
inline bool IsMediaKind(FieldKind k) {
  return k == FieldKind::kImage || k == FieldKind::kAudio || k == FieldKind::kVideo;
}
// What a dataset's items are: images, audio files or video files.
enum class Media { kImage, kAudio, kVideo };

struct FieldSpec {
  std::string name;                     // the key of the batch's dict
  std::vector<std::string> extensions;  // lower case, without the dot, preferred first
  FieldKind kind = FieldKind::kBytes;
  bool optional = false;  // an absent member is None rather than an error
  // How a bytes field batches: "list" (one value per sample) or "padded"
  // (a zero-padded tensor and the lengths).
  std::string batch = "list";
  // A targets field: the most annotations one sample may hold, which sizes
  // its room in a batch (0: the source's largest where it knows, as a COCO
  // table does; else estimated from the largest member, at most 256 with
  // masks). A sample with more is a DataError saying so.
  int64_t max_annotations = 0;
};

// A sample's fields beyond the image and the label go in the ring slot
// after them; at most this many per spec.
inline constexpr int kMaxExtraFields = 16;

const char* FieldKindName(FieldKind kind);
Result<FieldKind> FieldKindFromName(const std::string& name);
// The kind a field of these extensions has when the spec does not say:
// image extensions give image, audio ones (wav, flac, mp3, ogg, opus)
// audio, "cls" label, "json" json, "txt" text; and as Parquet datasets
// name their columns, "image"/"img" image, "audio" audio, "label"/"labels"
// label; else what those names say of the field's own `name` (a field
// "label" of the column "fine_label" is a label); else bytes.
FieldKind InferFieldKind(const std::vector<std::string>& extensions, const std::string& name = "");
// "jpg;png" (or "jpg,png", ".jpg") as extensions, lower case.
std::vector<std::string> SplitExtensions(const std::string& text);
// Checks a spec's fields: names unique and non-empty, extensions given,
// exactly one image or audio field, at most one label field, at most kMaxExtraFields
// others.
Status ValidateFields(const std::vector<FieldSpec>& fields);

// Where one field of an item lies in the item's bytes (the span the source
// reads): `size` < 0 when the sample has no such member (an optional field),
// or, for the image (element 0), when it runs to the end of the bytes (an
// image folder's record: the files beside the image, then the image).
struct FieldSpan {
  uint64_t offset = 0;
  int64_t size = -1;
};

// Where the image lies in an item's `size` bytes: all of them without a
// record (`record` null), else its span, to the end when its size is -1.
// (Not checked against `size`: the caller checks the span lies inside.)
FieldSpan ImageSpan(const FieldSpan* record, size_t size);

// One sample's bytes of one extra field, as a batch hands it out: `size` <
// 0 when the sample has none.
struct FieldView {
  const uint8_t* data = nullptr;
  int64_t size = -1;
  bool present() const { return size >= 0; }
};

// A batch's extra fields copied out of the memory they were written in (a
// batch handed out as a copy, a shared consumer's batch across chunks).
class FieldCopies {
 public:
  void Resize(int fields, int64_t samples);
  void Set(int field, int64_t pos, FieldView v);
  FieldView Get(int field, int64_t pos) const;
  int fields() const { return static_cast<int>(values_.size()); }

 private:
  std::vector<std::vector<std::string>> values_;
  std::vector<std::vector<uint8_t>> present_;
};

}  // namespace nostall

#endif  // NOSTALL_RECORD_H_
