// Typed reads of one field of a JSON object, each naming the field in its
// error: specs are written by hand, and "batch_size must be an integer, not
// \"abc\"" is what their author needs, not the JSON library's type names.
// Every reader of a spec (the loader spec, a driver's options, a cache
// tier, a transform's arguments) reads through these, so one value is shown
// one way everywhere (Shown).
//
// Each Get* leaves `*out` as it is when `key` is absent (the caller's
// default stands) and refuses a value of another type: never converted.
// `where` is prepended to the key in errors ("" at the top level,
// "source.options: " inside a driver's options).
#ifndef NOSTALL_COMMON_JSON_FIELDS_H_
#define NOSTALL_COMMON_JSON_FIELDS_H_

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "nostall/status.h"

namespace nostall {

// A value as an error shows it: its JSON, cut at 60 characters.
std::string Shown(const nlohmann::json& v);

// InvalidArgument when JSON `text` nests arrays and objects over `max_depth`
// levels, found in one pass over the text before it is parsed: a parse, a
// copy or a dump() of a value nested 300,000 deep recurses off the stack.
// `what` names the text in the error ("the loader spec").
Status CheckJsonDepth(std::string_view text, int max_depth, const std::string& what);

Status GetInt(const nlohmann::json& j, const std::string& where, const char* key, int64_t lo,
              int64_t hi, int64_t* out);
// GetInt into a narrower integer (an int, an enum's underlying type).
template <typename T>
Status GetIntAs(const nlohmann::json& j, const std::string& where, const char* key, int64_t lo,
                int64_t hi, T* out) {
  int64_t v = static_cast<int64_t>(*out);
  NOSTALL_RETURN_IF_ERROR(GetInt(j, where, key, lo, hi, &v));
  *out = static_cast<T>(v);
  return Status::OK();
}
Status GetU64(const nlohmann::json& j, const std::string& where, const char* key, uint64_t* out);
Status GetDouble(const nlohmann::json& j, const std::string& where, const char* key, double* out);
Status GetBool(const nlohmann::json& j, const std::string& where, const char* key, bool* out);
Status GetString(const nlohmann::json& j, const std::string& where, const char* key,
                 std::string* out);
Status GetStrings(const nlohmann::json& j, const std::string& where, const char* key,
                  std::vector<std::string>* out);

// `j` is an object whose keys are all in `known`; else an error naming the
// first other key and listing the known ones (`what` names the object:
// "the s3-tar-shards driver's options").
Status CheckKeys(const nlohmann::json& j, const std::string& what,
                 std::initializer_list<const char*> known);

}  // namespace nostall

#endif  // NOSTALL_COMMON_JSON_FIELDS_H_
