// The compare verb's judgement (compare.h): BASE's and NEW's runs matched by config key, the
// delta of TPOT (or of the energy per step, --metric energy) and a two-sided Mann-Whitney U
// test on the repetitions of every matched pair, judged into a verdict and the gate's outcome.
#include "decodebench/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "decodebench/energy.h"
#include "decodebench/error.h"
#include "decodebench/stability.h"
#include "decodebench/stats.h"

namespace db {

std::string format_change(double fraction) {
  return std::isfinite(fraction) ? fmt::format("{:+.2f}%", fraction * 100) : "-";
}

namespace {

// The note beside a pair whose devices are not the same; "" when they are.
std::string device_note(const Result& base, const Result& next) {
  std::vector<std::string> notes;
  if (base.device.name != next.device.name)
    notes.push_back(fmt::format(
        "devices differ ({} vs {}): the byte law's premises may differ; do not read this as a code change",
        base.device.name.empty() ? "unknown" : base.device.name,
        next.device.name.empty() ? "unknown" : next.device.name));
  const double a = base.device.peak_read_GBps, b = next.device.peak_read_GBps;
  if (std::isfinite(a) && std::isfinite(b) && a > 0 && b > 0 && std::fabs(b - a) / a > 0.05)
    notes.push_back(fmt::format("peak read bandwidth differs by {:+.1f}% ({:.1f} vs {:.1f} GB/s)",
                                (b - a) / a * 100, a, b));
  std::string s;
  for (const std::string& n : notes) s += (s.empty() ? "" : "; ") + n;
  return s;
}

// The runs of each key, keys in order of first appearance.
std::vector<std::pair<RunKey, std::vector<const Result*>>> by_key(const std::vector<const Result*>& runs) {
  std::vector<std::pair<RunKey, std::vector<const Result*>>> out;
  std::map<RunKey, size_t> index;
  for (const Result* r : runs) {
    const RunKey k = run_key(*r);
    const auto [it, inserted] = index.emplace(k, out.size());
    if (inserted) out.emplace_back(k, std::vector<const Result*>{});
    out[it->second].second.push_back(r);
  }
  return out;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The settings two runs of one key must share for their difference to be the code's: the
// config outside the key, the backend and the build type. "" when they agree.
std::string settings_difference(const Result& a, const Result& b) {
  std::vector<std::string> d;
  const auto differ = [&](const char* name, const auto& x, const auto& y) {
    if (x != y) d.push_back(fmt::format("{} {} vs {}", name, x, y));
  };
  const RunConfig &x = a.config, &y = b.config;
  differ("arch", x.arch, y.arch);
  differ("seed", x.seed, y.seed);
  differ("zero_point", x.zero_point, y.zero_point);
  differ("adapter_rank", x.adapter_rank, y.adapter_rank);
  differ("adapter_scale", x.adapter_scale, y.adapter_scale);
  if (x.adapter_targets != y.adapter_targets) d.push_back("adapter_targets differ");
  differ("warmup", x.warmup, y.warmup);
  differ("repeat", x.repeat, y.repeat);
  differ("max_noise", x.max_noise, y.max_noise);
  differ("max_time_s", x.max_time_s, y.max_time_s);
  differ("params", x.params, y.params);
  differ("backend", a.device.backend, b.device.backend);
  differ("build_type", a.tool.build_type, b.tool.build_type);
  std::string s;
  for (const std::string& e : d) s += (s.empty() ? "" : ", ") + e;
  return s;
}

// The shapes were timed at load on each side's machine (docs/kernels.md): shapes within a few
// percent of each other can swap between runs of the same code. "" when every run of both
// sides chose the same; else the choices of each side, "BASE gate_up m4u1b1 vs NEW gate_up
// m4u1b2" (a side's distinct choices joined by " / ").
std::string shapes_difference(const std::vector<const Result*>& base,
                              const std::vector<const Result*>& next) {
  const auto choices = [](const std::vector<const Result*>& side) {
    std::vector<std::string> seen;
    for (const Result* r : side) {
      std::string c;
      for (const std::string& s : kernel_shape_choices(r->config)) c += (c.empty() ? "" : ", ") + s;
      if (std::find(seen.begin(), seen.end(), c) == seen.end()) seen.push_back(c);
    }
    std::string s;
    for (const std::string& c : seen) s += (s.empty() ? "" : " / ") + (c.empty() ? "none" : c);
    return s;
  };
  const std::string a = choices(base), b = choices(next);
  if (a == b) return "";
  return fmt::format("BASE {} vs NEW {}", a, b);
}

// A run's figure of the metric and its repetitions: TPOT's median and repetition medians, or
// the energy's median J/step and each repetition's J/step. Empty `missing` when it has them;
// otherwise why not.
struct MetricOf {
  double median = std::nan("");
  std::vector<double> repetitions;
  std::string missing;
  std::string noisy;  // energy: its repetitions' spread rules a verdict out
};

MetricOf metric_of(const Result& r, Metric metric) {
  MetricOf m;
  if (metric == Metric::tpot) {
    m.median = r.timing.tpot_ms.median;
    m.repetitions = repetition_medians(r);
    return m;
  }
  m.repetitions = repetition_j_per_step(r);
  if (m.repetitions.empty() || !r.energy.j_per_step.median) {
    m.missing = fmt::format("no energy measured ({})", r.energy.reason.empty() ? "none" : r.energy.reason);
    m.repetitions.clear();
    return m;
  }
  m.median = *r.energy.j_per_step.median;
  const double spread = repetition_noise(m.repetitions);
  if (spread > kNoisyRun)
    m.noisy = fmt::format(
        "noisy: the J/step of the {} repetitions spread {:.1f}% (relative stdev), more than {:.0f}%",
        m.repetitions.size(), 100 * spread, 100 * kNoisyRun);
  return m;
}

double median_energy(const std::vector<const Result*>& runs) {
  std::vector<double> v;
  for (const Result* r : runs) {
    if (!r->energy.reason.empty() || !r->energy.j_per_step.median) return std::nan("");
    v.push_back(*r->energy.j_per_step.median);
  }
  return median_of(v);
}

// Judges one matched key: `base` and `next` are every run of it on each side.
ComparedPair judge(const RunKey& k, const std::vector<const Result*>& base,
                   const std::vector<const Result*>& next, double threshold, double alpha, Metric metric) {
  ComparedPair p;
  p.key = k;
  p.base_runs = static_cast<int>(base.size());
  p.new_runs = static_cast<int>(next.size());
  std::vector<double> base_medians, new_medians, base_tpots, new_tpots;
  // The SM clock's fall (the power cap's effect) on each side, the largest of its runs; any
  // other warning that can move a figure rules the pair out, and so does a run without the
  // metric (untested) or, for energy, one whose J/step spread too far.
  double base_fall = 0, new_fall = 0;
  const auto account = [&p, metric](const Result& r, const char* side, double& fall,
                                    std::vector<double>& medians, std::vector<double>& samples,
                                    std::vector<double>& tpots) {
    const RunStability s = run_stability(r);
    const MetricOf m = metric_of(r, metric);
    if (p.untested_why.empty() && !m.missing.empty()) p.untested_why = fmt::format("{} {}", side, m.missing);
    const std::string& why = !s.ruled_out.empty() ? s.ruled_out : m.noisy;
    if (p.unstable_why.empty() && !why.empty()) p.unstable_why = fmt::format("{} {}", side, why);
    fall = std::max(fall, s.sm_clock_fall);
    if (m.missing.empty()) medians.push_back(m.median);
    samples.insert(samples.end(), m.repetitions.begin(), m.repetitions.end());
    tpots.push_back(r.timing.tpot_ms.median);
    for (const std::string& w : r.timing.warnings) p.run_warnings.push_back(std::string(side) + " " + w);
  };
  for (const Result* r : base) account(*r, "BASE", base_fall, base_medians, p.base_samples, base_tpots);
  for (const Result* r : next) account(*r, "NEW", new_fall, new_medians, p.new_samples, new_tpots);
  p.base_tpot_ms = median_of(base_tpots);
  p.new_tpot_ms = median_of(new_tpots);
  p.base_j_per_step = median_energy(base);
  p.new_j_per_step = median_energy(next);
  if (!p.untested_why.empty()) {  // a side without the metric: nothing of it is tested
    base_medians.clear();
    new_medians.clear();
    p.base_samples.clear();
    p.new_samples.clear();
  }
  const double base_value = median_of(base_medians), new_value = median_of(new_medians);
  p.delta = base_value > 0 ? (new_value - base_value) / base_value : std::nan("");
  p.base_noise = repetition_noise(p.base_samples);
  p.new_noise = repetition_noise(p.new_samples);
  p.base_run_spread = base_medians.size() >= 2 ? repetition_noise(base_medians) : std::nan("");
  p.new_run_spread = new_medians.size() >= 2 ? repetition_noise(new_medians) : std::nan("");
  p.test = mann_whitney(p.base_samples, p.new_samples);
  p.min_p = min_attainable_p(p.base_samples.size(), p.new_samples.size());
  p.significant = p.test.p < alpha;  // false for NaN
  const Result& o = *base.front();
  const Result& r = *next.front();
  p.base_device = o.device.name;
  p.new_device = r.device.name;
  p.base_peak_read_GBps = o.device.peak_read_GBps;
  p.new_peak_read_GBps = r.device.peak_read_GBps;
  p.device_note = device_note(o, r);
  for (const Result* a : base)
    for (const Result* b : next)
      if (p.settings_note.empty()) p.settings_note = settings_difference(*a, *b);
  p.shapes_note = shapes_difference(base, next);

  // z > 0: BASE's measurements tend to be larger, NEW is faster.
  const bool new_slower = p.significant && p.test.z < 0;
  const bool new_faster = p.significant && p.test.z > 0;
  // A side whose SM clock fell further than the other's may owe up to that difference of its
  // time to the clock (time scales at most inversely with it): the change the code made lies
  // in [lo, hi], and a verdict must hold over the whole range.
  p.clock_gap = std::fabs(new_fall - base_fall);
  const double lo = p.delta - std::max(0.0, new_fall - base_fall);
  const double hi = p.delta + std::max(0.0, base_fall - new_fall);
  if (!p.untested_why.empty())
    p.verdict = Verdict::untested;
  else if (!p.unstable_why.empty())
    p.verdict = Verdict::unstable;
  else if (std::isnan(p.test.p))
    p.verdict = Verdict::untested;
  else if (p.min_p >= alpha)
    p.verdict = Verdict::too_few;
  else if (!std::isfinite(p.delta) || (lo >= -threshold && hi <= threshold))
    p.verdict = Verdict::same;
  else if (lo > threshold && new_slower)
    p.verdict = Verdict::regressed;
  else if (hi < -threshold && new_faster)
    p.verdict = Verdict::improved;
  else if (p.clock_gap > 0 && (std::fabs(p.delta) <= threshold || p.significant)) {
    p.verdict = Verdict::unstable;  // the verdict the figures give could be the clocks'
    p.unstable_why = fmt::format(
        "the SM clock fell {} further in {} than in {}: a change of {} cannot be told from the clocks'",
        format_change(p.clock_gap).substr(1), new_fall > base_fall ? "NEW" : "BASE",
        new_fall > base_fall ? "BASE" : "NEW", format_change(p.delta));
  } else
    p.verdict = Verdict::noise;
  // A change must stand out from run-to-run variation too, which only runs in separate
  // processes show; with one run a side it is unconfirmed.
  if (p.verdict == Verdict::regressed || p.verdict == Verdict::improved) {
    const double spread = std::max(std::isnan(p.base_run_spread) ? -1.0 : p.base_run_spread,
                                   std::isnan(p.new_run_spread) ? -1.0 : p.new_run_spread);
    if (spread < 0)
      p.verdict = Verdict::unconfirmed;
    else if (std::fabs(p.delta) <= kRunSpreads * spread)
      p.verdict = Verdict::noise;
  }
  return p;
}

void warn_about(const ComparedPair& p, Metric metric, std::vector<std::string>& warnings) {
  const std::string k = p.label.empty() ? to_string(p.key) : p.label + ": " + to_string(p.key);
  if (!p.device_note.empty()) warnings.push_back(fmt::format("{}: {}", k, p.device_note));
  if (!p.settings_note.empty())
    warnings.push_back(
        fmt::format("{}: settings differ besides the code under test ({})", k, p.settings_note));
  if (!p.shapes_note.empty())
    warnings.push_back(fmt::format(
        "{}: the batched GEMM's shapes, timed at load, differ ({}): shapes a few percent apart can swap "
        "between runs of the same code, so part of the difference may be that choice; --runs 3 counts it "
        "in the run-to-run spread",
        k, p.shapes_note));
  switch (p.verdict) {
    case Verdict::untested:
      warnings.push_back(p.untested_why.empty()
                             ? fmt::format("{}: a side has no repetitions to test: not tested", k)
                             : fmt::format("{}: {}: not tested", k, p.untested_why));
      break;
    case Verdict::too_few:
      warnings.push_back(fmt::format(
          "{}: {} and {} repetition medians cannot reach p < {:g} (at best p = {:.3f}): too few to test; "
          "raise --repeat or measure more runs (--runs)",
          k, p.base_samples.size(), p.new_samples.size(), kCompareAlpha, p.min_p));
      break;
    case Verdict::unstable:
      warnings.push_back(fmt::format("{}: unstable, not judged: {}", k, p.unstable_why));
      break;
    case Verdict::unconfirmed:
      warnings.push_back(fmt::format(
          "{}: {} changed by {} (significant within the runs' repetitions), but with one run a side that "
          "cannot be told from run-to-run variation: unconfirmed; measure with --runs 3",
          k, metric == Metric::tpot ? "TPOT" : "J/step", format_change(p.delta)));
      break;
    default:
      break;
  }
}

}  // namespace

double parse_threshold(const std::string& text, const char* option) {
  const auto bad = [&]() {
    usage_fail("{} '{}': expected a non-negative percentage such as 3% or 3 (both mean 3 percent)", option,
               text);
  };
  std::string s = text;
  if (!s.empty() && s.back() == '%') s.pop_back();
  // Digits with at most one '.', at least one digit: no sign, exponent, space or "nan".
  const size_t digits =
      static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }));
  const size_t dots = static_cast<size_t>(std::count(s.begin(), s.end(), '.'));
  if (digits == 0 || digits + dots != s.size() || dots > 1) bad();
  const double percent = std::strtod(s.c_str(), nullptr);
  if (!std::isfinite(percent) || percent < 0) bad();
  return percent / 100;
}

const char* to_string(Metric m) {
  return m == Metric::tpot ? "tpot" : "energy";
}

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::same:
      return "same";
    case Verdict::noise:
      return "noise";
    case Verdict::improved:
      return "improved";
    case Verdict::regressed:
      return "regressed";
    case Verdict::untested:
      return "untested";
    case Verdict::too_few:
      return "too few";
    case Verdict::unstable:
      return "unstable";
    case Verdict::unconfirmed:
      return "unconfirmed";
  }
  return "?";
}

bool tested(Verdict v) {
  return v == Verdict::same || v == Verdict::noise || v == Verdict::improved || v == Verdict::regressed;
}

int Comparison::count(Verdict v) const {
  return static_cast<int>(
      std::count_if(pairs.begin(), pairs.end(), [&](const ComparedPair& p) { return p.verdict == v; }));
}

std::vector<std::string> Comparison::incomplete() const {
  std::vector<std::string> why;
  if (!unmatched_base.empty() && !allow_missing)
    why.push_back(fmt::format("{} BASE key{} unmatched in NEW (--allow-missing accepts that)",
                              unmatched_base.size(), unmatched_base.size() == 1 ? "" : "s"));
  if (base_errors + new_errors > 0)
    why.push_back(fmt::format("error entries: {} in BASE, {} in NEW (failed instances measured nothing)",
                              base_errors, new_errors));
  if (pairs.empty()) why.push_back("nothing matched");
  const int differ = static_cast<int>(std::count_if(
      pairs.begin(), pairs.end(), [](const ComparedPair& p) { return !p.settings_note.empty(); }));
  if (differ > 0)
    why.push_back(fmt::format("{} pair{} with settings that differ besides the code under test", differ,
                              differ == 1 ? "" : "s"));
  if (const int n = count(Verdict::unconfirmed); n > 0)
    why.push_back(fmt::format("{} pair{} changed past the threshold in one run a side: unconfirmed (--runs)",
                              n, n == 1 ? "" : "s"));
  if (!pairs.empty() &&
      std::none_of(pairs.begin(), pairs.end(), [](const ComparedPair& p) { return tested(p.verdict); }))
    why.push_back("no pair could be tested (too few repetitions, unstable runs or no samples)");
  return why;
}

int Comparison::exit_code() const {
  if (count(Verdict::regressed) > 0) return 1;
  return incomplete().empty() ? 0 : kExitIncomplete;
}

namespace {

Comparison match(const std::vector<const Result*>& base, const std::vector<const Result*>& next,
                 double threshold, double alpha, Metric metric, const std::string& blank_field = "",
                 const std::string& label = "") {
  Comparison c;
  c.metric = metric;
  c.threshold = threshold;
  c.alpha = alpha;
  const auto keyed = [&](const std::vector<const Result*>& runs) {
    auto groups = by_key(runs);
    if (!blank_field.empty()) {  // --pair-by: the key without the paired field
      std::vector<std::pair<RunKey, std::vector<const Result*>>> merged;
      std::map<RunKey, size_t> index;
      for (auto& [k, rs] : groups) {
        const RunKey bk = without_field(k, blank_field);
        const auto [it, inserted] = index.emplace(bk, merged.size());
        if (inserted) merged.emplace_back(bk, std::vector<const Result*>{});
        auto& dst = merged[it->second].second;
        dst.insert(dst.end(), rs.begin(), rs.end());
      }
      return merged;
    }
    return groups;
  };
  const auto b = keyed(base);
  const auto n = keyed(next);
  std::map<RunKey, const std::vector<const Result*>*> new_by_key;
  for (const auto& [k, rs] : n) new_by_key.emplace(k, &rs);
  std::set<RunKey> matched;
  for (const auto& [k, rs] : b) {
    const auto it = new_by_key.find(k);
    if (it == new_by_key.end()) {
      c.unmatched_base.push_back(k);
      continue;
    }
    matched.insert(k);
    ComparedPair p = judge(k, rs, *it->second, threshold, alpha, metric);
    p.label = label;
    warn_about(p, metric, c.warnings);
    c.pairs.push_back(std::move(p));
  }
  for (const auto& [k, rs] : n) {
    (void)rs;
    if (!matched.count(k)) c.unmatched_new.push_back(k);
  }
  return c;
}

std::vector<const Result*> pointers(const std::vector<Result>& runs) {
  std::vector<const Result*> out;
  for (const Result& r : runs) out.push_back(&r);
  return out;
}

}  // namespace

Comparison compare_results(const std::vector<Result>& base, const std::vector<Result>& next, double threshold,
                           double alpha, Metric metric) {
  return match(pointers(base), pointers(next), threshold, alpha, metric);
}

Comparison compare_by_field(const std::vector<Result>& runs, const std::string& field, std::string base_value,
                            double threshold, double alpha, Metric metric) {
  const std::vector<std::string>& names = key_field_names();
  if (std::find(names.begin(), names.end(), field) == names.end()) {
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    usage_fail("--pair-by {}: not a key field (one of {})", field, list);
  }
  if (runs.empty()) usage_fail("--pair-by {}: no results to pair", field);
  std::vector<std::string> values;  // in order of first appearance
  for (const Result& r : runs) {
    const std::string v = key_value(run_key(r), field);
    if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
  }
  if (base_value.empty()) base_value = values.front();
  if (std::find(values.begin(), values.end(), base_value) == values.end())
    usage_fail("--base-value {}: no run has {} {}", base_value, field, base_value);
  std::vector<const Result*> base;
  for (const Result& r : runs)
    if (key_value(run_key(r), field) == base_value) base.push_back(&r);
  Comparison all;
  all.metric = metric;
  all.threshold = threshold;
  all.alpha = alpha;
  for (const std::string& v : values) {
    if (v == base_value) continue;
    std::vector<const Result*> next;
    for (const Result& r : runs)
      if (key_value(run_key(r), field) == v) next.push_back(&r);
    Comparison c =
        match(base, next, threshold, alpha, metric, field, fmt::format("{} {} -> {}", field, base_value, v));
    for (ComparedPair& p : c.pairs) all.pairs.push_back(std::move(p));
    // A BASE run without a partner for this value is reported once per value.
    for (const RunKey& k : c.unmatched_base) all.unmatched_base.push_back(k);
    for (const RunKey& k : c.unmatched_new) all.unmatched_new.push_back(k);
    for (std::string& w : c.warnings) all.warnings.push_back(std::move(w));
  }
  if (values.size() < 2)
    all.warnings.push_back(fmt::format("--pair-by {}: every run has {} {}", field, field, base_value));
  return all;
}

}  // namespace db
