// OpenSource: the first registered driver that claims the path opens it;
// the storage throttle wraps sources over local files when asked.
#include <sys/stat.h>

#include "source/driver.h"

namespace nostall {

const std::vector<SourceDriver>& SourceDrivers() {
#define NOSTALL_SOURCE_DRIVER_ENTRY(name) name##Driver(),
  static const std::vector<SourceDriver> drivers = {
      NOSTALL_SOURCE_DRIVERS(NOSTALL_SOURCE_DRIVER_ENTRY)};
#undef NOSTALL_SOURCE_DRIVER_ENTRY
  return drivers;
}

Result<std::unique_ptr<Source>> OpenSource(const std::string& uri, const SourceOptions& options) {
  if (uri.empty()) return InvalidArgument("empty dataset path");
  if (options.throttle_bytes_per_second < 0 || options.throttle_latency_ms < 0) {
    return InvalidArgument("storage throttle values must be >= 0");
  }
  for (const SourceDriver& driver : SourceDrivers()) {
    if (!driver.claims(uri)) continue;
    const bool throttled = options.throttle_bytes_per_second > 0 || options.throttle_latency_ms > 0;
    if (throttled && !driver.local_files) {
      return InvalidArgument(std::string("the storage throttle emulates slow storage over local "
                                         "files; a ") +
                             driver.kind + " source reads real remote storage: " + uri);
    }
    NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<Source> source, driver.open(uri, options));
    if (throttled) {
      source = ThrottleSource(std::move(source), options.throttle_bytes_per_second,
                              options.throttle_latency_ms);
    }
    return source;
  }
  struct stat st;
  if (::stat(uri.c_str(), &st) != 0) return NotFound("dataset path does not exist: " + uri);
  std::string kinds;
  for (const SourceDriver& driver : SourceDrivers()) {
    kinds += std::string(kinds.empty() ? "" : ", ") + driver.kind;
  }
  return InvalidArgument("unsupported dataset " + uri + ": expected one of " + kinds +
                         " (an image folder, or .tar shards)");
}

}  // namespace nostall
