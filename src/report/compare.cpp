// The compare verb: BASE and NEW result files, runs matched by config key, the delta of TPOT
// (or of the energy per step, --metric energy) and a two-sided Mann-Whitney U test on the
// repetitions of every matched pair.
#include "decodebench/compare.h"
#include "decodebench/printers.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "decodebench/commands.h"
#include "decodebench/error.h"
#include "decodebench/input.h"
#include "decodebench/stability.h"
#include "decodebench/stats.h"

namespace db {
namespace {

using ordered_json = nlohmann::ordered_json;

auto tie(const RunKey& k) {
  return std::tie(k.model, k.scheme, k.group_size, k.lm_head_scheme, k.kernel, k.graph, k.adapter,
                  k.adapter_mode, k.context, k.tokens, k.sync_per_token, k.weights, k.batch);
}

const char* on_off(bool b) {
  return b ? "on" : "off";
}

ordered_json key_json(const RunKey& k) {
  ordered_json j{{"model", k.model},
                 {"scheme", k.scheme},
                 {"group_size", k.group_size},
                 {"lm_head_scheme", k.lm_head_scheme},
                 {"kernel", k.kernel},
                 {"graph", k.graph},
                 {"adapter", k.adapter},
                 {"adapter_mode", k.adapter_mode},
                 {"context", k.context},
                 {"tokens", k.tokens},
                 {"sync_per_token", k.sync_per_token},
                 {"weights", k.weights}};
  if (k.batch != 1) j["batch"] = k.batch;  // batch 1's keys as before --batch
  return j;
}

// A finite number, or null (NaN: no test, no delta).
ordered_json number(double v) {
  return std::isfinite(v) ? ordered_json(v) : ordered_json(nullptr);
}

std::string md_cell(const std::string& s) {
  return md_escape(s);
}

std::string fmt_ms(double v) {
  return std::isfinite(v) ? fmt::format("{:.3f}", v) : "-";
}
std::string fmt_joules(double v) {
  return std::isfinite(v) ? fmt::format("{:.4g}", v) : "-";
}
std::string fmt_pct(double fraction) {
  return std::isfinite(fraction) ? fmt::format("{:+.2f}%", fraction * 100) : "-";
}
std::string fmt_p(double p) {
  if (!std::isfinite(p)) return "-";
  return p >= 1e-3 ? fmt::format("{:.3f}", p) : fmt::format("{:.1e}", p);
}
// The threshold as the user typed it, give or take: 3%, 0.5%.
std::string fmt_threshold(double fraction) {
  return fmt::format("{:g}%", fraction * 100);
}

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
        fmt_pct(p.clock_gap).substr(1), new_fall > base_fall ? "NEW" : "BASE",
        new_fall > base_fall ? "BASE" : "NEW", fmt_pct(p.delta));
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
          k, metric == Metric::tpot ? "TPOT" : "J/step", fmt_pct(p.delta)));
      break;
    default:
      break;
  }
}

}  // namespace

bool RunKey::operator==(const RunKey& o) const {
  return tie(*this) == tie(o);
}
bool RunKey::operator<(const RunKey& o) const {
  return tie(*this) < tie(o);
}

RunKey run_key(const Result& r) {
  const RunConfig& c = r.config;
  RunKey k;
  k.model = c.model;
  k.scheme = c.scheme;
  k.group_size = c.group_size;
  k.lm_head_scheme = c.lm_head_scheme;
  k.kernel = c.kernel;
  k.graph = c.graph;
  k.adapter = c.adapter;
  k.adapter_mode = c.adapter_mode;
  k.context = c.context;
  k.tokens = c.tokens;
  k.sync_per_token = c.sync_per_token;
  k.weights = c.weights;
  k.batch = c.batch;
  return k;
}

std::vector<std::pair<std::string, std::string>> key_fields(const RunKey& k) {
  return {{"model", k.model},
          {"scheme", k.scheme},
          {"group_size", std::to_string(k.group_size)},
          {"lm_head_scheme", k.lm_head_scheme},
          {"kernel", k.kernel},
          {"graph", on_off(k.graph)},
          {"adapter", k.adapter},
          {"adapter_mode", k.adapter_mode},
          {"context", std::to_string(k.context)},
          {"tokens", std::to_string(k.tokens)},
          {"sync_per_token", on_off(k.sync_per_token)},
          {"weights", k.weights},
          {"batch", std::to_string(k.batch)}};
}

std::string to_string(const RunKey& k) {
  std::string s;
  for (const auto& [name, value] : key_fields(k))
    if (name != "batch" || k.batch != 1)
      s += fmt::format("{}{}={}", s.empty() ? "" : " ", name, value.empty() ? "-" : value);
  return s;
}

const std::vector<std::string>& key_field_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& [name, value] : key_fields(RunKey{})) n.push_back(name);
    return n;
  }();
  return names;
}

std::string key_value(const RunKey& k, const std::string& field) {
  for (const auto& [name, value] : key_fields(k))
    if (name == field) return value;
  return "";
}

RunKey without_field(RunKey k, const std::string& field) {
  if (field == "model") k.model.clear();
  if (field == "scheme") k.scheme.clear();
  if (field == "group_size") k.group_size = 0;
  if (field == "lm_head_scheme") k.lm_head_scheme.clear();
  if (field == "kernel") k.kernel.clear();
  if (field == "graph") k.graph = false;
  if (field == "adapter") k.adapter.clear();
  if (field == "adapter_mode") k.adapter_mode.clear();
  if (field == "context") k.context = 0;
  if (field == "tokens") k.tokens = 0;
  if (field == "sync_per_token") k.sync_per_token = false;
  if (field == "weights") k.weights.clear();
  if (field == "batch") k.batch = 1;
  return k;
}

double min_attainable_p(size_t na, size_t nb) {
  if (na == 0 || nb == 0) return 1;
  double c = 1;  // C(na + nb, na), in floating point (it only has to beat 2 / alpha)
  for (size_t i = 1; i <= std::min(na, nb); ++i)
    c = c * static_cast<double>(na + nb - std::min(na, nb) + i) / i;
  return std::min(1.0, 2 / c);
}

namespace {

// P(U <= u) for sizes m and n without ties: the number of orderings of m a's and n b's with
// U(a) = k, for every k, by the recursion on the largest value (an a adds n to U, a b adds 0).
double exact_cdf(size_t m, size_t n, double u) {
  const size_t max_u = m * n;
  // f[i][k] for the current n: orderings of i a's and j b's with U = k.
  std::vector<std::vector<double>> f(m + 1, std::vector<double>(max_u + 1, 0.0));
  for (size_t i = 0; i <= m; ++i) f[i][0] = 1;  // j = 0: U = 0
  for (size_t j = 1; j <= n; ++j) {
    std::vector<std::vector<double>> g(m + 1, std::vector<double>(max_u + 1, 0.0));
    g[0][0] = 1;
    for (size_t i = 1; i <= m; ++i)
      for (size_t k = 0; k <= i * j; ++k) g[i][k] = f[i][k] + (k >= j ? g[i - 1][k - j] : 0.0);
    f = std::move(g);
  }
  double total = 0, below = 0;
  for (size_t k = 0; k <= max_u; ++k) {
    total += f[m][k];
    if (static_cast<double>(k) <= u + 1e-9) below += f[m][k];
  }
  return below / total;
}

}  // namespace

MannWhitney mann_whitney(const std::vector<double>& a, const std::vector<double>& b) {
  // Pool the samples (NaN values cannot be ranked: left out), sort, give each tied group
  // its mid-rank.
  std::vector<std::pair<double, bool>> pooled;  // (value, from a)
  pooled.reserve(a.size() + b.size());
  for (double v : a)
    if (!std::isnan(v)) pooled.emplace_back(v, true);
  const size_t na = pooled.size();
  for (double v : b)
    if (!std::isnan(v)) pooled.emplace_back(v, false);
  const size_t nb = pooled.size() - na;
  MannWhitney r;
  if (na == 0 || nb == 0) {
    r.u = r.z = r.p = std::nan("");
    return r;
  }
  std::sort(
      pooled.begin(), pooled.end(),
      [](const std::pair<double, bool>& x, const std::pair<double, bool>& y) { return x.first < y.first; });
  const double n = static_cast<double>(na + nb);
  double rank_sum_a = 0, ties = 0;  // ties: sum of t^3 - t over tied groups
  for (size_t i = 0; i < pooled.size();) {
    size_t j = i;
    while (j < pooled.size() && pooled[j].first == pooled[i].first) ++j;
    const double t = static_cast<double>(j - i);
    const double mid_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;  // ranks i+1..j
    for (size_t k = i; k < j; ++k)
      if (pooled[k].second) rank_sum_a += mid_rank;
    ties += t * t * t - t;
    i = j;
  }
  const double dna = static_cast<double>(na), dnb = static_cast<double>(nb);
  r.u = rank_sum_a - dna * (dna + 1) / 2;
  const double mu = dna * dnb / 2;
  if (ties == 0 && na + nb <= kExactMannWhitney) {
    // U is symmetric about mu: p = 2 P(U <= min(u, mn - u)).
    r.exact = true;
    const double lo = std::min(r.u, dna * dnb - r.u);
    r.p = std::min(1.0, 2 * exact_cdf(na, nb, lo));
    const double sd = std::sqrt(dna * dnb * (n + 1) / 12);
    r.z = (r.u - mu) / sd;
    return r;
  }
  const double var = dna * dnb / 12 * ((n + 1) - ties / (n * (n - 1)));
  if (!(var > 0)) {  // every value tied (or n = 2 with one tie): no evidence either way
    r.z = 0;
    r.p = 1;
    return r;
  }
  const double d = r.u - mu;
  const double mag = std::max(0.0, std::fabs(d) - 0.5) / std::sqrt(var);
  r.z = d < 0 ? -mag : mag;
  r.p = std::min(1.0, std::erfc(mag / std::sqrt(2.0)));
  return r;
}

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

namespace {

// The note of a pair: its device, settings, kernel shapes and run warnings, in that order.
std::string pair_note(const ComparedPair& p) {
  std::string s = p.device_note;
  if (!p.settings_note.empty())
    s += std::string(s.empty() ? "" : "; ") + "settings differ: " + p.settings_note;
  if (!p.shapes_note.empty()) s += std::string(s.empty() ? "" : "; ") + "kernel shapes: " + p.shapes_note;
  for (const std::string& w : p.run_warnings) s += (s.empty() ? "" : "; ") + w;
  return s;
}

std::string fmt_noise(double a, double b) {
  return fmt::format("{:.2f}% / {:.2f}%", 100 * a, 100 * b);
}

}  // namespace

std::string format_comparison_md(const Comparison& c) {
  // The table shows model, scheme, kernel, graph, context and tokens. The other key fields
  // get a column only when they tell apart rows that those show alike (e.g. a
  // --sync-per-token run beside the same run without it); it lists the fields that do.
  // A batch column joins them when any pair ran at a batch other than 1.
  const bool batched =
      std::any_of(c.pairs.begin(), c.pairs.end(), [](const ComparedPair& p) { return p.key.batch != 1; });
  std::set<std::string> shown = {"model", "scheme", "kernel", "graph", "context", "tokens"};
  if (batched) shown.insert("batch");
  std::map<std::vector<std::string>, std::vector<std::vector<std::pair<std::string, std::string>>>> alike;
  for (const ComparedPair& p : c.pairs) {
    std::vector<std::string> visible = {p.label};
    auto fields = key_fields(p.key);
    for (const auto& [name, value] : fields)
      if (shown.count(name)) visible.push_back(value);
    alike[visible].push_back(std::move(fields));
  }
  std::set<std::string> varies;
  for (const auto& [visible, rows] : alike) {
    (void)visible;
    for (size_t f = 0; f < rows.front().size(); ++f)
      for (const auto& row : rows)
        if (!shown.count(row[f].first) && row[f].second != rows.front()[f].second)
          varies.insert(row[f].first);
  }
  std::vector<std::string> varying;  // in key order
  for (const auto& [name, value] : key_fields(RunKey{}))
    if (varies.count(name)) varying.push_back(name);
  const bool paired =
      std::any_of(c.pairs.begin(), c.pairs.end(), [](const ComparedPair& p) { return !p.label.empty(); });

  std::string out =
      std::string(paired ? "| pair " : "") + "| model | scheme | kernel | graph | context | tokens |" +
      std::string(batched ? " batch |" : "") + std::string(varying.empty() ? "" : " other key |") +
      (c.metric == Metric::tpot ? " base TPOT ms | new TPOT ms |" : " base J/step | new J/step |") +
      " delta | noise base / new | n base / new | p | verdict | note |\n";
  out += std::string(paired ? "|---" : "") + "|---|---|---|---|---:|---:|" +
         std::string(batched ? "---:|" : "") + std::string(varying.empty() ? "" : "---|") +
         "---:|---:|---:|---:|---:|---:|---|---|\n";
  for (const ComparedPair& p : c.pairs) {
    const RunKey& k = p.key;
    if (paired) out += "| " + md_cell(p.label) + " ";
    out += fmt::format("| {} | {} | {} | {} | {} | {} |", md_cell(k.model.empty() ? "-" : k.model),
                       md_cell(k.scheme.empty() ? "-" : k.scheme), md_cell(k.kernel.empty() ? "-" : k.kernel),
                       on_off(k.graph), k.context, k.tokens);
    if (batched) out += fmt::format(" {} |", k.batch);
    if (!varying.empty()) {
      std::string other;
      for (const auto& [name, value] : key_fields(k))
        if (std::find(varying.begin(), varying.end(), name) != varying.end())
          other += fmt::format("{}{}={}", other.empty() ? "" : " ", name, value.empty() ? "-" : value);
      out += " " + md_cell(other) + " |";
    }
    const bool tpot = c.metric == Metric::tpot;
    out += fmt::format(" {} | {} | {} | {} | {} / {} | {} | {} | {} |\n",
                       tpot ? fmt_ms(p.base_tpot_ms) : fmt_joules(p.base_j_per_step),
                       tpot ? fmt_ms(p.new_tpot_ms) : fmt_joules(p.new_j_per_step), fmt_pct(p.delta),
                       fmt_noise(p.base_noise, p.new_noise), p.base_samples.size(), p.new_samples.size(),
                       fmt_p(p.test.p), to_string(p.verdict), md_cell(pair_note(p)));
  }
  std::string others;
  for (Verdict v : {Verdict::unconfirmed, Verdict::too_few, Verdict::unstable, Verdict::untested})
    if (c.count(v)) others += fmt::format(", {} {}", c.count(v), to_string(v));
  out += fmt::format(
      "\n{} matched: {} regressed, {} improved, {} same, {} noise{} (threshold {}, two-sided Mann-Whitney U "
      "on {}, alpha {:g})\n",
      c.pairs.size(), c.count(Verdict::regressed), c.count(Verdict::improved), c.count(Verdict::same),
      c.count(Verdict::noise), others, fmt_threshold(c.threshold),
      c.metric == Metric::tpot ? "repetition medians" : "repetition J/step (--metric energy)", c.alpha);
  const auto unmatched = [&](const char* side, const std::vector<RunKey>& keys) {
    if (keys.empty()) {
      out += fmt::format("\nUnmatched in {}: none\n", side);
      return;
    }
    out += fmt::format("\nUnmatched in {} ({}):\n", side, keys.size());
    for (const RunKey& k : keys) out += "- " + to_string(k) + "\n";
  };
  unmatched("BASE", c.unmatched_base);
  unmatched("NEW", c.unmatched_new);
  const std::vector<std::string> why = c.incomplete();
  if (c.count(Verdict::regressed) > 0)
    out += fmt::format("\nGate: regressed (exit 1)\n");
  else if (!why.empty())
    out += fmt::format("\nGate: incomplete (exit {}): {}\n", kExitIncomplete, fmt::join(why, "; "));
  else
    out += "\nGate: pass (exit 0)\n";
  return out;
}

std::string format_comparison_json(const Comparison& c) {
  ordered_json j;
  j["metric"] = to_string(c.metric);
  j["threshold"] = c.threshold;
  j["alpha"] = c.alpha;
  j["pairs"] = ordered_json::array();
  const bool tpot = c.metric == Metric::tpot;
  for (const ComparedPair& p : c.pairs) {
    j["pairs"].push_back(
        ordered_json{{"key", key_json(p.key)},
                     {"label", p.label},
                     {"base_runs", p.base_runs},
                     {"new_runs", p.new_runs},
                     {"base_tpot_ms", number(p.base_tpot_ms)},
                     {"new_tpot_ms", number(p.new_tpot_ms)},
                     {"base_j_per_step", number(p.base_j_per_step)},
                     {"new_j_per_step", number(p.new_j_per_step)},
                     {"delta", number(p.delta)},
                     {tpot ? "base_repetition_medians_ms" : "base_repetition_j_per_step", p.base_samples},
                     {tpot ? "new_repetition_medians_ms" : "new_repetition_j_per_step", p.new_samples},
                     {"base_noise", number(p.base_noise)},
                     {"new_noise", number(p.new_noise)},
                     {"base_run_spread", number(p.base_run_spread)},
                     {"new_run_spread", number(p.new_run_spread)},
                     {"u", number(p.test.u)},
                     {"z", number(p.test.z)},
                     {"p_value", number(p.test.p)},
                     {"exact", p.test.exact},
                     {"min_p", number(p.min_p)},
                     {"significant", p.significant},
                     {"verdict", to_string(p.verdict)},
                     {"unstable_why", p.unstable_why},
                     {"untested_why", p.untested_why},
                     {"clock_gap", number(p.clock_gap)},
                     {"base_device", p.base_device},
                     {"new_device", p.new_device},
                     {"base_peak_read_GBps", number(p.base_peak_read_GBps)},
                     {"new_peak_read_GBps", number(p.new_peak_read_GBps)},
                     {"device_note", p.device_note},
                     {"settings_note", p.settings_note},
                     {"shapes_note", p.shapes_note},
                     {"run_warnings", p.run_warnings}});
  }
  j["unmatched_base"] = ordered_json::array();
  for (const RunKey& k : c.unmatched_base) j["unmatched_base"].push_back(key_json(k));
  j["unmatched_new"] = ordered_json::array();
  for (const RunKey& k : c.unmatched_new) j["unmatched_new"].push_back(key_json(k));
  j["base_errors"] = c.base_errors;
  j["new_errors"] = c.new_errors;
  j["regressed"] = c.count(Verdict::regressed);
  j["improved"] = c.count(Verdict::improved);
  j["incomplete"] = c.incomplete();
  j["exit_code"] = c.exit_code();
  return j.dump(2) + "\n";
}

int cmd_compare(const CompareSpec& spec) {
  // Unreadable or invalid input is bad input here (exit 2), never a failed comparison (1,
  // which means "regressed"): whatever reading throws becomes a db::UsageError. Error
  // entries (failed sweep instances) are skipped with a warning each, and counted: the gate
  // fails closed on them.
  int errors = 0;
  const auto read = [&errors](const std::string& path) {
    ResultsAndErrors r;
    try {
      r = read_results_and_errors(path);
    } catch (const UsageError&) {
      throw;
    } catch (const std::bad_alloc&) {
      throw UsageError(fmt::format("results {}: out of host memory reading it", path));
    } catch (const std::exception& e) {
      throw UsageError(e.what());
    }
    for (const std::string& w : r.warnings) warn_line(w);
    for (const ErrorEntry& e : r.errors)
      warn("{}: skipping an error entry ({}): {}", e.origin, error_entry_summary(e), printable(e.error, 500));
    errors = static_cast<int>(r.errors.size());
    return std::move(r.results);
  };
  const Metric metric = spec.metric == "energy" ? Metric::energy : Metric::tpot;
  Comparison c;
  if (!spec.pair_by.empty()) {
    std::vector<Result> all;
    int all_errors = 0;
    for (const std::string& f : spec.files) {
      std::vector<Result> rs = read(f);
      all_errors += errors;
      all.insert(all.end(), std::make_move_iterator(rs.begin()), std::make_move_iterator(rs.end()));
    }
    c = compare_by_field(all, spec.pair_by, spec.base_value, spec.threshold, kCompareAlpha, metric);
    c.base_errors = all_errors;
  } else {
    if (spec.files.size() != 2)
      usage_fail(
          "compare takes BASE and NEW (two files), or --pair-by FIELD with one or more files; got {} file{}",
          spec.files.size(), spec.files.size() == 1 ? "" : "s");
    const std::vector<Result> b = read(spec.files[0]);
    const int base_errors = errors;
    const std::vector<Result> n = read(spec.files[1]);
    c = compare_results(b, n, spec.threshold, kCompareAlpha, metric);
    c.base_errors = base_errors;
    c.new_errors = errors;
  }
  c.allow_missing = spec.allow_missing;
  for (const std::string& w : c.warnings) warn_line(w);
  std::fflush(stderr);
  std::cout << (spec.format == "json" ? format_comparison_json(c) : format_comparison_md(c)) << std::flush;
  return c.exit_code();
}

}  // namespace db
