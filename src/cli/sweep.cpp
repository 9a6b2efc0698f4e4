// The sweep verb (include/decodebench/sweep.h): list and range expansion, the cartesian
// product of runs, progress on stderr, error entries, and the output file.
#include "decodebench/sweep.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <unordered_set>

#include "cli.h"
#include "decodebench/commands.h"
#include "decodebench/error.h"
#include "decodebench/input.h"
#include "decodebench/output_file.h"
#include "decodebench/printers.h"
#include "decodebench/result.h"
#include "run.h"

namespace db {
namespace {

int64_t parse_value(const std::string& option, const std::string& item, const std::string& text) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec == std::errc::result_out_of_range) usage_fail("{} {}: {} is out of range", option, item, text);
  if (ec != std::errc() || ptr != end || text.empty() || v < 0)
    usage_fail("{} '{}': '{}' is not a non-negative integer (items: N, A-B+S or A-B*F)", option, item, text);
  return v;
}

const char* on_off(bool b) {
  return b ? "on" : "off";
}
const char* mode_name(AdapterMode m) {
  return m == AdapterMode::external ? "external" : "merged";
}

}  // namespace

std::vector<std::string> split_list(const std::string& option, const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) usage_fail("{} '{}': empty item in the list", option, text);
    out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<std::string> split_model_list(const std::string& text) {
  const std::vector<std::string> items = split_list("--model", text);
  std::vector<std::string> out;
  for (size_t i = 0; i < items.size();) {
    size_t end = i + 1;  // one past the last item of the longest existing path from i
    std::string joined = items[i];
    for (size_t j = i + 1; j < items.size(); ++j) {
      joined += "," + items[j];
      std::error_code ec;
      if (std::filesystem::exists(joined, ec)) end = j + 1;
    }
    std::string item = items[i];
    for (size_t j = i + 1; j < end; ++j) item += "," + items[j];
    out.push_back(item);
    i = end;
  }
  return out;
}

std::vector<int64_t> expand_int_list(const std::string& option, const std::string& text) {
  std::vector<int64_t> out;
  std::unordered_set<int64_t> seen;
  uint64_t made = 0;  // values produced, duplicates included: bounded before they are made
  const auto reserve = [&](uint64_t n) {
    if (made + n > static_cast<uint64_t>(kMaxSweepInstances))  // made <= 10000, n < 2^64 - 10000
      usage_fail("{} '{}': {} values, more than the {} a sweep may run", option, text, made + n,
                 kMaxSweepInstances);
    made += n;
  };
  const auto add = [&](int64_t v) {
    if (seen.insert(v).second) out.push_back(v);
  };
  for (const std::string& item : split_list(option, text)) {
    const size_t dash = item.find('-');
    if (dash == std::string::npos) {
      reserve(1);
      add(parse_value(option, item, item));
      continue;
    }
    const size_t op = item.find_first_of("+*", dash + 1);
    if (op == std::string::npos)
      usage_fail("{} '{}': a range needs a step: A-B+S (arithmetic) or A-B*F (geometric)", option, item);
    const int64_t a = parse_value(option, item, item.substr(0, dash));
    const int64_t b = parse_value(option, item, item.substr(dash + 1, op - dash - 1));
    const int64_t step = parse_value(option, item, item.substr(op + 1));
    if (a > b) usage_fail("{} '{}': the range starts above its end ({} > {})", option, item, a, b);
    if (item[op] == '+') {
      if (step < 1) usage_fail("{} '{}': the step S of A-B+S must be at least 1", option, item);
      const uint64_t n = static_cast<uint64_t>(b - a) / static_cast<uint64_t>(step) + 1;  // 0 <= a <= b
      reserve(n);
      for (uint64_t i = 0; i < n; ++i) add(a + static_cast<int64_t>(i) * step);
    } else {
      if (step < 2) usage_fail("{} '{}': the factor F of A-B*F must be at least 2", option, item);
      std::vector<int64_t> values;  // at most 64: each step at least doubles
      int64_t v = a;
      if (v == 0) {
        values.push_back(0);
        v = 1;
      }
      while (v <= b) {
        values.push_back(v);
        if (v > b / step) break;
        v *= step;
      }
      reserve(values.size());
      for (int64_t x : values) add(x);
    }
  }
  return out;
}

void check_sweep_size(const SweepSpec& sp) {
  // Every factor of the product, in expand_sweep's order (--runs last: each instance that many times).
  const std::pair<size_t, const char*> factors[] = {
      {sp.models.size(), "models"},
      {sp.quants.size(), "quants"},
      {sp.group_sizes.size(), "group sizes"},
      {sp.lm_heads.size(), "lm-heads"},
      {sp.kv_caches.size(), "KV caches"},
      {sp.kernels.size(), "kernels"},
      {sp.graphs.size(), "graphs"},
      {sp.adapter_modes.size(), "adapter modes"},
      {sp.sync_per_token.size(), "sync-per-token"},
      {sp.seeds.size(), "seeds"},
      {sp.batches.size(), "batches"},
      {sp.contexts.size(), "contexts"},
      {sp.tokens.size(), "tokens"},
      {static_cast<size_t>(std::max(sp.runs, 0)), "runs (--runs)"}};
  uint64_t n = 1;
  bool over = false;
  for (const auto& [k, name] : factors) {
    if (k > static_cast<uint64_t>(kMaxSweepInstances) || n > kMaxSweepInstances / std::max<uint64_t>(k, 1))
      over = true;
    if (!over) n *= k;
  }
  if (!over) return;
  std::string product;
  for (const auto& [k, name] : factors)
    product += fmt::format("{}{} {}", product.empty() ? "" : " x ", k, name);
  usage_fail("sweep: {} is more than the {} instances a sweep may run", product, kMaxSweepInstances);
}

std::string ran_summary(const Result& r) {
  const RunConfig& c = r.config;
  std::string out = fmt::format("model {}, {}", c.model, c.scheme);
  if (c.scheme == "int4") out += fmt::format(" g{}", c.group_size);
  if (c.lm_head_scheme != c.scheme) out += fmt::format(", lm_head {}", c.lm_head_scheme);
  if (c.kv_cache != "fp16") out += fmt::format(", KV cache {}", c.kv_cache);
  if (c.seed != 0) out += fmt::format(", seed {}", c.seed);
  out += fmt::format(", kernel {}, graph {}", c.kernel, on_off(c.graph));
  if (c.adapter != "none" && !c.adapter.empty()) out += fmt::format(", adapter-mode {}", c.adapter_mode);
  if (c.sync_per_token) out += ", sync per token";
  if (c.batch != 1) out += fmt::format(", batch {}", c.batch);
  out += fmt::format(", context {}, tokens {}", c.context, c.tokens);
  return out;
}

std::string instance_summary(const RunSpec& s) {
  std::string out = "model " + s.model;
  if (s.quant) out += fmt::format(", quant {}", to_string(*s.quant));
  if (s.group_size) out += fmt::format(", group-size {}", *s.group_size);
  if (s.lm_head) out += fmt::format(", lm-head {}", to_string(*s.lm_head));
  if (s.kv_cache != KvScheme::fp16) out += fmt::format(", kv-cache {}", to_string(s.kv_cache));
  out += fmt::format(", kernel {}, graph {}", s.kernel, on_off(s.graph));
  if (!s.adapter.empty()) out += fmt::format(", adapter-mode {}", mode_name(s.adapter_mode));
  if (s.sync_per_token) out += ", sync per token";
  if (s.batch != 1) out += fmt::format(", batch {}", s.batch);
  out += fmt::format(", context {}, tokens {}", s.context, s.tokens);
  return out;
}

namespace {

// The `decodebench run` command line that runs this one instance.
std::string run_command(const RunSpec& s) {
  return shell_join(run_arguments(s));
}

// The config fields of an instance that failed, as far as they are known.
ErrorEntry error_entry(const RunSpec& s, const std::string& message) {
  nlohmann::ordered_json c;
  c["model"] = s.model;
  c["weights"] = s.weights.empty() ? "synthetic" : s.weights;
  c["seed"] = s.seed;
  try {
    c["scheme"] = to_string(run_model_config(s).quant.scheme);
  } catch (const std::exception&) {
    if (s.quant) c["scheme"] = to_string(*s.quant);
  }
  c["kernel"] = s.kernel;
  c["graph"] = s.backend == BackendKind::cuda && s.graph;
  c["adapter"] = s.adapter.empty() ? "none" : s.adapter;
  c["adapter_mode"] = s.adapter.empty() ? "" : mode_name(s.adapter_mode);
  c["context"] = s.context;
  c["tokens"] = s.tokens;
  c["warmup"] = s.warmup;
  c["repeat"] = s.repeat;
  c["sync_per_token"] = s.sync_per_token;
  if (s.batch != 1) c["batch"] = s.batch;
  if (s.group_size) c["group_size"] = *s.group_size;
  if (s.lm_head) c["lm_head_scheme"] = to_string(*s.lm_head);
  if (s.kv_cache != KvScheme::fp16) c["kv_cache"] = to_string(s.kv_cache);
  ErrorEntry e;
  e.error = message;
  e.config_json = c.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  return e;
}

std::string one_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return s;
}

}  // namespace

std::vector<RunSpec> expand_sweep(const SweepSpec& sp) {
  std::vector<RunSpec> out;
  for (const std::string& model : sp.models)
    for (const std::optional<Scheme>& quant : sp.quants)
      for (const std::optional<int>& group : sp.group_sizes)
        for (const std::optional<Scheme>& lm_head : sp.lm_heads)
          for (KvScheme kv_cache : sp.kv_caches)
            for (const std::string& kernel : sp.kernels)
              for (bool graph : sp.graphs)
                for (AdapterMode mode : sp.adapter_modes)
                  for (bool sync : sp.sync_per_token)
                    for (uint64_t seed : sp.seeds)
                      for (int64_t batch : sp.batches)
                        for (int64_t context : sp.contexts)
                          for (int64_t tokens : sp.tokens) {
                            RunSpec s = sp.base;
                            s.batch = batch;
                            s.model = model;
                            s.quant = quant;
                            s.group_size = group;
                            s.lm_head = lm_head;
                            s.kv_cache = kv_cache;
                            s.kernel = kernel;
                            s.graph = graph;
                            s.adapter_mode = mode;
                            s.sync_per_token = sync;
                            s.seed = seed;
                            s.context = context;
                            s.tokens = tokens;
                            s.output.clear();
                            s.command_line = run_command(s);
                            out.push_back(std::move(s));
                          }
  return out;
}

int cmd_sweep(const SweepSpec& sp) {
  const std::vector<RunSpec> instances = expand_sweep(sp);
  const std::string& output = sp.base.output;
  const bool jsonl = !output.empty() && output != "-" && sp.base.format == OutputFormat::jsonl;

  // jsonl: appended to the final path as each instance finishes, each line whole or not at
  // all (output_file.h), so a crash or an interrupt keeps every finished line.
  std::optional<JsonlAppender> lines;
  if (jsonl) lines.emplace(output);
  const auto append = [&](const std::string& line) {
    if (lines) lines->append(line);
  };

  std::vector<SweepEntry> entries;
  WeightReuse reuse;
  size_t failed = 0;
  const auto start = std::chrono::steady_clock::now();
  // With --runs R each instance runs R times, each in a separate process (no weights are
  // shared between processes); without it, in this process, sharing weights between runs.
  const size_t runs = static_cast<size_t>(sp.runs);
  const size_t n = instances.size() * runs;
  for (size_t i = 0; i < n; ++i) {
    const RunSpec& s = instances[i / runs];
    SweepEntry e;
    std::string outcome;
    try {
      e.result = runs > 1 ? run_in_process(s) : run_one(s, &reuse);
      const Timing& t = e.result->timing;
      outcome = fmt::format("{:.3f} ms", t.tpot_ms.median);
      if (t.repetitions >= 2) outcome += fmt::format(" ± {:.2f}%", 100 * t.noise);
      const Energy& en = e.result->energy;
      outcome += en.reason.empty() && en.j_per_token.median
                     ? fmt::format(", {:.4g} J/token", *en.j_per_token.median)
                     : std::string(", energy n/a");
      if (!t.warnings.empty())
        outcome += " (warning: " + t.warnings.front().substr(0, t.warnings.front().find(':')) + ")";
    } catch (const std::exception& ex) {
      e.result.reset();
      e.error = error_entry(s, one_line(ex.what()));
      outcome = "error: " + e.error.error;
      ++failed;
    }
    append(e.result ? result_to_json_text(*e.result, -1) : error_entry_json_text(e.error, -1));
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double left = elapsed / static_cast<double>(i + 1) * static_cast<double>(n - i - 1);
    // What ran: the result's config where there is one (the CPU backend runs cpu.reference,
    // graph off, whatever was asked).
    const std::string what = e.result ? ran_summary(*e.result) : instance_summary(s);
    const std::string run_of = runs > 1 ? fmt::format(" run {}/{}", i % runs + 1, runs) : "";
    fmt::print(stderr, "[{}/{}{}] {} ... {} (elapsed {:.1f}s, ~{:.1f}s left)\n", i + 1, n, run_of, what,
               printable(outcome, 300), elapsed, left);
    std::fflush(stderr);
    entries.push_back(std::move(e));
  }
  if (lines) lines->close();

  // -o -: the entries on stdout in the format asked, instead of the md table.
  if (output == "-") {
    std::cout << format_entries(entries, sp.base.format) << std::flush;
  } else {
    std::cout << format_entries(entries, OutputFormat::md) << std::flush;
    if (!output.empty() && !jsonl)
      write_text_file_atomically(output, format_entries(entries, sp.base.format));
  }
  if (failed)
    warn("sweep: {} of {} instances failed (error entries{})", failed, n,
         output.empty() ? "" : " in " + output);
  if (reuse.reused || reuse.backend.reused)
    fmt::print(stderr,
               "decodebench: sweep: {} of {} instances reused a WeightSource, {} reused device weights\n",
               reuse.reused, n, reuse.backend.reused);
  return failed ? 1 : 0;
}

}  // namespace db
