// The annotation record forms (targets.h).
#include "annotations/targets.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "annotations/bytes.h"
#include "common/json_fields.h"

namespace nostall::annotations {
namespace {

bool Finite(const float* b) {
  return std::isfinite(b[0]) && std::isfinite(b[1]) && std::isfinite(b[2]) && std::isfinite(b[3]);
}

std::string Nth(size_t i) { return "annotation #" + std::to_string(i); }

// The polygons of a segmentation given as JSON (a list of lists of numbers).
Status PolygonsFromJson(const nlohmann::json& seg, const std::string& where, Instance* inst) {
  for (const nlohmann::json& poly : seg) {
    if (!poly.is_array()) return DataError(where + ": a polygon must be a list of numbers");
    std::vector<double> xy;
    xy.reserve(poly.size());
    for (const nlohmann::json& v : poly) {
      if (!v.is_number()) return DataError(where + ": a polygon must be a list of numbers");
      const double d = v.get<double>();
      if (!std::isfinite(d)) return DataError(where + ": a polygon coordinate is not finite");
      xy.push_back(d);
    }
    if (xy.size() % 2 != 0) return DataError(where + ": a polygon has an odd number of values");
    inst->polygons.push_back(std::move(xy));
  }
  inst->seg = SegKind::kPolygons;
  return Status::OK();
}

Status SegmentFromJson(const nlohmann::json& seg, const std::string& where, Instance* inst) {
  if (seg.is_array()) return PolygonsFromJson(seg, where, inst);
  if (!seg.is_object()) return DataError(where + ": segmentation must be polygons or an RLE object");
  const auto size = seg.find("size");
  const auto counts = seg.find("counts");
  if (size == seg.end() || counts == seg.end() || !size->is_array() || size->size() != 2 ||
      !(*size)[0].is_number_unsigned() || !(*size)[1].is_number_unsigned()) {
    return DataError(where + ": an RLE segmentation needs \"size\": [h, w] and \"counts\"");
  }
  const uint64_t h = (*size)[0].get<uint64_t>(), w = (*size)[1].get<uint64_t>();
  if (h > (1u << 16) || w > (1u << 16)) return DataError(where + ": RLE size over 65536");
  inst->runs_h = static_cast<uint32_t>(h);
  inst->runs_w = static_cast<uint32_t>(w);
  if (counts->is_string()) {
    Status st = RunsFromString(counts->get<std::string>(), &inst->runs);
    if (!st.ok()) return DataError(where + ": " + st.message());
  } else if (counts->is_array()) {
    for (const nlohmann::json& c : *counts) {
      if (!c.is_number_unsigned() || c.get<uint64_t>() > 0xffffffffu) {
        return DataError(where + ": RLE counts must be non-negative integers");
      }
      inst->runs.push_back(c.get<uint32_t>());
    }
  } else {
    return DataError(where + ": RLE counts must be a string or a list");
  }
  inst->seg = SegKind::kRuns;
  return Status::OK();
}

Status CheckSegmentSizes(const Instance& inst, const std::string& where) {
  if (inst.seg == SegKind::kRuns) {
    uint64_t total = 0;
    for (uint32_t c : inst.runs) total += c;
    if (total != uint64_t{inst.runs_h} * inst.runs_w) {
      return DataError(where + ": RLE counts add up to " + std::to_string(total) + ", not " +
                       std::to_string(inst.runs_h) + " x " + std::to_string(inst.runs_w));
    }
  }
  return Status::OK();
}

}  // namespace

Result<BoxFormat> BoxFormatFromName(const std::string& name) {
  std::string n = name;
  for (char& c : n) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (n == "XYXY") return BoxFormat::kXYXY;
  if (n == "XYWH") return BoxFormat::kXYWH;
  if (n == "CXCYWH") return BoxFormat::kCXCYWH;
  return InvalidArgument("box format \"" + name + "\" is not one of XYXY, XYWH, CXCYWH");
}

const char* BoxFormatName(BoxFormat f) {
  switch (f) {
    case BoxFormat::kXYXY: return "XYXY";
    case BoxFormat::kXYWH: return "XYWH";
    case BoxFormat::kCXCYWH: return "CXCYWH";
  }
  return "?";
}

std::string RecordHeader(uint32_t count, uint32_t width, uint32_t height) {
  std::string out(kRecordMagic, 4);
  Put<uint32_t>(&out, 1);
  Put<uint32_t>(&out, count);
  Put<uint32_t>(&out, width);
  Put<uint32_t>(&out, height);
  Put<uint32_t>(&out, 0);
  return out;
}

void AppendInstance(const Instance& inst, std::string* rows, std::string* segs) {
  for (float v : inst.box) Put<float>(rows, v);
  Put<int64_t>(rows, inst.label);
  Put<uint32_t>(rows, inst.crowd ? 1 : 0);
  const size_t begin = segs->size();
  if (inst.seg == SegKind::kPolygons) {
    Put<uint32_t>(segs, static_cast<uint32_t>(inst.polygons.size()));
    for (const std::vector<double>& p : inst.polygons) {
      Put<uint32_t>(segs, static_cast<uint32_t>(p.size()));
      segs->append(reinterpret_cast<const char*>(p.data()), p.size() * sizeof(double));
    }
  } else if (inst.seg == SegKind::kRuns) {
    Put<uint32_t>(segs, inst.runs_h);
    Put<uint32_t>(segs, inst.runs_w);
    Put<uint32_t>(segs, static_cast<uint32_t>(inst.runs.size()));
    segs->append(reinterpret_cast<const char*>(inst.runs.data()), inst.runs.size() * sizeof(uint32_t));
  }
  Put<uint32_t>(rows, static_cast<uint32_t>(inst.seg));
  Put<uint32_t>(rows, static_cast<uint32_t>(begin));
  Put<uint32_t>(rows, static_cast<uint32_t>(segs->size() - begin));
}

std::string EncodeTargets(const Targets& t) {
  std::string rows, segs;
  for (const Instance& inst : t.instances) AppendInstance(inst, &rows, &segs);
  return RecordHeader(static_cast<uint32_t>(t.instances.size()), t.width, t.height) + rows + segs;
}

Status DecodeTargets(const uint8_t* data, size_t size, bool with_segments, Targets* out) {
  out->instances.clear();
  out->width = out->height = 0;
  if (size > 0 && data[0] == '{') return ParseTargetsJson(data, size, with_segments, out);
  if (size < kRecordHeaderBytes || std::memcmp(data, kRecordMagic, 4) != 0) {
    return DataError("the annotations are neither nostall's record nor a JSON object");
  }
  if (Get<uint32_t>(data + 4) != 1) return DataError("annotation record of an unknown version");
  const uint32_t n = Get<uint32_t>(data + 8);
  if (n > kMaxAnnotations) {
    return DataError(std::to_string(n) + " annotations, over the limit of " +
                     std::to_string(kMaxAnnotations));
  }
  const size_t table_end = kRecordHeaderBytes + size_t{n} * kRecordBoxBytes;
  if (table_end > size) return DataError("the annotation record is truncated");
  out->width = Get<uint32_t>(data + 12);
  out->height = Get<uint32_t>(data + 16);
  const uint8_t* segs = data + table_end;
  const size_t seg_size = size - table_end;
  out->instances.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    const uint8_t* r = data + kRecordHeaderBytes + size_t{i} * kRecordBoxBytes;
    Instance& inst = out->instances[i];
    std::memcpy(inst.box, r, 16);
    if (!Finite(inst.box)) return DataError(Nth(i) + ": a box coordinate is not finite");
    inst.label = Get<int64_t>(r + 16);
    inst.crowd = Get<uint32_t>(r + 24) != 0;
    const uint32_t kind = Get<uint32_t>(r + 28), off = Get<uint32_t>(r + 32), len = Get<uint32_t>(r + 36);
    if (kind > 2 || off > seg_size || len > seg_size - off) {
      return DataError(Nth(i) + ": its segmentation lies outside the record");
    }
    if (!with_segments || kind == 0) continue;
    const uint8_t* p = segs + off;
    const uint8_t* end = p + len;
    auto take = [&](size_t bytes) { return static_cast<size_t>(end - p) >= bytes; };
    if (kind == 1) {
      if (!take(4)) return DataError(Nth(i) + ": truncated polygons");
      const uint32_t polys = Get<uint32_t>(p);
      p += 4;
      for (uint32_t k = 0; k < polys; ++k) {
        if (!take(4)) return DataError(Nth(i) + ": truncated polygons");
        const uint32_t values = Get<uint32_t>(p);
        p += 4;
        if (!take(size_t{values} * 8)) return DataError(Nth(i) + ": truncated polygons");
        std::vector<double> xy(values);
        if (values > 0) std::memcpy(xy.data(), p, size_t{values} * 8);
        p += size_t{values} * 8;
        for (double v : xy) {
          if (!std::isfinite(v)) return DataError(Nth(i) + ": a polygon coordinate is not finite");
        }
        inst.polygons.push_back(std::move(xy));
      }
      inst.seg = SegKind::kPolygons;
    } else {
      if (!take(12)) return DataError(Nth(i) + ": truncated RLE");
      inst.runs_h = Get<uint32_t>(p);
      inst.runs_w = Get<uint32_t>(p + 4);
      const uint32_t m = Get<uint32_t>(p + 8);
      p += 12;
      if (!take(size_t{m} * 4)) return DataError(Nth(i) + ": truncated RLE");
      inst.runs.resize(m);
      if (m > 0) std::memcpy(inst.runs.data(), p, size_t{m} * 4);
      inst.seg = SegKind::kRuns;
      NOSTALL_RETURN_IF_ERROR(CheckSegmentSizes(inst, Nth(i)));
    }
  }
  return Status::OK();
}

namespace {

// A category id or label: an integer from 0 to 2^63 - 1 (a label of
// 2^64 - 1 would otherwise wrap to -1).
Status LabelOf(const nlohmann::json& v, const std::string& where, int64_t* out) {
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX) ||
      (!v.is_number_unsigned() && v.get<int64_t>() < 0)) {
    return DataError(where + " must be an integer from 0 to 2^63 - 1, not " + Shown(v));
  }
  *out = v.get<int64_t>();
  return Status::OK();
}

Status LabelOf(const nlohmann::json& obj, const char* key, const std::string& where, int64_t* out) {
  const auto v = obj.find(key);
  if (v == obj.end()) return DataError(where + ": \"" + key + "\" must be an integer");
  return LabelOf(*v, where + ": \"" + key + "\"", out);
}

}  // namespace

Status InstanceFromCoco(const nlohmann::json& a, bool with_segments, const std::string& where,
                        Instance* inst) {
  if (!a.is_object()) return DataError(where + ": an annotation must be an object");
  const auto bbox = a.find("bbox");
  float b[4];
  bool ok = bbox != a.end() && bbox->is_array() && bbox->size() == 4;
  for (int k = 0; ok && k < 4; ++k) {
    ok = (*bbox)[k].is_number();
    if (ok) b[k] = static_cast<float>((*bbox)[k].get<double>());
  }
  if (!ok || !Finite(b)) return DataError(where + ": \"bbox\" must be 4 finite numbers [x, y, w, h]");
  inst->box[0] = b[0];
  inst->box[1] = b[1];
  inst->box[2] = b[0] + b[2];
  inst->box[3] = b[1] + b[3];
  if (!Finite(inst->box)) return DataError(where + ": \"bbox\" x + w or y + h is beyond float32's range");
  NOSTALL_RETURN_IF_ERROR(LabelOf(a, "category_id", where, &inst->label));
  if (const auto crowd = a.find("iscrowd"); crowd != a.end()) {
    inst->crowd = crowd->is_number() ? crowd->get<double>() != 0 : crowd->is_boolean() && crowd->get<bool>();
  }
  if (with_segments) {
    if (const auto seg = a.find("segmentation"); seg != a.end() && !seg->is_null()) {
      NOSTALL_RETURN_IF_ERROR(SegmentFromJson(*seg, where, inst));
      NOSTALL_RETURN_IF_ERROR(CheckSegmentSizes(*inst, where));
    }
  }
  return Status::OK();
}

namespace {

Status CheckCount(size_t n) {
  if (n <= kMaxAnnotations) return Status::OK();
  return DataError(std::to_string(n) + " annotations, over the limit of " + std::to_string(kMaxAnnotations));
}

// {"annotations": [COCO annotation, ...]}.
Status CocoListFromJson(const nlohmann::json& anns, bool with_segments, Targets* out) {
  if (!anns.is_array()) return DataError("annotations: \"annotations\" must be a list");
  NOSTALL_RETURN_IF_ERROR(CheckCount(anns.size()));
  for (size_t i = 0; i < anns.size(); ++i) {
    Instance inst;
    NOSTALL_RETURN_IF_ERROR(InstanceFromCoco(anns[i], with_segments, Nth(i), &inst));
    out->instances.push_back(std::move(inst));
  }
  return Status::OK();
}

// Box i, 4 finite numbers in `format`, as x1, y1, x2, y2.
Status BoxFromJson(const nlohmann::json& j, BoxFormat format, size_t i, float box[4]) {
  float b[4];
  bool ok = j.is_array() && j.size() == 4;
  for (int k = 0; ok && k < 4; ++k) {
    ok = j[k].is_number();
    if (ok) b[k] = static_cast<float>(j[k].get<double>());
  }
  if (!ok || !Finite(b)) return DataError("box #" + std::to_string(i) + " must be 4 finite numbers");
  switch (format) {
    case BoxFormat::kXYXY: std::copy(b, b + 4, box); break;
    case BoxFormat::kXYWH: box[0] = b[0], box[1] = b[1], box[2] = b[0] + b[2], box[3] = b[1] + b[3]; break;
    case BoxFormat::kCXCYWH:
      box[0] = b[0] - b[2] / 2, box[1] = b[1] - b[3] / 2;
      box[2] = b[0] + b[2] / 2, box[3] = b[1] + b[3] / 2;
      break;
  }
  if (!Finite(box)) return DataError("box #" + std::to_string(i) + ": its corners are beyond float32's range");
  return Status::OK();
}

// A list beside "boxes" (labels, iscrowd, segmentation): absent, or one per box.
Status Beside(const nlohmann::json& j, const char* key, size_t boxes, const nlohmann::json** out) {
  const auto it = j.find(key);
  *out = it == j.end() ? nullptr : &*it;
  if (*out != nullptr && (!(*out)->is_array() || (*out)->size() != boxes)) {
    return DataError(std::string("annotations: \"") + key + "\" must be a list as long as \"boxes\"");
  }
  return Status::OK();
}

// {"boxes": [[...], ...], "format", "labels", "iscrowd", "segmentation"}.
Status BoxListFromJson(const nlohmann::json& j, const nlohmann::json& boxes, bool with_segments, Targets* out) {
  if (!boxes.is_array()) return DataError("the annotations JSON has neither \"annotations\" nor \"boxes\"");
  NOSTALL_RETURN_IF_ERROR(CheckCount(boxes.size()));
  BoxFormat format = BoxFormat::kXYXY;
  if (const auto f = j.find("format"); f != j.end()) {
    if (!f->is_string()) return DataError("annotations: \"format\" must be a string");
    Result<BoxFormat> r = BoxFormatFromName(f->get<std::string>());
    if (!r.ok()) return DataError("annotations: " + r.status().message());
    format = *r;
  }
  const nlohmann::json *labels, *crowds, *segs = nullptr;
  NOSTALL_RETURN_IF_ERROR(Beside(j, "labels", boxes.size(), &labels));
  NOSTALL_RETURN_IF_ERROR(Beside(j, "iscrowd", boxes.size(), &crowds));
  if (with_segments) NOSTALL_RETURN_IF_ERROR(Beside(j, "segmentation", boxes.size(), &segs));
  for (size_t i = 0; i < boxes.size(); ++i) {
    Instance inst;
    NOSTALL_RETURN_IF_ERROR(BoxFromJson(boxes[i], format, i, inst.box));
    if (labels != nullptr) NOSTALL_RETURN_IF_ERROR(LabelOf((*labels)[i], "label #" + std::to_string(i), &inst.label));
    if (crowds != nullptr) inst.crowd = (*crowds)[i].is_number() && (*crowds)[i].get<double>() != 0;
    if (segs != nullptr && !(*segs)[i].is_null()) {
      NOSTALL_RETURN_IF_ERROR(SegmentFromJson((*segs)[i], Nth(i), &inst));
      NOSTALL_RETURN_IF_ERROR(CheckSegmentSizes(inst, Nth(i)));
    }
    out->instances.push_back(std::move(inst));
  }
  return Status::OK();
}

}  // namespace

Status ParseTargetsJson(const uint8_t* data, size_t size, bool with_segments, Targets* out) {
  out->instances.clear();
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return DataError("the annotations are not a JSON object");
  for (auto [key, v] : {std::pair{"width", &out->width}, std::pair{"height", &out->height}}) {
    const auto it = j.find(key);
    if (it == j.end()) continue;
    if (!it->is_number_unsigned() || it->get<uint64_t>() > (1u << 20)) {
      return DataError(std::string("annotations: \"") + key + "\" must be a pixel count");
    }
    *v = it->get<uint32_t>();
  }
  if (const auto anns = j.find("annotations"); anns != j.end()) return CocoListFromJson(*anns, with_segments, out);
  const auto boxes = j.find("boxes");
  if (boxes == j.end()) return DataError("the annotations JSON has neither \"annotations\" nor \"boxes\"");
  return BoxListFromJson(j, *boxes, with_segments, out);
}

Status RunsFromString(const std::string& s, std::vector<uint32_t>* counts) {
  counts->clear();
  size_t p = 0;
  while (p < s.size()) {
    int64_t x = 0;
    int k = 0;
    bool more = true;
    while (more) {
      if (p >= s.size()) return DataError("RLE string ends inside a count");
      const int c = static_cast<unsigned char>(s[p]) - 48;
      if (c < 0 || c > 63) return DataError("RLE string holds a character outside '0'..'o'");
      if (k >= 7) return DataError("RLE string holds a count over 32 bits");
      x |= static_cast<int64_t>(c & 0x1f) << (5 * k);
      more = (c & 0x20) != 0;
      ++p;
      ++k;
      if (!more && (c & 0x10)) x |= -(int64_t{1} << (5 * k));
    }
    if (counts->size() > 2) x += (*counts)[counts->size() - 2];
    if (x < 0 || x > 0xffffffffLL) return DataError("RLE string holds a negative or huge count");
    counts->push_back(static_cast<uint32_t>(x));
  }
  return Status::OK();
}

namespace {

// One polygon's column-major runs on an h x w grid: the boundary walked at
// 5x resolution, its crossings of pixel columns kept, the cells between
// crossings filled. This is pycocotools' rasteriser (rleFrPoly), so masks
// equal those its frPyObjects gives the same polygon.
Status PolygonRuns(const std::vector<double>& xy, uint32_t h, uint32_t w, std::vector<uint32_t>* out) {
  const double scale = 5;
  const size_t k = xy.size() / 2;
  std::vector<int> x(k + 1), y(k + 1);
  // The boundary is walked point by point at 5x: a vertex far outside the
  // image would make that walk (and its memory) huge.
  const double lim_x = 4.0 * w + 16, lim_y = 4.0 * h + 16;
  for (size_t j = 0; j < k; ++j) {
    if (std::abs(xy[2 * j]) > lim_x || std::abs(xy[2 * j + 1]) > lim_y) {
      return DataError("a polygon point (" + std::to_string(xy[2 * j]) + ", " + std::to_string(xy[2 * j + 1]) +
                       ") lies far outside the " + std::to_string(w) + "x" + std::to_string(h) + " image");
    }
    x[j] = static_cast<int>(scale * xy[2 * j] + .5);
    y[j] = static_cast<int>(scale * xy[2 * j + 1] + .5);
  }
  x[k] = x[0];
  y[k] = y[0];
  uint64_t walk = 0;
  for (size_t j = 0; j < k; ++j) walk += std::max(std::abs(x[j] - x[j + 1]), std::abs(y[j] - y[j + 1])) + 1;
  if (walk > (uint64_t{1} << 25)) return DataError("a polygon's boundary is over 2^25 points long");
  std::vector<int> u, v;  // the boundary's points at 5x
  for (size_t j = 0; j < k; ++j) {
    int xs = x[j], xe = x[j + 1], ys = y[j], ye = y[j + 1];
    const int dx = std::abs(xe - xs), dy = std::abs(ys - ye);
    const bool flip = (dx >= dy && xs > xe) || (dx < dy && ys > ye);
    if (flip) {
      std::swap(xs, xe);
      std::swap(ys, ye);
    }
    if (dx >= dy) {
      const double s = dx == 0 ? 0 : static_cast<double>(ye - ys) / dx;
      for (int d = 0; d <= dx; ++d) {
        const int t = flip ? dx - d : d;
        u.push_back(t + xs);
        v.push_back(static_cast<int>(ys + s * t + .5));
      }
    } else {
      const double s = static_cast<double>(xe - xs) / dy;
      for (int d = 0; d <= dy; ++d) {
        const int t = flip ? dy - d : d;
        v.push_back(t + ys);
        u.push_back(static_cast<int>(xs + s * t + .5));
      }
    }
  }
  // Where the boundary crosses a pixel column's centre, downsampled.
  std::vector<uint32_t> a;
  for (size_t j = 1; j < u.size(); ++j) {
    if (u[j] == u[j - 1]) continue;
    double xd = u[j] < u[j - 1] ? u[j] : u[j] - 1;
    xd = (xd + .5) / scale - .5;
    if (std::floor(xd) != xd || xd < 0 || xd > static_cast<double>(w) - 1) continue;
    double yd = v[j] < v[j - 1] ? v[j] : v[j - 1];
    yd = (yd + .5) / scale - .5;
    yd = std::ceil(std::clamp(yd, 0.0, static_cast<double>(h)));
    a.push_back(static_cast<uint32_t>(static_cast<int64_t>(xd) * h + static_cast<int64_t>(yd)));
  }
  a.push_back(h * w);
  std::sort(a.begin(), a.end());
  uint32_t prev = 0;
  for (uint32_t& e : a) {
    const uint32_t t = e;
    e -= prev;
    prev = t;
  }
  // Zero-length runs merge their neighbours.
  std::vector<uint32_t>& runs = *out;
  runs.clear();
  size_t j = 0;
  runs.push_back(a[j++]);
  while (j < a.size()) {
    if (a[j] > 0) {
      runs.push_back(a[j++]);
    } else {
      ++j;
      if (j < a.size()) runs.back() += a[j++];
    }
  }
  return Status::OK();
}

// ORs column-major runs into a row-major h x w mask.
void PaintRuns(const std::vector<uint32_t>& runs, uint32_t h, uint32_t w, uint8_t* mask) {
  uint64_t at = 0;
  const uint64_t total = uint64_t{h} * w;
  bool on = false;
  for (uint32_t c : runs) {
    if (on) {
      for (uint64_t t = at; t < std::min(at + c, total); ++t) mask[(t % h) * w + t / h] = 1;
    }
    at += c;
    on = !on;
  }
}

}  // namespace

Status RasterizeInstance(const Instance& inst, uint32_t h, uint32_t w, std::vector<uint8_t>* mask) {
  mask->assign(size_t{h} * w, 0);
  if (h == 0 || w == 0) return Status::OK();
  if (inst.seg == SegKind::kRuns) {
    if (inst.runs_h != h || inst.runs_w != w) {
      return DataError("an RLE mask of " + std::to_string(inst.runs_h) + " x " +
                       std::to_string(inst.runs_w) + " on a " + std::to_string(h) + " x " +
                       std::to_string(w) + " image");
    }
    uint64_t total = 0;
    for (uint32_t c : inst.runs) total += c;
    if (total != uint64_t{h} * w) return DataError("RLE counts do not add up to the image's pixels");
    PaintRuns(inst.runs, h, w, mask->data());
  } else if (inst.seg == SegKind::kPolygons) {
    std::vector<uint32_t> runs;
    for (const std::vector<double>& p : inst.polygons) {
      if (p.size() < 6) continue;  // under 3 points: no area
      NOSTALL_RETURN_IF_ERROR(PolygonRuns(p, h, w, &runs));
      PaintRuns(runs, h, w, mask->data());
    }
  }
  return Status::OK();
}

size_t OutputBytes(uint32_t count, uint32_t mask_h, uint32_t mask_w) {
  const size_t pad8 = (size_t{count} + 7) / 8 * 8;
  const size_t mask = (uint64_t{mask_h} * mask_w + 63) / 64 * 8;
  return kOutputHeaderBytes + size_t{count} * 16 + size_t{count} * 8 + pad8 + size_t{count} * mask;
}

}  // namespace nostall::annotations
