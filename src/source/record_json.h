// A spec's "fields" (docs/records.md) read and written by the record model,
// as a driver reads its own options: the loader spec only hands them over.
#ifndef NOSTALL_SOURCE_RECORD_JSON_H_
#define NOSTALL_SOURCE_RECORD_JSON_H_

#include <vector>

#include <nlohmann/json.hpp>

#include "nostall/record.h"

namespace nostall {

// A list of {"name", "ext" (a list, or "jpg;png"), "kind" (default: from the
// extensions), "optional", "batch"}, or an object {"NAME": "jpg;png" |
// {...}}; null is none. Checked (ValidateFields) when not empty.
Result<std::vector<FieldSpec>> ReadFields(const nlohmann::json& fields);
// Written as the list, every key spelled out but a "list" batch.
nlohmann::json FieldsJson(const std::vector<FieldSpec>& fields);

}  // namespace nostall

#endif  // NOSTALL_SOURCE_RECORD_JSON_H_
