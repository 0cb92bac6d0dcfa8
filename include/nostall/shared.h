// Shared loader: one pipeline feeds every training job on the node.
//
// A producer (`nostall serve`, nostall.serve) runs one pipeline and publishes
// its batches, in chunks of `chunk` samples, into a named shared-memory
// segment of chunk slots. Consumers (Loader.attach) map the segment and read
// the chunks in the producer's order, each cutting them into its own batch
// size: zero-copy views when a batch lies inside one chunk, one copy when it
// spans two. The producer overwrites a slot only when no attached consumer
// still needs its chunk or holds a view of it; one that holds everybody back
// longer than `max_lag_s` is left behind, and continues on a private pipeline
// built from the same spec at its exact position (it may rejoin later).
// Dead consumers are found by pid and start time within 100 ms; a dead or
// silent producer is found by its heartbeat. The protocol is written down in
// docs/ring_format.md.
#ifndef NOSTALL_SHARED_H_
#define NOSTALL_SHARED_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nostall/loader.h"
#include "nostall/ring_consumer.h"
#include "nostall/status.h"

namespace nostall {

struct ServeOptions {
  int64_t chunk = 0;         // samples per chunk; 0: the spec's batch_size
  int max_consumers = 8;
  int slots = 0;             // chunk slots; 0: 4 + 2 * max_consumers
  double max_lag_s = 1.0;    // how far behind (in seconds of the stream) a consumer may set the pace
  int64_t block_chunks = 0;  // shuffle block, in chunks; 0: about 1/16 of an epoch
  bool verbose = false;      // log attaches, departures and evictions to stderr
  // Share with a group's users (serve --group): the segment is that group's
  // and 0660; -1: the owner's alone (0600).
  int64_t share_gid = -1;
  // The chunks come from the caller (Feed: prep on other machines, made by
  // nostall.ray and written in by Python), not from a pipeline of this
  // process; images and labels only (no extra fields, one sample shape).
  bool fed = false;
};

// A fed producer's slot to write the next chunk into: `images` (chunk x
// sample_bytes), `labels` and `indices` (chunk int64s each).
struct FedSlot {
  uint32_t slot = 0;
  uint8_t* images = nullptr;
  int64_t* labels = nullptr;
  int64_t* indices = nullptr;
  int64_t chunk = 0;          // samples it holds at most
  uint64_t sample_bytes = 0;  // bytes of one sample in `images`
};

struct ProducerStatus {
  int64_t produced = 0;  // chunks published
  int64_t chunks_per_epoch = 0;
  int64_t evictions = 0;  // consumers left behind for lagging
  int64_t reaped = 0;     // dead consumers released
  std::vector<ConsumerInfo> consumers;
  // {"produced", "chunks_per_epoch", "evictions", "reaped", "consumers":
  // [{"pid", "state", "need"}], "running", "pipeline": its LoaderStats}.
  std::string ToJson(bool running, const LoaderStats& pipeline) const;
};

class SharedProducer {
 public:
  // Creates the segment /nostall-shared-UID-NAME (0600, or 0660 for
  // options.share_gid's users). A segment of that name
  // whose producer is alive is an error; a dead producer's is replaced.
  static Result<std::unique_ptr<SharedProducer>> Create(const std::string& name,
                                                        const LoaderSpec& spec,
                                                        const ServeOptions& options);
  virtual ~SharedProducer() = default;  // marks the segment closed and unlinks it
  // Serves until `stop` is true (checked every few milliseconds) or the
  // pipeline fails (the error is returned and recorded for consumers).
  virtual Status Run(const std::atomic<bool>& stop) = 0;
  virtual ProducerStatus Snapshot() const = 0;
  // The pipeline's own stats (its stages, the autotuner's decisions).
  virtual LoaderStats PipelineStats() const = 0;
  virtual const LoaderSpec& spec() const = 0;  // the producer's (batch_size = chunk)
  // A fed producer (ServeOptions::fed), from one thread: a slot for the next
  // chunk, once one is free (false: not within `timeout_s`, or a stop);
  // then Publish the chunk written there, `count` samples, chunk `chunk` of
  // `epoch` of the producer's order; Fail records an error for consumers
  // and ends Run with it.
  virtual Result<bool> NextSlot(double timeout_s, const std::atomic<bool>& stop, FedSlot* out) = 0;
  virtual Status Publish(const FedSlot& slot, int64_t count, int64_t epoch, int64_t chunk) = 0;
  virtual void Fail(const Status& error) = 0;
};

struct AttachOptions {
  int64_t batch_size = 1;
  // No heartbeat from the producer for this long: it is gone.
  double producer_timeout_s = 5.0;
  // When the producer is gone: false raises an error (at the next batch),
  // true continues on a private pipeline at the exact position.
  bool fallback_to_private = false;
  // Non-zero: the producer's spec must have this fingerprint.
  uint64_t expect_spec_fingerprint = 0;
  // The consumer's own spec (JSON), if it gave one. Required to attach to
  // another user's loader ("OWNER:NAME"): the served spec must then be this
  // one (but for batch_size, shuffle_block and drop_last), compared whole,
  // so a consumer never reads a dataset another user names for it.
  std::string expect_spec_json;
  // How long to wait for a segment of that name to appear.
  double attach_timeout_s = 0;
};

// A Loader over a shared segment. Its epochs are its own: each is
// samples_per_epoch consecutive samples of the producer's stream, starting at
// a block boundary (where it attached, then each where the last one ended),
// so each holds every sample once. StartEpoch(e, 0) begins the next epoch
// (abandoning the rest of the current one); a consumer that runs on its
// private pipeline starts its next epoch back on the segment, wherever that
// is. Resuming mid-epoch: ResumeShared below.
Result<std::unique_ptr<Loader>> AttachShared(const std::string& name, const AttachOptions& options);

// Resuming a consumer mid-epoch (from a checkpoint, in this process or a new
// one). SharedPositionOf gives where its current epoch began in the
// producer's stream (and the stream's geometry, which must match on resume);
// ResumeShared makes a consumer continue epoch `epoch` from that position at
// `first_batch`. It starts on a private pipeline at exactly that position
// (the order is deterministic, so the batches are the same) and rejoins the
// segment when it holds what comes next; its later epochs join the segment
// wherever it is then. Both are errors if `loader` is not a consumer.
using SharedPosition = StreamPosition;  // nostall/loader.h
Result<SharedPosition> SharedPositionOf(const Loader& loader);
Status ResumeShared(Loader* loader, int64_t epoch, const SharedPosition& position,
                    int64_t first_batch);

// What a consumer's spec must match: the producer's spec apart from the
// batch size, the shuffle block and drop_last, which serving sets.
uint64_t SharedSpecFingerprint(const LoaderSpec& spec);

// Names of shared segments on this node.
std::vector<std::string> ListShared();

// What a shared segment holds, read without attaching.
struct SharedInfo {
  std::string name;
  // "serving"; "stopped" or "failed" (the producer marked it so and a
  // consumer may still map it); "dead" (the producer is gone without a word,
  // e.g. SIGKILL: the segment stays until removed or served again).
  std::string state;
  std::string error;  // a failed producer's error
  int64_t producer_pid = 0;
  double heartbeat_age_s = 0;
  uint64_t segment_bytes = 0;
  std::string source;  // the dataset, from the served spec
  int64_t chunk = 0, samples_per_epoch = 0, chunks_per_epoch = 0, produced = 0;
  int64_t slots = 0, max_consumers = 0, evictions = 0, reaped = 0;
  std::vector<ConsumerInfo> consumers;  // state "active", "lagged" or "dead"
};
Result<SharedInfo> InspectShared(const std::string& name);

// Removes the segment of a producer that is gone (dead, stopped or failed);
// one still served is refused (stop its producer: it removes its segment).
// Consumers that have it mapped keep their mapping until they close.
Status RemoveShared(const std::string& name);

}  // namespace nostall

#endif  // NOSTALL_SHARED_H_
