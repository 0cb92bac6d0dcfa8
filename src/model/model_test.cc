// The model's answers to the autotuner's questions (nostall/model.h); the
// analyzer's use of the same model is tested in src/analyze/analysis_test.cc.
#include "nostall/model.h"

#include <gtest/gtest.h>

namespace nostall {
namespace {

// A second of a pipeline: `threads` prep threads, each item `prep_cpu` of
// CPU, the consumer taking `rate` items/s and waiting `wait` of the time,
// the step using `step_cpu` per item, on `cores`.
Observation Window(int threads, double rate, double prep_cpu, double wait, double step_cpu = 0,
                   double cores = 4) {
  Observation o;
  o.rate = rate;
  o.wait = wait;
  o.prep_cpu = prep_cpu;
  o.step_cpu = step_cpu;
  o.cores = cores;
  o.prep_threads = threads;
  o.reads_in_flight = 4;
  return o;
}

TEST(TunerModelTest, ThreadsToCarryPrepCpuAtEightyPercent) {
  EXPECT_EQ(ThreadsToCarry(0.004, 100), 1);   // 0.4 cores
  EXPECT_EQ(ThreadsToCarry(0.004, 200), 1);   // 0.8 cores: one thread at 80%
  EXPECT_EQ(ThreadsToCarry(0.004, 201), 2);
  EXPECT_EQ(ThreadsToCarry(0.004, 1000), 5);  // 4 cores / 0.8
  EXPECT_EQ(ThreadsToCarry(0, 1000), 1);      // not measured yet
}

TEST(TunerModelTest, CoresAreTakenWhenTheProcessUsesNinetyPercentOfThem) {
  // 500 items/s x (1 ms prep + 2.6 ms step) = 1.8 of 2 cores.
  EXPECT_TRUE(CoresTaken(Window(1, 500, 0.001, 0, 0.0026, 2)));
  // The same on 4 cores: 45% of them.
  EXPECT_FALSE(CoresTaken(Window(1, 500, 0.001, 0, 0.0026, 4)));
}

TEST(TunerModelTest, AWindowWhereTheConsumerNeverWaitedIsReproducedAndNotHelpedByMoreThreads) {
  // The step (1 ms a sample, nearly no CPU: it waits on a device) sets the
  // rate; 2 prep threads carry 0.5 cores of prep.
  const Observation o = Window(2, 1000, 0.0005, 0, 1e-5);
  const Profile p = ProfileOf(o);
  Config c = ConfigOf(o);
  const Prediction now = Predict(p, c);
  EXPECT_NEAR(now.rate, 1000, 10);
  EXPECT_EQ(now.bottleneck(), Bottleneck::kCompute);
  c.prep_threads = 3;
  EXPECT_NEAR(Predict(p, c).rate, now.rate, 1);
  c.prep_threads = 1;  // one thread carries 0.5 cores: no loss
  EXPECT_NEAR(Predict(p, c).rate, now.rate, 1);
}

TEST(TunerModelTest, APrepBoundWindowIsReproducedAndAThreadMorePredictedToPay) {
  // One prep thread, 4 ms of CPU an item: 250 items/s, the consumer waiting
  // 75% of the time for a step that takes 1 ms.
  const Observation o = Window(1, 250, 0.004, 0.75, 1e-5);
  const Profile p = ProfileOf(o);
  Config c = ConfigOf(o);
  const Prediction now = Predict(p, c);
  EXPECT_NEAR(now.rate, 250, 25);
  EXPECT_EQ(now.bottleneck(), Bottleneck::kPrep);
  c.prep_threads = 2;
  EXPECT_GT(Predict(p, c).rate, now.rate * 1.5);
}

TEST(TunerModelTest, WithTheCoresTakenByTheStepAThreadMoreIsPredictedToPayLittle) {
  // 2 cores; the step keeps 1.9 of them busy outside its waits and the
  // prep thread waits for cores: the model's CPU limit binds.
  const Observation o = Window(1, 500, 0.0004, 0.1, 0.0034, 2);
  ASSERT_TRUE(CoresTaken(o));
  const Profile p = ProfileOf(o);
  Config c = ConfigOf(o);
  const Prediction now = Predict(p, c);
  EXPECT_EQ(now.limit, Limit::kCpu);
  EXPECT_NEAR(now.rate, 500, 50);
  c.prep_threads = 2;
  EXPECT_LT(Predict(p, c).rate, now.rate * 1.05);  // under what an add must bring
}

}  // namespace
}  // namespace nostall
