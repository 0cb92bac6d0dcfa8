// The epoch cursor: which epoch a loader runs, how far into it the caller
// is, and where a checkpoint resumes. One implementation for Python's
// iteration and state_dict(), the CLI and `serve` (docs/trainers.md):
//   - SetEpoch(e) picks the epoch the next Begin() runs (trainers call it:
//     Lightning through loader.sampler, Accelerate through the loader);
//     naming the epoch that is running while it runs changes nothing.
//   - Begin() without SetEpoch, after a pass that handed out a batch (its
//     epoch finished, or abandoned part-way: a `break`, a peek with
//     next(iter(loader))), runs the next epoch, as a DataLoader draws a new
//     order for every iter(); after a pass that handed out nothing (an
//     iter() never advanced) it begins that pass again, where it began; a
//     loaded state resumes at its batch. SetEpoch(e) makes the next Begin()
//     run e from its start, also when e is the abandoned pass's epoch.
//   - An epoch is over once its last batch is handed out, whether or not
//     the caller then asks for the end (trainers stop at len(loader)).
//   - StateJson() is where the next batch comes from: a loaded state not
//     yet begun; SetEpoch's choice; the epoch after a finished one; the
//     running epoch's position; else the epoch's start (nostall/resume.h).
// Not thread-safe: it follows one caller's iteration.
#ifndef NOSTALL_EPOCH_CURSOR_H_
#define NOSTALL_EPOCH_CURSOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nostall/loader.h"
#include "nostall/resume.h"
#include "nostall/status.h"

namespace nostall {

class EpochCursor {
 public:
  // `shared_name`: the shared loader `loader` consumes ("" for its own).
  EpochCursor(Loader* loader, std::string shared_name);

  Status SetEpoch(int64_t epoch);
  // Starts the epoch the rules above pick, on the loader (start_loader
  // false: only picks it; its batches are made elsewhere, docs/remote.md).
  Status Begin(bool start_loader = true);
  // The pass Begin picked is elastic (sampler.h): its steps.
  const std::vector<ElasticStep>& elastic() const { return elastic_; }
  // What Next() gave. Each returns true when that batch ended the epoch.
  bool Delivered(int64_t batch_index);  // a batch (its index in the epoch)
  bool Failed();                         // a bad batch, raised and consumed
  bool Ended();                          // the end of the epoch

  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }  // batches handed out this epoch
  bool active() const { return active_; }
  int64_t batches_per_epoch() const;

  Result<std::string> StateJson() const;
  // Makes the next Begin() continue where `state` was taken (checked
  // against the loader: resume.h says what must match).
  Status LoadStateJson(const std::string& state);

 private:
  bool NoteEnd();
  bool RankZeroHasBatches(const ResumePoint& p) const;

  Loader* const loader_;
  const std::string shared_;
  int64_t epoch_ = 0;
  bool epoch_set_ = false;  // SetEpoch called since the last Begin
  int64_t position_ = 0;
  bool active_ = false;
  int64_t handed_ = 0;  // batches this pass handed out (or failed)
  bool named_running_ = false;  // SetEpoch named this pass's epoch while it ran
  std::optional<int64_t> finished_;   // the epoch whose last batch was handed out
  std::optional<ResumePoint> resume_;  // loaded, not yet begun
  std::optional<ResumePoint> began_at_;  // the loaded state this pass began at
  std::vector<ElasticStep> elastic_;     // this pass's epoch is elastic (sampler.h)
};

}  // namespace nostall

#endif  // NOSTALL_EPOCH_CURSOR_H_
