// libFuzzer target: what a hostile annotation file or sample gives nostall.
// The first input byte picks the reader: a sample's annotations (the record
// form or its JSON) decoded, their boxes run through the SSD steps' box
// rules and their masks rasterised on a small image; a COCO instances file
// parsed; or a saved annotation table opened and walked.
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "annotations/coco.h"
#include "annotations/targets.h"
#include "detect/detect.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nostall;
  if (size < 1) return 0;
  const uint8_t pick = data[0];
  ++data;
  --size;
  switch (pick % 3) {
    case 0: {
      annotations::Targets t;
      if (!annotations::DecodeTargets(data, size, true, &t).ok()) return 0;
      std::vector<uint8_t> mask;
      for (const annotations::Instance& inst : t.instances) {
        (void)annotations::RasterizeInstance(inst, 24, 32, &mask);
      }
      static const std::shared_ptr<const detect::Spec> spec = [] {
        PrepSpec prep;
        return detect::SpecFromJson(nlohmann::json::parse(R"({"transforms": [
            {"type": "RandomZoomOut"}, {"type": "RandomIoUCrop"}, {"type": "RandomHorizontalFlip"},
            {"type": "Resize", "size": [30, 30]}, {"type": "SanitizeBoundingBoxes"}]})"), prep).value();
      }();
      nlohmann::json out;
      (void)detect::Trace(*spec, 1 + pick, 1 + (pick >> 2), data, size, {pick, 0, 0}, &out);
      break;
    }
    case 1: {
      annotations::CocoOptions o{(pick & 4) != 0, (pick & 8) != 0, (pick & 16) != 0};
      (void)annotations::ParseCocoBytes(
          std::string_view(reinterpret_cast<const char*>(data), size), o, "fuzz.json");
      break;
    }
    default: {
      // A table stamped for this input (the stamps themselves are not the
      // point): everything it says is checked before it is used.
      std::string bytes(reinterpret_cast<const char*>(data), size);
      uint64_t src = 0;
      int64_t mtime = 0;
      if (size >= annotations::kCocoHeaderBytes) {
        std::memcpy(&src, data + 8, 8);
        std::memcpy(&mtime, data + 16, 8);
        const uint64_t key = annotations::CocoHash("k");
        std::memcpy(bytes.data() + 24, &key, 8);
        const uint64_t hash = annotations::CocoTableHash(bytes);
        std::memcpy(bytes.data() + annotations::kCocoHeaderBytes - 8, &hash, 8);
      }
      Result<annotations::CocoView> v = annotations::CocoView::Open(bytes, src, mtime, "k");
      if (!v.ok()) return 0;
      for (size_t i = 0; i < v->size(); ++i) {
        (void)v->file_name(i);
        std::string_view rec = v->record(i);
        annotations::Targets t;
        (void)annotations::DecodeTargets(reinterpret_cast<const uint8_t*>(rec.data()), rec.size(), true, &t);
      }
      break;
    }
  }
  return 0;
}
