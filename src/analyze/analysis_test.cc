#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "nostall/analyze.h"
#include "testing/test_images.h"

namespace nostall {
namespace {

using nlohmann::json;

// 2 cores; the step takes 1 ms/sample; prep 4 ms of CPU per sample; items of
// 100 kB on 50 MB/s storage with 10 ms latency and 4 reads in flight.
Profile Example() {
  Profile p;
  p.step_rate = 1000;
  p.step_cpu = 0;
  p.prep_cpu = 0.004;
  p.fetch_cpu_miss = 0.0;
  p.fetch_cpu_hit = 0.0;
  p.item_bytes = 100e3;
  p.dataset_bytes = 100e6;
  p.dataset_items = 1000;
  p.measured.cores = 2;
  p.measured.prep_threads = 2;
  p.measured.reads_in_flight = 4;
  p.measured.bandwidth = 50e6;
  p.measured.latency = 0.010;
  return p;
}

// Example() with storage unlimited and 8 cores, each with a prep thread:
// the model binds on nothing the tests below do not set.
Profile ExampleOnEightCoresWithoutStorageLimits() {
  Profile p = Example();
  p.measured.bandwidth = 0;
  p.measured.latency = 0;
  p.measured.cores = 8;
  p.measured.prep_threads = 8;
  return p;
}

TEST(ModelTest, EachLimitIsItsFormula) {
  Prediction r = Predict(Example(), Example().measured);
  EXPECT_DOUBLE_EQ(r.limits[static_cast<int>(Limit::kCompute)], 1000);
  EXPECT_DOUBLE_EQ(r.limits[static_cast<int>(Limit::kCpu)], 500);        // 2 / 0.004
  EXPECT_DOUBLE_EQ(r.limits[static_cast<int>(Limit::kThreads)], 500);
  EXPECT_DOUBLE_EQ(r.limits[static_cast<int>(Limit::kBandwidth)], 500);  // 50e6 / 100e3
  EXPECT_DOUBLE_EQ(r.limits[static_cast<int>(Limit::kLatency)], 4 / 0.012);  // 333.3
  EXPECT_DOUBLE_EQ(r.rate, 4 / 0.012);
  EXPECT_EQ(r.limit, Limit::kLatency);
  EXPECT_EQ(r.bottleneck(), Bottleneck::kFetch);
}

// bench/bench_remote.py's node short of CPU (docs/benchmarks.md, "Remote
// prep on Ray"): the trainer on one core, its step half the core's time
// (109 ms of CPU a batch of 64), prep 1.72 ms of CPU an image, 150,528-byte
// uint8 samples; one Ray worker of one CPU beside it. Measured: 273 images/s
// alone, 459 with the worker.
Profile NodeShortOfCpu() {
  Profile p;
  p.step_rate = 64 / 0.109;
  p.step_cpu = 0.109 / 64;
  p.prep_cpu = 0.00172;
  p.item_bytes = 110e3;
  p.sample_bytes = 150528;
  p.measured.cores = 1;
  p.measured.prep_threads = 1;
  p.measured.reads_in_flight = 4;
  return p;
}

TEST(ModelTest, RemoteWorkersAddWhatTheyMakeLessWhatReceivingCostsTheTrainer) {
  const Profile p = NodeShortOfCpu();
  const double alone = Predict(p, p.measured).rate;
  EXPECT_NEAR(alone, 1 / (p.step_cpu + p.prep_cpu), 1e-6);  // the one core carries both
  EXPECT_NEAR(alone, 273, 273 * 0.08);
  RemotePrep one;
  one.workers = 1;
  one.cpus_per_worker = 1;
  const double made = RemoteRate(p, one);  // 1 CPU / (prep + putting the sample in the object store)
  EXPECT_NEAR(made, 1 / (p.prep_cpu + one.send_cpu_per_byte * p.sample_bytes), 1e-6);
  const Prediction with = PredictRemote(p, p.measured, one);
  EXPECT_EQ(with.bottleneck(), Bottleneck::kPrep);
  EXPECT_NEAR(with.rate, 459, 459 * 0.08);
  // Receiving costs the trainer: the rate is below the worker's plus what a
  // whole free core would add.
  EXPECT_LT(with.rate, made + alone);
  // Many workers: the core then carries the step and receiving (0.39 ms a
  // sample), short of the step's rate; a transport free for the trainer
  // would reach it.
  RemotePrep many = one;
  many.workers = 8;
  const Prediction received = PredictRemote(p, p.measured, many);
  EXPECT_NEAR(received.rate, 1 / (p.step_cpu + many.recv_cpu_per_byte * p.sample_bytes), 1e-6);
  EXPECT_EQ(received.limit, Limit::kCpu);
  many.recv_cpu_per_byte = 0;
  EXPECT_NEAR(PredictRemote(p, p.measured, many).rate, p.step_rate, 1e-6);
  // The network caps what crosses it.
  many.recv_cpu_per_byte = one.recv_cpu_per_byte;
  many.network = 30 * p.sample_bytes;
  EXPECT_NEAR(RemoteRate(p, many), 30, 1e-9);
  // No workers: the node alone.
  EXPECT_DOUBLE_EQ(PredictRemote(p, p.measured, RemotePrep{}).rate, alone);
}

TEST(ModelTest, TheAnalysisSaysWhenRemotePrepPays) {
  Profile p = NodeShortOfCpu();
  p.cached_rate = p.cold_rate = 273;
  p.waited = 0.3;
  json out = json::parse(AnalysisJson(p));
  ASSERT_TRUE(out.contains("remote") && out["remote"].is_object()) << out.dump();
  EXPECT_TRUE(out["remote"]["pays"].get<bool>());
  EXPECT_EQ(out["remote"]["cpus_per_worker"].get<double>(), 1);
  EXPECT_GT(out["remote"]["rate"].get<double>(), 1.5 * 273);
  const json& curve = out["curves"]["remote_workers"];
  ASSERT_EQ(curve.size(), 5u);
  EXPECT_EQ(curve[0]["x"].get<int>(), 0);
  for (size_t i = 1; i < curve.size(); ++i) {
    EXPECT_GE(curve[i]["rate"].get<double>(), curve[i - 1]["rate"].get<double>() * (1 - 1e-9));
  }
  // A step that is the limit: more prep anywhere does not pay.
  p.step_rate = 100;
  p.step_cpu = 0.001;
  p.cached_rate = p.cold_rate = 100;
  p.waited = 0;
  out = json::parse(AnalysisJson(p));
  EXPECT_FALSE(out["remote"]["pays"].get<bool>());
  // Without the sample's size the analysis says nothing of it.
  p.sample_bytes = 0;
  out = json::parse(AnalysisJson(p));
  EXPECT_TRUE(out["remote"].is_null());
  EXPECT_FALSE(out["curves"].contains("remote_workers"));
}

TEST(ModelTest, CacheCutsOnlyTheReads) {
  Profile p = Example();
  Config c = p.measured;
  c.reads_in_flight = 64;  // latency hidden: bandwidth binds
  c.cache_fraction = 0.5;  // half the bytes from memory: twice the samples per byte read
  Prediction r = Predict(p, c);
  EXPECT_DOUBLE_EQ(r.limits[static_cast<int>(Limit::kBandwidth)], 1000);
  EXPECT_DOUBLE_EQ(r.rate, 500);  // now prep binds
  EXPECT_EQ(r.bottleneck(), Bottleneck::kPrep);
  c.cache_fraction = 1;
  EXPECT_TRUE(std::isinf(Predict(p, c).limits[static_cast<int>(Limit::kBandwidth)]));
}

TEST(ModelTest, ACacheAcrossNodesPoolsTheirMemoryAndPaysTheNetwork) {
  Profile p = Example();
  Config c = p.measured;
  c.reads_in_flight = 64;
  c.cache_fraction = 0.25;  // each node's memory holds a quarter
  EXPECT_DOUBLE_EQ(Predict(p, c).limits[static_cast<int>(Limit::kBandwidth)], 50e6 / (0.75 * 100e3));
  c.cache_nodes = 4;  // pooled: every item is on some node
  Prediction pooled = Predict(p, c);
  // No storage reads; the peers' 3/4 of the items cross a 10 Gb/s network.
  EXPECT_DOUBLE_EQ(pooled.limits[static_cast<int>(Limit::kBandwidth)], 1.25e9 / (0.75 * 100e3));
  const double peer_time = 0.0005 + 100e3 / 1.25e9;
  EXPECT_DOUBLE_EQ(pooled.limits[static_cast<int>(Limit::kLatency)], 64 / (0.75 * peer_time));
  EXPECT_EQ(pooled.bottleneck(), Bottleneck::kPrep);
  c.cache_nodes = 2;  // half the dataset: half the reads still go to storage
  EXPECT_DOUBLE_EQ(Predict(p, c).limits[static_cast<int>(Limit::kBandwidth)], 50e6 / (0.5 * 100e3));
  // A slow network makes the peers the limit.
  c.cache_nodes = 4;
  c.peer_bandwidth = 10e6;
  EXPECT_EQ(Predict(p, c).limit, Limit::kBandwidth);
}

TEST(ModelTest, TheRecommendationNamesTheClusterCacheWhenTheJobHasNodes) {
  Profile p = Example();
  p.measured.reads_in_flight = 64;
  p.measured.cache_fraction = 0.25;
  Recommendation alone = Recommend(p, Efficiency{});
  EXPECT_EQ(alone.config.cache_nodes, 1);
  EXPECT_GT(alone.config.cache_fraction, 0.25);
  p.nodes = 4;
  Recommendation job = Recommend(p, Efficiency{});
  ASSERT_EQ(job.config.cache_nodes, 4);
  // The same hit rate, a quarter of it on each node.
  EXPECT_NEAR(job.config.cache_fraction * 4, alone.config.cache_fraction, 1e-9);
  EXPECT_NEAR(job.cache_bytes_per_node * 4, job.cache_bytes, 1);
  EXPECT_GE(job.rate, alone.rate * 0.95);
}

TEST(ModelTest, AdaptiveReadsFollowLittlesLawAsTheLoaderDoes) {
  Profile p = Example();
  Config c = p.measured;
  c.reads_in_flight = 0;  // adaptive: prep takes 2 / 4 ms = 500 items/s; a read takes 12 ms
  EXPECT_DOUBLE_EQ(ReadsInFlight(p, c), std::ceil(500 * 0.012 * 1.5) + 2);  // 11
  EXPECT_DOUBLE_EQ(Predict(p, c).limits[static_cast<int>(Limit::kLatency)], 11 / 0.012);
  EXPECT_NE(Predict(p, c).limit, Limit::kLatency);  // latency hidden
  // At 100 ms per read the loader keeps 77; far away, it stops at 256.
  c.latency = 0.098;
  EXPECT_DOUBLE_EQ(ReadsInFlight(p, c), 77);
  c.latency = 2.0;
  EXPECT_DOUBLE_EQ(ReadsInFlight(p, c), 256);
  // 256 MiB of bodies at most: 10 MB items allow 26.
  p.item_bytes = 10e6;
  EXPECT_DOUBLE_EQ(ReadsInFlight(p, c), 26);
  // Fixed or adaptive, a read needs room in a batch slot.
  p.item_bytes = 100e3;
  p.slot_items = 96;
  EXPECT_DOUBLE_EQ(ReadsInFlight(p, c), 96);
  c.reads_in_flight = 128;
  EXPECT_DOUBLE_EQ(ReadsInFlight(p, c), 96);
  c.reads_in_flight = 8;
  EXPECT_DOUBLE_EQ(ReadsInFlight(p, c), 8);
}

TEST(ModelTest, RecommendationKeepsAdaptiveReadsThatSuffice) {
  Profile p = Example();
  p.measured.reads_in_flight = 0;  // adaptive gives 11; 6 are needed
  EXPECT_EQ(Recommend(p, {}).config.reads_in_flight, 0);
  // 10 MB items: the loader stops at 26 for memory's sake. 5 GB/s carries 500
  // of the 1000 samples/s (a 50% cache for the rest); the misses need
  // 500/s x (10 ms + 2 ms) = 6 reads in flight, then, 200 ms away, 101.
  p.item_bytes = 10e6;
  p.dataset_bytes = 10e9;
  p.measured.bandwidth = 5e9;
  EXPECT_EQ(Recommend(p, {}).config.reads_in_flight, 0);
  p.measured.latency = 0.2;
  EXPECT_EQ(Recommend(p, {}).config.reads_in_flight, 101);
}

TEST(ModelTest, RecommendedReadsComeWithTheBatchSlotsThatHoldThem) {
  // 1000 samples/s x 100 ms a read, unlimited bandwidth: 100 reads in
  // flight, while prefetch 2 of batches of 16 holds 48.
  Profile p = ExampleOnEightCoresWithoutStorageLimits();
  p.measured.latency = 0.1;
  p.batch = 16;
  p.slot_items = 3 * 16;
  Recommendation r = Recommend(p, {});
  EXPECT_EQ(r.config.reads_in_flight, 100);
  EXPECT_EQ(r.prefetch, 6);  // 7 slots of 16: 112
  EXPECT_NEAR(r.rate, 1000, 1);
  p.cached_rate = 1000;  // the runs: 4 reads of 100 ms at a time, cold
  p.cold_rate = 40;
  const auto j = nlohmann::json::parse(AnalysisJson(p))["recommendation"];
  EXPECT_EQ(j["prefetch"].get<int>(), 6);
  EXPECT_EQ(j["reads_in_flight"].get<double>(), 100);
  // Slots that hold them already: prefetch as it is.
  p.slot_items = 8 * 16;
  EXPECT_EQ(Recommend(p, {}).prefetch, 0);
  EXPECT_EQ(nlohmann::json::parse(AnalysisJson(p))["recommendation"]["prefetch"].get<int>(), 7);
}

TEST(ModelTest, TheLoopAroundTheStepBoundsTheComputeRate) {
  Profile p = Example();
  p.step_rate = 300;            // 3.33 ms per sample
  p.loop_overhead = 0.0001;     // taking each batch: 0.1 ms per sample
  Config c = p.measured;
  c.cache_fraction = 1;
  c.reads_in_flight = 64;
  c.cores = 8;
  c.prep_threads = 8;
  const Prediction r = Predict(p, c);
  EXPECT_NEAR(r.limits[static_cast<int>(Limit::kCompute)], 1 / (1 / 300.0 + 0.0001), 1e-9);
  EXPECT_EQ(r.limit, Limit::kCompute);
  // A cached run at the loop's rate is no prep stall: nothing to calibrate.
  p.cached_rate = 1 / (1 / 300.0 + 0.0001);
  p.measured = c;
  EXPECT_DOUBLE_EQ(Calibrate(p).cpu, 1);
  const auto j = nlohmann::json::parse(AnalysisJson(p));
  EXPECT_EQ(j["bottleneck"], "compute");
  EXPECT_NEAR(j["breakdown"]["prep_stall"].get<double>(), 0, 1e-9);
}

TEST(ModelTest, StepCpuAndFetchCpuShareTheCores) {
  Profile p = Example();
  p.step_cpu = 0.001;
  p.fetch_cpu_miss = 0.001;
  Config c = p.measured;
  c.bandwidth = 0;
  c.latency = 0;
  // 2 cores / (4 + 1 + 1 ms) per sample.
  EXPECT_DOUBLE_EQ(Predict(p, c).limits[static_cast<int>(Limit::kCpu)], 2 / 0.006);
  c.cores = 9;  // the step keeps one core busy; 8 prep threads on the other 8
  c.prep_threads = 8;
  EXPECT_DOUBLE_EQ(Predict(p, c).rate, 1000);
  EXPECT_EQ(Predict(p, c).bottleneck(), Bottleneck::kCompute);
}

TEST(ModelTest, SharedPipelineDoesTheWorkOnceForEveryJob) {
  Profile p = Example();
  Config c = p.measured;
  c.bandwidth = 0;
  c.latency = 0;
  c.cores = 8;
  c.jobs = 4;
  c.prep_threads = 8;
  c.shared = false;  // 4 pipelines on 8 cores: 8 / (4 * 4 ms) = 500 each
  EXPECT_DOUBLE_EQ(Predict(p, c).rate, 500);
  c.shared = true;   // one pipeline: 8 / 4 ms = 2000, so each job runs at G
  EXPECT_DOUBLE_EQ(Predict(p, c).rate, 1000);
  // Independent jobs also share the storage bandwidth.
  c = p.measured;
  c.latency = 0;
  c.reads_in_flight = 64;
  c.cores = 64;
  c.prep_threads = 64;
  c.jobs = 2;
  EXPECT_DOUBLE_EQ(Predict(p, c).limits[static_cast<int>(Limit::kBandwidth)], 250);
}

TEST(ModelTest, CalibrationReproducesTheMeasuredRates) {
  Profile p = Example();
  p.cached_rate = 450;  // prep-bound at 90% of the raw model
  p.cold_rate = 300;    // fetch-bound at 90% of 333.3
  Efficiency e = Calibrate(p);
  EXPECT_NEAR(e.cpu, 0.9, 1e-9);
  EXPECT_NEAR(e.storage, 0.9, 1e-9);
  EXPECT_DOUBLE_EQ(e.compute, 1);
  Config cached = p.measured, cold = p.measured;
  cached.cache_fraction = 1;
  EXPECT_NEAR(Predict(p, cached, e).rate, 450, 1e-9);
  EXPECT_NEAR(Predict(p, cold, e).rate, 300, 1e-9);
  // A wild measurement cannot bend the model beyond [0.5, 1.5].
  p.cached_rate = 5;
  p.cold_rate = 0;
  EXPECT_DOUBLE_EQ(Calibrate(p).cpu, 0.5);
  p.cached_rate = 5000;
  EXPECT_DOUBLE_EQ(Calibrate(p).cpu, 1.5);
}

TEST(ModelTest, RecommendationRemovesTheStall) {
  Profile p = Example();
  Recommendation r = Recommend(p, {});
  // Bandwidth: at 1000 samples/s only 500 may miss: cache 50% (50 MB), or
  // 100 MB/s of storage. Latency: 500 misses/s x 12 ms = 6 reads in flight.
  // CPU: 1000 x 4 ms = 4 cores.
  EXPECT_DOUBLE_EQ(r.config.cache_fraction, 0.5);
  EXPECT_DOUBLE_EQ(r.cache_bytes, 50e6);
  EXPECT_DOUBLE_EQ(r.bandwidth_instead, 100e6);
  EXPECT_EQ(r.config.reads_in_flight, 6);
  EXPECT_DOUBLE_EQ(r.config.cores, 4);
  EXPECT_EQ(r.config.prep_threads, 4);
  EXPECT_TRUE(r.reaches_step_rate);
  EXPECT_NEAR(r.rate, 1000, 1e-9);
  // Out of reach within 4x the cores.
  p.prep_cpu = 0.1;
  EXPECT_FALSE(Recommend(p, {}).reaches_step_rate);
}

TEST(ModelTest, AnalysisJsonHasBreakdownCurvesAndRecommendation) {
  Profile p = Example();
  p.cached_rate = 500;
  p.cold_rate = 250;
  auto j = nlohmann::json::parse(AnalysisJson(p));
  // Per sample: 1 ms step, 2 ms cached (1 ms prep stall), 4 ms cold (2 ms fetch stall).
  EXPECT_NEAR(j["breakdown"]["compute"].get<double>(), 0.25, 1e-9);
  EXPECT_NEAR(j["breakdown"]["prep_stall"].get<double>(), 0.25, 1e-9);
  EXPECT_NEAR(j["breakdown"]["fetch_stall"].get<double>(), 0.5, 1e-9);
  EXPECT_EQ(j["bottleneck"], "fetch");
  EXPECT_NEAR(j["check"]["cold"]["model"].get<double>(), 250, 1e-6);
  EXPECT_EQ(j["curves"]["cache_fraction"].size(), 21u);
  EXPECT_EQ(j["curves"]["cores"].size(), 8u);  // 1 .. 4 x 2 cores
  EXPECT_EQ(j["curves"]["cores"][7]["x"], 8);
  // More cache never hurts.
  double prev = 0;
  for (const auto& pt : j["curves"]["cache_fraction"]) {
    EXPECT_GE(pt["rate"].get<double>(), prev - 1e-9);
    prev = pt["rate"].get<double>();
  }
  EXPECT_EQ(j["curves"]["jobs"][3]["x"], 4);
  EXPECT_GE(j["curves"]["jobs"][3]["shared"].get<double>(),
            j["curves"]["jobs"][3]["independent"].get<double>());
  EXPECT_TRUE(j["recommendation"]["reaches_step_rate"].get<bool>());
}

// A step like a small conv net on torch's two intra-op threads: 1 ms per
// sample, both cores busy while it runs (2 ms CPU per sample); 1.6 ms per
// sample on one thread; nothing read from storage.
Profile TorchLike() {
  Profile p = Example();
  p.step_rate = 1000;
  p.step_cpu = 0.002;
  p.step_threads = 2;
  p.step_rate_1 = 625;
  p.step_cpu_1 = 0.0016;
  p.measured.bandwidth = 0;
  p.measured.latency = 0;
  return p;
}

TEST(ModelTest, AStepsOwnThreadsTakeCoresFromThePrepThreads) {
  Profile p = TorchLike();
  Config one = p.measured;
  one.prep_threads = 1;
  // With a step that uses no CPU, one prep thread makes 1 / 4 ms = 250/s.
  Profile idle = p;
  idle.step_cpu = 0;
  idle.step_cpu_1 = 0;
  EXPECT_NEAR(Predict(idle, one).rate, 250, 1e-6);
  // Here the step's two threads (spinning included, they wait for each
  // other) and the prep thread share 2 cores while the step runs (2/3 of a
  // core each: the step takes 1.5 ms), then the prep thread has a core to
  // itself: 1 ms of prep during the step, 3 ms after: 1 / 4.5 ms = 222/s,
  // and the cores are the limit, not the threads.
  Prediction r = Predict(p, one);
  EXPECT_NEAR(r.rate, 1 / 0.0045, 0.5);
  EXPECT_EQ(r.limit, Limit::kCpu);
  // Two more cores: nothing is crowded, the prep thread is the limit again.
  one.cores = 4;
  r = Predict(p, one);
  EXPECT_NEAR(r.rate, 250, 1e-6);
  EXPECT_EQ(r.limit, Limit::kThreads);
}

TEST(ModelTest, FewerCoresRunTheStepOnFewerThreads) {
  Profile p = TorchLike();
  Config c = p.measured;
  c.cores = 1;
  StepCost one = StepAt(p, c);
  EXPECT_EQ(one.threads, 1);
  EXPECT_NEAR(one.seconds, 1 / 625.0, 1e-12);
  EXPECT_NEAR(one.busy_cores, 1, 1e-9);
  EXPECT_NEAR(Predict(p, c).limits[static_cast<int>(Limit::kCompute)], 625, 1e-9);
  c.cores = 2;
  EXPECT_EQ(StepAt(p, c).threads, 2);
  c.step_threads = 1;  // asked for explicitly
  EXPECT_NEAR(StepAt(p, c).seconds, 1 / 625.0, 1e-12);
}

TEST(ModelTest, ContentionCalibratedOnACrowdedRunStaysWithCrowdedRuns) {
  Profile p = TorchLike();
  Config cached = p.measured;
  cached.cache_fraction = 1;
  const double raw = Predict(p, cached).rate;
  p.cached_rate = 0.8 * raw;  // the step's threads spin: slower than a fair share
  Efficiency e = Calibrate(p);
  EXPECT_LT(e.contention, 1);
  EXPECT_DOUBLE_EQ(e.cpu, 1);
  EXPECT_NEAR(Predict(p, cached, e).rate, 0.8 * raw, 1e-6 * raw);
  // One core: the step runs on one thread, nothing spins; no penalty.
  Config one = p.measured;
  one.cores = 1;
  one.prep_threads = 1;
  EXPECT_DOUBLE_EQ(Predict(p, one, e).rate, Predict(p, one).rate);
}

TEST(ModelTest, DifferencesWithinTheMachinesMeasuredNoiseAreNotDisagreements) {
  Profile p = ExampleOnEightCoresWithoutStorageLimits();
  p.cached_rate = 1000;
  p.cold_rate = 880;  // 12% under the model's 1,000
  auto j = nlohmann::json::parse(AnalysisJson(p));
  ASSERT_FALSE(j["disagreements"].empty());
  // The step alone ran 15% apart in its timings: 12% is within that.
  p.noise = 0.15;
  j = nlohmann::json::parse(AnalysisJson(p));
  EXPECT_TRUE(j["disagreements"].empty()) << j["disagreements"].dump();
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(p.ToJson())["noise"].get<double>(), 0.15);
}

TEST(ModelTest, AStallBehindANearInstantStepIsNotNoiseHoweverTheStepsTimingsSpread) {
  // A step of 10 us a sample timed 100% apart (a busy machine), cold reads
  // at 100 samples/s: 99.9% of the time is waiting for storage. The step's
  // spread moves that by 0.1%, not by 100%.
  Profile p = Example();
  p.step_rate = 100000;
  p.cached_rate = 90000;
  p.cold_rate = 100;
  p.noise = 1.0;
  auto j = nlohmann::json::parse(AnalysisJson(p));
  EXPECT_GT(j["breakdown"]["fetch_stall"].get<double>(), 0.99);
  EXPECT_EQ(j["bottleneck"], "fetch");
  EXPECT_LT(j["stall_noise"].get<double>(), 0.1);
  // A step that is most of the time: its spread is the stall's noise.
  p.step_rate = 110;
  j = nlohmann::json::parse(AnalysisJson(p));
  EXPECT_NEAR(j["stall_noise"].get<double>(), 1.0 * (1 / 110.0) / (1 / 100.0), 0.02);
  EXPECT_EQ(j["bottleneck"], "compute");
}

TEST(ModelTest, RunsSlowerThanTheStepAloneAreNoStallWhereTheLoopNeverWaited) {
  // The real-data runs 11% slower than the step alone (a busy machine slows
  // a step beside the pipeline): a stall, unless the loop's own count says
  // it never waited for a batch.
  Profile p = ExampleOnEightCoresWithoutStorageLimits();
  p.cached_rate = 940;
  p.cold_rate = 900;
  auto j = nlohmann::json::parse(AnalysisJson(p));
  EXPECT_NE(j["bottleneck"], "compute");
  p.waited = 0.01;
  j = nlohmann::json::parse(AnalysisJson(p));
  EXPECT_EQ(j["bottleneck"], "compute");
  EXPECT_DOUBLE_EQ(j["profile"]["waited"].get<double>(), 0.01);
  p.waited = 0.2;  // it did wait: the stall stands
  EXPECT_NE(nlohmann::json::parse(AnalysisJson(p))["bottleneck"], "compute");
}

TEST(ModelTest, AStepRateWithinTheNoiseOfTheBindingLimitIsNamedComputeByTheModelToo) {
  Profile p = Example();
  p.measured.bandwidth = 0;
  p.measured.latency = 0;
  // Prep on one core limits the model 3% under the step's rate.
  p.measured.cores = 1;
  p.measured.prep_threads = 1;
  p.step_cpu = 0;
  p.prep_cpu = 1 / (0.97 * p.step_rate);
  p.fetch_cpu_miss = p.fetch_cpu_hit = 0;
  p.cached_rate = p.cold_rate = 0.97 * p.step_rate;
  auto j = nlohmann::json::parse(AnalysisJson(p));
  EXPECT_NE(j["predicted"]["limit"], "compute");  // the prep CPU binds, 3% under
  EXPECT_EQ(j["model_bottleneck"], "compute");
  // 20% under: the model names prep.
  p.prep_cpu = 1 / (0.8 * p.step_rate);
  p.cached_rate = p.cold_rate = 0.8 * p.step_rate;
  j = nlohmann::json::parse(AnalysisJson(p));
  EXPECT_EQ(j["model_bottleneck"], "prep");
}

TEST(ModelTest, TheBottleneckAgreesWithTheMeasuredStalls) {
  Profile p = ExampleOnEightCoresWithoutStorageLimits();
  // The pipeline keeps up (cached at G), but the cold run was 20% slower and
  // nothing in the model explains it: the fetch stall is printed, so the
  // bottleneck is fetch, the model's view is kept apart and the gap named.
  p.cached_rate = 1000;
  p.cold_rate = 800;
  auto j = nlohmann::json::parse(AnalysisJson(p));
  EXPECT_GT(j["breakdown"]["fetch_stall"].get<double>(), 0.15);
  EXPECT_EQ(j["bottleneck"], "fetch");
  EXPECT_EQ(j["model_bottleneck"], "compute");
  ASSERT_FALSE(j["disagreements"].empty());
  EXPECT_EQ(j["disagreements"][0]["run"], "cold");
  EXPECT_NEAR(j["disagreements"][0]["off"].get<double>(), 0.25, 1e-6);
  // Within the noise: compute, and nothing to name.
  p.cold_rate = 980;
  j = nlohmann::json::parse(AnalysisJson(p));
  EXPECT_EQ(j["bottleneck"], "compute");
  EXPECT_TRUE(j["disagreements"].empty());
}

TEST(ModelTest, NoStallBeyondTheNoiseRecommendsNothingWhateverTheModelAdds) {
  // The model puts prep 24% under the step (2 cores, CPU-bound), but the
  // machine's speed moved 30% during the analysis and the runs stalled
  // 12%: compute, and the recommendation changes nothing.
  Profile p = Example();
  p.measured.bandwidth = 0;
  p.measured.latency = 0;
  p.measured.cores = 1;
  p.measured.prep_threads = 1;
  p.step_cpu = 0;
  p.prep_cpu = 1 / (0.76 * p.step_rate);
  p.fetch_cpu_miss = p.fetch_cpu_hit = 0;
  p.cached_rate = p.cold_rate = 0.88 * p.step_rate;
  p.noise = 0.3;
  auto j = nlohmann::json::parse(AnalysisJson(p));
  EXPECT_EQ(j["bottleneck"], "compute");
  EXPECT_EQ(j["recommendation"]["config"], j["profile"]["measured"]);
  // A quiet machine: the same runs are a prep stall, and more cores fix it.
  p.noise = 0;
  j = nlohmann::json::parse(AnalysisJson(p));
  EXPECT_EQ(j["bottleneck"], "prep");
  EXPECT_GT(j["recommendation"]["config"]["cores"].get<double>(), 1);
}

TEST(ModelTest, AStepFasterOnFewerOfItsOwnThreadsIsToldToUseThem) {
  // The step on its 2 threads at 100/s, on one at 2,000/s (its threads fight
  // for busy cores): compute-bound as measured, and the recommendation is
  // one intra-op thread, predicted at what the pipeline then allows.
  Profile p = TorchLike();
  p.step_rate = 100;
  p.step_cpu = 0.02;
  p.step_rate_1 = 2000;
  p.step_cpu_1 = 0.0005;
  p.cached_rate = p.cold_rate = 99;
  auto j = nlohmann::json::parse(AnalysisJson(p));
  EXPECT_EQ(j["bottleneck"], "compute");
  EXPECT_EQ(j["recommendation"]["config"]["step_threads"], 1);
  Config one = p.measured;
  one.step_threads = 1;
  EXPECT_NEAR(j["recommendation"]["rate"].get<double>(), Predict(p, one, Calibrate(p)).rate, 1e-6);
  EXPECT_GT(j["recommendation"]["rate"].get<double>(), 4 * j["predicted"]["rate"].get<double>());
  ASSERT_EQ(j["curves"]["step_threads"].size(), 2u);
  // Cores to spare, and the step faster on its 2 threads: they stay.
  p = TorchLike();
  p.measured.cores = 16;
  p.measured.prep_threads = 16;
  j = nlohmann::json::parse(AnalysisJson(p));
  EXPECT_EQ(j["recommendation"]["config"]["step_threads"], 0);
}

TEST(ModelTest, ProfileJsonRoundTripsAndRejectsNonsense) {
  Profile p = Example();
  Profile q = Profile::FromJson(p.ToJson()).value();
  EXPECT_DOUBLE_EQ(q.prep_cpu, p.prep_cpu);
  EXPECT_DOUBLE_EQ(q.measured.latency, p.measured.latency);
  EXPECT_FALSE(Profile::FromJson("{}").ok());
  EXPECT_FALSE(Profile::FromJson("not json").ok());
  p.step_rate = 0;
  EXPECT_FALSE(Profile::FromJson(p.ToJson()).ok());
}

// The Python hooks are part of taking each batch (the loop overhead), and
// the breakdown shows them apart from the step.
TEST(ModelTest, HooksAreTheirOwnPartOfTheLoop) {
  Profile p = Example();  // 1 ms step per sample
  p.loop_overhead = 0.003;
  p.hooks = 0.002;
  p.cached_rate = p.cold_rate = 250;  // the loop: 1 + 3 ms, no stall
  Profile q = Profile::FromJson(p.ToJson()).value();
  EXPECT_DOUBLE_EQ(q.hooks, 0.002);
  auto j = nlohmann::json::parse(AnalysisJson(p));
  EXPECT_NEAR(j["breakdown"]["compute"].get<double>(), 0.5, 1e-9);  // step 1 ms + 1 ms taking batches
  EXPECT_NEAR(j["breakdown"]["hooks"].get<double>(), 0.5, 1e-9);
  EXPECT_NEAR(j["breakdown"]["prep_stall"].get<double>(), 0, 1e-9);
  // The model's loop limit counts them: 1 / 4 ms.
  EXPECT_NEAR(Predict(p, p.measured).limits[static_cast<int>(Limit::kCompute)], 250, 1e-6);
  // Hooks beyond the loop overhead they are part of are nonsense.
  p.hooks = 0.004;
  EXPECT_FALSE(Profile::FromJson(p.ToJson()).ok());
}

TEST(ModelTest, PredictJsonOverridesTheMeasuredConfiguration) {
  Profile p = Example();
  auto j = nlohmann::json::parse(PredictJson(p, R"({"cache_fraction": 1, "cores": 8,
                                                    "prep_threads": 8})").value());
  EXPECT_DOUBLE_EQ(j["rate"].get<double>(), 1000);
  EXPECT_EQ(j["bottleneck"], "compute");
  EXPECT_EQ(j["config"]["reads_in_flight"], 4);  // kept from the measured run
  EXPECT_TRUE(j["limits"]["bandwidth"].is_null());  // nothing read: unlimited
  EXPECT_FALSE(PredictJson(p, R"({"corse": 8})").ok());
  EXPECT_FALSE(PredictJson(p, "[1]").ok());
}

TEST(StorageFitTest, RecoversLatencyAndBandwidth) {
  StorageProbe seq, conc;
  for (int i = 1; i <= 20; ++i) {
    const int64_t bytes = i * 10000;
    seq.reads.push_back({bytes, 0.005 + bytes / 20e6});  // 5 ms + 20 MB/s
  }
  StorageModel m = FitStorage(seq, conc);
  EXPECT_NEAR(m.latency, 0.005, 1e-9);
  EXPECT_NEAR(m.bandwidth, 20e6, 1);
  // Concurrent reads moving more bytes per second than one stream: that is
  // the device's bandwidth.
  conc.reads = seq.reads;
  conc.elapsed_s = 0.05;  // 2.1 MB in 50 ms = 42 MB/s
  conc.concurrency = 4;
  EXPECT_NEAR(FitStorage(seq, conc).latency, 0.005, 1e-9);
  EXPECT_NEAR(FitStorage(seq, conc).bandwidth, 42e6, 1);
  // Read times that do not follow the sizes (noise on a large latency): all
  // latency, however the noise happens to tilt.
  StorageProbe noisy;
  for (int i = 0; i < 40; ++i) {
    noisy.reads.push_back({500 + (i % 7) * 10, 0.010 + ((i * 37) % 11) * 1e-5});
  }
  StorageModel n = FitStorage(noisy, StorageProbe{});
  EXPECT_EQ(n.bandwidth, 0);
  EXPECT_NEAR(n.latency, 0.01005, 2e-4);
  // As fast as one shared stream allows: the bandwidth stands.
  conc.elapsed_s = 0.106;
  EXPECT_NEAR(FitStorage(seq, conc).bandwidth, 20e6, 1);
}

TEST(StorageFitTest, OneStragglerDoesNotHideTheBandwidth) {
  // 64 reads of 400-600 B through a 100 kB/s pipe, one of which waited 5 s
  // (a disk busy with another program): the mean is 83 ms a read. Yet 128
  // reads 8 at a time took 0.645 s, as the pipe allows and 83 ms cannot.
  StorageProbe seq, conc;
  for (int i = 0; i < 64; ++i) {
    const int64_t bytes = 400 + (i * 37) % 200;
    seq.reads.push_back({bytes, bytes / 100e3 + (i == 10 ? 5.0 : 0.0)});
    conc.reads.push_back({bytes, 0});
    conc.reads.push_back({bytes, 0});
  }
  conc.concurrency = 8;
  double bytes = 0;
  for (const auto& r : conc.reads) bytes += static_cast<double>(r.bytes);
  conc.elapsed_s = bytes / 100e3;
  const StorageModel m = FitStorage(seq, conc);
  EXPECT_NEAR(m.bandwidth, 100e3, 1e3);
  EXPECT_LT(m.latency, 1e-3);
  // Without the concurrent reads to contradict it, the straggler stands:
  // storage whose reads are that slow is what the probe saw.
  EXPECT_GT(FitStorage(seq, StorageProbe{}).latency, 0.05);
}

TEST(StorageProbeTest, ReadsColdAndTimesEveryRead) {
  testing::TempDir dir;
  for (int i = 0; i < 8; ++i) {
    testing::WriteFile(dir.path() + "/c/" + std::to_string(i) + ".jpg",
                       std::vector<uint8_t>(1000 * (i + 1), 1));
  }
  SourceOptions o;
  o.use_index_cache = false;
  o.driver_options = R"({"throttle_latency_ms": 20})";
  auto src = OpenSource(dir.path(), o).value();
  std::vector<int64_t> items = {0, 1, 2, 3, 4, 5, 6, 7};
  StorageProbe seq = ProbeStorage(*src, items, 1).value();
  ASSERT_EQ(seq.reads.size(), 8u);
  int64_t total = 0;
  double least = 1e9, most = 0;
  for (const auto& r : seq.reads) {
    total += r.bytes;
    EXPECT_GE(r.seconds, 0.019);
    least = std::min(least, r.seconds);
    most = std::max(most, r.seconds);
  }
  EXPECT_EQ(total, 36000);
  StorageProbe conc = ProbeStorage(*src, items, 4).value();
  EXPECT_LT(conc.elapsed_s, seq.elapsed_s * 0.6);  // latency overlaps
  // The fit's latency is of the reads' own times as this run measured them
  // (at least the store's 20 ms each; a busy machine stretches them): the
  // items are a few KB, so nearly all of a read is its latency.
  StorageModel m = FitStorage(seq, conc);
  EXPECT_GE(m.latency, 0.5 * least);
  EXPECT_LE(m.latency, most);
  EXPECT_FALSE(ProbeStorage(*src, {99}, 1).ok());
  EXPECT_FALSE(ProbeStorage(*src, items, 0).ok());
}

}  // namespace
}  // namespace nostall
