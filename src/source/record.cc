// Field kinds, the fields' checks and copies (nostall/record.h), and a
// spec's "fields" read and written (record_json.h).
#include "nostall/record.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <set>

#include "common/json_fields.h"
#include "source/index/indexed_source.h"
#include "source/record_json.h"

namespace nostall {

const char* FieldKindName(FieldKind kind) {
  switch (kind) {
    case FieldKind::kImage: return "image";
    case FieldKind::kLabel: return "label";
    case FieldKind::kBytes: return "bytes";
    case FieldKind::kJson: return "json";
    case FieldKind::kText: return "text";
    case FieldKind::kAudio: return "audio";
    case FieldKind::kTargets: return "targets";
    case FieldKind::kVideo: return "video";
    case FieldKind::kClipAudio: return "clip_audio";
  }
  return "?";
}

Result<FieldKind> FieldKindFromName(const std::string& name) {
  for (FieldKind k : {FieldKind::kImage, FieldKind::kLabel, FieldKind::kBytes, FieldKind::kJson,
                      FieldKind::kText, FieldKind::kAudio, FieldKind::kTargets, FieldKind::kVideo,
                      FieldKind::kClipAudio}) {
    if (name == FieldKindName(k)) return k;
  }
  return InvalidArgument("a field's kind must be one of image, audio, video, label, bytes, json, text, targets, clip_audio, not '" +
                         name.substr(0, 40) + "'");
}

namespace {

// The names Parquet datasets give their columns (docs/parquet.md).
std::optional<FieldKind> NamedKind(const std::string& e) {
  if (e == "image" || e == "img") return FieldKind::kImage;
  if (e == "audio") return FieldKind::kAudio;
  if (e == "video") return FieldKind::kVideo;
  if (e == "cls" || e == "label" || e == "labels") return FieldKind::kLabel;
  if (e == "json") return FieldKind::kJson;
  if (e == "txt" || e == "text") return FieldKind::kText;
  return std::nullopt;
}

}  // namespace

FieldKind InferFieldKind(const std::vector<std::string>& extensions, const std::string& name) {
  if (extensions.empty()) return FieldKind::kBytes;
  bool images = true;
  for (const std::string& e : extensions) images &= IsImageExtension(e);
  if (images) return FieldKind::kImage;
  bool audio = true;
  for (const std::string& e : extensions) audio &= IsAudioExtension(e);
  if (audio) return FieldKind::kAudio;
  bool video = true;
  for (const std::string& e : extensions) video &= IsVideoExtension(e);
  if (video) return FieldKind::kVideo;
  if (std::optional<FieldKind> k = NamedKind(extensions.front())) return *k;
  return NamedKind(name).value_or(FieldKind::kBytes);
}

std::vector<std::string> SplitExtensions(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    while (!cur.empty() && cur.front() == '.') cur.erase(cur.begin());
    if (!cur.empty()) out.push_back(cur);
    cur.clear();
  };
  for (char c : text) {
    if (c == ';' || c == ',' || c == ' ') {
      flush();
    } else {
      cur.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
  }
  flush();
  return out;
}

Status ValidateFields(const std::vector<FieldSpec>& fields) {
  if (fields.empty()) return Status::OK();
  std::set<std::string> names;
  int images = 0, labels = 0, extra = 0;
  for (const FieldSpec& f : fields) {
    const std::string shown = "field '" + f.name.substr(0, 60) + "'";
    if (f.name.empty()) return InvalidArgument("a field needs a name");
    if (f.name.size() > 200) return InvalidArgument("a field's name is over 200 characters");
    if (!names.insert(f.name).second) return InvalidArgument(shown + " is named twice");
    if (f.kind == FieldKind::kClipAudio) {
      // Made from the video's own audio: no member, never read from one.
      if (!f.extensions.empty()) {
        return InvalidArgument(shown + ": a clip_audio field is the video's own audio and names no member "
                               "extension");
      }
      ++extra;
      continue;
    }
    if (f.extensions.empty()) {
      return InvalidArgument(shown + " names no member extension (e.g. \"jpg;png\", \"json\")");
    }
    for (const std::string& e : f.extensions) {
      if (e.empty() || e.size() > 64 || e.find('/') != std::string::npos) {
        return InvalidArgument(shown + ": bad extension '" + e.substr(0, 64) + "'");
      }
    }
    if (f.batch != "list" && f.batch != "padded") {
      return InvalidArgument(shown + ": batch must be \"list\" or \"padded\", not '" +
                             f.batch.substr(0, 40) + "'");
    }
    if (f.batch == "padded" && f.kind != FieldKind::kBytes && f.kind != FieldKind::kTargets) {
      return InvalidArgument(shown + ": batch=\"padded\" is for bytes and targets fields (kind " +
                             FieldKindName(f.kind) + " batches its own way)");
    }
    if (f.max_annotations > 0 && f.kind != FieldKind::kTargets) {
      return InvalidArgument(shown + ": max_annotations is a targets field's");
    }
    if (IsMediaKind(f.kind)) {
      ++images;
      if (f.optional) return InvalidArgument(shown + ": the " + FieldKindName(f.kind) + " field cannot be optional");
    } else if (f.kind == FieldKind::kLabel) {
      ++labels;
      if (f.optional) return InvalidArgument(shown + ": the label field cannot be optional");
    } else {
      ++extra;
    }
  }
  if (images != 1) {
    return InvalidArgument("fields must hold exactly one image or audio field (kind image, e.g. "
                           "\"image\": \"jpg;png\", or audio, e.g. \"audio\": \"flac;wav\"), not " +
                           std::to_string(images));
  }
  if (labels > 1) return InvalidArgument("fields may hold one label field, not " + std::to_string(labels));
  if (std::count_if(fields.begin(), fields.end(), [](const FieldSpec& f) { return f.kind == FieldKind::kTargets; }) > 1) {
    return InvalidArgument("fields may hold one targets field");
  }
  if (extra > kMaxExtraFields) {
    return InvalidArgument("fields may hold at most " + std::to_string(kMaxExtraFields) +
                           " fields besides the image and the label, not " + std::to_string(extra));
  }
  return Status::OK();
}

void FieldCopies::Resize(int fields, int64_t samples) {
  values_.assign(static_cast<size_t>(fields), std::vector<std::string>(static_cast<size_t>(samples)));
  present_.assign(static_cast<size_t>(fields), std::vector<uint8_t>(static_cast<size_t>(samples), 0));
}

void FieldCopies::Set(int field, int64_t pos, FieldView v) {
  auto& slot = values_[static_cast<size_t>(field)][static_cast<size_t>(pos)];
  present_[static_cast<size_t>(field)][static_cast<size_t>(pos)] = v.present();
  if (v.present()) {
    slot.assign(reinterpret_cast<const char*>(v.data), static_cast<size_t>(v.size));
  } else {
    slot.clear();
  }
}

FieldView FieldCopies::Get(int field, int64_t pos) const {
  if (!present_[static_cast<size_t>(field)][static_cast<size_t>(pos)]) return {};
  const std::string& s = values_[static_cast<size_t>(field)][static_cast<size_t>(pos)];
  return {reinterpret_cast<const uint8_t*>(s.data()), static_cast<int64_t>(s.size())};
}

FieldSpan ImageSpan(const FieldSpan* record, size_t size) {
  if (record == nullptr) return {0, static_cast<int64_t>(size)};
  FieldSpan image = record[0];
  if (image.size < 0 && image.offset <= size) image.size = static_cast<int64_t>(size - image.offset);
  return image;
}

namespace {

using json = nlohmann::json;

// One field of "fields": {"name", "ext" (a list, or "jpg;png"), "kind"
// (default: from the extensions), "optional"}, or, in the object form
// {"NAME": "jpg;png" | {...}}, the value under its name.
Result<FieldSpec> ReadField(const json& v, const std::string& name_given) {
  FieldSpec f;
  f.name = name_given;
  const std::string where = "fields: ";
  if (v.is_string()) {
    f.extensions = SplitExtensions(v.get<std::string>());
  } else if (v.is_object()) {
    for (const auto& [key, _] : v.items()) {
      if (key != "name" && key != "ext" && key != "kind" && key != "optional" && key != "batch" &&
          key != "max_annotations") {
        return InvalidArgument(where + "unknown key '" + key.substr(0, 40) +
                               "' in a field (name, ext, kind, optional, batch, max_annotations)");
      }
    }
    if (name_given.empty()) NOSTALL_RETURN_IF_ERROR(GetString(v, where, "name", &f.name));
    if (v.contains("ext") && v["ext"].is_string()) {
      f.extensions = SplitExtensions(v["ext"].get<std::string>());
    } else {
      std::vector<std::string> exts;
      NOSTALL_RETURN_IF_ERROR(GetStrings(v, where, "ext", &exts));
      for (const std::string& e : exts) {
        for (std::string& x : SplitExtensions(e)) f.extensions.push_back(std::move(x));
      }
    }
    NOSTALL_RETURN_IF_ERROR(GetBool(v, where, "optional", &f.optional));
    NOSTALL_RETURN_IF_ERROR(GetString(v, where, "batch", &f.batch));
    NOSTALL_RETURN_IF_ERROR(GetInt(v, where, "max_annotations", 1, 65536, &f.max_annotations));
    f.kind = InferFieldKind(f.extensions, f.name);
    if (v.contains("kind")) {
      std::string kind;
      NOSTALL_RETURN_IF_ERROR(GetString(v, where, "kind", &kind));
      Result<FieldKind> named = FieldKindFromName(kind);
      if (!named.ok()) return InvalidArgument(where + "'" + f.name.substr(0, 60) + "': " + named.status().message());
      f.kind = named.value();
    }
    if (f.kind == FieldKind::kClipAudio) f.optional = true;  // no member: the kind writes it
    return f;
  } else {
    return InvalidArgument(where + "a field is \"jpg;png\" or {\"ext\": ..., \"kind\": ..., "
                           "\"optional\": ...}, not " + Shown(v));
  }
  f.kind = InferFieldKind(f.extensions, f.name);
  return f;
}

}  // namespace

Result<std::vector<FieldSpec>> ReadFields(const json& fs) {
  std::vector<FieldSpec> fields;
  if (fs.is_array()) {
    for (const json& v : fs) {
      if (!v.is_object()) return InvalidArgument("fields: each field of the list is an object");
      NOSTALL_ASSIGN_OR_RETURN(FieldSpec f, ReadField(v, ""));
      fields.push_back(std::move(f));
    }
  } else if (fs.is_object()) {
    for (const auto& [name, v] : fs.items()) {
      NOSTALL_ASSIGN_OR_RETURN(FieldSpec f, ReadField(v, name));
      fields.push_back(std::move(f));
    }
  } else if (!fs.is_null()) {
    return InvalidArgument("fields must be a list of fields or an object of them, not " + Shown(fs));
  }
  NOSTALL_RETURN_IF_ERROR(ValidateFields(fields));
  return fields;
}

json FieldsJson(const std::vector<FieldSpec>& fields) {
  json fs = json::array();
  for (const FieldSpec& f : fields) {
    json entry = {{"name", f.name}, {"ext", f.extensions}, {"kind", FieldKindName(f.kind)},
                  {"optional", f.optional}};
    if (f.batch != "list") entry["batch"] = f.batch;  // the default is not written
    if (f.max_annotations > 0) entry["max_annotations"] = f.max_annotations;
    fs.push_back(entry);
  }
  return fs;
}

}  // namespace nostall
