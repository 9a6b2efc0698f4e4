// --kv-cache on the CUDA backend, end to end through the command line: each scheme runs and is
// recorded, its bytes are the scheme's, its cache is allocated in kv_quant.h's layout, and
// --check passes against a CPU reference that stores K and V as the run does; a sweep over the
// schemes keeps no scheme's weights (and config) for another.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "decodebench/config.h"
#include "decodebench/result.h"
#include "gpu_common.cuh"
#include "gpu_engine_trace.cuh"
#include "kv_cache_bound.h"
#include "temp_dir.h"

using namespace db;

namespace {

class KvCacheCli : public db_test::TempDirTest {};

// The GPU and its reference store the same scheme, but each quantizes its own K and V: the
// GPU's, computed through fp16 activations, differ from the reference's float ones by about
// 2^-11, enough to move a value across a rounding boundary. A code that moved is one step off
// the reference's, twice the half step the bound assumes, so the check is held to the engine's
// own bound (kLogitsBound) plus twice the scheme's (kv_cache_bound.h).
TEST_F(KvCacheCli, EachSchemeRunsChecksAgainstItsOwnReferenceAndAllocatesItsLayout) {
  REQUIRE_GPU();
  const ModelConfig c = load_model_config("tiny-int4");
  std::map<std::string, Result> runs;
  for (KvScheme s : {KvScheme::fp16, KvScheme::fp8, KvScheme::int8}) {
    const std::string name = to_string(s), out = path(name + ".json");
    const db_test::Outcome o = db_test::run({"--model", "tiny-int4", "--backend", "cuda", "--context", "40",
                                             "--tokens", "4", "--warmup", "1", "--repeat", "1", "--kv-cache",
                                             name, "--check", "--energy", "off", "-o", out});
    ASSERT_EQ(o.code, 0) << name << ": " << o.err;
    const std::vector<Result> r = read_results(out);
    ASSERT_EQ(r.size(), 1u);
    const Result& run = runs[name] = r[0];
    EXPECT_EQ(run.config.kv_cache, name);
    EXPECT_TRUE(run.check.logits_checked) << name;
    EXPECT_LE(run.check.logits_max_rel_err, dbtest::kLogitsBound + 2 * db_test::kv_logits_bound(c, s))
        << name;
    EXPECT_EQ(run.bytes.per_token.kv_read_scales > 0, s != KvScheme::fp16) << name;
  }
  // fp8 and int8 lay out the same bytes: a one-byte code an element, a float a (token, kv
  // head); against fp16's two bytes an element that is (head_dim + 4) / (2 head_dim) of them.
  const uint64_t fp16 = runs["fp16"].memory.kv_cache_bytes, fp8 = runs["fp8"].memory.kv_cache_bytes;
  EXPECT_EQ(fp8, runs["int8"].memory.kv_cache_bytes);
  EXPECT_EQ(fp8 * 2 * static_cast<uint64_t>(c.head_dim), fp16 * static_cast<uint64_t>(c.head_dim + 4))
      << "fp16 " << fp16 << " bytes, fp8 " << fp8;
}

// The scheme is part of the config the device weights were built from: a sweep over it loads
// them once a scheme (2 of 4 instances reuse them, those of the same scheme), and each
// instance's tokens are those of a run of its scheme alone.
TEST_F(KvCacheCli, ASweepOverTheSchemesReusesWeightsOnlyWithinAScheme) {
  REQUIRE_GPU();
  const db_test::Outcome o = db_test::run({"sweep", "--model", "tiny-int4", "--backend", "cuda", "--kv-cache",
                                           "fp16,fp8", "--context", "40", "--tokens", "3,4", "--warmup", "0",
                                           "--repeat", "1", "--energy", "off", "-o", path("s.jsonl")});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("2 of 4 instances reused a WeightSource, 2 reused device weights"), std::string::npos)
      << o.err;
  const std::vector<Result> s = read_results(path("s.jsonl"));
  ASSERT_EQ(s.size(), 4u);
  const db_test::Outcome alone = db_test::run({"--model", "tiny-int4", "--backend", "cuda", "--kv-cache",
                                               "fp8", "--context", "40", "--tokens", "4", "--warmup", "0",
                                               "--repeat", "1", "--energy", "off", "-o", path("a.json")});
  ASSERT_EQ(alone.code, 0) << alone.err;
  EXPECT_EQ(s[3].config.kv_cache, "fp8");
  EXPECT_EQ(s[3].check.tokens_hash, read_results(path("a.json"))[0].check.tokens_hash);
}

}  // namespace
