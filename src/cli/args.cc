// The argument parser and helpers every command uses.
#include "cli/cli.h"
#include "nostall/cache.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace nostall::cli {

namespace {
bool In(const std::vector<const char*>& names, const std::string& a) {
  for (const char* n : names) {
    if (a == n) return true;
  }
  return false;
}
}  // namespace

std::string Parse(const Command& cmd, int argc, char** argv, int start, Args* args) {
  for (int i = start; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("-", 0) != 0 || a == "-") {
      args->positional.push_back(a);
      continue;
    }
    if (a == "--help" || a == "-h" || In(cmd.flags, a)) {
      args->flags.push_back(a);
      continue;
    }
    std::string value;
    bool has_value = false;
    if (const size_t eq = a.find('='); eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    if (In(cmd.flags, a)) return "option " + a + " takes no value";
    if (!In(cmd.options, a)) return "unknown option " + a;
    if (!has_value) {
      if (i + 1 >= argc) return "option " + a + " needs a value";
      value = argv[++i];
    }
    args->options[a] = value;
  }
  if (Has(*args, "--help") || Has(*args, "-h")) return "";
  if (args->positional.size() > cmd.positional.size()) {
    return "unexpected argument '" + args->positional[cmd.positional.size()] + "'";
  }
  if (args->positional.size() < cmd.required) {
    return std::string("missing ") + cmd.positional[args->positional.size()];
  }
  return "";
}

int UsageError(const Command& cmd, const std::string& what) {
  std::fprintf(stderr, "nostall %s: %s\n", cmd.name, what.c_str());
  // The first line of the help: the synopsis, then where the rest is.
  std::string help = cmd.help;
  std::fprintf(stderr, "%s\n(nostall %s --help says more)\n",
               help.substr(0, help.find('\n')).c_str(), cmd.name);
  return 2;
}

bool Has(const Args& a, const char* flag) {
  for (const auto& f : a.flags) {
    if (f == flag) return true;
  }
  return false;
}

bool IntOption(const Args& a, const char* name, long long lo, long long* out, long long hi) {
  auto it = a.options.find(name);
  if (it == a.options.end()) return true;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
    std::fprintf(stderr, "nostall: %s must be an integer in [%lld, %lld], not '%s'\n", name, lo, hi,
                 it->second.c_str());
    return false;
  }
  *out = v;
  return true;
}

int Fail(const nostall::Status& st) {
  std::fprintf(stderr, "nostall: %s\n", st.ToString().c_str());
  return 1;
}

nostall::Result<nostall::LoaderSpec> ReadSpecFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nostall::NotFound("cannot read spec file " + path + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  nostall::Result<nostall::LoaderSpec> spec = nostall::LoaderSpec::FromJson(ss.str());
  if (spec.ok()) {
    for (const std::string& note : spec.value().notes) {
      std::fprintf(stderr, "nostall: %s: %s\n", path.c_str(), note.c_str());
    }
  }
  return spec;
}

uint64_t ParseSize(const std::string& text) {
  nostall::Result<uint64_t> bytes = nostall::ParseByteSize(text);
  return bytes.ok() ? bytes.value() : 0;
}

std::vector<std::string> SplitCommas(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace nostall::cli
