// What a person sees while a large dataset is indexed: after the first two
// seconds, one line on stderr with how far it has come ("nostall: indexing
// shards/train-{0000..0999}.tar: 312 of 1,000 shards, 41.2 GB, 23 s"),
// redrawn every second on a terminal, written every ten seconds elsewhere
// (a job's log), and a last line when it is done. Short starts print
// nothing (NOSTALL_PROGRESS_AFTER: seconds before the first line, default
// 2); NOSTALL_QUIET=1 prints nothing. Thread-safe.
#ifndef NOSTALL_SOURCE_INDEX_INDEX_PROGRESS_H_
#define NOSTALL_SOURCE_INDEX_INDEX_PROGRESS_H_

#include <cstdint>
#include <mutex>
#include <string>

namespace nostall {

class IndexProgress {
 public:
  // `what`: the dataset as the user named it; `unit`: what `total` counts
  // ("shards", "class folders", "class prefixes").
  IndexProgress(std::string what, std::string unit, int64_t total);
  ~IndexProgress();  // the last line, if any was written
  IndexProgress(const IndexProgress&) = delete;
  IndexProgress& operator=(const IndexProgress&) = delete;

  // One more unit done, with `bytes` read and `items` found in it.
  void Done(uint64_t bytes, int64_t items);

 private:
  void Print(bool last);  // with mu_ held
  std::mutex mu_;
  const std::string what_, unit_;
  const int64_t total_;
  const int64_t start_ns_;
  const int64_t quiet_for_ns_;
  const bool quiet_, tty_;
  int64_t done_ = 0, items_ = 0;
  uint64_t bytes_ = 0;
  int64_t last_print_ns_ = 0;
  bool printed_ = false;
};

}  // namespace nostall

#endif  // NOSTALL_SOURCE_INDEX_INDEX_PROGRESS_H_
