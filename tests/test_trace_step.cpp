// scripts/trace_step.py on a hand-made kernel timeline (no GPU needed): the roles, the
// exposed / busy / early times of a step whose numbers are worked out below, the step ending
// at its finish_step kernel, and bad input as one stderr line with exit 2.
#include <gtest/gtest.h>
#include "temp_dir.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cli_helpers.h"

namespace {

using db_test::run_script;

class TraceStep : public db_test::TempDirTest {
 protected:
  // One kernel per line: start and end in ns, and a name the roles are read from.
  std::string write_trace(const std::vector<std::tuple<long, long, std::string>>& kernels) const {
    const std::string p = path("trace.csv");
    std::ofstream f(p);
    f << "start_ns,end_ns,grid_x,grid_y,block_x,registers,static_smem,dynamic_smem,smem_executed,graph_node,"
         "name\n";
    for (const auto& [start, end, name] : kernels)
      f << start << "," << end << ",8,1,128,64,0,0,0,0," << name << "\n";
    return p;
  }
};

// The line of `role` in a step's table: n, exposed, busy and early (us).
std::vector<double> role_line(const std::string& out, const std::string& role) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream l(line);
    std::string r;
    double n = 0, exposed = 0, busy = 0, early = 0;
    if (l >> r >> n >> exposed >> busy >> early && r == role) return {n, exposed, busy, early};
  }
  return {};
}

// One layer, then the lm_head. Starting from the embed's start (0), each kernel's exposed time
// is its end minus the latest end before it, and early is how long it started before that
// end: embed 0-1000 (exposed 1.0 us), qkv 500-5000 (4.0, early 0.5), attention 4000-7000
// (2.0, early 1.0), o 6500-8000 (1.0), gate/up 7500-12000 (4.0), down 11000-15000 (3.0),
// lm_head 14000-20000 (5.0), finish_step 19500-21000 (1.0): 21.0 us in all. The kernel at
// 30000 runs after the step and is nobody's.
const std::vector<std::tuple<long, long, std::string>> kOneStep = {
    {0, 1000, "embed_kernel"},          {500, 5000, "gemv_rows_kernel"},
    {4000, 7000, "attention_kernel"},   {6500, 8000, "gemv_rows_kernel"},
    {7500, 12000, "gemv_rows_kernel"},  {11000, 15000, "gemv_rows_kernel"},
    {14000, 20000, "gemv_rows_kernel"}, {19500, 21000, "finish_step_kernel"},
    {30000, 31000, "other_kernel"}};

TEST_F(TraceStep, ExposedTimesAddUpToTheStepAndTheStepEndsAtItsFinish) {
  const db_test::Outcome o = run_script("trace_step.py", {write_trace(kOneStep), "0"});
  const std::string& out = o.out;
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(out.find("step 0: 21.0 us, 8 kernels, 1 layers"), std::string::npos) << out;
  const std::vector<std::pair<std::string, std::vector<double>>> want = {
      {"embed", {1, 1.0, 1.0, 0.0}},   {"qkv", {1, 4.0, 4.5, 0.5}},     {"attention", {1, 2.0, 3.0, 1.0}},
      {"o", {1, 1.0, 1.5, 0.5}},       {"gate_up", {1, 4.0, 4.5, 0.5}}, {"down", {1, 3.0, 4.0, 1.0}},
      {"lm_head", {1, 5.0, 6.0, 1.0}}, {"finish", {1, 1.0, 1.5, 0.5}}};
  double total = 0;
  for (const auto& [role, figures] : want) {
    const std::vector<double> got = role_line(out, role);
    ASSERT_EQ(got.size(), 4u) << "no line for " << role << " in\n" << out;
    for (size_t i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(got[i], figures[i]) << role << " column " << i;
    total += got[1];
  }
  EXPECT_DOUBLE_EQ(total, 21.0);
  EXPECT_TRUE(role_line(out, "other").empty()) << "the kernel after finish_step was counted:\n" << out;
}

// The batched step's GEMMs (the skinny GEMM, then cuBLAS's nvjet kernel for the lm_head) take
// the GEMV roles in order; its RMSNorm kernels are their own role.
TEST_F(TraceStep, TheBatchedStepsSkinnyGemmsTakeTheGemvRoles) {
  const db_test::Outcome o =
      run_script("trace_step.py", {write_trace({{0, 1000, "embed_rows_kernel"},
                                                {1000, 2000, "rmsnorm_rows_kernel"},
                                                {2000, 5000, "skinny_kernel"},
                                                {5000, 6000, "attention_kernel"},
                                                {6000, 8000, "skinny_kernel"},
                                                {8000, 9000, "rmsnorm_rows_kernel"},
                                                {9000, 14000, "skinny_kernel"},
                                                {14000, 18000, "skinny_kernel"},
                                                {18000, 18500, "rmsnorm_rows_kernel"},
                                                {18500, 21000, "nvjet_sm90_hsh_128x256_64x4_2x1_v_bz_TNN"},
                                                {21000, 22000, "finish_step_batch_kernel"}}),
                                   "0"});
  ASSERT_EQ(o.code, 0) << o.err;
  const std::vector<std::pair<std::string, double>> want = {
      {"qkv", 3.0}, {"o", 2.0}, {"gate_up", 5.0}, {"down", 4.0}, {"rmsnorm", 2.5}, {"lm_head", 2.5}};
  for (const auto& [role, exposed] : want) {
    const std::vector<double> got = role_line(o.out, role);
    ASSERT_EQ(got.size(), 4u) << "no line for " << role << " in\n" << o.out;
    EXPECT_DOUBLE_EQ(got[1], exposed) << role;
  }
  EXPECT_TRUE(role_line(o.out, "other").empty()) << o.out;
}

TEST_F(TraceStep, BadInputIsOneLineAndExit2) {
  const std::string trace = write_trace(kOneStep);
  std::ofstream(path("not.csv")) << "a,b\n1,2\n";
  std::ofstream(path("no_embed.csv"))
      << "start_ns,end_ns,grid_x,grid_y,block_x,registers,static_smem,dynamic_smem,"
         "smem_executed,graph_node,name\n0,10,1,1,1,1,0,0,0,0,gemv_rows_kernel\n";
  const std::vector<std::vector<std::string>> cases = {
      {path("missing.csv")}, {path("not.csv")}, {path("no_embed.csv")}, {trace, "one"}, {trace, "1"}, {}};
  for (const auto& args : cases) {
    const db_test::Outcome o = run_script("trace_step.py", args);
    EXPECT_EQ(o.code, 2) << (args.empty() ? "(no arguments)" : args.back());
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_EQ(o.err.rfind("trace_step: ", 0), 0u) << o.err;
  }
}

}  // namespace
