// Weights made on the device against the host generator, and the whole decode step of the
// CUDA engine against the CPU reference: same tokens, logits within the derived bound,
// graph and eager identical.
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <initializer_list>

#include "attention.cuh"
#include "attention_mma_plan.h"
#include "decodebench/backend.h"
#include "decodebench/cpu_reference.h"
#include "decodebench/half.h"
#include "decodebench/safetensors.h"
#include "engine.cuh"
#include "gpu_common.cuh"
#include "gpu_engine_trace.cuh"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;
using dbtest::DeviceBuffer;
using dbtest::run_engine;
using dbtest::tiny;
using dbtest::Trace;

namespace {

TEST(DeviceWeights, SyntheticMatricesAreBitIdenticalToTheHostGenerator) {
  REQUIRE_GPU();
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8}) {
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
    quantize_synthetic(m, {}, 0, host.rows, SyntheticSource{1234, o.tensor_id, o.dist}, nullptr);
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

// qwen2's q, k and v biases on the device: one fp16 vector a layer, in the fused QKV output's
// order, equal to the host's bit for bit.
TEST(DeviceWeights, Qwen2BiasesAreTheHostsInQkvOrder) {
  REQUIRE_GPU();
  const ModelConfig c = tiny(Scheme::int4, "tiny-qwen2");
  const WeightSource ws(c, "", 21);
  const DeviceWeights w(ws, weight_layout(c, resolve_kernel("auto", Scheme::int4)));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    std::vector<uint16_t> want;
    for (Linear lin : kBiasedLinears)
      for (float v : ws.host_vector(ws.bias(l, lin))) want.push_back(f32_to_f16(v));
    ASSERT_EQ(static_cast<int64_t>(want.size()), qkv_bias_size(c));
    ASSERT_NE(w.layers()[l].qkv_bias, nullptr);
    std::vector<uint16_t> got(want.size());
    CUDA_CHECK(cudaMemcpy(got.data(), w.layers()[l].qkv_bias, 2 * got.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(got, want) << "layer " << l;
  }
  // llama has none: attention gets null and adds nothing.
  const WeightSource llama(tiny(Scheme::int4), "", 21);
  const DeviceWeights lw(llama, weight_layout(llama.config(), resolve_kernel("auto", Scheme::int4)));
  EXPECT_EQ(lw.layers()[0].qkv_bias, nullptr);
  // The device holds what the accounting says the biases occupy (the shapes are the same).
  EXPECT_EQ(w.bytes() - lw.bytes(), account_bytes(c, {}, {}, 0, 0).stored.biases);
}

using db_test::max_rel_err;

// The reference's steps as run_engine takes them: the backends' prompt up to `context`, then
// `steps` greedy steps from there, recorded.
Trace run_cpu(const WeightSource& ws, int64_t context, int64_t steps) {
  return db_test::cpu_trace(ws, db_test::backend_prompt(context + 1, ws.config().vocab_size), context + steps,
                            context);
}

// Feeds the engine the given tokens (teacher forcing) from `context` and returns its logits.
std::vector<std::vector<float>> forced_logits(Engine& e, int64_t context,
                                              const std::vector<int32_t>& inputs) {
  const int64_t vocab = e.config().vocab_size;
  e.set_first_position(0);
  for (int64_t i = 0; i < context; ++i) {
    e.set_inputs(i, {prompt_token(i, vocab)});
    e.enqueue_step();
  }
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    e.set_inputs(context + static_cast<int64_t>(i), {inputs[i]});
    e.launch_graph();
    out.push_back(e.logits(0));
  }
  return out;
}

using dbtest::expect_reference_logits;
using dbtest::kLogitsBound;

// The issue's property, for the kernels --kernel auto picks: free-running greedy decoding on
// the synthetic tiny model gives the CPU reference's tokens.
TEST(EngineVsCpu, AutoKernelsGiveTheReferenceTokens) {
  REQUIRE_GPU();
  for (const char* preset : {"tiny", "tiny-qwen2"})
    for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8}) {
      const WeightSource ws(tiny(s, preset), "", 5);
      const int64_t steps = 16;
      const Trace cpu = run_cpu(ws, 0, steps);
      Engine e(ws, resolve_kernel("auto", s), steps);
      EXPECT_EQ(run_engine(e, 0, steps, true).tokens, cpu.tokens) << preset << " " << to_string(s);
    }
}

struct EngineCase {
  Scheme scheme;
  const char* kernel;
  int64_t context;
  const char* preset = "tiny";
};

class EngineVsCpu : public ::testing::TestWithParam<EngineCase> {};

// Every kernel, teacher-forced with the reference's tokens so each step compares the same
// computation (expect_reference_logits).
TEST_P(EngineVsCpu, LogitsWithinTheBoundAndSameArgmax) {
  REQUIRE_GPU();
  const EngineCase p = GetParam();
  const WeightSource ws(tiny(p.scheme, p.preset), "", 5);
  const int64_t steps = 16;
  const Trace cpu = run_cpu(ws, p.context, steps);
  std::vector<int32_t> inputs = {prompt_token(p.context, ws.config().vocab_size)};
  inputs.insert(inputs.end(), cpu.tokens.begin(), cpu.tokens.end() - 1);
  Engine e(ws, resolve_kernel(p.kernel, p.scheme), p.context + steps);
  expect_reference_logits(forced_logits(e, p.context, inputs), cpu, p.kernel);
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, EngineVsCpu,
    ::testing::Values(EngineCase{Scheme::fp16, "fp16.gemv", 0}, EngineCase{Scheme::fp16, "fp16.cublas", 0},
                      EngineCase{Scheme::int8, "int8.gemv", 0}, EngineCase{Scheme::int8, "int8.naive", 0},
                      EngineCase{Scheme::int8, "int8.dequant-cublas", 0},
                      EngineCase{Scheme::int4, "int4.gemv", 0}, EngineCase{Scheme::int4, "int4.naive", 0},
                      EngineCase{Scheme::int4, "int4.dequant-cublas", 0},
                      EngineCase{Scheme::fp8, "fp8.gemv", 0}, EngineCase{Scheme::fp8, "fp8.naive", 0},
                      EngineCase{Scheme::fp8, "fp8.dequant-cublas", 0},
                      // past one attention split (kAttentionChunk = 128 positions): the split merge runs
                      EngineCase{Scheme::int4, "int4.gemv", 150}, EngineCase{Scheme::fp16, "fp16.gemv", 300}),
    [](const auto& info) {
      std::string n = fmt::format("{}_ctx{}", info.param.kernel, info.param.context);
      for (char& ch : n)
        if (ch == '.' || ch == '-') ch = '_';
      return n;
    });

// qwen2: the q/k/v biases reach attention on every kernel path (GEMV and cuBLAS), and past one
// attention split, where the bias of each cached K must have entered before RoPE.
INSTANTIATE_TEST_SUITE_P(Qwen2, EngineVsCpu,
                         ::testing::Values(EngineCase{Scheme::fp16, "fp16.gemv", 0, "tiny-qwen2"},
                                           EngineCase{Scheme::fp16, "fp16.cublas", 0, "tiny-qwen2"},
                                           EngineCase{Scheme::int8, "int8.gemv", 0, "tiny-qwen2"},
                                           EngineCase{Scheme::fp8, "fp8.gemv", 0, "tiny-qwen2"},
                                           EngineCase{Scheme::int4, "int4.gemv", 0, "tiny-qwen2"},
                                           EngineCase{Scheme::int4, "int4.dequant-cublas", 0, "tiny-qwen2"},
                                           EngineCase{Scheme::int4, "int4.gemv", 150, "tiny-qwen2"}),
                         [](const auto& info) {
                           std::string n = fmt::format("{}_ctx{}", info.param.kernel, info.param.context);
                           for (char& ch : n)
                             if (ch == '.' || ch == '-') ch = '_';
                           return n;
                         });

// Attention for every head size a Llama/Qwen checkpoint uses and any number of query heads
// per kv head, on the short path and past one split (the merge): the fast kernel (32, 64, 96,
// 128; up to 8 query heads per kv head) and the plain one (every other multiple of 8 up to
// 256, larger groups), teacher-forced against the CPU reference.
struct HeadCase {
  db::Arch arch;
  int64_t head_dim, heads, kv_heads, context;
};

class AttentionShapes : public ::testing::TestWithParam<HeadCase> {};

TEST_P(AttentionShapes, LogitsWithinTheBoundAndSameArgmax) {
  REQUIRE_GPU();
  const HeadCase p = GetParam();
  ModelConfig c = tiny(Scheme::fp16);
  c.arch = p.arch;
  c.head_dim = p.head_dim;
  c.num_attention_heads = p.heads;
  c.num_key_value_heads = p.kv_heads;
  validate(c, "test");
  EXPECT_EQ(attention_fast_path(static_cast<int>(p.head_dim), static_cast<int>(p.heads),
                                static_cast<int>(p.kv_heads)),
            (p.head_dim == 32 || p.head_dim == 64 || p.head_dim == 96 || p.head_dim == 128) &&
                p.heads / p.kv_heads <= 8);
  const WeightSource ws(c, "", 11);
  const int64_t steps = 8;
  const Trace cpu = run_cpu(ws, p.context, steps);
  std::vector<int32_t> inputs = {prompt_token(p.context, c.vocab_size)};
  inputs.insert(inputs.end(), cpu.tokens.begin(), cpu.tokens.end() - 1);
  Engine e(ws, resolve_kernel("auto", Scheme::fp16), p.context + steps);
  expect_reference_logits(forced_logits(e, p.context, inputs), cpu, "");
  // Graph replay gives the eager path's tokens with the plain kernel's two launches too.
  Engine g(ws, resolve_kernel("auto", Scheme::fp16), p.context + steps);
  Engine n(ws, resolve_kernel("auto", Scheme::fp16), p.context + steps);
  EXPECT_EQ(run_engine(g, p.context, steps, true).tokens, run_engine(n, p.context, steps, false).tokens);
}

INSTANTIATE_TEST_SUITE_P(
    HeadSizes, AttentionShapes,
    ::testing::Values(HeadCase{Arch::llama, 24, 4, 2, 0}, HeadCase{Arch::llama, 24, 4, 2, 150},
                      HeadCase{Arch::llama, 96, 4, 1, 0}, HeadCase{Arch::llama, 96, 4, 1, 300},
                      HeadCase{Arch::qwen3, 96, 6, 2, 150}, HeadCase{Arch::llama, 80, 6, 2, 0},
                      HeadCase{Arch::llama, 80, 6, 2, 150}, HeadCase{Arch::llama, 160, 2, 2, 150},
                      HeadCase{Arch::qwen3, 256, 4, 2, 0}, HeadCase{Arch::qwen3, 256, 4, 2, 300},
                      HeadCase{Arch::llama, 64, 16, 1, 0}, HeadCase{Arch::llama, 64, 16, 1, 150},
                      HeadCase{Arch::llama, 128, 12, 2, 150}, HeadCase{Arch::llama, 8, 4, 4, 150},
                      // qwen2's biases through the plain kernel, and Qwen2.5-0.5B's 7:1 group
                      HeadCase{Arch::qwen2, 80, 6, 2, 150}, HeadCase{Arch::qwen2, 64, 14, 2, 150}),
    [](const auto& info) {
      const HeadCase& p = info.param;
      return fmt::format("{}_hd{}_h{}_kv{}_ctx{}", to_string(p.arch), p.head_dim, p.heads, p.kv_heads,
                         p.context);
    });

// A cache of kAttentionMmaMinPositions positions: the engine runs the tensor-core attention
// (attention_mma.cuh, from kAttentionMmaMinPositions on) for every head size it takes, against the reference
// at positions of one block and of several, and graph against eager. attention()'s wide merge (over 64
// splits) is checked kernel against kernel in gpu_test_attention_mma.cu.
TEST(AttentionLongCache, TheTensorCoreKernelMatchesTheReferenceGraphAndEager) {
  REQUIRE_GPU();
  struct Shape {
    Arch arch;
    int64_t head_dim, heads, kv_heads;
  };
  for (const Shape& sh : {Shape{Arch::llama, 128, 12, 2}, Shape{Arch::qwen3, 96, 4, 1},
                          Shape{Arch::llama, 32, 4, 2}, Shape{Arch::qwen2, 64, 14, 2}}) {
    ModelConfig c = tiny(Scheme::fp16);
    c.arch = sh.arch;
    c.head_dim = sh.head_dim;
    c.num_attention_heads = sh.heads;
    c.num_key_value_heads = sh.kv_heads;
    c.max_position_embeddings = 2 * kAttentionMmaMinPositions;
    validate(c, "test");
    const WeightSource ws(c, "", 11);
    const int64_t positions = kAttentionMmaMinPositions, steps = 8;
    ASSERT_TRUE(attention_mma_chosen(positions, static_cast<int>(sh.head_dim), static_cast<int>(sh.heads),
                                     static_cast<int>(sh.kv_heads)));
    for (int64_t context : {int64_t{100}, int64_t{700}}) {
      const std::string what = fmt::format("{} hd {} context {}", to_string(sh.arch), sh.head_dim, context);
      const Trace cpu = run_cpu(ws, context, steps);
      std::vector<int32_t> inputs = {prompt_token(context, c.vocab_size)};
      inputs.insert(inputs.end(), cpu.tokens.begin(), cpu.tokens.end() - 1);
      Engine e(ws, resolve_kernel("auto", Scheme::fp16), positions);
      expect_reference_logits(forced_logits(e, context, inputs), cpu, what);
      Engine g(ws, resolve_kernel("auto", Scheme::fp16), positions);
      Engine n(ws, resolve_kernel("auto", Scheme::fp16), positions);
      EXPECT_EQ(run_engine(g, context, steps, true).tokens, run_engine(n, context, steps, false).tokens)
          << what;
    }
  }
}

// --kernel auto never refuses a shape the CPU backend runs: a matrix the fast GEMV cannot take
// (an input that is not a multiple of 16 bytes of weights, an int4 group under 32) runs the
// plain GEMV, the run names it, and the tokens are the reference's. A named kernel is refused.
struct RaggedCase {
  Scheme scheme;
  int64_t intermediate;
  int group_size;
  std::vector<std::string> sites;  // the matrices that fall back
};

class RaggedShapes : public ::testing::TestWithParam<RaggedCase> {};

TEST_P(RaggedShapes, AutoFallsBackPerMatrixAndMatchesTheReference) {
  REQUIRE_GPU();
  const RaggedCase p = GetParam();
  ModelConfig c = tiny(p.scheme);
  c.intermediate_size = p.intermediate;
  c.quant.group_size = p.group_size;
  validate(c, "test");
  const KernelInfo& fast = resolve_kernel("auto", p.scheme);
  const std::vector<std::string> fell = Engine::fallbacks(c, fast);
  ASSERT_EQ(fell.size(), p.sites.size()) << fmt::format("{}", fmt::join(fell, "; "));
  for (size_t i = 0; i < fell.size(); ++i) EXPECT_EQ(fell[i].rfind(p.sites[i] + " [", 0), 0u) << fell[i];
  EXPECT_THROW(Engine::check_kernel(c, fast), Error);  // the named kernel: refused
  EXPECT_NO_THROW(Engine::check_kernel(c, fast, true));

  const WeightSource ws(c, "", 13);
  const int64_t context = 20, steps = 8;
  const Trace cpu = run_cpu(ws, context, steps);
  std::vector<int32_t> inputs = {prompt_token(context, c.vocab_size)};
  inputs.insert(inputs.end(), cpu.tokens.begin(), cpu.tokens.end() - 1);
  Engine e(ws, fast, context + steps, true);
  const std::vector<std::vector<float>> gpu = forced_logits(e, context, inputs);
  for (int64_t i = 0; i < steps; ++i) {
    const std::vector<float>& ref = cpu.logits[i];
    ASSERT_LE(max_rel_err(gpu[i], ref), kLogitsBound) << "step " << i;
    const int32_t want = CpuModel::argmax(ref), got = CpuModel::argmax(gpu[i]);
    if (got != want) {
      double mx = 0;
      for (float v : ref) mx = std::max(mx, double(std::fabs(v)));
      EXPECT_LE(ref[want] - ref[got], 2 * kLogitsBound * mx) << "step " << i << ": argmax outside a tie";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RaggedShapes,
    ::testing::Values(RaggedCase{Scheme::int8, 376, 64, {"down_proj"}},  // 376 bytes: not a multiple of 16
                      RaggedCase{Scheme::fp16, 372, 64, {"down_proj"}},  // 744 bytes
                      RaggedCase{Scheme::fp8, 376, 64, {"down_proj"}},   // as int8
                      // groups of 16: every int4 matrix (the fp16 lm_head keeps its kernel)
                      RaggedCase{Scheme::int4, 368, 16, {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}}),
    [](const auto& info) {
      return fmt::format("{}_i{}", to_string(info.param.scheme), info.param.intermediate);
    });

// The engine teacher-forced with a transformers golden's sequence (scripts/make_goldens.py)
// from position 0, against its float32 logits: expect_reference_logits' bound and argmax rule.
void expect_golden_logits(const WeightSource& ws, Scheme s, const std::string& golden,
                          const std::string& what) {
  const db_test::Golden g = db_test::read_golden(golden);
  const int64_t n = static_cast<int64_t>(g.tokens.size()) - 1;
  Trace hf;
  for (int64_t pos = 0; pos < n; ++pos) {
    hf.logits.emplace_back(g.at(pos), g.at(pos) + g.vocab);
    hf.tokens.push_back(g.tokens[static_cast<size_t>(pos + 1)]);
  }
  Engine t(ws, resolve_kernel("auto", s), n);
  t.set_first_position(0);
  std::vector<std::vector<float>> got;
  for (int64_t pos = 0; pos < n; ++pos) {
    t.set_inputs(pos, {g.tokens[static_cast<size_t>(pos)]});
    t.launch_graph();
    got.push_back(t.logits(0));
  }
  expect_reference_logits(got, hf, what);
}

// A checkpoint's weights read on load: on each of `kernels` the engine's logits, teacher-forced
// with the CPU reference's greedy tokens after the backends' prompt, stay within the bound of
// the reference's on the same file, with the same argmax outside a tie.
void expect_checkpoint_logits(const WeightSource& ws, std::initializer_list<const char*> kernels,
                              const std::string& label) {
  const int64_t context = 8, steps = 16;
  const Trace cpu = run_cpu(ws, context, steps);
  std::vector<int32_t> inputs = {prompt_token(context, ws.config().vocab_size)};
  inputs.insert(inputs.end(), cpu.tokens.begin(), cpu.tokens.end() - 1);
  for (const char* kernel : kernels) {
    Engine e(ws, resolve_kernel(kernel, ws.config().quant.scheme), context + steps);
    expect_reference_logits(forced_logits(e, context, inputs), cpu, fmt::format("{} {}", label, kernel));
  }
}

// GPTQ and AWQ checkpoints (tests/data/int4) converted on load: the engine's weights are the
// host's converted matrices bit for bit, and its teacher-forced logits stay within the bound
// of the CPU reference on the same file, with the same argmax outside a tie.
TEST(EngineInt4Checkpoint, GptqAndAwqFilesMatchTheCpuReference) {
  REQUIRE_GPU();
  for (const char* model : {"gptq-v1-sym", "gptq-v1-asym", "gptq-v2-asym", "awq"}) {
    const std::string d = std::string(DB_TEST_DATA) + "/int4/" + model;
    const ModelConfig c = config_for_weights(load_model_config(d), {}, d);
    ASSERT_EQ(c.quant.scheme, Scheme::int4) << model;
    const WeightSource ws(c, d, 0);
    expect_checkpoint_logits(ws, {"auto"}, model);
    // And against transformers on the dequantized weights (scripts/make_goldens.py --int4),
    // teacher-forced with its sequence: the same bound and argmax rule.
    const std::string ref = std::string(DB_TEST_DATA) + "/int4/" +
                            (c.quant.zero_point ? "dequant-asym" : "dequant-sym") + "/golden.safetensors";
    expect_golden_logits(ws, Scheme::int4, ref, std::string(model) + " vs transformers");
  }
}

// FP8 checkpoints as published (tests/data/fp8: transformers' and AutoFP8's fp8 with
// per-channel and per-tensor scales, compressed-tensors float8) read on load: on every fp8
// kernel the engine's teacher-forced logits stay within the bound of the CPU reference on the
// same file, with the same argmax outside a tie.
TEST(EngineFp8Checkpoint, PublishedFp8FilesMatchTheCpuReferenceOnEveryKernel) {
  REQUIRE_GPU();
  for (const char* model : {"fp8-channel", "ct-channel", "fp8-tensor"}) {
    const std::string d = std::string(DB_TEST_DATA) + "/fp8/" + model;
    const ModelConfig c = config_for_weights(load_model_config(d), {}, d);
    ASSERT_EQ(c.quant.scheme, Scheme::fp8) << model;
    const WeightSource ws(c, d, 0);
    expect_checkpoint_logits(ws, {"auto", "fp8.gemv", "fp8.naive", "fp8.dequant-cublas"}, model);
  }
}

// And against transformers on the dequantized weights (scripts/make_goldens.py --fp8),
// teacher-forced with its sequence: the same bound and argmax rule.
TEST(EngineFp8Checkpoint, PublishedFp8FilesGiveTransformersLogitsOnTheDequantizedWeights) {
  REQUIRE_GPU();
  for (const auto& [model, dequant] : {std::pair<const char*, const char*>{"fp8-channel", "dequant"},
                                       {"ct-channel", "dequant"},
                                       {"fp8-tensor", "dequant-tensor"}}) {
    const std::string d = std::string(DB_TEST_DATA) + "/fp8/" + model;
    const std::string ref = std::string(DB_TEST_DATA) + "/fp8/" + dequant + "/golden.safetensors";
    if (!std::filesystem::exists(ref))
      GTEST_SKIP() << ref
                   << " does not exist yet: run `python3 scripts/make_goldens.py tests/data/fp8 --fp8` "
                   << "where torch and transformers are installed";
    const WeightSource ws(config_for_weights(load_model_config(d), {}, d), d, 0);
    expect_golden_logits(ws, Scheme::fp8, ref, std::string(model) + " vs transformers");
  }
}

// transformers' goldens (scripts/make_goldens.py) on the GPU: each checkpoint loaded through
// the file path with the default scheme, fp16, generates exactly transformers' greedy tokens.
// tiny-llama-bf16's BF16 tensors go through the device-side conversion to fp16 (its values are
// exact in both, so nothing but a wrong conversion can move a token); tiny-llama-sharded's
// through the index to its shards, with the lm_head tied to the embedding.
TEST(EngineGolden, Fp16GivesTransformersTokens) {
  REQUIRE_GPU();
  for (const char* model :
       {"tiny-llama", "tiny-llama-bf16", "tiny-llama-sharded", "tiny-qwen2", "tiny-qwen3"}) {
    const std::string d = std::string(DB_TEST_DATA) + "/hf/" + model;
    const SafetensorsFile golden(d + "/golden.safetensors");
    const TensorInfo& t = golden.get("tokens");
    std::vector<int32_t> seq(static_cast<size_t>(t.elements()));
    std::memcpy(seq.data(), t.data, t.nbytes);
    const int64_t prompt = std::stoll(golden.metadata().at("prompt_length"));
    const ModelConfig c = apply_overrides(load_model_config(d));
    ASSERT_EQ(c.quant.scheme, Scheme::fp16) << model;
    const WeightSource ws(c, d, 0);
    const DType stored = std::string(model) == "tiny-llama-bf16" ? DType::bf16 : DType::f16;
    EXPECT_EQ(ws.linear(0, Linear::q).dense->dtype, stored) << model;
    EXPECT_EQ(ws.embedding().dense->dtype, stored) << model;
    const int64_t n = static_cast<int64_t>(seq.size());
    Engine e(ws, resolve_kernel("auto", Scheme::fp16), n);
    e.set_first_position(0);
    for (int64_t i = 0; i < prompt - 1; ++i) {
      e.set_inputs(i, {seq[i]});
      e.enqueue_step();
    }
    e.set_first_position(prompt - 1);
    e.set_inputs(prompt - 1, {seq[prompt - 1]});
    for (int64_t i = prompt - 1; i < n - 1; ++i) e.launch_graph();
    const std::vector<int32_t> got = e.tokens(0, n - prompt);
    EXPECT_EQ(got, std::vector<int32_t>(seq.begin() + prompt, seq.end())) << model;
  }
}

TEST(Engine, GraphAndEagerGiveIdenticalTokensAndLogits) {
  REQUIRE_GPU();
  for (const char* preset : {"tiny", "tiny-qwen2"})
    for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8}) {
      const WeightSource ws(tiny(s, preset), "", 11);
      Engine e(ws, resolve_kernel("auto", s), 100 + 24);
      const Trace eager = run_engine(e, 100, 24, false);
      const Trace graph = run_engine(e, 100, 24, true);
      EXPECT_EQ(eager.tokens, graph.tokens) << preset << " " << to_string(s);
      for (size_t i = 0; i < eager.logits.size(); ++i)
        ASSERT_EQ(eager.logits[i], graph.logits[i]) << preset << " " << to_string(s);
    }
}

TEST(Engine, RefusesWhatDoesNotFitWithBytesNeededAndFree) {
  REQUIRE_GPU();
  const ModelConfig c = apply_overrides(load_model_config("70b-fp16"));
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
