// The pipeline loader: runs the parts' threads and answers as a Loader.
//
//   fetch threads / dispatcher ---> prep queue ---> prep threads ---> slots ---> Next()
//          (Fetcher)               (Scheduler)      (Preparer)     (Scheduler)
//
// The scheduler (scheduler.h) owns the scheduling state and its one mutex;
// the fetcher (fetcher.h) reads, from cache tiers then storage; the
// preparer (preparer.h) decodes into the slot; the tuner's thread
// (tune_loop.h) turns the knobs through the Tunable interface this class
// implements. Shutdown: the tuner first (it starts workers), then the
// scheduler is cancelled (every waiter wakes), every worker joined, and a
// remote source's reads still in flight cancelled and waited for.
//
// A remote source (Source::ReadsAsync) is read without a thread per read:
// one dispatch thread claims positions and starts reads, which complete on
// the source's I/O thread into the prep queue. How many are in flight is
// `reads_in_flight` when the spec fixes it, else sized by Little's law from
// the measured request latency and the rate prep can take items at
// (AdaptReadLimit).
//
// Autotuned knobs move while it runs: prep and fetch threads are started up
// to the count asked for and park beyond it; the slots in use are bounded
// within a ring reserved for the most the tuner may ask. Batches do not
// depend on any of it: each sample's place and randomness come from its
// position, whichever thread makes it.
#ifndef NOSTALL_PIPELINE_PIPELINE_LOADER_H_
#define NOSTALL_PIPELINE_PIPELINE_LOADER_H_

#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "nostall/cache.h"
#include "nostall/loader.h"
#include "pipeline/fetcher.h"
#include "pipeline/pipeline.h"
#include "pipeline/preparer.h"
#include "pipeline/scheduler.h"
#include "pipeline/tune_loop.h"
#include "stats/consumer_recorder.h"

namespace nostall {

class PipelineLoader final : public Loader, public Tunable {
 public:
  explicit PipelineLoader(PipelineParts parts);
  ~PipelineLoader() override;

  // `ring`: a named ring to fill (the shared producer's); null: a private one.
  Status Init(std::shared_ptr<ring::Segment> ring);

  Status StartEpoch(int64_t epoch, int64_t first_batch) override {
    return scheduler_->StartEpoch(epoch, first_batch);
  }
  Status Next(int64_t timeout_ms, NextStatus* status, std::shared_ptr<Batch>* out) override {
    return scheduler_->Next(timeout_ms, status, out);
  }
  LoaderStats Stats() const override;
  const Source& source() const override { return *source_; }
  const Sampler& sampler() const override { return sampler_; }
  Status EvictPageCache() const override;
  Status RunInBackground() override;
  const LoaderSpec& spec() const override { return spec_; }
  std::vector<int64_t> SampleShape() const override {
    return SampleShapeOf(spec_.prep, out_h_, out_w_);
  }

 private:
  // Tunable.
  Sample Measure() const override;
  Status Apply(const AutotuneDecision& d) override;

  Result<std::shared_ptr<ring::Segment>> MakeRing() const;
  Status StartThreads();
  // Starts workers up to the counts now asked for (threads start parked
  // beyond it, so the tuner never waits for one to start).
  void StartWorkers(const Scheduler::Knobs& k);
  void FetchLoop(int index);
  void DispatchLoop();
  void PrepLoop(int index);
  void AdaptReadLimit();
  // A worker thread's start: known by its id, in the background if the loader is.
  void Registered();

  const LoaderSpec spec_;
  const std::unique_ptr<Source> source_;
  const std::unique_ptr<Cache> cache_;  // may be null
  const Sampler sampler_;
  const int out_h_, out_w_;
  const int64_t created_ns_;
  const AutotuneLimits tune_;
  const bool adapt_requests_;  // a remote source's requests follow AdaptReadLimit
  // A shared producer's consumers' waits (null: this loader's own callers').
  const std::function<int64_t()> consumer_waited_ns_;
  bool own_ring_ = true;  // not a shared producer's: empty batches dropped, copies made
  int64_t slots_reserved_ = 0;  // of the ring's slots: memory reserved (Init, then the tuner)

  ConsumerRecorder consumer_;
  Fetcher fetcher_;
  std::shared_ptr<RingState> ring_;
  std::unique_ptr<Preparer> preparer_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::thread> threads_;  // fetch and prep workers (the tuner may add some)
  int prep_started_ = 0, fetch_started_ = 0;  // Init's thread, then the tuner's
  std::mutex tids_mu_;
  std::vector<int> tids_;  // the workers' thread ids (RunInBackground)
  bool background_ = false;  // guarded by tids_mu_
  std::unique_ptr<TuneLoop> tuner_;   // null: nothing tuned; stopped first
};

}  // namespace nostall

#endif  // NOSTALL_PIPELINE_PIPELINE_LOADER_H_
