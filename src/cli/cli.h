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

// What one command (or subcommand: "cache ls") takes, so that every command
// parses the same way: an unknown option is named as unknown, a missing or
// extra argument is said in one line, and `--help` prints its own text.
struct Command {
  const char* name;                    // as typed: "bench", "cache serve"
  const char* help;                    // the whole --help text (starts with "usage: ")
  std::vector<const char*> options;    // --options that take a value
  std::vector<const char*> flags;      // --flags without one (--help and -h always)
  std::vector<const char*> positional; // PATH, NAME ... in order
  size_t required = 0;                 // how many of `positional` must be given
  int (*run)(const Args&) = nullptr;
};

// argv[start..] into `args` for `cmd`. Returns "" or what is wrong, in one
// line ("unknown option --bogus", "missing PATH", "unexpected argument 'x'").
std::string Parse(const Command& cmd, int argc, char** argv, int start, Args* args);
// Prints "nostall CMD: WHAT" and where the options are; returns exit status 2.
int UsageError(const Command& cmd, const std::string& what);
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

// Runs `python -m nostall COMMAND ARGS...` in place of this process (the
// Python beside this binary, $NOSTALL_PYTHON or python3): the commands that
// run Python code (analyze, serve --ray). Returns only when it cannot.
int HandToPython(const char* command, const std::vector<std::string>& args);

// The commands, one table each (bench.cc, serve.cc, cache.cc).
extern const Command kBench;
extern const Command kInspect;
extern const Command kIndex;
extern const Command kServe;
extern const Command kSharedCommands[3];  // shared ls | inspect | rm
extern const Command kCacheCommands[4];   // cache ls | inspect | rm | serve

}  // namespace nostall::cli

#endif  // NOSTALL_CLI_CLI_H_
