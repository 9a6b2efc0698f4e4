// A run assembled from its RunSpec (src/run/run.h), end to end on the CPU backend: what the
// result records of the spec, the weights shared between runs of one key, the roofline, and
// the refusals that come before anything loads.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "decodebench/accounting.h"
#include "decodebench/adapter.h"
#include "decodebench/error.h"
#include "decodebench/roofline.h"
#include "decodebench/version.h"
#include "decodebench/weights.h"
#include "run.h"

namespace {

using db::BackendKind;
using db::Result;
using db::RunSpec;

// A short CPU run of `model`: `tokens` timed steps in each of 2 repetitions after a context of 3.
RunSpec cpu_spec(const std::string& model, int64_t tokens = 4) {
  RunSpec s;
  s.model = model;
  s.backend = BackendKind::cpu;
  s.context = 3;
  s.tokens = tokens;
  s.warmup = 1;
  s.repeat = 2;
  s.energy = false;
  s.progress = db::ProgressMode::off;
  s.command_line = "decodebench run --model " + model;
  return s;
}

std::string error_of(const RunSpec& s) {
  try {
    db::run_one(s);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

class TinyPreset : public ::testing::TestWithParam<const char*> {};

// Every tiny preset runs from its spec alone, and the result records what was asked and what
// ran: the spec's model, weights and protocol, the config's scheme, the CPU reference as the
// kernel, a sample for every timed step and a token for each, and the bytes of the steps'
// positions.
TEST_P(TinyPreset, RunsFromItsSpecAndRecordsWhatRan) {
  const RunSpec spec = cpu_spec(GetParam());
  const db::ModelConfig cfg = db::run_model_config(spec);
  const Result r = db::run_one(spec);

  EXPECT_EQ(r.tool.version, db::version_string());
  EXPECT_EQ(r.command, spec.command_line);
  EXPECT_EQ(r.config.model, spec.model);
  EXPECT_EQ(r.config.weights, "synthetic");
  EXPECT_EQ(r.config.weights_format, "synthetic");
  EXPECT_EQ(r.config.arch, db::to_string(cfg.arch));
  EXPECT_EQ(r.config.scheme, db::to_string(cfg.quant.scheme));
  EXPECT_EQ(r.config.lm_head_scheme, db::to_string(cfg.quant.lm_head));
  EXPECT_EQ(r.config.group_size, cfg.quant.scheme == db::Scheme::int4 ? cfg.quant.group_size : 0);
  EXPECT_EQ(r.config.kernel, "cpu.reference");
  EXPECT_FALSE(r.config.graph);  // no graph on the CPU, whatever the spec says
  EXPECT_EQ(r.config.params, db::parameter_count(cfg));
  EXPECT_EQ(r.config.context, spec.context);
  EXPECT_EQ(r.config.tokens, spec.tokens);
  EXPECT_EQ(r.config.warmup, spec.warmup);
  EXPECT_EQ(r.config.repeat, spec.repeat);
  EXPECT_EQ(r.config.batch, 1);
  EXPECT_EQ(r.config.max_time_s, 0);  // only with --max-noise

  EXPECT_EQ(r.timing.samples_ms.size(), static_cast<size_t>(spec.tokens * spec.repeat));
  EXPECT_EQ(r.timing.repetitions, spec.repeat);
  EXPECT_EQ(r.timing.clock, "host");
  EXPECT_GT(r.timing.tpot_ms.median, 0);
  EXPECT_DOUBLE_EQ(r.timing.tokens_per_s, 1e3 / r.timing.tpot_ms.median);
  EXPECT_EQ(r.check.tokens.size(), static_cast<size_t>(spec.tokens));
  EXPECT_EQ(r.check.sequence_tokens_hashes, std::vector<std::string>{r.check.tokens_hash});
  for (int32_t t : r.check.tokens) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, cfg.vocab_size);
  }

  const db::ByteAccount bytes = db::account_bytes(cfg, db::AdapterShape{}, db::KernelTraffic{}, spec.context,
                                                  spec.context + spec.tokens - 1);
  EXPECT_EQ(r.bytes.per_token.total, bytes.per_token.total);
  EXPECT_EQ(r.energy.reason, "not measured: --energy off");
}

INSTANTIATE_TEST_SUITE_P(Presets, TinyPreset,
                         ::testing::Values("tiny-fp16", "tiny-int8", "tiny-int4", "tiny-qwen2-fp16",
                                           "tiny-qwen2-int8", "tiny-qwen2-int4"));

// The CPU backend launches nothing, so the result's roofline is compute_roofline's of the
// result with no fixed cost: the bytes at the measured read bandwidth and the FLOPs at the
// measured throughput, the larger one the floor.
TEST(RunOne, TheRooflineIsTheResultsBytesAndFlopsAtTheMeasuredRates) {
  const Result r = db::run_one(cpu_spec("tiny-int4"));
  ASSERT_GT(r.device.peak_read_GBps, 0);
  const db::Roofline expected = db::compute_roofline(r, 0, 0);
  EXPECT_EQ(r.roofline.floor_tpot_ms, expected.floor_tpot_ms);
  EXPECT_EQ(r.roofline.efficiency, expected.efficiency);
  EXPECT_EQ(r.roofline.regime, expected.regime);
  EXPECT_EQ(r.roofline.regime_reason, expected.regime_reason);
  EXPECT_DOUBLE_EQ(r.roofline.bandwidth_floor_tpot_ms,
                   static_cast<double>(r.bytes.per_token.total) / (r.device.peak_read_GBps * 1e9) * 1e3);
  EXPECT_EQ(r.roofline.floor_tpot_ms,
            std::max(r.roofline.bandwidth_floor_tpot_ms, r.roofline.compute_floor_tpot_ms));
  EXPECT_DOUBLE_EQ(r.roofline.efficiency, r.roofline.floor_tpot_ms / r.timing.tpot_ms.median);
}

// The adapter as it was loaded, and the mode it runs in, are what the result's config says.
TEST(RunOne, TheResultRecordsTheAdapterAsLoaded) {
  RunSpec spec = cpu_spec("tiny-fp16");
  spec.adapter = "synthetic:rank=4";
  spec.adapter_mode = db::AdapterMode::external;
  const Result r = db::run_one(spec);
  EXPECT_EQ(r.config.adapter, "synthetic:rank=4");
  EXPECT_EQ(r.config.adapter_mode, "external");
  EXPECT_EQ(r.config.adapter_rank, 4);
  EXPECT_FALSE(r.config.adapter_targets.empty());
  EXPECT_GT(r.bytes.per_token.adapter, 0u);
}

// Runs of one weights key (another context, more tokens) share one WeightSource, and decode
// exactly what a run on weights of its own decodes; a run of another key (another seed) loads
// its own, and the previous source is freed first, so a sequence of runs holds one model's
// weights at a time.
TEST(RunOne, RunsOfOneWeightsKeyShareTheirWeights) {
  const RunSpec first = cpu_spec("tiny-int4");
  RunSpec same = first;
  same.context = 0;
  same.tokens = 6;
  RunSpec other = first;
  other.seed = 1;

  db::WeightReuse reuse;
  db::run_one(first, &reuse);
  EXPECT_EQ(reuse.reused, 0);
  ASSERT_TRUE(reuse.weights);
  EXPECT_EQ(reuse.key, db::weights_key(first, db::run_model_config(first)));
  EXPECT_EQ(db::weights_key(same, db::run_model_config(same)), reuse.key);
  const std::weak_ptr<db::WeightSource> loaded = reuse.weights;

  const Result shared = db::run_one(same, &reuse);
  EXPECT_EQ(reuse.reused, 1);
  EXPECT_EQ(reuse.weights, loaded.lock());
  EXPECT_EQ(shared.check.tokens, db::run_one(same).check.tokens);

  db::run_one(other, &reuse);
  EXPECT_EQ(reuse.reused, 1);
  EXPECT_TRUE(loaded.expired());
  EXPECT_EQ(reuse.key, db::weights_key(other, db::run_model_config(other)));
}

// What the spec alone can refuse is refused before a weight is read: a weights path that does
// not exist is never reached.
TEST(RunOne, RefusesWhatTheSpecAloneCanRefuseBeforeLoading) {
  RunSpec spec = cpu_spec("tiny-int4");
  spec.weights = "/nonexistent/weights.safetensors";
  spec.context = 1 << 20;
  const std::string positions = error_of(spec);
  EXPECT_NE(positions.find("positions exceed max_position_embeddings"), std::string::npos) << positions;

  spec = cpu_spec("tiny-fp16");
  spec.weights = "/nonexistent/weights.safetensors";
  spec.group_size = 32;
  EXPECT_THROW(db::run_one(spec), db::UsageError);
  EXPECT_NE(error_of(spec).find("--group-size applies to int4 weights only"), std::string::npos);

  spec = cpu_spec("tiny-fp16");
  spec.weights = "/nonexistent/weights.safetensors";
  spec.kernel = "int4.gemv";
  const std::string kernel = error_of(spec);
  EXPECT_EQ(kernel.find("/nonexistent"), std::string::npos) << kernel;
  EXPECT_NE(kernel.find("int4.gemv"), std::string::npos) << kernel;
}

// The CPU backend decodes any batch: the result records it, with each sequence's tokens'
// hash, sequence 0's first, and every sequence's tokens a second.
TEST(RunOne, TheCpuBackendRunsAnyBatch) {
  RunSpec spec = cpu_spec("tiny-int8");
  spec.batch = 3;
  const Result r = db::run_one(spec);
  EXPECT_EQ(r.config.batch, 3);
  EXPECT_EQ(r.check.sequence_tokens_hashes.size(), 3u);
  EXPECT_EQ(r.check.sequence_tokens_hashes.front(), r.check.tokens_hash);
  EXPECT_DOUBLE_EQ(r.timing.aggregate_tokens_per_s, 3 * r.timing.tokens_per_s);
}

}  // namespace
