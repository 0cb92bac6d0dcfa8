// Any bytes a web server may answer for a folder's index page (http_listing.h).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "store/http_listing.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view page(reinterpret_cast<const char*>(data), size);
  for (const std::string& name : nostall::store::IndexLinks(page)) {
    // Every entry is a direct child: one name, or one folder ending in '/'.
    const size_t slash = name.find('/');
    if (name.empty() || (slash != std::string::npos && slash + 1 != name.size()) || name == "../") __builtin_trap();
  }
  return 0;
}
