// Reading what an S3 server answers (s3_response.h).
#include "store/s3_response.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace nostall {
namespace {

void AppendUtf8(long cp, std::string* out) {
  if (cp <= 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Where `what` is found whole in [from, to) of `xml`, or npos (never
// looking past `to`: a tag missing from every element of a page must not
// cost a scan of the rest of the page per element).
size_t FindBefore(std::string_view xml, std::string_view what, size_t from, size_t to) {
  if (from > to) return std::string_view::npos;
  return xml.substr(0, to).find(what, from);
}

}  // namespace

std::string XmlDecode(std::string_view s) {
  // The longest entity decoded: "&#x10FFFF;" (a ';' further away than this
  // is not this '&''s: looking for it across the whole text made a page of
  // '&'s quadratic).
  constexpr size_t kLongestEntity = 12;
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const size_t semi = s.substr(i, kLongestEntity).find(';');
    if (semi == std::string_view::npos) {
      out += '&';
      continue;
    }
    const std::string_view ent = s.substr(i + 1, semi - 1);
    if (ent == "amp") out += '&';
    else if (ent == "lt") out += '<';
    else if (ent == "gt") out += '>';
    else if (ent == "quot") out += '"';
    else if (ent == "apos") out += '\'';
    else if (ent.size() > 1 && ent[0] == '#') {
      const bool hex = ent[1] == 'x' || ent[1] == 'X';
      const std::string digits(ent.substr(hex ? 2 : 1));
      char* end = nullptr;
      const long cp = std::strtol(digits.c_str(), &end, hex ? 16 : 10);
      if (digits.empty() || *end != '\0') {
        out.append(s.substr(i, semi + 1));
      } else {
        AppendUtf8(cp, &out);
      }
    } else {
      out.append(s.substr(i, semi + 1));
    }
    i += semi;
  }
  return out;
}

std::string XmlTag(std::string_view xml, std::string_view tag, size_t from, size_t to) {
  to = std::min(to, xml.size());
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  const size_t a = FindBefore(xml, open, from, to);
  if (a == std::string_view::npos) return "";
  const size_t b = FindBefore(xml, close, a + open.size(), to);
  if (b == std::string_view::npos) return "";
  return XmlDecode(xml.substr(a + open.size(), b - a - open.size()));
}

Result<ListPage> ParseListPage(std::string_view xml, const std::string& prefix,
                               const std::string& what) {
  ListPage page;
  auto foreign = [&](const std::string& key) {
    return DataError(what + ": the server listed '" + key.substr(0, 200) +
                     "', which is not under the prefix asked for ('" + prefix + "')");
  };
  // Each element is searched for from where the last one closed, and its
  // close only up to the next one's open: linear in the page.
  for (std::string_view element : {std::string_view("Contents"), std::string_view("CommonPrefixes")}) {
    const std::string open = "<" + std::string(element) + ">";
    const std::string close = "</" + std::string(element) + ">";
    for (size_t at = xml.find(open); at != std::string_view::npos;) {
      const size_t end = xml.find(close, at + open.size());
      const size_t next = xml.find(open, at + open.size());
      if (end == std::string_view::npos || (next != std::string_view::npos && next < end)) {
        return DataError(what + ": a <" + std::string(element) + "> that is never closed "
                         "(a damaged listing)");
      }
      if (element == "Contents") {
        S3Object o;
        o.key = XmlTag(xml, "Key", at, end);
        if (o.key.compare(0, prefix.size(), prefix) != 0) {
          return foreign(o.key);
        }
        const std::string size = XmlTag(xml, "Size", at, end);
        char* stop = nullptr;
        const long long n = std::strtoll(size.c_str(), &stop, 10);
        if (size.empty() || *stop != '\0' || n < 0 || n >= (int64_t{1} << 50)) {
          return DataError(what + ": '" + o.key.substr(0, 200) + "' is listed with size '" +
                           size.substr(0, 40) + "'");
        }
        o.size = n;
        o.etag = XmlTag(xml, "ETag", at, end);
        page.objects.push_back(std::move(o));
      } else {
        std::string folder = XmlTag(xml, "Prefix", at, end);
        if (!folder.empty()) {
          if (folder.compare(0, prefix.size(), prefix) != 0) {
            return foreign(folder);
          }
          page.folders.push_back(std::move(folder));
        }
      }
      at = next;
    }
  }
  // The page's own flags: outside every element (a key may be named
  // "<IsTruncated>"... only as text, which is escaped; a damaged page is
  // caught above).
  page.truncated = XmlTag(xml, "IsTruncated") == "true";
  page.next_token = XmlTag(xml, "NextContinuationToken");
  if (page.truncated && page.next_token.empty()) {
    return DataError(what + ": a truncated listing without a continuation token");
  }
  return page;
}

double ParseRetryAfter(std::string_view line) {
  constexpr std::string_view kName = "retry-after:";
  if (line.size() <= kName.size()) return -1;
  for (size_t i = 0; i < kName.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) != kName[i]) return -1;
  }
  std::string value(line.substr(kName.size(), 64));
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
  size_t start = 0;
  while (start < value.size() && std::isspace(static_cast<unsigned char>(value[start]))) ++start;
  value = value.substr(start);
  // delta-seconds only (an HTTP-date is not waited for: the backoff applies).
  if (value.empty() || value.size() > 12 ||
      !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  return std::strtod(value.c_str(), nullptr);
}

uint64_t MaxBodyBytes(uint64_t offset, int64_t length, uint64_t whole_limit) {
  if (length < 0) return whole_limit;
  return offset + static_cast<uint64_t>(length);
}

Status CheckBody(const std::string& what, long http, bool ranged, uint64_t offset, int64_t length,
                 std::vector<uint8_t>* body) {
  if (http == 200 && ranged) {
    if (offset > body->size()) return DataError(what + ": shorter than the range asked for");
    const uint64_t end = length >= 0 ? std::min<uint64_t>(body->size(), offset + length) : body->size();
    body->erase(body->begin() + static_cast<int64_t>(end), body->end());
    body->erase(body->begin(), body->begin() + static_cast<int64_t>(offset));
  }
  if (length >= 0 && body->size() != static_cast<uint64_t>(length)) {
    return DataError(what + ": " + std::to_string(body->size()) + " bytes where " +
                     std::to_string(length) + " were asked for");
  }
  return Status::OK();
}

}  // namespace nostall
