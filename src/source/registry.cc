// OpenSource: the first registered driver that claims the path opens it;
// the storage throttle wraps sources over local files when asked.
#include <sys/stat.h>

#include <algorithm>

#include "source/driver.h"

namespace nostall {

const std::vector<SourceDriver>& SourceDrivers() {
#define NOSTALL_SOURCE_DRIVER_ENTRY(name) name##Driver(),
  static const std::vector<SourceDriver> drivers = {
      NOSTALL_SOURCE_DRIVERS(NOSTALL_SOURCE_DRIVER_ENTRY)};
#undef NOSTALL_SOURCE_DRIVER_ENTRY
  return drivers;
}

std::string DescribeLeftOut(const Source& source) {
  std::vector<std::pair<std::string, int64_t>> left = source.left_out();
  int64_t total = 0;
  for (const auto& e : left) total += e.second;
  if (total == 0) return "";
  std::sort(left.begin(), left.end(),
            [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
  std::string out = std::to_string(total) + (total == 1 ? " file" : " files") +
                    " left out, not images nostall reads:";
  for (size_t i = 0; i < left.size() && i < 8; ++i) {
    out += (i ? ", " : " ") + std::to_string(left[i].second) + " " +
           (left[i].first.empty() ? std::string("without extension") : "." + left[i].first);
  }
  if (left.size() > 8) out += ", ...";
  return out;
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
                         " (an image folder, .tar shards, or either under s3://bucket/prefix)");
}

}  // namespace nostall
