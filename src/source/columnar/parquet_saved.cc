#include "source/columnar/parquet_saved.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "annotations/bytes.h"
#include "common/fd.h"
#include "source/index/index_file.h"

namespace nostall::pq {
namespace {


constexpr char kSavedMagic[8] = {'N', 'S', 'P', 'Q', 'I', 'D', 'X', '1'};

void PutString(std::string* out, const std::string& s) {
  annotations::Put<uint64_t>(out, s.size());
  out->append(s);
}

}  // namespace

std::string SerializeSaved(const std::vector<FileRef>& refs, const Saved& s) {
  using annotations::Put;
  std::string body;
  Put<uint64_t>(&body, refs.size());
  for (size_t k = 0; k < refs.size(); ++k) {
    PutString(&body, refs[k].name);
    Put<uint64_t>(&body, refs[k].size);
    Put<int64_t>(&body, refs[k].stamp);
    PutString(&body, s.footers[k]);
    Put<uint64_t>(&body, s.index_at[k]);
    PutString(&body, s.indexes[k]);
  }
  Put<uint64_t>(&body, s.labels.size());
  for (int64_t l : s.labels) Put<int64_t>(&body, l);
  Put<uint64_t>(&body, s.classes.size());
  for (const std::string& c : s.classes) PutString(&body, c);
  Put<uint64_t>(&body, s.sizes.size());
  for (int64_t n : s.sizes) Put<int64_t>(&body, n);
  std::string out(kSavedMagic, sizeof(kSavedMagic));
  Put<uint64_t>(&out, IndexFileHash(body));
  return out + body;
}

Result<Saved> ParseSaved(const std::string& bytes, const std::vector<FileRef>& refs) {
  using annotations::Get;
  if (bytes.size() < 16 || std::memcmp(bytes.data(), kSavedMagic, 8) != 0) return DataError("not a saved index");
  const std::string body = bytes.substr(16);
  if (Get<uint64_t>(reinterpret_cast<const uint8_t*>(bytes.data()) + 8) != IndexFileHash(body)) {
    return DataError("damaged (hash)");
  }
  const uint8_t* p = reinterpret_cast<const uint8_t*>(body.data());
  const uint8_t* end = p + body.size();
  Status bad;
  auto u64 = [&]() -> uint64_t {
    if (end - p < 8) {
      bad = DataError("truncated");
      return 0;
    }
    const uint64_t v = Get<uint64_t>(p);
    p += 8;
    return v;
  };
  auto str = [&]() -> std::string {
    const uint64_t n = u64();
    if (!bad.ok() || static_cast<uint64_t>(end - p) < n) {
      bad = DataError("truncated");
      return "";
    }
    std::string v(reinterpret_cast<const char*>(p), n);
    p += n;
    return v;
  };
  Saved s;
  if (u64() != refs.size()) return DataError("another set of files");
  for (const FileRef& r : refs) {
    const std::string name = str();
    const uint64_t size = u64();
    const int64_t stamp = static_cast<int64_t>(u64());
    if (!bad.ok()) return bad;
    if (name != r.name || size != r.size || stamp != r.stamp) return DataError(r.name + " changed");
    s.footers.push_back(str());
    s.index_at.push_back(u64());
    s.indexes.push_back(str());
  }
  auto ints = [&](std::vector<int64_t>* out) {
    const uint64_t n = u64();
    if (!bad.ok() || n > static_cast<uint64_t>(end - p) / 8) {
      bad = DataError("truncated");
      return;
    }
    out->resize(n);
    for (auto& v : *out) v = static_cast<int64_t>(u64());
  };
  ints(&s.labels);
  const uint64_t classes = u64();
  for (uint64_t k = 0; bad.ok() && k < classes && p < end; ++k) s.classes.push_back(str());
  ints(&s.sizes);
  NOSTALL_RETURN_IF_ERROR(bad);
  if (p != end || s.classes.size() != classes) return DataError("damaged (length)");
  return s;
}

Result<std::string> ReadSaved(const std::string& path) {
  uint64_t size = 0;
  NOSTALL_ASSIGN_OR_RETURN(UniqueFd fd, OpenReadOnly(path, &size));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || st.st_uid != ::getuid() || (st.st_mode & 022) != 0) {
    return DataError("not this user's private file");
  }
  std::string bytes(size, '\0');
  NOSTALL_RETURN_IF_ERROR(PreadExact(fd.get(), 0, size, reinterpret_cast<uint8_t*>(bytes.data())));
  return bytes;
}

std::string SavedKey(const std::string& uri, const SourceOptions& options) {
  std::string key = std::string("parquet\n") + uri + "\n";
  for (const FieldSpec& f : options.fields) {
    key += f.name + "=" + FieldKindName(f.kind) + (f.optional ? "?" : "") + ":";
    for (const std::string& e : f.extensions) key += e + ",";
    key += ";";
  }
  return key + "\n" + std::to_string(options.max_field_bytes);
}

}  // namespace nostall::pq
