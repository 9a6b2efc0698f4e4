// json, jsonl, md and csv printers, and the run summary. The tabular printers work on the
// JSON of each result (to_json) and pull the columns of result_fields() by dotted path:
// adding a field to that list is all it takes to show it in md and csv.
#include "decodebench/printers.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "decodebench/error.h"
#include "decodebench/output_file.h"
#include "decodebench/protocol.h"

namespace db {

using nlohmann::json;

const std::vector<ResultField>& result_fields() {
  static const std::vector<ResultField> fields = {
      {"config.model", "model", CellFormat::text},
      {"config.scheme", "scheme", CellFormat::text},
      {"config.group_size", "group", CellFormat::integer, true},
      {"config.zero_point", "zero point", CellFormat::on_off, true},
      {"config.lm_head_scheme", "lm_head", CellFormat::text, true},
      {"config.kv_cache", "KV cache", CellFormat::text, true, false, "fp16"},
      {"config.kernel", "kernel", CellFormat::text},
      {"config.graph", "graph", CellFormat::on_off},
      {"config.adapter", "adapter", CellFormat::text},
      {"config.adapter_mode", "adapter mode", CellFormat::text},
      {"config.context", "context", CellFormat::integer},
      {"config.tokens", "tokens", CellFormat::integer},
      {"config.batch", "batch", CellFormat::integer, false, true},
      {"config.sync_per_token", "sync per token", CellFormat::on_off, true},
      {"config.weights", "weights", CellFormat::text, true},
      {"config.seed", "seed", CellFormat::integer, true},
      {"config.warmup", "warmup", CellFormat::integer, true},
      {"config.repeat", "repeat", CellFormat::integer, true},
      {"device.name", "device", CellFormat::text},
      {"bytes.per_token.total", "GB/token", CellFormat::gigabytes},
      {"timing.tpot_ms.median", "TPOT ms", CellFormat::ms},
      {"timing.noise", "noise", CellFormat::percent},
      {"timing.tpot_ms.p10", "p10 ms", CellFormat::ms},
      {"timing.tpot_ms.p90", "p90 ms", CellFormat::ms},
      {"timing.tpot_ms.stdev", "stdev ms", CellFormat::ms},
      {"timing.tpot_ms.n", "n", CellFormat::integer},
      {"timing.tokens_per_s", "tok/s", CellFormat::per_s},
      {"timing.aggregate_tokens_per_s", "all tok/s", CellFormat::per_s, false, true},
      {"flops.total", "GFLOP/step", CellFormat::gigabytes, false, true},
      {"roofline.floor_tpot_ms", "floor ms", CellFormat::ms},
      {"roofline.compute_floor_tpot_ms", "compute floor ms", CellFormat::ms, false, true},
      {"roofline.achieved_GBps", "GB/s", CellFormat::GBps},
      {"roofline.efficiency", "efficiency", CellFormat::ratio},
      {"roofline.regime", "regime", CellFormat::text},
      {"energy.j_per_step.median", "J/step", CellFormat::joules, false, true},
      {"energy.j_per_token.median", "J/token", CellFormat::joules},
      {"energy.tokens_per_j", "tok/J", CellFormat::joules},
      {"energy.power_w.median", "W", CellFormat::watts},
  };
  return fields;
}

namespace {

// The value at a dotted path, or nullptr where the path does not exist (a row that is not a
// complete result, such as a failed sweep entry, shows an empty cell).
const json* at_path(const json& j, const char* path) {
  const json* cur = &j;
  const char* p = path;
  while (true) {
    const char* dot = std::strchr(p, '.');
    const std::string key = dot ? std::string(p, dot) : std::string(p);
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(key);
    if (it == cur->end()) return nullptr;
    cur = &*it;
    if (!dot) return cur;
    p = dot + 1;
  }
}

std::string json_text(const json& v) {
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool is_numeric(CellFormat f) {
  return f != CellFormat::text && f != CellFormat::on_off;
}

std::string md_cell(const json* v, CellFormat f) {
  if (!v || v->is_null()) return "-";
  if (v->is_number() && f != CellFormat::text) {
    const double x = v->get<double>();
    switch (f) {
      case CellFormat::integer:
        return json_text(*v);
      case CellFormat::gigabytes: {
        const double gb = x / 1e9;
        // Tiny test models read kilobytes per token: keep two significant digits there.
        return (gb == 0 || std::fabs(gb) >= 0.1) ? fmt::format("{:.2f}", gb) : fmt::format("{:.2g}", gb);
      }
      case CellFormat::ms:
        return fmt::format("{:.3f}", x);
      case CellFormat::per_s:
        return fmt::format("{:.1f}", x);
      case CellFormat::GBps:
        return fmt::format("{:.1f}", x);
      case CellFormat::ratio:
        return fmt::format("{:.2f}", x);
      case CellFormat::percent:
        return fmt::format("{:.2f}%", 100 * x);
      case CellFormat::joules:
        return fmt::format("{:.4g}", x);
      case CellFormat::watts:
        return fmt::format("{:.1f}", x);
      default:
        break;
    }
  }
  if (v->is_boolean()) {
    const bool b = v->get<bool>();
    return f == CellFormat::on_off ? (b ? "on" : "off") : (b ? "true" : "false");
  }
  return md_escape(v->is_string() ? v->get<std::string>() : json_text(*v));
}

}  // namespace

std::string md_escape(const std::string& s) {
  if (s.empty()) return "-";
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n' || c == '\r')
      out += ' ';
    else
      out += c;
  }
  return out;
}

namespace {

std::string csv_quote(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string csv_cell(const json* v) {
  if (!v || v->is_null()) return "";
  if (v->is_string()) return csv_quote(v->get<std::string>());
  return csv_quote(json_text(*v));  // numbers: shortest text that reads back to the same double
}

// Whether any row ran at a batch other than 1: the when_batched columns are shown then.
bool any_batched(const std::vector<json>& rows) {
  return std::any_of(rows.begin(), rows.end(), [](const json& row) {
    const json* b = at_path(row, "config.batch");
    return b && b->is_number_integer() && b->get<int64_t>() != 1;
  });
}

// The columns of a table of `rows`: without a batched row, none of the when_batched ones.
std::vector<ResultField> table_fields(const std::vector<json>& rows) {
  const bool batched = any_batched(rows);
  std::vector<ResultField> fields;
  for (const ResultField& f : result_fields())
    if (!f.when_batched || batched) fields.push_back(f);
  return fields;
}

std::string format_md(const std::vector<json>& rows) {
  // The columns: every field, but those shown only where the rows differ in them (or where
  // one is not the field's usual value).
  std::vector<ResultField> fields;
  for (const ResultField& f : table_fields(rows)) {
    // A row without the field (an error entry's config) holds the usual value, if any.
    const auto text = [&](const json* v) { return v ? json_text(*v) : f.usual ? json_text(f.usual) : ""; };
    bool differs = false;
    for (const json& row : rows) {
      const std::string a = text(at_path(row, f.path));
      differs = differs || a != text(at_path(rows.front(), f.path)) || (f.usual && a != json_text(f.usual));
    }
    if (!f.when_differs || differs) fields.push_back(f);
  }
  std::vector<std::vector<std::string>> cells;
  std::vector<size_t> width(fields.size());
  for (size_t c = 0; c < fields.size(); ++c) width[c] = std::max<size_t>(3, std::strlen(fields[c].header));
  for (const json& row : rows) {
    std::vector<std::string> line;
    for (size_t c = 0; c < fields.size(); ++c) {
      line.push_back(md_cell(at_path(row, fields[c].path), fields[c].format));
      width[c] = std::max(width[c], line.back().size());
    }
    cells.push_back(std::move(line));
  }
  std::string out;
  const auto emit = [&](const std::vector<std::string>& line) {
    out += "|";
    for (size_t c = 0; c < fields.size(); ++c) {
      const std::string& s = line[c];
      const std::string pad(width[c] - std::min(width[c], s.size()), ' ');
      out += " ";
      out += is_numeric(fields[c].format) ? pad + s : s + pad;
      out += " |";
    }
    out += "\n";
  };
  std::vector<std::string> header;
  for (const auto& f : fields) header.push_back(f.header);
  emit(header);
  out += "|";
  for (size_t c = 0; c < fields.size(); ++c)
    out += is_numeric(fields[c].format) ? " " + std::string(width[c] - 1, '-') + ": |"
                                        : " " + std::string(width[c], '-') + " |";
  out += "\n";
  for (const auto& line : cells) emit(line);
  return out;
}

// errors: when non-null, a last column "error" with (*errors)[row].
std::string format_csv(const std::vector<json>& rows, const std::vector<std::string>* errors = nullptr) {
  const std::vector<ResultField> fields = table_fields(rows);
  std::string out;
  for (size_t c = 0; c < fields.size(); ++c) out += (c ? "," : "") + csv_quote(fields[c].path);
  if (errors) out += ",error";
  out += "\n";
  for (size_t r = 0; r < rows.size(); ++r) {
    const json& row = rows[r];
    for (size_t c = 0; c < fields.size(); ++c) out += (c ? "," : "") + csv_cell(at_path(row, fields[c].path));
    if (errors) out += "," + csv_quote((*errors)[r]);
    out += "\n";
  }
  return out;
}

std::string indent_lines(const std::string& text, const std::string& pad) {
  std::string out = pad;
  for (char c : text) {
    out += c;
    if (c == '\n') out += pad;
  }
  return out;
}

// ---------------------------------------------------------------- summary

// A byte count in the unit that suits `scale` (so a breakdown shares one unit).
struct ByteUnit {
  double div;
  const char* name;
};
ByteUnit unit_for(double scale) {
  if (scale >= 1e8) return {1e9, "GB"};
  if (scale >= 1e5) return {1e6, "MB"};
  return {1e3, "KB"};
}
std::string in_unit(double bytes, ByteUnit u) {
  const double x = bytes / u.div;
  // Small parts of a large total (scratch next to weights) keep two significant digits.
  return (x == 0 || std::fabs(x) >= 0.01) ? fmt::format("{:.2f}", x) : fmt::format("{:.2g}", x);
}

std::string params_text(int64_t params) {
  if (params <= 0) return "";
  if (params >= 1'000'000'000) return fmt::format("{:.2f}B params", params / 1e9);
  if (params >= 1'000'000) return fmt::format("{:.1f}M params", params / 1e6);
  return fmt::format("{} params", params);
}

void line(std::string& out, const char* label, const std::string& text) {
  out += fmt::format("{:<10}{}\n", label, text);
}

// The summary's energy line: J per token (and per step at a batch), tokens per joule, the
// average power against the limit and the idle power, the clocks sampled; or why not.
std::string energy_text(const Result& r) {
  const Energy& e = r.energy;
  const auto figure = [](const std::optional<double>& v) { return v.value_or(std::nan("")); };
  const bool batched = r.config.batch != 1;
  std::string text;
  if (e.reason.empty()) {
    text = batched ? fmt::format("{:.4g} J/step = {:.4g} J/token", figure(e.j_per_step.median),
                                 figure(e.j_per_token.median))
                   : fmt::format("{:.4g} J/token", figure(e.j_per_token.median));
    text += " median";
    if (e.repetition_j.size() >= 2) text += fmt::format(" ± {:.2f}%", 100 * figure(e.j_per_step.spread));
    text += fmt::format(" ({:.4g} tokens/J), {:.1f} W", figure(e.tokens_per_j), figure(e.power_w.median));
    const double limit = r.device.power_limit_w;
    text += limit > 0 ? fmt::format(" of the {:.0f} W limit", limit) : std::string(" (power limit unknown)");
    if (e.idle_power_w) text += fmt::format(", idle {:.1f} W", *e.idle_power_w);
  } else {
    text = "n/a: " + e.reason;
  }
  if (e.clocks_reason.empty())
    text += fmt::format("; clocks SM {:.0f}, memory {:.0f} MHz (sampled)", figure(e.sm_clock_mhz.median),
                        figure(e.mem_clock_mhz.median));
  return text;
}

}  // namespace

std::string format_results(const std::vector<Result>& results, OutputFormat format) {
  switch (format) {
    case OutputFormat::json: {
      if (results.size() == 1) return result_to_json_text(results[0], 2) + "\n";
      if (results.empty()) return "[]\n";
      std::string out = "[\n";
      for (size_t i = 0; i < results.size(); ++i) {
        out += indent_lines(result_to_json_text(results[i], 2), "  ");
        out += i + 1 < results.size() ? ",\n" : "\n";
      }
      return out + "]\n";
    }
    case OutputFormat::jsonl: {
      std::string out;
      for (const Result& r : results) out += result_to_json_text(r, -1) + "\n";
      return out;
    }
    case OutputFormat::md:
    case OutputFormat::csv: {
      std::vector<json> rows;
      rows.reserve(results.size());
      for (const Result& r : results) rows.push_back(json(r));
      return format == OutputFormat::md ? format_md(rows) : format_csv(rows);
    }
  }
  db::fail("unknown output format {}", static_cast<int>(format));
}

std::string format_entries(const std::vector<SweepEntry>& entries, OutputFormat format) {
  bool any_error = false;
  std::vector<Result> results;
  for (const SweepEntry& e : entries) {
    if (e.result)
      results.push_back(*e.result);
    else
      any_error = true;
  }
  if (!any_error && format != OutputFormat::json) return format_results(results, format);
  switch (format) {
    case OutputFormat::json: {
      if (entries.empty()) return "[]\n";
      std::string out = "[\n";
      for (size_t i = 0; i < entries.size(); ++i) {
        const SweepEntry& e = entries[i];
        out += indent_lines(e.result ? result_to_json_text(*e.result, 2) : error_entry_json_text(e.error, 2),
                            "  ");
        out += i + 1 < entries.size() ? ",\n" : "\n";
      }
      return out + "]\n";
    }
    case OutputFormat::jsonl: {
      std::string out;
      for (const SweepEntry& e : entries)
        out += (e.result ? result_to_json_text(*e.result, -1) : error_entry_json_text(e.error, -1)) + "\n";
      return out;
    }
    case OutputFormat::md:
    case OutputFormat::csv: {
      std::vector<json> rows;
      std::vector<std::string> errors;
      for (const SweepEntry& e : entries) {
        if (e.result) {
          rows.push_back(json(*e.result));
          errors.emplace_back();
        } else {
          json cfg = json::parse(e.error.config_json, nullptr, false);
          if (cfg.is_discarded()) cfg = json::object();
          rows.push_back(json{{"config", cfg}});
          errors.push_back(e.error.error);
        }
      }
      if (format == OutputFormat::csv) return format_csv(rows, &errors);
      std::string out = format_md(rows);
      out += "\nErrors:\n\n";
      for (size_t i = 0; i < entries.size(); ++i) {
        if (entries[i].result) continue;
        std::string msg = entries[i].error.error;
        for (char& c : msg)
          if (c == '\n' || c == '\r') c = ' ';
        out += fmt::format("- row {} ({}): {}\n", i + 1, error_entry_summary(entries[i].error), msg);
      }
      return out;
    }
  }
  db::fail("unknown output format {}", static_cast<int>(format));
}

void write_results_file(const std::string& path, const std::vector<Result>& results, OutputFormat format) {
  if (path.empty()) db::fail("cannot write results: the output path is empty");
  write_text_file_atomically(path, format_results(results, format));
}

void write_text_file_atomically(const std::string& path, const std::string& text) {
  if (path.empty()) db::fail("cannot write results: the output path is empty");
  write_file_atomically(path, text);
}

std::string summary_text(const Result& r) {
  const RunConfig& c = r.config;
  const DeviceInfo& d = r.device;
  const TpotStats& t = r.timing.tpot_ms;
  const PerTokenBytes& b = r.bytes.per_token;
  std::string out;

  std::string scheme = c.scheme;
  if (c.scheme == "int4") scheme += fmt::format(" g{} {}", c.group_size, c.zero_point ? "asym" : "sym");
  if (!c.lm_head_scheme.empty() && c.lm_head_scheme != c.scheme) scheme += ", lm_head " + c.lm_head_scheme;
  if (c.kv_cache != "fp16") scheme += ", KV cache " + c.kv_cache;
  std::string model = c.model + " (" + c.arch;
  if (c.params > 0) model += ", " + params_text(c.params);
  model += ")  " + scheme;
  line(out, "model", model);

  const bool batched = c.batch != 1;
  std::string run = fmt::format("kernel {}, graph {}", c.kernel, c.graph ? "on" : "off");
  if (c.adapter != "none" && !c.adapter.empty())
    run += fmt::format(", adapter {} ({})", c.adapter, c.adapter_mode.empty() ? "?" : c.adapter_mode);
  if (batched) run += fmt::format(", batch {}", c.batch);
  run += fmt::format(", context {}, {} {} x {}", c.context, c.tokens, batched ? "steps" : "tokens", c.repeat);
  if (c.sync_per_token) run += ", sync per token";
  line(out, "run", run);

  std::string dev = d.name.empty() ? d.backend : d.name;
  if (d.backend == "cuda")
    dev += fmt::format(" (cc {}, {} SMs, {:.1f} GB)", d.compute_capability, d.sm_count, d.memory_bytes / 1e9);
  else if (d.cpu_threads > 0)
    dev += fmt::format(" ({}, {} threads)", d.backend, d.cpu_threads);
  line(out, "device", dev);

  // The median with the run's noise: the spread of its repetition medians.
  std::string tpot = fmt::format("{:.3f} ms median", t.median);
  if (r.timing.repetitions >= 2) tpot += fmt::format(" ± {:.2f}%", 100 * r.timing.noise);
  tpot += fmt::format(" (p10 {:.3f}, p90 {:.3f}, n {}", t.p10, t.p90, t.n);
  if (r.timing.repetitions > 0) tpot += fmt::format(" in {} repetitions", r.timing.repetitions);
  if (r.timing.stop == kStopNoise)
    tpot += ", stopped at the noise target";
  else if (r.timing.stop == kStopTime)
    tpot += ", stopped at the time limit";
  else if (r.timing.stop == kStopLimit)
    tpot += ", stopped at the repetition limit";
  if (batched)  // the step's time is each sequence's; the batch makes c.batch tokens a step
    tpot += fmt::format(")  {:.1f} tok/s a sequence, {:.1f} tok/s in all", r.timing.tokens_per_s,
                        r.timing.aggregate_tokens_per_s);
  else
    tpot += fmt::format(")  {:.1f} tok/s", r.timing.tokens_per_s);
  line(out, "TPOT", tpot);

  const char* per = batched ? "step" : "token";
  const ByteUnit u = unit_for(static_cast<double>(b.total));
  std::string bytes = fmt::format(
      "{} {}/{} = linear {} (weights {} + scales {} + zeros {}) + lm_head {} + KV {}", in_unit(b.total, u),
      u.name, per, in_unit(b.linear_weights + b.scales + b.zeros, u), in_unit(b.linear_weights, u),
      in_unit(b.scales, u), in_unit(b.zeros, u), in_unit(b.lm_head, u),
      in_unit(b.kv_read + b.kv_write + b.kv_read_scales + b.kv_write_scales, u));
  const uint64_t kv_scales = b.kv_read_scales + b.kv_write_scales;
  if (kv_scales > 0)  // an fp8 or int8 cache: its codes and their scales
    bytes += fmt::format(" ({} {} + scales {})", c.kv_cache, in_unit(b.kv_read + b.kv_write, u),
                         in_unit(kv_scales, u));
  if (b.adapter > 0) bytes += " + adapter " + in_unit(b.adapter, u);
  if (b.activations > 0) bytes += " + activations " + in_unit(b.activations, u);
  bytes += " + other " + in_unit(b.embedding_row + b.norms + b.biases, u);
  line(out, "bytes", bytes);
  if (b.kernel_extra > 0)
    line(out, "",
         fmt::format("the {} kernel moves {} {} more per {} (not in the floor)", c.kernel,
                     in_unit(b.kernel_extra, u), u.name, per));
  const StepFlops& f = r.flops;
  const Roofline& roof = r.roofline;
  if (batched)
    line(out, "FLOPs",
         fmt::format(
             "{:.3g} GFLOP/step = linear {:.3g} + lm_head {:.3g} + attention {:.3g}{}; {:.1f} FLOP/byte",
             f.total / 1e9, f.linear / 1e9, f.lm_head / 1e9, f.attention / 1e9,
             f.adapter > 0 ? fmt::format(" + adapter {:.3g}", f.adapter / 1e9) : "",
             roof.arithmetic_intensity));

  if (batched || roof.compute_floor_tpot_ms > roof.bandwidth_floor_tpot_ms) {  // both floors: the larger
    const std::string bandwidth = d.peak_read_GBps > 0
                                      ? fmt::format("bandwidth {:.3f} ms at {:.1f} GB/s",
                                                    roof.bandwidth_floor_tpot_ms, d.peak_read_GBps)
                                      : "bandwidth unknown (read bandwidth not measured)";
    const std::string compute = d.peak_compute_TFLOPS > 0
                                    ? fmt::format("compute {:.3f} ms at {:.3g} TFLOPS measured",
                                                  roof.compute_floor_tpot_ms, d.peak_compute_TFLOPS)
                                    : "compute unknown (throughput not measured)";
    line(out, "floor",
         fmt::format("{:.3f} ms, the larger of {} and {}", roof.floor_tpot_ms, bandwidth, compute));
  } else if (d.peak_read_GBps > 0) {
    line(out, "floor",
         fmt::format("{:.3f} ms at {:.1f} GB/s measured read bandwidth", roof.floor_tpot_ms,
                     d.peak_read_GBps));
  } else {
    line(out, "floor", "unknown: read bandwidth not measured");
  }
  line(out, "achieved",
       fmt::format("{:.1f} GB/s{}, efficiency {:.1f}% of the floor", roof.achieved_GBps,
                   batched ? fmt::format(", {:.3g} TFLOPS", roof.achieved_TFLOPS) : "",
                   100.0 * roof.efficiency));
  std::string regime = r.roofline.regime.empty() ? "-" : r.roofline.regime;
  if (!r.roofline.regime_reason.empty()) regime += ": " + r.roofline.regime_reason;
  line(out, "regime", regime);
  if (!c.batched_paths.empty())
    line(out, "paths", batched_path_groups(c) + " (the batched linears': config.batched_paths)");
  if (!c.kernel_shapes.empty()) {
    std::string shapes;
    for (const std::string& k : kernel_shape_choices(c)) shapes += (shapes.empty() ? "" : ", ") + k;
    line(out, "shapes", shapes + " (the batched GEMM's, timed at load: config.kernel_shapes)");
  }

  if (c.context > 0 && r.timing.prefill_s > 0)
    line(out, "prefill",
         fmt::format("{} tokens in {:.2f} s, {:.0f} tok/s ({}{}, untimed)", c.context, r.timing.prefill_s,
                     r.timing.prefill_tokens_per_s, r.timing.prefill.empty() ? "steps" : r.timing.prefill,
                     r.timing.prefill_attention.empty() ? "" : ", attention " + r.timing.prefill_attention));

  line(out, "energy", energy_text(r));

  const MemoryUse& m = r.memory;
  const ByteUnit mu = unit_for(static_cast<double>(m.total_bytes));
  line(
      out, "memory",
      fmt::format("{} {} = weights {} + KV cache {} + scratch {}", in_unit(m.total_bytes, mu), mu.name,
                  in_unit(m.weights_bytes, mu), in_unit(m.kv_cache_bytes, mu), in_unit(m.scratch_bytes, mu)));

  if (r.check.logits_checked)
    line(out, "check",
         fmt::format("logits max rel err {:.2e} vs {}", r.check.logits_max_rel_err,
                     r.check.reference.empty() ? "the reference" : r.check.reference));
  if (!r.tool.build_type.empty() && r.tool.build_type != "Release")
    line(out, "WARNING",
         fmt::format("{} build: timings are not representative (configure with "
                     "-DCMAKE_BUILD_TYPE=Release)",
                     r.tool.build_type));
  return out;
}

}  // namespace db
