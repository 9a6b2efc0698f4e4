// The compare verb's judgement: two sets of results, matched by config key (run_key.h), with
// the delta of each matched pair in one metric (TPOT, or the energy per step) and whether
// independent measurements say it is real: a two-sided Mann-Whitney U test (mann_whitney.h)
// on the repetitions of every run of the key on each side (their TPOT medians or their
// J/step; runs of one key in separate processes pool their repetitions). Pure functions: the
// printers are compare_printers.h's; reading the files, printing and the exit code are the
// verb's (src/cli/compare.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "decodebench/mann_whitney.h"
#include "decodebench/result.h"
#include "decodebench/run_key.h"

namespace db {

// --threshold: "3%" and "3" both mean 3 percent (so "0.5" is half a percent, not 50%).
// Returns the fraction (0.03). A non-negative decimal number, optionally followed by one '%';
// anything else throws db::UsageError.
double parse_threshold(const std::string& text, const char* option = "--threshold");

inline constexpr double kCompareAlpha = 0.01;

// What compare judges (--metric): each repetition's median TPOT, or its energy per step
// (energy.repetition_j / config.tokens). Energy is judged by TPOT's rules: the same test,
// threshold and run-to-run spread, the same warnings ruling a pair out, and the power cap's
// SM clock fall bounding the change, since at the cap a step's energy is the power limit
// times its time; a run whose energy was not measured leaves its pair untested, and one
// whose repetitions' J/step spread more than kNoisyRun rules it out.
enum class Metric { tpot, energy };
const char* to_string(Metric m);

enum class Verdict {
  same,       // |delta| <= threshold, tested
  noise,      // |delta| > threshold, but the measurements do not show it (p >= alpha)
  improved,   // delta < -threshold, significant, NEW faster
  regressed,  // delta > threshold, significant, NEW slower
  untested,   // a side has no measurements to test
  too_few,    // too few measurements for any outcome to be significant (min_attainable_p >= alpha)
  unstable,   // a run has a warning that rules a verdict out, or the clocks can explain the change
  // Significant past the threshold within the runs' repetitions, but with one run a side
  // nothing tells it from run-to-run variation: measure with --runs to confirm.
  unconfirmed,
};

// A change past the threshold must also exceed this many times the run-to-run spread (the
// relative stdev of a side's run medians, from the side or sides with two runs or more):
// what moves whole processes (clocks, placement, neighbours) is invisible to repetitions.
inline constexpr double kRunSpreads = 2.0;
const char* to_string(Verdict v);
// Whether the pair was tested: same, noise, improved or regressed.
bool tested(Verdict v);

struct ComparedPair {
  RunKey key;
  std::string label;  // with --pair-by: "graph off -> on"; "" otherwise
  int base_runs = 0, new_runs = 0;
  double base_tpot_ms = 0;  // the median of the side's runs' timing.tpot_ms.median
  double new_tpot_ms = 0;
  // The median of the side's runs' energy.j_per_step.median; NaN where a run has none
  double base_j_per_step = 0, new_j_per_step = 0;
  double delta = 0;  // of the metric: (new - base) / base; NaN when base is not positive
  std::vector<double> base_samples, new_samples;   // the metric's repetitions tested
  double base_noise = 0, new_noise = 0;            // repetition_noise of each side's samples
  double base_run_spread = 0, new_run_spread = 0;  // relative stdev of the runs' medians; NaN: one run
  MannWhitney test;                                // base's repetition medians against new's
  double min_p = 0;                                // min_attainable_p of the sample sizes
  bool significant = false;                        // p < alpha, in the direction of delta
  Verdict verdict = Verdict::same;
  std::string base_device, new_device;  // device.name
  double base_peak_read_GBps = 0, new_peak_read_GBps = 0;
  std::string device_note;                // "" when the devices match
  std::string settings_note;              // settings that differ besides the code under test; "" when none
  std::string shapes_note;                // the batched GEMM's shapes chosen at load, where the sides differ
  std::vector<std::string> run_warnings;  // the timing.warnings of both sides' runs
  double clock_gap = 0;      // how much further one side's SM clock fell (run_stability), a fraction
  std::string unstable_why;  // with Verdict::unstable: the warning or clock gap that rules it out
  std::string untested_why;  // with Verdict::untested: a side without the metric's measurements
};

struct Comparison {
  Metric metric = Metric::tpot;
  double threshold = 0;  // fraction
  double alpha = kCompareAlpha;
  std::vector<ComparedPair> pairs;      // in BASE's order
  std::vector<RunKey> unmatched_base;   // in BASE's order
  std::vector<RunKey> unmatched_new;    // in NEW's order
  int base_errors = 0, new_errors = 0;  // error entries (failed sweep instances) in the files
  bool allow_missing = false;           // --allow-missing: unmatched BASE keys do not fail the gate
  // One line each, without a prefix: device differences, untested, unstable or too-few pairs.
  std::vector<std::string> warnings;

  int count(Verdict v) const;
  // Why the comparison cannot pass a gate, one line each; empty when it is complete: a BASE
  // key unmatched (unless allow_missing), an error entry, nothing matched, settings that
  // differ, or no pair tested at all.
  std::vector<std::string> incomplete() const;
  // 1 when a pair regressed, else 3 when incomplete(), else 0.
  int exit_code() const;
};

inline constexpr int kExitIncomplete = 3;

// Matches base and next by run_key, pooling every run of a key on each side, and judges every
// matched pair. threshold is a fraction (0.03).
Comparison compare_results(const std::vector<Result>& base, const std::vector<Result>& next, double threshold,
                           double alpha = kCompareAlpha, Metric metric = Metric::tpot);

// --pair-by FIELD: the runs of `runs` that differ only in FIELD, paired: BASE is the runs
// with `base_value` (empty: the value of FIELD in the first run), NEW each other value in
// turn. Throws db::UsageError for a field that is not a key field, or a base value no run has.
Comparison compare_by_field(const std::vector<Result>& runs, const std::string& field, std::string base_value,
                            double threshold, double alpha = kCompareAlpha, Metric metric = Metric::tpot);

// A change as compare's tables and warnings show it: "+1.23%"; "-" when it is not finite.
std::string format_change(double fraction);

}  // namespace db
