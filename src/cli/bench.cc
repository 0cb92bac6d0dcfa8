// `nostall bench` and `nostall inspect`.
#include <signal.h>

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

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "nostall/bench.h"
#include "nostall/cache.h"
#include "nostall/loader.h"
#include "nostall/shared.h"
#include "nostall/source.h"
#include "common/clock.h"
#include "common/shm.h"
#include "ops/sample_kind.h"

namespace nostall::cli {

namespace {

constexpr const char* kBenchUsage = R"(usage: nostall bench PATH [options]    (or: nostall bench --spec FILE [options])

Runs RandomResizedCrop(SIZE) + RandomHorizontalFlip + Normalize (ImageNet
mean/std) into float32 NCHW batches, as fast as the batches come, and prints
images/s and where the time went.

options:
  --batch-size N        samples per batch (default 256)
  --threads N           decode+augment threads (default: tuned, from this process's cores)
  --reads-in-flight N   concurrent reads (default: tuned, from 4)
  --prefetch N          batches prepared ahead (default: tuned, from 2)
  --autotune            tune all three while it runs, starting from the values given,
                        and print the configuration it chose (without it, only the
                        ones not given are tuned)
  --no-autotune         tune none: unset ones are all cores, 4 reads, 2 batches
  --size N              output side in pixels (default 224)
  --epochs N            epochs to run (default 1)
  --max-batches N       stop after N batches (default: whole epochs)
  --spec FILE           use this loader spec (JSON) instead of the default
                        pipeline; PATH, if given, overrides its "source"
  --throttle-bandwidth B   emulate storage of B bytes/s (shared by all reads)
  --throttle-latency-ms M  emulate M ms of latency per read
  --json                print one JSON object instead of the table
  --quiet               no progress line
)";


// The pipeline `nostall bench` runs without --spec: RandomResizedCrop(size)
// + flip + ImageNet Normalize into float32 batches of 256, shuffled.
nostall::LoaderSpec DefaultBenchSpec(int size) {
  nostall::LoaderSpec spec;
  spec.batch_size = 256;
  spec.shuffle = true;
  nostall::Transform rrc{nostall::TransformKind::kRandomResizedCrop};
  rrc.height = rrc.width = size;
  nostall::Transform flip{nostall::TransformKind::kRandomHorizontalFlip};
  nostall::Transform norm{nostall::TransformKind::kNormalize};
  norm.mean = {0.485, 0.456, 0.406};
  norm.std = {0.229, 0.224, 0.225};
  spec.prep.transforms = {rrc, flip, norm};
  spec.prep.dtype = nostall::DType::kFloat32;
  return spec;
}


}  // namespace

// The spec `nostall bench` runs: --spec's or the default one, with the
// path and the options given; and how long (--epochs, --max-batches).
// 0, or the exit status of what was wrong.
int BenchSpec(const Args& args, nostall::LoaderSpec* spec, long long* epochs, long long* max_batches) {
  if (auto it = args.options.find("--spec"); it != args.options.end()) {
    auto parsed = ReadSpecFile(it->second);
    if (!parsed.ok()) return Fail(parsed.status());
    *spec = parsed.value();
  } else {
    long long size = 224;
    if (!IntOption(args, "--size", 1, &size)) return 2;
    *spec = DefaultBenchSpec(static_cast<int>(size));
  }
  long long batch = spec->batch_size, threads = spec->num_threads, reads = spec->reads_in_flight,
            prefetch = spec->prefetch;
  *epochs = 1, *max_batches = 0;
  if (!IntOption(args, "--batch-size", 1, &batch) || !IntOption(args, "--threads", 0, &threads) ||
      !IntOption(args, "--reads-in-flight", 0, &reads) ||
      !IntOption(args, "--prefetch", 0, &prefetch) || !IntOption(args, "--epochs", 1, epochs) ||
      !IntOption(args, "--max-batches", 0, max_batches, 1LL << 40)) {
    return 2;
  }
  long long bandwidth = 0, latency = 0;
  if (!IntOption(args, "--throttle-bandwidth", 0, &bandwidth, 1000000000000000LL) ||
      !IntOption(args, "--throttle-latency-ms", 0, &latency, 60000)) {
    return 2;
  }
  if (!args.positional.empty() || bandwidth > 0 || latency > 0) {
    // A path given replaces the spec's (its driver found again; the
    // options kept, checked by that driver), and the throttle is the local
    // drivers' option: the spec is read again with them.
    nlohmann::json j = nlohmann::json::parse(spec->ToJson());
    if (!args.positional.empty()) {
      j["source"]["uri"] = args.positional[0];
      j["source"].erase("driver");
    }
    if (bandwidth > 0) j["source"]["options"]["throttle_bandwidth"] = static_cast<double>(bandwidth);
    if (latency > 0) j["source"]["options"]["throttle_latency_ms"] = static_cast<double>(latency);
    auto again = nostall::LoaderSpec::FromJson(j.dump());
    if (!again.ok()) return Fail(again.status());
    *spec = again.value();
  }
  spec->batch_size = batch;
  spec->num_threads = static_cast<int>(threads);
  spec->reads_in_flight = static_cast<int>(reads);
  spec->prefetch = static_cast<int>(prefetch);
  if (Has(args, "--autotune") && Has(args, "--no-autotune")) {
    std::fputs("nostall bench: --autotune and --no-autotune contradict each other\n", stderr);
    return 2;
  }
  if (Has(args, "--autotune")) spec->autotune = "on";
  if (Has(args, "--no-autotune")) spec->autotune = "off";
  return 0;
}

// What `nostall bench` prints of a run (without --json): the rate, the
// stages' table, and with --autotune what the tuner chose and why.
void PrintBench(const nostall::LoaderSpec& spec, const nostall::ThroughputResult& res,
                const char* unit, bool autotune) {
  const std::string reads_text =
      res.stats.has_storage && spec.reads_in_flight == 0
          ? "reads in flight adaptive, " + std::to_string(res.stats.reads_in_flight_target) + " at the end"
          : std::to_string(res.stats.fetch.threads) + " reads in flight";
  std::printf("%s: %lld %s in %.2f s = %.1f %s/s (batch %lld, %d prep threads, %s)\n\n%s",
              spec.source.c_str(), static_cast<long long>(res.images), unit, res.seconds,
              res.images_per_second(), unit, static_cast<long long>(spec.batch_size),
              res.stats.prep.threads, reads_text.c_str(), res.stats.ToTable().c_str());
  if (res.stats.has_autotune && autotune) {
    std::printf("\nautotune chose: --threads %d --reads-in-flight %d --prefetch %d (%lld changes)\n",
                res.stats.autotune_threads, res.stats.autotune_reads, res.stats.autotune_prefetch,
                static_cast<long long>(res.stats.autotune_changes));
    for (const auto& d : res.stats.autotune_decisions) {
      std::printf("  %6.1f s  %-15s %d -> %d: %s\n", d.time_s, d.knob.c_str(), d.from, d.to,
                  d.why.c_str());
    }
  }
}

int Bench(const Args& args) {
  if (args.positional.empty() && !args.options.count("--spec")) {
    return UsageError(kBench, "missing PATH (an image folder, tar shards or s3://...; or --spec FILE)");
  }
  nostall::LoaderSpec spec;
  long long epochs = 1, max_batches = 0;
  if (int status = BenchSpec(args, &spec, &epochs, &max_batches); status != 0) return status;
  const bool json = Has(args, "--json");
  const bool show_progress = !Has(args, "--quiet") && !json && isatty(STDERR_FILENO);
  // An audio pipeline's samples are clips, not images.
  const char* unit = spec.prep.sample_kind().unit();
  auto progress = [&](int64_t images, double secs) {
    std::fprintf(stderr, "\r%lld %s, %.1f s, %.0f %s/s   ", static_cast<long long>(images), unit, secs,
                 secs > 0 ? images / secs : 0.0, unit);
  };
  auto r = nostall::MeasureThroughput(spec, static_cast<int>(epochs), max_batches,
                                      show_progress ? std::function<void(int64_t, double)>(progress)
                                                    : nullptr);
  if (show_progress) std::fputs("\r\033[K", stderr);
  if (!r.ok()) return Fail(r.status());
  const auto& res = r.value();
  if (json) {
    std::printf("{\"images\": %lld, \"batches\": %lld, \"seconds\": %.6f, \"images_per_s\": %.3f, "
                "\"stats\": %s}\n",
                static_cast<long long>(res.images), static_cast<long long>(res.batches),
                res.seconds, res.images_per_second(), res.stats.ToJson().c_str());
    return 0;
  }
  PrintBench(spec, res, unit, Has(args, "--autotune"));
  return 0;
}

int Inspect(const Args& args) {
  auto src = nostall::OpenSource(args.positional[0]);
  if (!src.ok()) return Fail(src.status());
  const nostall::Source& s = *src.value();
  int64_t known = 0;
  for (int64_t i = 0; i < s.size(); ++i) known += std::max<int64_t>(0, s.byte_size(i));
  std::printf("dataset:     %s\nkind:        %s\nitems:       %lld\n",
              nostall::TerminalSafe(args.positional[0]).c_str(),
              s.kind(), static_cast<long long>(s.size()));
  if (!s.classes().empty()) {
    std::printf("classes:     %zu (", s.classes().size());
    for (size_t i = 0; i < s.classes().size() && i < 8; ++i) {
      std::printf("%s%s", i ? ", " : "", nostall::TerminalSafe(s.classes()[i]).c_str());
    }
    std::printf("%s)\n", s.classes().size() > 8 ? ", ..." : "");
  }
  if (known > 0) std::printf("bytes:       %lld\n", static_cast<long long>(known));
  if (s.skipped_at_index() > 0) {
    std::printf("skipped:     %lld bad samples\n", static_cast<long long>(s.skipped_at_index()));
  }
  if (const std::string left = nostall::DescribeLeftOut(s); !left.empty()) {
    std::printf("left out:    %s\n", nostall::TerminalSafe(left).c_str());
  }
  // What the samples hold, for the fields a spec may ask for.
  const auto members = s.members_found();
  if (!members.empty()) {
    std::printf("fields:      ");
    for (size_t i = 0; i < members.size() && i < 16; ++i) {
      std::printf("%s.%s in %lld", i ? ", " : "", nostall::TerminalSafe(members[i].first).c_str(),
                  static_cast<long long>(members[i].second));
    }
    std::printf("%s samples\n", members.size() > 16 ? ", ..." : "");
  }
  if (!s.index_origin().empty()) std::printf("index:       %s\n", nostall::TerminalSafe(s.index_origin()).c_str());
  if (!s.index_note().empty()) std::printf("note:        %s\n", nostall::TerminalSafe(s.index_note()).c_str());
  std::printf("fingerprint: %016llx\n", static_cast<unsigned long long>(s.fingerprint()));
  return 0;
}

// `nostall index PATH`: builds the dataset's index and writes it beside the
// data, where every node and job that opens the dataset finds it.
int Index(const Args& args) {
  nostall::SourceOptions o;
  o.index_beside = "rebuild";
  o.skip_bad_samples = Has(args, "--skip-bad-samples");
  const std::string& path = args.positional[0];
  std::fprintf(stderr, "nostall index: indexing %s ...\n", nostall::TerminalSafe(path).c_str());
  auto src = nostall::OpenSource(path, o);
  if (!src.ok()) return Fail(src.status());
  const nostall::Source& s = *src.value();
  std::printf("dataset:     %s\nkind:        %s\nitems:       %lld\n",
              nostall::TerminalSafe(path).c_str(), s.kind(), static_cast<long long>(s.size()));
  if (s.skipped_at_index() > 0) {
    std::printf("skipped:     %lld bad samples\n", static_cast<long long>(s.skipped_at_index()));
  }
  std::printf("index:       %s\n", nostall::TerminalSafe(s.index_origin()).c_str());
  std::printf("fingerprint: %016llx\n", static_cast<unsigned long long>(s.fingerprint()));
  return 0;
}

const Command kBench = {
    "bench", kBenchUsage,
    {"--batch-size", "--threads", "--reads-in-flight", "--prefetch", "--size", "--epochs",
     "--max-batches", "--spec", "--throttle-bandwidth", "--throttle-latency-ms"},
    {"--json", "--quiet", "--autotune", "--no-autotune"},
    {"PATH"}, 0, Bench};

const Command kInspect = {
    "inspect",
    "usage: nostall inspect PATH\n\nPrints the dataset's kind, item count, classes, bytes, files "
    "left out,\nthe members its samples hold (tar shards: .jpg in 1000, .json in 999 ... samples,\n"
    "what a loader's fields= may name) and fingerprint, building (and caching) its index if needed. PATH is an image\n"
    "folder, tar shards (\"shards/train-{0000..0099}.tar\") or s3://bucket/prefix/.\n",
    {}, {}, {"PATH (an image folder, tar shards or s3://...)"}, 1, Inspect};

const Command kIndex = {
    "index",
    "usage: nostall index PATH [--skip-bad-samples]\n\n"
    "Builds the dataset's index and writes it beside the data, where every node, container and\n"
    "job that opens the dataset finds it (an image folder's PATH/.nostall-index; tar shards'\n"
    "PATTERN.nostall-index in the shards' folder: PATH \"shards/train-{0000..0099}.tar\" gives\n"
    "shards/train-{0000..0099}.tar.nostall-index). A loader then starts without listing the\n"
    "folder or reading the shards, and shuffles exactly from its first epoch. The file is\n"
    "checked when it is opened (its hash, every item, the data's stamps): a stale or damaged\n"
    "one is not used (the loader says so and indexes as if it were not there).\n\n"
    "  --skip-bad-samples   drop tar samples without an image or a good .cls (counted),\n"
    "                       instead of failing; such an index serves only loaders with\n"
    "                       on_error=\"skip\"\n",
    {}, {"--skip-bad-samples"}, {"PATH (an image folder or tar shards)"}, 1, Index};

}  // namespace nostall::cli
