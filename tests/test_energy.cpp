// Energy (energy.h): the arithmetic of the result's figures and every path to null, the
// sampler's windows, where the protocol opens and closes them, and the RAPL reader on a
// fake powercap tree (a CPU test never depends on this machine's RAPL being readable).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>

#include "decodebench/config.h"
#include "decodebench/energy.h"
#include "decodebench/protocol.h"
#include "decodebench/stats.h"
#include "decodebench/weights.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;

db::EnergyWindow window(double seconds, double joules, std::vector<db::ClockSample> clocks = {}) {
  db::EnergyWindow w;
  w.seconds = seconds;
  w.joules = joules;
  w.clocks = std::move(clocks);
  w.polls = 10;
  return w;
}

// Three repetitions of 100 steps at batch 4, a counter that updates every 10 ms.
db::EnergyMeasurement three_repetitions() {
  db::EnergyMeasurement m;
  m.source = "fake counter";
  m.sample_period_s = 0.002;
  m.windows = {window(0.5, 150, {{1980, 3200}, {1970, 3200}}), window(0.5, 160, {{1900, 3200}}),
               window(0.4, 130, {{1950, 3100}, {1950, 3300}})};
  m.observed.update_gaps_s = {0.010, 0.009, 0.011, 0.010};
  m.idle = window(1.0, 80);
  m.idle_observed.update_gaps_s = {0.010, 0.011, 0.010};
  m.window_why = "the test's windows are read at the steps' ends";
  return m;
}

TEST(EnergySummary, PerStepPerTokenAndWattsAreTheCountersDifferenceOverStepsBatchAndSeconds) {
  const db::Energy e = db::summarize_energy(three_repetitions(), 100, 4);
  ASSERT_EQ(e.reason, "");
  EXPECT_EQ(e.source, "fake counter");
  EXPECT_EQ(e.repetition_j, (std::vector<double>{150, 160, 130}));
  EXPECT_EQ(e.repetition_s, (std::vector<double>{0.5, 0.5, 0.4}));
  // J/step 1.5, 1.6, 1.3: median 1.5; J/token a quarter of that; W 300, 320, 325.
  EXPECT_DOUBLE_EQ(*e.j_per_step.median, 1.5);
  EXPECT_DOUBLE_EQ(*e.j_per_step.min, 1.3);
  EXPECT_DOUBLE_EQ(*e.j_per_step.max, 1.6);
  EXPECT_DOUBLE_EQ(*e.j_per_step.spread, db::repetition_noise({1.5, 1.6, 1.3}));
  EXPECT_DOUBLE_EQ(*e.j_per_token.median, 1.5 / 4);
  EXPECT_DOUBLE_EQ(*e.j_per_token.spread, *e.j_per_step.spread);  // the same figures / 4
  EXPECT_DOUBLE_EQ(*e.tokens_per_j, 4 / 1.5);
  EXPECT_DOUBLE_EQ(*e.power_w.median, 320);
  EXPECT_DOUBLE_EQ(*e.power_w.min, 300);
  EXPECT_DOUBLE_EQ(*e.power_w.max, 325);
  // The clocks: each repetition's mean of its samples, then their median.
  EXPECT_EQ(e.clocks_reason, "");
  EXPECT_EQ(e.repetition_sm_clock_mhz, (std::vector<double>{1975, 1900, 1950}));
  EXPECT_EQ(e.repetition_mem_clock_mhz, (std::vector<double>{3200, 3200, 3200}));
  EXPECT_DOUBLE_EQ(*e.sm_clock_mhz.median, 1950);
  EXPECT_DOUBLE_EQ(*e.mem_clock_mhz.spread, 0);
  // The counter's median update against the shortest repetition; idle as measured, 80 W.
  EXPECT_DOUBLE_EQ(*e.counter_update_ms, 10);
  EXPECT_DOUBLE_EQ(*e.resolution, 0.010 / 0.4);
  EXPECT_DOUBLE_EQ(*e.idle_power_w, 80);
  EXPECT_DOUBLE_EQ(*e.idle_s, 1);
  EXPECT_EQ(e.samples, 30);
  EXPECT_DOUBLE_EQ(*e.sample_period_ms, 2);
  // Unaligned windows: nothing subtracted, no tail, no detection.
  EXPECT_EQ(e.window, "unaligned");
  EXPECT_EQ(e.window_reason, "the test's windows are read at the steps' ends");
  EXPECT_EQ(e.repetition_tail_s, (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(e.repetition_idle_j, (std::vector<double>{0, 0, 0}));
  EXPECT_FALSE(e.detect_ms.has_value());
}

TEST(EnergySummary, TheIdlePowerIsNotSubtractedFromAnUnalignedWindow) {
  db::EnergyMeasurement m = three_repetitions();
  const std::optional<double> with_idle = db::summarize_energy(m, 100, 4).j_per_step.median;
  m.idle.reset();
  const db::Energy e = db::summarize_energy(m, 100, 4);
  EXPECT_EQ(e.j_per_step.median, with_idle);
  EXPECT_FALSE(e.idle_power_w.has_value());
  EXPECT_FALSE(e.idle_s.has_value());
}

TEST(EnergySummary, RepetitionSpreadIsTheMedianRangeAndRelativeStdev) {
  const db::RepetitionSpread s = db::repetition_spread({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(*s.median, 2.5);
  EXPECT_DOUBLE_EQ(*s.min, 1);
  EXPECT_DOUBLE_EQ(*s.max, 4);
  EXPECT_DOUBLE_EQ(*s.spread, std::sqrt(5.0 / 3) / 2.5);  // sample stdev / mean
  const db::RepetitionSpread none = db::repetition_spread({});
  EXPECT_FALSE(none.median || none.min || none.max || none.spread);
}

// Every null figure is NaN (null in the file), with the reason that applies.
void expect_no_energy(const db::Energy& e, const std::string& reason_part) {
  EXPECT_NE(e.reason.find(reason_part), std::string::npos) << e.reason;
  EXPECT_TRUE(e.repetition_j.empty());
  EXPECT_FALSE(e.j_per_step.median.has_value());
  EXPECT_FALSE(e.j_per_token.median.has_value());
  EXPECT_FALSE(e.power_w.median.has_value());
  EXPECT_FALSE(e.tokens_per_j.has_value());
}

TEST(EnergySummary, WithoutACounterEverythingIsNullWithTheBackendsReason) {
  db::EnergyMeasurement m;
  m.reason = "NVML has no total energy counter on this GPU";
  const db::Energy e = db::summarize_energy(m, 100, 1);
  expect_no_energy(e, "NVML has no total energy counter on this GPU");
  EXPECT_EQ(e.source, "");
  EXPECT_FALSE(e.clocks_reason.empty());
  EXPECT_FALSE(e.sm_clock_mhz.median.has_value());
  EXPECT_FALSE(e.idle_power_w.has_value());
  EXPECT_FALSE(e.sample_period_ms.has_value());
}

TEST(EnergySummary, AFailedReadIsNullNamingTheRepetitionAndTheError) {
  db::EnergyMeasurement m = three_repetitions();
  m.windows[1].joules.reset();
  m.windows[1].error = "nvmlDeviceGetTotalEnergyConsumption: GPU is lost";
  const db::Energy e = db::summarize_energy(m, 100, 4);
  expect_no_energy(e, "could not be read in repetition 2: nvmlDeviceGetTotalEnergyConsumption: GPU is lost");
  EXPECT_EQ(e.clocks_reason, "") << "the clocks were sampled all the same";
}

TEST(EnergySummary, ACounterThatDidNotAdvanceIsNull) {
  db::EnergyMeasurement m = three_repetitions();
  m.windows[2].joules = 0;
  expect_no_energy(db::summarize_energy(m, 100, 4), "did not advance over repetition 3");
}

TEST(EnergySummary, AnUnobservedUpdateIntervalIsNullNotAGuess) {
  db::EnergyMeasurement m = three_repetitions();
  m.observed.update_gaps_s.clear();
  m.idle_observed.update_gaps_s.clear();
  const db::Energy e = db::summarize_energy(m, 100, 4);
  expect_no_energy(e, "changed fewer than twice within every repetition (0.400 s the shortest)");
  EXPECT_FALSE(e.counter_update_ms.has_value());
  EXPECT_FALSE(e.resolution.has_value());
  EXPECT_FALSE(e.idle_power_w.has_value()) << "the idle window is resolved by the same rule";
}

TEST(EnergySummary, ACounterTooCoarseForTheRepetitionIsNullAndSaysHowManyTokensReachIt) {
  db::EnergyMeasurement m = three_repetitions();
  m.observed.update_gaps_s = {0.05};  // 50 ms against a 0.4 s repetition: 12.5%
  m.idle_observed.update_gaps_s = {0.05};
  const db::Energy e = db::summarize_energy(m, 100, 4);
  expect_no_energy(
      e,
      "resolution 12.5%, coarser than the 5% energy is reported at; --tokens 250 or more reaches it "
      "(windows not aligned on the counter's updates: the test's windows are read at the steps' "
      "ends)");
  EXPECT_DOUBLE_EQ(*e.resolution, 0.125);
  EXPECT_DOUBLE_EQ(*e.counter_update_ms, 50);
  EXPECT_DOUBLE_EQ(*e.idle_power_w, 80) << "1 s of idle resolves a 50 ms update to 5%";
  // Within the stated resolution the figures are reported.
  m.observed.update_gaps_s = {0.019};
  EXPECT_EQ(db::summarize_energy(m, 100, 4).reason, "");
}

TEST(EnergySummary, ClocksAreNullWhenARepetitionHasNoSample) {
  db::EnergyMeasurement m = three_repetitions();
  m.windows[0].clocks.clear();
  m.clocks_reason = "the cpu backend samples no clocks";
  const db::Energy e = db::summarize_energy(m, 100, 4);
  EXPECT_EQ(e.reason, "");
  EXPECT_EQ(e.clocks_reason, "the cpu backend samples no clocks");
  EXPECT_TRUE(e.repetition_sm_clock_mhz.empty());
  EXPECT_FALSE(e.sm_clock_mhz.median.has_value());
}

TEST(EnergySummary, ARunsJoulesPerStepAreItsRepetitionsOverItsTokens) {
  db::Result r;
  r.config.tokens = 100;
  r.energy = db::summarize_energy(three_repetitions(), 100, 4);
  EXPECT_EQ(db::repetition_j_per_step(r), (std::vector<double>{1.5, 1.6, 1.3}));
  r.energy.reason = "not measured";
  EXPECT_TRUE(db::repetition_j_per_step(r).empty());
}

TEST(EnergySummary, InfoDescribesTheCountersUpdatesIncrementsAndIdlePower) {
  db::CounterObservation o;
  o.update_gaps_s = {0.020, 0.019, 0.021};
  o.increments_j = {1.6, 1.5, 1.7, 1.6};
  EXPECT_EQ(
      db::describe_counter("nvml total energy counter", window(0.5, 40), o),
      "nvml total energy counter: changes every 20 ms (median of 3; 19 to 21), by 1.6 J (median of 4; 1.5 "
      "to 1.7); idle 80.0 W over 0.50 s");
  o.update_gaps_s.clear();
  o.increments_j = {3};
  EXPECT_EQ(db::describe_counter("c", window(2, 150), o),
            "c: changed 1 times in 2.00 s of idle: its update interval is longer than that; idle 75.0 W over "
            "2.00 s");
}

// An aligned window: the counter's difference from one update to another, of which `head_s`
// and `tail_s` are idle.
db::EnergyWindow aligned(double seconds, double joules, double head_s, double tail_s, double detect_s) {
  db::EnergyWindow w = window(seconds, joules, {{1980, 3201}});
  w.aligned = true;
  w.head_s = head_s;
  w.tail_s = tail_s;
  w.detect_s = detect_s;
  return w;
}

// The error an aligned window states: the idle power over its head and tail, known to
// kIdleUncertainty, and its ends' updates each seen within detect_s.
double aligned_error_j(double idle_w, const db::EnergyWindow& w) {
  return idle_w * ((1 + db::kIdleUncertainty) * w.detect_s + db::kIdleUncertainty * (w.head_s + w.tail_s));
}

TEST(EnergySummary, AnAlignedWindowsStepsAreItsEnergyLessTheIdlePowerOverItsHeadAndTail) {
  db::EnergyMeasurement m = three_repetitions();  // idle 80 W
  m.window_why.clear();
  // Steps of 0.5 s at 300 W (150 J) with a head of 1 ms and tails of 20 and 90 ms at idle.
  m.windows = {aligned(0.521, 150 + 80 * 0.021, 0.001, 0.020, 0.0006),
               aligned(0.591, 150 + 80 * 0.091, 0.001, 0.090, 0.0008)};
  const db::Energy e = db::summarize_energy(m, 100, 1);
  ASSERT_EQ(e.reason, "");
  EXPECT_EQ(e.window, "aligned");
  EXPECT_EQ(e.window_reason, "");
  ASSERT_EQ(e.repetition_j.size(), 2u);
  EXPECT_NEAR(e.repetition_j[0], 150, 1e-9);
  EXPECT_NEAR(e.repetition_j[1], 150, 1e-9);
  EXPECT_NEAR(e.repetition_idle_j[0], 80 * 0.021, 1e-9);
  EXPECT_NEAR(e.repetition_idle_j[1], 80 * 0.091, 1e-9);
  EXPECT_EQ(e.repetition_tail_s, (std::vector<double>{0.020, 0.090}));
  // The steps' span is the window less its head and tail: 300 W.
  EXPECT_NEAR(e.repetition_s[0], 0.5, 1e-12);
  EXPECT_NEAR(*e.power_w.median, 300, 1e-6);
  EXPECT_NEAR(*e.j_per_step.median, 1.5, 1e-9);
  EXPECT_NEAR(*e.detect_ms, 0.8, 1e-12);
  // The resolution is the larger repetition's stated error over its energy: the longer tail's.
  EXPECT_NEAR(*e.resolution, aligned_error_j(80, m.windows[1]) / 150, 1e-12);
}

// The default run of 8b-int4 on the H200 (5 repetitions of 128 steps, 0.215 s each at 656 W;
// the counter's 100 ms updates; idle 123.7 W): read unaligned, 46.5% and null; aligned, its
// error is the tail's idle energy to 5% (<= 0.62 J) and the detection's (~0.08 J), under 0.5%
// of its 141 J, and it is reported.
TEST(EnergySummary, TheDefaultRunOfTheH200IsResolvedAlignedAndNotUnaligned) {
  const double idle_w = 123.7, steps_s = 0.215, load_w = 656;
  db::EnergyMeasurement m;
  m.source = "nvml total energy counter";
  m.sample_period_s = db::kEnergySamplePeriodS;
  m.idle = window(2.1, idle_w * 2.1);
  m.idle_observed.update_gaps_s = std::vector<double>(21, 0.100);
  m.observed.update_gaps_s = std::vector<double>(30, 0.100);
  for (double tail : {0.012, 0.047, 0.099, 0.003, 0.070})
    m.windows.push_back(aligned(steps_s + 3e-5 + tail, load_w * steps_s + idle_w * (3e-5 + tail), 3e-5, tail,
                                db::kUpdatePollS + 1e-4));
  const db::Energy e = db::summarize_energy(m, 128, 1);
  ASSERT_EQ(e.reason, "");
  ASSERT_TRUE(e.resolution.has_value());
  EXPECT_NEAR(*e.resolution, aligned_error_j(idle_w, m.windows[2]) / (load_w * steps_s), 1e-12);
  EXPECT_LT(*e.resolution, 0.005);
  EXPECT_NEAR(*e.j_per_token.median, load_w * steps_s / 128, 1e-9);

  for (db::EnergyWindow& w : m.windows) w = window(steps_s, load_w * steps_s, {{1980, 3201}});
  m.window_why = "the idle power is null";
  const db::Energy u = db::summarize_energy(m, 128, 1);
  expect_no_energy(u, "spans 2.1 of the energy counter's 100.0 ms updates: resolution 46.5%");
  EXPECT_NE(
      u.reason.find("--tokens 1191 or more reaches it (windows not aligned on the counter's updates: the "
                    "idle power is null)"),
      std::string::npos)
      << u.reason;
}

TEST(EnergySummary, AnAlignedWindowTooShortForItsErrorIsNullAndSaysHowManyTokensReachIt) {
  db::EnergyMeasurement m = three_repetitions();
  // 10 J of steps (a 1 ms head, a 95 ms tail at 80 W: 7.68 J subtracted) against an error of
  // 80 x (1.05 x 1 ms + 0.05 x 96 ms) = 0.468 J: 4.68%; with 0.7 J of steps, 66.9%. The tokens
  // named plan for twice the slowest detection and head and tail of at least two update
  // intervals (here the 96 ms seen, over 2 x 10 ms): 80 x (1.05 x 2 ms + 0.05 x 96 ms) =
  // 0.552 J, 5% of 0.7 J x N / 100 from N = 1578 (the run's own error alone says 1338).
  m.windows = {aligned(0.2, 10 + 80 * 0.096, 0.001, 0.095, 0.001)};
  EXPECT_EQ(db::summarize_energy(m, 100, 1).reason, "");
  m.windows = {aligned(0.2, 0.7 + 80 * 0.096, 0.001, 0.095, 0.001)};
  const db::Energy e = db::summarize_energy(m, 100, 1);
  expect_no_energy(
      e,
      "repetition 1's error, 0.468 J (its idle head and tail of 96 ms at the idle 80.0 W, known to "
      "5%, and its ends' updates seen within 1 ms), is 66.9% of its 0.7 J, coarser than the 5% "
      "energy is reported at; --tokens 1578 or more reaches it");
  // No more than the head and tail's idle energy: the steps' is not resolved at all.
  m.windows = {aligned(0.2, 7, 0.001, 0.095, 0.001)};
  expect_no_energy(
      db::summarize_energy(m, 100, 1),
      "the energy counter's 7.000 J over repetition 1 is no more than its idle head and tail's 7.680 J");
}

TEST(EnergySummary, AnAlignedWindowWithoutTheIdlePowerIsNullNotAGuess) {
  db::EnergyMeasurement m = three_repetitions();
  m.idle.reset();
  m.windows = {aligned(0.521, 151.68, 0.001, 0.020, 0.0006)};
  const db::Energy e = db::summarize_energy(m, 100, 1);
  expect_no_energy(
      e, "repetition 1's window is aligned on the energy counter's updates, but the idle power is null");
}

TEST(EnergySummary, OneUnalignedRepetitionMakesTheRunsWindowUnalignedAndNamesIt) {
  db::EnergyMeasurement m = three_repetitions();
  m.window_why.clear();
  db::EnergyWindow late = window(0.5, 150);
  late.unaligned_why = "the counter did not change within 500 ms of the window's end";
  m.windows = {aligned(0.521, 150 + 80 * 0.021, 0.001, 0.020, 0.0006), late};
  const db::Energy e = db::summarize_energy(m, 100, 1);
  EXPECT_EQ(e.reason, "") << "0.5 s against the 10 ms updates: 2%";
  EXPECT_EQ(e.window, "unaligned");
  EXPECT_EQ(e.window_reason, "repetition 2: the counter did not change within 500 ms of the window's end");
  EXPECT_EQ(e.repetition_tail_s, (std::vector<double>{0.020, 0}));
  EXPECT_NEAR(e.repetition_j[0], 150, 1e-9);
  EXPECT_EQ(e.repetition_j[1], 150);
  EXPECT_NEAR(*e.resolution, 0.010 / 0.5, 1e-12) << "the unaligned repetition's is the larger";
}

TEST(EnergyPlan, AlignsACoarseCounterWithAResolvedIdlePowerAndSaysWhyNotOtherwise) {
  db::CounterObservation coarse;
  coarse.update_gaps_s = {0.099, 0.100, 0.101};
  db::WindowPlan p = db::plan_windows(coarse, 124.0, db::kEnergySamplePeriodS);
  EXPECT_TRUE(p.aligned);
  EXPECT_EQ(p.why, "");
  EXPECT_DOUBLE_EQ(p.timeout_s, 5 * 0.100);
  coarse.update_gaps_s = {0.3, 0.3};
  EXPECT_DOUBLE_EQ(db::plan_windows(coarse, 124.0, db::kEnergySamplePeriodS).timeout_s,
                   db::kAlignTimeoutMaxS);

  p = db::plan_windows(coarse, std::nullopt, db::kEnergySamplePeriodS);
  EXPECT_FALSE(p.aligned);
  EXPECT_EQ(p.why.rfind("the idle power is null (not resolved to 5%)", 0), 0u) << p.why;

  db::CounterObservation fine;
  fine.update_gaps_s = {0.001, 0.001, 0.002};
  p = db::plan_windows(fine, 15.0, db::kEnergySamplePeriodS);
  EXPECT_FALSE(p.aligned);
  EXPECT_EQ(
      p.why,
      "the counter updates every 1 ms, within 2 of the sampler's 2 ms polls: the windows are read at the "
      "steps' ends, as fine");

  p = db::plan_windows(db::CounterObservation{}, std::nullopt, db::kEnergySamplePeriodS);
  EXPECT_FALSE(p.aligned);
  EXPECT_EQ(p.why.rfind("the counter's update interval was not observed at idle", 0), 0u) << p.why;
}

TEST(EnergyPlan, TheIdlePowerIsResolvedByTheUpdatesSeenInTheIdleWindow) {
  db::CounterObservation o;
  o.update_gaps_s = {0.1, 0.1};
  EXPECT_DOUBLE_EQ(*db::idle_power_w(window(2.1, 262.5), o), 125);    // 100 ms in 2.1 s: 4.8%
  EXPECT_FALSE(db::idle_power_w(window(1.9, 237.5), o).has_value());  // 5.3%
  EXPECT_FALSE(db::idle_power_w(window(2.1, 262.5), db::CounterObservation{}).has_value());
  EXPECT_FALSE(db::idle_power_w(window(2.1, 0), o).has_value());
}

// ---------------------------------------------------------------- the sampler

// A counter the test sets, and a log of who read it in which order.
class FakeSource final : public db::EnergySource {
 public:
  explicit FakeSource(std::vector<std::string>* log = nullptr) : log_(log) {}
  std::string name() const override { return "fake"; }
  std::optional<double> energy_j(std::string& error) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (log_ && std::this_thread::get_id() == main_) log_->push_back("read");
    if (fail_) {
      error = "fake read failure";
      return std::nullopt;
    }
    return value_;
  }
  std::optional<db::ClockSample> clocks() override { return db::ClockSample{1500, 2600}; }
  std::string clocks_unavailable() const override { return ""; }
  void set(double v) {
    std::lock_guard<std::mutex> lk(mu_);
    value_ = v;
  }
  void fail(bool f) {
    std::lock_guard<std::mutex> lk(mu_);
    fail_ = f;
  }

 private:
  std::mutex mu_;
  double value_ = 0;
  bool fail_ = false;
  std::vector<std::string>* log_;
  std::thread::id main_ = std::this_thread::get_id();
};

TEST(EnergySampler, AWindowIsTheDifferenceOfTheReadsAtItsEndsWithTheClocksSampledInIt) {
  auto owned = std::make_unique<FakeSource>();
  FakeSource* source = owned.get();
  db::EnergySampler s(std::move(owned));
  source->set(10);
  s.begin();
  source->set(25);
  const db::EnergyWindow w = s.end();
  ASSERT_TRUE(w.joules.has_value()) << w.error;
  EXPECT_EQ(*w.joules, 15);
  EXPECT_GE(w.seconds, 0);
  ASSERT_GE(w.clocks.size(), 2u) << "the ends are sampled";
  for (const db::ClockSample& c : w.clocks) EXPECT_EQ(c.sm_mhz, 1500);
  // One change seen (by a poll or the end's read, not both): its size, and no gap yet.
  const db::CounterObservation o = s.observed();
  EXPECT_EQ(o.increments_j, (std::vector<double>{15}));
  EXPECT_TRUE(o.update_gaps_s.empty());
}

TEST(EnergySampler, AFailedReadLeavesTheWindowWithoutJoulesAndSaysWhy) {
  auto owned = std::make_unique<FakeSource>();
  FakeSource* source = owned.get();
  db::EnergySampler s(std::move(owned));
  s.begin();
  source->fail(true);
  const db::EnergyWindow w = s.end();
  EXPECT_FALSE(w.joules.has_value());
  EXPECT_EQ(w.error, "fake read failure");
}

// ---------------------------------------------------------------- aligned windows on a stepped counter

// Time that passes only when the code under test sleeps, or a test's steps run: the tests of
// alignment are exact and instant, with no wall clock in them.
class FakeTime final : public db::Timebase {
 public:
  double now_s() override {
    std::lock_guard<std::mutex> lk(mu_);
    return t_;
  }
  void sleep_s(double seconds) override {
    std::lock_guard<std::mutex> lk(mu_);
    t_ += seconds;
  }

 private:
  std::mutex mu_;
  double t_ = 10;
};

// A counter like NVML's on the H200: every `update_s` it takes the energy drawn up to that
// update, `idle_w` at idle and the load's power while a load the test adds runs; past
// `frozen_at` it no longer changes. Logs "read" (a value it returned before) or "update" (a
// new one) for the test's thread, where given a log.
class SteppedCounter final : public db::EnergySource {
 public:
  SteppedCounter(std::shared_ptr<FakeTime> time, double update_s, double idle_w,
                 std::vector<std::string>* log = nullptr)
      : time_(std::move(time)), update_s_(update_s), idle_w_(idle_w), log_(log) {}
  std::string name() const override { return "stepped"; }
  std::optional<double> energy_j(std::string&) override {
    std::lock_guard<std::mutex> lk(mu_);
    ++reads_;
    const double t = std::min(time_->now_s(), frozen_at_);
    const double v = energy_at(std::floor(t / update_s_) * update_s_);
    if (log_ && std::this_thread::get_id() == main_) log_->push_back(v == last_ ? "read" : "update");
    last_ = v;
    return v;
  }
  // The energy drawn over [a, b].
  double drawn(double a, double b) const {
    std::lock_guard<std::mutex> lk(mu_);
    return energy_at(b) - energy_at(a);
  }
  void load(double from, double to, double watts) {
    std::lock_guard<std::mutex> lk(mu_);
    loads_.push_back({from, to, watts});
  }
  void freeze_at(double t) {
    std::lock_guard<std::mutex> lk(mu_);
    frozen_at_ = t;
  }
  int64_t reads() const {
    std::lock_guard<std::mutex> lk(mu_);
    return reads_;
  }

 private:
  struct Load {
    double from, to, watts;
  };
  double energy_at(double t) const {
    double e = idle_w_ * t;
    for (const Load& l : loads_) e += (l.watts - idle_w_) * std::max(0.0, std::min(t, l.to) - l.from);
    return e;
  }
  std::shared_ptr<FakeTime> time_;
  double update_s_, idle_w_;
  std::vector<std::string>* log_;
  std::thread::id main_ = std::this_thread::get_id();
  mutable std::mutex mu_;
  std::vector<Load> loads_;
  double frozen_at_ = std::numeric_limits<double>::infinity();
  double last_ = -1;
  int64_t reads_ = 0;
};

// The sampler's own thread waits on the host's clock: with a period of an hour it does not
// poll within these tests, and every read is the test thread's, on the fake clock.
constexpr double kNoPolls = 3600;

// A run on a stepped counter: the idle window, the plan it gives (or unaligned), then a
// repetition of each duration at `load_w`, each after `gap_s` x its index of idle, which moves
// where it falls against the updates. With each repetition's true energy and how long the
// sampler's begin() and end() took.
struct SimulatedRun {
  db::EnergyMeasurement m;
  db::WindowPlan plan;
  std::vector<double> true_j, begin_s, end_s;
  int64_t begin_reads = 0;  // the counter's reads within the begin() calls
};

SimulatedRun simulate(double update_s, double idle_w, double load_w, const std::vector<double>& durations,
                      double gap_s, bool align = true, double freeze_at = -1) {
  auto time = std::make_shared<FakeTime>();
  auto owned = std::make_unique<SteppedCounter>(time, update_s, idle_w);
  SteppedCounter* counter = owned.get();
  db::EnergySampler s(std::move(owned), kNoPolls, time);
  SimulatedRun r;
  r.m.source = counter->name();
  r.m.sample_period_s = db::kEnergySamplePeriodS;
  r.m.idle = s.idle();
  r.m.idle_observed = s.observed();
  r.plan = db::plan_windows(r.m.idle_observed, db::idle_power_w(*r.m.idle, r.m.idle_observed),
                            db::kEnergySamplePeriodS);
  if (!align) r.plan = {false, "the test reads them unaligned", 0};
  r.m.window_why = r.plan.why;
  s.plan(r.plan);
  if (freeze_at >= 0) counter->freeze_at(time->now_s() + freeze_at);
  for (size_t i = 0; i < durations.size(); ++i) {
    time->sleep_s(gap_s * static_cast<double>(i));
    const double b0 = time->now_s();
    const int64_t reads = counter->reads();
    s.begin();
    r.begin_reads += counter->reads() - reads;
    const double t0 = time->now_s();
    r.begin_s.push_back(t0 - b0);
    counter->load(t0, t0 + durations[i], load_w);
    time->sleep_s(durations[i]);
    const double t1 = time->now_s();
    r.m.windows.push_back(s.end());
    r.end_s.push_back(time->now_s() - t1);
    r.true_j.push_back(counter->drawn(t0, t1));
  }
  r.m.observed = s.observed();
  return r;
}

// The H200's counter: 100 ms updates, 124 W idle; steps at 650 W for 0.20-0.29 s (the default
// 8b-int4 run is 0.215 s), each repetition's start a different 13.7 ms later against the updates.
std::vector<double> h200_durations() {
  std::vector<double> d;
  for (int i = 0; i < 12; ++i) d.push_back(0.2 + 0.0083 * i);
  return d;
}

TEST(EnergyAligned, AnAlignedWindowRecoversTheStepsEnergyWithinItsStatedErrorWhereAnUnalignedOneDoesNot) {
  const double update_s = 0.1, idle_w = 124, load_w = 650;
  const SimulatedRun a = simulate(update_s, idle_w, load_w, h200_durations(), 0.0137);
  ASSERT_TRUE(a.plan.aligned) << a.plan.why;
  // The idle window spans 21 updates; its power is within one update of its length.
  ASSERT_TRUE(a.m.idle.has_value());
  const std::optional<double> idle = db::idle_power_w(*a.m.idle, a.m.idle_observed);
  ASSERT_TRUE(idle.has_value());
  EXPECT_GE(a.m.idle->seconds, db::kIdleUpdates * update_s);
  EXPECT_LE(std::fabs(*idle - idle_w), idle_w * update_s / a.m.idle->seconds);

  const db::Energy e = db::summarize_energy(a.m, 128, 1);
  ASSERT_EQ(e.reason, "");
  EXPECT_EQ(e.window, "aligned");
  ASSERT_EQ(e.repetition_j.size(), a.true_j.size());
  double worst_bound = 0;
  for (size_t i = 0; i < a.true_j.size(); ++i) {
    const db::EnergyWindow& w = a.m.windows[i];
    ASSERT_TRUE(w.aligned) << i << ": " << w.unaligned_why;
    // Both ends on an update: each seen within a poll, the tail within one update.
    EXPECT_LE(w.detect_s, db::kUpdatePollS * (1 + 1e-9));
    EXPECT_GT(w.tail_s, 0);
    EXPECT_LE(w.tail_s, update_s + w.detect_s);
    EXPECT_EQ(e.repetition_tail_s[i], w.tail_s);
    const double bound = aligned_error_j(*idle, w);
    worst_bound = std::max(worst_bound, bound);
    EXPECT_LE(std::fabs(e.repetition_j[i] - a.true_j[i]), bound)
        << "repetition " << i << ": " << e.repetition_j[i] << " J against " << a.true_j[i];
    EXPECT_LE(std::fabs(e.repetition_j[i] - a.true_j[i]), *e.resolution * e.repetition_j[i]);
  }
  EXPECT_LE(*e.resolution, db::kEnergyResolution);

  // The same repetitions read unaligned: each end may leave out up to one update's energy, and
  // some repetition is off by more than the aligned window's stated error.
  const SimulatedRun u = simulate(update_s, idle_w, load_w, h200_durations(), 0.0137, false);
  double worst = 0;
  for (size_t i = 0; i < u.true_j.size(); ++i) {
    ASSERT_TRUE(u.m.windows[i].joules.has_value());
    const double off = std::fabs(*u.m.windows[i].joules - u.true_j[i]);
    EXPECT_LE(off, (load_w + idle_w) * update_s) << i;
    worst = std::max(worst, off);
  }
  EXPECT_GT(worst, worst_bound);
  const db::Energy ue = db::summarize_energy(u.m, 128, 1);
  expect_no_energy(ue, "coarser than the 5% energy is reported at");
  EXPECT_NE(ue.reason.find("(windows not aligned on the counter's updates: the test reads them unaligned)"),
            std::string::npos)
      << ue.reason;
}

TEST(EnergyAligned, BeginWaitsForAnUpdateAndEndForTheNextBoundedByTheTimeout) {
  const SimulatedRun a = simulate(0.1, 124, 650, {0.215, 0.215}, 0.03);
  ASSERT_TRUE(a.plan.aligned);
  for (size_t i = 0; i < a.begin_s.size(); ++i) {
    // Each wait ends at an update, within one update interval (and its poll) of its call.
    EXPECT_GT(a.begin_s[i], 0);
    EXPECT_LE(a.begin_s[i], 0.1 + db::kUpdatePollS * (1 + 1e-9));
    EXPECT_GT(a.end_s[i], 0);
    EXPECT_LE(a.end_s[i], 0.1 + db::kUpdatePollS * (1 + 1e-9));
    // The caller's work starts as begin() returns: the head is the time after the update.
    EXPECT_EQ(a.m.windows[i].head_s, 0);
  }
}

TEST(EnergyAligned, ACounterThatStopsChangingGivesUpAtTheTimeoutAndSaysSo) {
  // Frozen before the first repetition: begin() waits the timeout, 5 of the 100 ms updates.
  SimulatedRun r = simulate(0.1, 124, 650, {0.3}, 0, true, 0);
  ASSERT_TRUE(r.plan.aligned);
  EXPECT_NEAR(r.plan.timeout_s, 0.5, 1e-9);
  EXPECT_GE(r.begin_s[0], 0.5);
  EXPECT_LE(r.begin_s[0], 0.5 + 2 * db::kUpdatePollS);
  EXPECT_FALSE(r.m.windows[0].aligned);
  EXPECT_EQ(r.m.windows[0].unaligned_why, "the counter did not change within 500 ms of the window's start");
  EXPECT_LE(r.end_s[0], 2 * db::kUpdatePollS) << "an unaligned start: end() reads at once";
  db::Energy e = db::summarize_energy(r.m, 128, 1);
  expect_no_energy(e, "the energy counter did not advance over repetition 1");
  EXPECT_EQ(e.window, "unaligned");
  EXPECT_EQ(e.window_reason, "repetition 1: the counter did not change within 500 ms of the window's start");

  // Frozen 0.3 s after the plan, during the steps: the start aligns, end() gives up and reads
  // unaligned, at its call.
  r = simulate(0.1, 124, 650, {0.3}, 0, true, 0.3);
  EXPECT_GE(r.end_s[0], 0.5);
  EXPECT_LE(r.end_s[0], 0.5 + 2 * db::kUpdatePollS);
  const db::EnergyWindow& w = r.m.windows[0];
  EXPECT_FALSE(w.aligned);
  EXPECT_EQ(w.unaligned_why, "the counter did not change within 500 ms of the window's end");
  ASSERT_TRUE(w.joules.has_value());
  EXPECT_LE(w.seconds, 0.3 + 2 * db::kUpdatePollS) << "the window ends at the read at end()'s call";
  e = db::summarize_energy(r.m, 128, 1);
  EXPECT_EQ(e.window_reason, "repetition 1: the counter did not change within 500 ms of the window's end");
  EXPECT_EQ(e.repetition_tail_s, std::vector<double>{}) << "null: 0.3 s against 100 ms updates";
  EXPECT_NE(e.reason.find("resolution"), std::string::npos) << e.reason;
}

TEST(EnergyAligned, WithoutAnIdlePowerTheWindowsAreReadUnalignedAndTheReasonSaysSo) {
  // 150 ms updates: 21 of them outlast the idle window's 2.5 s, which resolves 6%, not 5%.
  const SimulatedRun r = simulate(0.15, 124, 650, {0.215, 0.215}, 0.03);
  EXPECT_FALSE(db::idle_power_w(*r.m.idle, r.m.idle_observed).has_value());
  EXPECT_NEAR(r.m.idle->seconds, db::kIdleMaxS, 2 * db::kUpdatePollS);
  EXPECT_FALSE(r.plan.aligned);
  EXPECT_EQ(r.plan.why.rfind("the idle power is null", 0), 0u) << r.plan.why;
  EXPECT_EQ(r.begin_reads, 2) << "one read a begin(): no wait";
  for (const db::EnergyWindow& w : r.m.windows) EXPECT_FALSE(w.aligned);
  const db::Energy e = db::summarize_energy(r.m, 128, 1);
  EXPECT_EQ(e.window, "unaligned");
  EXPECT_EQ(e.window_reason, r.plan.why);
  expect_no_energy(e, "(windows not aligned on the counter's updates: the idle power is null");
}

TEST(EnergyAligned, AFineCounterIsReadUnalignedAtOnce) {
  // RAPL-like: an update every 1 ms, finer than two of the sampler's 2 ms polls.
  const SimulatedRun r = simulate(0.001, 30, 90, {0.05, 0.06, 0.07}, 0.0003);
  EXPECT_FALSE(r.plan.aligned);
  EXPECT_EQ(r.plan.why.rfind("the counter updates every 1 ms", 0), 0u) << r.plan.why;
  EXPECT_EQ(r.begin_reads, 3) << "one read a begin(): no wait";
  const db::Energy e = db::summarize_energy(r.m, 100, 1);
  ASSERT_EQ(e.reason, "") << e.reason;
  EXPECT_EQ(e.window, "unaligned");
  EXPECT_EQ(e.repetition_idle_j, (std::vector<double>{0, 0, 0}));
  // Unaligned, each figure within one update at either end: the resolution stated.
  for (size_t i = 0; i < r.true_j.size(); ++i)
    EXPECT_LE(std::fabs(e.repetition_j[i] - r.true_j[i]), *e.resolution * r.true_j[i] + 1e-12) << i;
}

// A scripted decoder that logs what the protocol asks of it, into the source's log.
class LoggingDecoder final : public db::Decoder {
 public:
  explicit LoggingDecoder(std::vector<std::string>& log) : log_(log), clock_(log) {}
  int64_t batch() const override { return 1; }
  void prefill(int64_t) override {}
  void restart(int64_t, const std::vector<int32_t>&) override {
    log_.push_back("restart");
    n_ = 0;
  }
  void step() override {
    log_.push_back("step");
    ++n_;
  }
  void synchronize() override { log_.push_back("sync"); }
  std::vector<int32_t> read_tokens() override { return {0}; }
  std::vector<int32_t> tokens(int64_t, int64_t n) override {
    return std::vector<int32_t>(static_cast<size_t>(n), 1);
  }
  std::vector<float> logits(int64_t) override { return {}; }
  db::StepClock& clock() override { return clock_; }
  db::DecoderFacts facts() override { return {}; }

 private:
  class Clock final : public db::StepClock {
   public:
    explicit Clock(std::vector<std::string>& log) : log_(log) {}
    const char* name() const override { return "logged"; }
    void start(int64_t) override {
      log_.push_back("clock.start");
      n_ = 0;
    }
    void mark() override { ++n_; }
    std::vector<double> stop() override {
      log_.push_back("clock.stop");
      return std::vector<double>(static_cast<size_t>(n_), 1.0);
    }

   private:
    std::vector<std::string>& log_;
    int64_t n_ = 0;
  };
  std::vector<std::string>& log_;
  Clock clock_;
  int64_t n_ = 0;
};

// The energy window is the timed one: it opens on a synchronized device after the restart
// and before the clock's first mark, and closes after the synchronize that ends the
// repetition's steps, before the clock is read.
TEST(EnergyProtocol, EachRepetitionsWindowOpensAfterASyncAndClosesAfterItsLastStepsSync) {
  std::vector<std::string> log;
  const db::ModelConfig cfg = db::load_model_config("tiny-fp16");
  const db::WeightSource weights{cfg, "", 0, nullptr};
  LoggingDecoder d(log);
  db::EnergySampler sampler(std::make_unique<FakeSource>(&log));
  db::Protocol p;
  p.tokens = 3;
  p.warmup = 1;
  p.repeat = 2;
  const db::Measurement m = db::measure_decode(d, p, weights, false, nullptr, &sampler);
  EXPECT_EQ(m.energy.size(), 2u);
  const std::vector<std::string> repetition = {"restart", "sync", "read", "clock.start", "step",
                                               "step",    "step", "sync", "read",        "clock.stop"};
  std::vector<std::string> expected = {"restart", "step", "sync"};  // the warm-up
  for (int r = 0; r < 2; ++r) expected.insert(expected.end(), repetition.begin(), repetition.end());
  EXPECT_EQ(log, expected);
}

TEST(EnergyProtocol, WithoutASamplerTheProtocolIsUnchanged) {
  std::vector<std::string> log;
  const db::ModelConfig cfg = db::load_model_config("tiny-fp16");
  const db::WeightSource weights{cfg, "", 0, nullptr};
  LoggingDecoder d(log);
  db::Protocol p;
  p.tokens = 2;
  p.warmup = 0;
  p.repeat = 1;
  const db::Measurement m = db::measure_decode(d, p, weights, false);
  EXPECT_TRUE(m.energy.empty());
  EXPECT_EQ(log, (std::vector<std::string>{"restart", "sync", "restart", "clock.start", "step", "step",
                                           "sync", "clock.stop"}));
}

// With aligned windows the order is the same: begin()'s reads (its wait) come after the
// synchronize that follows the restart, and the read that sees the start's update is the last
// thing before the clock's first mark; end()'s come after the synchronize that ends the steps
// and before the clock is read, the last of them the one that sees the closing update.
TEST(EnergyProtocol, AnAlignedWindowStartsOnAnUpdateJustBeforeTheFirstMarkAndEndsOnOneAfterTheLastSync) {
  std::vector<std::string> log;
  const db::ModelConfig cfg = db::load_model_config("tiny-fp16");
  const db::WeightSource weights{cfg, "", 0, nullptr};
  LoggingDecoder d(log);
  auto time = std::make_shared<FakeTime>();
  db::EnergySampler sampler(std::make_unique<SteppedCounter>(time, 0.1, 124, &log), kNoPolls, time);
  const db::EnergyWindow idle = sampler.idle();
  const db::WindowPlan plan = db::plan_windows(sampler.observed(), db::idle_power_w(idle, sampler.observed()),
                                               db::kEnergySamplePeriodS);
  ASSERT_TRUE(plan.aligned) << plan.why;
  sampler.plan(plan);
  log.clear();
  db::Protocol p;
  p.tokens = 3;
  p.warmup = 1;
  p.repeat = 2;
  const db::Measurement m = db::measure_decode(d, p, weights, false, nullptr, &sampler);
  ASSERT_EQ(m.energy.size(), 2u);
  for (const db::EnergyWindow& w : m.energy) EXPECT_TRUE(w.aligned) << w.unaligned_why;
  // Runs of reads shown once.
  std::vector<std::string> runs;
  for (const std::string& entry : log)
    if (runs.empty() || entry != runs.back() || entry != "read") runs.push_back(entry);
  const std::vector<std::string> repetition = {"restart",     "sync", "read",   "update",
                                               "clock.start", "step", "step",   "step",
                                               "sync",        "read", "update", "clock.stop"};
  std::vector<std::string> expected = {"restart", "step", "sync"};  // the warm-up
  for (int r = 0; r < 2; ++r) expected.insert(expected.end(), repetition.begin(), repetition.end());
  EXPECT_EQ(runs, expected);
}

// ---------------------------------------------------------------- RAPL

TEST(Rapl, TheDeltaUnwrapsOnceAtTheRange) {
  EXPECT_EQ(db::rapl_delta_uj(100, 250, 1000), 150u);
  EXPECT_EQ(db::rapl_delta_uj(900, 50, 1000), 150u);  // 900 -> 1000, wrap to 0, -> 50
  EXPECT_EQ(db::rapl_delta_uj(7, 7, 1000), 0u);
}

class RaplTree : public db_test::TempDirTest {
 protected:
  void zone(const std::string& dir, const std::string& name, uint64_t energy, uint64_t range,
            std::optional<uint64_t> limit_uw = std::nullopt) {
    fs::create_directories(dir_ / dir);
    write(dir + "/name", name + "\n");
    write(dir + "/energy_uj", std::to_string(energy) + "\n");
    write(dir + "/max_energy_range_uj", std::to_string(range) + "\n");
    if (limit_uw) write(dir + "/constraint_0_power_limit_uw", std::to_string(*limit_uw) + "\n");
  }
  void write(const std::string& file, const std::string& text) { std::ofstream(dir_ / file) << text; }
  std::string root() const { return dir_.string(); }
};

TEST_F(RaplTree, CountsThePackagesAndTheirDramButNotPsysOrTheirInnerZones) {
  zone("intel-rapl:0", "package-0", 1'000'000, 262'143'328'850, 150'000'000);
  zone("intel-rapl:0:0", "core", 500, 262'143'328'850);
  zone("intel-rapl:0:1", "dram", 2'000'000, 65'712'999'613);
  zone("intel-rapl:1", "package-1", 3'000'000, 262'143'328'850, 150'000'000);
  zone("intel-rapl:2", "psys", 9'000'000, 262'143'328'850, 400'000'000);
  std::string why;
  std::unique_ptr<db::EnergySource> s = db::make_rapl_source(root(), why);
  ASSERT_TRUE(s) << why;
  EXPECT_EQ(s->name(), "rapl package-0 + package-1 + dram");
  std::string error;
  ASSERT_EQ(s->energy_j(error), 0.0) << error;  // the origin: the first read
  write("intel-rapl:0/energy_uj", "1500000\n");
  write("intel-rapl:0:1/energy_uj", "2250000\n");
  write("intel-rapl:0:0/energy_uj", "999999999\n");  // inside package-0: not counted again
  write("intel-rapl:2/energy_uj", "99000000\n");     // psys: not counted
  EXPECT_DOUBLE_EQ(*s->energy_j(error), 0.75);       // 0.5 J + 0.25 J
  EXPECT_FALSE(s->clocks().has_value());
  EXPECT_FALSE(s->clocks_unavailable().empty());
  EXPECT_DOUBLE_EQ(*db::rapl_power_limit_w(root()), 300);  // the packages' long-term limits
}

TEST_F(RaplTree, AWrapOfTheCounterIsUnwrappedWithItsRange) {
  zone("intel-rapl:0", "package-0", 990, 1000);
  std::string why, error;
  std::unique_ptr<db::EnergySource> s = db::make_rapl_source(root(), why);
  ASSERT_TRUE(s) << why;
  write("intel-rapl:0/energy_uj", "995\n");
  EXPECT_DOUBLE_EQ(*s->energy_j(error), 5e-6);
  write("intel-rapl:0/energy_uj", "20\n");  // wrapped: 995 -> 1000 -> 0 -> 20
  EXPECT_DOUBLE_EQ(*s->energy_j(error), 30e-6);
  write("intel-rapl:0/energy_uj", "40\n");
  EXPECT_DOUBLE_EQ(*s->energy_j(error), 50e-6);
}

TEST_F(RaplTree, NoTreeOrNoPackageIsNullWithWhy) {
  std::string why;
  EXPECT_FALSE(db::make_rapl_source(root() + "/absent", why));
  EXPECT_NE(why.find("no RAPL energy counter"), std::string::npos) << why;
  zone("intel-rapl:0", "psys", 1, 1000);
  EXPECT_FALSE(db::make_rapl_source(root(), why));
  EXPECT_NE(why.find("no RAPL package zone under " + root()), std::string::npos) << why;
  EXPECT_FALSE(db::rapl_power_limit_w(root()).has_value());
}

TEST_F(RaplTree, AnUnreadableCounterIsNullWithWhyAtStartAndAFailedReadLater) {
  zone("intel-rapl:0", "package-0", 1, 1000);
  // Not a number: refused by name.
  write("intel-rapl:0/energy_uj", "n/a\n");
  std::string why;
  EXPECT_FALSE(db::make_rapl_source(root(), why));
  EXPECT_NE(why.find("intel-rapl:0/energy_uj: \"n/a\" is not a count of microjoules"), std::string::npos)
      << why;
  // A directory where the file should be: the read fails (EISDIR), whoever runs the test.
  write("intel-rapl:0/energy_uj", "5\n");
  std::string error;
  std::unique_ptr<db::EnergySource> s = db::make_rapl_source(root(), why);
  ASSERT_TRUE(s) << why;
  fs::remove(dir_ / "intel-rapl:0/energy_uj");
  fs::create_directory(dir_ / "intel-rapl:0/energy_uj");
  EXPECT_FALSE(s->energy_j(error).has_value());
  EXPECT_NE(error.find("cannot read " + root() + "/intel-rapl:0/energy_uj"), std::string::npos) << error;
  EXPECT_FALSE(db::make_rapl_source(root(), why));
  // Permission denied, where the test does not run as root (root reads any mode).
  if (geteuid() != 0) {
    fs::remove(dir_ / "intel-rapl:0/energy_uj");
    write("intel-rapl:0/energy_uj", "5\n");
    ASSERT_EQ(chmod((dir_ / "intel-rapl:0/energy_uj").c_str(), 0), 0);
    EXPECT_FALSE(db::make_rapl_source(root(), why));
    EXPECT_NE(why.find("Permission denied (RAPL's energy counters are often readable by root only)"),
              std::string::npos)
        << why;
  }
}

}  // namespace
