// The run key: every key field separates runs, nothing else does, and how a key reads.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_helpers.h"
#include "compare_fixtures.h"
#include "decodebench/compare.h"
#include "decodebench/compare_printers.h"
#include "decodebench/run_key.h"

namespace {

using db_test::full_result;

}  // namespace

TEST(RunKey, EveryKeyFieldSeparatesRunsAndNothingElseDoes) {
  const db::Result r = full_result("8b-int4", {1, 2, 3});
  const db::RunKey k = db::run_key(r);
  std::vector<db::Result> changed(14, r);
  changed[0].config.model = "1b-int4";
  changed[1].config.scheme = "int8";
  changed[2].config.group_size = 64;
  changed[3].config.lm_head_scheme = "int8";
  changed[4].config.kernel = "int4.sliced";
  changed[5].config.graph = false;
  changed[6].config.adapter = "synthetic:rank=8";
  changed[7].config.adapter_mode = "merged";
  changed[8].config.context = 0;
  changed[9].config.tokens = 128;
  changed[10].config.sync_per_token = true;
  changed[11].config.weights = "/w.safetensors";
  changed[12].config.batch = 8;
  changed[13].config.kv_cache = "fp8";
  for (size_t i = 0; i < changed.size(); ++i) {
    EXPECT_NE(db::run_key(changed[i]), k) << i;
    EXPECT_EQ(db::key_fields(db::run_key(changed[i])).size(), 14u);
  }

  // Not the device, the seed, the repetitions or the timing.
  db::Result same = full_result("8b-int4", {5, 6, 7}, "NVIDIA A100-SXM4-80GB", 1800);
  same.config.seed = 99;
  same.config.warmup = 1;
  same.config.repeat = 9;
  same.time = "2026-01-01T00:00:00Z";
  EXPECT_EQ(db::run_key(same), k);

  EXPECT_EQ(db::to_string(k),
            "model=8b-int4 scheme=int4 group_size=128 lm_head_scheme=fp16 kernel=int4.gemv graph=on "
            "adapter=none adapter_mode=- context=512 tokens=40 sync_per_token=off weights=synthetic");
  // A batch other than 1 is named; batch 1 reads as a key from before --batch did.
  EXPECT_EQ(db::to_string(db::run_key(changed[12])), db::to_string(k) + " batch=8");
  // A KV cache other than fp16 is named; an fp16 cache reads as a key from before --kv-cache.
  EXPECT_EQ(
      db::to_string(db::run_key(changed[13])),
      "model=8b-int4 scheme=int4 group_size=128 lm_head_scheme=fp16 kv_cache=fp8 kernel=int4.gemv graph=on "
      "adapter=none adapter_mode=- context=512 tokens=40 sync_per_token=off weights=synthetic");
}

// Every committed result was written before --kv-cache, with an fp16 cache. It reads as one,
// its key reads as it did, and it matches the same run written with the field: a baseline
// of old files still gates new fp16 runs.
TEST(RunKey, AResultWithoutTheKvCacheFieldIsAnFp16CacheAndKeysAsBefore) {
  const std::string path = std::string(DB_SOURCE_DIR) + "/results/h200/8b-int4-graph-on.json";
  ASSERT_EQ(db_test::slurp(path).find("\"kv_cache\""), std::string::npos)
      << "the file is no longer an old one";
  const std::vector<db::Result> old = db::read_results(path);
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old[0].config.kv_cache, "fp16");
  EXPECT_EQ(db::to_string(db::run_key(old[0])),
            "model=8b-int4 scheme=int4 group_size=128 lm_head_scheme=fp16 kernel=int4.gemv graph=on "
            "adapter=none adapter_mode=- context=0 tokens=128 sync_per_token=off weights=synthetic");

  const std::string rewritten = db::result_to_json_text(old[0], 2);
  ASSERT_NE(rewritten.find("\"kv_cache\": \"fp16\""), std::string::npos) << rewritten.substr(0, 2000);
  const db::Result now = db::result_from_json_text(rewritten, "rewritten");
  EXPECT_EQ(db::run_key(now), db::run_key(old[0]));
  const db::Comparison c = db::compare_results(old, {now}, 0.03);
  EXPECT_EQ(c.pairs.size(), 1u);
  EXPECT_TRUE(c.unmatched_base.empty());
  EXPECT_TRUE(c.unmatched_new.empty());
  // compare's json names the key as before too: no kv_cache for an fp16 cache.
  EXPECT_EQ(db::format_comparison_json(c).find("kv_cache"), std::string::npos);
}
