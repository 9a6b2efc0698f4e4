// Printers: one field list feeds md and csv; json and jsonl read back to the same results;
// result files appear whole or not at all; the run summary.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "decodebench/error.h"
#include "decodebench/printers.h"
#include "decodebench/result.h"
#include "decodebench/stats.h"

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

db::Result sample_result(const std::string& model, double median_ms) {
  db::Result r;
  r.tool.version = "0.1.0";
  r.tool.build_type = "Release";
  r.device.backend = "cuda";
  r.device.name = "NVIDIA H200";
  r.device.compute_capability = "9.0";
  r.device.sm_count = 132;
  r.device.memory_bytes = 150'000'000'000ull;
  r.device.peak_read_GBps = 4100;
  r.config.model = model;
  r.config.arch = "llama";
  r.config.scheme = "int4";
  r.config.group_size = 128;
  r.config.zero_point = true;
  r.config.lm_head_scheme = "fp16";
  r.config.kernel = "int4.gemv";
  r.config.graph = true;
  r.config.context = 512;
  r.config.tokens = 128;
  r.config.repeat = 5;
  r.config.params = 8'030'261'248;
  r.bytes.per_token.linear_weights = 3'758'096'384;
  r.bytes.per_token.scales = 234'881'024;
  r.bytes.per_token.zeros = 58'720'256;
  r.bytes.per_token.lm_head = 1'050'673'152;
  r.bytes.per_token.embedding_row = 8192;
  r.bytes.per_token.norms = 532'480;
  r.bytes.per_token.kv_read = 67'174'400;
  r.bytes.per_token.kv_write = 131'072;
  r.bytes.per_token.total = 5'170'216'960;
  r.timing.samples_ms = {median_ms - 0.1, median_ms, median_ms + 0.1};
  r.timing.tpot_ms = db::compute_stats(r.timing.samples_ms);
  r.timing.repetition_medians_ms = db::repetition_medians(r);  // as a run writes them
  r.timing.noise = db::repetition_noise(r.timing.repetition_medians_ms);
  r.timing.repetitions = static_cast<int64_t>(r.timing.repetition_medians_ms.size());
  r.timing.tokens_per_s = 1000 / median_ms;
  r.timing.clock = "cuda-events";
  r.roofline.floor_tpot_ms = 5'170'216'960 / 4100e9 * 1e3;
  r.roofline.achieved_GBps = 5'170'216'960 / (median_ms * 1e-3) / 1e9;
  r.roofline.efficiency = r.roofline.floor_tpot_ms / median_ms;
  r.roofline.regime = "bandwidth-bound";
  r.roofline.regime_reason = "efficiency 0.84 >= 0.75";
  r.memory.weights_bytes = 5'700'000'000;
  r.memory.kv_cache_bytes = 1'073'741'824;
  r.memory.scratch_bytes = 2'097'152;
  r.memory.total_bytes = 6'775'838'976;
  return r;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

// Cells of a md row: split on unescaped '|', trimmed.
std::vector<std::string> md_cells(const std::string& row) {
  std::vector<std::string> cells;
  std::string cur;
  for (size_t i = 1; i < row.size(); ++i) {  // row[0] is the leading '|'
    if (row[i] == '|' && row[i - 1] != '\\') {
      const size_t b = cur.find_first_not_of(' '), e = cur.find_last_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : cur.substr(b, e - b + 1));
      cur.clear();
    } else {
      cur += row[i];
    }
  }
  return cells;
}

// A small RFC 4180 reader: records of fields, quotes doubled inside quoted fields.
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted = false, in_field = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
      in_field = true;
    } else if (c == ',') {
      rows.back().push_back(field);
      field.clear();
    } else if (c == '\n') {
      rows.back().push_back(field);
      field.clear();
      rows.emplace_back();
      in_field = false;
    } else {
      field += c;
      in_field = true;
    }
  }
  if (in_field || !rows.back().empty()) rows.back().push_back(field);
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "decodebench_test_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(Printers, EveryTableFieldIsAResultField) {
  const json j = db::Result{};
  for (const auto& f : db::result_fields()) {
    std::string ptr = std::string("/") + f.path;
    for (char& c : ptr)
      if (c == '.') c = '/';
    EXPECT_TRUE(j.contains(json::json_pointer(ptr))) << f.path;
  }
}

TEST(Printers, MarkdownHasAHeaderAnAlignmentRowAndOneRowPerResult) {
  const std::vector<db::Result> results = {sample_result("8b-int4", 1.5), sample_result("1b-fp16", 2.25)};
  const std::vector<std::string> lines = split_lines(db::format_results(results, db::OutputFormat::md));
  // The columns shown only where rows differ are left out: these two agree in them; and
  // without a batched row, the batch columns.
  std::vector<db::ResultField> fields;
  for (const auto& f : db::result_fields())
    if (!f.when_differs && !f.when_batched) fields.push_back(f);
  ASSERT_EQ(lines.size(), 2 + results.size());

  const std::vector<std::string> header = md_cells(lines[0]);
  ASSERT_EQ(header.size(), fields.size());
  for (size_t c = 0; c < fields.size(); ++c) EXPECT_EQ(header[c], fields[c].header);

  const std::vector<std::string> align = md_cells(lines[1]);
  ASSERT_EQ(align.size(), fields.size());
  for (const std::string& a : align) EXPECT_EQ(a.find_first_not_of("-:"), std::string::npos) << a;

  for (size_t i = 0; i < results.size(); ++i) {
    const std::vector<std::string> row = md_cells(lines[2 + i]);
    ASSERT_EQ(row.size(), fields.size()) << lines[2 + i];
    EXPECT_EQ(lines[2 + i].size(), lines[0].size()) << "columns are padded to one width";
    std::map<std::string, std::string> cell;
    for (size_t c = 0; c < fields.size(); ++c) cell[fields[c].path] = row[c];
    EXPECT_EQ(cell["config.model"], results[i].config.model);
    EXPECT_EQ(cell["config.kernel"], "int4.gemv");
    EXPECT_EQ(cell["config.graph"], "on");
    EXPECT_EQ(cell["config.adapter_mode"], "-");  // empty string
    EXPECT_EQ(cell["config.context"], "512");
    EXPECT_EQ(cell["bytes.per_token.total"], "5.17");  // GB, 2 decimals
    EXPECT_EQ(cell["roofline.regime"], "bandwidth-bound");
  }
  const std::vector<std::string> row = md_cells(lines[2]);
  std::map<std::string, std::string> cell;
  for (size_t c = 0; c < fields.size(); ++c) cell[fields[c].path] = row[c];
  EXPECT_EQ(cell["timing.tpot_ms.median"], "1.500");
  EXPECT_EQ(cell["timing.tpot_ms.n"], std::to_string(results[0].timing.tpot_ms.n));
  EXPECT_EQ(cell["timing.tpot_ms.p10"], "1.420");
  EXPECT_EQ(cell["timing.tokens_per_s"], "666.7");
  EXPECT_EQ(cell["roofline.floor_tpot_ms"], "1.261");
  EXPECT_EQ(cell["roofline.achieved_GBps"], "3446.8");
  EXPECT_EQ(cell["roofline.efficiency"], "0.84");
}

// The energy columns: the figures where measured, "-" where not (a file from before energy
// reads as not measured), and J/step only beside a batched row.
TEST(Printers, MarkdownShowsEnergyOrADashWhereItWasNotMeasured) {
  std::vector<db::Result> results = {sample_result("8b-int4", 1.5), sample_result("1b-fp16", 0.75)};
  db::Energy& e = results[0].energy;
  e.reason = "";
  e.j_per_step.median = 0.4813;
  e.j_per_token.median = 0.4813;
  e.tokens_per_j = 1 / 0.4813;
  e.power_w.median = 320.84;
  const std::vector<std::string> lines = split_lines(db::format_results(results, db::OutputFormat::md));
  const std::vector<std::string> header = md_cells(lines[0]);
  const auto column = [&](const std::string& name) {
    return static_cast<size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  };
  ASSERT_LT(column("J/token"), header.size());
  EXPECT_EQ(column("J/step"), header.size()) << "batch 1 only: no J/step column";
  EXPECT_EQ(md_cells(lines[2])[column("J/token")], "0.4813");
  EXPECT_EQ(md_cells(lines[2])[column("tok/J")], "2.078");
  EXPECT_EQ(md_cells(lines[2])[column("W")], "320.8");
  for (const char* c : {"J/token", "tok/J", "W"}) EXPECT_EQ(md_cells(lines[3])[column(c)], "-") << c;
  results[1].config.batch = 4;
  const std::vector<std::string> batched = split_lines(db::format_results(results, db::OutputFormat::md));
  const std::vector<std::string> bh = md_cells(batched[0]);
  const size_t step = static_cast<size_t>(std::find(bh.begin(), bh.end(), "J/step") - bh.begin());
  ASSERT_LT(step, bh.size());
  EXPECT_EQ(md_cells(batched[2])[step], "0.4813");
  EXPECT_EQ(md_cells(batched[3])[step], "-");
}

TEST(Printers, MarkdownEscapesPipes) {
  const std::vector<std::string> lines =
      split_lines(db::format_results({sample_result("a|b", 1.0)}, db::OutputFormat::md));
  ASSERT_EQ(lines.size(), 3u);
  const auto& all = db::result_fields();
  EXPECT_EQ(md_cells(lines[2]).size(),
            static_cast<size_t>(std::count_if(
                all.begin(), all.end(), [](const auto& f) { return !f.when_differs && !f.when_batched; })));
  EXPECT_EQ(md_cells(lines[2])[0], "a\\|b");
}

TEST(Printers, CsvHeaderIsTheFieldListAndValuesReadBackExactly) {
  std::vector<db::Result> results = {sample_result("models/a,b.json", 1.2345678901234567),
                                     sample_result("say \"hi\"", 2.0)};
  db::Energy& e = results[0].energy;  // the second row's energy is not measured: null cells
  e.reason = "";
  e.j_per_token.median = 0.123456789012345;
  e.tokens_per_j = 1 / 0.123456789012345;
  e.power_w.median = 312.5;
  const std::string text = db::format_results(results, db::OutputFormat::csv);
  std::vector<db::ResultField> fields;  // every column but the batch ones: no row is batched
  for (const auto& f : db::result_fields())
    if (!f.when_batched) fields.push_back(f);

  std::string expected_header;
  for (const auto& f : fields) expected_header += (expected_header.empty() ? "" : ",") + std::string(f.path);
  EXPECT_EQ(split_lines(text)[0], expected_header);
  EXPECT_EQ(split_lines(text)[1].rfind("\"models/a,b.json\",", 0), 0u) << "config.model is the first column";
  EXPECT_NE(text.find("\"say \"\"hi\"\"\""), std::string::npos) << text;

  const auto rows = parse_csv(text);
  ASSERT_EQ(rows.size(), 1 + results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_EQ(rows[1 + i].size(), fields.size());
    const json j = results[i];
    for (size_t c = 0; c < fields.size(); ++c) {
      std::string ptr = std::string("/") + fields[c].path;
      for (char& ch : ptr)
        if (ch == '.') ch = '/';
      const json& v = j.at(json::json_pointer(ptr));
      const std::string& cell = rows[1 + i][c];
      if (v.is_string())
        EXPECT_EQ(cell, v.get<std::string>()) << fields[c].path;
      else if (v.is_null())
        EXPECT_EQ(cell, "") << fields[c].path << ": null is an empty cell";
      else
        EXPECT_EQ(json::parse(cell), v) << fields[c].path << ": full precision";
    }
  }
  EXPECT_EQ(rows[1][0], "models/a,b.json");
}

TEST(Printers, JsonAndJsonlReadBackToTheSameResults) {
  const db::Result a = sample_result("8b-int4", 1.5), b = sample_result("70b-int4", 12.25);

  const json one = json::parse(db::format_results({a}, db::OutputFormat::json));
  ASSERT_TRUE(one.is_object());
  EXPECT_EQ(json(one.get<db::Result>()), json(a));

  const std::string two_text = db::format_results({a, b}, db::OutputFormat::json);
  EXPECT_EQ(two_text.rfind("[\n  {\n    \"schema\"", 0), 0u) << "2-space indent";
  const json two = json::parse(two_text);
  ASSERT_TRUE(two.is_array());
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(json(two[0].get<db::Result>()), json(a));
  EXPECT_EQ(json(two[1].get<db::Result>()), json(b));

  const std::vector<std::string> lines = split_lines(db::format_results({a, b}, db::OutputFormat::jsonl));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(json(db::result_from_json_text(lines[0], "line 1")), json(a));
  EXPECT_EQ(json(db::result_from_json_text(lines[1], "line 2")), json(b));
}

TEST(Printers, WrittenFilesReadBackAndLeaveNoTempFile) {
  TempDir dir;
  const std::vector<db::Result> results = {sample_result("8b-int4", 1.5), sample_result("1b-int4", 0.5)};
  const std::pair<db::OutputFormat, const char*> formats[] = {{db::OutputFormat::json, "json"},
                                                              {db::OutputFormat::jsonl, "jsonl"},
                                                              {db::OutputFormat::md, "md"},
                                                              {db::OutputFormat::csv, "csv"}};
  for (const auto& [format, ext] : formats) {
    const fs::path path = dir.path() / (std::string("out.") + ext);
    db::write_results_file(path.string(), results, format);
    db::write_results_file(path.string(), results, format);  // replacing an existing file
    EXPECT_EQ(slurp(path), db::format_results(results, format));
    if (format == db::OutputFormat::json || format == db::OutputFormat::jsonl) {
      const auto back = db::read_results(path.string());
      ASSERT_EQ(back.size(), 2u);
      EXPECT_EQ(json(back[1]), json(results[1]));
    }
  }
  for (const auto& entry : fs::directory_iterator(dir.path()))
    EXPECT_NE(entry.path().extension(), ".tmp") << entry.path();
}

TEST(Printers, WritingIntoAMissingDirectoryFailsCleanly) {
  TempDir dir;
  const std::string path = (dir.path() / "no-such-dir" / "out.json").string();
  try {
    db::write_results_file(path, {sample_result("8b-int4", 1.5)}, db::OutputFormat::json);
    ADD_FAILURE() << "no error";
  } catch (const db::Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write " + path + ": No such file or directory");
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(Printers, SummaryStatesTheFiguresInAlignedLines) {
  const db::Result r = sample_result("8b-int4", 1.5);
  const std::string text = db::summary_text(r);
  for (const char* want :
       {"8b-int4", "int4 g128", "int4.gemv", "graph on", "NVIDIA H200", "1.500 ms median", "666.7 tok/s",
        "5.17 GB/token", "lm_head 1.05", "KV 0.07", "1.261 ms at 4100.0 GB/s", "3446.8 GB/s", "84.1%",
        "bandwidth-bound: efficiency 0.84 >= 0.75", "6.78 GB"})
    EXPECT_NE(text.find(want), std::string::npos) << "missing \"" << want << "\" in\n" << text;
  EXPECT_EQ(text.find("WARNING"), std::string::npos);
  const std::vector<std::string> lines = split_lines(text);
  ASSERT_GE(lines.size(), 6u);
  // Labels on the left, the text of every line starting in one column.
  const size_t column = lines[0].find_first_not_of(' ', lines[0].find(' '));
  for (const std::string& l : lines) {
    ASSERT_GT(l.size(), column) << l;
    EXPECT_TRUE(l[column - 1] == ' ' && l[column] != ' ') << "misaligned line:\n" << l << "\nin\n" << text;
  }

  db::Result debug = r;
  debug.tool.build_type = "Debug";
  EXPECT_NE(db::summary_text(debug).find("WARNING"), std::string::npos);
  EXPECT_EQ(text.find("shapes"), std::string::npos);  // batch 1: no batched GEMM
}

// At --batch > 1 the summary names the batched GEMM's shape for each kind of matrix, the
// times left to the result; an entry of another form is kept up to its first comma.
TEST(Printers, SummaryNamesTheBatchedGemmsShapes) {
  db::Result r = sample_result("8b-int4", 3.5);
  r.config.batch = 16;
  r.config.kernel_shapes = {"qkv [6144 x 4096]: m2u2b2, 14.5 us (default m4u1b2 17.1 us)",
                            "gate_up [28672 x 4096]: m4u1b1, 34.8 us (default m4u1b2 35.6 us)",
                            "lm_head, odd"};
  EXPECT_EQ(db::kernel_shape_choices(r.config),
            (std::vector<std::string>{"qkv m2u2b2", "gate_up m4u1b1", "lm_head"}));
  const std::string text = db::summary_text(r);
  EXPECT_NE(text.find("shapes    qkv m2u2b2, gate_up m4u1b1, lm_head (the batched GEMM's, timed at load: "
                      "config.kernel_shapes)\n"),
            std::string::npos)
      << text;
}

// At --batch > 1 the summary names the path each kind of matrix takes, grouped by path in the
// order they first appear; an entry of another form counts whole as a path of its own.
TEST(Printers, SummaryNamesTheBatchedPaths) {
  db::Result r = sample_result("8b-int4", 3.5);
  EXPECT_EQ(db::summary_text(r).find("paths"), std::string::npos);  // batch 1: none
  r.config.batch = 16;
  r.config.batched_paths = {"qkv [6144 x 4096]: skinny-gemm",      "o_proj [4096 x 4096]: skinny-gemm",
                            "gate_up [28672 x 4096]: skinny-gemm", "down_proj [4096 x 14336]: skinny-gemm",
                            "lm_head [128256 x 4096]: cublas",     "odd"};
  EXPECT_EQ(db::batched_path_groups(r.config),
            "skinny-gemm (qkv, o_proj, gate_up, down_proj), cublas (lm_head), odd");
  const std::string text = db::summary_text(r);
  EXPECT_NE(text.find("paths     skinny-gemm (qkv, o_proj, gate_up, down_proj), cublas (lm_head), odd (the "
                      "batched linears': config.batched_paths)\n"),
            std::string::npos)
      << text;
}

// The energy line: J/token, tokens per joule and the average power against the limit, with
// the idle power and the sampled clocks; J/step first at a batch; why not, where not measured.
TEST(Printers, SummaryHasAnEnergyLineMeasuredOrWhyNot) {
  db::Result r = sample_result("8b-int4", 1.5);
  const std::string unmeasured = db::summary_text(r);
  EXPECT_NE(unmeasured.find("\nenergy    n/a: not measured\n"), std::string::npos) << unmeasured;

  r.device.power_limit_w = 700;
  db::Energy& e = r.energy;
  e.reason = "";
  e.clocks_reason = "";
  e.repetition_j = {60, 61.5, 62};
  e.j_per_step = {0.48, 0.47, 0.49, 0.0125};
  e.j_per_token = e.j_per_step;
  e.tokens_per_j = 1 / 0.48;
  e.power_w = {320.5, 318, 322, 0.01};
  e.idle_power_w = 95.25;
  e.sm_clock_mhz = {1980, 1975, 1980, 0.001};
  e.mem_clock_mhz = {3201, 3201, 3201, 0};
  const std::string text = db::summary_text(r);
  EXPECT_NE(text.find("\nenergy    0.48 J/token median ± 1.25% (2.083 tokens/J), 320.5 W of the 700 W limit, "
                      "idle 95.2 W; clocks SM 1980, memory 3201 MHz (sampled)\n"),
            std::string::npos)
      << text;

  r.config.batch = 8;
  e.j_per_token = {0.06, 0.05875, 0.06125, 0.0125};
  e.tokens_per_j = 1 / 0.06;
  EXPECT_NE(db::summary_text(r).find("energy    0.48 J/step = 0.06 J/token median ± 1.25% (16.67 tokens/J)"),
            std::string::npos)
      << db::summary_text(r);

  e = db::Energy{};
  e.reason = "a repetition of 0.212 s spans 10.6 of the energy counter's 20.0 ms updates";
  e.clocks_reason = "";
  e.sm_clock_mhz.median = 1755;
  e.mem_clock_mhz.median = 3201;
  EXPECT_NE(
      db::summary_text(r).find("energy    n/a: a repetition of 0.212 s spans 10.6 of the energy counter's "
                               "20.0 ms updates; clocks SM 1755, memory 3201 MHz (sampled)\n"),
      std::string::npos)
      << db::summary_text(r);
}

}  // namespace

// A key field that usually does not vary gets an md column only where the rows differ in it.
TEST(Printers, MarkdownShowsAKeyFieldColumnWhereTheRowsDifferInIt) {
  db::Result sync = sample_result("8b-int4", 1.5);
  sync.config.sync_per_token = true;
  const std::string same = db::format_results({sample_result("8b-int4", 1.5), sample_result("8b-int4", 1.6)},
                                              db::OutputFormat::md);
  EXPECT_EQ(same.find("sync per token"), std::string::npos) << same;
  const std::string differ = db::format_results({sample_result("8b-int4", 1.5), sync}, db::OutputFormat::md);
  EXPECT_NE(differ.find("| sync per token |"), std::string::npos) << differ;
  EXPECT_EQ(differ.find("| group "), std::string::npos) << "the group size is the same in both rows";
  // csv always has every column.
  EXPECT_NE(db::format_results({sample_result("8b-int4", 1.5)}, db::OutputFormat::csv)
                .find("config.sync_per_token"),
            std::string::npos);
}

// The KV cache's scheme: an md column where a row's cache is not fp16 (a lone fp8 run says
// so) or the rows differ in it, none for a table of fp16 caches; csv always has it.
TEST(Printers, TheKvCacheSchemeHasAColumnWhereACacheIsNotFp16) {
  db::Result fp8 = sample_result("8b-int4", 1.2);
  fp8.config.kv_cache = "fp8";
  const std::string plain = db::format_results({sample_result("8b-int4", 1.5)}, db::OutputFormat::md);
  EXPECT_EQ(plain.find("KV cache"), std::string::npos) << plain;
  const std::string alone = db::format_results({fp8}, db::OutputFormat::md);
  EXPECT_NE(alone.find("| KV cache |"), std::string::npos) << alone;
  EXPECT_NE(alone.find("| fp8      |"), std::string::npos) << alone;
  const std::string both = db::format_results({sample_result("8b-int4", 1.5), fp8}, db::OutputFormat::md);
  EXPECT_NE(both.find("| fp16     |"), std::string::npos) << both;
  EXPECT_NE(both.find("| fp8      |"), std::string::npos) << both;
  EXPECT_NE(db::summary_text(fp8).find("  int4 g128 asym, lm_head fp16, KV cache fp8\n"), std::string::npos)
      << db::summary_text(fp8);
  EXPECT_EQ(db::summary_text(sample_result("8b-int4", 1.5)).find("KV cache fp16"), std::string::npos);
  // The bytes line: the KV part with its scales, split into the codes and the scales.
  db::PerTokenBytes& b = fp8.bytes.per_token;
  b.kv_read = 33'587'200;  // half of fp16's
  b.kv_write = 65'536;
  b.kv_read_scales = 1'049'600;
  b.kv_write_scales = 2'048;
  b.total = 5'170'216'960 - 67'174'400 - 131'072 + 33'587'200 + 65'536 + 1'049'600 + 2'048;
  EXPECT_NE(db::summary_text(fp8).find(" + KV 0.03 (fp8 0.03 + scales 0.0011) + other "), std::string::npos)
      << db::summary_text(fp8);
  EXPECT_NE(db::summary_text(sample_result("8b-int4", 1.5)).find(" + KV 0.07 + other "), std::string::npos);
  const std::string csv = db::format_results({sample_result("8b-int4", 1.5), fp8}, db::OutputFormat::csv);
  const std::vector<std::string> rows = split_lines(csv);
  ASSERT_EQ(rows.size(), 3u) << csv;
  EXPECT_NE(rows[0].find(",config.kv_cache,"), std::string::npos) << csv;
  EXPECT_NE(rows[1].find(",fp16,"), std::string::npos) << csv;
  EXPECT_NE(rows[2].find(",fp8,"), std::string::npos) << csv;
}
