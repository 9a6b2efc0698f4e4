// Device weights shared between engines (DeviceWeights) and kept between the runs of a sweep
// (run_one with a WeightReuse): an engine on shared weights computes exactly what an engine
// with weights of its own computes, whatever its positions, graph switch or kernel of the same
// layout; a kernel of another layout is refused; run_one reuses the device weights exactly
// when their key (weights, device, layout) matches, and frees them before loading others.
#include <memory>
#include <string>
#include <vector>

#include "decodebench/adapter.h"
#include "decodebench/backend.h"
#include "decodebench/result.h"
#include "decodebench/sweep.h"
#include "engine.cuh"
#include "gpu_common.cuh"
#include "gpu_engine_trace.cuh"
#include "run.h"

using namespace db;
using namespace db::cuda;
using dbtest::run_engine;
using dbtest::tiny;
using dbtest::Trace;

namespace {

void expect_same(const Trace& got, const Trace& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  for (size_t i = 0; i < want.logits.size(); ++i)
    ASSERT_EQ(got.logits[i], want.logits[i]) << what << " step " << i;
}

// Kernels by weight layout: each group shares one DeviceWeights.
struct LayoutGroup {
  Scheme scheme;
  std::vector<const char*> kernels;
};
const std::vector<LayoutGroup> kGroups = {
    {Scheme::fp16, {"fp16.gemv", "fp16.cublas"}},
    {Scheme::int8, {"int8.gemv", "int8.naive", "int8.dequant-cublas"}},
    {Scheme::int4, {"int4.naive", "int4.dequant-cublas"}},  // canonical
    {Scheme::int4, {"int4.gemv"}},                          // repacked
};

struct Run {
  int64_t context, steps;
  bool graph;
};
const std::vector<Run> kRuns = {{0, 12, true}, {70, 12, false}, {5, 20, true}};

// Engines on one DeviceWeights, with other positions, the graph on and off, and every kernel
// of the weights' layout: bit for bit the tokens and logits of engines that loaded their own.
void check_shared_against_own(const WeightSource& ws, const LayoutGroup& g) {
  const ModelConfig& c = ws.config();
  const KernelInfo& first = resolve_kernel(g.kernels.front(), g.scheme);
  const auto shared = std::make_shared<const DeviceWeights>(ws, weight_layout(c, first));
  for (const char* name : g.kernels) {
    const KernelInfo& k = resolve_kernel(name, g.scheme);
    EXPECT_EQ(weight_layout(c, k), shared->layout()) << name;
    for (const Run& r : kRuns) {
      const std::string what = fmt::format("{} context {} graph {}", name, r.context, r.graph);
      Engine own(ws, k, r.context + r.steps);
      Engine on_shared(shared, k, r.context + r.steps);
      expect_same(run_engine(on_shared, r.context, r.steps, r.graph),
                  run_engine(own, r.context, r.steps, r.graph), what);
      const MemoryUse a = on_shared.memory(), b = own.memory();
      EXPECT_EQ(a.weights_bytes, shared->bytes()) << what;
      EXPECT_EQ(a.weights_bytes, b.weights_bytes) << what;
      EXPECT_EQ(a.kv_cache_bytes, b.kv_cache_bytes) << what;
      EXPECT_EQ(a.scratch_bytes, b.scratch_bytes) << what;
      EXPECT_EQ(a.total_bytes, b.total_bytes) << what;
      EXPECT_EQ(on_shared.launches_per_step(), own.launches_per_step()) << what;
    }
  }
  // Two engines alive at once on the same weights, used in turn: neither disturbs the other
  // (the weights are read only; every engine has its own KV cache and state).
  const KernelInfo& k = resolve_kernel(g.kernels.back(), g.scheme);
  Engine a(shared, k, 40), b(shared, k, 100);
  const Trace a1 = run_engine(a, 8, 16, true);
  const Trace b1 = run_engine(b, 60, 16, false);
  expect_same(run_engine(a, 8, 16, true), a1, "engine a again");
  Engine own_b(ws, k, 100);
  expect_same(b1, run_engine(own_b, 60, 16, false), "engine b");
}

TEST(SharedWeights, EnginesOnSharedWeightsMatchEnginesWithTheirOwn) {
  REQUIRE_GPU();
  for (const LayoutGroup& g : kGroups) {
    SCOPED_TRACE(g.kernels.front());
    const WeightSource ws(tiny(g.scheme), "", 21);
    check_shared_against_own(ws, g);
  }
}

// With a LoRA adapter: merged (in the shared weights) and external (A and B in the shared
// weights, each engine's scratch its own).
TEST(SharedWeights, WithALoraAdapterInBothModes) {
  REQUIRE_GPU();
  for (AdapterMode mode : {AdapterMode::merged, AdapterMode::external}) {
    for (const LayoutGroup& g : {kGroups[1], kGroups[3]}) {
      SCOPED_TRACE(
          fmt::format("{} {}", g.kernels.front(), mode == AdapterMode::merged ? "merged" : "external"));
      const ModelConfig c = tiny(g.scheme);
      const Adapter adapter = load_adapter("synthetic:rank=8", c, 21, mode);
      const WeightSource ws(c, "", 21, &adapter);
      check_shared_against_own(ws, g);
    }
  }
}

TEST(SharedWeights, AKernelOfAnotherLayoutIsRefused) {
  REQUIRE_GPU();
  const WeightSource ws(tiny(Scheme::int4), "", 3);
  const ModelConfig& c = ws.config();
  const auto canonical =
      std::make_shared<const DeviceWeights>(ws, weight_layout(c, resolve_kernel("int4.naive", Scheme::int4)));
  EXPECT_EQ(canonical->layout().name(), "canonical");
  try {
    Engine e(canonical, resolve_kernel("int4.gemv", Scheme::int4), 8);
    FAIL() << "int4.gemv ran on the canonical layout";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("layout"), std::string::npos) << err.what();
  }
  EXPECT_EQ(canonical.use_count(), 1);  // the refused engine let go of them
}

// With the weights resident, free memory need only hold the engine's own part: the error of
// an engine that does not fit names that need (KV cache and scratch, not the weights again).
TEST(SharedWeights, RefusesWhatDoesNotFitCountingOnlyTheEngine) {
  REQUIRE_GPU();
  const WeightSource ws(tiny(Scheme::int8), "", 3);
  const ModelConfig& c = ws.config();
  const KernelInfo& k = resolve_kernel("int8.gemv", Scheme::int8);
  const auto shared = std::make_shared<const DeviceWeights>(ws, weight_layout(c, k));
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const int64_t per_position = 2 * c.num_hidden_layers * c.kv_dim() * 2;
  const int64_t positions =
      static_cast<int64_t>(free_b / per_position) * 2;  // KV cache alone twice what is free
  const MemoryUse need = Engine::plan(c, k, positions, 0);
  try {
    Engine e(shared, k, positions);
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("not enough GPU memory"), std::string::npos) << m;
    EXPECT_NE(m.find(fmt::format("need {:.2f} GB (KV cache", need.total_bytes / 1e9)), std::string::npos)
        << m;
    EXPECT_NE(m.find("on the device already"), std::string::npos) << m;
    EXPECT_NE(m.find("free of"), std::string::npos) << m;
  }
  // And the weights still serve an engine that fits.
  Engine small(shared, k, 16);
  Engine own(ws, k, 16);
  expect_same(run_engine(small, 0, 16, true), run_engine(own, 0, 16, true), "after the refusal");
}

RunSpec spec_of(const std::string& kernel, int64_t context, bool graph, uint64_t seed = 0) {
  RunSpec s;
  s.model = "tiny-int4";
  s.kernel = kernel;
  s.context = context;
  s.graph = graph;
  s.seed = seed;
  s.tokens = 6;
  s.warmup = 1;
  s.repeat = 2;
  s.backend = BackendKind::cuda;
  return s;
}

// A sweep-like sequence: run_one reuses the device weights exactly when the key matches, the
// results say so, and every result has the tokens of a run of its own.
TEST(SweepReuse, RunOneReusesDeviceWeightsExactlyWhenTheKeyMatches) {
  REQUIRE_GPU();
  struct Step {
    RunSpec spec;
    bool reused;  // expected: weights, device and layout as the previous run's
  };
  const std::vector<Step> steps = {
      {spec_of("int4.gemv", 0, true), false},               // first: loads
      {spec_of("int4.gemv", 16, false), true},              // other context, graph off
      {spec_of("int4.naive", 0, true), false},              // canonical layout: loads
      {spec_of("int4.dequant-cublas", 8, true), true},      // canonical too
      {spec_of("int4.dequant-cublas", 8, true, 1), false},  // other seed: other weights
  };
  WeightReuse reuse;
  std::weak_ptr<const void> previous;
  int64_t reused = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE(fmt::format("step {}: {}", i, instance_summary(steps[i].spec)));
    const Result r = run_one(steps[i].spec, &reuse);
    reused += steps[i].reused ? 1 : 0;
    EXPECT_EQ(r.timing.weights_reused, steps[i].reused);
    EXPECT_EQ(reuse.backend.reused, reused);
    ASSERT_TRUE(reuse.backend.state);
    EXPECT_EQ(reuse.backend.state.use_count(), 1);  // the engine is gone; only the sweep keeps them
    if (i > 0) {
      // Reused: the same object. Loaded: the previous set was freed first (one at a time).
      EXPECT_EQ(previous.expired(), !steps[i].reused);
      if (steps[i].reused) EXPECT_EQ(previous.lock(), reuse.backend.state);
    }
    previous = reuse.backend.state;
    const Result alone = run_one(steps[i].spec);
    EXPECT_FALSE(alone.timing.weights_reused);
    EXPECT_EQ(r.check.tokens, alone.check.tokens);
    EXPECT_EQ(r.memory.total_bytes, alone.memory.total_bytes);
  }
  EXPECT_EQ(reuse.reused, 3);  // the WeightSource has no layout: steps 1-3 reused it, the new seed not
}

}  // namespace
