// OpArgs and the op registry.
#include "ops/op.h"

#include "nostall/transforms.h"

#include <algorithm>
#include <cmath>

namespace nostall {

using json = nlohmann::json;

namespace {
bool IsNumber(const json& v) { return v.is_number() && std::isfinite(v.get<double>()); }
// A bound as a person writes it: 1, not 1.0; inf for no bound.
std::string Num(double v) {
  if (!std::isfinite(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return json(v).dump();
}
}  // namespace

Status OpArgs::Error(const std::string& msg) const { return InvalidArgument(where_ + msg); }

Status OpArgs::Arg(const char* key, ArgType type, const ArgSchema** arg, const json** v) {
  *arg = schema_.Find(key);
  if (*arg == nullptr || (*arg)->type != type) {
    return Internal(where_ + "reads '" + key + "', which its schema does not declare so");
  }
  *v = (j_.contains(key) && !j_[key].is_null()) ? &j_[key] : nullptr;
  if (*v == nullptr && (*arg)->required) return Error(std::string("needs ") + key);
  return Status::OK();
}

Status OpArgs::Raw(const char* key, const json** out) {
  const ArgSchema* a = nullptr;
  return Arg(key, ArgType::kAny, &a, out);
}

Status OpArgs::Double(const char* key, double* out) {
  const ArgSchema* a = nullptr;
  const json* v = nullptr;
  NOSTALL_RETURN_IF_ERROR(Arg(key, ArgType::kFloat, &a, &v));
  if (v != nullptr && !IsNumber(*v)) return Error(std::string(key) + " must be a number, not " + Shown(*v));
  *out = v != nullptr ? v->get<double>() : a->def.get<double>();
  if (!(*out >= a->lo && *out <= a->hi)) {
    return Error(std::string(key) + " must be in [" + Num(a->lo) + ", " + Num(a->hi) + "], not " +
                 Num(*out));
  }
  Record(key, *out);
  return Status::OK();
}

Status OpArgs::Int(const char* key, int* out) {
  const ArgSchema* a = nullptr;
  const json* v = nullptr;
  NOSTALL_RETURN_IF_ERROR(Arg(key, ArgType::kInt, &a, &v));
  if (v != nullptr && !v->is_number_integer()) {
    return Error(std::string(key) + " must be an integer, not " + Shown(*v));
  }
  const int64_t x = v != nullptr ? v->get<int64_t>() : a->def.get<int64_t>();
  if (x < a->lo || x > a->hi) {
    return Error(std::string(key) + " must be in [" + std::to_string(static_cast<int64_t>(a->lo)) +
                 ", " + std::to_string(static_cast<int64_t>(a->hi)) + "], not " + std::to_string(x));
  }
  *out = static_cast<int>(x);
  Record(key, x);
  return Status::OK();
}

Status OpArgs::Bool(const char* key, bool* out) {
  const ArgSchema* a = nullptr;
  const json* v = nullptr;
  NOSTALL_RETURN_IF_ERROR(Arg(key, ArgType::kBool, &a, &v));
  if (v != nullptr && !v->is_boolean()) {
    return Error(std::string(key) + " must be true or false, not " + Shown(*v));
  }
  *out = v != nullptr ? v->get<bool>() : a->def.get<bool>();
  Record(key, *out);
  return Status::OK();
}

Status OpArgs::Range(const char* key, double* min, double* max, bool* present) {
  const ArgSchema* a = nullptr;
  const json* v = nullptr;
  NOSTALL_RETURN_IF_ERROR(Arg(key, ArgType::kRange, &a, &v));
  *min = *max = 0;
  *present = false;
  if (v == nullptr) v = &a->def;  // a range by default, or 0: none
  if (v->is_null()) {
    Record(key, nullptr);
    return Status::OK();
  }
  const double center = a->center, lo = a->lo, hi = a->hi;
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
    return Error(std::string(key) + " values should be between " + Num(lo) + " and " + Num(hi) +
                 " with min <= max, not " + Shown(*v));
  }
  // torchvision: a range that is just the centre does nothing.
  *present = !(*min == center && *max == center);
  Record(key, *present ? json::array({*min, *max}) : json(nullptr));
  return Status::OK();
}

Status OpArgs::Pair(const char* key, double* min, double* max) {
  const ArgSchema* a = nullptr;
  const json* v = nullptr;
  NOSTALL_RETURN_IF_ERROR(Arg(key, ArgType::kPair, &a, &v));
  const json& given = v != nullptr ? *v : a->def;
  if (!(given.is_array() && given.size() == 2 && IsNumber(given[0]) && IsNumber(given[1]))) {
    return Error(std::string(key) + " must be [min, max], not " + Shown(given));
  }
  *min = given[0].get<double>();
  *max = given[1].get<double>();
  if (!(a->lo <= *min && *min <= *max && *max <= a->hi)) {
    return Error(std::string(key) + " must satisfy " + Num(a->lo) + " <= min <= max <= " +
                 Num(a->hi) + ", not [" + Num(*min) + ", " + Num(*max) + "]");
  }
  Record(key, json::array({*min, *max}));
  return Status::OK();
}

Status OpArgs::Fill(const char* key, std::vector<double>* out) {
  const ArgSchema* a = nullptr;
  const json* v = nullptr;
  NOSTALL_RETURN_IF_ERROR(Arg(key, ArgType::kFill, &a, &v));
  out->clear();
  const json& given = v != nullptr ? *v : a->def;
  if (IsNumber(given)) {
    out->push_back(given.get<double>());
  } else if (given.is_array() && (given.size() == 1 || given.size() == 3) &&
             std::all_of(given.begin(), given.end(), IsNumber)) {
    for (const json& x : given) out->push_back(x.get<double>());
  } else if (!given.is_null()) {
    return Error(std::string(key) + " must be a number or one per channel, not " + Shown(given));
  }
  for (double x : *out) {
    if (!(x >= 0 && x <= 255)) return Error(std::string(key) + " values must be in [0, 255]");
  }
  Record(key, out->empty() ? json(nullptr) : json(*out));
  return Status::OK();
}

Status OpArgs::Interpolation(const char* key, bool* bilinear) {
  std::string s;
  NOSTALL_RETURN_IF_ERROR(String(key, &s));
  *bilinear = s == "bilinear";
  return Status::OK();
}

Status OpArgs::String(const char* key, std::string* out) {
  const ArgSchema* a = nullptr;
  const json* v = nullptr;
  NOSTALL_RETURN_IF_ERROR(Arg(key, ArgType::kChoice, &a, &v));
  if (v != nullptr && !v->is_string()) return Error(std::string(key) + " must be a string, not " + Shown(*v));
  *out = v != nullptr ? v->get<std::string>() : a->def.get<std::string>();
  std::string names;
  for (const std::string& c : a->choices) {
    if (*out == c) {
      Record(key, *out);
      return Status::OK();
    }
    names += (names.empty() ? "" : ", ") + c;
  }
  return Error(std::string(key) + " must be one of " + names + ", not \"" + *out + "\"");
}

Status OpArgs::CheckNoOthers() const {
  for (const auto& [key, value] : j_.items()) {
    if (key == "type") continue;
    const ArgSchema* a = schema_.Find(key);
    if (a == nullptr) {
      std::string allowed;
      for (const ArgSchema& s : schema_.args) allowed += (allowed.empty() ? "" : ", ") + s.name;
      return Error("unknown argument '" + key + "' (it takes: " +
                   (allowed.empty() ? "nothing" : allowed) + ")");
    }
    // Accepted for torchvision's signature: only the value that changes
    // nothing (the default) is.
    if (a->accepted_only && !value.is_null() && value != a->def) {
      // As the user wrote it in Python or JSON: antialias=False,
      // interpolation 'bicubic'.
      const std::string given = value.is_boolean()  ? key + "=" + (value.get<bool>() ? "True" : "False")
                                : value.is_string() ? key + " '" + value.get<std::string>() + "'"
                                                    : key + "=" + Shown(value);
      return Error(given + " is not supported (" + a->doc + ")");
    }
    if (a->ignored && !value.is_null() && a->type == ArgType::kBool && !value.is_boolean()) {
      return Error(key + " must be true or false, not " + Shown(value));
    }
  }
  return Status::OK();
}

namespace {
struct OpEntry {
  const char* name;
  OpFactory make;
};
const std::vector<OpEntry>& Registry() {
#define NOSTALL_IMAGE_OP_ENTRY(name) OpEntry{#name, &Make##name},
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
  const OpSchema* s = FindTransformSchema(type);
  return s != nullptr ? s->doc.c_str() : "";
}

std::string ImageOpNames() {
  std::string names;
  for (const OpEntry& e : Registry()) names += std::string(names.empty() ? "" : ", ") + e.name;
  return names;
}

}  // namespace nostall
