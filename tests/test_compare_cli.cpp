// The compare verb through the built binary: its table and json, and its exit codes (1
// regressed, 3 incomplete, 0 otherwise, 2 bad input).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "compare_fixtures.h"
#include "decodebench/printers.h"
#include "decodebench/result.h"

namespace {

using db_test::energy_run;
using db_test::expect_one_line_error;
using db_test::full_result;
using db_test::normal_samples;
using db_test::Outcome;
using nlohmann::json;
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "decodebench_compare_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (fs::path(path_) / name).string(); }
  std::string write(const std::string& name, const std::vector<db::Result>& results,
                    db::OutputFormat format = db::OutputFormat::json) const {
    db::write_results_file(file(name), results, format);
    return file(name);
  }
  std::string write_text(const std::string& name, const std::string& text) const {
    std::ofstream(file(name)) << text;
    return file(name);
  }

 private:
  std::string path_;
};

Outcome compare(const std::vector<std::string>& args) {
  std::vector<std::string> a = {"compare"};
  a.insert(a.end(), args.begin(), args.end());
  return db_test::run(a);
}

size_t lines(const std::string& s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
}

}  // namespace

TEST(CompareCli, MetricEnergyJudgesJoulesPerStepInTheTableAndTheJson) {
  TempDir dir;
  const std::string base = dir.write("base.json", {energy_run(1.0, 0.50, 1), energy_run(1.0, 0.50, 2)});
  const std::string next = dir.write("new.json", {energy_run(1.0, 0.525, 3), energy_run(1.0, 0.525, 4)});
  const Outcome o = compare({base, next, "--metric", "energy"});
  EXPECT_EQ(o.code, 1) << o.err << o.out;
  EXPECT_NE(o.out.find("| base J/step | new J/step | delta |"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("| regressed |"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("two-sided Mann-Whitney U on repetition J/step (--metric energy)"), std::string::npos)
      << o.out;
  EXPECT_EQ(compare({base, next}).code, 0) << "TPOT held";
  const Outcome j = compare({base, next, "--metric", "energy", "--format", "json"});
  const json doc = json::parse(j.out);
  EXPECT_EQ(doc["metric"], "energy");
  EXPECT_EQ(doc["pairs"][0]["base_repetition_j_per_step"].size(), 10u);
  EXPECT_EQ(doc["pairs"][0]["verdict"], "regressed");
  EXPECT_EQ(json::parse(compare({base, next, "--format", "json"}).out)["metric"], "tpot");
  expect_one_line_error(compare({base, next, "--metric", "watts"}), 2, "--metric");
}

TEST(CompareCli, FivePercentSlowdownWithTightSamplesRegressesAndExits1) {
  TempDir dir;  // two runs of each key a side, as --runs 2 writes them
  const std::string base =
      dir.write("base.json", {full_result("8b-int4", normal_samples(200, 1.0, 0.005, 21)),
                              full_result("1b-int4", normal_samples(200, 0.5, 0.005, 22)),
                              full_result("8b-int4", normal_samples(200, 1.0, 0.005, 25)),
                              full_result("1b-int4", normal_samples(200, 0.5, 0.005, 26))});
  const std::string next =
      dir.write("new.json", {full_result("8b-int4", normal_samples(200, 1.05, 0.005, 23)),
                             full_result("1b-int4", normal_samples(200, 0.5, 0.005, 24)),
                             full_result("8b-int4", normal_samples(200, 1.05, 0.005, 27)),
                             full_result("1b-int4", normal_samples(200, 0.5, 0.005, 28))});
  const Outcome o = compare({base, next});
  EXPECT_EQ(o.code, 1) << o.err << o.out;
  EXPECT_EQ(o.err, "");
  const size_t row = o.out.find("| 8b-int4 | int4 | int4.gemv | on | 512 | 40 | ");
  ASSERT_NE(row, std::string::npos) << o.out;
  const std::string line = o.out.substr(row, o.out.find('\n', row) - row);
  EXPECT_NE(line.find("| regressed | - |"), std::string::npos) << line;
  EXPECT_TRUE(std::regex_search(line, std::regex(R"(\| \+(4\.[89]|5\.[01])\d% \|)"))) << line;  // about +5%
  EXPECT_NE(o.out.find("2 matched: 1 regressed, 0 improved, 1 same"), std::string::npos) << o.out;

  // The same files the other way round: an improvement, exit 0.
  const Outcome back = compare({next, base});
  EXPECT_EQ(back.code, 0) << back.err;
  EXPECT_NE(back.out.find("| improved |"), std::string::npos) << back.out;
  EXPECT_NE(back.out.find("\nGate: pass (exit 0)\n"), std::string::npos) << back.out;

  // A threshold above the slowdown: exit 0. "10" means 10 percent.
  EXPECT_EQ(compare({base, next, "--threshold", "10"}).code, 0);
  EXPECT_EQ(compare({base, next, "--threshold", "10%"}).code, 0);
  EXPECT_EQ(compare({base, next, "--threshold", "4.5%"}).code, 1);
}

TEST(CompareCli, HalfPercentShiftInsideNoiseExits0) {
  TempDir dir;
  const std::string base =
      dir.write("base.json", {full_result("8b-int4", normal_samples(200, 1.0, 0.02, 31))});
  const std::string next =
      dir.write("new.json", {full_result("8b-int4", normal_samples(200, 1.005, 0.02, 32))});
  const Outcome o = compare({base, next});
  EXPECT_EQ(o.code, 0) << o.err << o.out;
  EXPECT_EQ(o.err, "");
  EXPECT_NE(o.out.find("| same | - |"), std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("regressed |"), std::string::npos) << o.out;
}

TEST(CompareCli, DifferentDevicesWarnOnStderrAndInTheTable) {
  TempDir dir;
  const auto s = normal_samples(200, 1.0, 0.01, 41);
  const std::string base = dir.write("base.json", {full_result("8b-int4", s, "NVIDIA H200", 4100)});
  const std::string next = dir.write("new.json", {full_result("8b-int4", s, "NVIDIA A100-SXM4-80GB", 4100)});
  const std::string note =
      "devices differ (NVIDIA H200 vs NVIDIA A100-SXM4-80GB): the byte law's premises may differ; do not "
      "read this "
      "as a code change";
  const Outcome o = compare({base, next});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(lines(o.err), 1u) << o.err;
  EXPECT_EQ(o.err.rfind("decodebench: warning: model=8b-int4 ", 0), 0u) << o.err;
  EXPECT_NE(o.err.find(note), std::string::npos) << o.err;
  EXPECT_NE(o.out.find("| same | " + note + " |"), std::string::npos) << o.out;

  const Outcome j = compare({base, next, "--format", "json"});
  EXPECT_EQ(j.code, 0);
  const json doc = json::parse(j.out);
  EXPECT_EQ(doc.at("pairs").at(0).at("device_note"), note);
  EXPECT_EQ(doc.at("pairs").at(0).at("base_device"), "NVIDIA H200");
  EXPECT_EQ(doc.at("pairs").at(0).at("new_device"), "NVIDIA A100-SXM4-80GB");
}

TEST(CompareCli, AnUnmatchedBaseKeyFailsClosedUnlessAllowed) {
  TempDir dir;
  const auto s = [](uint64_t seed) { return normal_samples(200, 1.0, 0.005, seed); };
  db::Result eager = full_result("8b-int4", s(1));
  eager.config.graph = false;
  const std::string base =
      dir.write("base.json", {full_result("8b-int4", s(2)), full_result("4b-int4", s(3))});
  const std::string next = dir.write("new.json", {full_result("8b-int4", s(4)), eager});
  const Outcome o = compare({base, next});
  EXPECT_EQ(o.code, 3) << o.err;
  EXPECT_NE(o.out.find("\nUnmatched in BASE (1):\n- model=4b-int4 scheme=int4 "), std::string::npos) << o.out;
  EXPECT_NE(
      o.out.find("\nUnmatched in NEW (1):\n- model=8b-int4 scheme=int4 group_size=128 lm_head_scheme=fp16 "
                 "kernel=int4.gemv graph=off "),
      std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("Gate: incomplete (exit 3): 1 BASE key unmatched in NEW"), std::string::npos) << o.out;
  EXPECT_EQ(compare({base, next, "--allow-missing"}).code, 0);

  const Outcome j = compare({base, next, "--format", "json"});
  EXPECT_EQ(j.code, 3);
  const json doc = json::parse(j.out);
  EXPECT_DOUBLE_EQ(doc.at("threshold").get<double>(), 0.03);
  EXPECT_EQ(doc.at("regressed"), 0);
  EXPECT_EQ(doc.at("exit_code"), 3);
  ASSERT_EQ(doc.at("pairs").size(), 1u);
  EXPECT_EQ(doc.at("pairs").at(0).at("verdict"), "same");
  EXPECT_EQ(doc.at("pairs").at(0).at("key").at("graph"), true);
  EXPECT_EQ(doc.at("pairs").at(0).at("base_repetition_medians_ms").size(), 5u);
  ASSERT_EQ(doc.at("unmatched_base").size(), 1u);
  EXPECT_EQ(doc.at("unmatched_base").at(0).at("model"), "4b-int4");
  ASSERT_EQ(doc.at("unmatched_new").size(), 1u);
  EXPECT_EQ(doc.at("unmatched_new").at(0).at("graph"), false);
  EXPECT_EQ(doc.at("unmatched_new").at(0).at("context"), 512);
}

// Every instance an error entry: nothing was measured, and the gate says so.
TEST(CompareCli, ErrorEntriesAndNothingMatchedFailClosed) {
  TempDir dir;
  const std::string base =
      dir.write("base.json", {full_result("8b-int4", normal_samples(200, 1.0, 0.005, 5))});
  const std::string errors = dir.write_text("new.jsonl",
                                            "{\"schema\": \"decodebench/result/v1\", \"error\": \"no GPU\", "
                                            "\"config\": {\"model\": \"8b-int4\"}}\n");
  const Outcome o = compare({base, errors});
  EXPECT_EQ(o.code, 3) << o.err << o.out;
  EXPECT_NE(o.out.find("error entries: 0 in BASE, 1 in NEW"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("nothing matched"), std::string::npos) << o.out;
}

// --pair-by graph: the graph switch's effect, as one command over one file.
TEST(CompareCli, PairByGraphComparesOnAgainstOff) {
  TempDir dir;
  db::Result off = full_result("8b-int4", normal_samples(200, 1.08, 0.005, 7));
  off.config.graph = false;
  db::Result off2 = full_result("8b-int4", normal_samples(200, 1.08, 0.005, 8));
  off2.config.graph = false;
  const std::string f =
      dir.write("both.json", {full_result("8b-int4", normal_samples(200, 1.0, 0.005, 6)), off, off2});
  const Outcome o = compare({f, "--pair-by", "graph"});
  EXPECT_EQ(o.code, 1) << o.err << o.out;
  EXPECT_NE(o.out.find("| graph on -> off | 8b-int4 |"), std::string::npos) << o.out;
  EXPECT_EQ(compare({f, "--pair-by", "graph", "--base-value", "off"}).code, 0);
  expect_one_line_error(compare({f, "--pair-by", "colour"}), 2, "--pair-by colour: not a key field");
  expect_one_line_error(compare({f, f, "--base-value", "off"}), 2, "--base-value needs --pair-by");
}

TEST(CompareCli, JsonlAndSingleObjectInputs) {
  TempDir dir;
  const std::string base =
      dir.write("base.json", {full_result("8b-int4", normal_samples(200, 1.0, 0.005, 51))});  // one object
  const std::string next = dir.write("new.jsonl",
                                     {full_result("8b-int4", normal_samples(200, 1.05, 0.005, 52)),
                                      full_result("1b-int4", normal_samples(200, 1.05, 0.005, 53)),
                                      full_result("8b-int4", normal_samples(200, 1.05, 0.005, 54))},
                                     db::OutputFormat::jsonl);
  const Outcome o = compare({base, next, "--format", "json"});
  EXPECT_EQ(o.code, 1) << o.err;
  const json doc = json::parse(o.out);
  EXPECT_EQ(doc.at("regressed"), 1);
  EXPECT_EQ(doc.at("pairs").at(0).at("verdict"), "regressed");
  EXPECT_TRUE(doc.at("pairs").at(0).at("significant").get<bool>());
  EXPECT_NEAR(doc.at("pairs").at(0).at("p_value").get<double>(), 2.0 / 3003, 1e-12);  // 5 and 10, separated
  EXPECT_EQ(doc.at("pairs").at(0).at("new_runs"), 2);
  EXPECT_NEAR(doc.at("pairs").at(0).at("delta").get<double>(), 0.05, 0.003);
  EXPECT_EQ(doc.at("unmatched_new").size(), 1u);
}

TEST(CompareCli, BadInputExits2WithOneLine) {
  TempDir dir;
  const std::string good = dir.write("good.json", {full_result("8b-int4", {1, 2, 3})});
  const std::string bad_json = dir.write_text("bad.json", "{\"schema\": ");
  const std::string empty = dir.write_text("empty.json", "");
  const std::string other = dir.write_text("other.json", "{\"schema\": \"decodebench/result/v2\"}");
  const std::string missing_field = dir.write_text("partial.json", "{\"schema\": \"decodebench/result/v1\"}");

  expect_one_line_error(compare({good, dir.file("nope.json")}), 2, "nope.json");
  expect_one_line_error(compare({dir.file("nope.json"), good}), 2, "nope.json");
  expect_one_line_error(compare({good, bad_json}), 2, "invalid JSON");
  expect_one_line_error(compare({empty, good}), 2, "empty");
  expect_one_line_error(compare({good, other}), 2, "decodebench/result/v2");
  expect_one_line_error(compare({good, missing_field}), 2, "missing field");
  expect_one_line_error(compare({good, dir.file("")}), 2, "directory");

  expect_one_line_error(compare({good, good, "--threshold", "abc"}), 2, "--threshold 'abc'");
  expect_one_line_error(compare({good, good, "--threshold=-3%"}), 2, "--threshold '-3%'");
  expect_one_line_error(compare({good, good, "--threshold", ""}), 2, "--threshold");
  expect_one_line_error(compare({good, good, "--threshold", "-3%"}), 2, "threshold");
  expect_one_line_error(compare({good, good, "--format", "csv"}), 2, "--format");
  expect_one_line_error(compare({good}), 2, "BASE and NEW");
}
