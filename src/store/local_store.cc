// The local store: paths on this machine, read with pread (object_store.h).
// Keys are the paths as given; a pattern is matched by glob(3); an object's
// version is its FileStamp (file_stamp.h), so a file replaced under the same
// size and mtime is seen as changed.
#include <dirent.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "common/fd.h"
#include "store/file_stamp.h"
#include "store/object_store.h"

namespace nostall::store {
namespace {

class LocalFileStore final : public ObjectStore {
 public:
  const char* name() const override { return "local"; }
  std::string Uri(const std::string& key) const override { return key; }

  Result<std::vector<ObjectInfo>> List(const std::string& prefix) const override {
    // The folder the prefix is in (or is), walked; then what starts with it.
    const size_t slash = prefix.rfind('/');
    std::string dir = slash == std::string::npos ? "." : prefix.substr(0, slash);
    if (dir.empty()) dir = "/";
    std::vector<ObjectInfo> out;
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return out;
    NOSTALL_RETURN_IF_ERROR(Walk(slash == std::string::npos ? "" : prefix.substr(0, slash + 1), prefix, 0, &out));
    std::sort(out.begin(), out.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
    return out;
  }

  Result<std::vector<std::string>> ListFolders(const std::string& prefix) const override {
    std::vector<std::string> out;
    DIR* d = ::opendir(prefix.empty() ? "." : prefix.c_str());
    if (d == nullptr) return out;
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      struct stat st;
      if (n != "." && n != ".." && ::stat((prefix + n).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        out.push_back(prefix + n + "/");
      }
    }
    ::closedir(d);
    std::sort(out.begin(), out.end());
    return out;
  }

  Result<std::vector<ObjectInfo>> Match(const std::string& pattern) const override {
    if (pattern.find_first_of("*?[") == std::string::npos) {
      NOSTALL_ASSIGN_OR_RETURN(ObjectInfo one, Stat(pattern));
      return std::vector<ObjectInfo>{std::move(one)};
    }
    glob_t g{};
    const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    std::vector<std::string> names;
    if (rc == 0) names.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
    ::globfree(&g);
    if (rc != 0 && rc != GLOB_NOMATCH) return IoError("cannot list " + pattern);
    std::vector<ObjectInfo> out;
    for (const std::string& n : names) {
      NOSTALL_ASSIGN_OR_RETURN(ObjectInfo o, Stat(n));
      out.push_back(std::move(o));
    }
    return out;
  }

  Result<ObjectInfo> Stat(const std::string& key) const override {
    struct stat st;
    if (::stat(key.c_str(), &st) != 0) return NotFound(key + ": no such file");
    if (!S_ISREG(st.st_mode)) return InvalidArgument(key + " is not a file");
    return ObjectInfo{key, static_cast<uint64_t>(st.st_size), FileStamp(key, st)};
  }

  Status Read(const std::string& key, uint64_t offset, int64_t length, std::vector<uint8_t>* out,
              uint64_t most) const override {
    uint64_t size = 0;
    NOSTALL_ASSIGN_OR_RETURN(UniqueFd fd, Open(key, &size));
    if (length < 0) {
      if (offset > size) return DataError(key + ": a read past its end");
      const uint64_t n = size - offset;
      if (most > 0 && n > most) {
        return DataError(key + ": " + std::to_string(n) + " bytes, more than the " + std::to_string(most) +
                         " expected");
      }
      length = static_cast<int64_t>(n);
    } else if (offset + static_cast<uint64_t>(length) > size) {
      return DataError(key + ": a read past its end (" + std::to_string(offset + length) + " of " +
                       std::to_string(size) + " bytes)");
    }
    out->resize(static_cast<size_t>(length));
    Status st = PreadExact(fd.get(), offset, static_cast<size_t>(length), out->data());
    if (!st.ok()) return DataError(key + ": " + st.message());
    return st;
  }

  bool Writable() const override { return true; }
  Status Write(const std::string& key, std::string bytes) const override {
    FILE* f = std::fopen(key.c_str(), "wb");
    if (f == nullptr) return ErrnoError("cannot write " + key, errno);
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    if (std::fclose(f) != 0 || !ok) return IoError("cannot write " + key);
    return Status::OK();
  }

  Status ReadExact(const std::string& key, uint64_t offset, uint64_t length, uint8_t* out) const override {
    NOSTALL_ASSIGN_OR_RETURN(UniqueFd fd, Open(key, nullptr));
    Status st = PreadExact(fd.get(), offset, length, out);
    if (!st.ok()) return DataError(key + ": " + st.message());
    return st;
  }

 private:
  // `key` opened, an error naming it.
  static Result<UniqueFd> Open(const std::string& key, uint64_t* size) {
    Result<UniqueFd> fd = OpenReadOnly(key, size);
    if (!fd.ok()) return Status(fd.status().code(), key + ": " + fd.status().message());
    return fd;
  }

  // Every regular file under folder `at` (a key prefix ending in '/', or ""
  // for the working folder) whose key starts with `prefix`.
  Status Walk(const std::string& at, const std::string& prefix, int depth, std::vector<ObjectInfo>* out) const {
    if (depth > 64) return Status::OK();  // a loop of links
    DIR* d = ::opendir(at.empty() ? "." : at.c_str());
    if (d == nullptr) return Status::OK();
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
    for (const std::string& n : names) {
      const std::string key = at + n;
      // Only folders the prefix may reach into, and files that start with it.
      const size_t common = std::min(key.size(), prefix.size());
      if (key.compare(0, common, prefix, 0, common) != 0) continue;
      struct stat st;
      if (::stat(key.c_str(), &st) != 0) continue;
      if (S_ISDIR(st.st_mode)) {
        NOSTALL_RETURN_IF_ERROR(Walk(key + "/", prefix, depth + 1, out));
      } else if (S_ISREG(st.st_mode) && key.size() >= prefix.size()) {
        out->push_back({key, static_cast<uint64_t>(st.st_size), FileStamp(key, st)});
      }
    }
    return Status::OK();
  }
};

bool LocalClaims(const std::string& uri) { return uri.find("://") == std::string::npos; }

// (The caller's driver has checked its options; none are local files'.)
Result<Located> LocalOpen(const std::string& uri, const nlohmann::json&, const char*) {
  return Located{std::make_unique<LocalFileStore>(), uri};
}

}  // namespace

StoreKind LocalStore() { return {"local", LocalClaims, LocalOpen}; }

}  // namespace nostall::store
