// JSON writer and reader of schema "decodebench/result/v1".
//
// The writer is one template over the JSON type: to_json() fills an nlohmann::json (keys
// sorted, what callers index into), result_to_json_text() an ordered_json so that files read
// in declaration order (schema, tool, time, command, device, config, bytes, ...).
//
// The reader is strict: every documented field must be present with its type, and the error
// names the full dotted path ("result r.json: missing field timing.tpot_ms.median"). Unknown
// fields are ignored, so a v1 reader accepts files from a later v1 writer that added fields;
// a field marked Added (one added to v1 after files were written) may be absent, and then reads
// as its default, so this reader accepts the files of an earlier v1 writer too.
// Non-finite numbers are written by nlohmann/json as null; the reader turns null back into
// NaN for number fields (an integer or string field never accepts null).
#include "decodebench/result.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>
#include <type_traits>

#include "decodebench/error.h"
#include "decodebench/input.h"
#include "decodebench/stats.h"

namespace db {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// ---------------------------------------------------------------- one field list per struct
// Walked by the writer and by the reader alike, so the two cannot disagree; the order here
// is the order of the keys in result files. The README's field table is checked against the
// written JSON by a test.

// The tag of a field added to v1 after result files were first written (see the reader).
struct Added {};

template <class V>
void fields(V& v, ToolInfo& t) {
  v("name", t.name);
  v("version", t.version);
  v("git_commit", t.git_commit);
  v("build_type", t.build_type);
  v("cuda_runtime", t.cuda_runtime);
  v("cublas", t.cublas);
}

template <class V>
void fields(V& v, ClockState& c) {
  v("sm_clock_mhz", c.sm_clock_mhz);
  v("mem_clock_mhz", c.mem_clock_mhz);
  v("temperature_c", c.temperature_c);
  v("power_w", c.power_w);
  v("throttle_reasons", c.throttle_reasons);
  v("throttle", c.throttle);
}

template <class V>
void fields(V& v, DeviceInfo& d) {
  v("backend", d.backend);
  v("name", d.name);
  v("uuid", d.uuid);
  v("compute_capability", d.compute_capability);
  v("sm_count", d.sm_count);
  v("memory_bytes", d.memory_bytes);
  v("l2_bytes", d.l2_bytes);
  v("driver", d.driver);
  v("ecc", d.ecc);
  v("power_limit_w", d.power_limit_w);
  v("start", d.start);  // null where NVML is unavailable
  v("end", d.end);
  v("theoretical_GBps", d.theoretical_GBps);
  v("peak_read_GBps", d.peak_read_GBps);
  v("cpu_threads", d.cpu_threads);
  v("peak_compute_TFLOPS", d.peak_compute_TFLOPS, Added{});
  v("compute_probe", d.compute_probe, Added{});
}

template <class V>
void fields(V& v, RunConfig& c) {
  v("model", c.model);
  v("arch", c.arch);
  v("weights", c.weights);
  v("seed", c.seed);
  v("scheme", c.scheme);
  v("group_size", c.group_size);
  v("zero_point", c.zero_point);
  v("lm_head_scheme", c.lm_head_scheme);
  v("kernel", c.kernel);
  v("graph", c.graph);
  v("adapter", c.adapter);
  v("adapter_mode", c.adapter_mode);
  v("adapter_rank", c.adapter_rank);
  v("adapter_targets", c.adapter_targets);
  v("adapter_scale", c.adapter_scale);
  v("context", c.context);
  v("tokens", c.tokens);
  v("warmup", c.warmup);
  v("repeat", c.repeat);
  v("sync_per_token", c.sync_per_token);
  v("params", c.params);
  v("max_noise", c.max_noise, Added{});
  v("max_time_s", c.max_time_s, Added{});
  v("group_size_note", c.group_size_note, Added{});
  v("kernel_fallbacks", c.kernel_fallbacks, Added{});
  v("weights_format", c.weights_format, Added{});
  v("batch", c.batch, Added{});
  v("kernel_shapes", c.kernel_shapes, Added{});
  v("batched_paths", c.batched_paths, Added{});
  v("kv_cache", c.kv_cache, Added{});
}

template <class V>
void fields(V& v, PerTokenBytes& p) {
  v("linear_weights", p.linear_weights);
  v("scales", p.scales);
  v("zeros", p.zeros);
  v("lm_head", p.lm_head);
  v("embedding_row", p.embedding_row);
  v("norms", p.norms);
  v("biases", p.biases, Added{});
  v("adapter", p.adapter);
  v("kv_read", p.kv_read);
  v("kv_write", p.kv_write);
  v("total", p.total);
  v("kernel_extra", p.kernel_extra);
  v("activations", p.activations, Added{});
  v("kv_read_scales", p.kv_read_scales, Added{});
  v("kv_write_scales", p.kv_write_scales, Added{});
}

template <class V>
void fields(V& v, StoredBytes& s) {
  v("linear", s.linear);
  v("lm_head", s.lm_head);
  v("embedding", s.embedding);
  v("norms", s.norms);
  v("biases", s.biases, Added{});
  v("adapter", s.adapter);
  v("total", s.total);
}

template <class V>
void fields(V& v, ByteAccount& b) {
  v("position_first", b.position_first);
  v("position_last", b.position_last);
  v("per_token", b.per_token);
  v("stored", b.stored);
}

template <class V>
void fields(V& v, StepFlops& f) {
  v("linear", f.linear);
  v("lm_head", f.lm_head);
  v("attention", f.attention);
  v("adapter", f.adapter);
  v("total", f.total);
}

template <class V>
void fields(V& v, TpotStats& s) {
  v("mean", s.mean);
  v("median", s.median);
  v("p10", s.p10);
  v("p90", s.p90);
  v("p99", s.p99);
  v("min", s.min);
  v("max", s.max);
  v("stdev", s.stdev);
  v("n", s.n);
}

template <class V>
void fields(V& v, Timing& t) {
  v("tpot_ms", t.tpot_ms);
  v("samples_ms", t.samples_ms);
  v("tokens_per_s", t.tokens_per_s);
  v("load_s", t.load_s);
  v("prefill_s", t.prefill_s);
  v("clock", t.clock);
  v("weights_reused", t.weights_reused, Added{});
  v("repetition_medians_ms", t.repetition_medians_ms, Added{});
  v("noise", t.noise, Added{});
  v("repetitions", t.repetitions, Added{});
  v("stop", t.stop, Added{});
  v("warnings", t.warnings, Added{});
  v("prefill", t.prefill, Added{});
  v("prefill_tokens_per_s", t.prefill_tokens_per_s, Added{});
  v("prefill_attention", t.prefill_attention, Added{});
  v("aggregate_tokens_per_s", t.aggregate_tokens_per_s, Added{});
}

template <class V>
void fields(V& v, Roofline& r) {
  v("floor_tpot_ms", r.floor_tpot_ms);
  v("achieved_GBps", r.achieved_GBps);
  v("efficiency", r.efficiency);
  v("regime", r.regime);
  v("regime_reason", r.regime_reason);
  v("bandwidth_floor_tpot_ms", r.bandwidth_floor_tpot_ms, Added{});
  v("compute_floor_tpot_ms", r.compute_floor_tpot_ms, Added{});
  v("achieved_TFLOPS", r.achieved_TFLOPS, Added{});
  v("arithmetic_intensity", r.arithmetic_intensity, Added{});
}

template <class V>
void fields(V& v, MemoryUse& m) {
  v("weights_bytes", m.weights_bytes);
  v("kv_cache_bytes", m.kv_cache_bytes);
  v("scratch_bytes", m.scratch_bytes);
  v("total_bytes", m.total_bytes);
}

template <class V>
void fields(V& v, Check& c) {
  v("tokens_hash", c.tokens_hash);
  v("tokens", c.tokens);
  v("logits_checked", c.logits_checked);
  v("logits_max_rel_err", c.logits_max_rel_err);
  v("reference", c.reference);
  v("sequence_tokens_hashes", c.sequence_tokens_hashes, Added{});
}

template <class V>
void fields(V& v, RepetitionSpread& s) {
  v("median", s.median);
  v("min", s.min);
  v("max", s.max);
  v("spread", s.spread);
}

template <class V>
void fields(V& v, Energy& e) {
  v("source", e.source);
  v("reason", e.reason);
  v("clocks_reason", e.clocks_reason);
  v("sample_period_ms", e.sample_period_ms);
  v("samples", e.samples);
  v("counter_update_ms", e.counter_update_ms);
  v("resolution", e.resolution);
  v("idle_power_w", e.idle_power_w);
  v("idle_s", e.idle_s);
  v("window", e.window, Added{});
  v("window_reason", e.window_reason, Added{});
  v("detect_ms", e.detect_ms, Added{});
  v("repetition_s", e.repetition_s);
  v("repetition_j", e.repetition_j);
  v("repetition_tail_s", e.repetition_tail_s, Added{});
  v("repetition_idle_j", e.repetition_idle_j, Added{});
  v("repetition_sm_clock_mhz", e.repetition_sm_clock_mhz);
  v("repetition_mem_clock_mhz", e.repetition_mem_clock_mhz);
  v("j_per_step", e.j_per_step);
  v("j_per_token", e.j_per_token);
  v("power_w", e.power_w);
  v("sm_clock_mhz", e.sm_clock_mhz);
  v("mem_clock_mhz", e.mem_clock_mhz);
  v("tokens_per_j", e.tokens_per_j);
}

template <class V>
void fields(V& v, Result& r) {
  v("schema", r.schema);
  v("tool", r.tool);
  v("time", r.time);
  v("command", r.command);
  v("device", r.device);
  v("config", r.config);
  v("bytes", r.bytes);
  v("timing", r.timing);
  v("roofline", r.roofline);
  v("memory", r.memory);
  v("check", r.check);
  v("flops", r.flops, Added{});
  v("energy", r.energy, Added{});
}

// The structs above: written as JSON objects, read with their path.
template <class T>
constexpr bool kIsRecord =
    std::is_same_v<T, ToolInfo> || std::is_same_v<T, ClockState> || std::is_same_v<T, DeviceInfo> ||
    std::is_same_v<T, RunConfig> || std::is_same_v<T, PerTokenBytes> || std::is_same_v<T, StoredBytes> ||
    std::is_same_v<T, ByteAccount> || std::is_same_v<T, StepFlops> || std::is_same_v<T, TpotStats> ||
    std::is_same_v<T, Timing> || std::is_same_v<T, Roofline> || std::is_same_v<T, MemoryUse> ||
    std::is_same_v<T, Check> || std::is_same_v<T, RepetitionSpread> || std::is_same_v<T, Energy> ||
    std::is_same_v<T, Result>;

// ---------------------------------------------------------------- writer

// J: nlohmann::json (to_json) or ordered_json (files, in the order of the field lists).
template <class J>
struct Writer {
  J j = J::object();

  template <class T>
  void operator()(const char* key, const T& value) {
    j[key] = to_value(value);
  }
  template <class T>
  void operator()(const char* key, const T& value, Added) {
    (*this)(key, value);
  }

  template <class T>
  static J to_value(const T& value) {
    if constexpr (kIsRecord<T>) {
      Writer w;
      fields(w, const_cast<T&>(value));  // the writer only reads the fields
      return std::move(w.j);
    } else {
      return J(value);
    }
  }
  static J to_value(const std::optional<ClockState>& c) { return c ? to_value(*c) : J(nullptr); }
  static J to_value(const std::optional<double>& v) { return v && std::isfinite(*v) ? J(*v) : J(nullptr); }
};

template <class J>
J write(const Result& r) {
  return Writer<J>::to_value(r);
}

// Invalid UTF-8 (a CPU model name, an odd byte in the command line) must not make the
// writer throw after a run: replace it with U+FFFD.
std::string dump_value(const ordered_json& j) {
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

// Pretty printing as nlohmann's dump(indent), except that arrays of scalars stay on one
// line: a result holds every per-token sample and token id, hundreds of them.
void pretty(const ordered_json& j, int indent, int depth, std::string& out) {
  const auto pad = [&](int d) { out.append(static_cast<size_t>(indent) * d, ' '); };
  if (j.is_object()) {
    if (j.empty()) {
      out += "{}";
      return;
    }
    out += "{\n";
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += ",\n";
      first = false;
      pad(depth + 1);
      out += dump_value(ordered_json(it.key()));
      out += ": ";
      pretty(it.value(), indent, depth + 1, out);
    }
    out += "\n";
    pad(depth);
    out += "}";
  } else if (j.is_array()) {
    const bool scalars =
        std::none_of(j.begin(), j.end(), [](const ordered_json& e) { return e.is_structured(); });
    if (scalars) {
      out += "[";
      for (size_t i = 0; i < j.size(); ++i) {
        if (i) out += ", ";
        out += dump_value(j[i]);
      }
      out += "]";
      return;
    }
    out += "[\n";
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) out += ",\n";
      pad(depth + 1);
      pretty(j[i], indent, depth + 1, out);
    }
    out += "\n";
    pad(depth);
    out += "]";
  } else {
    out += dump_value(j);
  }
}

// ---------------------------------------------------------------- reader

const char* json_type_name(const json& j) {
  if (j.is_number_integer()) return "an integer";
  if (j.is_number_float()) return "a number";
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    default:
      return "a value";
  }
}

// One JSON object at a dotted path inside a result, read by the field lists above; every
// error names the full path of the field at fault.
class Reader {
 public:
  Reader(const json& obj, std::string path, const std::string& origin)
      : obj_(obj), path_(std::move(path)), origin_(origin) {}

  // A nested struct: a JSON object read field by field with its path.
  template <class T, std::enable_if_t<kIsRecord<T>, int> = 0>
  void operator()(const char* key, T& out) const {
    const json& v = at(key);
    if (!v.is_object()) type_error(key, "an object", v);
    const Reader sub(v, full(key), origin_);
    fields(sub, out);
  }
  // A field added to v1 later: absent in files written before it, where it keeps its default.
  template <class T>
  void operator()(const char* key, T& out, Added) const {
    if (obj_.contains(key)) (*this)(key, out);
  }

  // An optional struct: an object, or null when absent.
  void operator()(const char* key, std::optional<ClockState>& out) const {
    const json& v = at(key);
    out.reset();
    if (v.is_null()) return;
    if (!v.is_object()) type_error(key, "an object or null", v);
    const Reader sub(v, full(key), origin_);
    fields(sub, out.emplace());
  }

  // A figure that may not have been measured: a number, or null.
  void operator()(const char* key, std::optional<double>& out) const {
    const json& v = at(key);
    out.reset();
    if (!v.is_null()) out = number(v, full(key));
  }

  void operator()(const char* key, std::string& out) const {
    const json& v = at(key);
    if (!v.is_string()) type_error(key, "a string", v);
    out = v.get<std::string>();
  }
  void operator()(const char* key, bool& out) const {
    const json& v = at(key);
    if (!v.is_boolean()) type_error(key, "true or false", v);
    out = v.get<bool>();
  }
  void operator()(const char* key, double& out) const { out = number(at(key), full(key)); }
  void operator()(const char* key, int& out) const {
    out = static_cast<int>(
        integer(at(key), full(key), std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
  }
  void operator()(const char* key, int64_t& out) const {
    out =
        integer(at(key), full(key), std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  }
  void operator()(const char* key, uint64_t& out) const { out = unsigned_integer(at(key), full(key)); }

  void operator()(const char* key, std::vector<std::string>& out) const {
    const json& v = array(key, "an array of strings");
    out.clear();
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) element_error(key, i, "a string", v[i]);
      out.push_back(v[i].get<std::string>());
    }
  }
  void operator()(const char* key, std::vector<double>& out) const {
    const json& v = array(key, "an array of numbers");
    out.clear();
    for (size_t i = 0; i < v.size(); ++i) out.push_back(number(v[i], element(key, i)));
  }
  void operator()(const char* key, std::vector<int32_t>& out) const {
    const json& v = array(key, "an array of integers");
    out.clear();
    for (size_t i = 0; i < v.size(); ++i)
      out.push_back(static_cast<int32_t>(integer(v[i], element(key, i), std::numeric_limits<int32_t>::min(),
                                                 std::numeric_limits<int32_t>::max())));
  }

 private:
  [[noreturn]] void fail_at(const std::string& path, const std::string& what) const {
    db::fail("{}: field {} {}", prefix(), path, what);
  }
  std::string full(const char* key) const { return path_.empty() ? key : path_ + "." + key; }
  std::string prefix() const { return origin_.empty() ? std::string("result") : "result " + origin_; }
  std::string element(const char* key, size_t i) const { return full(key) + "[" + std::to_string(i) + "]"; }

  const json& at(const char* key) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) db::fail("{}: missing field {}", prefix(), full(key));
    return *it;
  }
  const json& array(const char* key, const char* what) const {
    const json& v = at(key);
    if (!v.is_array()) type_error(key, what, v);
    return v;
  }
  [[noreturn]] void type_error(const char* key, const char* want, const json& got) const {
    fail_at(full(key), fmt::format("must be {} (got {})", want, json_type_name(got)));
  }
  [[noreturn]] void element_error(const char* key, size_t i, const char* want, const json& got) const {
    fail_at(element(key, i), fmt::format("must be {} (got {})", want, json_type_name(got)));
  }

  double number(const json& v, const std::string& path) const {
    if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();  // non-finite on write
    if (!v.is_number()) fail_at(path, fmt::format("must be a number (got {})", json_type_name(v)));
    return v.get<double>();
  }
  int64_t integer(const json& v, const std::string& path, int64_t lo, int64_t hi) const {
    if (!v.is_number_integer()) fail_at(path, fmt::format("must be an integer (got {})", json_type_name(v)));
    bool in_range;
    int64_t x = 0;
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      in_range = u <= static_cast<uint64_t>(hi);
      x = static_cast<int64_t>(u);
    } else {
      x = v.get<int64_t>();
      in_range = x >= lo && x <= hi;
    }
    if (!in_range) fail_at(path, fmt::format("must be an integer in [{}, {}] (got {})", lo, hi, v.dump()));
    return x;
  }
  uint64_t unsigned_integer(const json& v, const std::string& path) const {
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
      fail_at(path, fmt::format("must be a non-negative integer (got {})",
                                v.is_number_integer() ? v.dump() : json_type_name(v)));
    return v.get<uint64_t>();
  }

  const json& obj_;
  std::string path_;
  const std::string& origin_;
};

Result read_result(const json& j, const std::string& origin) {
  const std::string where = origin.empty() ? std::string("result") : "result " + origin;
  if (!j.is_object()) db::fail("{}: expected a JSON object, got {}", where, json_type_name(j));
  const Reader in(j, "", origin);
  Result r;
  // The schema first: a file of another kind or version fails on that, not on a field.
  in("schema", r.schema);
  if (r.schema != kResultSchema)
    db::fail("{}: schema is \"{}\", this decodebench reads \"{}\"", where, r.schema, kResultSchema);
  fields(in, r);
  // A file from before the repetition fields: its repetitions, derived from its samples.
  if (r.timing.repetition_medians_ms.empty() && !r.timing.samples_ms.empty()) {
    r.timing.repetition_medians_ms = repetition_medians(r);
    r.timing.noise = repetition_noise(r.timing.repetition_medians_ms);
    r.timing.repetitions = static_cast<int64_t>(r.timing.repetition_medians_ms.size());
  }
  if (r.config.batch < 1)
    db::fail("{}: field config.batch must be at least 1 (got {})", where, r.config.batch);
  // A file from before batches and the compute floor: batch 1, its floor the bandwidth's.
  if (!j.at("timing").contains("aggregate_tokens_per_s"))
    r.timing.aggregate_tokens_per_s = static_cast<double>(r.config.batch) * r.timing.tokens_per_s;
  if (!j.at("roofline").contains("bandwidth_floor_tpot_ms"))
    r.roofline.bandwidth_floor_tpot_ms = r.roofline.floor_tpot_ms;
  if (!j.at("check").contains("sequence_tokens_hashes"))
    r.check.sequence_tokens_hashes = {r.check.tokens_hash};
  return r;
}

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c) != 0; });
}

}  // namespace

void to_json(json& j, const Result& r) {
  j = write<json>(r);
}

void from_json(const json& j, Result& r) {
  r = read_result(j, "");
}

std::vector<std::string> kernel_shape_choices(const RunConfig& c) {
  std::vector<std::string> v;
  for (const std::string& e : c.kernel_shapes) {
    const size_t bracket = e.find(" ["), colon = e.find("]: "), comma = e.find(',', colon);
    if (bracket == std::string::npos || colon == std::string::npos || comma == std::string::npos ||
        bracket > colon)
      v.push_back(e.substr(0, e.find(',')));
    else
      v.push_back(e.substr(0, bracket) + " " + e.substr(colon + 3, comma - colon - 3));
  }
  return v;
}

std::string batched_path_groups(const RunConfig& c) {
  std::vector<std::pair<std::string, std::string>> groups;  // path, its matrices
  for (const std::string& e : c.batched_paths) {
    const size_t bracket = e.find(" ["), colon = e.find("]: ");
    const bool parsed = bracket != std::string::npos && colon != std::string::npos && bracket < colon;
    const std::string path = parsed ? e.substr(colon + 3) : e, matrix = parsed ? e.substr(0, bracket) : "";
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == path; });
    if (it == groups.end()) {
      groups.emplace_back(path, matrix);
    } else if (!matrix.empty()) {
      it->second += (it->second.empty() ? "" : ", ") + matrix;
    }
  }
  std::string out;
  for (const auto& [path, matrices] : groups)
    out += (out.empty() ? "" : ", ") + path + (matrices.empty() ? "" : " (" + matrices + ")");
  return out;
}

// indent < 0: one compact line (jsonl).
std::string result_to_json_text(const Result& r, int indent) {
  const ordered_json j = write<ordered_json>(r);
  if (indent < 0) return dump_value(j);
  std::string out;
  pretty(j, indent, 0, out);
  return out;
}

Result result_from_json_text(const std::string& text, const std::string& origin) {
  return read_result(parse_json_document(text, origin.empty() ? std::string("result") : "result " + origin),
                     origin);
}

namespace {

bool is_error_entry(const json& j) {
  return j.is_object() && j.contains("error") && j["error"].is_string() && !j.contains("timing");
}

// One element of a results file: a result or (an error entry, schema checked) an error.
void read_entry(const json& j, const std::string& where, ResultsAndErrors& out) {
  if (is_error_entry(j)) {
    const auto s = j.find("schema");
    if (s == j.end() || !s->is_string() || s->get<std::string>() != kResultSchema)
      db::fail("{}: error entry without schema \"{}\"", where, kResultSchema);
    ErrorEntry e;
    e.error = j["error"].get<std::string>();
    const auto c = j.find("config");
    if (c != j.end() && c->is_object())
      e.config_json = c->dump(-1, ' ', false, json::error_handler_t::replace);
    e.origin = where;
    out.errors.push_back(std::move(e));
    return;
  }
  out.results.push_back(read_result(j, where));
}

}  // namespace

std::string error_entry_json_text(const ErrorEntry& e, int indent) {
  ordered_json j;
  j["schema"] = kResultSchema;
  j["error"] = e.error;
  j["config"] = ordered_json::parse(e.config_json, nullptr, false);
  if (j["config"].is_discarded() || !j["config"].is_object()) j["config"] = ordered_json::object();
  return j.dump(indent < 0 ? -1 : indent, ' ', false, ordered_json::error_handler_t::replace);
}

std::string error_entry_summary(const ErrorEntry& e) {
  const json c = json::parse(e.config_json, nullptr, false);
  std::string s;
  if (!c.is_object()) return s;
  for (const char* k :
       {"model", "scheme", "kv_cache", "kernel", "graph", "adapter_mode", "batch", "context", "tokens"}) {
    const auto it = c.find(k);
    if (it == c.end() || it->is_null()) continue;
    std::string v = printable(it->is_string() ? it->get<std::string>() : it->dump(), 80);
    if (it->is_boolean()) v = it->get<bool>() ? "on" : "off";
    if (v.empty()) continue;
    s += (s.empty() ? "" : ", ") + std::string(k) + " " + v;
  }
  return s;
}

std::vector<Result> read_results(const std::string& path) {
  ResultsAndErrors r = read_results_and_errors(path);
  for (const std::string& w : r.warnings) warn_line(w);
  if (!r.errors.empty())
    db::fail("{}: an error entry of a failed sweep instance ({}), not a result: {}", r.errors[0].origin,
             error_entry_summary(r.errors[0]), r.errors[0].error);
  return std::move(r.results);
}

ResultsAndErrors read_results_and_errors(const std::string& path) {
  const std::string text = read_input_file(path, "results", kMaxResultsFileBytes);
  if (is_blank(text)) db::fail("results {}: the file is empty", path);
  return parse_results_text(text, path);
}

ResultsAndErrors parse_results_text(const std::string& text, const std::string& path) {
  ResultsAndErrors out;
  // One JSON document (an object or an array of objects), pretty-printed or not ...
  std::string document_error;
  std::optional<json> doc;
  try {
    doc = parse_json_document(text, "results " + path);
  } catch (const Error& e) {
    document_error = e.what();
  }
  if (doc) {
    if (doc->is_array()) {
      for (size_t i = 0; i < doc->size(); ++i) read_entry((*doc)[i], fmt::format("{}[{}]", path, i), out);
      return out;
    }
    read_entry(*doc, path, out);
    return out;
  }

  // ... or JSONL: one object per line, blank lines ignored. A file whose first line is not
  // a JSON value by itself is a malformed single document: report that parse error.
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < text.size();) {
    const size_t nl = std::min(text.find('\n', start), text.size());
    lines.push_back(std::string_view(text).substr(start, nl - start));
    start = nl + 1;
  }
  size_t first = 0;
  while (first < lines.size() && is_blank(lines[first])) ++first;
  try {
    parse_json_document(lines.at(first), path);
  } catch (const std::exception&) {
    throw Error(document_error);
  }
  const bool ends_whole = text.back() == '\n';
  for (size_t i = first; i < lines.size(); ++i) {
    if (is_blank(lines[i])) continue;
    const std::string where = fmt::format("{}:{}", path, i + 1);
    json entry;
    try {
      entry = parse_json_document(lines[i], "result " + where);
    } catch (const Error&) {
      // A last line cut short by an interrupted writer (no newline, not JSON): the lines
      // before it are whole, so they are read and it is skipped. Anywhere else a bad line
      // is a bad file.
      if (i + 1 != lines.size() || ends_whole) throw;
      out.warnings.push_back(fmt::format(
          "{}: skipping a torn last line ({} bytes without a newline, not valid JSON: an interrupted write)",
          where, lines[i].size()));
      continue;
    }
    read_entry(entry, where, out);
  }
  return out;
}

}  // namespace db
