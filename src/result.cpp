// JSON writer and reader of schema "decodebench/result/v1", and the TPOT statistics.
//
// The writer is one template over the JSON type: to_json() fills an nlohmann::json (keys
// sorted, what callers index into), result_to_json_text() an ordered_json so that files read
// in declaration order (schema, tool, time, command, device, config, bytes, ...).
//
// The reader is strict: every documented field must be present with its type, and the error
// names the full dotted path ("result r.json: missing field timing.tpot_ms.median"). Unknown
// fields are ignored, so a v1 reader accepts files from a later v1 writer that added fields.
// Non-finite numbers are written by nlohmann/json as null; the reader turns null back into
// NaN for number fields (an integer or string field never accepts null).
#include "decodebench/result.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "decodebench/error.h"

namespace db {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// ---------------------------------------------------------------- writer

template <class J>
J write(const ToolInfo& t) {
  J j = J::object();
  j["name"] = t.name;
  j["version"] = t.version;
  j["git_commit"] = t.git_commit;
  j["build_type"] = t.build_type;
  j["cuda_runtime"] = t.cuda_runtime;
  j["cublas"] = t.cublas;
  return j;
}

template <class J>
J write(const std::optional<ClockState>& c) {
  if (!c) return J(nullptr);
  J j = J::object();
  j["sm_clock_mhz"] = c->sm_clock_mhz;
  j["mem_clock_mhz"] = c->mem_clock_mhz;
  j["temperature_c"] = c->temperature_c;
  j["power_w"] = c->power_w;
  j["throttle_reasons"] = c->throttle_reasons;
  j["throttle"] = c->throttle;
  return j;
}

template <class J>
J write(const DeviceInfo& d) {
  J j = J::object();
  j["backend"] = d.backend;
  j["name"] = d.name;
  j["uuid"] = d.uuid;
  j["compute_capability"] = d.compute_capability;
  j["sm_count"] = d.sm_count;
  j["memory_bytes"] = d.memory_bytes;
  j["l2_bytes"] = d.l2_bytes;
  j["driver"] = d.driver;
  j["ecc"] = d.ecc;
  j["power_limit_w"] = d.power_limit_w;
  j["start"] = write<J>(d.start);
  j["end"] = write<J>(d.end);
  j["theoretical_GBps"] = d.theoretical_GBps;
  j["peak_read_GBps"] = d.peak_read_GBps;
  j["cpu_threads"] = d.cpu_threads;
  return j;
}

template <class J>
J write(const RunConfig& c) {
  J j = J::object();
  j["model"] = c.model;
  j["arch"] = c.arch;
  j["weights"] = c.weights;
  j["seed"] = c.seed;
  j["scheme"] = c.scheme;
  j["group_size"] = c.group_size;
  j["zero_point"] = c.zero_point;
  j["lm_head_scheme"] = c.lm_head_scheme;
  j["kernel"] = c.kernel;
  j["graph"] = c.graph;
  j["adapter"] = c.adapter;
  j["adapter_mode"] = c.adapter_mode;
  j["adapter_rank"] = c.adapter_rank;
  j["adapter_targets"] = c.adapter_targets;
  j["adapter_scale"] = c.adapter_scale;
  j["context"] = c.context;
  j["tokens"] = c.tokens;
  j["warmup"] = c.warmup;
  j["repeat"] = c.repeat;
  j["sync_per_token"] = c.sync_per_token;
  j["params"] = c.params;
  return j;
}

template <class J>
J write(const PerTokenBytes& p) {
  J j = J::object();
  j["linear_weights"] = p.linear_weights;
  j["scales"] = p.scales;
  j["zeros"] = p.zeros;
  j["lm_head"] = p.lm_head;
  j["embedding_row"] = p.embedding_row;
  j["norms"] = p.norms;
  j["adapter"] = p.adapter;
  j["kv_read"] = p.kv_read;
  j["kv_write"] = p.kv_write;
  j["total"] = p.total;
  j["kernel_extra"] = p.kernel_extra;
  return j;
}

template <class J>
J write(const StoredBytes& s) {
  J j = J::object();
  j["linear"] = s.linear;
  j["lm_head"] = s.lm_head;
  j["embedding"] = s.embedding;
  j["norms"] = s.norms;
  j["adapter"] = s.adapter;
  j["total"] = s.total;
  return j;
}

template <class J>
J write(const ByteAccount& b) {
  J j = J::object();
  j["position_first"] = b.position_first;
  j["position_last"] = b.position_last;
  j["per_token"] = write<J>(b.per_token);
  j["stored"] = write<J>(b.stored);
  return j;
}

template <class J>
J write(const TpotStats& s) {
  J j = J::object();
  j["mean"] = s.mean;
  j["median"] = s.median;
  j["p10"] = s.p10;
  j["p90"] = s.p90;
  j["p99"] = s.p99;
  j["min"] = s.min;
  j["max"] = s.max;
  j["stdev"] = s.stdev;
  j["n"] = s.n;
  return j;
}

template <class J>
J write(const Timing& t) {
  J j = J::object();
  j["tpot_ms"] = write<J>(t.tpot_ms);
  j["samples_ms"] = t.samples_ms;
  j["tokens_per_s"] = t.tokens_per_s;
  j["load_s"] = t.load_s;
  j["prefill_s"] = t.prefill_s;
  j["clock"] = t.clock;
  return j;
}

template <class J>
J write(const Roofline& r) {
  J j = J::object();
  j["floor_tpot_ms"] = r.floor_tpot_ms;
  j["achieved_GBps"] = r.achieved_GBps;
  j["efficiency"] = r.efficiency;
  j["regime"] = r.regime;
  j["regime_reason"] = r.regime_reason;
  return j;
}

template <class J>
J write(const MemoryUse& m) {
  J j = J::object();
  j["weights_bytes"] = m.weights_bytes;
  j["kv_cache_bytes"] = m.kv_cache_bytes;
  j["scratch_bytes"] = m.scratch_bytes;
  j["total_bytes"] = m.total_bytes;
  return j;
}

template <class J>
J write(const Check& c) {
  J j = J::object();
  j["tokens_hash"] = c.tokens_hash;
  j["tokens"] = c.tokens;
  j["logits_checked"] = c.logits_checked;
  j["logits_max_rel_err"] = c.logits_max_rel_err;
  j["reference"] = c.reference;
  return j;
}

template <class J>
J write(const Result& r) {
  J j = J::object();
  j["schema"] = r.schema;
  j["tool"] = write<J>(r.tool);
  j["time"] = r.time;
  j["command"] = r.command;
  j["device"] = write<J>(r.device);
  j["config"] = write<J>(r.config);
  j["bytes"] = write<J>(r.bytes);
  j["timing"] = write<J>(r.timing);
  j["roofline"] = write<J>(r.roofline);
  j["memory"] = write<J>(r.memory);
  j["check"] = write<J>(r.check);
  return j;
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
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    default: return "a value";
  }
}

// One JSON object at a dotted path inside a result; every getter names path.key on error.
class Reader {
 public:
  Reader(const json& obj, std::string path, const std::string& origin)
      : obj_(obj), path_(std::move(path)), origin_(origin) {}

  Reader object(const char* key) const {
    const json& v = at(key);
    if (!v.is_object()) type_error(key, "an object", v);
    return Reader(v, full(key), origin_);
  }
  // An object or null (optional sub-structure).
  const json* object_or_null(const char* key) const {
    const json& v = at(key);
    if (v.is_null()) return nullptr;
    if (!v.is_object()) type_error(key, "an object or null", v);
    return &v;
  }
  Reader sub(const json& v, const char* key) const { return Reader(v, full(key), origin_); }

  void get(const char* key, std::string& out) const {
    const json& v = at(key);
    if (!v.is_string()) type_error(key, "a string", v);
    out = v.get<std::string>();
  }
  void get(const char* key, bool& out) const {
    const json& v = at(key);
    if (!v.is_boolean()) type_error(key, "true or false", v);
    out = v.get<bool>();
  }
  void get(const char* key, double& out) const { out = number(at(key), full(key)); }
  void get(const char* key, int& out) const {
    out = static_cast<int>(integer(at(key), full(key), std::numeric_limits<int>::min(),
                                   std::numeric_limits<int>::max()));
  }
  void get(const char* key, int64_t& out) const {
    out = integer(at(key), full(key), std::numeric_limits<int64_t>::min(),
                  std::numeric_limits<int64_t>::max());
  }
  void get(const char* key, uint64_t& out) const { out = unsigned_integer(at(key), full(key)); }

  void get(const char* key, std::vector<std::string>& out) const {
    const json& v = array(key, "an array of strings");
    out.clear();
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) element_error(key, i, "a string", v[i]);
      out.push_back(v[i].get<std::string>());
    }
  }
  void get(const char* key, std::vector<double>& out) const {
    const json& v = array(key, "an array of numbers");
    out.clear();
    for (size_t i = 0; i < v.size(); ++i) out.push_back(number(v[i], element(key, i)));
  }
  void get(const char* key, std::vector<int32_t>& out) const {
    const json& v = array(key, "an array of integers");
    out.clear();
    for (size_t i = 0; i < v.size(); ++i)
      out.push_back(static_cast<int32_t>(integer(v[i], element(key, i), std::numeric_limits<int32_t>::min(),
                                                 std::numeric_limits<int32_t>::max())));
  }

  [[noreturn]] void fail_at(const std::string& path, const std::string& what) const {
    db::fail("{}: field {} {}", prefix(), path, what);
  }
  std::string full(const char* key) const { return path_.empty() ? key : path_ + "." + key; }

 private:
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
    if (!v.is_number_integer())
      fail_at(path, fmt::format("must be an integer (got {})", json_type_name(v)));
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

ToolInfo read_tool(const Reader& in) {
  ToolInfo t;
  in.get("name", t.name);
  in.get("version", t.version);
  in.get("git_commit", t.git_commit);
  in.get("build_type", t.build_type);
  in.get("cuda_runtime", t.cuda_runtime);
  in.get("cublas", t.cublas);
  return t;
}

std::optional<ClockState> read_clock(const Reader& parent, const char* key) {
  const json* v = parent.object_or_null(key);
  if (!v) return std::nullopt;
  const Reader in = parent.sub(*v, key);
  ClockState c;
  in.get("sm_clock_mhz", c.sm_clock_mhz);
  in.get("mem_clock_mhz", c.mem_clock_mhz);
  in.get("temperature_c", c.temperature_c);
  in.get("power_w", c.power_w);
  in.get("throttle_reasons", c.throttle_reasons);
  in.get("throttle", c.throttle);
  return c;
}

DeviceInfo read_device(const Reader& in) {
  DeviceInfo d;
  in.get("backend", d.backend);
  in.get("name", d.name);
  in.get("uuid", d.uuid);
  in.get("compute_capability", d.compute_capability);
  in.get("sm_count", d.sm_count);
  in.get("memory_bytes", d.memory_bytes);
  in.get("l2_bytes", d.l2_bytes);
  in.get("driver", d.driver);
  in.get("ecc", d.ecc);
  in.get("power_limit_w", d.power_limit_w);
  d.start = read_clock(in, "start");
  d.end = read_clock(in, "end");
  in.get("theoretical_GBps", d.theoretical_GBps);
  in.get("peak_read_GBps", d.peak_read_GBps);
  in.get("cpu_threads", d.cpu_threads);
  return d;
}

RunConfig read_config(const Reader& in) {
  RunConfig c;
  in.get("model", c.model);
  in.get("arch", c.arch);
  in.get("weights", c.weights);
  in.get("seed", c.seed);
  in.get("scheme", c.scheme);
  in.get("group_size", c.group_size);
  in.get("zero_point", c.zero_point);
  in.get("lm_head_scheme", c.lm_head_scheme);
  in.get("kernel", c.kernel);
  in.get("graph", c.graph);
  in.get("adapter", c.adapter);
  in.get("adapter_mode", c.adapter_mode);
  in.get("adapter_rank", c.adapter_rank);
  in.get("adapter_targets", c.adapter_targets);
  in.get("adapter_scale", c.adapter_scale);
  in.get("context", c.context);
  in.get("tokens", c.tokens);
  in.get("warmup", c.warmup);
  in.get("repeat", c.repeat);
  in.get("sync_per_token", c.sync_per_token);
  in.get("params", c.params);
  return c;
}

ByteAccount read_bytes(const Reader& in) {
  ByteAccount b;
  in.get("position_first", b.position_first);
  in.get("position_last", b.position_last);
  const Reader p = in.object("per_token");
  p.get("linear_weights", b.per_token.linear_weights);
  p.get("scales", b.per_token.scales);
  p.get("zeros", b.per_token.zeros);
  p.get("lm_head", b.per_token.lm_head);
  p.get("embedding_row", b.per_token.embedding_row);
  p.get("norms", b.per_token.norms);
  p.get("adapter", b.per_token.adapter);
  p.get("kv_read", b.per_token.kv_read);
  p.get("kv_write", b.per_token.kv_write);
  p.get("total", b.per_token.total);
  p.get("kernel_extra", b.per_token.kernel_extra);
  const Reader s = in.object("stored");
  s.get("linear", b.stored.linear);
  s.get("lm_head", b.stored.lm_head);
  s.get("embedding", b.stored.embedding);
  s.get("norms", b.stored.norms);
  s.get("adapter", b.stored.adapter);
  s.get("total", b.stored.total);
  return b;
}

Timing read_timing(const Reader& in) {
  Timing t;
  const Reader s = in.object("tpot_ms");
  s.get("mean", t.tpot_ms.mean);
  s.get("median", t.tpot_ms.median);
  s.get("p10", t.tpot_ms.p10);
  s.get("p90", t.tpot_ms.p90);
  s.get("p99", t.tpot_ms.p99);
  s.get("min", t.tpot_ms.min);
  s.get("max", t.tpot_ms.max);
  s.get("stdev", t.tpot_ms.stdev);
  s.get("n", t.tpot_ms.n);
  in.get("samples_ms", t.samples_ms);
  in.get("tokens_per_s", t.tokens_per_s);
  in.get("load_s", t.load_s);
  in.get("prefill_s", t.prefill_s);
  in.get("clock", t.clock);
  return t;
}

Roofline read_roofline(const Reader& in) {
  Roofline r;
  in.get("floor_tpot_ms", r.floor_tpot_ms);
  in.get("achieved_GBps", r.achieved_GBps);
  in.get("efficiency", r.efficiency);
  in.get("regime", r.regime);
  in.get("regime_reason", r.regime_reason);
  return r;
}

MemoryUse read_memory(const Reader& in) {
  MemoryUse m;
  in.get("weights_bytes", m.weights_bytes);
  in.get("kv_cache_bytes", m.kv_cache_bytes);
  in.get("scratch_bytes", m.scratch_bytes);
  in.get("total_bytes", m.total_bytes);
  return m;
}

Check read_check(const Reader& in) {
  Check c;
  in.get("tokens_hash", c.tokens_hash);
  in.get("tokens", c.tokens);
  in.get("logits_checked", c.logits_checked);
  in.get("logits_max_rel_err", c.logits_max_rel_err);
  in.get("reference", c.reference);
  return c;
}

Result read_result(const json& j, const std::string& origin) {
  const std::string where = origin.empty() ? std::string("result") : "result " + origin;
  if (!j.is_object()) db::fail("{}: expected a JSON object, got {}", where, json_type_name(j));
  const Reader in(j, "", origin);
  Result r;
  // The schema first: a file of another kind or version fails on that, not on a field.
  in.get("schema", r.schema);
  if (r.schema != kResultSchema)
    db::fail("{}: schema is \"{}\", this decodebench reads \"{}\"", where, r.schema, kResultSchema);
  r.tool = read_tool(in.object("tool"));
  in.get("time", r.time);
  in.get("command", r.command);
  r.device = read_device(in.object("device"));
  r.config = read_config(in.object("config"));
  r.bytes = read_bytes(in.object("bytes"));
  r.timing = read_timing(in.object("timing"));
  r.roofline = read_roofline(in.object("roofline"));
  r.memory = read_memory(in.object("memory"));
  r.check = read_check(in.object("check"));
  return r;
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; users need the rest.
std::string parse_message(const std::exception& e) {
  std::string m = e.what();
  if (m.rfind("[json.exception.", 0) == 0) {
    const size_t close = m.find("] ");
    if (close != std::string::npos) m.erase(0, close + 2);
  }
  return m;
}

json parse_json(const std::string& text, const std::string& where) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    db::fail("{}: invalid JSON: {}", where, parse_message(e));
  }
}

bool is_blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c) != 0; });
}

double percentile(const std::vector<double>& sorted, double p) {
  // numpy.percentile(method="linear"): rank h = (n-1)p between the closest ranks.
  const double h = static_cast<double>(sorted.size() - 1) * p;
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

}  // namespace

void to_json(json& j, const Result& r) { j = write<json>(r); }

void from_json(const json& j, Result& r) { r = read_result(j, ""); }

// indent < 0: one compact line (jsonl).
std::string result_to_json_text(const Result& r, int indent) {
  const ordered_json j = write<ordered_json>(r);
  if (indent < 0) return dump_value(j);
  std::string out;
  pretty(j, indent, 0, out);
  return out;
}

Result result_from_json_text(const std::string& text, const std::string& origin) {
  return read_result(parse_json(text, origin.empty() ? std::string("result") : "result " + origin), origin);
}

std::vector<Result> read_results(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) db::fail("cannot read results {}: {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) db::fail("cannot read results {}: read error", path);
  const std::string text = ss.str();
  if (is_blank(text)) db::fail("results {}: the file is empty", path);

  // One JSON document (an object or an array of objects), pretty-printed or not ...
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_discarded()) {
    if (doc.is_array()) {
      std::vector<Result> out;
      out.reserve(doc.size());
      for (size_t i = 0; i < doc.size(); ++i) out.push_back(read_result(doc[i], fmt::format("{}[{}]", path, i)));
      return out;
    }
    return {read_result(doc, path)};
  }

  // ... or JSONL: one object per line, blank lines ignored. A file whose first line is not
  // a JSON value by itself is a malformed single document: report that parse error.
  std::vector<std::string> lines;
  {
    std::istringstream ls(text);
    std::string line;
    while (std::getline(ls, line)) lines.push_back(line);
  }
  size_t first = 0;
  while (first < lines.size() && is_blank(lines[first])) ++first;
  if (json::parse(lines[first], nullptr, false).is_discarded()) parse_json(text, "results " + path);

  std::vector<Result> out;
  for (size_t i = first; i < lines.size(); ++i) {
    if (is_blank(lines[i])) continue;
    const std::string where = fmt::format("{}:{}", path, i + 1);
    out.push_back(read_result(parse_json(lines[i], "result " + where), where));
  }
  return out;
}

TpotStats compute_stats(const std::vector<double>& samples) {
  TpotStats s;
  if (samples.empty()) return s;
  std::vector<double> v = samples;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.n = static_cast<int64_t>(n);
  s.min = v.front();
  s.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(n);
  s.median = percentile(v, 0.5);
  s.p10 = percentile(v, 0.1);
  s.p90 = percentile(v, 0.9);
  s.p99 = percentile(v, 0.99);
  if (n >= 2) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.stdev = std::sqrt(ss / static_cast<double>(n - 1));
  }
  return s;
}

}  // namespace db
