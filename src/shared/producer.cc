// Shared loader, the producer's side of the named ring (docs/ring_format.md).
//
// Who writes what:
//   header        producer (once; then heartbeat, produced, state, evictions)
//   slot table    producer (seq, state, count, epoch, chunk); consumers read
//   pins          each consumer its own column (+1 per live view of a slot);
//                 the producer clears a dead consumer's column
//   consumer row  its consumer (claim, need, state ACTIVE), the producer
//                 (state LAGGED when it leaves one behind, FREE when it died).
//                 A row is owned while its pid is non-zero: claimed by CAS of
//                 the pid from 0, released by storing 0 last.
//
// The transitions both sides race on (taking a slot back, publishing,
// pinning, entering the stream) are the ring's: Segment in src/ring/ring.h.
#include "nostall/shared.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <dirent.h>
#include <limits>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/fd.h"
#include "common/mutex.h"
#include "common/process.h"
#include "common/shm.h"
#include "ring/ring.h"
#include "ops/prep.h"
#include "pipeline/pipeline.h"

namespace nostall {
namespace {

using namespace ring;  // NOLINT: this file is the named ring's producer

class Producer final : public SharedProducer {
 public:
  Producer(std::shared_ptr<Segment> seg, std::unique_ptr<Loader> pipeline, size_t depth,
           LoaderSpec spec, ServeOptions options, std::shared_ptr<std::atomic<int64_t>> waited)
      : seg_(std::move(seg)), pipeline_(std::move(pipeline)), depth_(depth), spec_(std::move(spec)),
        options_(options), consumers_waited_ns_(std::move(waited)) {
    if (pipeline_ == nullptr) {
      for (uint32_t s = 0; s < seg_->g.slot_count; ++s) free_.push_back(s);
    }
    watcher_ = std::thread([this] { Watch(); });
  }

  ~Producer() override {
    stop_watch_.store(true);
    watcher_.join();
    // The pipeline stops before the chunks it published are let go: it
    // would otherwise start refilling their slots while consumers still
    // read what the segment holds.
    pipeline_.reset();
    held_.clear();
    if (seg_->h->state.load() == kRunning) seg_->h->state.store(kClosed);
    ::shm_unlink(seg_->name.c_str());
  }

  const LoaderSpec& spec() const override { return spec_; }
  LoaderStats PipelineStats() const override { return pipeline_ != nullptr ? pipeline_->Stats() : LoaderStats{}; }

  Result<bool> NextSlot(double timeout_s, const std::atomic<bool>& stop, FedSlot* out) override {
    if (pipeline_ != nullptr) return FailedPrecondition("this producer runs its own pipeline");
    const int64_t deadline = NowNs() + static_cast<int64_t>(timeout_s * 1e9);
    const size_t slots = seg_->g.slot_count;
    while (!stop.load() && !fed_failed_.load()) {
      const uint32_t gen = seg_->h->released_gen.load();
      if (held_.size() >= slots) GiveBack(slots - 1, /*starved=*/true);
      if (!free_.empty()) {
        const uint32_t s = free_.front();
        free_.pop_front();
        *out = {s, seg_->images(s), seg_->labels(s), seg_->indices(s), seg_->g.chunk, seg_->g.sample_bytes};
        return true;
      }
      const int64_t left = deadline - NowNs();
      if (left <= 0) break;
      FutexWait(&seg_->h->released_gen, gen, std::min<int64_t>(left, 20000000));  // 20 ms: lag checks, stop
    }
    return false;
  }

  Status Publish(const FedSlot& slot, int64_t count, int64_t epoch, int64_t chunk) override {
    if (pipeline_ != nullptr) return FailedPrecondition("this producer runs its own pipeline");
    const int64_t seq = seg_->h->produced.load();
    if (epoch * seg_->g.chunks_per_epoch + chunk != seq || count != seg_->ChunkCount(seq) ||
        slot.slot >= seg_->g.slot_count) {
      return InvalidArgument("chunk " + std::to_string(chunk) + " of epoch " + std::to_string(epoch) + " (" +
                             std::to_string(count) + " samples) is not the producer's next (" +
                             std::to_string(seq) + ")");
    }
    seg_->Publish(slot.slot, seq, count, epoch, chunk);
    held_.push_back({slot.slot, nullptr});
    return Status::OK();
  }

  // Run returns the error, and records it for the consumers as any failure.
  void Fail(const Status& error) override {
    MutexLock lock(&fed_mu_);
    fed_error_ = error;
    fed_failed_.store(true);
  }

  ProducerStatus Snapshot() const override {
    ProducerStatus st;
    const Header& h = *seg_->h;
    st.produced = h.produced.load();
    st.chunks_per_epoch = seg_->g.chunks_per_epoch;
    st.evictions = h.evictions.load();
    st.reaped = h.reaped.load();
    st.consumers = seg_->Consumers();
    return st;
  }

  Status Run(const std::atomic<bool>& stop) override {
    Status st = pipeline_ != nullptr ? Serve(stop) : WaitFed(stop);
    if (!st.ok()) {
      std::snprintf(seg_->h->error, sizeof seg_->h->error, "%s", st.ToString().c_str());
      seg_->h->state.store(kFailed);
    }
    return st;
  }

 private:
  // The pipeline writes each chunk straight into a slot of the segment (no
  // copy): the producer publishes the chunk in place and holds the batch,
  // so the pipeline cannot refill the slot, until no consumer needs or views
  // it. It keeps at most `slot_count - depth` chunks published while the
  // pipeline has fewer than `depth` slots to fill; with nobody attached it
  // keeps every chunk it made and the pipeline stops when it has no slot.
  Status Serve(const std::atomic<bool>& stop) {
    int64_t epoch = 0;
    NOSTALL_RETURN_IF_ERROR(pipeline_->StartEpoch(epoch));
    int64_t seq = seg_->h->produced.load();
    const size_t slots = seg_->g.slot_count;
    const size_t keep = slots - depth_;
    while (!stop.load()) {
      const uint32_t gen = seg_->h->released_gen.load();
      if (held_.size() > keep) GiveBack(keep, /*starved=*/held_.size() == slots);
      if (held_.size() == slots) {  // the pipeline has no slot to fill
        FutexWait(&seg_->h->released_gen, gen, 20000000);  // 20 ms: lag checks, stop
        continue;
      }
      NextStatus ns;
      std::shared_ptr<Batch> batch;
      const int64_t t0 = NowNs();
      NOSTALL_RETURN_IF_ERROR(pipeline_->Next(held_.size() > keep ? 5 : 50, &ns, &batch));
      // The pipeline's autotuner sees the consumers' waits: the producer's
      // own wait counts only while a consumer waits on it (else the
      // producer is merely ahead of them).
      if (SomeoneWaits(seq)) consumers_waited_ns_->fetch_add(NowNs() - t0);
      if (ns == NextStatus::kTimeout) continue;
      if (ns == NextStatus::kEndOfEpoch) {
        NOSTALL_RETURN_IF_ERROR(pipeline_->StartEpoch(++epoch));
        continue;
      }
      NOSTALL_ASSIGN_OR_RETURN(uint32_t slot, SlotOf(*batch));
      seg_->Publish(slot, seq++, batch->size(), batch->epoch(), batch->index());
      held_.push_back({slot, std::move(batch)});
    }
    return Status::OK();
  }

  // The segment slot a pipeline batch was written into.
  Result<uint32_t> SlotOf(const Batch& b) const {
    const auto* images = static_cast<const uint8_t*>(b.images());
    const uint64_t offset = static_cast<uint64_t>(images - seg_->data);
    if (images < seg_->data || offset % seg_->g.slot_stride != 0 ||
        offset / seg_->g.slot_stride >= seg_->g.slot_count) {
      return Internal("the pipeline's batch is not in a slot of the segment");
    }
    return static_cast<uint32_t>(offset / seg_->g.slot_stride);
  }

  // A fed producer: serves until `stop` or Fail (the chunks come from NextSlot
  // and Publish).
  Status WaitFed(const std::atomic<bool>& stop) {
    while (!stop.load() && !fed_failed_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    MutexLock lock(&fed_mu_);
    return fed_error_;
  }

  // Gives published slots back to the pipeline, oldest first, until at most
  // `keep` are held or none is free to go. `starved`: the pipeline has no
  // slot left, so a consumer that holds everyone back may be left behind.
  void GiveBack(size_t keep, bool starved) {
    const int64_t min_need = seg_->MinActiveNeed();
    for (auto it = held_.begin(); it != held_.end() && held_.size() > keep;) {
      if (seg_->TakeBack(it->slot, min_need)) {
        if (pipeline_ == nullptr) free_.push_back(it->slot);  // fed: the next chunk's
        it = held_.erase(it);  // the batch goes: the pipeline may fill the slot
      } else {
        ++it;
      }
    }
    if (held_.size() > keep && starved) LeaveBehindLaggards();
  }

  // Some active consumer needs chunk `next` or later (not yet published).
  bool SomeoneWaits(int64_t next) const {
    for (uint32_t i = 0; i < seg_->g.max_consumers; ++i) {
      const ConsumerRow& c = seg_->consumers[i];
      if (c.state.load() == kActive && c.need.load() >= next) return true;
    }
    return false;
  }

  // While the producer waits on the slowest consumer and another consumer
  // waits on the producer, a consumer whose next chunk was published more
  // than max_lag ago is too far behind to set the pace: it is left behind.
  void LeaveBehindLaggards() {
    Header& h = *seg_->h;
    const int64_t next = h.produced.load();
    if (!SomeoneWaits(next)) return;
    const int64_t now = NowNs();
    const int64_t lag_ns = static_cast<int64_t>(options_.max_lag_s * 1e9);
    for (uint32_t i = 0; i < seg_->g.max_consumers; ++i) {
      ConsumerRow& c = seg_->consumers[i];
      if (c.state.load() != kActive) continue;
      const int64_t need = c.need.load();
      if (need >= next) continue;  // waiting on the producer, not holding it
      int64_t published = now;
      for (uint32_t s = 0; s < seg_->g.slot_count; ++s) {
        if (seg_->slots[s].seq.load() == need) published = seg_->slots[s].published_ns.load();
      }
      uint32_t active = kActive;
      if (now - published > lag_ns && c.state.compare_exchange_strong(active, kLagged)) {
        h.evictions.fetch_add(1);
        if (options_.verbose) {
          std::fprintf(stderr, "nostall serve: consumer pid %lld is more than %.1fs behind; "
                       "it continues on its own pipeline\n",
                       static_cast<long long>(c.pid.load()), options_.max_lag_s);
        }
      }
    }
  }

  // Every 100 ms: the heartbeat, and consumers that died are released.
  void Watch() {
    while (!stop_watch_.load()) {
      Header& h = *seg_->h;
      h.heartbeat_ns.store(NowNs());
      for (uint32_t i = 0; i < seg_->g.max_consumers; ++i) {
        ConsumerRow& c = seg_->consumers[i];
        // A consistent (pid, start time): a row freed and claimed again
        // between the two loads shows another pid on the second.
        const int64_t pid = c.pid.load();
        if (pid == 0) continue;
        const uint64_t start = c.start_time.load();
        if (c.pid.load() != pid || ProcessAlive(pid, start)) continue;
        // Dead: only this thread touches the row until it is released.
        // Counted first: whoever sees the row gone sees it counted.
        h.reaped.fetch_add(1);
        seg_->ReleaseRow(i);
        if (options_.verbose) {
          std::fprintf(stderr, "nostall serve: consumer pid %lld is gone; its slots are released\n",
                       static_cast<long long>(pid));
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  struct Held {
    uint32_t slot;
    std::shared_ptr<Batch> batch;  // the pipeline's lease on the slot
  };
  std::shared_ptr<Segment> seg_;
  std::unique_ptr<Loader> pipeline_;
  size_t depth_;  // slots the pipeline fills ahead
  std::deque<Held> held_;  // published chunks, oldest first
  std::deque<uint32_t> free_;  // fed: slots to write the next chunks into
  std::atomic<bool> fed_failed_{false};
  Mutex fed_mu_;
  Status fed_error_ GUARDED_BY(fed_mu_);
  LoaderSpec spec_;
  ServeOptions options_;
  std::atomic<bool> stop_watch_{false};
  std::thread watcher_;
  // The consumers' waits: the pipeline's autotuner judges by them (its own
  // Next() calls are the producer's, which never waits for a consumer).
  const std::shared_ptr<std::atomic<int64_t>> consumers_waited_ns_;
};

}  // namespace

Result<std::unique_ptr<SharedProducer>> SharedProducer::Create(const std::string& name,
                                                               const LoaderSpec& user_spec,
                                                               const ServeOptions& options) {
  NOSTALL_RETURN_IF_ERROR(ValidName(name));
  if (options.max_consumers < 1 || options.max_consumers > 64) {
    return InvalidArgument("max_consumers must be in [1, 64]");
  }
  if (options.max_lag_s <= 0) return InvalidArgument("max_lag must be positive");
  if (user_spec.world_size != 1) {
    return InvalidArgument("a shared loader serves one node: world_size must be 1");
  }
  if (user_spec.on_error == ErrorPolicy::kSkip) {
    return InvalidArgument("a shared loader serves whole chunks: on_error must be \"raise\" "
                           "(a bad item stops the producer, and every consumer is told which)");
  }
  LoaderSpec spec = user_spec;
  spec.batch_size = options.chunk > 0 ? options.chunk : user_spec.batch_size;
  spec.drop_last = false;
  // The sampler's count first (the pipeline is built after the block size is known).
  NOSTALL_ASSIGN_OR_RETURN(std::unique_ptr<Source> probe, OpenSource(spec.source, spec.source_options));
  SamplerOptions so;
  so.num_items = probe->size();
  so.batch_size = spec.batch_size;
  so.subset = spec.subset;
  NOSTALL_ASSIGN_OR_RETURN(Sampler counting, Sampler::Create(so));
  const int64_t n = counting.SamplesPerEpoch();
  const int64_t k = counting.BatchesPerEpoch();
  int64_t block_chunks = options.block_chunks > 0 ? options.block_chunks : std::max<int64_t>(1, k / 16);
  block_chunks = std::min(block_chunks, k);
  if (spec.shuffle) spec.shuffle_block = block_chunks * spec.batch_size;
  // The pipeline is prepared (spec resolved, output shape known) to size
  // the segment, and started on the segment's slots once it exists.
  if (spec.shuffle && spec.shuffle_window != 0) {
    return InvalidArgument("a served loader shuffles in fixed blocks that any consumer may start at; "
                           "shuffle_window's pages and windows are another order: serve without it, or give "
                           "each job its own loader");
  }
  if (spec.bucketing.by == "duration") {
    return InvalidArgument("a served loader's chunks hold one count of samples; batches of similar durations "
                           "(bucketing by duration) vary in count: serve without it, or give each job its own loader");
  }
  NOSTALL_ASSIGN_OR_RETURN(PipelineParts parts, PreparePipeline(spec, /*shared=*/true));
  const LoaderSpec resolved = parts.spec;
  const uint64_t dataset_fingerprint = parts.source->fingerprint();
  const uint64_t depth = PipelineSlots(resolved);

  // `slots` chunks kept for consumers, and the pipeline's own to fill.
  const uint32_t kept = static_cast<uint32_t>(options.slots > 0 ? options.slots : 4 + 2 * options.max_consumers);
  if (kept < 2 || kept > 512) return InvalidArgument("slots must be in [2, 512]");
  RingLayout layout;
  layout.max_consumers = static_cast<uint32_t>(options.max_consumers);
  layout.slot_count = kept + static_cast<uint32_t>(depth);
  layout.chunk = resolved.batch_size;
  layout.samples_per_epoch = n;
  layout.chunks_per_epoch = k;
  layout.block_chunks = block_chunks;
  layout.spec_fingerprint = SharedSpecFingerprint(resolved);
  layout.dataset_fingerprint = dataset_fingerprint;
  layout.spec_json = resolved.ToJson();
  layout.share_gid = options.share_gid;
  SetSampleLayout(resolved, *parts.source, parts.out_h, parts.out_w, &layout);
  if (options.fed && (layout.field_count != 0 || layout.ragged_axes != 0)) {
    return InvalidArgument("a served loader fed by prep on other machines carries batches of one sample shape with "
                           "their labels: serve this spec (extra fields or samples of many sizes) without \"remote\"");
  }
  NOSTALL_ASSIGN_OR_RETURN(std::shared_ptr<Segment> seg, CreateRing(name, layout));
  auto waited = std::make_shared<std::atomic<int64_t>>(0);
  if (options.fed) {
    return std::unique_ptr<SharedProducer>(
        new Producer(std::move(seg), nullptr, 1, resolved, options, std::move(waited)));
  }
  parts.consumer_waited_ns = [waited] { return waited->load(); };
  Result<std::unique_ptr<Loader>> pipeline = StartPipeline(std::move(parts), seg);
  if (!pipeline.ok()) {
    ::shm_unlink(seg->name.c_str());
    return pipeline.status();
  }
  return std::unique_ptr<SharedProducer>(new Producer(
      std::move(seg), std::move(pipeline).value(), depth, resolved, options, std::move(waited)));
}

std::string ProducerStatus::ToJson(bool running, const LoaderStats& pipeline) const {
  nlohmann::json list = nlohmann::json::array();
  for (const ConsumerInfo& c : consumers) {
    list.push_back({{"pid", c.pid}, {"state", c.state}, {"need", c.need}});
  }
  return nlohmann::json{{"produced", produced}, {"chunks_per_epoch", chunks_per_epoch},
                        {"evictions", evictions}, {"reaped", reaped}, {"consumers", list},
                        {"running", running}, {"pipeline", nlohmann::json::parse(pipeline.ToJson())}}
      .dump();
}

}  // namespace nostall
