// Typed reads of JSON fields (json_fields.h).
#include "common/json_fields.h"

#include <cmath>

namespace nostall {

using json = nlohmann::json;

Status CheckJsonDepth(std::string_view text, int max_depth, const std::string& what) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return InvalidArgument(what + " is nested over " + std::to_string(max_depth) +
                               " levels deep (at byte " + std::to_string(i) + ")");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status::OK();
}

std::string Shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

Status GetInt(const json& j, const std::string& where, const char* key, int64_t lo, int64_t hi,
              int64_t* out) {
  if (!j.contains(key)) return Status::OK();
  const json& v = j[key];
  if (!v.is_number_integer()) {
    return InvalidArgument(where + key + " must be an integer, not " + Shown(v));
  }
  // (An unsigned value above INT64_MAX would wrap as int64: out of range.)
  const bool huge = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi);
  const int64_t x = huge ? hi : v.get<int64_t>();
  if (huge || x < lo || x > hi) {
    return InvalidArgument(where + key + " must be in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "], not " + Shown(v));
  }
  *out = x;
  return Status::OK();
}

Status GetU64(const json& j, const std::string& where, const char* key, uint64_t* out) {
  if (!j.contains(key)) return Status::OK();
  const json& v = j[key];
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0)) {
    return InvalidArgument(where + key + " must be a non-negative integer, not " + Shown(v));
  }
  *out = v.get<uint64_t>();
  return Status::OK();
}

Status GetDouble(const json& j, const std::string& where, const char* key, double* out) {
  if (!j.contains(key)) return Status::OK();
  const json& v = j[key];
  if (!v.is_number()) return InvalidArgument(where + key + " must be a number, not " + Shown(v));
  const double x = v.get<double>();
  if (!std::isfinite(x)) return InvalidArgument(where + key + " must be finite");
  *out = x;
  return Status::OK();
}

Status GetBool(const json& j, const std::string& where, const char* key, bool* out) {
  if (!j.contains(key)) return Status::OK();
  const json& v = j[key];
  if (!v.is_boolean()) {
    return InvalidArgument(where + key + " must be true or false, not " + Shown(v));
  }
  *out = v.get<bool>();
  return Status::OK();
}

Status GetString(const json& j, const std::string& where, const char* key, std::string* out) {
  if (!j.contains(key)) return Status::OK();
  const json& v = j[key];
  if (!v.is_string()) return InvalidArgument(where + key + " must be a string, not " + Shown(v));
  *out = v.get<std::string>();
  return Status::OK();
}

Status GetStrings(const json& j, const std::string& where, const char* key,
                  std::vector<std::string>* out) {
  if (!j.contains(key)) return Status::OK();
  const json& v = j[key];
  bool ok = v.is_array();
  for (size_t i = 0; ok && i < v.size(); ++i) ok = v[i].is_string();
  if (!ok) return InvalidArgument(where + key + " must be a list of strings, not " + Shown(v));
  *out = v.get<std::vector<std::string>>();
  return Status::OK();
}

Status CheckKeys(const json& j, const std::string& what, std::initializer_list<const char*> known) {
  if (!j.is_object()) return InvalidArgument(what + " must be an object, not " + Shown(j));
  for (const auto& [key, _] : j.items()) {
    bool found = false;
    for (const char* k : known) found = found || key == k;
    if (found) continue;
    std::string list;
    for (const char* k : known) list += std::string(list.empty() ? "" : ", ") + k;
    return InvalidArgument("unknown key '" + key.substr(0, 40) + "' in " + what +
                           (list.empty() ? " (it takes none)" : " (it takes: " + list + ")"));
  }
  return Status::OK();
}

}  // namespace nostall
