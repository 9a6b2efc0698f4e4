// The compare verb: two sets of results, matched by config key, with the TPOT delta of each
// matched pair and whether the per-token samples say it is real (two-sided Mann-Whitney U
// test). Pure functions: reading the files, printing and the exit code live in compare.cpp's
// cmd_compare.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "decodebench/result.h"

namespace db {

// What makes two runs the same experiment: the config fields below. Not the device: runs
// on different devices are matched and the difference is reported beside the pair.
struct RunKey {
  std::string model;
  std::string scheme;
  int group_size = 0;
  std::string lm_head_scheme;
  std::string kernel;
  bool graph = false;
  std::string adapter;
  std::string adapter_mode;
  int64_t context = 0;
  int64_t tokens = 0;
  bool sync_per_token = false;
  std::string weights;

  bool operator==(const RunKey& o) const;
  bool operator!=(const RunKey& o) const { return !(*this == o); }
  bool operator<(const RunKey& o) const;
};

RunKey run_key(const Result& r);

// The key's fields as (name, value) pairs in the order above; names are the config field
// names, values as the md table shows them (booleans "on"/"off").
std::vector<std::pair<std::string, std::string>> key_fields(const RunKey& k);

// "model=8b-int4 scheme=int4 group_size=128 ...": every field, one line.
std::string to_string(const RunKey& k);

// Two-sided Mann-Whitney U test of samples a against samples b, normal approximation with
// the tie correction and a continuity correction of 0.5 (as scipy.stats.mannwhitneyu with
// method="asymptotic"):
//   U = R_a - n_a(n_a+1)/2       (R_a: sum of a's mid-ranks in the pooled samples)
//   sigma^2 = n_a n_b / 12 * ((n+1) - sum(t^3 - t) / (n(n-1)))   (t: sizes of tied groups)
//   z = max(0, |U - n_a n_b / 2| - 0.5) / sigma,   p = erfc(z / sqrt(2))
// p is NaN when either sample is empty, 1 when every value is tied.
struct MannWhitney {
  double u = 0;  // U of a: the number of (a_i, b_j) pairs with a_i > b_j, ties counting 1/2
  double z = 0;  // signed: > 0 when a tends to be larger than b
  double p = 0;  // two-sided
};
MannWhitney mann_whitney(const std::vector<double>& a, const std::vector<double>& b);
inline double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b) {
  return mann_whitney(a, b).p;
}

// --threshold: "3%" and "3" both mean 3 percent (so "0.5" is half a percent, not 50%).
// Returns the fraction (0.03). A non-negative decimal number, optionally followed by one '%';
// anything else throws db::UsageError.
double parse_threshold(const std::string& text, const char* option = "--threshold");

inline constexpr double kCompareAlpha = 0.01;

enum class Verdict {
  same,       // |delta| <= threshold
  noise,      // |delta| > threshold, but the samples do not show it (p >= alpha)
  improved,   // delta < -threshold, significant, NEW faster
  regressed,  // delta > threshold, significant, NEW slower
  untested,   // |delta| > threshold and a side has no per-token samples to test
};
const char* to_string(Verdict v);

struct ComparedPair {
  RunKey key;
  double base_tpot_ms = 0;  // timing.tpot_ms.median
  double new_tpot_ms = 0;
  double delta = 0;          // (new - base) / base; NaN when base is not positive
  MannWhitney test;          // base samples against new samples
  bool significant = false;  // p < alpha, in the direction of delta
  Verdict verdict = Verdict::same;
  std::string base_device, new_device;  // device.name
  double base_peak_read_GBps = 0, new_peak_read_GBps = 0;
  std::string device_note;  // "" when the devices match
};

struct Comparison {
  double threshold = 0;  // fraction
  double alpha = kCompareAlpha;
  std::vector<ComparedPair> pairs;     // in BASE's order
  std::vector<RunKey> unmatched_base;  // in BASE's order
  std::vector<RunKey> unmatched_new;   // in NEW's order
  // One line each, without a prefix: duplicate keys, device differences, untested pairs.
  std::vector<std::string> warnings;

  int count(Verdict v) const;
};

// Matches base and next by run_key (a key repeated within one side: the last run wins, with
// a warning) and judges every matched pair. threshold is a fraction (0.03).
Comparison compare_results(const std::vector<Result>& base, const std::vector<Result>& next, double threshold,
                           double alpha = kCompareAlpha);

// md: a GitHub table of the pairs, a summary line, then the unmatched keys of each side.
// json: {threshold, alpha, pairs, unmatched_base, unmatched_new, regressed, improved}.
// Both end with a newline.
std::string format_comparison_md(const Comparison& c);
std::string format_comparison_json(const Comparison& c);

}  // namespace db
