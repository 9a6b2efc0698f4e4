// Result schema v1: the JSON writer and reader, the field table of docs/result-schema.md,
// read_results and the TPOT statistics.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "decodebench/error.h"
#include "decodebench/result.h"
#include "decodebench/roofline.h"
#include "decodebench/stats.h"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

db::ClockState clock_state(int k) {
  db::ClockState c;
  c.sm_clock_mhz = 1980 - k;
  c.mem_clock_mhz = 3201 + k;
  c.temperature_c = 41 + k;
  c.power_w = 118.25 + k;
  c.throttle_reasons = 0x4 + k;
  c.throttle = {"sw_power_cap", k ? "hw_slowdown" : "gpu_idle"};
  return c;
}

// Every field set to a value other than its default (checked by a test below), so a field
// the writer or reader forgets cannot round-trip by accident.
db::Result populated_result() {
  db::Result r;
  r.tool.name = "decodebench-test";
  r.tool.version = "0.1.0";
  r.tool.git_commit = "abc1234";
  r.tool.build_type = "Release";
  r.tool.cuda_runtime = "13.0";
  r.tool.cublas = "13.0.2";
  r.time = "2025-01-02T03:04:05Z";
  r.command = "decodebench --model 8b-int4 --graph on";
  r.device.backend = "cuda";
  r.device.name = "NVIDIA H200";
  r.device.uuid = "GPU-1234";
  r.device.compute_capability = "9.0";
  r.device.sm_count = 132;
  r.device.memory_bytes = 150'000'000'000ull;
  r.device.l2_bytes = 62'914'560;
  r.device.driver = "580.65";
  r.device.ecc = true;
  r.device.power_limit_w = 700.5;
  r.device.start = clock_state(0);
  r.device.end = clock_state(1);
  r.device.theoretical_GBps = 4800.25;
  r.device.peak_read_GBps = 4123.4567890123;
  r.device.cpu_threads = 16;
  r.device.peak_compute_TFLOPS = 989.5;
  r.device.compute_probe = "cublasGemmEx fp16 8192 x 8192 x 8192";
  r.config.model = "8b-int4";
  r.config.arch = "llama";
  r.config.weights = "synthetic";
  r.config.seed = 18'446'744'073'709'551'615ull;  // the full uint64 range survives
  r.config.scheme = "int4";
  r.config.group_size = 128;
  r.config.zero_point = true;
  r.config.lm_head_scheme = "int8";
  r.config.kernel = "int4.gemv";
  r.config.graph = true;
  r.config.adapter = "synthetic:rank=16";
  r.config.adapter_mode = "external";
  r.config.adapter_rank = 16;
  r.config.adapter_targets = {"q", "v"};
  r.config.adapter_scale = 2.5;
  r.config.context = 512;
  r.config.tokens = 4;
  r.config.warmup = 3;
  r.config.repeat = 2;
  r.config.sync_per_token = true;
  r.config.params = 8'030'261'248;
  r.config.max_noise = 0.005;
  r.config.max_time_s = 30;
  r.config.group_size_note = "int4 group size 64 instead of 128: 128 does not divide hidden_size 576";
  r.config.kernel_fallbacks = {"o_proj [128 x 376]: int8.naive, since the input is ragged"};
  r.config.weights_format = "gptq";
  r.config.batch = 4;
  r.config.kernel_shapes = {"gate_up [28672 x 4096]: m4u1b1, 34.3 us (default m4u1b2 34.9 us)"};
  r.config.batched_paths = {"qkv [6144 x 4096]: skinny-gemm", "gate_up [28672 x 4096]: skinny-gemm"};
  r.config.kv_cache = "int8";
  r.bytes.position_first = 512;
  r.bytes.position_last = 515;
  r.bytes.per_token = {3'758'096'384, 234'881'024, 58'720'256, 525'336'576, 8192,
                       532'480,       258'048,     41'943'040, 67'174'400,  131'072,
                       4'701'270'016, 123'456,     14'188'544, 1'049'600,   2'048};
  r.flops = {64'424'509'440, 4'303'355'904, 285'212'672, 2'097'152, 69'015'175'168};
  r.bytes.stored = {4'051'697'664, 525'336'576, 1'050'673'152, 532'480, 258'048, 41'943'040, 5'670'441'048};
  r.timing.samples_ms = {1.5, 1.25, 1.375, 1.625, 1.5, 1.3125, 1.4375, 1.75};
  r.timing.tpot_ms = db::compute_stats(r.timing.samples_ms);
  r.timing.tokens_per_s = 1000 / r.timing.tpot_ms.median;
  r.timing.load_s = 2.75;
  r.timing.prefill_s = 0.3125;
  r.timing.prefill = "batched";
  r.timing.prefill_attention = "wgmma";
  r.timing.prefill_tokens_per_s = 1024;
  r.timing.clock = "cuda-events";
  r.timing.weights_reused = true;
  r.timing.repetition_medians_ms = {1.4375, 1.46875};
  r.timing.noise = db::repetition_noise(r.timing.repetition_medians_ms);
  r.timing.repetitions = 2;
  r.timing.stop = "noise-target";
  r.timing.warnings = {"throttled: sw_power_cap at the run's end"};
  r.timing.aggregate_tokens_per_s = 4 * r.timing.tokens_per_s;
  r.roofline.floor_tpot_ms = 1.1366;
  r.roofline.achieved_GBps = 3249.5;
  r.roofline.efficiency = 0.7875;
  r.roofline.regime = "bandwidth-bound";
  r.roofline.regime_reason = "efficiency 0.79 >= 0.75";
  r.roofline.bandwidth_floor_tpot_ms = 1.1366;
  r.roofline.compute_floor_tpot_ms = 0.0697;
  r.roofline.achieved_TFLOPS = 47.25;
  r.roofline.arithmetic_intensity = 14.68;
  r.memory.weights_bytes = 5'670'183'000;
  r.memory.kv_cache_bytes = 1'073'741'824;
  r.memory.scratch_bytes = 2'097'152;
  r.memory.total_bytes = 6'746'021'976;
  r.check.tokens_hash = "cbf29ce484222325";
  r.check.tokens = {128000, 42, -1, 7};
  r.check.logits_checked = true;
  r.check.logits_max_rel_err = 1.25e-4;
  r.check.reference = "cpu float32";
  r.check.sequence_tokens_hashes = {"cbf29ce484222325", "af63bd4c8601b7df", "08328707b4eb6f3c",
                                    "1d4b1e3e47ba4dd1"};
  db::Energy& e = r.energy;
  e.source = "nvml total energy counter";
  e.reason = "";
  e.clocks_reason = "";
  e.sample_period_ms = 2;
  e.samples = 212;
  e.counter_update_ms = 20.5;
  e.resolution = 0.0325;
  e.idle_power_w = 80.5;
  e.idle_s = 0.45;
  e.window = "aligned";
  e.window_reason = "";
  e.detect_ms = 0.625;
  e.repetition_s = {0.625, 0.6875};
  e.repetition_j = {187.5, 199.25};
  e.repetition_tail_s = {0.0125, 0.0875};
  e.repetition_idle_j = {1.0625, 7.0625};
  e.repetition_sm_clock_mhz = {1975.5, 1960.25};
  e.repetition_mem_clock_mhz = {3200.5, 3201.5};
  e.j_per_step = {1.5, 1.25, 1.75, 0.0125};
  e.j_per_token = {0.375, 0.3125, 0.4375, 0.0125};
  e.power_w = {300.5, 290.25, 310.75, 0.025};
  e.sm_clock_mhz = {1967.5, 1960.25, 1975.5, 0.005};
  e.mem_clock_mhz = {3201.25, 3200.5, 3201.5, 0.0002};
  e.tokens_per_j = 2.6666;
  return r;
}

json::json_pointer pointer(const std::string& dotted) {
  std::string p = "/" + dotted;
  for (char& c : p)
    if (c == '.') c = '/';
  return json::json_pointer(p);
}

// Dotted paths of the leaves: everything that is not an object (arrays are leaves).
void collect_leaves(const json& j, const std::string& prefix, std::vector<std::string>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object())
      collect_leaves(*it, path, out);
    else
      out.push_back(path);
  }
}
std::vector<std::string> leaf_paths(const json& j) {
  std::vector<std::string> out;
  collect_leaves(j, "", out);
  return out;
}

std::string type_of(const json& v) {
  auto elements = [&](const char* t) { return std::string("array of ") + t; };
  if (v.is_string()) return "string";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "number";
  if (v.is_array() && !v.empty()) {
    if (v[0].is_string()) return elements("string");
    if (v[0].is_number_integer()) return elements("integer");
    if (v[0].is_number_float()) return elements("number");
  }
  return "other: " + v.dump();
}

// The documented field table: {path -> type} from the rows "| `path` | type | meaning |" of
// the "## Fields" section of docs/result-schema.md (other sections hold tables of their own).
std::map<std::string, std::string> documented_fields() {
  const std::string path = std::string(DB_SOURCE_DIR) + "/docs/result-schema.md";
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  std::map<std::string, std::string> fields;
  std::string line;
  bool in_section = false, found_section = false;
  while (std::getline(f, line)) {
    if (line.rfind("## ", 0) == 0) {
      in_section = line == "## Fields";
      if (in_section) {
        EXPECT_FALSE(found_section) << path << ": two \"## Fields\" sections";
        found_section = true;
      }
      continue;
    }
    if (!in_section || line.rfind("| `", 0) != 0) continue;
    const size_t end = line.find('`', 3);
    const std::string field = line.substr(3, end - 3);
    const size_t type_begin = line.find('|', end) + 1;
    const size_t type_end = line.find('|', type_begin);
    std::string type = line.substr(type_begin, type_end - type_begin);
    type.erase(0, type.find_first_not_of(' '));
    type.erase(type.find_last_not_of(' ') + 1);
    EXPECT_TRUE(fields.emplace(field, type).second) << "documented twice: " << field;
  }
  EXPECT_TRUE(found_section) << path << " has no \"## Fields\" section";
  return fields;
}

std::string error_of(const json& j) {
  try {
    j.get<db::Result>();
  } catch (const db::Error& e) {
    return e.what();
  }
  return "(no error)";
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "decodebench_test_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name, const std::string& text) const {
    const std::string p = (path_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

 private:
  fs::path path_;
};

TEST(Result, PopulatedResultSetsEveryFieldToANonDefaultValue) {
  const json populated = populated_result();
  const json defaults = db::Result{};
  for (const std::string& path : leaf_paths(populated)) {
    const auto p = pointer(path);
    if (path == "schema" || !defaults.contains(p)) continue;  // the schema is a constant
    EXPECT_NE(populated.at(p), defaults.at(p)) << path;
  }
}

TEST(Result, RoundTripsThroughJsonTextExactly) {
  const db::Result r = populated_result();
  for (int indent : {2, -1}) {
    const std::string text = db::result_to_json_text(r, indent);
    const db::Result back = db::result_from_json_text(text, "round-trip");
    EXPECT_EQ(db::result_to_json_text(back, indent), text);
    EXPECT_EQ(json(back), json(r));
    EXPECT_EQ(back.config.seed, r.config.seed);
    EXPECT_EQ(back.device.peak_read_GBps, r.device.peak_read_GBps);  // bit-exact doubles
    EXPECT_EQ(back.timing.samples_ms, r.timing.samples_ms);
  }
}

TEST(Result, TextStartsWithTheSchemaAndKeepsSampleArraysOnOneLine) {
  const std::string text = db::result_to_json_text(populated_result());
  EXPECT_EQ(text.rfind("{\n  \"schema\": \"decodebench/result/v1\",\n  \"tool\"", 0), 0u)
      << text.substr(0, 80);
  EXPECT_NE(text.find("\"samples_ms\": [1.5, 1.25, 1.375"), std::string::npos);
  EXPECT_EQ(db::result_to_json_text(populated_result(), -1).find('\n'), std::string::npos);
}

TEST(Result, AbsentClockStateIsNullAndReadsBackAbsent) {
  db::Result r = populated_result();
  r.device.start.reset();
  r.device.end.reset();
  const json j = r;
  EXPECT_TRUE(j["device"]["start"].is_null());
  EXPECT_TRUE(j["device"]["end"].is_null());
  const db::Result back = j.get<db::Result>();
  EXPECT_FALSE(back.device.start.has_value());
  EXPECT_FALSE(back.device.end.has_value());
}

TEST(Result, NonFiniteNumbersAreWrittenAsNullAndReadBackAsNaN) {
  db::Result r = populated_result();
  r.roofline.efficiency = std::nan("");
  const std::string text = db::result_to_json_text(r);
  EXPECT_NE(text.find("\"efficiency\": null"), std::string::npos);
  EXPECT_TRUE(std::isnan(db::result_from_json_text(text, "nan").roofline.efficiency));
}

TEST(Result, EveryDocumentedFieldExistsAndEveryFieldIsDocumented) {
  const std::map<std::string, std::string> documented = documented_fields();
  ASSERT_GT(documented.size(), 50u) << "the field table of docs/result-schema.md \"## Fields\" was not found";
  const json j = populated_result();
  for (const auto& [path, type] : documented) {
    ASSERT_TRUE(j.contains(pointer(path))) << "documented but not written: " << path;
    EXPECT_EQ(type, type_of(j.at(pointer(path)))) << "documented type of " << path;
  }
  for (const std::string& path : leaf_paths(j))
    EXPECT_TRUE(documented.count(path)) << "written but not documented: " << path;
}

// Fields added to v1 after result files were first written: files of earlier writers lack
// them, and a reader must still take those files.
const std::vector<std::string> kAddedFields = {"config.kv_cache",
                                               "timing.weights_reused",
                                               "timing.repetition_medians_ms",
                                               "timing.noise",
                                               "timing.repetitions",
                                               "timing.stop",
                                               "timing.warnings",
                                               "config.max_noise",
                                               "config.max_time_s",
                                               "config.group_size_note",
                                               "config.kernel_fallbacks",
                                               "config.kernel_shapes",
                                               "config.batched_paths",
                                               "config.weights_format",
                                               "bytes.per_token.biases",
                                               "bytes.stored.biases",
                                               "timing.prefill",
                                               "timing.prefill_tokens_per_s",
                                               "timing.prefill_attention",
                                               "config.batch",
                                               "device.peak_compute_TFLOPS",
                                               "device.compute_probe",
                                               "bytes.per_token.activations",
                                               "bytes.per_token.kv_read_scales",
                                               "bytes.per_token.kv_write_scales",
                                               "flops",
                                               "timing.aggregate_tokens_per_s",
                                               "roofline.bandwidth_floor_tpot_ms",
                                               "roofline.compute_floor_tpot_ms",
                                               "roofline.achieved_TFLOPS",
                                               "roofline.arithmetic_intensity",
                                               "check.sequence_tokens_hashes",
                                               "energy",
                                               "energy.window",
                                               "energy.window_reason",
                                               "energy.detect_ms",
                                               "energy.repetition_tail_s",
                                               "energy.repetition_idle_j"};

// What a reader makes of an added field a file lacks, where that is not its default: what
// the file's other fields imply for a run from before the field.
json derived_when_absent(const json& full, const std::string& path) {
  if (path == "timing.repetition_medians_ms") return full.at(pointer(path));  // from samples_ms
  if (path == "timing.aggregate_tokens_per_s")                                // batch x tokens_per_s
    return full["config"]["batch"].get<double>() * full["timing"]["tokens_per_s"].get<double>();
  if (path == "roofline.bandwidth_floor_tpot_ms") return full["roofline"]["floor_tpot_ms"];  // the only floor
  if (path == "check.sequence_tokens_hashes") return json::array({full["check"]["tokens_hash"]});
  return json(db::Result{}).at(pointer(path));  // the default
}

TEST(Result, MissingFieldIsAnErrorNamingItsPath) {
  const json full = populated_result();
  const std::vector<std::string> paths = leaf_paths(full);
  ASSERT_GT(paths.size(), 50u);
  for (const std::string& path : paths) {
    const auto added = [&](const std::string& a) { return path == a || path.rfind(a + ".", 0) == 0; };
    if (std::any_of(kAddedFields.begin(), kAddedFields.end(), added)) continue;
    json j = full;
    const auto p = pointer(path);
    j[p.parent_pointer()].erase(p.back());
    EXPECT_EQ(error_of(j), "result: missing field " + path);
  }
  json j = full;
  j["device"].erase("start");  // an optional sub-object is still a required key (null when absent)
  EXPECT_EQ(error_of(j), "result: missing field device.start");
}

// A file from before the repetition fields: its repetition medians, noise and count come
// from its samples, config.tokens at a time; a batch-1 run's aggregate tokens/s, bandwidth
// floor and sequence hashes from its own; the other added fields read as their defaults.
TEST(Result, AnAddedFieldMayBeAbsentAndThenReadsAsItsDefault) {
  const json full = populated_result();
  for (const std::string& path : kAddedFields) {
    json j = full;
    const auto p = pointer(path);
    ASSERT_TRUE(j.contains(p)) << path;
    j[p.parent_pointer()].erase(p.back());
    const json back = j.get<db::Result>();  // no error: a file from before the field
    EXPECT_EQ(back.at(p), derived_when_absent(full, path)) << path;
    json other = back;
    other[p] = full.at(p);
    EXPECT_EQ(other, full) << path;  // every other field read as written
  }
}

TEST(Result, MistypedFieldIsAnErrorNamingItsPath) {
  const json full = populated_result();
  for (const std::string& path : leaf_paths(full)) {
    json j = full;
    json& v = j[pointer(path)];
    if (v.is_string())
      v = 7;
    else if (v.is_number_integer())
      v = 1.5;
    else if (v.is_number())
      v = "1.5";
    else if (v.is_boolean())
      v = 1;
    else
      v = "[]";  // arrays
    EXPECT_EQ(error_of(j).rfind("result: field " + path + " must be", 0), 0u) << error_of(j);
  }
}

TEST(Result, MistypedArrayElementsAndOutOfRangeIntegersAreNamed) {
  json j = populated_result();
  j["timing"]["samples_ms"][2] = "fast";
  EXPECT_EQ(error_of(j), "result: field timing.samples_ms[2] must be a number (got a string)");
  j = populated_result();
  j["check"]["tokens"][1] = 3'000'000'000ll;
  EXPECT_NE(error_of(j).find("field check.tokens[1] must be an integer in"), std::string::npos)
      << error_of(j);
  j = populated_result();
  j["config"]["seed"] = -1;
  EXPECT_EQ(error_of(j), "result: field config.seed must be a non-negative integer (got -1)");
  j = populated_result();
  j["config"]["tokens"] = 12.0;
  EXPECT_EQ(error_of(j), "result: field config.tokens must be an integer (got a number)");
  j = populated_result();
  j["device"]["start"] = "hot";
  EXPECT_EQ(error_of(j), "result: field device.start must be an object or null (got a string)");
}

TEST(Result, WrongSchemaOrShapeIsRejected) {
  json j = populated_result();
  j["schema"] = "decodebench/result/v2";
  EXPECT_NE(error_of(j).find("schema is \"decodebench/result/v2\""), std::string::npos) << error_of(j);
  j.erase("timing");  // the schema is checked before any other field
  EXPECT_NE(error_of(j).find("schema"), std::string::npos) << error_of(j);
  EXPECT_EQ(error_of(json::array()), "result: expected a JSON object, got an array");
}

TEST(Result, UnknownFieldsAreIgnored) {
  json j = populated_result();
  j["added_later"] = {{"x", 1}};
  j["timing"]["tpot_ms"]["p999"] = 2.0;
  EXPECT_EQ(json(j.get<db::Result>()), json(populated_result()));
}

TEST(Result, TextErrorsNameTheOrigin) {
  try {
    db::result_from_json_text("{\"schema\": \"decodebench/result/v1\"}", "runs/a.json");
    ADD_FAILURE() << "no error";
  } catch (const db::Error& e) {
    EXPECT_STREQ(e.what(), "result runs/a.json: missing field tool");
  }
  try {
    db::result_from_json_text("{\"schema\": ", "runs/b.json");
    ADD_FAILURE() << "no error";
  } catch (const db::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("result runs/b.json: invalid JSON: ", 0), 0u) << e.what();
  }
}

db::Result numbered(int i) {
  db::Result r = populated_result();
  r.config.context = 100 * i;
  return r;
}

TEST(ReadResults, ReadsOneObjectAnArrayAndJsonl) {
  TempDir dir;
  const auto one = db::read_results(dir.file("one.json", db::result_to_json_text(numbered(1))));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].config.context, 100);

  const std::string array =
      "[\n" + db::result_to_json_text(numbered(1)) + ",\n" + db::result_to_json_text(numbered(2)) + "\n]\n";
  const auto two = db::read_results(dir.file("two.json", array));
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[1].config.context, 200);

  const std::string lines = "\n" + db::result_to_json_text(numbered(1), -1) + "\n\n  \n" +
                            db::result_to_json_text(numbered(2), -1) + "\n" +
                            db::result_to_json_text(numbered(3), -1);  // no final newline
  const auto three = db::read_results(dir.file("three.jsonl", lines));
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[2].config.context, 300);
  EXPECT_EQ(json(three[0]), json(numbered(1)));

  EXPECT_TRUE(db::read_results(dir.file("empty_array.json", "[]")).empty());
}

std::string read_error(const std::string& path) {
  try {
    db::read_results(path);
  } catch (const db::Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ReadResults, ErrorsNameTheFileAndTheLineOrElement) {
  TempDir dir;
  json bad = numbered(2);
  bad["timing"]["tpot_ms"].erase("median");

  const std::string jsonl =
      dir.file("runs.jsonl", db::result_to_json_text(numbered(1), -1) + "\n\n" + bad.dump() + "\n");
  EXPECT_EQ(read_error(jsonl), "result " + jsonl + ":3: missing field timing.tpot_ms.median");

  const std::string broken =
      dir.file("broken.jsonl", db::result_to_json_text(numbered(1), -1) + "\n{\"schema\": \n");
  EXPECT_EQ(read_error(broken).rfind("result " + broken + ":2: invalid JSON", 0), 0u) << read_error(broken);

  const std::string array = dir.file("runs.json", json::array({json(numbered(1)), bad}).dump(2));
  EXPECT_EQ(read_error(array), "result " + array + "[1]: missing field timing.tpot_ms.median");

  const std::string pretty = db::result_to_json_text(numbered(1));
  const std::string truncated = dir.file("truncated.json", pretty.substr(0, pretty.size() / 2));
  EXPECT_EQ(read_error(truncated).rfind("results " + truncated + ": invalid JSON", 0), 0u)
      << read_error(truncated);

  EXPECT_NE(read_error(dir.file("empty.json", "\n")).find("empty"), std::string::npos);
  const std::string missing = dir.file("x", "") + ".does-not-exist";
  EXPECT_NE(read_error(missing).find(missing), std::string::npos) << read_error(missing);
}

void expect_stats(const db::TpotStats& s, double mean, double median, double p10, double p90, double p99,
                  double min, double max, double stdev, int64_t n) {
  const double tol = 1e-12;
  EXPECT_NEAR(s.mean, mean, tol);
  EXPECT_NEAR(s.median, median, tol);
  EXPECT_NEAR(s.p10, p10, tol);
  EXPECT_NEAR(s.p90, p90, tol);
  EXPECT_NEAR(s.p99, p99, tol);
  EXPECT_EQ(s.min, min);
  EXPECT_EQ(s.max, max);
  EXPECT_NEAR(s.stdev, stdev, tol);
  EXPECT_EQ(s.n, n);
}

TEST(ComputeStats, MatchesHandComputedValues) {
  // Ranks h = (n-1)p between the closest samples (numpy's default): n=4, p10 -> h=0.3.
  expect_stats(db::compute_stats({4, 1, 3, 2}), 2.5, 2.5, 1.3, 3.7, 3.97, 1, 4, std::sqrt(5.0 / 3.0), 4);
  // n=5: p10 -> h=0.4 -> 10 + 0.4*10; stdev = sqrt(1000/4).
  expect_stats(db::compute_stats({50, 10, 40, 20, 30}), 30, 30, 14, 46, 49.6, 10, 50, std::sqrt(250.0), 5);
  expect_stats(db::compute_stats({2.5}), 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 0, 1);
  expect_stats(db::compute_stats({}), 0, 0, 0, 0, 0, 0, 0, 0, 0);
}

}  // namespace
