// scripts/plot.py on the committed H200 results: the roofline plot comes out as a PNG, and
// a file that is not JSON fails with exit 2, one stderr line and no PNG (nor its .tmp). The
// batch plot on results made here, with the knee it names, and the context plot with each KV
// cache scheme's KV part.
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

// Results that record their batched paths: a knee whose batch runs matrices on another path
// than the batch before it says which, from what to what (batch 1's path: the run's kernel);
// a knee where no path changed says nothing more.
TEST_F(Plot, BatchKneeNamesTheKernelChangeThere) {
  const auto paths = [](const std::string& qkv, const std::string& gate_up) {
    return std::vector<std::string>{"qkv [6144 x 4096]: " + qkv, "gate_up [28672 x 4096]: " + gate_up};
  };
  std::string lines;
  const auto add = [&](const std::string& model, int64_t batch, double ms, std::vector<std::string> p) {
    db::Result r = batch_result(model, batch, ms, 0.8, 0.1 * static_cast<double>(batch));
    r.config.batched_paths = std::move(p);
    lines += db::result_to_json_text(r, -1) + "\n";
  };
  add("8b-int4", 1, 1.0, {});
  add("8b-int4", 2, 1.1, paths("gemv-columns", "gemv-columns"));
  add("8b-int4", 4, 1.6, paths("skinny-gemm", "cublas"));
  add("1b-int4", 1, 1.0, {});
  add("1b-int4", 2, 1.7, paths("gemv-columns", "gemv-columns"));
  add("4b-int4", 1, 1.0, {});
  add("4b-int4", 2, 1.1, paths("skinny-gemm", "skinny-gemm"));
  add("4b-int4", 4, 1.6, paths("skinny-gemm", "skinny-gemm"));
  { std::ofstream(path("b.jsonl")) << lines; }
  const db_test::Outcome o = run_script("plot.py", {"batch", path("b.png"), path("b.jsonl")});
  ASSERT_EQ(o.code, 0) << "stderr: " << o.err;
  EXPECT_EQ(
      o.out,
      "8b-int4 int4.gemv: knee at batch 4 (TPOT 1.60x batch 1's, 1.10x at 2); the floors predict none "
      "up to it; there qkv moves from gemv-columns to skinny-gemm and gate_up moves from gemv-columns to "
      "cublas\n"
      "1b-int4 int4.gemv: knee at batch 2 (TPOT 1.70x batch 1's); the floors predict none up to it; "
      "there qkv, gate_up move from int4.gemv to gemv-columns\n"
      "4b-int4 int4.gemv: knee at batch 4 (TPOT 1.60x batch 1's, 1.10x at 2); the floors predict none "
      "up to it\n");
}

// A context sweep of two KV cache schemes: one line each with its floor, and on stdout each
// line's KV part at its largest context (TPOT minus context 0's) and the rate its KV bytes
// stream at: 4 GB more in 2 ms is 2000 GB/s, half the measured 4000. A result from before
// --kv-cache is an fp16 cache.
TEST_F(Plot, ContextDrawsOneLinePerKvSchemeWithItsFloor) {
  const int64_t contexts[] = {0, 4096, 32768};
  const double fp16_gb[] = {4.0, 4.5, 8.0}, fp16_ms[] = {1.0, 1.2, 3.0};
  const double fp8_gb[] = {4.0, 4.25, 6.0}, fp8_ms[] = {1.0, 1.1, 2.0};
  std::string lines;
  for (const char* kv : {"fp16", "fp8"})
    for (int i = 0; i < 3; ++i) {
      const bool fp8 = std::string(kv) == "fp8";
      const double gb = fp8 ? fp8_gb[i] : fp16_gb[i];
      db::Result r = batch_result("8b-int4", 1, fp8 ? fp8_ms[i] : fp16_ms[i], gb / 4000 * 1000, 0);
      r.device.peak_read_GBps = 4000;
      r.config.kv_cache = kv;
      r.config.context = contexts[i];
      r.bytes.per_token.total = static_cast<uint64_t>(gb * 1e9);
      lines += db::result_to_json_text(r, -1) + "\n";
    }
  { std::ofstream(path("c.jsonl")) << lines; }
  const std::string out = path("c.png");
  const db_test::Outcome o =
      run_script("plot.py", {"context", out, path("c.jsonl"), kResults + "8b-fp16-graph-on.json"});
  ASSERT_EQ(o.code, 0) << "stderr: " << o.err;
  EXPECT_TRUE(o.err.empty()) << o.err;
  const std::vector<std::string> printed = {
      "8b-int4 int4.gemv KV fp16: context 0 -> 32768: TPOT 1.000 -> 3.000 ms, floor 1.000 -> 2.000 ms; KV "
      "part "
      "2.000 ms for 4 GB: 2000 GB/s, 0.50 of the measured 4000 GB/s",
      "8b-int4 int4.gemv KV fp8: context 0 -> 32768: TPOT 1.000 -> 2.000 ms, floor 1.000 -> 1.500 ms; KV "
      "part "
      "1.000 ms for 2 GB: 2000 GB/s, 0.50 of the measured 4000 GB/s",
      "8b-fp16 fp16.gemv KV fp16: context 0 -> 0: TPOT 3.702 -> 3.702 ms, floor 3.248 -> 3.248 ms"};
  for (const std::string& line : printed) EXPECT_NE(o.out.find(line + "\n"), std::string::npos) << o.out;
  EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 3) << o.out;
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
