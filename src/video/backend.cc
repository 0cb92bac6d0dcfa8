// The decoder registry (video/backend.h): one registered by a test or fuzz
// target, else the plugin beside the module, dlopened once.
#include "video/backend.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace nostall::video {
namespace {

std::atomic<const Backend*> g_registered{nullptr};

// The folder of the binary this code is in (the Python module, the CLI).
std::string OwnFolder() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&GetBackend), &info) == 0 || info.dli_fname == nullptr) return ".";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

Result<const Backend*> LoadPlugin() {
  std::string tried;
  std::string errors;
  std::vector<std::string> paths;
  if (const char* env = std::getenv("NOSTALL_VIDEO_PLUGIN"); env != nullptr && *env != '\0') {
    paths.push_back(env);
  } else {
    const std::string dir = OwnFolder();
    paths = {dir + "/_nostall_video.so", dir + "/../_nostall_video.so"};  // the module's folder; the CLI's _bin/
  }
  for (const std::string& path : paths) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* e = dlerror();
      errors += std::string("\n  ") + (e != nullptr ? e : path);
      continue;
    }
    using Entry = const Backend* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(handle, "nostall_video_backend"));
    if (entry == nullptr) {
      errors += "\n  " + path + ": no nostall_video_backend";
      continue;
    }
    return entry();
  }
  return FailedPrecondition(
      "video needs FFmpeg's libraries (libavformat, libavcodec, libswscale of FFmpeg 5.1 or the version "
      "nostall was built with): on Debian and Ubuntu, apt-get install ffmpeg (docs/video.md). Loading "
      "nostall's video plugin failed:" + errors);
}

}  // namespace

void RegisterBackend(const Backend* backend) { g_registered.store(backend); }

Result<const Backend*> GetBackend() {
  if (const Backend* b = g_registered.load(); b != nullptr) return b;
  static std::once_flag once;
  static const Backend* loaded = nullptr;
  static Status why;
  std::call_once(once, [] {
    Result<const Backend*> r = LoadPlugin();
    if (r.ok()) {
      loaded = r.value();
    } else {
      why = r.status();
    }
  });
  if (loaded != nullptr) return loaded;
  return why;
}

}  // namespace nostall::video
