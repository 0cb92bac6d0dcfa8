// OpenSource: the driver the options name, else the first registered one
// that claims the path, opens it; a spec's source options are checked by
// their driver (ResolveSourceOptions).
#include <sys/stat.h>

#include <algorithm>

#include "source/driver.h"
#include "source/local_options.h"

namespace nostall {

const std::vector<SourceDriver>& SourceDrivers() {
#define NOSTALL_SOURCE_DRIVER_ENTRY(name) name##Driver(),
  static const std::vector<SourceDriver> drivers = {
      NOSTALL_SOURCE_DRIVERS(NOSTALL_SOURCE_DRIVER_ENTRY)};
#undef NOSTALL_SOURCE_DRIVER_ENTRY
  return drivers;
}

std::string DescribeLeftOut(const Source& source, const char* what) {
  std::vector<std::pair<std::string, int64_t>> left = source.left_out();
  int64_t total = 0;
  for (const auto& e : left) total += e.second;
  if (total == 0) return "";
  std::sort(left.begin(), left.end(),
            [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
  std::string out = std::to_string(total) + (total == 1 ? " file" : " files") +
                    " left out, not " + what + " nostall reads:";
  for (size_t i = 0; i < left.size() && i < 8; ++i) {
    out += (i ? ", " : " ") + std::to_string(left[i].second) + " " +
           (left[i].first.empty() ? std::string("without extension") : "." + left[i].first);
  }
  if (left.size() > 8) out += ", ...";
  return out;
}

Result<const SourceDriver*> FindSourceDriver(const std::string& uri, const std::string& driver) {
  std::string names;
  for (const SourceDriver& d : SourceDrivers()) {
    if (driver.empty() ? d.claims(uri) : driver == d.kind) return &d;
    names += std::string(names.empty() ? "" : ", ") + d.kind;
  }
  if (driver.empty()) return static_cast<const SourceDriver*>(nullptr);
  return InvalidArgument("source.driver must be one of " + names + ", not '" +
                         driver.substr(0, 60) + "'");
}

Result<nlohmann::json> ResolveSourceOptions(const std::string& uri, std::string* driver,
                                            const nlohmann::json& given, bool cached) {
  NOSTALL_ASSIGN_OR_RETURN(const SourceDriver* d, FindSourceDriver(uri, *driver));
  if (d == nullptr) {
    // No folder there yet (or a file of no kind): opening it will say so;
    // its options are checked as a local dataset's meanwhile.
    return ResolveImageFolderOptions(given, cached);
  }
  *driver = d->kind;
  return d->options(given, cached);
}

Result<nlohmann::json> DriverOptionsJson(const SourceOptions& options, const char* driver) {
  const std::string& text = options.driver_options;
  nlohmann::json j = nlohmann::json::parse(text.empty() ? "{}" : text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return InvalidArgument(std::string("the ") + driver +
                           " driver's options must be a JSON object, not '" +
                           text.substr(0, 60) + "'");
  }
  return j;
}

Result<std::unique_ptr<Source>> OpenSource(const std::string& uri, const SourceOptions& options) {
  if (uri.empty()) return InvalidArgument("empty dataset path");
  NOSTALL_ASSIGN_OR_RETURN(const SourceDriver* driver, FindSourceDriver(uri, options.driver));
  if (driver != nullptr) return driver->open(uri, options);
  struct stat st;
  if (::stat(uri.c_str(), &st) != 0) return NotFound("dataset path does not exist: " + uri);
  std::string kinds;
  for (const SourceDriver& d : SourceDrivers()) {
    kinds += std::string(kinds.empty() ? "" : ", ") + d.kind;
  }
  return InvalidArgument("unsupported dataset " + uri + ": expected one of " + kinds +
                         " (an image folder, .tar shards, or either under s3://bucket/prefix)");
}

}  // namespace nostall
