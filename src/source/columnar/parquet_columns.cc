// The files a Parquet path names and the columns a field is (parquet_columns.h).
#include "source/columnar/parquet_columns.h"


#include <cctype>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "common/json_fields.h"
#include "source/index/index_file.h"

namespace nostall::pq {

namespace {

bool HasWildcard(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// "Parquet" or "Arrow IPC", for messages about the files `uri` names.
std::string FormatOf(const std::string& uri) { return IsArrowIpcName(uri) ? "Arrow IPC" : "Parquet"; }

}  // namespace

Result<std::vector<FileRef>> StoreFiles(const std::string& uri, const store::ObjectStore& store,
                                        const std::string& key) {
  NOSTALL_ASSIGN_OR_RETURN(std::vector<std::string> patterns, ExpandBraces(key));
  std::map<std::string, FileRef> found;
  for (const std::string& p : patterns) {
    Result<std::vector<store::ObjectInfo>> matched = store.Match(p);
    if (matched.status().code() == StatusCode::kNotFound && !HasWildcard(p)) {
      return NotFound(FormatOf(p) + " file does not exist: " + store.Uri(p));
    }
    NOSTALL_RETURN_IF_ERROR(matched.status());
    for (store::ObjectInfo& o : matched.value()) {
      found[o.key] = {store.Uri(o.key), o.key, o.size, o.version};
    }
  }
  std::vector<FileRef> out;
  for (auto& [k, f] : found) out.push_back(std::move(f));
  if (out.empty()) return NotFound("no " + FormatOf(uri) + " file matches " + uri);
  return out;
}

namespace {

std::string LowerCase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string FindColumn(const pq::File& file, const std::vector<std::string>& candidates, bool media,
                       int* leaf) {
  for (int pass = 0; pass < 2; ++pass) {
    for (const std::string& want : candidates) {
      for (const auto& [name, group] : file.columns()) {
        if (pass == 0 ? name != want : LowerCase(name) != LowerCase(want)) continue;
        *leaf = file.FindLeaf(group && media ? name + ".bytes" : name);
        return name;
      }
    }
  }
  return "";
}

std::string ColumnList(const pq::File& file) {
  std::string out;
  for (const auto& [name, group] : file.columns()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

Result<HfFeatures> ReadHfFeatures(const pq::File& file) {
  // Features nest a few levels (a Sequence of a dict of ...); 64 is ample.
  constexpr int kMaxDepth = 64;
  HfFeatures hf;
  const std::string meta = file.Metadata("huggingface");
  if (meta.empty()) return hf;
  Status depth = CheckJsonDepth(meta, kMaxDepth, "its \"huggingface\" metadata");
  if (!depth.ok()) return DataError(file.name() + ": " + depth.message());
  const nlohmann::json j = nlohmann::json::parse(meta, nullptr, false);
  if (!j.is_object()) return hf;
  const auto info = j.find("info");
  if (info == j.end() || !info->is_object()) return hf;
  const auto feats = info->find("features");
  if (feats == info->end() || !feats->is_object()) return hf;
  for (const auto& [name, f] : feats->items()) {
    if (!f.is_object()) continue;
    const auto type_at = f.find("_type");
    if (type_at == f.end() || !type_at->is_string()) continue;
    const std::string& type = type_at->get_ref<const std::string&>();
    if (type == "Image" && hf.image.empty()) hf.image = name;
    if (type == "Audio" && hf.audio.empty()) hf.audio = name;
    const auto names = f.find("names");
    if (type == "ClassLabel" && names != f.end() && names->is_array()) {
      std::vector<std::string>& mine = hf.class_labels[name];
      for (const auto& n : *names) mine.push_back(n.is_string() ? n.get<std::string>() : Shown(n));
    }
  }
  return hf;
}

Status ReadColumn(const File& file, int leaf, const ReadAt& read,
                  const std::function<Status(const Values&, int64_t first)>& each) {
  for (int g = 0; g < file.row_groups(); ++g) {
    NOSTALL_ASSIGN_OR_RETURN(Unit u, file.ChunkUnit(g, leaf));
    std::string bytes;
    NOSTALL_RETURN_IF_ERROR(read(u.data.offset, u.data.length, &bytes));
    NOSTALL_ASSIGN_OR_RETURN(Values v, file.Decode(u, "", bytes));
    if (static_cast<int64_t>(v.present.size()) != u.rows) {
      return DataError(file.Where(g, leaf) + ": " + std::to_string(v.present.size()) + " values in a row group of " +
                       std::to_string(u.rows) + " rows");
    }
    NOSTALL_RETURN_IF_ERROR(each(v, file.row_group_first(g)));
  }
  return Status::OK();
}

}  // namespace nostall::pq
