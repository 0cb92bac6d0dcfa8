// The `nostall` command's shared pieces: its argument parser and small
// helpers, and one entry point per command (each in its own file:
// bench.cc, serve.cc (serve, shared), cache.cc (cache), main.cc (the rest)).
#ifndef NOSTALL_CLI_CLI_H_
#define NOSTALL_CLI_CLI_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nostall/loader.h"
#include "nostall/status.h"

namespace nostall::cli {

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;
  std::vector<std::string> flags;
};

// argv[start..] into positional arguments, --options with values, flags.
bool Parse(int argc, char** argv, int start, Args* args);
bool Has(const Args& a, const char* flag);
// Reads integer option `name` (>= lo) into *out when given; false (and a
// message) when it is not a number.
bool IntOption(const Args& a, const char* name, long long lo, long long* out,
               long long hi = 2147483647);
// Prints the error; returns the exit status 1.
int Fail(const nostall::Status& st);
nostall::Result<nostall::LoaderSpec> ReadSpecFile(const std::string& path);
// "40GiB", "512MB", "1.5G", "1048576" -> bytes; 0 when unreadable.
uint64_t ParseSize(const std::string& text);
std::vector<std::string> SplitCommas(const std::string& list);

int Bench(const Args& args);
int Inspect(const Args& args);
int Serve(const Args& args);
int SharedCommand(const Args& args);
int CacheCommand(const Args& args);

}  // namespace nostall::cli

#endif  // NOSTALL_CLI_CLI_H_
