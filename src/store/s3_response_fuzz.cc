// libFuzzer target: what an S3 server answers to a GET — header lines, a
// body for a ranged read, an error body. Invariants: no crash, a
// Retry-After is a number of seconds or nothing, a body that passes
// CheckBody is exactly the length asked for and, from a server that ignored
// the range, exactly the range.
#include <cstdlib>
#include <cstring>
#include <string>

#include "store/s3_response.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nostall;
  if (size < 4) return 0;
  // The first bytes choose the request the answer is checked against.
  const uint64_t offset = data[0] % 64;
  const int64_t length = data[1] % 2 ? -1 : data[2] % 128;
  const long http = data[3] % 3 == 0 ? 200 : data[3] % 3 == 1 ? 206 : 503;
  const std::string_view text(reinterpret_cast<const char*>(data) + 4, size - 4);

  (void)XmlTag(text, "Code");
  (void)XmlTag(text, "Message", 3, text.size() / 2);
  // Header lines, as libcurl hands them over one at a time.
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const double after = ParseRetryAfter(text.substr(at, end - at + 1));
    if (after != -1 && !(after >= 0)) std::abort();
    at = end + 1;
  }
  // The body, cut to what may be taken in, checked as a ranged GET.
  const uint64_t most = MaxBodyBytes(offset, length, 4096);
  std::vector<uint8_t> body(text.begin(), text.begin() + std::min<uint64_t>(most, text.size()));
  const bool ranged = offset > 0 || length >= 0;
  Status st = CheckBody("s3://fuzz/key", http, ranged, offset, length, &body);
  if (st.ok() && length >= 0 && body.size() != static_cast<uint64_t>(length)) std::abort();
  if (st.ok() && http == 200 && ranged && length > 0 &&
      std::memcmp(body.data(), text.data() + offset, body.size()) != 0) {
    std::abort();  // not the range asked for
  }
  return 0;
}
