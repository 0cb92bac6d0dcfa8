// The `nostall` command: argument parsing only; the work is in the library.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "cli/cli.h"

namespace nostall::cli {

// Commands that run Python (`analyze` runs the user's training step; `serve
// --ray` runs Ray) are the Python package's: hand over to the interpreter
// installed beside this binary (a virtual environment's bin/), else
// $NOSTALL_PYTHON, else python3, as `python -m nostall COMMAND ARGS...`.
int HandToPython(const char* command, const std::vector<std::string>& given) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("NOSTALL_PYTHON")) candidates.push_back(env);
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));
    candidates.push_back(dir + "/python3");
    candidates.push_back(dir + "/python");
  }
  // Not the current folder first on sys.path (as `python -m` puts it): a
  // json.py there would run inside the analysis. The step's own module is
  // still found there (load_step looks in it last). PYTHONSAFEPATH is
  // Python 3.11's -P, ignored by older ones.
  ::setenv("PYTHONSAFEPATH", "1", 1);
  std::vector<std::string> words = {"", "-m", "nostall", command};
  words.insert(words.end(), given.begin(), given.end());
  std::vector<char*> args;
  for (std::string& w : words) args.push_back(w.data());
  args.push_back(nullptr);
  for (std::string& py : candidates) {
    if (::access(py.c_str(), X_OK) != 0) continue;
    args[0] = py.data();
    ::execv(py.c_str(), args.data());
  }
  std::string python3 = "python3";
  args[0] = python3.data();
  ::execvp("python3", args.data());
  std::fprintf(stderr, "nostall %s: cannot run python3 (%s); it runs Python code, so it needs the Python "
               "that has nostall installed: set NOSTALL_PYTHON, or run `python -m nostall %s ...`\n",
               command, std::strerror(errno), command);
  return 1;
}

}  // namespace nostall::cli

namespace {

constexpr const char* kUsage = R"(usage: nostall <command> [options]

Data loading for deep-learning training, without data stalls.

commands:
  bench PATH | --spec FILE
                  measure images/s of a pipeline over a dataset, with a
                  per-stage breakdown (fetch, decode+augment, batch, consumer)
  analyze --spec SPEC --step MODULE:FUNCTION
                  where your training job's time goes (compute, prep stall,
                  fetch stall), what-if predictions (cache, cores, storage,
                  jobs) and what removes the stall; table, JSON and HTML
  analyze --trace TRACE [--spec SPEC] [--predict CHANGE ...]
                  the same for your own loop's torch.profiler trace: each
                  step's critical path (data, CPU, GPU, copies, sync) and
                  what a change would give (nostall, GPU 2x, AMP, ...)
  serve --spec SPEC --name NAME
                  run one pipeline for every training job on this node;
                  each attaches with nostall.Loader.attach(NAME, batch_size)
  inspect PATH    show what nostall sees in a dataset: kind, items, classes
  index PATH      write the dataset's index beside the data, where every node
                  and job finds it: starts in a second, exact shuffle at once
  cache ls        list the MinIO caches on this node
  cache inspect NAME   size, fill, items, hit statistics, owning dataset
  cache rm NAME   remove a cache (loaders attached keep theirs until they close)
  cache serve --size SIZE   run this node's memcached for the cluster cache
                  (never evicts), or print the command (--print)
  cache inspect --servers HOST:PORT,...   the cluster cache's servers
  shared ls       list the shared loaders on this node (serving, stopped, dead)
  shared inspect NAME  producer, dataset, stream position, consumers
  shared rm NAME  remove a dead producer's shared memory
  help            show this message

PATH is an image folder (one subfolder per class), WebDataset tar shards
("shards/train-{0000..0099}.tar"), or either under s3://bucket/prefix.
`nostall COMMAND --help` shows a command's options; a mistake is said in one
line, then the command's synopsis.
)";


int Analyze(char** argv) {
  std::vector<std::string> given;
  for (char** a = argv + 2; *a != nullptr; ++a) given.push_back(*a);
  return nostall::cli::HandToPython("analyze", given);
}

// "usage: nostall GROUP SUB ..." for each subcommand: their synopses.
void GroupSynopsis(const char* group, const nostall::cli::Command* subs, size_t n, std::FILE* out) {
  for (size_t i = 0; i < n; ++i) {
    const std::string h = subs[i].help;
    std::fprintf(out, "%s%s\n", i == 0 ? "usage: " : "       ",
                 h.substr(7, h.find('\n') - 7).c_str());  // after "usage: "
  }
  std::fprintf(out, "(nostall %s SUBCOMMAND --help shows each one's options)\n", group);
}

// `nostall GROUP SUB ...`: the subcommand's own table, or what is wrong.
int RunGroup(const char* group, const nostall::cli::Command* subs, size_t n, int argc,
             char** argv) {
  using namespace nostall::cli;
  std::string names;
  for (size_t i = 0; i < n; ++i) {
    names += (i ? ", " : "") + std::string(subs[i].name).substr(std::strlen(group) + 1);
  }
  if (argc < 3 || std::strcmp(argv[2], "--help") == 0 || std::strcmp(argv[2], "-h") == 0) {
    const bool help = argc >= 3;
    std::FILE* out = help ? stdout : stderr;
    if (!help) std::fprintf(stderr, "nostall %s: missing subcommand (%s)\n", group, names.c_str());
    GroupSynopsis(group, subs, n, out);
    return help ? 0 : 2;
  }
  for (size_t i = 0; i < n; ++i) {
    if (std::string(subs[i].name) == std::string(group) + " " + argv[2]) {
      Args args;
      if (std::string err = Parse(subs[i], argc, argv, 3, &args); !err.empty()) {
        return UsageError(subs[i], err);
      }
      if (Has(args, "--help") || Has(args, "-h")) {
        std::fputs(subs[i].help, stdout);
        return 0;
      }
      return subs[i].run(args);
    }
  }
  std::fprintf(stderr, "nostall %s: unknown subcommand '%s' (%s)\n", group, argv[2], names.c_str());
  GroupSynopsis(group, subs, n, stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace nostall::cli;
  if (argc < 2) {
    std::fputs("nostall: missing command\n\n", stderr);
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "help" || cmd == "--help" || cmd == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "version") {
    std::puts("nostall " NOSTALL_VERSION);
    return 0;
  }
  if (cmd == "analyze") return Analyze(argv);
  if (cmd == "cache") return RunGroup("cache", kCacheCommands, std::size(kCacheCommands), argc, argv);
  if (cmd == "shared") return RunGroup("shared", kSharedCommands, std::size(kSharedCommands), argc, argv);
  for (const Command* c : {&kBench, &kInspect, &kIndex, &kServe}) {
    if (cmd != c->name) continue;
    Args args;
    if (std::string err = Parse(*c, argc, argv, 2, &args); !err.empty()) return UsageError(*c, err);
    if (Has(args, "--help") || Has(args, "-h")) {
      std::fputs(c->help, stdout);
      return 0;
    }
    return c->run(args);
  }
  std::fprintf(stderr, "nostall: unknown command '%s'\nusage: nostall <command> [options]\n"
               "(nostall --help lists the commands)\n", cmd.c_str());
  return 2;
}
