// The compare verb: BASE and NEW result files, runs matched by config key, TPOT delta and a
// two-sided Mann-Whitney U test on the per-token samples of every matched pair.
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

namespace db {
namespace {

using ordered_json = nlohmann::ordered_json;

auto tie(const RunKey& k) {
  return std::tie(k.model, k.scheme, k.group_size, k.lm_head_scheme, k.kernel, k.graph, k.adapter,
                  k.adapter_mode, k.context, k.tokens, k.sync_per_token, k.weights);
}

const char* on_off(bool b) {
  return b ? "on" : "off";
}

ordered_json key_json(const RunKey& k) {
  return ordered_json{{"model", k.model},
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

// The last run of each key, keys in order of first appearance; duplicates warned about.
std::vector<std::pair<RunKey, const Result*>> last_by_key(const std::vector<Result>& runs, const char* side,
                                                          std::vector<std::string>& warnings) {
  std::vector<std::pair<RunKey, const Result*>> out;
  std::map<RunKey, size_t> index;
  std::map<RunKey, int> count;
  for (const Result& r : runs) {
    const RunKey k = run_key(r);
    const auto [it, inserted] = index.emplace(k, out.size());
    if (inserted)
      out.emplace_back(k, &r);
    else
      out[it->second].second = &r;
    ++count[k];
  }
  for (const auto& [k, r] : out) {
    (void)r;
    if (count[k] > 1)
      warnings.push_back(
          fmt::format("{} has {} runs with key {}: keeping the last", side, count[k], to_string(k)));
  }
  return out;
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
          {"weights", k.weights}};
}

std::string to_string(const RunKey& k) {
  std::string s;
  for (const auto& [name, value] : key_fields(k))
    s += fmt::format("{}{}={}", s.empty() ? "" : " ", name, value.empty() ? "-" : value);
  return s;
}

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

double parse_threshold(const std::string& text) {
  const auto bad = [&]() {
    usage_fail("--threshold '{}': expected a non-negative percentage such as 3% or 3 (both mean 3 percent)",
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
  }
  return "?";
}

int Comparison::count(Verdict v) const {
  return static_cast<int>(
      std::count_if(pairs.begin(), pairs.end(), [&](const ComparedPair& p) { return p.verdict == v; }));
}

Comparison compare_results(const std::vector<Result>& base, const std::vector<Result>& next, double threshold,
                           double alpha) {
  Comparison c;
  c.threshold = threshold;
  c.alpha = alpha;
  const auto b = last_by_key(base, "BASE", c.warnings);
  const auto n = last_by_key(next, "NEW", c.warnings);
  std::map<RunKey, const Result*> new_by_key;
  for (const auto& [k, r] : n) new_by_key.emplace(k, r);

  std::set<RunKey> matched;
  for (const auto& [k, old_run] : b) {
    const auto it = new_by_key.find(k);
    if (it == new_by_key.end()) {
      c.unmatched_base.push_back(k);
      continue;
    }
    matched.insert(k);
    const Result& o = *old_run;
    const Result& r = *it->second;
    ComparedPair p;
    p.key = k;
    p.base_tpot_ms = o.timing.tpot_ms.median;
    p.new_tpot_ms = r.timing.tpot_ms.median;
    p.delta = p.base_tpot_ms > 0 ? (p.new_tpot_ms - p.base_tpot_ms) / p.base_tpot_ms : std::nan("");
    p.test = mann_whitney(o.timing.samples_ms, r.timing.samples_ms);
    p.significant = p.test.p < alpha;  // false for NaN
    p.base_device = o.device.name;
    p.new_device = r.device.name;
    p.base_peak_read_GBps = o.device.peak_read_GBps;
    p.new_peak_read_GBps = r.device.peak_read_GBps;
    p.device_note = device_note(o, r);

    // z > 0: BASE's samples tend to be larger, NEW is faster.
    const bool new_slower = p.significant && p.test.z < 0;
    const bool new_faster = p.significant && p.test.z > 0;
    if (!std::isfinite(p.delta) || std::fabs(p.delta) <= threshold)
      p.verdict = Verdict::same;
    else if (std::isnan(p.test.p))
      p.verdict = Verdict::untested;
    else if (p.delta > threshold && new_slower)
      p.verdict = Verdict::regressed;
    else if (p.delta < -threshold && new_faster)
      p.verdict = Verdict::improved;
    else
      p.verdict = Verdict::noise;

    if (!p.device_note.empty()) c.warnings.push_back(fmt::format("{}: {}", to_string(k), p.device_note));
    if (p.verdict == Verdict::untested)
      c.warnings.push_back(fmt::format(
          "{}: TPOT changed by {} but a side has no per-token samples (timing.samples_ms): not tested",
          to_string(k), fmt_pct(p.delta)));
    c.pairs.push_back(std::move(p));
  }
  for (const auto& [k, r] : n) {
    (void)r;
    if (!matched.count(k)) c.unmatched_new.push_back(k);
  }
  return c;
}

std::string format_comparison_md(const Comparison& c) {
  // The table shows model, scheme, kernel, graph, context and tokens. The other key fields
  // get a column only when they tell apart rows that those show alike (e.g. a
  // --sync-per-token run beside the same run without it); it lists the fields that do.
  const std::set<std::string> shown = {"model", "scheme", "kernel", "graph", "context", "tokens"};
  std::map<std::vector<std::string>, std::vector<std::vector<std::pair<std::string, std::string>>>> alike;
  for (const ComparedPair& p : c.pairs) {
    std::vector<std::string> visible;
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

  std::string out = "| model | scheme | kernel | graph | context | tokens |" +
                    std::string(varying.empty() ? "" : " other key |") +
                    " base TPOT ms | new TPOT ms | delta | p | verdict | device note |\n";
  out += "|---|---|---|---|---:|---:|" + std::string(varying.empty() ? "" : "---|") +
         "---:|---:|---:|---:|---|---|\n";
  for (const ComparedPair& p : c.pairs) {
    const RunKey& k = p.key;
    out += fmt::format("| {} | {} | {} | {} | {} | {} |", md_cell(k.model), md_cell(k.scheme),
                       md_cell(k.kernel), on_off(k.graph), k.context, k.tokens);
    if (!varying.empty()) {
      std::string other;
      for (const auto& [name, value] : key_fields(k))
        if (std::find(varying.begin(), varying.end(), name) != varying.end())
          other += fmt::format("{}{}={}", other.empty() ? "" : " ", name, value.empty() ? "-" : value);
      out += " " + md_cell(other) + " |";
    }
    out += fmt::format(" {} | {} | {} | {} | {} | {} |\n", fmt_ms(p.base_tpot_ms), fmt_ms(p.new_tpot_ms),
                       fmt_pct(p.delta), fmt_p(p.test.p), to_string(p.verdict), md_cell(p.device_note));
  }
  out += fmt::format(
      "\n{} matched: {} regressed, {} improved, {} same, {} noise{} (threshold {}, two-sided Mann-Whitney U, "
      "alpha {:g})\n",
      c.pairs.size(), c.count(Verdict::regressed), c.count(Verdict::improved), c.count(Verdict::same),
      c.count(Verdict::noise),
      c.count(Verdict::untested) ? fmt::format(", {} untested", c.count(Verdict::untested)) : "",
      fmt_threshold(c.threshold), c.alpha);
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
  return out;
}

std::string format_comparison_json(const Comparison& c) {
  ordered_json j;
  j["threshold"] = c.threshold;
  j["alpha"] = c.alpha;
  j["pairs"] = ordered_json::array();
  for (const ComparedPair& p : c.pairs) {
    j["pairs"].push_back(ordered_json{{"key", key_json(p.key)},
                                      {"base_tpot_ms", number(p.base_tpot_ms)},
                                      {"new_tpot_ms", number(p.new_tpot_ms)},
                                      {"delta", number(p.delta)},
                                      {"u", number(p.test.u)},
                                      {"z", number(p.test.z)},
                                      {"p_value", number(p.test.p)},
                                      {"significant", p.significant},
                                      {"verdict", to_string(p.verdict)},
                                      {"base_device", p.base_device},
                                      {"new_device", p.new_device},
                                      {"base_peak_read_GBps", number(p.base_peak_read_GBps)},
                                      {"new_peak_read_GBps", number(p.new_peak_read_GBps)},
                                      {"device_note", p.device_note}});
  }
  j["unmatched_base"] = ordered_json::array();
  for (const RunKey& k : c.unmatched_base) j["unmatched_base"].push_back(key_json(k));
  j["unmatched_new"] = ordered_json::array();
  for (const RunKey& k : c.unmatched_new) j["unmatched_new"].push_back(key_json(k));
  j["regressed"] = c.count(Verdict::regressed);
  j["improved"] = c.count(Verdict::improved);
  return j.dump(2) + "\n";
}

int cmd_compare(const std::string& base, const std::string& next, double threshold,
                const std::string& format) {
  // Unreadable or invalid input is bad input here (exit 2), never a failed comparison (1,
  // which means "regressed"): whatever reading throws becomes a db::UsageError.
  // Error entries (failed sweep instances) are skipped with a warning each.
  const auto read = [](const std::string& path) {
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
    return std::move(r.results);
  };
  const std::vector<Result> b = read(base);
  const std::vector<Result> n = read(next);
  const Comparison c = compare_results(b, n, threshold);
  for (const std::string& w : c.warnings) warn_line(w);
  std::cout << (format == "json" ? format_comparison_json(c) : format_comparison_md(c)) << std::flush;
  return c.count(Verdict::regressed) > 0 ? 1 : 0;
}

}  // namespace db
