// Whether a run's figure can be trusted: its noise (stats.h) and the warnings it earns
// (stability.h).
#include <gtest/gtest.h>

#include <string>

#include "decodebench/result.h"
#include "decodebench/stability.h"
#include "decodebench/stats.h"

namespace {

TEST(Noise, IsTheRelativeStdevOfTheRepetitionMedians) {
  EXPECT_EQ(db::repetition_noise({}), 0);
  EXPECT_EQ(db::repetition_noise({2.0}), 0);
  EXPECT_EQ(db::repetition_noise({2.0, 2.0, 2.0}), 0);
  // mean 2, sample stdev sqrt(((-1)^2 + 0 + 1^2) / 2) = 1
  EXPECT_DOUBLE_EQ(db::repetition_noise({1.0, 2.0, 3.0}), 0.5);
}

db::Result steady_result() {
  db::Result r;
  r.timing.tpot_ms.median = 1.0;
  r.timing.tpot_ms.p90 = 1.1;
  r.timing.tpot_ms.mean = 1.0;
  r.timing.repetition_medians_ms = {1.0, 1.01, 0.99};
  r.timing.noise = db::repetition_noise(r.timing.repetition_medians_ms);
  db::ClockState c;
  c.sm_clock_mhz = 1980;
  c.mem_clock_mhz = 3201;
  r.device.start = c;
  r.device.end = c;
  return r;
}

TEST(Warnings, ASteadyRunEarnsNone) {
  EXPECT_TRUE(db::run_warnings(steady_result()).empty());
}

TEST(Warnings, NoisyRepetitionsOrAHeavyTailAreNoisy) {
  db::Result r = steady_result();
  r.timing.repetition_medians_ms = {1.0, 1.1, 0.9};
  r.timing.noise = db::repetition_noise(r.timing.repetition_medians_ms);
  ASSERT_EQ(db::run_warnings(r).size(), 1u);
  EXPECT_EQ(db::run_warnings(r)[0].rfind("noisy: ", 0), 0u);

  r = steady_result();  // median 1.18 ms, mean 8.25, p90 31.4: the steps' tail
  r.timing.tpot_ms = {8.25, 1.18, 1.1, 31.4, 40, 1.0, 50, 12, 640};
  ASSERT_EQ(db::run_warnings(r).size(), 1u);
  EXPECT_NE(db::run_warnings(r)[0].find("p90 31.400 ms"), std::string::npos) << db::run_warnings(r)[0];
}

TEST(Warnings, AThrottleReasonOtherThanIdleOrApplicationClocksIsThrottled) {
  db::Result r = steady_result();
  r.device.start->throttle_reasons = 0x1 | 0x2;  // idle, application clocks: not throttling
  r.device.start->throttle = {"gpu_idle", "applications_clocks_setting"};
  EXPECT_TRUE(db::run_warnings(r).empty());
  r.device.end->throttle_reasons = 0x4;
  r.device.end->throttle = {"sw_power_cap"};
  const auto w = db::run_warnings(r);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], "throttled: sw_power_cap at the run's end");
}

TEST(Warnings, ClocksThatFellMoreThanOnePercentAreFlagged) {
  db::Result r = steady_result();
  r.device.end->sm_clock_mhz = 1965;  // -0.76%: within the tolerance
  EXPECT_TRUE(db::run_warnings(r).empty());
  r.device.end->sm_clock_mhz = 1755;
  const auto w = db::run_warnings(r);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].rfind("clocks fell: SM 1980 -> 1755 MHz", 0), 0u) << w[0];
}

}  // namespace
