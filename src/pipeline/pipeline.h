// Creating a pipeline, split from running it: the shared producer sizes its
// segment from the prepared pipeline (the sample shape) before the pipeline
// starts, then hands it the segment's slots to fill in place.
#ifndef NOSTALL_PIPELINE_PIPELINE_H_
#define NOSTALL_PIPELINE_PIPELINE_H_

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "nostall/cache.h"
#include "nostall/loader.h"
#include "pipeline/autotune.h"
#include "ring/ring.h"

namespace nostall {

class SampleKind;

// A spec's counts in their ranges (batch_size, thread counts, prefetch, ...)
// and its named choices among theirs (first_epoch, autotune): the one home
// of those rules (spec.cc), for a spec read from JSON and one built in C++.
Status CheckSpecRules(const LoaderSpec& spec);

// Everything a pipeline needs before its threads start (create.cc).
struct PipelineParts {
  LoaderSpec spec;  // validated, defaults resolved
  std::unique_ptr<Source> source;
  std::optional<Sampler> sampler;
  int out_h = 0, out_w = 0;
  std::unique_ptr<Cache> cache;  // may be null
  // The knobs the autotuner moves (none: it does not run); the spec holds
  // their starting values.
  AutotuneLimits tune;
  // A source that sends requests with `reads_in_flight` left to nostall:
  // the requests in flight follow Little's law (AdaptReadLimit), the
  // autotuner leaves them alone.
  bool adapt_requests = false;
  // The autotuner judges the consumer's waits by this running total instead
  // of the loader's own Next() calls (null): a shared producer's consumers
  // wait on the producer, not on its calls.
  std::function<int64_t()> consumer_waited_ns;
};
// `shared`: for a shared producer (its first epoch is never buffered).
Result<PipelineParts> PreparePipeline(const LoaderSpec& spec, bool shared = false);

// One sample's shape: (C, H, W) for NCHW, (H, W, C) for NHWC.
std::vector<int64_t> SampleShapeOf(const PrepSpec& prep, int64_t out_h, int64_t out_w);

// A sample's geometry in a ring's slots: its bytes, shape (the bound, for
// samples of many sizes: ragged axes and pad multiple), dtype, and the
// extra fields' count and each one's room per sample (its largest member
// in `source`).
void SetSampleLayout(const LoaderSpec& spec, const Source& source, int out_h, int out_w,
                     ring::RingLayout* layout);
// Extra field f's room per sample in a batch: the source's largest member,
// or for a targets field the largest transformed annotations.
uint64_t FieldRoom(const LoaderSpec& spec, const Source& source, int f, int out_h, int out_w);
// The kind of field a kind of sample writes itself (targets, a clip's audio), if any.
std::optional<FieldKind> WrittenFieldKind(const SampleKind& kind);

// The prefetch a spec that leaves it unset starts from (tuned) or keeps.
inline constexpr int kDefaultPrefetch = 2;

// The slots a pipeline of `spec` fills ahead of the consumer: prefetch + 2.
uint64_t PipelineSlots(const LoaderSpec& spec);

// The memory the autotuner may give the batch ring (prefetch), unless the
// starting prefetch already takes more.
inline constexpr uint64_t kAutotuneRingBytes = uint64_t{1} << 30;

// Starts the threads (pipeline_loader.cc), filling the slots of `ring` (a
// named ring: the shared producer's, whose slot_count the pipeline uses) or
// of a private ring of PipelineSlots() slots made for it. Batches keep the
// ring mapped while they live.
Result<std::unique_ptr<Loader>> StartPipeline(PipelineParts parts,
                                              std::shared_ptr<ring::Segment> ring = nullptr);

}  // namespace nostall

#endif  // NOSTALL_PIPELINE_PIPELINE_H_
