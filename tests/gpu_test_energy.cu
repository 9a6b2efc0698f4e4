// Energy on the GPU (docs/method.md "Energy"): NVML's counter is monotonic and updates while
// the device works; a run's energy is positive, its average power lies between the idle
// power and the power limit; and the counter agrees with NVML's power readings integrated
// over time, within the 5% NVML states for its power readings. The figures each test sees
// (the counter's update interval and increment, the two energies) go to stdout, for the lab.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli_helpers.h"
#include "decodebench/energy.h"
#include "decodebench/result.h"
#include "gpu_common.cuh"
#include "nvml.h"
#include "probe.cuh"
#include "temp_dir.h"

using namespace db;

namespace {

using Clock = std::chrono::steady_clock;

std::string bus_id() {
  char bus[32] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, 0));
  return bus;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? std::nan("") : v[v.size() / 2];
}

// The device streaming reads (the bandwidth probe, 1 GiB at a time) for `seconds`.
void load_for(double seconds) {
  const Clock::time_point t0 = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds)
    (void)cuda::measure_read_GBps(size_t{1} << 30);
  CUDA_CHECK(cudaDeviceSynchronize());
}

// Every change of the counter is an increase, and it changes within a second at idle and
// under load: its update interval and increment in both states, printed.
TEST(Energy, CounterIsMonotonicAndUpdatesAtIdleAndUnderLoad) {
  REQUIRE_GPU();
  CUDA_CHECK(cudaSetDevice(0));
  std::string why;
  std::unique_ptr<EnergySource> source = make_nvml_energy_source(bus_id(), why);
  if (!source) GTEST_SKIP() << why;
  EnergySampler sampler(std::move(source));
  const EnergyWindow idle = sampler.idle();
  const CounterObservation at_idle = sampler.observed();
  std::printf("idle: %s\n", describe_counter("counter", idle, at_idle).c_str());
  sampler.begin();
  load_for(1.0);
  const EnergyWindow loaded = sampler.end();
  CounterObservation all = sampler.observed();
  CounterObservation under_load;
  under_load.update_gaps_s.assign(all.update_gaps_s.begin() + at_idle.update_gaps_s.size(),
                                  all.update_gaps_s.end());
  under_load.increments_j.assign(all.increments_j.begin() + at_idle.increments_j.size(),
                                 all.increments_j.end());
  std::printf("load: %s\n", describe_counter("counter", loaded, under_load).c_str());
  ASSERT_FALSE(at_idle.update_gaps_s.empty())
      << "the counter changed fewer than twice in " << idle.seconds << " s of idle";
  ASSERT_FALSE(under_load.update_gaps_s.empty()) << "the counter changed fewer than twice in 1 s of load";
  for (double inc : all.increments_j) EXPECT_GT(inc, 0) << "the counter went back";
  ASSERT_TRUE(idle.joules && loaded.joules);
  EXPECT_GT(*loaded.joules / loaded.seconds, *idle.joules / idle.seconds)
      << "streaming reads draw more than idle";
}

class EnergyRun : public db_test::TempDirTest {};

// The counter's median update interval at idle, in seconds; `why` says why there is no
// counter (then the result is meaningless).
double idle_update_s(std::string& why) {
  std::unique_ptr<EnergySource> source = make_nvml_energy_source(bus_id(), why);
  if (!source) return 0;
  EnergySampler sampler(std::move(source));
  sampler.idle();
  return median(sampler.observed().update_gaps_s);
}

// A decode run long enough for the counter (each repetition 40 of its updates: a resolution
// of 2.5%, half the bar) has every energy figure, positive, and an average power above the
// idle power and at most the power limit, each within the resolution the run states.
TEST_F(EnergyRun, EnergyIsPositiveAndTheAveragePowerLiesBetweenIdleAndThePowerLimit) {
  REQUIRE_GPU();
  CUDA_CHECK(cudaSetDevice(0));
  std::string why;
  const double update_s = idle_update_s(why);
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(std::isfinite(update_s)) << "the counter's update interval was not observed at idle";
  // 1b-fp16 takes 0.77 ms a step on an H200 and longer on a smaller GPU.
  const int64_t tokens = std::max<int64_t>(256, static_cast<int64_t>(std::ceil(40 * update_s / 0.00077)));
  const std::string out = path("run.json");
  const db_test::Outcome o = db_test::run({"--model", "1b-fp16", "--tokens", std::to_string(tokens),
                                           "--repeat", "3", "--warmup", "32", "-o", out});
  ASSERT_EQ(o.code, 0) << o.err;
  std::printf("%s", o.out.c_str());
  const Result r = read_results(out).at(0);
  const Energy& e = r.energy;
  ASSERT_EQ(e.reason, "") << "tokens " << tokens << ", counter update " << update_s * 1e3 << " ms";
  ASSERT_EQ(e.repetition_j.size(), 3u);
  for (double j : e.repetition_j) EXPECT_GT(j, 0);
  ASSERT_TRUE(e.resolution && e.idle_power_w && e.power_w.min && e.power_w.max);
  const double res = *e.resolution;
  EXPECT_LE(res, kEnergyResolution);
  EXPECT_GT(*e.power_w.min * (1 + res), *e.idle_power_w) << "decoding draws more than idle";
  ASSERT_GT(r.device.power_limit_w, 0);
  EXPECT_LE(*e.power_w.max * (1 - res), r.device.power_limit_w) << "the average stays within the limit";
  EXPECT_EQ(e.clocks_reason, "");
  EXPECT_GT(*e.sm_clock_mhz.median, 0);
  EXPECT_GT(*e.mem_clock_mhz.median, 0);
}

// The default repetitions (128 steps; 1b-fp16 takes ~0.1 s for them on an H200, about one
// update of its counter) are read aligned on a coarse counter's updates: each window's tail
// ends at the first update after the steps. Energy is then reported, or null with the reason
// that names the --tokens that reach the stated resolution (how fast an update is seen
// depends on how long a counter read takes under load); a run with that many tokens reports
// it, its average power between idle and the power limit within the resolution it states.
// The figures the lab reads (tails, the energy subtracted, the detection, the spread) go to
// stdout.
TEST_F(EnergyRun, DefaultRepetitionsAreAlignedOnTheCountersUpdatesAndReported) {
  REQUIRE_GPU();
  CUDA_CHECK(cudaSetDevice(0));
  std::string why;
  const double update_s = idle_update_s(why);
  if (!why.empty()) GTEST_SKIP() << why;
  ASSERT_TRUE(std::isfinite(update_s)) << "the counter's update interval was not observed at idle";
  if (update_s <= kFineCounterPeriods * kEnergySamplePeriodS)
    GTEST_SKIP() << "the counter updates every " << update_s * 1e3 << " ms: read unaligned";
  const auto decode = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"--model",  "1b-fp16", "--repeat", "5",
                                     "--warmup", "32",      "-o",       path("run.json")};
    args.insert(args.end(), extra.begin(), extra.end());
    const db_test::Outcome o = db_test::run(args);
    EXPECT_EQ(o.code, 0) << o.err;
    std::printf("%s", o.out.c_str());
    return read_results(path("run.json")).at(0);
  };
  Result r = decode({});
  ASSERT_EQ(r.energy.window, "aligned") << r.energy.window_reason;
  if (!r.energy.reason.empty()) {
    const std::regex needed("--tokens ([0-9]+) or more reaches it");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.energy.reason, m, needed)) << r.energy.reason;
    std::printf("default: %s\n", r.energy.reason.c_str());
    r = decode({"--tokens", m[1].str()});
    ASSERT_EQ(r.energy.window, "aligned") << r.energy.window_reason;
  }
  const Energy& e = r.energy;
  ASSERT_EQ(e.reason, "");
  ASSERT_EQ(e.repetition_tail_s.size(), 5u);
  ASSERT_TRUE(e.resolution && e.idle_power_w && e.detect_ms && e.counter_update_ms && e.j_per_step.spread);
  std::printf("aligned: update %.1f ms, detect %.3f ms, resolution %.2f%%, J/step spread %.2f%%, tails ms",
              *e.counter_update_ms, *e.detect_ms, 100 * *e.resolution, 100 * *e.j_per_step.spread);
  for (size_t i = 0; i < e.repetition_tail_s.size(); ++i)
    std::printf(" %.1f (%.2f J of %.2f J)", e.repetition_tail_s[i] * 1e3, e.repetition_idle_j[i],
                e.repetition_j[i] + e.repetition_idle_j[i]);
  std::printf("\n");
  for (size_t i = 0; i < e.repetition_tail_s.size(); ++i) {
    EXPECT_GE(e.repetition_tail_s[i], 0);
    // The closing update is the first after the steps: within an update interval of them (the
    // intervals vary by a few percent about their median; twice it is past any of them).
    EXPECT_LE(e.repetition_tail_s[i], 2 * *e.counter_update_ms * 1e-3) << i;
    EXPECT_GT(e.repetition_j[i], 0);
  }
  const double res = *e.resolution;
  EXPECT_LE(res, kEnergyResolution);
  EXPECT_GT(*e.power_w.min * (1 + res), *e.idle_power_w) << "decoding draws more than idle";
  ASSERT_GT(r.device.power_limit_w, 0);
  EXPECT_LE(*e.power_w.max * (1 - res), r.device.power_limit_w) << "the average stays within the limit";
}

// The counter against NVML's power readings, sampled every 10 ms and integrated (trapezoids)
// over 3 s of idle, 4 s of streaming reads and 3 s of idle: on Hopper a reading is the
// average of the last second, and with idle longer than that at both ends both measures
// hold the same energy. NVML states its power readings to 5%; the counter must agree to that.
TEST(Energy, CounterAgreesWithSampledPower) {
  REQUIRE_GPU();
  CUDA_CHECK(cudaSetDevice(0));
  std::unique_ptr<Nvml> nvml = Nvml::open(bus_id());
  if (!nvml) GTEST_SKIP() << "NVML is unavailable";
  std::string error;
  if (!nvml->energy_j(error)) GTEST_SKIP() << error;
  ASSERT_TRUE(nvml->power_usage_w(error)) << error;
  std::this_thread::sleep_for(std::chrono::seconds(3));

  std::vector<std::pair<double, double>> samples;  // (seconds since a, W)
  std::atomic<bool> stop{false};
  std::string sample_error;
  const Clock::time_point a = Clock::now();
  const double e0 = *nvml->energy_j(error);
  std::thread sampler([&] {
    Clock::time_point next = Clock::now();
    while (!stop.load()) {
      std::string err;
      const std::optional<double> w = nvml->power_usage_w(err);
      const double t = std::chrono::duration<double>(Clock::now() - a).count();
      if (w)
        samples.emplace_back(t, *w);
      else
        sample_error = err;
      next += std::chrono::milliseconds(10);
      std::this_thread::sleep_until(next);
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(3));
  load_for(4.0);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const double e1 = *nvml->energy_j(error);
  const double span = std::chrono::duration<double>(Clock::now() - a).count();
  stop.store(true);
  sampler.join();
  ASSERT_TRUE(sample_error.empty()) << sample_error;
  ASSERT_GT(samples.size(), 100u);

  double integrated = 0;
  for (size_t i = 1; i < samples.size(); ++i)
    integrated += (samples[i].first - samples[i - 1].first) * (samples[i].second + samples[i - 1].second) / 2;
  // The ends: the first sample's power from a, the last one's to the counter's second read.
  integrated += samples.front().first * samples.front().second;
  integrated += (span - samples.back().first) * samples.back().second;
  const double counter = e1 - e0;
  std::printf("counter %.1f J, power x time %.1f J over %.2f s (%zu samples): ratio %.4f\n", counter,
              integrated, span, samples.size(), counter / integrated);
  EXPECT_NEAR(counter / integrated, 1.0, 0.05);
}

}  // namespace
