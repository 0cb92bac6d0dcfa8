#include "source/index/index_progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/clock.h"

namespace nostall {
namespace {

constexpr int64_t kTtyEvery = 1'000'000'000;      // a terminal's line, redrawn
constexpr int64_t kLogEvery = 10'000'000'000;     // a log's lines

std::string Grouped(int64_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && digits[i] != '-' && (digits.size() - i) % 3 == 0 && digits[i - 1] != '-') out += ',';
    out += digits[i];
  }
  return out;
}

std::string Bytes(uint64_t b) {
  char buf[32];
  if (b >= (uint64_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.1f GB", static_cast<double>(b) / 1e9);
  } else if (b >= 1000000) {
    std::snprintf(buf, sizeof buf, "%.0f MB", static_cast<double>(b) / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f kB", static_cast<double>(b) / 1e3);
  }
  return buf;
}

// A start shorter than this says nothing.
int64_t QuietForNs() {
  const char* s = std::getenv("NOSTALL_PROGRESS_AFTER");
  char* end = nullptr;
  const double v = s != nullptr ? std::strtod(s, &end) : -1;
  return s != nullptr && end != s && v >= 0 && v < 1e6 ? static_cast<int64_t>(v * 1e9) : 2'000'000'000;
}

bool Quiet() {
  const char* q = std::getenv("NOSTALL_QUIET");
  return q != nullptr && *q != '\0' && std::strcmp(q, "0") != 0;
}

}  // namespace

IndexProgress::IndexProgress(std::string what, std::string unit, int64_t total)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      total_(total),
      start_ns_(NowNs()),
      quiet_for_ns_(QuietForNs()),
      quiet_(Quiet()),
      tty_(::isatty(STDERR_FILENO) == 1) {}

IndexProgress::~IndexProgress() {
  std::lock_guard<std::mutex> lock(mu_);
  if (printed_) Print(/*last=*/true);
}

void IndexProgress::Done(uint64_t bytes, int64_t items) {
  std::lock_guard<std::mutex> lock(mu_);
  ++done_;
  bytes_ += bytes;
  items_ += items;
  const int64_t now = NowNs();
  if (quiet_ || now - start_ns_ < quiet_for_ns_ ||
      (printed_ && now - last_print_ns_ < (tty_ ? kTtyEvery : kLogEvery))) {
    return;
  }
  last_print_ns_ = now;
  Print(/*last=*/false);
}

void IndexProgress::Print(bool last) {
  const double s = static_cast<double>(NowNs() - start_ns_) / 1e9;
  std::string line = "nostall: indexing " + what_ + ": " + Grouped(done_) + " of " + Grouped(total_) +
                     " " + unit_ + ", " + Grouped(items_) + " items";
  if (bytes_ > 0) line += ", " + Bytes(bytes_) + " read";
  char tail[48];
  std::snprintf(tail, sizeof tail, ", %.0f s", s);
  line += tail;
  if (last) line += " (done)";
  std::fprintf(stderr, tty_ && !last ? "\r%s\033[K" : (tty_ ? "\r%s\033[K\n" : "%s\n"), line.c_str());
  std::fflush(stderr);
  printed_ = true;
}

}  // namespace nostall
