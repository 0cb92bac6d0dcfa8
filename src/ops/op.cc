// OpArgs and the op registry.
#include "ops/op.h"

#include "nostall/transforms.h"

#include <algorithm>
#include <cmath>

namespace nostall {

using json = nlohmann::json;

namespace {
std::string Shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}
bool IsNumber(const json& v) { return v.is_number() && std::isfinite(v.get<double>()); }
}  // namespace

Status OpArgs::Error(const std::string& msg) const { return InvalidArgument(where_ + msg); }

const json* OpArgs::Raw(const char* key) {
  known_.push_back(key);
  if (!j_.contains(key) || j_[key].is_null()) return nullptr;
  return &j_[key];
}

Status OpArgs::Double(const char* key, double def, double lo, double hi, double* out) {
  const json* v = Raw(key);
  *out = def;
  if (v != nullptr) {
    if (!IsNumber(*v)) return Error(std::string(key) + " must be a number, not " + Shown(*v));
    *out = v->get<double>();
  }
  if (!(*out >= lo && *out <= hi)) {
    return Error(std::string(key) + " must be in [" + json(lo).dump() + ", " + json(hi).dump() +
                 "], not " + json(*out).dump());
  }
  Record(key, *out);
  return Status::OK();
}

Status OpArgs::Int(const char* key, int64_t def, int64_t lo, int64_t hi, int* out) {
  const json* v = Raw(key);
  int64_t x = def;
  if (v != nullptr) {
    if (!v->is_number_integer()) return Error(std::string(key) + " must be an integer, not " + Shown(*v));
    x = v->get<int64_t>();
  }
  if (x < lo || x > hi) {
    return Error(std::string(key) + " must be in [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "], not " + std::to_string(x));
  }
  *out = static_cast<int>(x);
  Record(key, x);
  return Status::OK();
}

Status OpArgs::Bool(const char* key, bool def, bool* out) {
  const json* v = Raw(key);
  *out = def;
  if (v != nullptr) {
    if (!v->is_boolean()) return Error(std::string(key) + " must be true or false, not " + Shown(*v));
    *out = v->get<bool>();
  }
  Record(key, *out);
  return Status::OK();
}

Status OpArgs::Range(const char* key, double center, double lo, double hi, double* min,
                     double* max, bool* present) {
  const json* v = Raw(key);
  *min = *max = 0;
  *present = false;
  if (v == nullptr) {
    Record(key, nullptr);
    return Status::OK();
  }
  if (IsNumber(*v)) {
    const double x = v->get<double>();
    if (x < 0) return Error(std::string(key) + " must be non-negative, not " + Shown(*v));
    *min = std::max(center - x, lo);
    *max = center + x;
  } else if (v->is_array() && v->size() == 2 && IsNumber((*v)[0]) && IsNumber((*v)[1])) {
    *min = (*v)[0].get<double>();
    *max = (*v)[1].get<double>();
  } else {
    return Error(std::string(key) + " must be a number or [min, max], not " + Shown(*v));
  }
  if (!(lo <= *min && *min <= *max && *max <= hi)) {
    return Error(std::string(key) + " values should be between " + json(lo).dump() + " and " +
                 json(hi).dump() + " with min <= max, not " + Shown(*v));
  }
  // torchvision: a range that is just the centre does nothing.
  *present = !(*min == center && *max == center);
  Record(key, *present ? json::array({*min, *max}) : json(nullptr));
  return Status::OK();
}

Status OpArgs::Pair(const char* key, double def_min, double def_max, double lo, double hi,
                    double* min, double* max) {
  const json* v = Raw(key);
  *min = def_min;
  *max = def_max;
  if (v != nullptr) {
    if (!(v->is_array() && v->size() == 2 && IsNumber((*v)[0]) && IsNumber((*v)[1]))) {
      return Error(std::string(key) + " must be [min, max], not " + Shown(*v));
    }
    *min = (*v)[0].get<double>();
    *max = (*v)[1].get<double>();
  }
  if (!(lo <= *min && *min <= *max && *max <= hi)) {
    return Error(std::string(key) + " must satisfy " + json(lo).dump() + " <= min <= max <= " +
                 json(hi).dump() + ", not [" + json(*min).dump() + ", " + json(*max).dump() + "]");
  }
  Record(key, json::array({*min, *max}));
  return Status::OK();
}

Status OpArgs::Fill(const char* key, std::vector<double>* out) {
  const json* v = Raw(key);
  out->clear();
  if (v != nullptr) {
    if (IsNumber(*v)) {
      out->push_back(v->get<double>());
    } else if (v->is_array() && (v->size() == 1 || v->size() == 3) &&
               std::all_of(v->begin(), v->end(), IsNumber)) {
      for (const json& x : *v) out->push_back(x.get<double>());
    } else {
      return Error(std::string(key) + " must be a number or one per channel, not " + Shown(*v));
    }
  }
  for (double x : *out) {
    if (!(x >= 0 && x <= 255)) return Error(std::string(key) + " values must be in [0, 255]");
  }
  Record(key, out->empty() ? json(nullptr) : json(*out));
  return Status::OK();
}

Status OpArgs::Interpolation(const char* key, bool* bilinear) {
  std::string s;
  NOSTALL_RETURN_IF_ERROR(String(key, "nearest", {"nearest", "bilinear"}, &s));
  *bilinear = s == "bilinear";
  return Status::OK();
}

Status OpArgs::String(const char* key, const char* def, std::initializer_list<const char*> allowed,
                      std::string* out) {
  const json* v = Raw(key);
  *out = def;
  if (v != nullptr) {
    if (!v->is_string()) return Error(std::string(key) + " must be a string, not " + Shown(*v));
    *out = v->get<std::string>();
  }
  std::string names;
  for (const char* a : allowed) {
    if (*out == a) {
      Record(key, *out);
      return Status::OK();
    }
    names += std::string(names.empty() ? "" : ", ") + a;
  }
  return Error(std::string(key) + " must be one of " + names + ", not \"" + *out + "\"");
}

Status OpArgs::CheckNoOthers() const {
  for (const auto& [key, _] : j_.items()) {
    if (std::find(known_.begin(), known_.end(), key) == known_.end()) {
      std::string allowed;
      for (size_t i = 1; i < known_.size(); ++i) allowed += (i > 1 ? ", " : "") + known_[i];
      return Error("unknown argument '" + key + "' (it takes: " +
                   (allowed.empty() ? "nothing" : allowed) + ")");
    }
  }
  return Status::OK();
}

namespace {
struct OpEntry {
  const char* name;
  OpFactory make;
  const char* doc;
};
const std::vector<OpEntry>& Registry() {
#define NOSTALL_IMAGE_OP_ENTRY(name, doc) OpEntry{#name, &Make##name, doc},
  static const std::vector<OpEntry> ops = {NOSTALL_IMAGE_OPS(NOSTALL_IMAGE_OP_ENTRY)};
#undef NOSTALL_IMAGE_OP_ENTRY
  return ops;
}
}  // namespace

OpFactory FindImageOp(const std::string& type) {
  for (const OpEntry& e : Registry()) {
    if (type == e.name) return e.make;
  }
  return nullptr;
}

const char* ImageOpDoc(const std::string& type) {
  for (const OpEntry& e : Registry()) {
    if (type == e.name) return e.doc;
  }
  return "";
}

std::string ImageOpNames() {
  std::string names;
  for (const OpEntry& e : Registry()) names += std::string(names.empty() ? "" : ", ") + e.name;
  return names;
}

}  // namespace nostall
