// scripts/plot.py on the committed H200 results: the roofline plot comes out as a PNG, and
// a file that is not JSON fails with exit 2, one stderr line and no PNG (nor its .tmp). The
// batch plot on results made here, with the knee it names.
// matplotlib missing is a failure, not a skip: scripts/install_deps.sh installs it.
#include <gtest/gtest.h>
#include "temp_dir.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "decodebench/result.h"

namespace {

namespace fs = std::filesystem;
using db_test::python;
using db_test::quote;
using db_test::run_script;
using db_test::slurp;

class Plot : public db_test::TempDirTest {};

const std::string kResults = std::string(DB_SOURCE_DIR) + "/results/h200/";

TEST(PlotDeps, MatplotlibImportable) {
  const std::string cmd = quote(python()) + " -c 'import matplotlib' >/dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << python() << " cannot import matplotlib: run scripts/install_deps.sh (python3-matplotlib)";
}

TEST_F(Plot, RooflineWritesPng) {
  const std::string out = path("r.png");
  const db_test::Outcome o = run_script(
      "plot.py", {"roofline", out, kResults + "8b-int4-graph-on.json", kResults + "8b-fp16-graph-on.json"});
  const std::string& err = o.err;
  ASSERT_EQ(o.code, 0) << "stderr: " << err;
  EXPECT_TRUE(err.empty()) << err;
  ASSERT_TRUE(fs::exists(out));
  EXPECT_GT(fs::file_size(out), 1000u);
  const std::string png = slurp(out);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << "not a PNG";
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

TEST_F(Plot, NotJsonExits2WithoutPng) {
  { std::ofstream(path("bad.json")) << "this is not JSON\n"; }
  const std::string out = path("r.png");
  const db_test::Outcome o =
      run_script("plot.py", {"roofline", out, kResults + "8b-int4-graph-on.json", path("bad.json")});
  const std::string& err = o.err;
  EXPECT_EQ(o.code, 2) << "stderr: " << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "stderr is not one line:\n" << err;
  EXPECT_NE(err.find("bad.json"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

// A result of `model` at `batch` with the given median TPOT and floors.
db::Result batch_result(const std::string& model, int64_t batch, double median_ms, double bandwidth_floor,
                        double compute_floor) {
  db::Result r;
  r.device.backend = "cuda";
  r.device.name = "NVIDIA H200";
  r.device.peak_read_GBps = 4600;
  r.config.model = model;
  r.config.scheme = "int4";
  r.config.kernel = "int4.gemv";
  r.config.graph = true;
  r.config.tokens = 1;
  r.config.repeat = 1;
  r.config.batch = batch;
  r.bytes.per_token.total = 4'713'037'824;
  r.timing.samples_ms = {median_ms};
  r.timing.tpot_ms = {median_ms, median_ms, median_ms, median_ms, median_ms, median_ms, median_ms, 0, 1};
  r.roofline.bandwidth_floor_tpot_ms = bandwidth_floor;
  r.roofline.compute_floor_tpot_ms = compute_floor;
  r.roofline.floor_tpot_ms = std::max(bandwidth_floor, compute_floor);
  return r;
}

// The knee is the first batch whose TPOT is 1.5x batch 1's (8 here: 1.6 ms against 1.0), and
// the floors' knee the first whose larger floor is 1.5x batch 1's (16: the compute floor
// 1.6 ms passes 1.5 x 0.8).
TEST_F(Plot, BatchDrawsEachLineWithItsFloorsAndNamesItsKnee) {
  const double medians[] = {1.0, 1.02, 1.1, 1.6, 3.0}, compute[] = {0.1, 0.2, 0.4, 0.8, 1.6};
  std::string lines;
  for (int i = 0; i < 5; ++i)
    lines +=
        db::result_to_json_text(batch_result("8b-int4", int64_t{1} << i, medians[i], 0.8, compute[i]), -1) +
        "\n";
  lines += db::result_to_json_text(batch_result("1b-int4", 4, 0.5, 0.2, 0.1), -1) + "\n";
  { std::ofstream(path("b.jsonl")) << lines; }
  const std::string out = path("b.png");
  const db_test::Outcome o =
      run_script("plot.py", {"batch", out, path("b.jsonl"), kResults + "8b-fp16-graph-on.json"});
  ASSERT_EQ(o.code, 0) << "stderr: " << o.err;
  EXPECT_TRUE(o.err.empty()) << o.err;
  EXPECT_EQ(
      o.out,
      "8b-int4 int4.gemv: knee at batch 8 (TPOT 1.60x batch 1's, 1.10x at 4); the floors predict batch 16\n"
      "1b-int4 int4.gemv: knee unknown (no batch-1 run)\n"
      // a result from before --batch: batch 1, one point, its floor the bandwidth's
      "8b-fp16 fp16.gemv: no knee up to the largest batch run (TPOT 1.00x batch 1's at 1); the floors "
      "predict none up to it\n");
  EXPECT_EQ(slurp(out).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << "not a PNG";
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

// `r` with its energy measured: J/token `j` at the median, the repetitions within ±2%.
db::Result with_energy(db::Result r, double j) {
  r.energy.reason = "";
  r.energy.j_per_token = {j, 0.98 * j, 1.02 * j, 0.01};
  r.energy.j_per_step = {j * static_cast<double>(r.config.batch), 0, 0, 0.01};
  r.energy.power_w = {300, 290, 310, 0.01};
  return r;
}

// J/token against the bytes and against the batch: each line's first and last batch on
// stdout; a run without energy (the committed H200 results predate it) left out with a line on
// stderr.
TEST_F(Plot, EnergyDrawsJoulesPerTokenAgainstBytesAndBatchAndLeavesOutRunsWithoutIt) {
  std::string lines;
  const double medians[] = {1.0, 1.05, 1.2}, joules[] = {0.5, 0.14, 0.05};
  for (int i = 0; i < 3; ++i)
    lines += db::result_to_json_text(
                 with_energy(batch_result("8b-int4", int64_t{1} << (2 * i), medians[i], 0.8, 0.1), joules[i]),
                 -1) +
             "\n";
  { std::ofstream(path("e.jsonl")) << lines; }
  const std::string out = path("e.png");
  const db_test::Outcome o =
      run_script("plot.py", {"energy", out, path("e.jsonl"), kResults + "8b-fp16-graph-on.json"});
  ASSERT_EQ(o.code, 0) << "stderr: " << o.err;
  EXPECT_EQ(o.out,
            "8b-int4 int4.gemv: 0.5 J/token at batch 1 -> 0.05 at batch 16 (0.10x), TPOT 1.000 -> 1.200 ms "
            "(1.20x)\n");
  EXPECT_EQ(o.err, "plot.py: " + kResults + "8b-fp16-graph-on.json: no energy (not measured): left out\n");
  EXPECT_EQ(slurp(out).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << "not a PNG";
  EXPECT_FALSE(fs::exists(out + ".tmp"));

  // No run with energy: exit 2, no PNG.
  const db_test::Outcome none =
      run_script("plot.py", {"energy", path("n.png"), kResults + "8b-fp16-graph-on.json"});
  EXPECT_EQ(none.code, 2) << none.err;
  EXPECT_NE(none.err.find("no run has energy figures"), std::string::npos) << none.err;
  EXPECT_FALSE(fs::exists(path("n.png")));
}

TEST_F(Plot, BatchRefusesAResultWhoseBatchIsNotOne) {
  std::string text = db::result_to_json_text(batch_result("8b-int4", 1, 1.0, 0.8, 0.1), -1);
  const std::string from = "\"batch\":1";
  ASSERT_NE(text.find(from), std::string::npos) << text;
  text.replace(text.find(from), from.size(), "\"batch\":0");
  { std::ofstream(path("bad.json")) << text; }
  const db_test::Outcome o = run_script("plot.py", {"batch", path("b.png"), path("bad.json")});
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  EXPECT_NE(o.err.find("config.batch"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(path("b.png")));
}

}  // namespace
