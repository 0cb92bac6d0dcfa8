// COCO's instances annotation file (instances_train2017.json), read once
// into nostall's own table: per image, its file name and its annotations in
// the record form (targets.h), so a 0.5 GB file is parsed once, saved, and
// mapped by every later run and process (docs/detection.md).
//
// The JSON is streamed (nlohmann's SAX reader): one image, annotation or
// category object is held at a time, never the whole document.
#ifndef NOSTALL_ANNOTATIONS_COCO_H_
#define NOSTALL_ANNOTATIONS_COCO_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "nostall/status.h"

namespace nostall::annotations {

struct CocoOptions {
  bool keep_empty = true;     // images without annotations (false: dropped)
  bool keep_crowd = true;     // iscrowd annotations (false: dropped)
  bool segmentation = false;  // keep polygons and RLE (for masks)
};

struct CocoImage {
  int64_t id = 0;
  std::string file_name;
  uint32_t width = 0, height = 0;
  std::string record;  // its annotations, record form (targets.h)
  uint32_t count = 0;  // how many
};

struct CocoTable {
  std::vector<CocoImage> images;  // by image id, ascending (torchvision's order)
  std::vector<std::pair<int64_t, std::string>> categories;  // (id, name), by id
  int64_t dropped_empty = 0;
  int64_t annotations = 0;
};

// Parses `path`. Errors name the file and the object (an annotation's id,
// an image's id): a box that is not 4 numbers, an annotation of an image
// the file does not list, a duplicate image id. `progress`, when given, is
// called with the bytes read so far now and then.
Result<CocoTable> ParseCocoFile(const std::string& path, const CocoOptions& options,
                                const std::function<void(uint64_t)>& progress = nullptr);
// The same from bytes in memory (the fuzz target, tests).
Result<CocoTable> ParseCocoBytes(std::string_view json, const CocoOptions& options,
                                 const std::string& name);

// The table as one byte string (what the index cache keeps), and a checked
// view back over such bytes (held by the caller: a mapped file).
std::string SerializeCoco(const CocoTable& table, uint64_t source_size, int64_t source_mtime_ns,
                          const std::string& options_key);
// FNV-1a, of an options key and of a table's parts.
uint64_t CocoHash(std::string_view bytes);
// The hash a table's header carries: of its rows, names and categories
// (the records are checked as each is decoded, and hashed once, when the
// table is written, for its fingerprint); 0 when `bytes` is too short to
// hold the parts its header says. (The fuzz target sets it, to reach the
// checks behind it.)
uint64_t CocoTableHash(std::string_view bytes);
inline constexpr size_t kCocoHeaderBytes = 88;
inline constexpr size_t kCocoTableRowBytes = 40;

class CocoView {
 public:
  // Fails on bytes that are not a table of these options for a source of
  // this size and mtime.
  static Result<CocoView> Open(std::string_view bytes, uint64_t source_size, int64_t source_mtime_ns,
                               const std::string& options_key);
  size_t size() const { return count_; }
  std::string_view file_name(size_t i) const;
  std::string_view record(size_t i) const;
  uint32_t count(size_t i) const;  // annotations of image i
  // Image i's id in the file (torchvision's order is by it).
  int64_t image_id(size_t i) const;
  // Image i's width and height as the file gives them (false: not given).
  bool image_size(size_t i, uint32_t* width, uint32_t* height) const;
  uint32_t max_count() const { return max_count_; }
  uint64_t max_record() const { return max_record_; }
  const std::vector<std::pair<int64_t, std::string>>& categories() const { return categories_; }
  int64_t dropped_empty() const { return dropped_empty_; }
  // Equal for equal tables (their records and their rows).
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  std::string_view bytes_;
  size_t count_ = 0;
  const uint8_t* table_ = nullptr;  // count x 32 bytes
  size_t names_at_ = 0, records_at_ = 0;
  uint32_t max_count_ = 0;
  uint64_t max_record_ = 0;
  int64_t dropped_empty_ = 0;
  uint64_t fingerprint_ = 0;
  std::vector<std::pair<int64_t, std::string>> categories_;
};

}  // namespace nostall::annotations

#endif  // NOSTALL_ANNOTATIONS_COCO_H_
