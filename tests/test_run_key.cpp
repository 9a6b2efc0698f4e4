// The run key: every key field separates runs, nothing else does, and how a key reads.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compare_fixtures.h"
#include "decodebench/run_key.h"

namespace {

using db_test::full_result;

}  // namespace

TEST(RunKey, EveryKeyFieldSeparatesRunsAndNothingElseDoes) {
  const db::Result r = full_result("8b-int4", {1, 2, 3});
  const db::RunKey k = db::run_key(r);
  std::vector<db::Result> changed(13, r);
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
  for (size_t i = 0; i < changed.size(); ++i) {
    EXPECT_NE(db::run_key(changed[i]), k) << i;
    EXPECT_EQ(db::key_fields(db::run_key(changed[i])).size(), 13u);
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
}
