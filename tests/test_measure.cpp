// The measurement protocol (src/measure/) on a scripted decoder: what it runs, in which
// order, when it stops adding repetitions, and the noise and warnings a result earns.
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <fstream>

#include "cli_helpers.h"
#include "decodebench/config.h"
#include "decodebench/error.h"
#include "decodebench/measure.h"
#include "decodebench/result.h"
#include "decodebench/run_spec.h"
#include "decodebench/weights.h"
#include "temp_dir.h"

namespace {

// Each repetition's step times come from a script: repetition r takes `reps[r]` for every
// step (the last entry repeats when the script runs out).
class ScriptedClock final : public db::StepClock {
 public:
  explicit ScriptedClock(std::vector<double> reps) : reps_(std::move(reps)) {}
  const char* name() const override { return "scripted"; }
  void start(int64_t) override { marks_ = 0; }
  void mark() override { ++marks_; }
  std::vector<double> stop() override {
    const double ms = reps_[std::min(rep_++, reps_.size() - 1)];
    return std::vector<double>(marks_, ms);
  }
  size_t repetitions() const { return rep_; }

 private:
  std::vector<double> reps_;
  size_t rep_ = 0;
  size_t marks_ = 0;
};

class ScriptedDecoder final : public db::Decoder {
 public:
  explicit ScriptedDecoder(std::vector<double> reps) : clock_(std::move(reps)) {}
  void prefill(int64_t n) override { prefilled += n; }
  void restart(int64_t position, int32_t token) override {
    restarts.push_back({position, token});
    generated_.clear();
  }
  // From the `diverge_after`-th synchronize on, the steps generate other tokens.
  void step() override {
    const bool diverged = diverge_after > 0 && syncs_ >= diverge_after;
    generated_.push_back(static_cast<int32_t>(generated_.size()) + (diverged ? 1 : 0));
  }
  void synchronize() override { ++syncs_; }
  int32_t read_token() override { return generated_.empty() ? 0 : generated_.back(); }
  std::vector<int32_t> tokens(int64_t n) override { return {generated_.begin(), generated_.begin() + n}; }
  std::vector<float> logits() override { return {}; }
  db::StepClock& clock() override { return clock_; }
  db::DecoderFacts facts() override { return {}; }

  int64_t prefilled = 0;
  std::vector<std::pair<int64_t, int32_t>> restarts;
  int diverge_after = 0;  // 0: never
  ScriptedClock clock_;

 private:
  std::vector<int32_t> generated_;
  int syncs_ = 0;
};

class Measure : public ::testing::Test {
 protected:
  db::ModelConfig cfg = db::load_model_config("tiny-fp16");
  db::WeightSource weights{cfg, "", 0, nullptr};
};

TEST_F(Measure, PrefillsWarmsUpThenRunsRepeatRepetitionsEachFromTheSamePositionAndToken) {
  ScriptedDecoder d({1.0, 1.1, 1.2});
  db::Protocol p;
  p.context = 7;
  p.tokens = 4;
  p.warmup = 2;
  p.repeat = 3;
  const db::Measurement m = db::measure_decode(d, p, weights, false);
  EXPECT_EQ(d.prefilled, 7);
  ASSERT_EQ(d.restarts.size(), 4u);  // the warm-up, then each repetition
  for (const auto& [pos, token] : d.restarts) {
    EXPECT_EQ(pos, 7);
    EXPECT_EQ(token, db::prompt_token(7, cfg.vocab_size));
  }
  EXPECT_EQ(m.samples_ms.size(), 12u);
  EXPECT_EQ(m.repetition_medians_ms, (std::vector<double>{1.0, 1.1, 1.2}));
  EXPECT_EQ(m.stop, db::kStopRepeat);
  EXPECT_EQ(m.tokens, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(m.clock, "scripted");
}

TEST_F(Measure, ARepetitionWithOtherTokensFailsTheRun) {
  ScriptedDecoder d({1.0});
  d.diverge_after = 2;  // the warm-up's sync, then repetition 0's: repetition 1 differs
  db::Protocol p;
  p.tokens = 3;
  p.repeat = 3;
  EXPECT_THROW(db::measure_decode(d, p, weights, false), db::Error);
}

TEST_F(Measure, MaxNoiseAddsRepetitionsUntilTheNoiseTargetIsMet) {
  // One outlier among the first three: noise 0.27; each further repetition at 1.0 lowers it.
  ScriptedDecoder d({1.0, 1.5, 1.0, 1.0});
  db::Protocol p;
  p.tokens = 2;
  p.repeat = 3;
  p.max_noise = 0.2;
  p.max_time_s = 3600;
  const db::Measurement m = db::measure_decode(d, p, weights, false);
  EXPECT_EQ(m.stop, db::kStopNoise);
  const size_t n = m.repetition_medians_ms.size();
  EXPECT_LE(db::repetition_noise(m.repetition_medians_ms), 0.2);
  std::vector<double> one_fewer(m.repetition_medians_ms.begin(), m.repetition_medians_ms.end() - 1);
  EXPECT_GT(db::repetition_noise(one_fewer), 0.2) << "it stopped at the first repetition that met the target";
  EXPECT_GT(n, 3u);
}

TEST_F(Measure, MaxNoiseStopsAtTheTimeLimitWhenTheTargetIsOutOfReach) {
  ScriptedDecoder d({1.0, 2.0});  // then 2.0 for ever: never under 1%
  db::Protocol p;
  p.tokens = 2;
  p.repeat = 4;
  p.max_noise = 0.01;
  p.max_time_s = 0;  // spent as soon as --repeat repetitions are done
  const db::Measurement m = db::measure_decode(d, p, weights, false);
  EXPECT_EQ(m.stop, db::kStopTime);
  EXPECT_EQ(m.repetition_medians_ms.size(), 4u);
}

// However much time --max-time leaves, one run holds at most kMaxRepeat repetitions and
// kMaxTimedSteps timed steps (what a result file may hold).
TEST_F(Measure, MaxNoiseStopsAtTheRepetitionLimit) {
  std::vector<double> alternating;  // 1, 2, 1, 2, ...: the noise stays near 1/3
  for (int64_t r = 0; r <= db::kMaxRepeat; ++r) alternating.push_back(r % 2 ? 2.0 : 1.0);
  for (const int64_t tokens : {int64_t{1}, int64_t{2048}}) {
    ScriptedDecoder d(alternating);
    db::Protocol p;
    p.tokens = tokens;
    p.repeat = 2;
    p.max_noise = 0.01;
    p.max_time_s = 86400;
    const db::Measurement m = db::measure_decode(d, p, weights, false);
    EXPECT_EQ(m.stop, db::kStopLimit);
    const int64_t reps = std::min(db::kMaxRepeat, db::kMaxTimedSteps / tokens);
    EXPECT_EQ(m.repetition_medians_ms.size(), static_cast<size_t>(reps)) << tokens << " tokens";
    EXPECT_EQ(m.samples_ms.size(), static_cast<size_t>(reps * tokens));
  }
}

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

// The binary: --max-noise, progress lines, and the noise on the console.
class MeasureCli : public db_test::TempDirTest {};

TEST_F(MeasureCli, MaxNoiseRecordsWhyTheRepetitionsStopped) {
  const std::string out = path("r.json");
  const auto o = db_test::run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "2", "--warmup", "0",
                               "-r", "2", "--max-noise", "50%", "--max-time", "5", "-o", out});
  ASSERT_EQ(o.code, 0) << o.err;
  const db::Result r = db::read_results(out).at(0);
  EXPECT_DOUBLE_EQ(r.config.max_noise, 0.5);
  EXPECT_DOUBLE_EQ(r.config.max_time_s, 5);
  EXPECT_TRUE(r.timing.stop == db::kStopNoise || r.timing.stop == db::kStopTime) << r.timing.stop;
  EXPECT_GE(r.timing.repetitions, 2);
  EXPECT_EQ(static_cast<size_t>(r.timing.repetitions), r.timing.repetition_medians_ms.size());
  EXPECT_EQ(r.timing.samples_ms.size(), 2 * r.timing.repetition_medians_ms.size());
  EXPECT_DOUBLE_EQ(r.timing.noise, db::repetition_noise(r.timing.repetition_medians_ms));
  if (r.timing.stop == db::kStopNoise) EXPECT_LE(r.timing.noise, 0.5);
}

// An int4 group that does not fit the config's matrices: the run says which it used and why,
// on stderr and in the result.
TEST_F(MeasureCli, AnInt4GroupThatDoesNotFitIsReplacedAndSaidSo) {
  const std::string cfg = path("c.json"), out = path("r.json");
  std::ofstream(cfg) << R"({"extends": "tiny", "hidden_size": 96})";
  const auto o = db_test::run({"--model", cfg, "--quant", "int4", "--backend", "cpu", "--tokens", "2",
                               "--warmup", "0", "-r", "1", "-o", out});
  ASSERT_EQ(o.code, 0) << o.err;
  const std::string note = "int4 group size 32 instead of 64: 64 does not divide hidden_size 96";
  EXPECT_NE(o.err.find("decodebench: warning: " + note + "\n"), std::string::npos) << o.err;
  const db::Result r = db::read_results(out).at(0);
  EXPECT_EQ(r.config.group_size, 32);
  EXPECT_EQ(r.config.group_size_note, note);
}

TEST_F(MeasureCli, AFixedRunStopsAtRepeatAndPrintsItsNoiseBesideTheMedian) {
  const std::string out = path("r.json");
  const auto o =
      db_test::run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "2", "--repeat", "3", "-o", out});
  ASSERT_EQ(o.code, 0) << o.err;
  const db::Result r = db::read_results(out).at(0);
  EXPECT_EQ(r.timing.stop, db::kStopRepeat);
  EXPECT_EQ(r.timing.repetitions, 3);
  EXPECT_EQ(r.config.max_noise, 0);
  EXPECT_NE(o.out.find(" ms median ± "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("in 3 repetitions"), std::string::npos) << o.out;
}

TEST_F(MeasureCli, MaxTimeWithoutMaxNoiseAndABadProgressAreRefused) {
  db_test::expect_one_line_error(db_test::run({"--model", "tiny", "--backend", "cpu", "--max-time", "5"}), 2,
                                 "--max-time needs --max-noise");
  db_test::expect_one_line_error(db_test::run({"--model", "tiny", "--backend", "cpu", "--max-noise", "-1"}),
                                 2, "--max-noise");
  db_test::expect_one_line_error(db_test::run({"--model", "tiny", "--backend", "cpu", "--progress", "loud"}),
                                 2, "--progress");
}

TEST_F(MeasureCli, ProgressOnShowsThePhasesOneLineEachWhenStderrIsNotATerminal) {
  const auto o = db_test::run({"--model", "tiny-int4", "--backend", "cpu", "--context", "4", "--tokens", "2",
                               "--repeat", "2", "--progress", "on"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("decodebench: tiny-int4 on cpu: warm-up (16 steps)"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("decodebench: tiny-int4 on cpu: timed (2 repetitions of 2 steps)"), std::string::npos)
      << o.err;
  EXPECT_EQ(o.err.find('\r'), std::string::npos) << "no carriage returns off a terminal";
}

// Every run has an energy line and an energy object, measured or null with why, whether or
// not this machine's RAPL is readable; --energy off says so, and a bad value is refused.
TEST_F(MeasureCli, EveryRunReportsItsEnergyOrWhyNot) {
  const std::string out = path("r.json");
  const auto o =
      db_test::run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "4", "--repeat", "2", "-o", out});
  ASSERT_EQ(o.code, 0) << o.err;
  const size_t at = o.out.find("\nenergy    ");
  ASSERT_NE(at, std::string::npos) << o.out;
  const db::Result r = db::read_results(out).at(0);
  if (r.energy.reason.empty()) {
    EXPECT_EQ(r.energy.repetition_j.size(), 2u);
    EXPECT_NE(o.out.find(" J/token median", at), std::string::npos) << o.out;
  } else {
    EXPECT_TRUE(r.energy.repetition_j.empty());
    EXPECT_FALSE(r.energy.j_per_token.median.has_value());
    EXPECT_EQ(o.out.substr(at + 11, 5 + r.energy.reason.size()), "n/a: " + r.energy.reason) << o.out;
  }
  EXPECT_EQ(r.energy.clocks_reason.empty(), false) << "the cpu backend samples no clocks";

  const auto off = db_test::run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "4", "--repeat", "2",
                                 "--energy", "off", "-o", out});
  ASSERT_EQ(off.code, 0) << off.err;
  EXPECT_NE(off.out.find("\nenergy    n/a: not measured: --energy off\n"), std::string::npos) << off.out;
  EXPECT_EQ(db::read_results(out).at(0).energy.reason, "not measured: --energy off");
  // --runs passes it to every process.
  const auto runs = db_test::run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "2", "--repeat",
                                  "2", "--energy", "off", "--runs", "2", "-o", out});
  ASSERT_EQ(runs.code, 0) << runs.err;
  for (const db::Result& x : db::read_results(out)) {
    EXPECT_EQ(x.energy.reason, "not measured: --energy off");
    EXPECT_NE(x.command.find(" --energy off"), std::string::npos) << x.command;
  }
  db_test::expect_one_line_error(db_test::run({"--model", "tiny", "--backend", "cpu", "--energy", "maybe"}),
                                 2, "--energy");
}

// --runs N: N separate processes, each a run of its own, all in the result file.
TEST_F(MeasureCli, RunsMeasuresInSeparateProcesses) {
  const std::string out = path("runs.jsonl");
  const auto o = db_test::run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "2", "--warmup", "0",
                               "--repeat", "2", "--runs", "2", "-o", out});
  ASSERT_EQ(o.code, 0) << o.err;
  const std::vector<db::Result> r = db::read_results(out);
  ASSERT_EQ(r.size(), 2u);
  for (const db::Result& x : r) {
    EXPECT_EQ(x.config.model, "tiny-int4");
    EXPECT_EQ(x.timing.repetitions, 2);
    EXPECT_NE(x.command.find("decodebench run --model tiny-int4 "), std::string::npos) << x.command;
  }
  EXPECT_NE(o.out.find("2 runs in separate processes: "), std::string::npos) << o.out;
  db_test::expect_one_line_error(db_test::run({"--model", "tiny", "--backend", "cpu", "--runs", "0"}), 2,
                                 "--runs must be at least 1");
  // A run that fails in its process fails the parent with the child's line.
  db_test::expect_one_line_error(
      db_test::run({"--model", "tiny", "--backend", "cpu", "--context", "5000", "--runs", "2"}), 1,
      "max_position_embeddings");
}

}  // namespace
