// The CUDA engine at --batch B: B sequences in lockstep, each with its own prompt and KV
// cache. Every sequence's logits stay within the single-sequence bound of the CPU reference
// at B (which computes each sequence exactly as it would alone), every sequence decodes the
// reference's tokens, graph and eager are identical, and adapters and a prefilled context
// take the same paths as at batch 1; int4 in groups of 128, int8 and fp16 (the blocks of
// fp16.gemv, every fp16 lm_head the fast GEMV runs, a tied one too) through the tiles GEMV as
// well.
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "decodebench/adapter.h"
#include "decodebench/backend.h"
#include "decodebench/cpu_reference.h"
#include "decodebench/linear_shapes.h"
#include "decodebench/safetensors.h"
#include "engine.cuh"
#include "env_guard.h"
#include "gpu_common.cuh"
#include "gpu_engine_trace.cuh"
#include "mixed_gemm.cuh"

using namespace db;
using namespace db::cuda;
using dbtest::expect_reference_logits;
using dbtest::tiny;
using dbtest::Trace;

namespace {

// Each sequence's prompt (decoder.h): sequence s's token i.
std::vector<int32_t> prompts_at(int64_t batch, int64_t i, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(batch));
  for (int64_t s = 0; s < batch; ++s) t[static_cast<size_t>(s)] = prompt_token(s, i, vocab);
  return t;
}

// The reference at B: `context` prompt tokens of every sequence, then `steps` greedy steps
// from prompt token `context`; one trace a sequence.
std::vector<Trace> cpu_batch(const WeightSource& ws, int64_t batch, int64_t context, int64_t steps) {
  const int64_t vocab = ws.config().vocab_size;
  CpuModel m(ws, context + steps, 0, batch);
  for (int64_t i = 0; i < context; ++i) m.step_batch(prompts_at(batch, i, vocab), i);
  std::vector<int32_t> in = prompts_at(batch, context, vocab);
  std::vector<Trace> t(static_cast<size_t>(batch));
  for (int64_t i = 0; i < steps; ++i) {
    m.step_batch(in, context + i);
    for (int64_t s = 0; s < batch; ++s) {
      Trace& ts = t[static_cast<size_t>(s)];
      ts.logits.push_back(m.logits(s));
      in[static_cast<size_t>(s)] = CpuModel::argmax(ts.logits.back());
      ts.tokens.push_back(in[static_cast<size_t>(s)]);
    }
  }
  return t;
}

// The engine's context: a prefill a sequence (Engine::prefill), or decode steps.
void engine_context(Engine& e, int64_t context, bool prefill) {
  const int64_t vocab = e.config().vocab_size, B = e.batch();
  e.set_first_position(0);
  if (prefill) {
    for (int64_t s = 0; s < B; ++s) {
      std::vector<int32_t> p;
      for (int64_t i = 0; i < context; ++i) p.push_back(prompt_token(s, i, vocab));
      e.prefill(p, 0, s);
    }
    return;
  }
  for (int64_t i = 0; i < context; ++i) {
    e.set_inputs(i, prompts_at(B, i, vocab));
    e.enqueue_step();
  }
}

// Free-running: `steps` greedy steps from `context` (graph replays or eager steps); one trace
// a sequence, with the tokens the engine recorded.
std::vector<Trace> engine_batch(Engine& e, int64_t context, int64_t steps, bool graph, bool prefill = false) {
  const int64_t vocab = e.config().vocab_size, B = e.batch();
  engine_context(e, context, prefill);
  e.set_first_position(context);
  e.set_inputs(context, prompts_at(B, context, vocab));
  std::vector<Trace> t(static_cast<size_t>(B));
  for (int64_t i = 0; i < steps; ++i) {
    if (graph)
      e.launch_graph();
    else
      e.enqueue_step();
    for (int64_t s = 0; s < B; ++s) t[static_cast<size_t>(s)].logits.push_back(e.logits(s));
  }
  for (int64_t s = 0; s < B; ++s) t[static_cast<size_t>(s)].tokens = e.tokens(s, steps);
  return t;
}

// Teacher-forced with each sequence's reference tokens, so each step compares the same
// computation: the logits of every step and sequence, [sequence][step].
std::vector<std::vector<std::vector<float>>> forced_batch(Engine& e, int64_t context,
                                                          const std::vector<Trace>& cpu, bool prefill) {
  const int64_t vocab = e.config().vocab_size, B = e.batch();
  engine_context(e, context, prefill);
  e.set_first_position(context);
  std::vector<int32_t> in = prompts_at(B, context, vocab);
  std::vector<std::vector<std::vector<float>>> out(static_cast<size_t>(B));
  for (size_t i = 0; i < cpu[0].tokens.size(); ++i) {
    e.set_inputs(context + static_cast<int64_t>(i), in);
    e.launch_graph();
    for (int64_t s = 0; s < B; ++s) {
      out[static_cast<size_t>(s)].push_back(e.logits(s));
      in[static_cast<size_t>(s)] = cpu[static_cast<size_t>(s)].tokens[i];
    }
  }
  return out;
}

struct BatchCase {
  Scheme scheme;
  const char* kernel;
  int64_t batch;
  int64_t dequant_chunk_bytes = 0;  // the engine's blocks of fp16 copies; 0: the default
  int group = 0;                    // int4's group size; 0: the preset's (64)
};

// The tiny preset in `s`, int4 in groups of `group` (0: the preset's 64); 128 is the smallest
// the tiles layout holds, so its batched step runs the tiles GEMV from 2 to 16 sequences.
ModelConfig tiny_grouped(Scheme s, int group) {
  ModelConfig c = tiny(s);
  if (group > 0) c.quant.group_size = group;
  return c;
}

// Whether the plan runs every block linear on the tiles GEMV (unless the scheme's tiles are off,
// tiles_enabled).
void expect_tiles_paths(const Engine& e, bool tiles, const std::string& what, Scheme s = Scheme::int4) {
  for (MatrixKind k : {MatrixKind::qkv, MatrixKind::o, MatrixKind::gate_up, MatrixKind::down})
    EXPECT_EQ(e.linear_plan()[k].batched == BatchedPath::tiles_gemv, tiles && tiles_enabled(s))
        << what << " " << to_string(k) << ": " << to_string(e.linear_plan()[k].batched);
}

// Whether the plan runs the fp16 lm_head on the tiles GEMV: where the fast GEMV runs it (every
// kernel's but fp16.cublas's), from 2 to 16 sequences, unless fp16's tiles are off.
void expect_head_path(const Engine& e, const std::string& what) {
  const LinearChoice& head = e.linear_plan()[MatrixKind::lm_head];
  const int64_t b = e.batch();
  EXPECT_EQ(head.batched == BatchedPath::tiles_gemv, head.impl == LinearImpl::gemv_fast && b >= 2 &&
                                                         b <= kTilesGemvMaxBatch &&
                                                         tiles_enabled(Scheme::fp16))
      << what << " lm_head: " << to_string(head.batched);
}

// Blocks of fp16 copies that cut the tiny model's matrices into several: 24 rows of 128 inputs,
// 8 of 256 (fp16_chunk_rows).
constexpr int64_t kSmallDequantChunk = 24 * 128 * 2;

class EngineBatch : public ::testing::TestWithParam<BatchCase> {};

// Every kernel at every batch (and the gemv kernels past 64 sequences): each sequence within the
// single-sequence bound of the reference, the same argmax outside a tie.
TEST_P(EngineBatch, EverySequenceWithinTheBoundAndSameArgmax) {
  REQUIRE_GPU();
  const BatchCase p = GetParam();
  const WeightSource ws(tiny_grouped(p.scheme, p.group), "", 5);
  const int64_t context = 5, steps = 4;
  const std::vector<Trace> cpu = cpu_batch(ws, p.batch, context, steps);
  const KernelInfo k = resolve_kernel(p.kernel, p.scheme);
  Engine e(load_device_weights(ws, k, context + steps, false, p.batch), k, context + steps, false, p.batch,
           std::nullopt, p.dequant_chunk_bytes);
  ASSERT_EQ(e.batch(), p.batch);
  // int4 in groups of 128, int8 and fp16 (the tiny model's matrices are whole steps of 64
  // columns): the fast kernel's block linears on the tiles GEMV from 2 (fp16 3) to 16 sequences;
  // the fp16 lm_head from 2 wherever the fast GEMV runs it.
  if (p.group == 128 || p.scheme == Scheme::int8 || p.scheme == Scheme::fp16)
    expect_tiles_paths(e,
                       k.impl == LinearImpl::gemv_fast && p.batch >= tiles_gemv_min_batch(p.scheme, false) &&
                           p.batch <= kTilesGemvMaxBatch,
                       fmt::format("{} batch {}", p.kernel, p.batch), p.scheme);
  expect_head_path(e, fmt::format("{} batch {}", p.kernel, p.batch));
  const auto gpu = forced_batch(e, context, cpu, false);
  for (int64_t s = 0; s < p.batch; ++s)
    expect_reference_logits(gpu[static_cast<size_t>(s)], cpu[static_cast<size_t>(s)],
                            fmt::format("{} batch {} sequence {}", p.kernel, p.batch, s));
}

std::vector<BatchCase> every_kernel_and_batch() {
  std::vector<BatchCase> v;
  const std::pair<Scheme, const char*> kernels[] = {
      {Scheme::fp16, "fp16.gemv"},  {Scheme::fp16, "fp16.cublas"},         {Scheme::int8, "int8.gemv"},
      {Scheme::int8, "int8.naive"}, {Scheme::int8, "int8.dequant-cublas"}, {Scheme::int4, "int4.gemv"},
      {Scheme::int4, "int4.naive"}, {Scheme::int4, "int4.dequant-cublas"}, {Scheme::fp8, "fp8.gemv"},
      {Scheme::fp8, "fp8.naive"},   {Scheme::fp8, "fp8.dequant-cublas"}};
  for (const auto& [scheme, kernel] : kernels)
    for (int64_t b : {1, 2, 3, 8, 17, 64}) v.push_back({scheme, kernel, b});
  // The gemv kernels run the columns GEMV up to 8 sequences (the plan's BatchedPath; int8's the
  // tiles GEMV from 2 to 16, fp16's blocks from 3): its instances of 2, 4 and 8 at 2, 3 and 8
  // above, and 8 with three sequences masked here.
  for (const auto& [scheme, kernel] :
       {std::pair{Scheme::fp16, "fp16.gemv"}, std::pair{Scheme::int8, "int8.gemv"},
        std::pair{Scheme::int4, "int4.gemv"}, std::pair{Scheme::fp8, "fp8.gemv"}})
    v.push_back({scheme, kernel, 5});
  // The fast kernels at 16 sequences (the skinny GEMM, int8's and fp16's tiles GEMV with two
  // sequence tiles) and at 256 (the fp16 copies and cuBLAS): the batches the byte law is measured
  // at.
  for (const auto& [scheme, kernel] :
       {std::pair{Scheme::fp16, "fp16.gemv"}, std::pair{Scheme::int8, "int8.gemv"},
        std::pair{Scheme::int4, "int4.gemv"}, std::pair{Scheme::fp8, "fp8.gemv"}})
    for (int64_t b : {16, 256}) v.push_back({scheme, kernel, b});
  // Past one skinny launch: int8, fp8 and int4 gemv run cuBLAS on an fp16 copy (the plan's
  // BatchedPath; on compute capability 9.0 int8 and int4 run the mixed-input GEMM to 128
  // sequences, so past that too).
  // Their copies are made a block of rows at a time (gemm_rows_dequant); the tiny model's
  // matrices fit one default block, so again in blocks of 24 rows of 128 inputs (8 of 256):
  // every matrix in several, each with a short last block but the down projection.
  for (const auto& [scheme, kernel] :
       {std::pair{Scheme::int8, "int8.gemv"}, std::pair{Scheme::int4, "int4.gemv"},
        std::pair{Scheme::fp8, "fp8.gemv"}})
    for (int64_t b : {kSkinnyMaxBatch + 1, kMixedGemmMaxBatch + 1}) {
      v.push_back({scheme, kernel, b});
      v.push_back({scheme, kernel, b, kSmallDequantChunk});
    }
  // The mixed-input GEMM's range (on compute capability 9.0; elsewhere the skinny GEMM and the
  // fp16 copy): 17 and 64 above, its end at 128; int4 in groups of 128 (17 below) too.
  for (const auto& [scheme, kernel] :
       {std::pair{Scheme::int8, "int8.gemv"}, std::pair{Scheme::int4, "int4.gemv"}})
    v.push_back({scheme, kernel, kMixedGemmMaxBatch});
  for (int64_t b : {int64_t{64}, kMixedGemmMaxBatch}) v.push_back({Scheme::int4, "int4.gemv", b, 0, 128});
  // int4 in groups of 128, which the tiles layout holds: the fast kernel's block linears run the
  // tiles GEMV from 2 to 16 sequences (one sequence tile, masked at 2 and 3; two at 16), the
  // skinny GEMM past it; the naive kernel as before.
  for (const char* kernel : {"int4.gemv", "auto"})
    for (int64_t b : {2, 3, 8, 16, 17}) v.push_back({Scheme::int4, kernel, b, 0, 128});
  v.push_back({Scheme::int4, "int4.naive", 8, 0, 128});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Kernels, EngineBatch, ::testing::ValuesIn(every_kernel_and_batch()),
                         [](const auto& info) {
                           std::string n = fmt::format("{}_b{}", info.param.kernel, info.param.batch);
                           if (info.param.dequant_chunk_bytes > 0)
                             n += fmt::format("_chunk{}", info.param.dequant_chunk_bytes);
                           if (info.param.group > 0) n += fmt::format("_g{}", info.param.group);
                           for (char& ch : n)
                             if (ch == '.' || ch == '-') ch = '_';
                           return n;
                         });

// Free-running greedy decoding with the kernels --kernel auto picks: every sequence of the
// batch decodes the reference's tokens, which are what that sequence decodes alone.
TEST(EngineBatchTokens, EverySequenceDecodesTheReferenceTokens) {
  REQUIRE_GPU();
  for (const char* preset : {"tiny", "tiny-qwen2"})
    for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8})
      for (int64_t batch : {3, 17}) {
        const WeightSource ws(tiny(s, preset), "", 5);
        const int64_t context = 5, steps = 16;
        const std::vector<Trace> cpu = cpu_batch(ws, batch, context, steps);
        Engine e(ws, resolve_kernel("auto", s), context + steps, false, batch);
        const std::vector<Trace> gpu = engine_batch(e, context, steps, true);
        for (int64_t q = 0; q < batch; ++q)
          EXPECT_EQ(gpu[static_cast<size_t>(q)].tokens, cpu[static_cast<size_t>(q)].tokens)
              << preset << " " << to_string(s) << " batch " << batch << " sequence " << q;
      }
}

// Free-running tokens of one sequence in a batch against the same sequence run alone, both
// with their logits a step: the same tokens, except that they may part at a tie (expect_tie,
// on the alone run's logits; these tiny checkpoints meet near ties on random prompts, and the
// batch runs other kernels than batch 1: the columns GEMV at 3 sequences). Up to there the logits agree
// within the bound; after it the two sequences have different inputs and nothing more is
// compared.
void expect_tokens_as_alone(const Trace& batch, const Trace& alone, const std::string& what) {
  ASSERT_EQ(batch.tokens.size(), alone.tokens.size()) << what;
  for (size_t i = 0; i < alone.tokens.size(); ++i) {
    ASSERT_LE(db_test::max_rel_err(batch.logits[i], alone.logits[i]), dbtest::kLogitsBound)
        << what << " step " << i;
    const int32_t want = alone.tokens[i], got = batch.tokens[i];
    if (got == want) continue;
    dbtest::expect_tie(alone.logits[i], want, got, fmt::format("{} step {}: token", what, i));
    return;
  }
}

// transformers' goldens at batch 3, free-running by graph replays: sequence 0 fed the golden's
// prompt decodes the golden's tokens, and the other two (the backends' prompts of sequences 1
// and 2) decode what each decodes run alone on the GPU (expect_tokens_as_alone); then,
// teacher-forced with the reference's tokens from the same cache, every sequence gives the
// reference's logits within the bound and its argmax outside a tie.
TEST(EngineBatchTokens, GoldensAtBatchThree) {
  REQUIRE_GPU();
  constexpr int64_t B = 3;
  for (const char* model :
       {"tiny-llama", "tiny-llama-bf16", "tiny-llama-sharded", "tiny-qwen2", "tiny-qwen3"}) {
    const std::string d = std::string(DB_TEST_DATA) + "/hf/" + model;
    const db_test::Golden golden = db_test::read_golden(d + "/golden.safetensors");
    const std::vector<int32_t>& seq = golden.tokens;
    const int64_t prompt = golden.prompt, n = static_cast<int64_t>(seq.size());
    const ModelConfig c = apply_overrides(load_model_config(d));
    const WeightSource ws(c, d, 0);
    // Sequence 0 reads the golden, the others the backends' prompts.
    auto input = [&](int64_t s, int64_t i) { return s == 0 ? seq[i] : prompt_token(s, i, c.vocab_size); };
    auto inputs = [&](int64_t i) {
      std::vector<int32_t> v;
      for (int64_t s = 0; s < B; ++s) v.push_back(input(s, i));
      return v;
    };
    CpuModel cpu(ws, n, 0, B);
    Engine e(ws, resolve_kernel("auto", Scheme::fp16), n, false, B);
    e.set_first_position(0);
    for (int64_t i = 0; i < prompt - 1; ++i) {
      cpu.step_batch(inputs(i), i);
      e.set_inputs(i, inputs(i));
      e.enqueue_step();
    }
    // Free-running: sequence 0 against transformers, 1 and 2 against themselves alone.
    e.set_first_position(prompt - 1);
    e.set_inputs(prompt - 1, inputs(prompt - 1));
    std::vector<Trace> batch(B);
    for (int64_t i = prompt - 1; i < n - 1; ++i) {
      e.launch_graph();
      for (int64_t s = 1; s < B; ++s) batch[s].logits.push_back(e.logits(s));
    }
    EXPECT_EQ(e.tokens(0, n - prompt), std::vector<int32_t>(seq.begin() + prompt, seq.end())) << model;
    Engine alone(ws, resolve_kernel("auto", Scheme::fp16), n, false, 1);
    for (int64_t s = 1; s < B; ++s) {
      batch[s].tokens = e.tokens(s, n - prompt);
      alone.set_first_position(0);
      for (int64_t i = 0; i < prompt - 1; ++i) {
        alone.set_inputs(i, {input(s, i)});
        alone.enqueue_step();
      }
      alone.set_first_position(prompt - 1);
      alone.set_inputs(prompt - 1, {input(s, prompt - 1)});
      Trace a;
      for (int64_t i = prompt - 1; i < n - 1; ++i) {
        alone.launch_graph();
        a.logits.push_back(alone.logits(0));
        a.tokens.push_back(alone.next_tokens()[0]);
      }
      expect_tokens_as_alone(batch[s], a, fmt::format("{} sequence {}", model, s));
    }
    // Teacher-forced from the same cache: every sequence against the reference.
    std::vector<std::vector<std::vector<float>>> gpu(B);
    std::vector<Trace> ref(B);
    std::vector<int32_t> in = inputs(prompt - 1);
    for (int64_t i = prompt - 1; i < n - 1; ++i) {
      e.set_inputs(i, in);
      e.enqueue_step();
      cpu.step_batch(in, i);
      for (int64_t s = 0; s < B; ++s) {
        gpu[s].push_back(e.logits(s));
        ref[s].logits.push_back(cpu.logits(s));
        in[s] = CpuModel::argmax(ref[s].logits.back());
      }
    }
    for (int64_t s = 0; s < B; ++s)
      expect_reference_logits(gpu[s], ref[s], fmt::format("{} sequence {}", model, s));
  }
}

// The graph is captured from the eager step's launches: the same tokens and the same logits
// bit for bit, at batch 3 and 17.
TEST(EngineBatchGraph, GraphAndEagerGiveIdenticalTokensAndLogits) {
  REQUIRE_GPU();
  for (const char* preset : {"tiny", "tiny-qwen2"})
    for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8})
      for (int64_t batch : {3, 17}) {
        const WeightSource ws(tiny(s, preset), "", 11);
        Engine e(ws, resolve_kernel("auto", s), 20 + 12, false, batch);
        const std::vector<Trace> eager = engine_batch(e, 20, 12, false);
        const std::vector<Trace> graph = engine_batch(e, 20, 12, true);
        for (int64_t q = 0; q < batch; ++q) {
          const std::string what = fmt::format("{} {} batch {} sequence {}", preset, to_string(s), batch, q);
          EXPECT_EQ(eager[q].tokens, graph[q].tokens) << what;
          for (size_t i = 0; i < eager[q].logits.size(); ++i)
            ASSERT_EQ(eager[q].logits[i], graph[q].logits[i]) << what;
        }
      }
}

// An external adapter (the shrink a GEMM over the batch, the expand a row each) and a merged
// one (in the weights) at batch 3, against the reference with the same adapter.
TEST(EngineBatchLora, ExternalAndMergedAdaptersMatchTheReference) {
  REQUIRE_GPU();
  constexpr int64_t B = 3;
  for (AdapterMode mode : {AdapterMode::external, AdapterMode::merged})
    for (const auto& [scheme, kernel] :
         {std::pair{Scheme::fp16, "fp16.gemv"}, std::pair{Scheme::fp16, "fp16.cublas"},
          std::pair{Scheme::int8, "int8.naive"}, std::pair{Scheme::int4, "int4.gemv"},
          std::pair{Scheme::int4, "int4.dequant-cublas"}}) {
      const ModelConfig c = tiny(scheme);
      const Adapter a = load_adapter("synthetic:rank=8", c, 5, mode);
      const WeightSource ws(c, "", 5, &a);
      const int64_t context = 5, steps = 6;
      const std::vector<Trace> cpu = cpu_batch(ws, B, context, steps);
      Engine e(ws, resolve_kernel(kernel, scheme), context + steps, false, B);
      const auto gpu = forced_batch(e, context, cpu, false);
      for (int64_t s = 0; s < B; ++s)
        expect_reference_logits(gpu[s], cpu[s],
                                fmt::format("{} {} adapter, sequence {}", kernel,
                                            mode == AdapterMode::external ? "external" : "merged", s));
    }
}

// --context at batch 3: each sequence's prompt prefilled into its own cache (Engine::prefill
// with the sequence), then the batched steps: within the bound of the reference, and the
// reference's tokens with the kernels --kernel auto picks.
TEST(EngineBatchPrefill, EverySequencesContextPrefilledIntoItsOwnCache) {
  REQUIRE_GPU();
  constexpr int64_t B = 3;
  for (const char* preset : {"tiny", "tiny-qwen2"})
    for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4}) {
      const WeightSource ws(tiny(s, preset), "", 7);
      const int64_t context = 150, steps = 8;  // past one attention split
      const std::vector<Trace> cpu = cpu_batch(ws, B, context, steps);
      Engine e(ws, resolve_kernel("auto", s), context + steps, false, B);
      const auto forced = forced_batch(e, context, cpu, true);
      for (int64_t q = 0; q < B; ++q)
        expect_reference_logits(forced[q], cpu[q], fmt::format("{} {} sequence {}", preset, to_string(s), q));
      Engine f(ws, resolve_kernel("auto", s), context + steps, false, B);
      const std::vector<Trace> gpu = engine_batch(f, context, steps, true, true);
      for (int64_t q = 0; q < B; ++q)
        EXPECT_EQ(gpu[q].tokens, cpu[q].tokens) << preset << " " << to_string(s) << " sequence " << q;
    }
}

// The property a mixed-input GEMM engine must have, whatever the batch: every sequence's
// teacher-forced logits within the bound of the reference (expect_reference_logits: the same
// argmax outside a tie; the GPU's weights are fp16((q - z) s), the reference's unrounded, so
// the tiny checkpoints' near ties may part), and free-running greedy decoding that gives the same
// tokens and logits by graph replay and eagerly (the same launches).
void expect_mixed_engine(const WeightSource& ws, const KernelInfo& k, int64_t B, int64_t context,
                         int64_t steps, bool prefill, bool mixed, const std::string& n) {
  const std::vector<Trace> cpu = cpu_batch(ws, B, context, steps);
  Engine e(load_device_weights(ws, k, context + steps, false, B), k, context + steps, false, B);
  for (const LinearChoice& l : e.linear_plan().linears)
    if (l.shape.scheme == ws.config().quant.scheme) {
      ASSERT_EQ(l.batched == BatchedPath::mixed_gemm, mixed) << n << " " << to_string(l.kind);
      ASSERT_EQ(l.layout == MatrixLayout::mixed_wgmma, mixed) << n << " " << to_string(l.kind);
    }
  const auto gpu = forced_batch(e, context, cpu, prefill);
  for (int64_t q = 0; q < B; ++q)
    expect_reference_logits(gpu[static_cast<size_t>(q)], cpu[static_cast<size_t>(q)],
                            fmt::format("{} sequence {}", n, q));
  const std::vector<Trace> graph = engine_batch(e, context, steps, true, prefill);
  const std::vector<Trace> eager = engine_batch(e, context, steps, false, prefill);
  for (int64_t q = 0; q < B; ++q) {
    EXPECT_EQ(eager[static_cast<size_t>(q)].tokens, graph[static_cast<size_t>(q)].tokens) << n << " " << q;
    EXPECT_EQ(eager[static_cast<size_t>(q)].logits, graph[static_cast<size_t>(q)].logits) << n << " " << q;
  }
}

// From 17 to 128 sequences on compute capability 9.0 (where the build has the sm_90a code)
// int8.gemv and int4.gemv run the mixed-input GEMM on weights in its layout: at 17, 64, 65 and
// 128 sequences (each end of the range and the skinny GEMM's end), int4 in groups of 64 and 128,
// from decode steps and from a prefilled context (the prefill's fp16 copies read the mixed
// layout), graph and eager (expect_mixed_engine); and DECODEBENCH_MIXED_GEMM=off gives the
// skinny GEMM (64) and the fp16 copy (65) on weights in batch 1's layout, read at every plan.
TEST(EngineBatchMixed, TheMixedGemmStepsMatchTheReference) {
  REQUIRE_ARCH_CODE(90, mixed_gemm_built(), "the mixed-input GEMM");
  for (Scheme s : {Scheme::int8, Scheme::int4})
    for (int group : {0, 128}) {
      if (s == Scheme::int8 && group > 0) continue;
      const WeightSource ws(tiny_grouped(s, group), "", 11);
      const KernelInfo k = resolve_kernel(fmt::format("{}.gemv", to_string(s)), s);
      for (int64_t B : {int64_t{17}, int64_t{64}, int64_t{65}, int64_t{128}})
        for (bool prefill : {false, true}) {
          if (prefill && B != 17 && B != 128) continue;  // the prefilled cases keep the reference short
          const std::string n =
              fmt::format("{}{} batch {}{}", to_string(s), group ? fmt::format(" g{}", group) : "", B,
                          prefill ? " prefilled" : "");
          expect_mixed_engine(ws, k, B, prefill ? 40 : 5, 3, prefill, true, n);
        }
    }
  const dbtest::EnvGuard off("DECODEBENCH_MIXED_GEMM", "off");
  for (Scheme s : {Scheme::int8, Scheme::int4}) {
    const WeightSource ws(tiny(s), "", 11);
    const KernelInfo k = resolve_kernel(fmt::format("{}.gemv", to_string(s)), s);
    for (int64_t B : {int64_t{64}, int64_t{65}}) {
      const LinearPlan p = device_plan(ws.config(), k, B, false);
      EXPECT_EQ(p[MatrixKind::gate_up].batched,
                B <= kSkinnyMaxBatch ? BatchedPath::skinny_gemm : BatchedPath::fp16_copy_cublas);
      EXPECT_EQ(p.weight_layout(), device_plan(ws.config(), k, 1, false).weight_layout());
      expect_mixed_engine(ws, k, B, 5, 3, false, false, fmt::format("{} batch {} off", to_string(s), B));
    }
  }
}

// Past the columns GEMV's crossover, each kind of matrix the skinny GEMM runs gets a shape timed
// at load, one line each, and the tiles GEMV's too (the fp16 lm_head's up to 16 sequences); a
// second engine of the process reuses the first's choices (the same shapes, so the same bits);
// batch 1, the columns GEMV (up to its crossover) and fp16's cuBLAS (past 16) time nothing. The
// mixed-input GEMM, which int8 would run at 17 sequences on compute capability 9.0, is off here
// (it has no shapes to time).
TEST(EngineBatchShapes, EachSkinnyMatrixKindGetsOneShapeAProcess) {
  REQUIRE_GPU();
  const dbtest::EnvGuard no_mixed("DECODEBENCH_MIXED_GEMM", "off");
  for (Scheme s : {Scheme::int8, Scheme::int4}) {
    // int8 runs the tiles GEMV up to 16 sequences (tiny-int4's groups of 64 the tiles do not hold).
    const int64_t past =
        s == Scheme::int8 && tiles_enabled(s) ? kTilesGemvMaxBatch + 1 : gemv_columns_crossover(s) + 1;
    const WeightSource ws(tiny(s), "", 3);
    const KernelInfo k = resolve_kernel("auto", s);
    Engine e(ws, k, 16, false, past);
    const std::vector<std::string> lines = e.skinny_shapes();
    ASSERT_GE(lines.size(), 4u) << to_string(s);  // and the lm_head's where it is quantized
    ASSERT_LE(lines.size(), 5u) << to_string(s);
    const char* kinds[] = {"qkv [", "o_proj [", "gate_up [", "down_proj [", "lm_head ["};
    for (size_t i = 0; i < lines.size(); ++i) {
      EXPECT_EQ(lines[i].rfind(kinds[i], 0), 0u) << lines[i];
      // The fp16 lm_head at int4's 3 sequences runs the tiles GEMV.
      const bool tiles_head =
          i == 4 && e.linear_plan()[MatrixKind::lm_head].batched == BatchedPath::tiles_gemv;
      EXPECT_NE(lines[i].find(tiles_head ? "(default rt" : "(default m"), std::string::npos) << lines[i];
    }
    Engine f(ws, k, 16, false, past);
    EXPECT_EQ(f.skinny_shapes(), lines) << to_string(s);
    for (int64_t batch : {int64_t{1}, gemv_columns_crossover(s)}) {
      Engine g(ws, k, 16, false, batch);
      // At 2 int8's block linears and the fp16 lm_head run the tiles GEMV, whose shapes are timed
      // too; int4's blocks (groups of 64) the columns GEMV, which times nothing.
      for (const std::string& line : g.skinny_shapes())
        EXPECT_NE(line.find("(default rt"), std::string::npos) << line;
      const size_t tiled = batch == 1 ? 0
                                      : (s == Scheme::int8 && tiles_enabled(s) ? 4 : 0) +
                                            (tiles_enabled(Scheme::fp16) ? 1 : 0);
      EXPECT_EQ(g.skinny_shapes().size(), tiled) << to_string(s) << " batch " << batch;
    }
  }
  const WeightSource ws(tiny(Scheme::fp16), "", 3);
  const KernelInfo& k = resolve_kernel("auto", Scheme::fp16);
  Engine e(ws, k, 16, false, kTilesGemvMaxBatch + 1);  // cuBLAS
  EXPECT_TRUE(e.skinny_shapes().empty());
  Engine t(ws, k, 16, false, gemv_columns_crossover(Scheme::fp16) + 1);  // the tiles GEMV, every kind
  EXPECT_EQ(t.skinny_shapes().size(), tiles_enabled(Scheme::fp16) ? 5u : 0u);
  for (const std::string& line : t.skinny_shapes())
    EXPECT_NE(line.find("(default rt"), std::string::npos) << line;
}

// The memory plan counts the batch: the KV cache B-fold, and an engine of B sequences holds
// what plan() says; past the skinny GEMM, with the fp16 copies' blocks at its own block size.
TEST(EngineBatchMemory, ThePlanCountsEverySequencesCache) {
  REQUIRE_GPU();
  const WeightSource ws(tiny(Scheme::int4), "", 3);
  const KernelInfo k = resolve_kernel("auto", Scheme::int4);
  const MemoryUse one = Engine::plan(ws.config(), k, 40, 0), eight = Engine::plan(ws.config(), k, 40, 0, 8);
  EXPECT_EQ(eight.kv_cache_bytes, 8 * one.kv_cache_bytes);
  EXPECT_GT(eight.scratch_bytes, one.scratch_bytes);
  Engine e(ws, k, 40, false, 8);
  EXPECT_EQ(e.memory().kv_cache_bytes, eight.kv_cache_bytes);
  EXPECT_EQ(e.memory().scratch_bytes, eight.scratch_bytes);
  // The mixed-input GEMM's workspace (compute capability 9.0) or the skinny GEMM's and the fp16
  // copies' scratch: the engine counts what the device's plan gives, at each batch of its range.
  for (int64_t B : {kMixedGemmMinBatch, kSkinnyMaxBatch, kSkinnyMaxBatch + 1, kMixedGemmMaxBatch}) {
    Engine m(load_device_weights(ws, k, 40, false, B), k, 40, false, B);
    EXPECT_EQ(m.memory().scratch_bytes, Engine::plan(ws.config(), k, 40, 0, B).scratch_bytes) << B;
    EXPECT_EQ(m.linear_plan()[MatrixKind::gate_up].batched,
              device_plan(ws.config(), k, B, false)[MatrixKind::gate_up].batched)
        << B;
  }
  // Past the skinny GEMM and the mixed-input GEMM the fp16 copies are scratch: two blocks at the
  // engine's own block size. The block arithmetic is the device's plan's (device_plan: on
  // compute capability 9.0 with the mixed-input GEMM, whose matrices need no copy).
  const int64_t past = kMixedGemmMaxBatch + 1;
  LinearPlan p = device_plan(ws.config(), k, past, false);
  p.dequant_chunk_bytes = Engine::dequant_chunk_bytes();
  const int64_t blocks = p.fp16_copy_elements();
  p.dequant_chunk_bytes = kSmallDequantChunk;
  const int64_t small = p.fp16_copy_elements();
  EXPECT_EQ(small, 2 * 24 * 128);  // two blocks of 24 rows of 128 inputs
  EXPECT_LT(small, blocks);
  Engine f(load_device_weights(ws, k, 40, false, past), k, 40, false, past, std::nullopt, kSmallDequantChunk);
  EXPECT_EQ(f.memory().scratch_bytes,
            Engine::plan(ws.config(), k, 40, 0, past).scratch_bytes - 2 * (blocks - small));
}

// The tiles GEMV in the whole engine, past what EngineBatch runs: each sequence's context
// prefilled through the fp16 copies of the tiles, in blocks of rows that start inside a tile
// (24 rows of 128 inputs: rows 24, 48, ...), then the batched steps against the reference;
// graph and eager give the same bits; and DECODEBENCH_INT4_TILES=off gives the paths before it
// (the skinny GEMM at 8 sequences) on weights in the rows GEMV's layout.
TEST(EngineBatchTiles, PrefilledContextGraphAndEagerAndTheVariable) {
  REQUIRE_GPU();
  const WeightSource ws(tiny_grouped(Scheme::int4, 128), "", 7);
  const KernelInfo k = resolve_kernel("auto", Scheme::int4);
  {
    constexpr int64_t B = 3, context = 150, steps = 8;  // past one attention split
    const std::vector<Trace> cpu = cpu_batch(ws, B, context, steps);
    Engine e(load_device_weights(ws, k, context + steps, false, B), k, context + steps, false, B,
             std::nullopt, kSmallDequantChunk);
    expect_tiles_paths(e, true, "prefill batch 3");
    const auto forced = forced_batch(e, context, cpu, true);
    for (int64_t q = 0; q < B; ++q)
      expect_reference_logits(forced[q], cpu[q], fmt::format("tiles, prefilled, sequence {}", q));
  }
  {
    constexpr int64_t B = 8;
    Engine e(ws, k, 20 + 12, false, B);
    expect_tiles_paths(e, true, "graph batch 8");
    // Each kind on the tiles GEMV was timed at load (tune_tiles), its shape in the result's lines.
    for (MatrixKind m : {MatrixKind::qkv, MatrixKind::o, MatrixKind::gate_up, MatrixKind::down})
      EXPECT_TRUE(e.linear_plan()[m].tiles.has_value()) << to_string(m);
    EXPECT_GE(e.skinny_shapes().size(), 4u);
    const std::vector<Trace> eager = engine_batch(e, 20, 12, false);
    const std::vector<Trace> graph = engine_batch(e, 20, 12, true);
    for (int64_t q = 0; q < B; ++q) {
      EXPECT_EQ(eager[q].tokens, graph[q].tokens) << "sequence " << q;
      for (size_t i = 0; i < eager[q].logits.size(); ++i)
        ASSERT_EQ(eager[q].logits[i], graph[q].logits[i]) << q;
    }
  }
  const dbtest::EnvGuard off("DECODEBENCH_INT4_TILES", "off");
  const dbtest::EnvGuard fp16_off("DECODEBENCH_FP16_TILES", "off");  // the fp16 lm_head's own switch
  Engine e(ws, k, 16, false, 8);
  expect_tiles_paths(e, false, "off, batch 8");
  EXPECT_EQ(e.linear_plan()[MatrixKind::gate_up].batched, BatchedPath::skinny_gemm);
  EXPECT_EQ(e.linear_plan().weight_layout(), weight_layout(ws.config(), k, 1));
}

// The int8 tiles in the whole engine: each sequence's context prefilled through the fp16 copies
// of the int8 tiles in blocks of rows that start inside a tile, then the batched steps against
// the reference; DECODEBENCH_INT8_TILES=off gives the paths before it (the skinny GEMM at 8
// sequences) on the canonical weights.
TEST(EngineBatchTiles, Int8PrefilledContextAndTheVariable) {
  REQUIRE_GPU();
  const WeightSource ws(tiny(Scheme::int8), "", 7);
  const KernelInfo k = resolve_kernel("auto", Scheme::int8);
  {
    constexpr int64_t B = 3, context = 150, steps = 8;
    const std::vector<Trace> cpu = cpu_batch(ws, B, context, steps);
    Engine e(load_device_weights(ws, k, context + steps, false, B), k, context + steps, false, B,
             std::nullopt, kSmallDequantChunk);
    expect_tiles_paths(e, true, "int8 prefill batch 3", Scheme::int8);
    const auto forced = forced_batch(e, context, cpu, true);
    for (int64_t q = 0; q < B; ++q)
      expect_reference_logits(forced[q], cpu[q], fmt::format("int8 tiles, prefilled, sequence {}", q));
  }
  const dbtest::EnvGuard off("DECODEBENCH_INT8_TILES", "off");
  const dbtest::EnvGuard fp16_off("DECODEBENCH_FP16_TILES", "off");  // the fp16 lm_head's own switch
  Engine e(ws, k, 16, false, 8);
  expect_tiles_paths(e, false, "int8 off, batch 8", Scheme::int8);
  EXPECT_EQ(e.linear_plan()[MatrixKind::gate_up].batched, BatchedPath::skinny_gemm);
  EXPECT_EQ(e.linear_plan().weight_layout(), weight_layout(ws.config(), k, 1));
}

// The fp16 tiles in the whole engine, on the tiny model with its lm_head tied to the embedding
// (as 1b's): the embedding then lies in the fp16 tiles, which the gather reads; each sequence's
// context prefilled through the fp16 copies of the tiles in blocks of rows that start inside a
// tile, then the batched steps against the reference; graph and eager give the same bits; and
// DECODEBENCH_FP16_TILES=off gives the paths before it (cuBLAS at 8 sequences) on the canonical
// weights. The int4 model's fp16 lm_head (untied) on the tiles GEMV is EngineBatch's.
TEST(EngineBatchTiles, Fp16TiedHeadPrefilledContextGraphAndEagerAndTheVariable) {
  REQUIRE_GPU();
  ModelConfig c = tiny(Scheme::fp16);
  c.tie_word_embeddings = true;
  c.name += " (tied)";
  validate(c, c.name);
  ASSERT_TRUE(lm_head_tied(c));
  const WeightSource ws(c, "", 7);
  const KernelInfo k = resolve_kernel("auto", Scheme::fp16);
  {
    constexpr int64_t B = 3, context = 150, steps = 8;
    const std::vector<Trace> cpu = cpu_batch(ws, B, context, steps);
    const auto w = load_device_weights(ws, k, context + steps, false, B);
    EXPECT_TRUE(w->embedding().fp16_tiles);
    EXPECT_TRUE(w->lm_head().fp16_tiles);
    Engine e(w, k, context + steps, false, B, std::nullopt, kSmallDequantChunk);
    expect_tiles_paths(e, true, "fp16 prefill batch 3", Scheme::fp16);
    expect_head_path(e, "fp16 prefill batch 3");
    const auto forced = forced_batch(e, context, cpu, true);
    for (int64_t q = 0; q < B; ++q)
      expect_reference_logits(forced[q], cpu[q], fmt::format("fp16 tiles, prefilled, sequence {}", q));
  }
  {
    constexpr int64_t B = 8;
    Engine e(ws, k, 20 + 12, false, B);
    expect_tiles_paths(e, true, "fp16 graph batch 8", Scheme::fp16);
    for (MatrixKind m : kAllMatrixKinds) EXPECT_TRUE(e.linear_plan()[m].tiles.has_value()) << to_string(m);
    const std::vector<Trace> eager = engine_batch(e, 20, 12, false);
    const std::vector<Trace> graph = engine_batch(e, 20, 12, true);
    for (int64_t q = 0; q < B; ++q) {
      EXPECT_EQ(eager[q].tokens, graph[q].tokens) << "sequence " << q;
      for (size_t i = 0; i < eager[q].logits.size(); ++i)
        ASSERT_EQ(eager[q].logits[i], graph[q].logits[i]) << q;
    }
  }
  const dbtest::EnvGuard off("DECODEBENCH_FP16_TILES", "off");
  Engine e(ws, k, 16, false, 8);
  expect_tiles_paths(e, false, "fp16 off, batch 8", Scheme::fp16);
  expect_head_path(e, "fp16 off, batch 8");
  EXPECT_EQ(e.linear_plan()[MatrixKind::gate_up].batched, BatchedPath::cublas);
  EXPECT_EQ(e.linear_plan().weight_layout(), weight_layout(ws.config(), k, 1));
}

}  // namespace
