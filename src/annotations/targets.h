// A detection sample's annotations: boxes, class labels, crowd flags and
// instance masks (polygons or run-length encodings), in the two byte forms a
// batch carries them (docs/detection.md):
//
// - The record form, what a source puts beside an image (a COCO dataset's
//   driver, from its parsed annotation file) or what a WebDataset sample's
//   `.json` member holds. Binary ("NSTG", version 1, little-endian):
//     header  magic[4], u32 version, u32 count, u32 width, u32 height, u32 0
//     count x { f32 x0, y0, x1, y1 (XYXY, source pixels), i64 label,
//               u32 crowd, u32 seg kind (0 none, 1 polygons, 2 runs),
//               u32 seg offset, u32 seg bytes }   (40 bytes each)
//     segments  polygons: u32 n, then n x (u32 values, f64 xy[values]);
//               runs: u32 h, u32 w, u32 m, u32 counts[m] (COCO's
//               uncompressed RLE: column-major, zeros first)
//   `width` x `height` is the image the annotations were drawn on (0 x 0:
//   unknown, then the decoded image's). Or JSON (the first byte `{`): see
//   ParseTargetsJson.
// - The output form, after the transforms ("NSTO"):
//     u32 magic, u32 count, u32 mask_h, u32 mask_w
//     f32 boxes[count][4] (the spec's box format), i64 labels[count],
//     u8 crowd[count] (padded to 8 bytes), then, when masks are asked,
//     count masks of mask_h x mask_w bits, row-major, each padded to 8 bytes.
#ifndef NOSTALL_ANNOTATIONS_TARGETS_H_
#define NOSTALL_ANNOTATIONS_TARGETS_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "nostall/status.h"

namespace nostall::annotations {

inline constexpr char kRecordMagic[4] = {'N', 'S', 'T', 'G'};
inline constexpr char kOutputMagic[4] = {'N', 'S', 'T', 'O'};
inline constexpr size_t kRecordHeaderBytes = 24;
inline constexpr size_t kRecordBoxBytes = 40;
inline constexpr size_t kOutputHeaderBytes = 16;
// A sample with more annotations than this is a DataError (COCO's most is
// under 100; a million would be an allocation, not a scene).
inline constexpr uint32_t kMaxAnnotations = 1u << 16;

enum class SegKind : uint32_t { kNone = 0, kPolygons = 1, kRuns = 2 };

// One instance, its segmentation kept as it came (decoded into a mask only
// when a spec asks for masks).
struct Instance {
  float box[4] = {0, 0, 0, 0};  // XYXY, source pixels
  int64_t label = 0;
  bool crowd = false;
  SegKind seg = SegKind::kNone;
  std::vector<std::vector<double>> polygons;  // each x0, y0, x1, y1, ... (f64: pycocotools rounds doubles)
  uint32_t runs_h = 0, runs_w = 0;
  std::vector<uint32_t> runs;  // column-major counts, zeros first
};

struct Targets {
  uint32_t width = 0, height = 0;  // the annotated image's size (0: unknown)
  std::vector<Instance> instances;
};

enum class BoxFormat { kXYXY, kXYWH, kCXCYWH };
Result<BoxFormat> BoxFormatFromName(const std::string& name);  // "XYXY", "xywh", ...
const char* BoxFormatName(BoxFormat f);

// The record form of `t`.
std::string EncodeTargets(const Targets& t);
// Reads either record form, checked: every count and offset inside `size`,
// every box finite. `with_segments`: keep the segmentations (else dropped
// unread).
Status DecodeTargets(const uint8_t* data, size_t size, bool with_segments, Targets* out);
// The JSON record form: an object with either COCO's per-image layout
//   {"width": W, "height": H, "annotations": [{"bbox": [x, y, w, h],
//     "category_id": k, "iscrowd": 0, "segmentation": ...}, ...]}
// or plain tensors-as-lists
//   {"boxes": [[x0, y0, x1, y1], ...], "labels": [...], "format": "XYXY"}
// ("format" one of XYXY, XYWH, CXCYWH; default XYXY).
Status ParseTargetsJson(const uint8_t* data, size_t size, bool with_segments, Targets* out);

// One COCO annotation object ({"bbox": [x, y, w, h], "category_id",
// "iscrowd", "segmentation"}) as an instance; errors are prefixed `where`.
Status InstanceFromCoco(const nlohmann::json& a, bool with_segments, const std::string& where,
                        Instance* out);
// Appends `inst` to a record being built: its 40-byte row to `rows` (its
// segment's offset counted from the start of `segs`) and its segment to
// `segs`. A record is then the header, the rows, the segments.
void AppendInstance(const Instance& inst, std::string* rows, std::string* segs);
// The record header for `count` instances of a width x height image.
std::string RecordHeader(uint32_t count, uint32_t width, uint32_t height);

// COCO's compressed RLE string (pycocotools' rleToString: 6 bits a
// character, deltas against the count two back) as counts. An error for a
// string that is not one.
Status RunsFromString(const std::string& s, std::vector<uint32_t>* counts);

// One instance's mask at its annotated size (h x w, row-major, 0/1): its
// polygons' union rasterised as pycocotools' frPyObjects + merge does, or
// its runs decoded. Runs that do not add up to h x w are a DataError.
Status RasterizeInstance(const Instance& inst, uint32_t h, uint32_t w, std::vector<uint8_t>* mask);

// The output form's size for `count` instances with masks of h x w (0 x 0:
// none).
size_t OutputBytes(uint32_t count, uint32_t mask_h, uint32_t mask_w);

}  // namespace nostall::annotations

#endif  // NOSTALL_ANNOTATIONS_TARGETS_H_
