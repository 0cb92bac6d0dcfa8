// What every store shares (object_store.h): matching a pattern from a
// listing, a blocking read behind ReadAsync, and the registry.
#include "store/object_store.h"

#include <fnmatch.h>

#include <algorithm>
#include <map>

namespace nostall::store {

Result<std::vector<ObjectInfo>> ObjectStore::Match(const std::string& pattern) const {
  const size_t wild = pattern.find_first_of("*?[");
  if (wild == std::string::npos) {
    NOSTALL_ASSIGN_OR_RETURN(ObjectInfo one, Stat(pattern));
    return std::vector<ObjectInfo>{std::move(one)};
  }
  NOSTALL_ASSIGN_OR_RETURN(std::vector<ObjectInfo> listed, List(pattern.substr(0, wild)));
  std::vector<ObjectInfo> out;
  for (ObjectInfo& o : listed) {
    if (::fnmatch(pattern.c_str(), o.key.c_str(), FNM_PATHNAME) == 0) out.push_back(std::move(o));
  }
  return out;
}

Result<std::vector<std::string>> ObjectStore::ListFolders(const std::string& prefix) const {
  NOSTALL_ASSIGN_OR_RETURN(std::vector<ObjectInfo> listed, List(prefix));
  std::vector<std::string> out;
  for (const ObjectInfo& o : listed) {
    const size_t slash = o.key.find('/', prefix.size());
    if (slash == std::string::npos) continue;
    std::string folder = o.key.substr(0, slash + 1);
    if (out.empty() || out.back() != folder) out.push_back(std::move(folder));
  }
  return out;
}

Status ObjectStore::ReadExact(const std::string& key, uint64_t offset, uint64_t length, uint8_t* out) const {
  std::vector<uint8_t> bytes;
  NOSTALL_RETURN_IF_ERROR(Read(key, offset, static_cast<int64_t>(length), &bytes));
  if (bytes.size() != length) return DataError(Uri(key) + ": a short read");
  if (length > 0) std::copy(bytes.begin(), bytes.end(), out);
  return Status::OK();
}

Status ObjectStore::Write(const std::string& key, std::string) const {
  return FailedPrecondition(Uri(key) + ": this store (" + std::string(name()) + ") is not written to");
}

Result<std::vector<ObjectInfo>> ObjectStore::StatAll(const std::vector<std::string>& keys) const {
  if (keys.empty()) return std::vector<ObjectInfo>{};
  std::string prefix = keys.front();
  for (const std::string& k : keys) {
    size_t n = 0;
    while (n < prefix.size() && n < k.size() && prefix[n] == k[n]) ++n;
    prefix.resize(n);
  }
  NOSTALL_ASSIGN_OR_RETURN(std::vector<ObjectInfo> listed, List(prefix));
  std::map<std::string, ObjectInfo*> by_key;
  for (ObjectInfo& o : listed) by_key[o.key] = &o;
  std::vector<ObjectInfo> out;
  for (const std::string& k : keys) {
    auto it = by_key.find(k);
    if (it == by_key.end()) return NotFound(Uri(k) + ": no such object");
    out.push_back(*it->second);
  }
  return out;
}

void ObjectStore::ReadAsync(const std::string& key, uint64_t offset, int64_t length,
                            std::vector<uint8_t> buffer, Done done, uint64_t most) const {
  Status s = Read(key, offset, length, &buffer, most);
  done(std::move(s), std::move(buffer));
}

const std::vector<StoreKind>& StoreKinds() {
#define NOSTALL_LIST_OBJECT_STORE(name) name##Store(),
  static const std::vector<StoreKind> kinds = {NOSTALL_OBJECT_STORES(NOSTALL_LIST_OBJECT_STORE)};
#undef NOSTALL_LIST_OBJECT_STORE
  return kinds;
}

Result<Located> OpenStore(const std::string& uri, const nlohmann::json& options, const char* who) {
  for (const StoreKind& k : StoreKinds()) {
    if (k.claims(uri)) return k.open(uri, options, who);
  }
  return InvalidArgument(std::string(who) + ": no store reads " + uri);
}

int64_t VersionOfTag(const std::string& tag) {
  uint64_t h = 1469598103934665603ull;
  for (char c : tag) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return static_cast<int64_t>(h);
}

bool IsRemoteUri(const std::string& uri) {
  for (const StoreKind& k : StoreKinds()) {
    if (k.claims(uri)) return std::string(k.name) != "local";
  }
  return false;
}

}  // namespace nostall::store
