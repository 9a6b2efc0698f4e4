// The printers of a comparison (compare_printers.h): the md table with its summary, unmatched
// keys and gate line, and the json document.
#include "decodebench/compare_printers.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "decodebench/printers.h"

namespace db {
namespace {

using ordered_json = nlohmann::ordered_json;

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
  if (k.kv_cache != "fp16") j["kv_cache"] = k.kv_cache;  // an fp16 cache's keys as before --kv-cache
  if (k.batch != 1) j["batch"] = k.batch;                // batch 1's keys as before --batch
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
std::string fmt_p(double p) {
  if (!std::isfinite(p)) return "-";
  return p >= 1e-3 ? fmt::format("{:.3f}", p) : fmt::format("{:.1e}", p);
}
// The threshold as the user typed it, give or take: 3%, 0.5%.
std::string fmt_threshold(double fraction) {
  return fmt::format("{:g}%", fraction * 100);
}

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
  // A KV cache column joins them when any pair's cache is not fp16, a batch column when any
  // pair ran at a batch other than 1.
  const bool batched =
      std::any_of(c.pairs.begin(), c.pairs.end(), [](const ComparedPair& p) { return p.key.batch != 1; });
  const bool kv = std::any_of(c.pairs.begin(), c.pairs.end(),
                              [](const ComparedPair& p) { return p.key.kv_cache != "fp16"; });
  std::set<std::string> shown = {"model", "scheme", "kernel", "graph", "context", "tokens"};
  if (batched) shown.insert("batch");
  if (kv) shown.insert("kv_cache");
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
      std::string(paired ? "| pair " : "") + "| model | scheme |" + std::string(kv ? " kv cache |" : "") +
      " kernel | graph | context | tokens |" + std::string(batched ? " batch |" : "") +
      std::string(varying.empty() ? "" : " other key |") +
      (c.metric == Metric::tpot ? " base TPOT ms | new TPOT ms |" : " base J/step | new J/step |") +
      " delta | noise base / new | n base / new | p | verdict | note |\n";
  out += std::string(paired ? "|---" : "") + "|---|---|" + std::string(kv ? "---|" : "") +
         "---|---|---:|---:|" + std::string(batched ? "---:|" : "") +
         std::string(varying.empty() ? "" : "---|") + "---:|---:|---:|---:|---:|---:|---|---|\n";
  for (const ComparedPair& p : c.pairs) {
    const RunKey& k = p.key;
    if (paired) out += "| " + md_cell(p.label) + " ";
    out += fmt::format("| {} | {} |", md_cell(k.model.empty() ? "-" : k.model),
                       md_cell(k.scheme.empty() ? "-" : k.scheme));
    if (kv) out += fmt::format(" {} |", md_cell(k.kv_cache));
    out += fmt::format(" {} | {} | {} | {} |", md_cell(k.kernel.empty() ? "-" : k.kernel), on_off(k.graph),
                       k.context, k.tokens);
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
                       tpot ? fmt_ms(p.new_tpot_ms) : fmt_joules(p.new_j_per_step), format_change(p.delta),
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

}  // namespace db
