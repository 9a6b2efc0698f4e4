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
#include <mutex>
#include <thread>

#include "decodebench/config.h"
#include "decodebench/energy.h"
#include "decodebench/measure.h"
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
}

TEST(EnergySummary, TheIdlePowerIsReportedNotSubtracted) {
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
  const db::Energy e = db::summarize_energy(m, 100, 4);
  expect_no_energy(e, "changed fewer than twice within every repetition");
  EXPECT_FALSE(e.counter_update_ms.has_value());
  EXPECT_FALSE(e.resolution.has_value());
  EXPECT_FALSE(e.idle_power_w.has_value()) << "the idle window is resolved by the same rule";
}

TEST(EnergySummary, ACounterTooCoarseForTheRepetitionIsNullAndSaysHowManyTokensReachIt) {
  db::EnergyMeasurement m = three_repetitions();
  m.observed.update_gaps_s = {0.05};  // 50 ms against a 0.4 s repetition: 12.5%
  const db::Energy e = db::summarize_energy(m, 100, 4);
  expect_no_energy(e, "resolution 12.5%, coarser than the 5% energy is reported at; --tokens 250 or more");
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

// A scripted decoder that logs what the protocol asks of it, into the source's log.
class LoggingDecoder final : public db::Decoder {
 public:
  explicit LoggingDecoder(std::vector<std::string>& log) : log_(log), clock_(log) {}
  void prefill(int64_t) override {}
  void restart(int64_t, int32_t) override {
    log_.push_back("restart");
    n_ = 0;
  }
  void step() override {
    log_.push_back("step");
    ++n_;
  }
  void synchronize() override { log_.push_back("sync"); }
  int32_t read_token() override { return 0; }
  std::vector<int32_t> tokens(int64_t n) override { return std::vector<int32_t>(static_cast<size_t>(n), 1); }
  std::vector<float> logits() override { return {}; }
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
