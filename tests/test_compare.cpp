// The compare verb: the Mann-Whitney U test against hand-computed values, --threshold
// parsing, the run key, repetitions as the unit of test, the verdicts, device and settings
// differences, unmatched runs, --pair-by, and the built binary's output and exit codes
// (1 regressed, 3 incomplete, 0 otherwise, 2 bad input).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "decodebench/compare.h"
#include "decodebench/energy.h"
#include "decodebench/error.h"
#include "decodebench/printers.h"
#include "decodebench/result.h"
#include "decodebench/stability.h"
#include "decodebench/stats.h"

namespace {

using db_test::expect_one_line_error;
using db_test::Outcome;
using nlohmann::json;
namespace fs = std::filesystem;

// n samples of N(mean, sd): Box-Muller on mt19937_64's raw output, which the standard
// fixes (std::normal_distribution's sequence differs between standard libraries).
std::vector<double> normal_samples(size_t n, double mean, double sd, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto uniform = [&]() { return (static_cast<double>(rng() >> 11) + 1) * 0x1p-53; };  // (0, 1]
  std::vector<double> v(n);
  for (double& x : v)
    x = mean + sd * std::sqrt(-2 * std::log(uniform())) * std::cos(2 * 3.14159265358979323846 * uniform());
  return v;
}

// A result with every field set (as a run writes it), timed by `samples`.
db::Result full_result(const std::string& model, const std::vector<double>& samples,
                       const std::string& device = "NVIDIA H200", double peak_GBps = 4100) {
  db::Result r;
  r.tool.version = "0.1.0";
  r.tool.git_commit = "abc1234";
  r.tool.build_type = "Release";
  r.tool.cuda_runtime = "13.0";
  r.tool.cublas = "13.0.2";
  r.time = "2025-01-02T03:04:05Z";
  r.command = "decodebench --model " + model;
  r.device.backend = "cuda";
  r.device.name = device;
  r.device.uuid = "GPU-1234";
  r.device.compute_capability = "9.0";
  r.device.sm_count = 132;
  r.device.memory_bytes = 150'000'000'000ull;
  r.device.l2_bytes = 62'914'560;
  r.device.driver = "580.65";
  r.device.ecc = true;
  r.device.power_limit_w = 700;
  db::ClockState clock;
  clock.sm_clock_mhz = 1980;
  clock.mem_clock_mhz = 3201;
  clock.temperature_c = 40;
  clock.power_w = 120.5;
  r.device.start = clock;
  r.device.end = clock;
  r.device.theoretical_GBps = 4800;
  r.device.peak_read_GBps = peak_GBps;
  r.device.cpu_threads = 16;
  r.config.model = model;
  r.config.arch = "llama";
  r.config.weights = "synthetic";
  r.config.seed = 7;
  r.config.scheme = "int4";
  r.config.group_size = 128;
  r.config.zero_point = true;
  r.config.lm_head_scheme = "fp16";
  r.config.kernel = "int4.gemv";
  r.config.graph = true;
  r.config.context = 512;
  r.config.tokens = 40;
  r.config.warmup = 16;
  r.config.repeat = 5;
  r.config.params = 8'030'261'248;
  r.bytes.position_first = 512;
  r.bytes.position_last = 551;
  r.bytes.per_token.linear_weights = 3'758'096'384;
  r.bytes.per_token.total = 5'170'216'960;
  r.bytes.stored.total = 5'670'183'000;
  r.timing.samples_ms = samples;
  r.timing.tpot_ms = db::compute_stats(samples);
  r.timing.tokens_per_s = 1000 / r.timing.tpot_ms.median;
  r.timing.load_s = 2.5;
  r.timing.prefill_s = 0.25;
  r.timing.clock = "cuda-events";
  r.roofline.floor_tpot_ms = 5'170'216'960 / (peak_GBps * 1e9) * 1e3;
  r.roofline.achieved_GBps = 5'170'216'960 / (r.timing.tpot_ms.median * 1e-3) / 1e9;
  r.roofline.efficiency = r.roofline.floor_tpot_ms / r.timing.tpot_ms.median;
  r.roofline.regime = "bandwidth-bound";
  r.roofline.regime_reason = "efficiency >= 0.75";
  r.memory.weights_bytes = 5'670'183'000;
  r.memory.kv_cache_bytes = 1'073'741'824;
  r.memory.scratch_bytes = 2'097'152;
  r.memory.total_bytes = 6'746'021'976;
  r.check.tokens_hash = "cbf29ce484222325";
  r.check.tokens = {1, 2, 3};
  r.check.reference = "";
  return r;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "decodebench_compare_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (fs::path(path_) / name).string(); }
  std::string write(const std::string& name, const std::vector<db::Result>& results,
                    db::OutputFormat format = db::OutputFormat::json) const {
    db::write_results_file(file(name), results, format);
    return file(name);
  }
  std::string write_text(const std::string& name, const std::string& text) const {
    std::ofstream(file(name)) << text;
    return file(name);
  }

 private:
  std::string path_;
};

Outcome compare(const std::vector<std::string>& args) {
  std::vector<std::string> a = {"compare"};
  a.insert(a.end(), args.begin(), args.end());
  return db_test::run(a);
}

size_t lines(const std::string& s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
}

}  // namespace

// --- Mann-Whitney U -------------------------------------------------------------------

// a = {1,2,3}, b = {4,5,6}: no a beats any b, U = 0. Without ties the p-value is exact: of
// the C(6,3) = 20 orderings one has U = 0 and one U = 9, so p = 2/20 = 0.1
// (scipy.stats.mannwhitneyu, method="exact"). z = (0 - 4.5) / sqrt(9 * 7 / 12) = -1.9639610.
TEST(MannWhitney, NoTiesIsExact) {
  const db::MannWhitney r = db::mann_whitney({1, 2, 3}, {4, 5, 6});
  EXPECT_TRUE(r.exact);
  EXPECT_DOUBLE_EQ(r.u, 0);
  EXPECT_NEAR(r.z, -1.9639610121239315, 1e-12);
  EXPECT_NEAR(r.p, 0.1, 1e-12);
  // Swapped: U' = n_a n_b - U, the same p, z of the other sign.
  const db::MannWhitney s = db::mann_whitney({4, 5, 6}, {1, 2, 3});
  EXPECT_DOUBLE_EQ(s.u, 9);
  EXPECT_NEAR(s.z, 1.9639610121239315, 1e-12);
  EXPECT_DOUBLE_EQ(s.p, r.p);
  EXPECT_DOUBLE_EQ(db::mann_whitney_p({1, 2, 3}, {4, 5, 6}), r.p);
}

// Complete separation is the most significant outcome: p = 2 / C(n_a + n_b, n_a).
TEST(MannWhitney, TheSmallestPossiblePIsTwoOverTheOrderings) {
  const db::MannWhitney r = db::mann_whitney({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10});
  EXPECT_NEAR(r.p, 2.0 / 252, 1e-12);
  EXPECT_NEAR(db::min_attainable_p(5, 5), 2.0 / 252, 1e-15);  // < 0.01: 5 and 5 can be significant
  EXPECT_NEAR(db::min_attainable_p(4, 6), 2.0 / 210, 1e-15);  // < 0.01
  EXPECT_NEAR(db::min_attainable_p(4, 5), 2.0 / 126, 1e-15);  // > 0.01: never
  EXPECT_DOUBLE_EQ(db::min_attainable_p(1, 1), 1);
  EXPECT_DOUBLE_EQ(db::min_attainable_p(0, 5), 1);
}

// a = {1,2,2,3}, b = {2,3,4,4}. Pooled: 1 | 2 2 2 | 3 3 | 4 4, mid-ranks 1 | 3 | 5.5 | 7.5.
// R_a = 1 + 3 + 3 + 5.5 = 12.5, U = 12.5 - 4*5/2 = 2.5; tied groups 3, 2, 2:
// sum(t^3 - t) = 24 + 6 + 6 = 36; sigma^2 = 16/12 * (9 - 36/56) = 11.142857;
// z = -(8 - 2.5 - 0.5)/3.3380918 = -1.4978617, p = 0.1341692.
TEST(MannWhitney, TiesUseMidRanksAndTheTieCorrection) {
  const db::MannWhitney r = db::mann_whitney({1, 2, 2, 3}, {2, 3, 4, 4});
  EXPECT_DOUBLE_EQ(r.u, 2.5);
  EXPECT_NEAR(r.z, -1.4978617237881953, 1e-12);
  EXPECT_NEAR(r.p, 0.13416918012812581, 1e-12);
}

// a = {1,3,5,7}, b = {2,4,6,8,10}: pairs with a_i > b_j: 0 + 1 + 2 + 3 = 6; mu = 10. Of the
// C(9,4) = 126 orderings, 26 have U <= 6 (counted by enumeration): p = 2 * 26/126.
// z = (6 - 10) / sqrt(20 * 10 / 12) = -0.9797959.
TEST(MannWhitney, UnequalSizes) {
  const db::MannWhitney r = db::mann_whitney({7, 1, 5, 3}, {10, 2, 8, 4, 6});  // order does not matter
  EXPECT_DOUBLE_EQ(r.u, 6);
  EXPECT_NEAR(r.z, -0.9797958971132712, 1e-12);
  EXPECT_NEAR(r.p, 52.0 / 126, 1e-12);
}

TEST(MannWhitney, DegenerateSamples) {
  // Every value tied: no evidence, p = 1.
  const db::MannWhitney tied = db::mann_whitney({2, 2, 2}, {2, 2});
  EXPECT_DOUBLE_EQ(tied.p, 1);
  EXPECT_DOUBLE_EQ(tied.z, 0);
  // A side without samples: no test.
  EXPECT_TRUE(std::isnan(db::mann_whitney_p({}, {1, 2})));
  EXPECT_TRUE(std::isnan(db::mann_whitney_p({1, 2}, {})));
  // NaN samples cannot be ranked: left out.
  EXPECT_DOUBLE_EQ(db::mann_whitney_p({1, 2, std::nan(""), 3}, {4, 5, 6}),
                   db::mann_whitney_p({1, 2, 3}, {4, 5, 6}));
  // U at its mean: p = 1.
  EXPECT_DOUBLE_EQ(db::mann_whitney_p({1, 4}, {2, 3}), 1);
}

TEST(MannWhitney, SeparatedLargeSamplesAreSignificant) {
  const auto a = normal_samples(200, 1.0, 0.005, 1), b = normal_samples(200, 1.05, 0.005, 2);
  const db::MannWhitney r = db::mann_whitney(a, b);
  EXPECT_FALSE(r.exact);  // 400 samples: the normal approximation
  EXPECT_DOUBLE_EQ(r.u, 0);
  EXPECT_LT(r.p, 1e-60);
  EXPECT_LT(r.z, 0);
  // Same distribution: not significant at 0.01 (for these seeds).
  EXPECT_GT(db::mann_whitney_p(normal_samples(200, 1.0, 0.02, 3), normal_samples(200, 1.0, 0.02, 4)), 0.01);
}

// --- --threshold ------------------------------------------------------------------------

TEST(ParseThreshold, PercentWithOrWithoutTheSign) {
  EXPECT_DOUBLE_EQ(db::parse_threshold("3%"), 0.03);
  EXPECT_DOUBLE_EQ(db::parse_threshold("3"), 0.03);
  EXPECT_DOUBLE_EQ(db::parse_threshold("0.5"), 0.005);  // half a percent, not 50%
  EXPECT_DOUBLE_EQ(db::parse_threshold("2.5%"), 0.025);
  EXPECT_DOUBLE_EQ(db::parse_threshold(".5%"), 0.005);
  EXPECT_DOUBLE_EQ(db::parse_threshold("0"), 0);
}

TEST(ParseThreshold, RejectsAnythingElse) {
  for (const char* bad : {"abc", "-3%", "-3", "", "%", "3%%", "+3", " 3", "3 ", "1e2", "nan", "inf", "3.0.1",
                          "3x", "0x10", "."}) {
    EXPECT_THROW(db::parse_threshold(bad), db::UsageError) << bad;
  }
  try {
    db::parse_threshold("abc");
  } catch (const db::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--threshold 'abc'"), std::string::npos) << e.what();
  }
}

// --- the key ----------------------------------------------------------------------------

TEST(RunKey, EveryKeyFieldSeparatesRunsAndNothingElseDoes) {
  const db::Result r = full_result("8b-int4", {1, 2, 3});
  const db::RunKey k = db::run_key(r);
  std::vector<db::Result> changed(13, r);
  changed[0].config.model = "1b-int4";
  changed[1].config.scheme = "int8";
  changed[2].config.group_size = 64;
  changed[3].config.lm_head_scheme = "int8";
  changed[4].config.kernel = "int4.sliced";
  changed[5].config.graph = false;
  changed[6].config.adapter = "synthetic:rank=8";
  changed[7].config.adapter_mode = "merged";
  changed[8].config.context = 0;
  changed[9].config.tokens = 128;
  changed[10].config.sync_per_token = true;
  changed[11].config.weights = "/w.safetensors";
  changed[12].config.batch = 8;
  for (size_t i = 0; i < changed.size(); ++i) {
    EXPECT_NE(db::run_key(changed[i]), k) << i;
    EXPECT_EQ(db::key_fields(db::run_key(changed[i])).size(), 13u);
  }

  // Not the device, the seed, the repetitions or the timing.
  db::Result same = full_result("8b-int4", {5, 6, 7}, "NVIDIA A100-SXM4-80GB", 1800);
  same.config.seed = 99;
  same.config.warmup = 1;
  same.config.repeat = 9;
  same.time = "2026-01-01T00:00:00Z";
  EXPECT_EQ(db::run_key(same), k);

  EXPECT_EQ(db::to_string(k),
            "model=8b-int4 scheme=int4 group_size=128 lm_head_scheme=fp16 kernel=int4.gemv graph=on "
            "adapter=none adapter_mode=- context=512 tokens=40 sync_per_token=off weights=synthetic");
  // A batch other than 1 is named; batch 1 reads as a key from before --batch did.
  EXPECT_EQ(db::to_string(db::run_key(changed[12])), db::to_string(k) + " batch=8");
}

// --- compare_results ----------------------------------------------------------------------

TEST(CompareResults, VerdictsFollowThresholdAndSignificance) {
  const auto tight = normal_samples(200, 1.0, 0.005, 11);
  // slower and faster: two runs a side (separate processes), so that a change can be told
  // from run-to-run variation.
  std::vector<db::Result> base = {
      full_result("slower", tight),
      full_result("faster", normal_samples(200, 1.05, 0.005, 12)),
      full_result("noisy", {1.0, 1.1, 1.2}),
      full_result("small-shift", normal_samples(200, 1.0, 0.002, 13)),
      full_result("slower", normal_samples(200, 1.0, 0.005, 16)),
      full_result("faster", normal_samples(200, 1.05, 0.005, 17)),
  };
  std::vector<db::Result> next = {
      full_result("small-shift", normal_samples(200, 1.005, 0.002, 14)),
      full_result("noisy", {1.05, 1.15, 1.25}),
      full_result("faster", tight),
      full_result("slower", normal_samples(200, 1.05, 0.005, 15)),
      full_result("faster", normal_samples(200, 1.0, 0.005, 18)),
      full_result("slower", normal_samples(200, 1.05, 0.005, 19)),
  };
  const db::Comparison c = db::compare_results(base, next, 0.03);
  ASSERT_EQ(c.pairs.size(), 4u);
  EXPECT_TRUE(c.unmatched_base.empty());
  EXPECT_TRUE(c.unmatched_new.empty());
  EXPECT_DOUBLE_EQ(c.threshold, 0.03);
  EXPECT_DOUBLE_EQ(c.alpha, 0.01);

  const db::ComparedPair& slower = c.pairs[0];  // BASE's order
  EXPECT_EQ(slower.key.model, "slower");
  EXPECT_EQ(slower.verdict, db::Verdict::regressed);
  EXPECT_TRUE(slower.significant);
  EXPECT_NEAR(slower.delta, 0.05, 0.003);
  EXPECT_DOUBLE_EQ(slower.base_tpot_ms, (base[0].timing.tpot_ms.median + base[4].timing.tpot_ms.median) / 2);
  EXPECT_DOUBLE_EQ(slower.new_tpot_ms, (next[3].timing.tpot_ms.median + next[5].timing.tpot_ms.median) / 2);
  EXPECT_DOUBLE_EQ(slower.delta, (slower.new_tpot_ms - slower.base_tpot_ms) / slower.base_tpot_ms);
  EXPECT_TRUE(slower.device_note.empty());
  // 200 steps of 40: five repetition medians a run, ten a side, completely separated:
  // p = 2 / C(20, 10).
  EXPECT_EQ(slower.base_samples.size(), 10u);
  EXPECT_EQ(slower.new_samples.size(), 10u);
  EXPECT_TRUE(slower.test.exact);
  EXPECT_NEAR(slower.test.p, 2.0 / 184756, 1e-12);
  EXPECT_LT(slower.base_run_spread, 0.01);  // the two runs agree: the 5% stands out

  EXPECT_EQ(c.pairs[1].verdict, db::Verdict::improved);
  EXPECT_LT(c.pairs[1].delta, -0.03);

  // Medians 1.1 -> 1.15 (+4.5%), but three steps are one repetition a side (40 steps each):
  // no outcome of one against one can be significant.
  const db::ComparedPair& few = c.pairs[2];
  EXPECT_EQ(few.verdict, db::Verdict::too_few);
  EXPECT_NEAR(few.delta, 0.05 / 1.1, 1e-12);
  EXPECT_EQ(few.base_samples, std::vector<double>{1.1});
  EXPECT_DOUBLE_EQ(few.min_p, 1);
  EXPECT_FALSE(few.significant);
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_NE(c.warnings[0].find("too few to test"), std::string::npos) << c.warnings[0];

  // +0.5%: real (significant) but inside the threshold.
  EXPECT_EQ(c.pairs[3].verdict, db::Verdict::same);
  EXPECT_TRUE(c.pairs[3].significant);

  EXPECT_EQ(c.count(db::Verdict::regressed), 1);
  EXPECT_EQ(c.count(db::Verdict::improved), 1);

  // A looser threshold lets the 5% through.
  EXPECT_EQ(db::compare_results(base, next, 0.10).count(db::Verdict::regressed), 0);
}

// Runs of one key in separate processes are independent measurements: their repetitions
// pool, and the side's TPOT is the median of its runs' medians.
TEST(CompareResults, EveryRunOfAKeyPoolsItsRepetitions) {
  const std::vector<db::Result> base = {full_result("m", normal_samples(200, 1.0, 0.005, 61)),
                                        full_result("m", normal_samples(200, 1.0, 0.005, 62))};
  const std::vector<db::Result> next = {full_result("m", normal_samples(200, 1.0, 0.005, 63)),
                                        full_result("m", normal_samples(200, 1.0, 0.005, 64)),
                                        full_result("m", normal_samples(200, 1.0, 0.005, 65))};
  const db::Comparison c = db::compare_results(base, next, 0.03);
  ASSERT_EQ(c.pairs.size(), 1u);
  const db::ComparedPair& p = c.pairs[0];
  EXPECT_EQ(p.base_runs, 2);
  EXPECT_EQ(p.new_runs, 3);
  EXPECT_EQ(p.base_samples.size(), 10u);
  EXPECT_EQ(p.new_samples.size(), 15u);
  EXPECT_TRUE(p.test.exact);  // 25 repetition medians, no ties
  std::vector<double> medians = {next[0].timing.tpot_ms.median, next[1].timing.tpot_ms.median,
                                 next[2].timing.tpot_ms.median};
  std::sort(medians.begin(), medians.end());
  EXPECT_DOUBLE_EQ(p.new_tpot_ms, medians[1]);
  EXPECT_EQ(p.verdict, db::Verdict::same);
  EXPECT_TRUE(c.warnings.empty());
  EXPECT_TRUE(c.incomplete().empty());
  EXPECT_EQ(c.exit_code(), 0);
}

// A result from before timing.repetition_medians_ms: its samples, tokens at a time.
TEST(CompareResults, RepetitionMediansOfAnOlderResultComeFromItsSamples) {
  db::Result r = full_result("m", {3, 1, 2, 10, 30, 20, 5});
  r.config.tokens = 3;
  EXPECT_EQ(db::repetition_medians(r), (std::vector<double>{2, 20, 5}));
  r.timing.repetition_medians_ms = {7, 8};
  EXPECT_EQ(db::repetition_medians(r), (std::vector<double>{7, 8}));
}

// The gate fails closed: exit 3 when anything is unmatched, errored, unequal in its settings
// or untestable, unless a regression (exit 1) says more.
TEST(CompareResults, AnIncompleteComparisonFailsClosed) {
  const auto steady = [](const std::string& m, uint64_t seed) {
    return full_result(m, normal_samples(200, 1.0, 0.005, seed));
  };
  const db::Comparison complete = db::compare_results({steady("a", 1)}, {steady("a", 2)}, 0.03);
  EXPECT_TRUE(complete.incomplete().empty());
  EXPECT_EQ(complete.exit_code(), 0);

  db::Comparison missing = db::compare_results({steady("a", 1), steady("b", 3)}, {steady("a", 2)}, 0.03);
  ASSERT_EQ(missing.incomplete().size(), 1u);
  EXPECT_NE(missing.incomplete()[0].find("1 BASE key unmatched"), std::string::npos);
  EXPECT_EQ(missing.exit_code(), db::kExitIncomplete);
  missing.allow_missing = true;
  EXPECT_EQ(missing.exit_code(), 0);

  db::Comparison errored = complete;
  errored.new_errors = 2;
  EXPECT_EQ(errored.exit_code(), db::kExitIncomplete);

  const db::Comparison none = db::compare_results({steady("a", 1)}, {steady("b", 2)}, 0.03);
  EXPECT_EQ(none.exit_code(), db::kExitIncomplete);

  db::Result warm = steady("a", 2);
  warm.config.warmup = 4;
  const db::Comparison settings = db::compare_results({steady("a", 1)}, {warm}, 0.03);
  EXPECT_EQ(settings.pairs[0].settings_note, "warmup 16 vs 4");
  EXPECT_EQ(settings.exit_code(), db::kExitIncomplete);

  const db::Comparison few =
      db::compare_results({full_result("a", {1, 2})}, {full_result("a", {1, 2})}, 0.03);
  EXPECT_EQ(few.pairs[0].verdict, db::Verdict::too_few);
  EXPECT_EQ(few.exit_code(), db::kExitIncomplete);

  // A regression with a key missing: 1, the more specific failure.
  const db::Comparison both =
      db::compare_results({steady("a", 1), steady("a", 5), steady("b", 3)},
                          {full_result("a", normal_samples(200, 1.06, 0.005, 4))}, 0.03);
  EXPECT_EQ(both.count(db::Verdict::regressed), 1);
  EXPECT_EQ(both.exit_code(), 1);
}

// A run with a warning that can move its figure (noisy, a thermal or hardware throttle, a
// fallen memory clock) is never called regressed or improved.
TEST(CompareResults, APairWithAWarnedRunIsUnstableNotRegressed) {
  db::Result slow = full_result("a", normal_samples(200, 1.06, 0.005, 72));
  slow.device.end->throttle_reasons = 0x20;  // sw_thermal_slowdown
  slow.device.end->throttle = {"sw_thermal_slowdown"};
  slow.timing.warnings = db::run_warnings(slow);
  const db::Comparison c =
      db::compare_results({full_result("a", normal_samples(200, 1.0, 0.005, 71))}, {slow}, 0.03);
  ASSERT_EQ(c.pairs.size(), 1u);
  EXPECT_EQ(c.pairs[0].verdict, db::Verdict::unstable);
  EXPECT_EQ(c.pairs[0].unstable_why, "NEW throttled: sw_thermal_slowdown at the run's end");
  EXPECT_EQ(c.pairs[0].run_warnings,
            std::vector<std::string>{"NEW throttled: sw_thermal_slowdown at the run's end"});
  EXPECT_EQ(c.count(db::Verdict::regressed), 0);
  EXPECT_EQ(c.exit_code(), db::kExitIncomplete);  // nothing was tested

  db::Result noisy = full_result("a", normal_samples(200, 1.06, 0.005, 72));
  noisy.timing.repetition_medians_ms = {1.0, 1.1, 0.95, 1.12, 1.06};
  noisy.timing.noise = db::repetition_noise(noisy.timing.repetition_medians_ms);
  noisy.timing.warnings = db::run_warnings(noisy);
  EXPECT_EQ(db::compare_results({full_result("a", normal_samples(200, 1.0, 0.005, 71))}, {noisy}, 0.03)
                .pairs[0]
                .verdict,
            db::Verdict::unstable);

  db::Result memory = full_result("a", normal_samples(200, 1.06, 0.005, 72));
  memory.device.end->mem_clock_mhz = 2619;
  EXPECT_EQ(db::compare_results({full_result("a", normal_samples(200, 1.0, 0.005, 71))}, {memory}, 0.03)
                .pairs[0]
                .verdict,
            db::Verdict::unstable);
}

// The software power cap acts through the SM clock: a pair is judged over the range of
// changes the difference in the two sides' clock falls leaves open, and is unstable when
// that range straddles the verdict.
TEST(CompareResults, ThePowerCapCountsAsTheSmClocksFall) {
  const auto capped = [](double tpot, uint64_t seed, int end_mhz) {
    db::Result r = full_result("a", normal_samples(200, tpot, 0.003, seed));
    r.device.end->throttle_reasons = 0x4;
    r.device.end->throttle = {"sw_power_cap"};
    r.device.end->sm_clock_mhz = end_mhz;
    r.timing.warnings = db::run_warnings(r);
    return r;
  };
  // Both sides capped, their clocks fell alike: judged, the same.
  db::Comparison c = db::compare_results({capped(1.0, 1, 1905), capped(1.0, 2, 1920)},
                                         {capped(1.001, 3, 1920), capped(1.001, 4, 1905)}, 0.03);
  EXPECT_EQ(c.pairs[0].verdict, db::Verdict::same);
  EXPECT_DOUBLE_EQ(c.pairs[0].clock_gap, 0.0);
  EXPECT_FALSE(c.pairs[0].run_warnings.empty());  // marked in the note all the same

  // 4% slower with the clocks held alike: regressed, exit 1.
  c = db::compare_results({capped(1.0, 1, 1965), capped(1.0, 2, 1965)},
                          {full_result("a", normal_samples(200, 1.04, 0.003, 3)),
                           full_result("a", normal_samples(200, 1.04, 0.003, 4))},
                          0.03);
  ASSERT_EQ(c.pairs.size(), 1u);
  EXPECT_EQ(c.pairs[0].verdict, db::Verdict::regressed);
  EXPECT_EQ(c.exit_code(), 1);

  // 4% slower, but NEW's SM clock fell 3.8% (1980 -> 1905) where BASE's held: the clocks
  // could account for most of it.
  c = db::compare_results({full_result("a", normal_samples(200, 1.0, 0.003, 1)),
                           full_result("a", normal_samples(200, 1.0, 0.003, 2))},
                          {capped(1.04, 3, 1905), capped(1.04, 4, 1905)}, 0.03);
  EXPECT_EQ(c.pairs[0].verdict, db::Verdict::unstable);
  EXPECT_NE(c.pairs[0].unstable_why.find("the SM clock fell 3.79% further in NEW than in BASE"),
            std::string::npos)
      << c.pairs[0].unstable_why;
  EXPECT_EQ(c.exit_code(), db::kExitIncomplete);

  // With BASE's clock 3.8% lower, 2% faster is the same either way (the change lies in
  // [-2%, +1.8%]), but 4% faster cannot be told from the clocks.
  const auto clean = [](double tpot, uint64_t seed) {
    return full_result("a", normal_samples(200, tpot, 0.003, seed));
  };
  c = db::compare_results({capped(1.0, 1, 1905), capped(1.0, 2, 1905)}, {clean(0.98, 3), clean(0.98, 4)},
                          0.03);
  EXPECT_EQ(c.pairs[0].verdict, db::Verdict::same);
  c = db::compare_results({capped(1.0, 1, 1905), capped(1.0, 2, 1905)}, {clean(0.96, 3), clean(0.96, 4)},
                          0.03);
  EXPECT_EQ(c.pairs[0].verdict, db::Verdict::unstable);
  EXPECT_EQ(c.count(db::Verdict::improved), 0);
}

// One run a side cannot tell a change from run-to-run variation; two runs a side can, and
// runs that disagree more than the change make it noise.
TEST(CompareResults, AChangeMustStandOutFromRunToRunVariation) {
  const auto run = [](double mean, uint64_t seed) {
    return full_result("a", normal_samples(200, mean, 0.005, seed));
  };
  const db::Comparison one = db::compare_results({run(1.0, 1)}, {run(1.06, 2)}, 0.03);
  EXPECT_EQ(one.pairs[0].verdict, db::Verdict::unconfirmed);
  EXPECT_TRUE(std::isnan(one.pairs[0].base_run_spread));
  EXPECT_EQ(one.exit_code(), db::kExitIncomplete);
  ASSERT_FALSE(one.warnings.empty());
  EXPECT_NE(one.warnings[0].find("unconfirmed; measure with --runs 3"), std::string::npos) << one.warnings[0];

  // A baseline of one run against three new ones: the new side's runs give the spread.
  const db::Comparison three =
      db::compare_results({run(1.0, 1)}, {run(1.06, 2), run(1.06, 3), run(1.06, 4)}, 0.03);
  EXPECT_EQ(three.pairs[0].verdict, db::Verdict::regressed);
  EXPECT_EQ(three.exit_code(), 1);

  // Runs 5% apart on each side: a 6% change is within twice that spread.
  const db::Comparison spread =
      db::compare_results({run(1.0, 1), run(1.05, 5)}, {run(1.06, 2), run(1.115, 6)}, 0.03);
  EXPECT_EQ(spread.pairs[0].verdict, db::Verdict::noise);
  EXPECT_GT(spread.pairs[0].base_run_spread, 0.03);
}

// --pair-by: one file of graph on and off runs, paired across the switch.
TEST(CompareResults, PairByComparesRunsThatDifferInOneKeyField) {
  db::Result on_a = full_result("a", normal_samples(200, 1.0, 0.005, 81));
  db::Result off_a = full_result("a", normal_samples(200, 1.1, 0.005, 82));
  off_a.config.graph = false;
  db::Result off_a2 = full_result("a", normal_samples(200, 1.1, 0.005, 85));
  off_a2.config.graph = false;
  db::Result on_b = full_result("b", normal_samples(200, 2.0, 0.005, 83));
  db::Result off_b = full_result("b", normal_samples(200, 2.0, 0.005, 84));
  off_b.config.graph = false;
  const db::Comparison c = db::compare_by_field({on_a, off_a, on_b, off_b, off_a2}, "graph", "", 0.03);
  ASSERT_EQ(c.pairs.size(), 2u);
  EXPECT_EQ(c.pairs[0].label, "graph on -> off");
  EXPECT_EQ(c.pairs[0].key.model, "a");
  EXPECT_EQ(c.pairs[0].verdict, db::Verdict::regressed);
  EXPECT_EQ(c.pairs[1].verdict, db::Verdict::same);
  const db::Comparison back = db::compare_by_field({on_a, off_a, on_b, off_b, off_a2}, "graph", "off", 0.03);
  EXPECT_EQ(back.pairs[0].label, "graph off -> on");
  EXPECT_EQ(back.pairs[0].verdict, db::Verdict::improved);
  EXPECT_THROW(db::compare_by_field({on_a}, "seed", "", 0.03), db::UsageError);
  EXPECT_THROW(db::compare_by_field({on_a, off_a}, "graph", "maybe", 0.03), db::UsageError);
}

TEST(CompareResults, UnmatchedRunsAreListedOnBothSides) {
  db::Result sync = full_result("a", {1, 2, 3});
  sync.config.sync_per_token = true;
  const std::vector<db::Result> base = {full_result("a", {1, 2, 3}), full_result("only-base", {1}),
                                        full_result("b", {1, 2})};
  const std::vector<db::Result> next = {full_result("only-new", {1}), full_result("b", {1, 2}), sync,
                                        full_result("a", {1, 2, 3})};
  const db::Comparison c = db::compare_results(base, next, 0.03);
  ASSERT_EQ(c.pairs.size(), 2u);
  EXPECT_EQ(c.pairs[0].key.model, "a");
  EXPECT_EQ(c.pairs[1].key.model, "b");
  ASSERT_EQ(c.unmatched_base.size(), 1u);
  EXPECT_EQ(c.unmatched_base[0].model, "only-base");
  ASSERT_EQ(c.unmatched_new.size(), 2u);  // in NEW's order
  EXPECT_EQ(c.unmatched_new[0].model, "only-new");
  EXPECT_EQ(c.unmatched_new[1], db::run_key(sync));
}

TEST(CompareResults, DifferentDevicesAreNotedAndWarned) {
  const std::vector<double> s = normal_samples(200, 1.0, 0.005, 91);
  const std::vector<db::Result> base = {full_result("gpu", s, "NVIDIA H200", 4100), full_result("bw4", s),
                                        full_result("bw6", s)};
  const std::vector<db::Result> next = {full_result("gpu", s, "NVIDIA H100 80GB HBM3", 3000),
                                        full_result("bw4", s, "NVIDIA H200", 4100 * 1.04),
                                        full_result("bw6", s, "NVIDIA H200", 4100 * 0.94)};
  const db::Comparison c = db::compare_results(base, next, 0.03);
  ASSERT_EQ(c.pairs.size(), 3u);
  EXPECT_EQ(
      c.pairs[0].device_note,
      "devices differ (NVIDIA H200 vs NVIDIA H100 80GB HBM3): the byte law's premises may differ; do not "
      "read this as a code change; peak read bandwidth differs by -26.8% (4100.0 vs 3000.0 GB/s)");
  EXPECT_EQ(c.pairs[0].base_device, "NVIDIA H200");
  EXPECT_EQ(c.pairs[0].new_device, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(c.pairs[1].device_note, "");  // 4% is within 5%
  EXPECT_EQ(c.pairs[2].device_note, "peak read bandwidth differs by -6.0% (4100.0 vs 3854.0 GB/s)");
  ASSERT_EQ(c.warnings.size(), 2u);  // one line per pair with a note
  EXPECT_EQ(c.warnings[0], db::to_string(c.pairs[0].key) + ": " + c.pairs[0].device_note);
  EXPECT_EQ(c.warnings[1], db::to_string(c.pairs[2].key) + ": " + c.pairs[2].device_note);
}

// The batched GEMM's shapes are timed at load: a pair whose sides chose differently says so
// (the note, a warning, the json) and is judged as before; the times in the entries do not count.
TEST(CompareResults, KernelShapesChosenDifferentlyAreNotedNotJudged) {
  const std::vector<double> s = normal_samples(200, 1.0, 0.005, 93);
  const auto with = [&](const std::string& model, const std::string& gate_up, const char* us) {
    db::Result r = full_result(model, s);
    r.config.batch = 16;
    r.config.kernel_shapes = {
        fmt::format("qkv [6144 x 4096]: m2u2b2, {} us (default m4u1b2 17.1 us)", us),
        fmt::format("gate_up [28672 x 4096]: {}, 34.8 us (default m4u1b2 34.8 us)", gate_up)};
    return r;
  };
  const db::Comparison c =
      db::compare_results({with("a", "m4u1b2", "14.5"), with("b", "m4u1b2", "14.5")},
                          {with("a", "m4u1b2", "14.9"), with("b", "m4u1b1", "14.5")}, 0.03);
  ASSERT_EQ(c.pairs.size(), 2u);
  EXPECT_EQ(c.pairs[0].shapes_note, "");  // the same choices, other times
  EXPECT_EQ(c.pairs[1].shapes_note, "BASE qkv m2u2b2, gate_up m4u1b2 vs NEW qkv m2u2b2, gate_up m4u1b1");
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_EQ(c.warnings[0].rfind(db::to_string(c.pairs[1].key) +
                                    ": the batched GEMM's shapes, timed at load, differ (" +
                                    c.pairs[1].shapes_note + ")",
                                0),
            0u);
  EXPECT_EQ(c.pairs[1].verdict, db::Verdict::same);
  EXPECT_EQ(c.exit_code(), 0);
  EXPECT_NE(db::format_comparison_md(c).find("kernel shapes: " + c.pairs[1].shapes_note), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(db::format_comparison_json(c)).at("pairs").at(1).at("shapes_note"),
            c.pairs[1].shapes_note);

  // Several runs a side: each side's distinct choices, in the order first seen.
  const db::Comparison runs = db::compare_results({with("a", "m4u1b2", "1"), with("a", "m4u1b1", "1")},
                                                  {with("a", "m4u1b2", "1")}, 0.03);
  EXPECT_EQ(runs.pairs[0].shapes_note,
            "BASE qkv m2u2b2, gate_up m4u1b2 / qkv m2u2b2, gate_up m4u1b1 vs NEW qkv m2u2b2, gate_up m4u1b2");
}

TEST(CompareResults, PairsWithoutSamplesAreUntested) {
  db::Result b = full_result("m", {});
  b.timing.tpot_ms.median = 1.0;
  db::Result n = full_result("m", {});
  n.timing.tpot_ms.median = 1.2;
  const db::Comparison c = db::compare_results({b}, {n}, 0.03);
  ASSERT_EQ(c.pairs.size(), 1u);
  EXPECT_EQ(c.pairs[0].verdict, db::Verdict::untested);
  EXPECT_TRUE(std::isnan(c.pairs[0].test.p));
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_NE(c.warnings[0].find("not tested"), std::string::npos);
  EXPECT_EQ(c.count(db::Verdict::regressed), 0);
}

TEST(CompareResults, MarkdownShowsTheKeyColumnsAndTheOtherKeyFieldsWhenNeeded) {
  db::Result sync = full_result("a", {1, 2, 3});
  sync.config.sync_per_token = true;
  const db::Comparison plain =
      db::compare_results({full_result("a", {1, 2, 3})}, {full_result("a", {1, 2, 3})}, 0.03);
  const std::string md = db::format_comparison_md(plain);
  EXPECT_EQ(
      md.rfind("| model | scheme | kernel | graph | context | tokens | base TPOT ms | new TPOT ms | delta | "
               "noise base / new | n base / new | p | verdict | note |\n",
               0),
      0u)
      << md;
  EXPECT_NE(
      md.find("| a | int4 | int4.gemv | on | 512 | 40 | 2.000 | 2.000 | +0.00% | 0.00% / 0.00% | 1 / 1 | "
              "1.000 | too few | - |"),
      std::string::npos)
      << md;
  EXPECT_NE(md.find("\nUnmatched in BASE: none\n"), std::string::npos) << md;
  EXPECT_NE(md.find("\nUnmatched in NEW: none\n"), std::string::npos) << md;
  EXPECT_NE(md.find("1 matched: 0 regressed, 0 improved, 0 same, 0 noise, 1 too few (threshold 3%"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("\nGate: incomplete (exit 3): no pair could be tested"), std::string::npos) << md;

  const db::Comparison two =
      db::compare_results({full_result("a", {1, 2, 3}), sync}, {sync, full_result("a", {1, 2, 3})}, 0.03);
  const std::string md2 = db::format_comparison_md(two);
  EXPECT_NE(md2.find("| tokens | other key | base TPOT ms |"), std::string::npos) << md2;
  EXPECT_NE(md2.find("| 40 | sync_per_token=off |"), std::string::npos) << md2;
  EXPECT_NE(md2.find("| 40 | sync_per_token=on |"), std::string::npos) << md2;

  // group_size differs between these rows, but model tells them apart already: no column.
  db::Result int8 = full_result("b", {1, 2, 3});
  int8.config.group_size = 0;
  const db::Comparison three =
      db::compare_results({full_result("a", {1, 2, 3}), int8}, {int8, full_result("a", {1, 2, 3})}, 0.03);
  EXPECT_EQ(db::format_comparison_md(three).find("other key"), std::string::npos)
      << db::format_comparison_md(three);
}

// --- --metric energy ------------------------------------------------------------------------

// `r` with its energy measured: five repetitions of J/step drawn around `j_per_step`.
db::Result with_energy(db::Result r, double j_per_step, uint64_t seed, double sd = 0.003) {
  const std::vector<double> per_step = normal_samples(5, j_per_step, sd * j_per_step, seed);
  db::Energy& e = r.energy;
  e.source = "nvml total energy counter";
  e.reason = "";
  e.repetition_j.clear();
  e.repetition_s.clear();
  for (double j : per_step) {
    e.repetition_j.push_back(j * static_cast<double>(r.config.tokens));
    e.repetition_s.push_back(0.04);
  }
  e.j_per_step = db::repetition_spread(per_step);
  return r;
}

db::Result energy_run(double tpot, double j_per_step, uint64_t seed) {
  return with_energy(full_result("a", normal_samples(200, tpot, 0.003, seed)), j_per_step, seed + 100);
}

// The same test and verdicts on the repetitions' J/step as on their TPOT: a run whose energy
// rose 5% at the same TPOT regressed in energy and is the same in time.
TEST(CompareEnergy, JudgesTheRepetitionsJoulesPerStepByTheRulesOfTpot) {
  const std::vector<db::Result> base = {energy_run(1.0, 0.50, 1), energy_run(1.0, 0.50, 2)};
  const std::vector<db::Result> next = {energy_run(1.0, 0.525, 3), energy_run(1.0, 0.525, 4)};
  const db::Comparison e = db::compare_results(base, next, 0.03, db::kCompareAlpha, db::Metric::energy);
  ASSERT_EQ(e.pairs.size(), 1u);
  const db::ComparedPair& p = e.pairs[0];
  EXPECT_EQ(e.metric, db::Metric::energy);
  EXPECT_EQ(p.verdict, db::Verdict::regressed);
  EXPECT_EQ(e.exit_code(), 1);
  EXPECT_EQ(p.base_samples.size(), 10u);  // every repetition's J/step, both runs
  std::vector<double> pooled = db::repetition_j_per_step(base[0]);
  for (double v : db::repetition_j_per_step(base[1])) pooled.push_back(v);
  EXPECT_EQ(p.base_samples, pooled);
  EXPECT_DOUBLE_EQ(p.base_j_per_step,
                   (*base[0].energy.j_per_step.median + *base[1].energy.j_per_step.median) / 2);
  EXPECT_DOUBLE_EQ(p.delta, (p.new_j_per_step - p.base_j_per_step) / p.base_j_per_step);
  EXPECT_NEAR(p.delta, 0.05, 0.005);
  EXPECT_DOUBLE_EQ(p.base_noise, db::repetition_noise(p.base_samples));
  EXPECT_EQ(db::compare_results(base, next, 0.03).pairs[0].verdict, db::Verdict::same) << "TPOT held";
  // Less energy: improved; and a change within the threshold: the same.
  EXPECT_EQ(db::compare_results(next, base, 0.03, db::kCompareAlpha, db::Metric::energy).pairs[0].verdict,
            db::Verdict::improved);
  EXPECT_EQ(db::compare_results(base, next, 0.06, db::kCompareAlpha, db::Metric::energy).pairs[0].verdict,
            db::Verdict::same);
  // One run a side: unconfirmed, said in J/step.
  const db::Comparison one =
      db::compare_results({base[0]}, {next[0]}, 0.03, db::kCompareAlpha, db::Metric::energy);
  EXPECT_EQ(one.pairs[0].verdict, db::Verdict::unconfirmed);
  ASSERT_FALSE(one.warnings.empty());
  EXPECT_NE(one.warnings[0].find("J/step changed by +"), std::string::npos) << one.warnings[0];
}

// A run without energy (a file from before it, --energy off, a coarse counter) leaves its pair
// untested, saying why; the gate fails closed.
TEST(CompareEnergy, ARunWithoutEnergyLeavesThePairUntestedAndTheGateIncomplete) {
  db::Result old = full_result("a", normal_samples(200, 1.0, 0.003, 1));  // energy: not measured
  const db::Comparison c =
      db::compare_results({old, energy_run(1.0, 0.5, 2)}, {energy_run(1.0, 0.5, 3), energy_run(1.0, 0.5, 4)},
                          0.03, db::kCompareAlpha, db::Metric::energy);
  ASSERT_EQ(c.pairs.size(), 1u);
  EXPECT_EQ(c.pairs[0].verdict, db::Verdict::untested);
  EXPECT_EQ(c.pairs[0].untested_why, "BASE no energy measured (not measured)");
  EXPECT_TRUE(c.pairs[0].base_samples.empty());
  EXPECT_TRUE(std::isnan(c.pairs[0].base_j_per_step));
  EXPECT_EQ(c.exit_code(), db::kExitIncomplete);
  ASSERT_FALSE(c.warnings.empty());
  EXPECT_NE(c.warnings[0].find("BASE no energy measured (not measured): not tested"), std::string::npos)
      << c.warnings[0];
}

// Repetitions whose J/step spread past 3% cannot support a verdict at 3%, as TPOT's cannot.
TEST(CompareEnergy, NoisyEnergyIsUnstable) {
  const db::Comparison c = db::compare_results(
      {with_energy(full_result("a", normal_samples(200, 1.0, 0.003, 1)), 0.5, 11, 0.08),
       energy_run(1.0, 0.5, 2)},
      {energy_run(1.0, 0.6, 3), energy_run(1.0, 0.6, 4)}, 0.03, db::kCompareAlpha, db::Metric::energy);
  EXPECT_EQ(c.pairs[0].verdict, db::Verdict::unstable);
  EXPECT_NE(c.pairs[0].unstable_why.find("BASE noisy: the J/step of the 5 repetitions spread"),
            std::string::npos)
      << c.pairs[0].unstable_why;
}

// At the power cap a step's energy is the limit times its time: the SM clock's fall bounds
// energy's change as it bounds TPOT's.
TEST(CompareEnergy, ThePowerCapsClockFallBoundsTheEnergysChange) {
  const auto capped = [](double j_per_step, uint64_t seed, int end_mhz) {
    db::Result r = energy_run(1.0, j_per_step, seed);
    r.device.end->throttle_reasons = 0x4;
    r.device.end->throttle = {"sw_power_cap"};
    r.device.end->sm_clock_mhz = end_mhz;
    r.timing.warnings = db::run_warnings(r);
    return r;
  };
  // 4% more energy, NEW's SM clock 3.8% further down: the clocks could account for it.
  db::Comparison c = db::compare_results({energy_run(1.0, 0.5, 1), energy_run(1.0, 0.5, 2)},
                                         {capped(0.52, 3, 1905), capped(0.52, 4, 1905)}, 0.03,
                                         db::kCompareAlpha, db::Metric::energy);
  EXPECT_EQ(c.pairs[0].verdict, db::Verdict::unstable);
  EXPECT_NE(c.pairs[0].unstable_why.find("the SM clock fell 3.79% further in NEW"), std::string::npos)
      << c.pairs[0].unstable_why;
  // Both capped alike: judged.
  c = db::compare_results({capped(0.5, 1, 1905), capped(0.5, 2, 1905)},
                          {capped(0.52, 3, 1905), capped(0.52, 4, 1905)}, 0.03, db::kCompareAlpha,
                          db::Metric::energy);
  EXPECT_EQ(c.pairs[0].verdict, db::Verdict::regressed);
}

// --- the binary ----------------------------------------------------------------------------

TEST(CompareCli, MetricEnergyJudgesJoulesPerStepInTheTableAndTheJson) {
  TempDir dir;
  const std::string base = dir.write("base.json", {energy_run(1.0, 0.50, 1), energy_run(1.0, 0.50, 2)});
  const std::string next = dir.write("new.json", {energy_run(1.0, 0.525, 3), energy_run(1.0, 0.525, 4)});
  const Outcome o = compare({base, next, "--metric", "energy"});
  EXPECT_EQ(o.code, 1) << o.err << o.out;
  EXPECT_NE(o.out.find("| base J/step | new J/step | delta |"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("| regressed |"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("two-sided Mann-Whitney U on repetition J/step (--metric energy)"), std::string::npos)
      << o.out;
  EXPECT_EQ(compare({base, next}).code, 0) << "TPOT held";
  const Outcome j = compare({base, next, "--metric", "energy", "--format", "json"});
  const json doc = json::parse(j.out);
  EXPECT_EQ(doc["metric"], "energy");
  EXPECT_EQ(doc["pairs"][0]["base_repetition_j_per_step"].size(), 10u);
  EXPECT_EQ(doc["pairs"][0]["verdict"], "regressed");
  EXPECT_EQ(json::parse(compare({base, next, "--format", "json"}).out)["metric"], "tpot");
  expect_one_line_error(compare({base, next, "--metric", "watts"}), 2, "--metric");
}

TEST(CompareCli, FivePercentSlowdownWithTightSamplesRegressesAndExits1) {
  TempDir dir;  // two runs of each key a side, as --runs 2 writes them
  const std::string base =
      dir.write("base.json", {full_result("8b-int4", normal_samples(200, 1.0, 0.005, 21)),
                              full_result("1b-int4", normal_samples(200, 0.5, 0.005, 22)),
                              full_result("8b-int4", normal_samples(200, 1.0, 0.005, 25)),
                              full_result("1b-int4", normal_samples(200, 0.5, 0.005, 26))});
  const std::string next =
      dir.write("new.json", {full_result("8b-int4", normal_samples(200, 1.05, 0.005, 23)),
                             full_result("1b-int4", normal_samples(200, 0.5, 0.005, 24)),
                             full_result("8b-int4", normal_samples(200, 1.05, 0.005, 27)),
                             full_result("1b-int4", normal_samples(200, 0.5, 0.005, 28))});
  const Outcome o = compare({base, next});
  EXPECT_EQ(o.code, 1) << o.err << o.out;
  EXPECT_EQ(o.err, "");
  const size_t row = o.out.find("| 8b-int4 | int4 | int4.gemv | on | 512 | 40 | ");
  ASSERT_NE(row, std::string::npos) << o.out;
  const std::string line = o.out.substr(row, o.out.find('\n', row) - row);
  EXPECT_NE(line.find("| regressed | - |"), std::string::npos) << line;
  EXPECT_TRUE(std::regex_search(line, std::regex(R"(\| \+(4\.[89]|5\.[01])\d% \|)"))) << line;  // about +5%
  EXPECT_NE(o.out.find("2 matched: 1 regressed, 0 improved, 1 same"), std::string::npos) << o.out;

  // The same files the other way round: an improvement, exit 0.
  const Outcome back = compare({next, base});
  EXPECT_EQ(back.code, 0) << back.err;
  EXPECT_NE(back.out.find("| improved |"), std::string::npos) << back.out;
  EXPECT_NE(back.out.find("\nGate: pass (exit 0)\n"), std::string::npos) << back.out;

  // A threshold above the slowdown: exit 0. "10" means 10 percent.
  EXPECT_EQ(compare({base, next, "--threshold", "10"}).code, 0);
  EXPECT_EQ(compare({base, next, "--threshold", "10%"}).code, 0);
  EXPECT_EQ(compare({base, next, "--threshold", "4.5%"}).code, 1);
}

TEST(CompareCli, HalfPercentShiftInsideNoiseExits0) {
  TempDir dir;
  const std::string base =
      dir.write("base.json", {full_result("8b-int4", normal_samples(200, 1.0, 0.02, 31))});
  const std::string next =
      dir.write("new.json", {full_result("8b-int4", normal_samples(200, 1.005, 0.02, 32))});
  const Outcome o = compare({base, next});
  EXPECT_EQ(o.code, 0) << o.err << o.out;
  EXPECT_EQ(o.err, "");
  EXPECT_NE(o.out.find("| same | - |"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("regressed |"), std::string::npos) << o.out;
}

TEST(CompareCli, DifferentDevicesWarnOnStderrAndInTheTable) {
  TempDir dir;
  const auto s = normal_samples(200, 1.0, 0.01, 41);
  const std::string base = dir.write("base.json", {full_result("8b-int4", s, "NVIDIA H200", 4100)});
  const std::string next = dir.write("new.json", {full_result("8b-int4", s, "NVIDIA A100-SXM4-80GB", 4100)});
  const std::string note =
      "devices differ (NVIDIA H200 vs NVIDIA A100-SXM4-80GB): the byte law's premises may differ; do not "
      "read this "
      "as a code change";
  const Outcome o = compare({base, next});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(lines(o.err), 1u) << o.err;
  EXPECT_EQ(o.err.rfind("decodebench: warning: model=8b-int4 ", 0), 0u) << o.err;
  EXPECT_NE(o.err.find(note), std::string::npos) << o.err;
  EXPECT_NE(o.out.find("| same | " + note + " |"), std::string::npos) << o.out;

  const Outcome j = compare({base, next, "--format", "json"});
  EXPECT_EQ(j.code, 0);
  const json doc = json::parse(j.out);
  EXPECT_EQ(doc.at("pairs").at(0).at("device_note"), note);
  EXPECT_EQ(doc.at("pairs").at(0).at("base_device"), "NVIDIA H200");
  EXPECT_EQ(doc.at("pairs").at(0).at("new_device"), "NVIDIA A100-SXM4-80GB");
}

TEST(CompareCli, AnUnmatchedBaseKeyFailsClosedUnlessAllowed) {
  TempDir dir;
  const auto s = [](uint64_t seed) { return normal_samples(200, 1.0, 0.005, seed); };
  db::Result eager = full_result("8b-int4", s(1));
  eager.config.graph = false;
  const std::string base =
      dir.write("base.json", {full_result("8b-int4", s(2)), full_result("4b-int4", s(3))});
  const std::string next = dir.write("new.json", {full_result("8b-int4", s(4)), eager});
  const Outcome o = compare({base, next});
  EXPECT_EQ(o.code, 3) << o.err;
  EXPECT_NE(o.out.find("\nUnmatched in BASE (1):\n- model=4b-int4 scheme=int4 "), std::string::npos) << o.out;
  EXPECT_NE(
      o.out.find("\nUnmatched in NEW (1):\n- model=8b-int4 scheme=int4 group_size=128 lm_head_scheme=fp16 "
                 "kernel=int4.gemv graph=off "),
      std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("Gate: incomplete (exit 3): 1 BASE key unmatched in NEW"), std::string::npos) << o.out;
  EXPECT_EQ(compare({base, next, "--allow-missing"}).code, 0);

  const Outcome j = compare({base, next, "--format", "json"});
  EXPECT_EQ(j.code, 3);
  const json doc = json::parse(j.out);
  EXPECT_DOUBLE_EQ(doc.at("threshold").get<double>(), 0.03);
  EXPECT_EQ(doc.at("regressed"), 0);
  EXPECT_EQ(doc.at("exit_code"), 3);
  ASSERT_EQ(doc.at("pairs").size(), 1u);
  EXPECT_EQ(doc.at("pairs").at(0).at("verdict"), "same");
  EXPECT_EQ(doc.at("pairs").at(0).at("key").at("graph"), true);
  EXPECT_EQ(doc.at("pairs").at(0).at("base_repetition_medians_ms").size(), 5u);
  ASSERT_EQ(doc.at("unmatched_base").size(), 1u);
  EXPECT_EQ(doc.at("unmatched_base").at(0).at("model"), "4b-int4");
  ASSERT_EQ(doc.at("unmatched_new").size(), 1u);
  EXPECT_EQ(doc.at("unmatched_new").at(0).at("graph"), false);
  EXPECT_EQ(doc.at("unmatched_new").at(0).at("context"), 512);
}

// Every instance an error entry: nothing was measured, and the gate says so.
TEST(CompareCli, ErrorEntriesAndNothingMatchedFailClosed) {
  TempDir dir;
  const std::string base =
      dir.write("base.json", {full_result("8b-int4", normal_samples(200, 1.0, 0.005, 5))});
  const std::string errors = dir.write_text("new.jsonl",
                                            "{\"schema\": \"decodebench/result/v1\", \"error\": \"no GPU\", "
                                            "\"config\": {\"model\": \"8b-int4\"}}\n");
  const Outcome o = compare({base, errors});
  EXPECT_EQ(o.code, 3) << o.err << o.out;
  EXPECT_NE(o.out.find("error entries: 0 in BASE, 1 in NEW"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("nothing matched"), std::string::npos) << o.out;
}

// --pair-by graph: the graph switch's effect, as one command over one file.
TEST(CompareCli, PairByGraphComparesOnAgainstOff) {
  TempDir dir;
  db::Result off = full_result("8b-int4", normal_samples(200, 1.08, 0.005, 7));
  off.config.graph = false;
  db::Result off2 = full_result("8b-int4", normal_samples(200, 1.08, 0.005, 8));
  off2.config.graph = false;
  const std::string f =
      dir.write("both.json", {full_result("8b-int4", normal_samples(200, 1.0, 0.005, 6)), off, off2});
  const Outcome o = compare({f, "--pair-by", "graph"});
  EXPECT_EQ(o.code, 1) << o.err << o.out;
  EXPECT_NE(o.out.find("| graph on -> off | 8b-int4 |"), std::string::npos) << o.out;
  EXPECT_EQ(compare({f, "--pair-by", "graph", "--base-value", "off"}).code, 0);
  expect_one_line_error(compare({f, "--pair-by", "colour"}), 2, "--pair-by colour: not a key field");
  expect_one_line_error(compare({f, f, "--base-value", "off"}), 2, "--base-value needs --pair-by");
}

TEST(CompareCli, JsonlAndSingleObjectInputs) {
  TempDir dir;
  const std::string base =
      dir.write("base.json", {full_result("8b-int4", normal_samples(200, 1.0, 0.005, 51))});  // one object
  const std::string next = dir.write("new.jsonl",
                                     {full_result("8b-int4", normal_samples(200, 1.05, 0.005, 52)),
                                      full_result("1b-int4", normal_samples(200, 1.05, 0.005, 53)),
                                      full_result("8b-int4", normal_samples(200, 1.05, 0.005, 54))},
                                     db::OutputFormat::jsonl);
  const Outcome o = compare({base, next, "--format", "json"});
  EXPECT_EQ(o.code, 1) << o.err;
  const json doc = json::parse(o.out);
  EXPECT_EQ(doc.at("regressed"), 1);
  EXPECT_EQ(doc.at("pairs").at(0).at("verdict"), "regressed");
  EXPECT_TRUE(doc.at("pairs").at(0).at("significant").get<bool>());
  EXPECT_NEAR(doc.at("pairs").at(0).at("p_value").get<double>(), 2.0 / 3003, 1e-12);  // 5 and 10, separated
  EXPECT_EQ(doc.at("pairs").at(0).at("new_runs"), 2);
  EXPECT_NEAR(doc.at("pairs").at(0).at("delta").get<double>(), 0.05, 0.003);
  EXPECT_EQ(doc.at("unmatched_new").size(), 1u);
}

TEST(CompareCli, BadInputExits2WithOneLine) {
  TempDir dir;
  const std::string good = dir.write("good.json", {full_result("8b-int4", {1, 2, 3})});
  const std::string bad_json = dir.write_text("bad.json", "{\"schema\": ");
  const std::string empty = dir.write_text("empty.json", "");
  const std::string other = dir.write_text("other.json", "{\"schema\": \"decodebench/result/v2\"}");
  const std::string missing_field = dir.write_text("partial.json", "{\"schema\": \"decodebench/result/v1\"}");

  expect_one_line_error(compare({good, dir.file("nope.json")}), 2, "nope.json");
  expect_one_line_error(compare({dir.file("nope.json"), good}), 2, "nope.json");
  expect_one_line_error(compare({good, bad_json}), 2, "invalid JSON");
  expect_one_line_error(compare({empty, good}), 2, "empty");
  expect_one_line_error(compare({good, other}), 2, "decodebench/result/v2");
  expect_one_line_error(compare({good, missing_field}), 2, "missing field");
  expect_one_line_error(compare({good, dir.file("")}), 2, "directory");

  expect_one_line_error(compare({good, good, "--threshold", "abc"}), 2, "--threshold 'abc'");
  expect_one_line_error(compare({good, good, "--threshold=-3%"}), 2, "--threshold '-3%'");
  expect_one_line_error(compare({good, good, "--threshold", ""}), 2, "--threshold");
  expect_one_line_error(compare({good, good, "--threshold", "-3%"}), 2, "threshold");
  expect_one_line_error(compare({good, good, "--format", "csv"}), 2, "--format");
  expect_one_line_error(compare({good}), 2, "BASE and NEW");
}
