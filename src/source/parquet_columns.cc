// The files a Parquet path names and the columns a field is (parquet_columns.h).
#include "source/parquet_columns.h"

#include <fnmatch.h>
#include <glob.h>
#include <sys/stat.h>

#include <cctype>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "common/json_fields.h"
#include "source/index_file.h"
#include "source/s3_client.h"

namespace nostall::pq {

namespace {

bool HasWildcard(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// "Parquet" or "Arrow IPC", for messages about the files `uri` names.
std::string FormatOf(const std::string& uri) { return IsArrowIpcName(uri) ? "Arrow IPC" : "Parquet"; }

}  // namespace

Result<std::vector<FileRef>> LocalFiles(const std::string& uri) {
  NOSTALL_ASSIGN_OR_RETURN(std::vector<std::string> patterns, ExpandBraces(uri));
  std::set<std::string> names;
  for (const std::string& p : patterns) {
    if (!HasWildcard(p)) {
      names.insert(p);
      continue;
    }
    glob_t g{};
    const int rc = ::glob(p.c_str(), 0, nullptr, &g);
    if (rc == 0) {
      for (size_t k = 0; k < g.gl_pathc; ++k) names.insert(g.gl_pathv[k]);
    }
    ::globfree(&g);
    if (rc != 0 && rc != GLOB_NOMATCH) return IoError("cannot list " + p);
  }
  std::vector<FileRef> out;
  for (const std::string& n : names) {
    struct stat st;
    if (::stat(n.c_str(), &st) != 0) {
      return NotFound(FormatOf(n) + " file does not exist: " + n);
    }
    if (!S_ISREG(st.st_mode)) return InvalidArgument(n + " is not a file");
    out.push_back({n, "", static_cast<uint64_t>(st.st_size), FileStamp(n, st)});
  }
  if (out.empty()) return NotFound("no " + FormatOf(uri) + " file matches " + uri);
  return out;
}

Result<std::vector<FileRef>> S3Files(const std::string& uri, S3Client* client, std::string* bucket) {
  NOSTALL_ASSIGN_OR_RETURN(std::vector<std::string> patterns, ExpandBraces(uri));
  std::map<std::string, FileRef> found;
  for (const std::string& p : patterns) {
    NOSTALL_ASSIGN_OR_RETURN(S3Location loc, ParseS3Uri(p));
    if (bucket->empty()) *bucket = loc.bucket;
    if (loc.bucket != *bucket) return InvalidArgument(FormatOf(uri) + " files in two buckets: " + uri);
    const size_t wild = loc.key.find_first_of("*?[");
    const std::string prefix = loc.key.substr(0, wild);
    NOSTALL_ASSIGN_OR_RETURN(std::vector<S3Object> listed, client->List(loc.bucket, prefix));
    for (const S3Object& obj : listed) {
      const bool match = wild == std::string::npos ? obj.key == loc.key
                                                   : ::fnmatch(loc.key.c_str(), obj.key.c_str(), FNM_PATHNAME) == 0;
      if (!match) continue;
      uint64_t h = 1469598103934665603ull;
      for (char c : obj.etag) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
      found[obj.key] = {"s3://" + loc.bucket + "/" + obj.key, obj.key, static_cast<uint64_t>(obj.size),
                        static_cast<int64_t>(h)};
    }
    if (wild == std::string::npos && found.find(loc.key) == found.end()) {
      return NotFound(FormatOf(p) + " file does not exist: " + p);
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
