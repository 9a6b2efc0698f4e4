// The CPU backend plans its host memory before it allocates: a model or a context that does
// not fit is refused with one line naming what it needs and what is available, instead of
// being killed by the OOM killer.
#include <gtest/gtest.h>

#include <fstream>

#include "cli_helpers.h"
#include "decodebench/config.h"
#include "decodebench/cpu_reference.h"
#include "temp_dir.h"

namespace {

using db_test::expect_one_line_error;
using db_test::run;

class CpuMemory : public db_test::TempDirTest {
 protected:
  std::string config(const std::string& json) {
    const std::string p = path("config.json");
    std::ofstream(p) << json;
    return p;
  }
};

TEST(CpuMemoryPlan, CountsWeightsKvCacheAndScratchOfTinyByHand) {
  const db::ModelConfig c = db::load_model_config("tiny-fp16");
  const db::CpuModel::Plan p = db::CpuModel::plan(c, 100);
  // tiny: 2 layers, hidden 128, q 4 x 32, kv 2 x 32, intermediate 256, vocab 512, fp16.
  const uint64_t per_layer = 2ull * (128 * 128 + 64 * 128 + 64 * 128 + 128 * 128 + 3 * 256 * 128);
  const uint64_t norms = 4ull * (2 * 2 * 128 + 128);  // float: 2 a layer, the final one
  EXPECT_EQ(p.weights, 2 * per_layer + 2ull * 512 * 128 + norms);
  EXPECT_EQ(p.kv_cache, 2ull * 4 * 2 * 100 * 64);
  EXPECT_GT(p.scratch, 4ull * (512 + 100));
  EXPECT_EQ(p.total(), p.weights + p.kv_cache + p.scratch);
}

// The plan is what the model holds once built, for llama and for qwen3's q/k norms.
TEST(CpuMemoryPlan, WeightsAreWhatTheModelMaterializes) {
  for (db::Arch arch : {db::Arch::llama, db::Arch::qwen3}) {
    db::ModelConfig c = db::load_model_config("tiny-int4");
    c.arch = arch;
    const db::WeightSource ws(c, "", 0);
    const db::CpuModel m(ws, 10, 1);
    EXPECT_EQ(m.weight_bytes(), db::CpuModel::plan(c, 10).weights) << db::to_string(arch);
  }
}

TEST_F(CpuMemory, AContextWhoseKvCacheCannotFitIsRefusedBeforeAllocating) {
  // 1.5 x 10^7 positions of 8b: 32 layers x 1024 x 2 floats each, 3.9 TB of KV cache.
  const std::string model = config(R"({"extends": "8b-int4", "max_position_embeddings": 16000000})");
  const auto o = run({"--model", model, "--backend", "cpu", "--context", "15000000", "--tokens", "1",
                      "--warmup", "0", "--repeat", "1"});
  expect_one_line_error(o, 1, "not enough host memory for the CPU reference");
  EXPECT_NE(o.err.find("KV cache 3932.16"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("available"), std::string::npos) << o.err;
}

TEST_F(CpuMemory, AModelWhoseWeightsCannotFitIsRefusedBeforeAllocating) {
  // 70b's layers, 500 of them, in fp16: ~860 GB of weights.
  const std::string model = config(R"({"extends": "70b-fp16", "num_hidden_layers": 500})");
  const auto o =
      run({"--model", model, "--backend", "cpu", "--tokens", "1", "--warmup", "0", "--repeat", "1"});
  expect_one_line_error(o, 1, "not enough host memory for the CPU reference");
  EXPECT_NE(o.err.find("weights 8"), std::string::npos) << o.err;
}

}  // namespace
