// COCO's instances file, streamed into nostall's table (coco.h).
#include "annotations/coco.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "annotations/bytes.h"
#include "annotations/targets.h"
#include "common/fd.h"
#include "common/json_fields.h"

namespace nostall::annotations {
namespace {

using json = nlohmann::json;

// Hands each element of the top-level arrays "images", "annotations" and
// "categories" to `on_element` as a small JSON value, one at a time; every
// other top-level member is read past without being kept.
class SectionReader : public nlohmann::json_sax<json> {
 public:
  std::function<Status(const std::string&, json&)> on_element;
  Status status;
  std::string error;

  bool null() override { return Value(json(nullptr)); }
  bool boolean(bool v) override { return Value(json(v)); }
  bool number_integer(number_integer_t v) override { return Value(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Value(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return Value(json(v)); }
  bool string(string_t& v) override { return Value(json(std::move(v))); }
  bool binary(binary_t&) override { return Value(json(nullptr)); }
  bool key(string_t& k) override {
    if (depth_ == 1) section_ = k;
    key_ = std::move(k);
    return true;
  }
  bool start_object(std::size_t) override { return Open(json::object()); }
  bool start_array(std::size_t) override { return Open(json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) override {
    error = "not valid JSON at byte " + std::to_string(pos) + ": " + e.what();
    return false;
  }

 private:
  bool Collecting() const { return depth_ >= 2 && Kept(section_); }
  static bool Kept(const std::string& s) {
    return s == "images" || s == "annotations" || s == "categories";
  }
  bool Open(json v) {
    ++depth_;
    if (depth_ == 1 && !v.is_object()) {
      error = "the top level is not a JSON object";
      return false;
    }
    if (depth_ == 2 && Kept(section_) && !v.is_array()) {
      error = "\"" + section_ + "\" is not a list";
      return false;
    }
    if (depth_ >= 3 && Kept(section_)) {
      if (stack_.empty()) {
        element_ = std::move(v);
        stack_.push_back(&element_);
      } else {
        stack_.push_back(Add(std::move(v)));
      }
    }
    return true;
  }
  bool Close() {
    if (depth_ >= 3 && Kept(section_)) {
      stack_.pop_back();
      if (stack_.empty()) {
        status = on_element(section_, element_);
        element_ = json();
        if (!status.ok()) return false;
      }
    }
    --depth_;
    return true;
  }
  bool Value(json v) {
    if (depth_ == 2 && Kept(section_)) {  // a bare value in a section's list
      error = "an element of \"" + section_ + "\" is not an object";
      return false;
    }
    if (!stack_.empty()) Add(std::move(v));
    return true;
  }
  json* Add(json v) {
    json* top = stack_.back();
    if (top->is_object()) return &((*top)[key_] = std::move(v));
    top->push_back(std::move(v));
    return &top->back();
  }

  int depth_ = 0;
  std::string section_, key_;
  json element_;
  std::vector<json*> stack_;
};

std::string Named(const char* what, const json& obj) {
  const auto id = obj.find("id");
  return std::string(what) + (id != obj.end() && id->is_number() ? " id " + id->dump() : " (no id)");
}

// An annotation's boxes and segments so far, per image id.
struct Pending {
  std::string boxes, segs;
  uint32_t count = 0;
};

Status AddAnnotation(const json& a, const CocoOptions& options,
                     std::unordered_map<int64_t, Pending>* pending) {
  const std::string where = Named("annotation", a);
  const auto image_id = a.find("image_id");
  if (image_id == a.end() || !image_id->is_number_integer()) {
    return DataError(where + ": \"image_id\" must be an integer");
  }
  Instance inst;
  NOSTALL_RETURN_IF_ERROR(InstanceFromCoco(a, options.segmentation, where, &inst));
  if (inst.crowd && !options.keep_crowd) return Status::OK();
  Pending& p = (*pending)[image_id->get<int64_t>()];
  if (p.count >= kMaxAnnotations) {
    return DataError(where + ": image " + image_id->dump() + " has over " +
                     std::to_string(kMaxAnnotations) + " annotations");
  }
  AppendInstance(inst, &p.boxes, &p.segs);
  ++p.count;
  return Status::OK();
}

// One element of "images": its id, file name (inside the image folder) and size.
Status ImageFromJson(const json& obj, int64_t id, CocoImage* img) {
  img->id = id;
  const auto file = obj.find("file_name");
  if (file == obj.end() || !file->is_string() || file->get<std::string>().empty()) {
    return DataError(Named("image", obj) + ": \"file_name\" must be a non-empty string");
  }
  img->file_name = file->get<std::string>();
  const std::string& f = img->file_name;
  if (f.find('\0') != std::string::npos || f[0] == '/' || f == ".." || f.rfind("../", 0) == 0 ||
      f.find("/../") != std::string::npos) {
    return DataError(Named("image", obj) + ": file_name \"" + f + "\" leads out of the image folder");
  }
  for (const char* k : {"width", "height"}) {
    const auto v = obj.find(k);
    if (v != obj.end() && (!v->is_number_unsigned() || v->get<uint64_t>() > (1u << 20))) {
      return DataError(Named("image", obj) + ": \"" + k + "\" must be a pixel count");
    }
    if (v != obj.end()) (k[0] == 'w' ? img->width : img->height) = v->get<uint32_t>();
  }
  return Status::OK();
}

// The images sorted by id, each with its record of annotations; the ones
// without any dropped unless kept.
void Finish(std::unordered_map<int64_t, Pending>& pending, const CocoOptions& options, CocoTable* table) {
  std::sort(table->images.begin(), table->images.end(),
            [](const CocoImage& a, const CocoImage& b) { return a.id < b.id; });
  std::sort(table->categories.begin(), table->categories.end());
  std::vector<CocoImage> kept;
  kept.reserve(table->images.size());
  for (CocoImage& img : table->images) {
    const auto it = pending.find(img.id);
    Pending empty;
    const Pending& p = it == pending.end() ? empty : it->second;
    if (p.count == 0 && !options.keep_empty) {
      ++table->dropped_empty;
      continue;
    }
    std::string rec = RecordHeader(p.count, img.width, img.height);
    rec += p.boxes;
    rec += p.segs;
    img.record = std::move(rec);
    img.count = p.count;
    kept.push_back(std::move(img));
  }
  table->images = std::move(kept);
}

Result<CocoTable> Parse(const char* begin, const char* end, const CocoOptions& options,
                        const std::string& name) {
  CocoTable table;
  std::unordered_map<int64_t, Pending> pending;
  std::unordered_map<int64_t, size_t> image_at;
  SectionReader reader;
  reader.on_element = [&](const std::string& section, json& obj) -> Status {
    if (!obj.is_object()) return DataError("an element of \"" + section + "\" is not an object");
    if (section == "annotations") {
      ++table.annotations;
      return AddAnnotation(obj, options, &pending);
    }
    const auto id = obj.find("id");
    if (id == obj.end() || !id->is_number_integer()) {
      return DataError(std::string(section == "images" ? "an image" : "a category") +
                       " has no integer \"id\"");
    }
    if (section == "categories") {
      const auto cat_name = obj.find("name");
      if (cat_name != obj.end() && !cat_name->is_string()) {
        return DataError(Named("category", obj) + ": \"name\" must be a string, not " +
                         Shown(*cat_name));
      }
      table.categories.push_back(
          {id->get<int64_t>(), cat_name == obj.end() ? std::string() : cat_name->get<std::string>()});
      return Status::OK();
    }
    CocoImage img;
    NOSTALL_RETURN_IF_ERROR(ImageFromJson(obj, id->get<int64_t>(), &img));
    if (!image_at.emplace(img.id, table.images.size()).second) {
      return DataError(Named("image", obj) + " is listed twice");
    }
    table.images.push_back(std::move(img));
    return Status::OK();
  };
  const bool ok = json::sax_parse(begin, end, &reader);
  if (!reader.status.ok()) return DataError(name + ": " + reader.status.message());
  if (!ok) return DataError(name + ": " + (reader.error.empty() ? "not a COCO annotation file" : reader.error));
  if (table.images.empty() && table.annotations == 0) {
    return DataError(name + ": no \"images\" and no \"annotations\": not a COCO instances file");
  }
  for (const auto& [image_id, p] : pending) {
    if (image_at.count(image_id) == 0) {
      return DataError(name + ": annotations of image id " + std::to_string(image_id) +
                       ", which \"images\" does not list");
    }
  }
  Finish(pending, options, &table);
  return table;
}

constexpr char kTableMagic[8] = {'N', 'S', 'C', 'O', 'C', 'O', '2', '\0'};
// Header: magic, source size, mtime, options hash, count, categories,
// max count, 0, max record, dropped empty, records hash (72), table hash (80).
constexpr size_t kTableHeader = kCocoHeaderBytes;
// u64 name at, u32 name bytes, u32 count, u64 record at, u64 record bytes, i64 image id
constexpr size_t kTableRow = kCocoTableRowBytes;

uint64_t KeyHash(std::string_view s) { return CocoHash(s); }

}  // namespace

uint64_t CocoHash(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

uint64_t CocoTableHash(std::string_view bytes) {
  // The rows, then the names and the categories, each after its length.
  const auto* b = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < kTableHeader) return 0;
  const uint64_t count = Get<uint64_t>(b + 32);
  size_t at = kTableHeader;
  if (count > (bytes.size() - at) / kTableRow) return 0;
  at += count * kTableRow;
  for (int part = 0; part < 2; ++part) {
    if (bytes.size() - at < 8) return 0;
    const uint64_t len = Get<uint64_t>(b + at);
    at += 8;
    if (len > bytes.size() - at) return 0;
    at += len;
  }
  return CocoHash(bytes.substr(kTableHeader, at - kTableHeader)) | 1;  // never 0
}

Result<CocoTable> ParseCocoBytes(std::string_view json_text, const CocoOptions& options,
                                 const std::string& name) {
  return Parse(json_text.data(), json_text.data() + json_text.size(), options, name);
}

Result<CocoTable> ParseCocoFile(const std::string& path, const CocoOptions& options,
                                const std::function<void(uint64_t)>& progress) {
  uint64_t size = 0;
  NOSTALL_ASSIGN_OR_RETURN(UniqueFd fd, OpenReadOnly(path, &size));
  if (size == 0) return DataError(path + ": the annotation file is empty");
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (addr == MAP_FAILED) return ErrnoError("cannot map " + path, errno);
  ::madvise(addr, size, MADV_SEQUENTIAL);
  Mapping map(addr, size);
  const char* p = static_cast<const char*>(map.data());
  Result<CocoTable> table = Parse(p, p + size, options, path);
  if (progress) progress(size);
  return table;
}

std::string SerializeCoco(const CocoTable& table, uint64_t source_size, int64_t source_mtime_ns,
                          const std::string& options_key) {
  std::string names, records, cats;
  std::string rows;
  uint32_t max_count = 0;
  uint64_t max_record = 0;
  for (const CocoImage& img : table.images) {
    Put<uint64_t>(&rows, names.size());
    Put<uint32_t>(&rows, static_cast<uint32_t>(img.file_name.size()));
    Put<uint32_t>(&rows, img.count);
    Put<uint64_t>(&rows, records.size());
    Put<uint64_t>(&rows, img.record.size());
    Put<int64_t>(&rows, img.id);
    names += img.file_name;
    records += img.record;
    max_count = std::max(max_count, img.count);
    max_record = std::max<uint64_t>(max_record, img.record.size());
  }
  for (const auto& [id, name] : table.categories) {
    Put<int64_t>(&cats, id);
    Put<uint32_t>(&cats, static_cast<uint32_t>(name.size()));
    cats += name;
  }
  std::string out(kTableMagic, 8);
  Put<uint64_t>(&out, source_size);
  Put<int64_t>(&out, source_mtime_ns);
  Put<uint64_t>(&out, KeyHash(options_key));
  Put<uint64_t>(&out, table.images.size());
  Put<uint64_t>(&out, table.categories.size());
  Put<uint32_t>(&out, max_count);
  Put<uint32_t>(&out, 0);
  Put<uint64_t>(&out, max_record);
  Put<int64_t>(&out, table.dropped_empty);
  Put<uint64_t>(&out, CocoHash(records));
  Put<uint64_t>(&out, 0);  // the table hash, set below
  out.reserve(out.size() + rows.size() + names.size() + cats.size() + records.size() + 16);
  out += rows;
  Put<uint64_t>(&out, names.size());
  out += names;
  Put<uint64_t>(&out, cats.size());
  out += cats;
  out += records;
  const uint64_t hash = CocoTableHash(out);
  std::memcpy(out.data() + kTableHeader - 8, &hash, 8);
  return out;
}

Result<CocoView> CocoView::Open(std::string_view bytes, uint64_t source_size, int64_t source_mtime_ns,
                                const std::string& options_key) {
  auto bad = [](const std::string& why) { return DataError("annotation table: " + why); };
  const auto* b = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < kTableHeader || std::memcmp(b, kTableMagic, 8) != 0) return bad("not one");
  if (Get<uint64_t>(b + 8) != source_size || Get<int64_t>(b + 16) != source_mtime_ns ||
      Get<uint64_t>(b + 24) != KeyHash(options_key)) {
    return bad("stale");
  }
  // Checked as a whole: the file is this user's own, but a torn or
  // damaged one is rebuilt, never read past.
  const uint64_t table_hash = CocoTableHash(bytes);
  if (table_hash == 0 || table_hash != Get<uint64_t>(b + kTableHeader - 8)) return bad("damaged");
  CocoView v;
  v.bytes_ = bytes;
  v.count_ = Get<uint64_t>(b + 32);
  const uint64_t ncat = Get<uint64_t>(b + 40);
  v.max_count_ = Get<uint32_t>(b + 48);
  v.max_record_ = Get<uint64_t>(b + 56);
  v.dropped_empty_ = Get<int64_t>(b + 64);
  v.fingerprint_ = Get<uint64_t>(b + 72) ^ table_hash;
  size_t at = kTableHeader;
  if (v.count_ > (bytes.size() - at) / kTableRow) return bad("truncated");
  v.table_ = b + at;
  at += v.count_ * kTableRow;
  if (bytes.size() - at < 8) return bad("truncated");
  const uint64_t names = Get<uint64_t>(b + at);
  at += 8;
  if (names > bytes.size() - at) return bad("truncated");
  const size_t names_at = at;
  at += names;
  if (bytes.size() - at < 8) return bad("truncated");
  const uint64_t cats = Get<uint64_t>(b + at);
  at += 8;
  if (cats > bytes.size() - at) return bad("truncated");
  for (size_t c = at, k = 0; k < ncat; ++k) {
    if (at + cats - c < 12) return bad("truncated");
    const int64_t id = Get<int64_t>(b + c);
    const uint32_t len = Get<uint32_t>(b + c + 8);
    c += 12;
    if (len > at + cats - c) return bad("truncated");
    v.categories_.push_back({id, std::string(bytes.substr(c, len))});
    c += len;
  }
  at += cats;
  const size_t records_at = at;
  for (size_t i = 0; i < v.count_; ++i) {
    const uint8_t* row = v.table_ + i * kTableRow;
    if (Get<uint64_t>(row) + Get<uint32_t>(row + 8) > names ||
        Get<uint64_t>(row + 16) + Get<uint64_t>(row + 24) > bytes.size() - records_at) {
      return bad("an entry lies outside it");
    }
  }
  v.names_at_ = names_at;
  v.records_at_ = records_at;
  return v;
}

std::string_view CocoView::file_name(size_t i) const {
  const uint8_t* row = table_ + i * kTableRow;
  return bytes_.substr(names_at_ + Get<uint64_t>(row), Get<uint32_t>(row + 8));
}

std::string_view CocoView::record(size_t i) const {
  const uint8_t* row = table_ + i * kTableRow;
  return bytes_.substr(records_at_ + Get<uint64_t>(row + 16), Get<uint64_t>(row + 24));
}

uint32_t CocoView::count(size_t i) const { return Get<uint32_t>(table_ + i * kTableRow + 12); }

int64_t CocoView::image_id(size_t i) const { return Get<int64_t>(table_ + i * kTableRow + 32); }

bool CocoView::image_size(size_t i, uint32_t* width, uint32_t* height) const {
  const std::string_view rec = record(i);
  if (rec.size() < kRecordHeaderBytes || std::memcmp(rec.data(), kRecordMagic, 4) != 0) return false;
  const auto* p = reinterpret_cast<const uint8_t*>(rec.data());
  *width = Get<uint32_t>(p + 12);
  *height = Get<uint32_t>(p + 16);
  return *width > 0 && *height > 0;
}

}  // namespace nostall::annotations
