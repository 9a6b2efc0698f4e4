// Weights made on the device against the host generator, and the whole decode step of the
// CUDA engine against the CPU reference: same tokens, logits within the derived bound,
// graph and eager identical.
#include <cmath>

#include "decodebench/backend.h"
#include "decodebench/cpu_reference.h"
#include "decodebench/cuda_engine.cuh"
#include "decodebench/half.h"
#include "gpu_common.cuh"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;
using dbtest::DeviceBuffer;

namespace {

ModelConfig tiny(Scheme s) {
  RunSpec spec;
  spec.quant = s;
  return apply_overrides(load_model_config("tiny"), spec);
}

TEST(DeviceWeights, SyntheticMatricesAreBitIdenticalToTheHostGenerator) {
  REQUIRE_GPU();
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4}) {
    const ModelConfig c = tiny(s);
    const WeightSource ws(c, "", 1234);
    const Origin o = ws.linear(1, Linear::down);
    const QuantMatrix host = ws.host_matrix(o, s);
    DeviceBuffer<uint8_t> q(host.qweight.size()), z(std::max<size_t>(host.zeros.size(), 1));
    DeviceBuffer<uint16_t> sc(std::max<size_t>(host.scales.size(), 1));
    DeviceMatrix m;
    m.scheme = s;
    m.rows = host.rows;
    m.cols = host.cols;
    m.group_size = host.group_size;
    m.zero_point = host.zero_point;
    m.qweight = q.p;
    m.scales = reinterpret_cast<__half*>(sc.p);
    m.zeros = z.p;
    produce_synthetic(m, {}, 0, host.rows, SyntheticSource{1234, o.tensor_id, o.dist}, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(q.download(), host.qweight) << to_string(s);
    if (s != Scheme::fp16) {
      std::vector<uint16_t> got = sc.download();
      got.resize(host.scales.size());
      EXPECT_EQ(got, host.scales) << to_string(s);
    }
    if (s == Scheme::int4) {
      std::vector<uint8_t> got = z.download();
      got.resize(host.zeros.size());
      EXPECT_EQ(got, host.zeros);
    }
  }
}

TEST(DeviceWeights, SyntheticVectorsAreBitIdentical) {
  REQUIRE_GPU();
  const WeightSource ws(tiny(Scheme::fp16), "", 7);
  const Origin o = ws.vector(layer_norm_name(0, false), 128);
  DeviceBuffer<uint16_t> d(128);
  fill_synthetic_f16(reinterpret_cast<__half*>(d.p), 128, SyntheticSource{7, o.tensor_id, o.dist}, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> host = ws.host_vector(o);
  const std::vector<uint16_t> got = d.download();
  for (int i = 0; i < 128; ++i) ASSERT_EQ(got[i], f32_to_f16(host[i])) << i;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, double(std::fabs(a[i] - b[i])));
    m = std::max(m, double(std::fabs(b[i])));
  }
  return d / m;
}

// Runs `steps` greedy steps from `context` on the engine (prefill eagerly) and returns the
// generated tokens and every step's logits.
struct Trace {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

Trace run_engine(Engine& e, int64_t context, int64_t steps, bool graph) {
  const int64_t vocab = e.config().vocab_size;
  e.set_first_position(0);
  for (int64_t i = 0; i < context; ++i) {
    e.set_input(i, prompt_token(i, vocab));
    e.enqueue_step();
  }
  e.set_first_position(context);
  e.set_input(context, prompt_token(context, vocab));
  Trace t;
  for (int64_t i = 0; i < steps; ++i) {
    if (graph) e.launch_graph();
    else e.enqueue_step();
    t.logits.push_back(e.logits());
    t.tokens.push_back(e.next_token());
  }
  return t;
}

Trace run_cpu(const WeightSource& ws, int64_t context, int64_t steps) {
  CpuModel cpu(ws, context + steps);
  const int64_t vocab = ws.config().vocab_size;
  for (int64_t i = 0; i < context; ++i) cpu.step(prompt_token(i, vocab), i);
  int32_t token = prompt_token(context, vocab);
  Trace t;
  for (int64_t i = 0; i < steps; ++i) {
    t.logits.push_back(cpu.step(token, context + i));
    token = CpuModel::argmax(t.logits.back());
    t.tokens.push_back(token);
  }
  return t;
}

struct EngineCase {
  Scheme scheme;
  const char* kernel;
  int64_t context;
};

class EngineVsCpu : public ::testing::TestWithParam<EngineCase> {};

// The GPU keeps activations in fp16 between kernels and accumulates in fp16 inside 16-byte
// chunks (each ~2^-11 relative); through 2 layers and the lm_head that stays under 1e-2 of
// the largest logit. dequant-cublas rounds every dequantized weight to fp16 once more.
TEST_P(EngineVsCpu, SameTokensAndCloseLogits) {
  REQUIRE_GPU();
  const EngineCase p = GetParam();
  const ModelConfig c = tiny(p.scheme);
  const WeightSource ws(c, "", 5);
  const int64_t steps = 16;
  const Trace cpu = run_cpu(ws, p.context, steps);
  Engine e(ws, resolve_kernel(p.kernel, p.scheme), p.context + steps);
  const Trace gpu = run_engine(e, p.context, steps, true);
  EXPECT_EQ(gpu.tokens, cpu.tokens) << p.kernel << " context " << p.context;
  for (int64_t i = 0; i < steps; ++i)
    EXPECT_LE(rel_err(gpu.logits[i], cpu.logits[i]), 1e-2) << p.kernel << " step " << i;
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, EngineVsCpu,
    ::testing::Values(EngineCase{Scheme::fp16, "fp16.gemv", 0}, EngineCase{Scheme::fp16, "fp16.cublas", 0},
                      EngineCase{Scheme::int8, "int8.gemv", 0}, EngineCase{Scheme::int8, "int8.naive", 0},
                      EngineCase{Scheme::int8, "int8.dequant-cublas", 0}, EngineCase{Scheme::int4, "int4.gemv", 0},
                      EngineCase{Scheme::int4, "int4.naive", 0}, EngineCase{Scheme::int4, "int4.dequant-cublas", 0},
                      // past one attention split (64 positions): the split merge runs
                      EngineCase{Scheme::int4, "int4.gemv", 150}, EngineCase{Scheme::fp16, "fp16.gemv", 300}),
    [](const auto& info) {
      std::string n = fmt::format("{}_ctx{}", info.param.kernel, info.param.context);
      for (char& ch : n)
        if (ch == '.' || ch == '-') ch = '_';
      return n;
    });

TEST(Engine, GraphAndEagerGiveIdenticalTokensAndLogits) {
  REQUIRE_GPU();
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4}) {
    const WeightSource ws(tiny(s), "", 11);
    Engine e(ws, resolve_kernel("auto", s), 100 + 24);
    const Trace eager = run_engine(e, 100, 24, false);
    const Trace graph = run_engine(e, 100, 24, true);
    EXPECT_EQ(eager.tokens, graph.tokens) << to_string(s);
    for (size_t i = 0; i < eager.logits.size(); ++i) ASSERT_EQ(eager.logits[i], graph.logits[i]) << to_string(s);
  }
}

TEST(Engine, RefusesWhatDoesNotFitWithBytesNeededAndFree) {
  REQUIRE_GPU();
  const ModelConfig c = apply_overrides(load_model_config("70b-fp16"), RunSpec{});
  const WeightSource ws(c, "", 0);
  try {
    Engine e(ws, resolve_kernel("auto", Scheme::fp16), 1 << 20);
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("not enough GPU memory"), std::string::npos) << m;
    EXPECT_NE(m.find("free of"), std::string::npos) << m;
  }
}

}  // namespace
