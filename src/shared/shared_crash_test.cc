// The shared loader with a party SIGKILLed at each step of the protocol
// (docs/ring_format.md, "Killed at each step"): the party to kill is forked
// and kills itself at an armed crash point; the other runs in the test.
#include "shared/shared_test_support.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "pipeline/pipeline.h"

namespace nostall {
namespace {

int WaitForDeath(pid_t child) {
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFSIGNALED(status) ? WTERMSIG(status) : -1;
}

// Runs in the child: attach, then read epochs until the crash point fires.
[[noreturn]] void ConsumeUntilKilled(const std::string& name, const char* point, int nth) {
  KillAtCrashPointForTest(point, nth);
  {
    AttachOptions o;
    o.batch_size = 8;
    o.attach_timeout_s = 20;
    auto c = AttachShared(name, o);
    if (!c.ok()) ::_exit(2);
    for (int epoch = 0; epoch < 3; ++epoch) Epoch(c.value().get(), epoch);
  }  // detaching passes consumer.releasing
  ::_exit(0);  // the point was never reached
}

struct ConsumerCrash {
  const char* point;
  int nth;
};

class SharedConsumerCrashTest : public SharedTest,
                                public ::testing::WithParamInterface<ConsumerCrash> {};

TEST_P(SharedConsumerCrashTest, ProducerReleasesItAndServesTheNextExactly) {
  const ConsumerCrash crash = GetParam();
  const std::string name = Name("crash-consumer");
  pid_t child = ::fork();
  if (child == 0) ConsumeUntilKilled(name, crash.point, crash.nth);
  // Two slots: a pin or a need the dead consumer left behind would leave the
  // next consumer (which holds one chunk while it asks for the next) stuck.
  ServeOptions so;
  so.slots = 2;
  auto serving = Serve(name, so);
  ASSERT_EQ(WaitForDeath(child), SIGKILL) << crash.point << " was not reached";
  const auto died = std::chrono::steady_clock::now();
  while (!serving->producer->Snapshot().consumers.empty() || serving->producer->Snapshot().reaped == 0) {
    ASSERT_LT(std::chrono::steady_clock::now() - died, std::chrono::seconds(1)) << crash.point;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(serving->producer->Snapshot().reaped, 1);
  AttachOptions o;
  o.batch_size = 8;
  auto next = AttachShared(name, o);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> seen = Epoch(next.value().get(), epoch);
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, All(45)) << crash.point << ", epoch " << epoch;
  }
  const LoaderStats st = next.value()->Stats();
  EXPECT_EQ(st.shared_mode, "shared") << st.shared_reason;
  EXPECT_EQ(st.private_chunks, 0) << crash.point;
}

INSTANTIATE_TEST_SUITE_P(
    EachStep, SharedConsumerCrashTest,
    ::testing::Values(ConsumerCrash{"consumer.row_claimed", 1},     // row owned, nothing else
                      ConsumerCrash{"consumer.need_published", 1},  // ACTIVE, needs chunk 0
                      ConsumerCrash{"consumer.pin_added", 3},       // a pin not yet checked
                      ConsumerCrash{"consumer.batch_made", 3},      // holding a chunk mid-epoch
                      ConsumerCrash{"consumer.releasing", 1}),      // pins cleared, row not
    [](const ::testing::TestParamInfo<ConsumerCrash>& info) {
      std::string n = info.param.point;
      std::replace(n.begin(), n.end(), '.', '_');
      return n;
    });

class SharedProducerCrashTest : public SharedTest,
                                public ::testing::WithParamInterface<const char*> {};

TEST_P(SharedProducerCrashTest, ConsumersReportItOrGoOnPrivately) {
  const char* point = GetParam();
  const std::string name = Name("crash-producer");
  pid_t child = ::fork();
  if (child == 0) {
    // Consumers are attached and mid-epoch by then: before anyone attaches
    // the producer publishes its two kept chunks and the pipeline fills its
    // own slots (prefetch + 2), then it waits.
    ServeOptions so;
    so.slots = 2;
    KillAtCrashPointForTest(point, so.slots + static_cast<int>(PipelineSlots(Spec())) + 3);
    auto p = SharedProducer::Create(name, Spec(), so);
    if (!p.ok()) ::_exit(2);
    std::atomic<bool> stop{false};
    ::_exit(p.value()->Run(stop).ok() ? 0 : 3);
  }
  AttachOptions o;
  o.batch_size = 8;
  o.attach_timeout_s = 20;
  auto strict = AttachShared(name, o);
  ASSERT_TRUE(strict.ok()) << strict.status().ToString();
  o.fallback_to_private = true;
  auto lenient = AttachShared(name, o);
  ASSERT_TRUE(lenient.ok()) << lenient.status().ToString();

  Status strict_error;
  std::chrono::steady_clock::time_point strict_failed;
  std::thread strict_reader([&] {
    for (int epoch = 0; epoch < 20 && strict_error.ok(); ++epoch) Epoch(strict.value().get(), epoch, &strict_error);
    strict_failed = std::chrono::steady_clock::now();
  });
  std::vector<std::vector<int64_t>> lenient_epochs;
  std::thread lenient_reader([&] {
    for (int epoch = 0; epoch < 3; ++epoch) lenient_epochs.push_back(Epoch(lenient.value().get(), epoch));
  });
  const int signal = WaitForDeath(child);
  const auto died = std::chrono::steady_clock::now();
  strict_reader.join();
  lenient_reader.join();
  ASSERT_EQ(signal, SIGKILL) << point << " was not reached";
  EXPECT_NE(strict_error.message().find("died"), std::string::npos) << strict_error.ToString();
  EXPECT_LT(strict_failed - died, std::chrono::seconds(2)) << point;
  for (auto& seen : lenient_epochs) {
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, All(45)) << point;
  }
  EXPECT_EQ(lenient_epochs.size(), 3u);
  EXPECT_EQ(lenient.value()->Stats().shared_mode, "private");
  ::shm_unlink(ring::SegmentName(name).c_str());  // the dead producer's
}

INSTANTIATE_TEST_SUITE_P(EachStep, SharedProducerCrashTest,
                         ::testing::Values("producer.slot_writing",  // slot WRITING, old chunk gone
                                           "producer.slot_filled",   // chunk written in place, not READY
                                           "producer.slot_ready"),   // READY, `produced` not advanced
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '.', '_');
                           return n;
                         });

}  // namespace
}  // namespace nostall
