// Index pages read as folder listings (http_listing.h).
#include "store/http_listing.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "store/s3_response.h"

namespace nostall::store {
namespace {

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The value of the href attribute that starts at `at` (just past "href"),
// and where it ends.
std::string_view HrefValue(std::string_view html, size_t* at) {
  size_t p = *at;
  while (p < html.size() && std::isspace(static_cast<unsigned char>(html[p]))) ++p;
  if (p >= html.size() || html[p] != '=') return {};
  ++p;
  while (p < html.size() && std::isspace(static_cast<unsigned char>(html[p]))) ++p;
  if (p >= html.size()) return {};
  size_t end;
  std::string_view v;
  if (html[p] == '"' || html[p] == '\'') {
    end = html.find(html[p], p + 1);
    if (end == std::string_view::npos) return {};
    v = html.substr(p + 1, end - p - 1);
  } else {
    end = p;
    while (end < html.size() && !std::isspace(static_cast<unsigned char>(html[end])) && html[end] != '>') ++end;
    v = html.substr(p, end - p);
  }
  *at = end;
  return v;
}

// A link as an entry of this folder, or "" when it is not one.
std::string Entry(std::string_view link) {
  std::string s = XmlDecode(link);  // &amp; and the rest, as HTML writes them in attributes
  const size_t cut = s.find_first_of("?#");
  if (cut == 0) return "";  // a sort link, a fragment
  if (cut != std::string::npos) s.resize(cut);
  if (s.empty() || s[0] == '/' || s.find("://") != std::string::npos || s.rfind("./", 0) == 0 ||
      s.find(':') != std::string::npos) {
    return "";  // elsewhere: an absolute path, another host, mailto:, javascript:
  }
  s = PercentDecode(s);
  const size_t slash = s.find('/');
  if (slash != std::string::npos && slash + 1 != s.size()) return "";  // not a direct child
  if (s == "../" || s == ".." || s == "./" || s == "." || s.find('\0') != std::string::npos) return "";
  return s;
}

}  // namespace

std::string PercentDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && Hex(s[i + 1]) >= 0 && Hex(s[i + 2]) >= 0) {
      out += static_cast<char>(Hex(s[i + 1]) * 16 + Hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::vector<std::string> IndexLinks(std::string_view html) {
  std::set<std::string> found;
  for (size_t p = 0; p + 4 < html.size();) {
    const size_t h = p;
    if ((html[h] | 0x20) == 'h' && (html[h + 1] | 0x20) == 'r' && (html[h + 2] | 0x20) == 'e' &&
        (html[h + 3] | 0x20) == 'f' && (h == 0 || std::isspace(static_cast<unsigned char>(html[h - 1])))) {
      size_t at = h + 4;
      std::string_view v = HrefValue(html, &at);
      if (!v.empty()) {
        std::string e = Entry(v);
        if (!e.empty()) found.insert(std::move(e));
      }
      p = std::max(at, h + 4);
    } else {
      ++p;
    }
  }
  return {found.begin(), found.end()};
}

}  // namespace nostall::store
