// Compare's judgement: --threshold parsing, repetitions as the unit of test, the verdicts,
// device and settings differences, unmatched runs, --pair-by, --metric energy, and the md
// table's key columns.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "compare_fixtures.h"
#include "decodebench/compare.h"
#include "decodebench/compare_printers.h"
#include "decodebench/energy.h"
#include "decodebench/error.h"
#include "decodebench/result.h"
#include "decodebench/stability.h"
#include "decodebench/stats.h"

namespace {

using db_test::energy_run;
using db_test::full_result;
using db_test::normal_samples;
using db_test::with_energy;

}  // namespace

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

// A KV cache scheme is a config difference, as a weight scheme is: runs that differ in it do
// not match (each side's key names it), --pair-by kv_cache pairs them, and the tables show it.
TEST(CompareResults, AKvCacheSchemeIsAConfigDifference) {
  const db::Result fp16 = full_result("a", normal_samples(200, 3.5, 0.005, 95));
  db::Result fp8 = full_result("a", normal_samples(200, 2.4, 0.005, 96));
  fp8.config.kv_cache = "fp8";

  const db::Comparison c = db::compare_results({fp16}, {fp8}, 0.03);
  EXPECT_TRUE(c.pairs.empty());
  ASSERT_EQ(c.unmatched_base.size(), 1u);
  ASSERT_EQ(c.unmatched_new.size(), 1u);
  EXPECT_EQ(db::to_string(c.unmatched_new[0]),
            "model=a scheme=int4 group_size=128 lm_head_scheme=fp16 kv_cache=fp8 "
            "kernel=int4.gemv graph=on adapter=none adapter_mode=- context=512 "
            "tokens=40 sync_per_token=off weights=synthetic");
  EXPECT_EQ(db::to_string(c.unmatched_base[0]).find("kv_cache"), std::string::npos);
  EXPECT_EQ(c.exit_code(), db::kExitIncomplete);
  const std::string md = db::format_comparison_md(c);
  EXPECT_NE(md.find("- " + db::to_string(c.unmatched_new[0]) + "\n"), std::string::npos) << md;
  const nlohmann::json j = nlohmann::json::parse(db::format_comparison_json(c));
  EXPECT_EQ(j.at("unmatched_new").at(0).at("kv_cache"), "fp8");
  EXPECT_FALSE(j.at("unmatched_base").at(0).contains("kv_cache"));

  const db::Comparison paired = db::compare_by_field({fp16, fp8}, "kv_cache", "", 0.03);
  ASSERT_EQ(paired.pairs.size(), 1u);
  EXPECT_EQ(paired.pairs[0].label, "kv_cache fp16 -> fp8");
  EXPECT_LT(paired.pairs[0].delta, -0.25);
  EXPECT_TRUE(paired.pairs[0].significant);

  // Matched runs of an fp8 cache: a kv cache column beside the weights' scheme.
  const std::string same = db::format_comparison_md(db::compare_results({fp8}, {fp8}, 0.03));
  EXPECT_EQ(same.rfind("| model | scheme | kv cache | kernel | graph | context | tokens |", 0), 0u) << same;
  EXPECT_NE(same.find("| a | int4 | fp8 | int4.gemv | on | 512 | 40 |"), std::string::npos) << same;
}

// --- --metric energy ------------------------------------------------------------------------

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
