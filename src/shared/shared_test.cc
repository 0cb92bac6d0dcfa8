#include "shared/shared_test_support.h"

#include <gtest/gtest.h>

namespace nostall {
namespace {

TEST_F(SharedTest, ConsumersWithOtherBatchSizesSeeEverySampleOncePerEpoch) {
  auto serving = Serve(Name("sizes"));
  AttachOptions o;
  o.batch_size = 4;
  auto a = AttachShared(Name("sizes"), o).value();
  o.batch_size = 7;  // spans chunks of 8: copies
  auto b = AttachShared(Name("sizes"), o).value();
  EXPECT_EQ(a->SampleShape(), (std::vector<int64_t>{3, 16, 16}));
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (Loader* l : {a.get(), b.get()}) {
      std::vector<int64_t> seen = Epoch(l, epoch);
      std::sort(seen.begin(), seen.end());
      EXPECT_EQ(seen, All(45)) << "epoch " << epoch;
    }
  }
  EXPECT_GT(b->Stats().copied_batches, 0);
  EXPECT_EQ(a->Stats().copied_batches, 0);
  EXPECT_EQ(a->Stats().shared_mode, "shared");
}

TEST_F(SharedTest, AFedProducerServesTheChunksWrittenIntoItsSlotsInOrder) {
  // What nostall.serve(..., remote=...) does: the chunks come from the
  // caller (made on other machines), written into the next free slot.
  ServeOptions so;
  so.fed = true;
  so.slots = 3;  // fewer than an epoch's 6 chunks: slots are taken back as the consumer goes
  auto serving = Serve(Name("fed"), so);
  SharedProducer& p = *serving->producer;
  std::atomic<bool> stop{false};
  std::thread feeder([&] {
    for (int64_t seq = 0; seq < 12 && !stop.load(); ++seq) {
      FedSlot slot;
      Result<bool> got = p.NextSlot(0.05, stop, &slot);
      ASSERT_TRUE(got.ok());
      if (!got.value()) {
        --seq;  // none free yet: the consumer holds them
        continue;
      }
      const int64_t chunk = seq % 6, n = chunk == 5 ? 5 : 8;
      std::memset(slot.images, static_cast<int>(seq), static_cast<size_t>(n) * slot.sample_bytes);
      for (int64_t k = 0; k < n; ++k) {
        slot.labels[k] = 1000 * seq + k;
        slot.indices[k] = chunk * 8 + k;
      }
      EXPECT_FALSE(p.Publish(slot, n, seq / 6, chunk + 1).ok());  // not the next chunk: refused
      ASSERT_TRUE(p.Publish(slot, n, seq / 6, chunk).ok());
    }
  });
  AttachOptions o;
  o.batch_size = 4;
  auto consumer = AttachShared(Name("fed"), o).value();
  for (int epoch = 0; epoch < 2; ++epoch) {
    ASSERT_TRUE(consumer->StartEpoch(epoch).ok());
    int64_t taken = 0;
    for (NextStatus ns = NextStatus::kBatch; ns == NextStatus::kBatch;) {
      std::shared_ptr<Batch> b;
      ASSERT_TRUE(consumer->Next(10000, &ns, &b).ok());
      if (ns != NextStatus::kBatch) break;
      for (int64_t k = 0; k < b->size(); ++k, ++taken) {
        const int64_t seq = epoch * 6 + taken / 8;
        EXPECT_EQ(b->indices()[k], taken);  // chunk * 8 + position: the order written
        EXPECT_EQ(b->labels()[k], 1000 * seq + taken % 8);
        EXPECT_EQ(static_cast<const uint8_t*>(b->images())[k * 3 * 16 * 16], static_cast<uint8_t>(seq));
      }
    }
    EXPECT_EQ(taken, 45);
  }
  stop.store(true);
  feeder.join();
  // A failure of the feeding side reaches the consumers, and ends Run with it.
  p.Fail(DataError("the remote prep stopped: worker gone"));
  serving->stop.store(true);
  serving->thread.join();
  EXPECT_EQ(serving->result.code(), StatusCode::kDataError);
}

TEST_F(SharedTest, ALateConsumerStartsWhereTheSegmentHasNoGaps) {
  // A view kept of an early chunk pins its slot while another consumer runs
  // on through the other slots. Once the view is dropped that slot still
  // holds the old chunk, but its successors are gone: a consumer attaching
  // then must not start there (it would find its second chunk overwritten
  // and leave the segment at once), but where the segment has no gaps.
  ServeOptions so;
  so.slots = 3;
  auto serving = Serve(Name("late"), so);
  AttachOptions o;
  o.batch_size = 8;
  std::shared_ptr<Batch> kept;
  {
    auto keeper = AttachShared(Name("late"), o).value();
    ASSERT_TRUE(keeper->StartEpoch(0).ok());
    NextStatus ns;
    ASSERT_TRUE(keeper->Next(10000, &ns, &kept).ok());
    ASSERT_EQ(ns, NextStatus::kBatch);
    EXPECT_EQ(kept->index(), 0);
  }  // detached; the view still pins chunk 0
  {
    auto runner = AttachShared(Name("late"), o).value();
    for (int epoch = 0; epoch < 2; ++epoch) Epoch(runner.get(), epoch);
  }
  kept.reset();
  auto late = AttachShared(Name("late"), o).value();
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> seen = Epoch(late.get(), epoch);
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, All(45));
  }
  const LoaderStats st = late->Stats();
  EXPECT_EQ(st.shared_mode, "shared") << st.shared_reason;
  EXPECT_EQ(st.private_chunks, 0);
}

TEST_F(SharedTest, DamagedSegmentsAreRefusedNotReadOutOfBounds) {
  // A copy of a live segment (its producer, this process, is alive; the
  // chunks are in its slots) with one 32-bit word of the header changed at a
  // time, to values a damaged or hostile segment might hold. Attaching must
  // give an error, or a loader whose batches stay inside the segment (ASan
  // watches); never a crash.
  const std::string name = Name("orig"), fake = Name("damaged");
  ServeOptions so;
  so.slots = 8;  // every chunk of an epoch fits: the copy needs no producer
  auto serving = Serve(name, so);
  while (serving->producer->Snapshot().produced < 6) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  UniqueFd orig(::shm_open(ring::SegmentName(name).c_str(), O_RDONLY, 0));
  ASSERT_GE(orig.get(), 0);
  struct stat st;
  ASSERT_EQ(::fstat(orig.get(), &st), 0);
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  ASSERT_EQ(::pread(orig.get(), bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  int refused = 0, attached = 0, batches = 0;
  for (size_t off = 8; off < 256; off += 4) {
    for (uint32_t value : {0xFFFFFFFFu, 0x40000000u, 0x00000001u}) {
      std::vector<uint8_t> copy = bytes;
      std::memcpy(copy.data() + off, &value, 4);
      UniqueFd fd(::shm_open(ring::SegmentName(fake).c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600));
      ASSERT_GE(fd.get(), 0);
      ASSERT_EQ(::pwrite(fd.get(), copy.data(), copy.size(), 0), static_cast<ssize_t>(copy.size()));
      AttachOptions o;
      o.batch_size = 8;
      o.producer_timeout_s = 0.05;
      auto c = AttachShared(fake, o);
      if (!c.ok()) {
        ++refused;
        EXPECT_FALSE(c.status().message().empty());
      } else {
        ++attached;
        Loader* l = c.value().get();
        NextStatus ns;
        std::shared_ptr<Batch> b;
        if (l->StartEpoch(0).ok() && l->Next(50, &ns, &b).ok() && ns == NextStatus::kBatch) {
          const auto* px = static_cast<const uint8_t*>(b->images());
          uint64_t sum = 0;
          for (int64_t i = 0; i < b->size() * 3 * 16 * 16; ++i) sum += px[i];  // in bounds?
          EXPECT_GT(sum, 0u);
          ++batches;
        }
      }
      ::shm_unlink(ring::SegmentName(fake).c_str());
    }
  }
  EXPECT_GT(refused, 40);  // the geometry words are checked
  EXPECT_GT(attached, 10);  // fields a consumer does not rely on are not
  EXPECT_GT(batches, 10);   // and batches were read from those copies
}

TEST_F(SharedTest, AConsumerResumesMidEpochExactlyAndRejoinsAtTheNextEpoch) {
  const std::string name = Name("resume");
  ServeOptions so;
  so.slots = 2;
  auto serving = Serve(name, so);
  AttachOptions o;
  o.batch_size = 4;
  // The run that will be "interrupted": all of its epoch, batch by batch.
  auto first = AttachShared(name, o).value();
  ASSERT_TRUE(first->StartEpoch(0).ok());
  const SharedPosition base = SharedPositionOf(*first).value();
  const std::vector<std::vector<int64_t>> batches = RestOfEpoch(first.get());
  ASSERT_EQ(batches.size(), 12u);  // 45 samples in batches of 4
  first.reset();
  {  // Another consumer reads two epochs: the stream moves on past 2 + 4
     // slots, so the chunks the resumed one needs are overwritten.
    auto other = AttachShared(name, o).value();
    for (int epoch = 0; epoch < 2; ++epoch) EXPECT_EQ(Epoch(other.get(), epoch).size(), 45u);
  }
  // A new consumer (as after a restart) resumes that epoch at batch 5: the
  // same batches, in the same order, from its private pipeline.
  auto resumed = AttachShared(name, o).value();
  ASSERT_TRUE(ResumeShared(resumed.get(), /*epoch=*/0, base, /*first_batch=*/5).ok());
  for (size_t i = 5; i < batches.size(); ++i) {
    NextStatus ns;
    std::shared_ptr<Batch> b;
    ASSERT_TRUE(resumed->Next(10000, &ns, &b).ok());
    ASSERT_EQ(ns, NextStatus::kBatch);
    EXPECT_EQ(std::vector<int64_t>(b->indices(), b->indices() + b->size()), batches[i]) << "batch " << i;
  }
  {
    NextStatus ns;
    std::shared_ptr<Batch> b;
    ASSERT_TRUE(resumed->Next(10000, &ns, &b).ok());
    EXPECT_EQ(ns, NextStatus::kEndOfEpoch);
  }
  EXPECT_GT(resumed->Stats().private_chunks, 0);
  // Its next epoch starts back on the segment, wherever that is now.
  std::vector<int64_t> seen = Epoch(resumed.get(), 1);
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, All(45));
  const LoaderStats st = resumed->Stats();
  EXPECT_EQ(st.shared_mode, "shared");
  EXPECT_GE(st.rejoins, 1);
  // Mistakes.
  EXPECT_EQ(ResumeShared(resumed.get(), 0, {-6, base.chunk, base.block_chunks}, 0).code(),
            StatusCode::kInvalidArgument);
  EXPECT_NE(ResumeShared(resumed.get(), 0, {0, 16, 1}, 0).message().find("chunks of 16"),
            std::string::npos);
  EXPECT_EQ(ResumeShared(resumed.get(), 0, base, 99).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(resumed->StartEpoch(2, 3).code(), StatusCode::kFailedPrecondition);
  auto local = Loader::Create(Spec()).value();
  EXPECT_EQ(ResumeShared(local.get(), 0, base, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedPositionOf(*local).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SharedTest, AConsumerLeftBehindComesBackAtItsNextEpoch) {
  // A consumer that holds a view for longer than max_lag is left behind,
  // finishes that epoch on its private pipeline, and starts the next back
  // on the segment.
  const std::string name = Name("comeback");
  ServeOptions so;
  so.slots = 3;
  so.max_lag_s = 0.05;
  auto serving = Serve(name, so);
  AttachOptions o;
  o.batch_size = 8;
  auto slow = AttachShared(name, o).value();
  auto fast = AttachShared(name, o).value();
  ASSERT_TRUE(slow->StartEpoch(0).ok());
  NextStatus ns;
  std::shared_ptr<Batch> b;
  ASSERT_TRUE(slow->Next(10000, &ns, &b).ok());  // needs chunk 1 next: holds the producer
  for (int epoch = 0; epoch < 2; ++epoch) Epoch(fast.get(), epoch);  // waits, then leaves it behind
  std::vector<int64_t> seen(b->indices(), b->indices() + b->size());
  b.reset();
  while (slow->Next(10000, &ns, &b).ok() && ns == NextStatus::kBatch) {
    seen.insert(seen.end(), b->indices(), b->indices() + b->size());
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, All(45));
  LoaderStats st = slow->Stats();
  EXPECT_EQ(st.shared_mode, "private");
  EXPECT_EQ(st.fallbacks, 1);
  const int64_t private_before = st.private_chunks;
  seen = Epoch(slow.get(), 1);
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, All(45));
  st = slow->Stats();
  EXPECT_EQ(st.shared_mode, "shared") << st.shared_reason;
  EXPECT_EQ(st.private_chunks, private_before);  // the whole epoch from the segment
}

// A consumer batch spanning many chunks (more than the private pipeline's
// slots, or the segment's) is copied chunk by chunk: it never holds them all.
TEST_F(SharedTest, BatchesSpanningManyChunksWorkSharedAndPrivate) {
  const std::string name = Name("span");
  ServeOptions so;
  so.max_consumers = 1;  // 6 slots; chunks of 8: 6 chunks an epoch
  auto serving = Serve(name, so);
  for (int64_t batch_size : {40, 45, 17}) {
    SCOPED_TRACE(batch_size);
    AttachOptions o;
    o.batch_size = batch_size;
    o.fallback_to_private = true;
    auto c = AttachShared(name, o).value();
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<int64_t> seen = Epoch(c.get(), epoch);
      std::sort(seen.begin(), seen.end());
      EXPECT_EQ(seen, All(45));
    }
  }
  // On its private pipeline (the producer gone): the same.
  AttachOptions o;
  o.batch_size = 40;
  o.fallback_to_private = true;
  auto c = AttachShared(name, o).value();
  serving.reset();
  for (int epoch = 0; epoch < 3; ++epoch) {
    Status error;
    std::vector<int64_t> seen = Epoch(c.get(), epoch, &error);
    EXPECT_TRUE(error.ok()) << error.ToString();
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, All(45));
  }
  EXPECT_EQ(c->Stats().shared_mode, "private");
}

TEST_F(SharedTest, ResumingWithBatchesSpanningManyChunksGivesTheSameBatches) {
  const std::string name = Name("spanresume");
  ServeOptions so;
  so.slots = 2;
  auto serving = Serve(name, so);
  AttachOptions o;
  o.batch_size = 33;  // spans 5 chunks of 8
  auto first = AttachShared(name, o).value();
  ASSERT_TRUE(first->StartEpoch(0).ok());
  const SharedPosition base = SharedPositionOf(*first).value();
  const std::vector<std::vector<int64_t>> batches = RestOfEpoch(first.get());
  ASSERT_EQ(batches.size(), 2u);
  first.reset();
  auto resumed = AttachShared(name, o).value();
  ASSERT_TRUE(ResumeShared(resumed.get(), 0, base, /*first_batch=*/1).ok());
  NextStatus ns;
  std::shared_ptr<Batch> b;
  Status st = resumed->Next(10000, &ns, &b);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(ns, NextStatus::kBatch);
  EXPECT_EQ(std::vector<int64_t>(b->indices(), b->indices() + b->size()), batches[1]);
}

// The header's layout words changed while a consumer and the producer run
// (damage, or a hostile process): both go on with the layout they checked.
TEST_F(SharedTest, HeaderChangedAfterAttachIsNotFollowed) {
  const std::string name = Name("changed");
  auto serving = Serve(name);
  AttachOptions o;
  o.batch_size = 8;
  auto c = AttachShared(name, o).value();
  std::vector<int64_t> seen = Epoch(c.get(), 0);
  UniqueFd fd(::shm_open(ring::SegmentName(name).c_str(), O_RDWR, 0));
  ASSERT_GE(fd.get(), 0);
  // The layout words (docs/ring_format.md): max_consumers,
  // slot_count, chunk, samples/chunks per epoch, block, sample_bytes, shape,
  // and the offsets of the tables, data and slot stride.
  for (size_t off : {60, 64, 72, 80, 88, 96, 104, 112, 120, 128, 168, 176, 184, 192, 200, 208, 216}) {
    const uint64_t huge = off == 60 || off == 64 ? 0x40000000u : uint64_t{1} << 62;
    ASSERT_EQ(::pwrite(fd.get(), &huge, off == 60 || off == 64 ? 4 : 8, static_cast<off_t>(off)),
              off == 60 || off == 64 ? 4 : 8);
  }
  for (int epoch = 1; epoch < 3; ++epoch) {
    seen = Epoch(c.get(), epoch);
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, All(45));
  }
  EXPECT_TRUE(serving->result.ok());
}

TEST_F(SharedTest, ProducerGoneIsAnErrorOrAPrivatePipeline) {
  auto serving = Serve(Name("gone"));
  AttachOptions o;
  o.batch_size = 8;
  auto strict = AttachShared(Name("gone"), o).value();
  o.fallback_to_private = true;
  auto lenient = AttachShared(Name("gone"), o).value();
  serving.reset();  // stops and closes the segment
  Status error;
  for (int epoch = 0; epoch < 4 && error.ok(); ++epoch) Epoch(strict.get(), epoch, &error);
  EXPECT_EQ(error.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(error.message().find("producer stopped"), std::string::npos) << error.ToString();
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> seen = Epoch(lenient.get(), epoch);
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, All(45));
  }
  EXPECT_EQ(lenient->Stats().shared_mode, "private");
}

TEST_F(SharedTest, KilledConsumerIsReleased) {
  // Fork while this process has one thread; the child waits for the segment.
  const std::string name = Name("kill");
  pid_t child = ::fork();
  if (child == 0) {
    AttachOptions o;
    o.batch_size = 8;
    o.attach_timeout_s = 20;
    auto c = AttachShared(name, o);
    if (!c.ok()) {
      std::fprintf(stderr, "child: %s\n", c.status().ToString().c_str());
      ::_exit(1);
    }
    ::pause();  // attached, waiting to be killed
    ::_exit(0);
  }
  auto serving = Serve(name);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (serving->producer->Snapshot().consumers.empty() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(serving->producer->Snapshot().consumers.size(), 1u);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  const auto killed = std::chrono::steady_clock::now();
  while (!serving->producer->Snapshot().consumers.empty()) {
    ASSERT_LT(std::chrono::steady_clock::now() - killed, std::chrono::seconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(serving->producer->Snapshot().reaped, 1);
}

TEST_F(SharedTest, InspectShowsTheStreamAndRemoveRefusesALiveProducer) {
  const std::string name = Name("inspect");
  auto serving = Serve(name);
  AttachOptions o;
  o.batch_size = 8;
  auto c = AttachShared(name, o).value();
  auto info = InspectShared(name);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->state, "serving");
  EXPECT_EQ(info->producer_pid, ::getpid());
  EXPECT_EQ(info->source, dir_->path());
  EXPECT_EQ(info->samples_per_epoch, 45);
  EXPECT_EQ(info->chunks_per_epoch, 6);
  ASSERT_EQ(info->consumers.size(), 1u);
  EXPECT_EQ(info->consumers[0].state, "active");
  const std::vector<std::string> names = ListShared();
  EXPECT_NE(std::find(names.begin(), names.end(), name), names.end());
  Status refused = RemoveShared(name);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("served by pid"), std::string::npos);
  c.reset();
  serving.reset();  // a clean stop removes the segment
  EXPECT_EQ(InspectShared(name).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(RemoveShared(name).code(), StatusCode::kNotFound);
}

TEST_F(SharedTest, MistakesAreClearErrors) {
  AttachOptions o;
  o.batch_size = 8;
  EXPECT_EQ(AttachShared(Name("nobody"), o).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(AttachShared("bad/name", o).status().code(), StatusCode::kInvalidArgument);
  auto serving = Serve(Name("twice"));
  EXPECT_EQ(SharedProducer::Create(Name("twice"), Spec(), {}).status().code(),
            StatusCode::kFailedPrecondition);
  o.expect_spec_fingerprint = 12345;
  EXPECT_NE(AttachShared(Name("twice"), o).status().message().find("another pipeline"),
            std::string::npos);
  LoaderSpec skip = Spec();
  skip.on_error = ErrorPolicy::kSkip;
  EXPECT_EQ(SharedProducer::Create(Name("skip"), skip, {}).status().code(),
            StatusCode::kInvalidArgument);
}

// ------------------------------------------------- a party killed at each step
//
// Each case forks the party to be killed (before this process starts any
// thread), arms a crash point in it, and plays the other party here. The
// child must die by its own SIGKILL at that point; the survivors must go on
// exactly: every sample once per epoch, nothing held by the dead.

}  // namespace
}  // namespace nostall
