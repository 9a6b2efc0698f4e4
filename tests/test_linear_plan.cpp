// The linear plan (include/decodebench/linear_plan.h): which implementation, layout and batched
// path runs each kind of matrix, asserted for every preset x every kernel of its scheme x batch
// 1, 2, 8, 9, 128 x compute capability 80, 90, on the host, as the CUDA engine carries it out.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "decodebench/config.h"
#include "decodebench/error.h"
#include "decodebench/int4_frag.h"
#include "decodebench/kernel_registry.h"
#include "decodebench/linear_plan.h"

using namespace db;

namespace {

// 1; the columns GEMV's smallest and largest batch and one past it; past one skinny launch.
const int64_t kBatches[] = {1, 2, 8, 9, 128};
const int kCapabilities[] = {80, 90};

// Every preset, and each quantized one again with its lm_head in the blocks' scheme
// (--lm-head), which then runs the blocks' kernel.
std::vector<ModelConfig> models() {
  std::vector<ModelConfig> v;
  for (const std::string& name : preset_names()) {
    ModelConfig c = load_model_config(name);
    v.push_back(c);
    if (c.quant.scheme != Scheme::fp16 && c.quant.lm_head != c.quant.scheme) {
      c.quant.lm_head = c.quant.scheme;
      c.name += " (lm_head " + std::string(to_string(c.quant.scheme)) + ")";
      validate(c, c.name);
      v.push_back(c);
    }
  }
  return v;
}

// Shapes the fast kernels cannot take (as the GPU engine test's RaggedShapes): an input of 376
// int8 or fp8 or 372 fp16 weights (not whole 16-byte chunks), int4 groups of 16.
std::vector<ModelConfig> ragged_models() {
  std::vector<ModelConfig> v;
  for (auto [name, intermediate, group] :
       {std::tuple{"tiny-int8", 376, 64}, std::tuple{"tiny-fp16", 372, 64}, std::tuple{"tiny-int4", 368, 16},
        std::tuple{"tiny-fp8", 376, 64}}) {
    ModelConfig c = load_model_config(name);
    c.intermediate_size = intermediate;
    c.quant.group_size = group;
    validate(c, name);
    v.push_back(c);
  }
  return v;
}

std::vector<const KernelInfo*> kernels_of(Scheme s) {
  std::vector<const KernelInfo*> v;
  for (const KernelInfo& k : kernel_registry())
    if (k.scheme == s) v.push_back(&k);
  return v;
}

// Calls f(config, kernel, batch, capability, plan) for every model x kernel of its scheme x
// batch x capability; `fallback` as --kernel auto.
template <class F>
void for_every_plan(const std::vector<ModelConfig>& ms, bool fallback, F f) {
  for (const ModelConfig& c : ms)
    for (const KernelInfo* k : kernels_of(c.quant.scheme))
      for (int64_t batch : kBatches)
        for (int cap : kCapabilities) {
          SCOPED_TRACE(c.name + " " + k->name + " batch " + std::to_string(batch) + " sm_" +
                       std::to_string(cap));
          f(c, *k, batch, cap, plan_linears(c, *k, batch, cap, fallback));
        }
}

bool is_head(MatrixKind k) {
  return k == MatrixKind::lm_head;
}

// The layout the fast GEMV reads a matrix of this scheme in.
MatrixLayout fast_layout(Scheme s) {
  return s == Scheme::int4 ? MatrixLayout::int4_nibbles : MatrixLayout::canonical;
}

}  // namespace

TEST(LinearPlan, EveryKindOfMatrixIsTheStepsOwnShape) {
  for_every_plan(
      models(), true, [](const ModelConfig& c, const KernelInfo&, int64_t, int, const LinearPlan& p) {
        const int64_t H = c.hidden_size, I = c.intermediate_size;
        for (MatrixKind k : kAllMatrixKinds) EXPECT_EQ(p[k].kind, k);
        EXPECT_EQ(p[MatrixKind::qkv].shape.rows, c.q_dim() + 2 * c.kv_dim());
        EXPECT_EQ(p[MatrixKind::qkv].shape.cols, H);
        EXPECT_EQ(p[MatrixKind::o].shape.rows, H);
        EXPECT_EQ(p[MatrixKind::o].shape.cols, c.q_dim());
        EXPECT_EQ(p[MatrixKind::gate_up].shape.rows, 2 * I);
        EXPECT_EQ(p[MatrixKind::down].shape.cols, I);
        for (MatrixKind k : {MatrixKind::qkv, MatrixKind::o, MatrixKind::gate_up, MatrixKind::down})
          EXPECT_EQ(p[k].shape.scheme, c.quant.scheme);
        // The lm_head is the embedding itself where tied (an fp16 lm_head), else its own scheme's.
        const MatrixShape& head = p[MatrixKind::lm_head].shape;
        EXPECT_EQ(head.rows, c.vocab_size);
        EXPECT_EQ(head.cols, H);
        EXPECT_EQ(head.scheme, c.quant.lm_head);
      });
}

TEST(LinearPlan, ANamedKernelRunsEveryBlockMatrixAndTheLmHeadOfItsScheme) {
  for_every_plan(models(), false,
                 [](const ModelConfig& c, const KernelInfo& k, int64_t, int cap, const LinearPlan& p) {
                   EXPECT_TRUE(p.fallbacks().empty());
                   // fp8.gemv below sm_89 is refused (OnlyFp8sFastKernelsDependOnTheCapability).
                   const bool refused = k.name == "fp8.gemv" && cap < kFp8Capability;
                   if (!refused) EXPECT_NO_THROW(check_plan(p));
                   for (const LinearChoice& l : p.linears) {
                     if (!refused || l.shape.scheme != Scheme::fp8)
                       EXPECT_EQ(l.refusal, "") << to_string(l.kind);
                     const bool own = !is_head(l.kind) || c.quant.lm_head == c.quant.scheme;
                     EXPECT_EQ(l.impl, own ? k.impl : LinearImpl::gemv_fast) << to_string(l.kind);
                   }
                 });
}

TEST(LinearPlan, AutoPicksTheFastGemvWhereItTakesTheMatrixAndTheNaiveKernelWithAReasonOtherwise) {
  std::vector<ModelConfig> ms = models();
  const std::vector<ModelConfig> ragged = ragged_models();
  ms.insert(ms.end(), ragged.begin(), ragged.end());
  for (const ModelConfig& c : ms) {
    SCOPED_TRACE(c.name);
    const KernelInfo& k = resolve_kernel("auto", c.quant.scheme);
    EXPECT_EQ(k.impl, LinearImpl::gemv_fast);
    const LinearPlan p = plan_linears(c, k, 1, 90, true);
    std::vector<std::string> want;
    for (const LinearChoice& l : p.linears) {
      const char* why = nullptr;
      if (fast_gemv_takes(l.shape, fast_layout(l.shape.scheme), &why)) {
        EXPECT_EQ(l.impl, LinearImpl::gemv_fast) << to_string(l.kind);
        EXPECT_EQ(l.fallback, "") << to_string(l.kind);
      } else {
        EXPECT_EQ(l.impl, LinearImpl::gemv_naive) << to_string(l.kind);
        EXPECT_EQ(l.fallback, std::string(to_string(l.kind)) + " [" + std::to_string(l.shape.rows) + " x " +
                                  std::to_string(l.shape.cols) + "]: " + to_string(l.shape.scheme) +
                                  ".naive, since " + why);
        want.push_back(l.fallback);
      }
      EXPECT_EQ(l.refusal, "") << to_string(l.kind);
    }
    EXPECT_EQ(p.fallbacks(), want);
    // The same kernel named: refused, with the first matrix it cannot take, where auto fell back.
    const LinearPlan named = plan_linears(c, k, 1, 90, false);
    EXPECT_TRUE(named.fallbacks().empty());
    if (want.empty()) {
      EXPECT_NO_THROW(check_plan(named));
    } else {
      try {
        check_plan(named);
        ADD_FAILURE() << "a named kernel ran a matrix it cannot take";
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).rfind("kernel " + k.name + " cannot run " + c.name + " [", 0), 0u)
            << e.what();
      }
    }
  }
  // The ragged shapes fall back where the GPU engine test expects: the input dimension of the
  // down projection at int8 and fp16; every int4 matrix at groups of 16 (the fp16 lm_head keeps
  // its kernel).
  auto kinds_falling_back = [](const ModelConfig& c) {
    std::vector<std::string> v;
    for (const std::string& line :
         plan_linears(c, resolve_kernel("auto", c.quant.scheme), 1, 90, true).fallbacks())
      v.push_back(line.substr(0, line.find(' ')));
    return v;
  };
  EXPECT_EQ(kinds_falling_back(ragged[0]), std::vector<std::string>{"down_proj"});
  EXPECT_EQ(kinds_falling_back(ragged[1]), std::vector<std::string>{"down_proj"});
  EXPECT_EQ(kinds_falling_back(ragged[2]),
            (std::vector<std::string>{"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}));
  EXPECT_EQ(kinds_falling_back(ragged[3]), std::vector<std::string>{"down_proj"});
  // No preset falls back.
  for (const ModelConfig& c : models())
    EXPECT_EQ(kinds_falling_back(c), std::vector<std::string>{}) << c.name;
}

TEST(LinearPlan, Int4MatricesOfAtLeast2e8WeightsUseTheFragmentLayout) {
  for_every_plan(
      models(), true, [](const ModelConfig&, const KernelInfo&, int64_t, int, const LinearPlan& p) {
        for (const LinearChoice& l : p.linears) {
          const MatrixShape& m = l.shape;
          if (m.scheme != Scheme::int4 || l.impl != LinearImpl::gemv_fast) {
            EXPECT_EQ(l.layout, MatrixLayout::canonical) << to_string(l.kind);  // what files hold
            continue;
          }
          // The fast GEMV reads int4 repacked: the fragment layout where it can hold the matrix
          // and the matrix has at least 2e8 weights, the nibble order otherwise.
          const bool fragments =
              int4_frag::eligible(m.rows, m.cols, m.group_size) && m.weights() >= 200'000'000;
          EXPECT_EQ(l.layout, fragments ? MatrixLayout::int4_fragments : MatrixLayout::int4_nibbles)
              << to_string(l.kind) << " " << m.rows << " x " << m.cols;
        }
      });
  // Of the presets, 70b-int4's gate/up (470 M weights) and down (235 M) only; 8b's gate/up
  // (117 M) keeps the nibble order.
  auto layout = [](const char* preset, MatrixKind k) {
    const ModelConfig c = load_model_config(preset);
    return plan_linears(c, resolve_kernel("int4.gemv", Scheme::int4), 1, 90, false)[k].layout;
  };
  EXPECT_EQ(layout("70b-int4", MatrixKind::gate_up), MatrixLayout::int4_fragments);
  EXPECT_EQ(layout("70b-int4", MatrixKind::down), MatrixLayout::int4_fragments);
  EXPECT_EQ(layout("70b-int4", MatrixKind::qkv), MatrixLayout::int4_nibbles);
  EXPECT_EQ(layout("8b-int4", MatrixKind::gate_up), MatrixLayout::int4_nibbles);
}

TEST(LinearPlan, TheBatchedPathFollowsTheImplementation) {
  for_every_plan(models(), true,
                 [](const ModelConfig&, const KernelInfo&, int64_t batch, int, const LinearPlan& p) {
                   EXPECT_EQ(p.batch, batch);
                   for (const LinearChoice& l : p.linears) {
                     SCOPED_TRACE(to_string(l.kind));
                     if (batch == 1) {  // batch 1 runs the implementation's own kernel
                       EXPECT_EQ(l.batched, BatchedPath::none);
                       continue;
                     }
                     const char* why = nullptr;
                     switch (l.impl) {
                       case LinearImpl::gemv_fast:
                         // The columns GEMV up to the scheme's crossover, where it takes the matrix. Above:
                         // cuBLAS streams fp16 faster than the skinny GEMM; the skinny GEMM takes int8 and
                         // int4 in the nibble order up to one launch of sequences; the rest is an fp16 copy
                         // for cuBLAS.
                         if (batch <= gemv_columns_crossover(l.shape.scheme) &&
                             gemv_columns_takes(l.shape, l.layout, batch, &why))
                           EXPECT_EQ(l.batched, BatchedPath::gemv_columns);
                         else if (l.shape.scheme == Scheme::fp16)
                           EXPECT_EQ(l.batched, BatchedPath::cublas);
                         else if (batch <= kSkinnyMaxBatch && l.layout != MatrixLayout::int4_fragments)
                           EXPECT_EQ(l.batched, BatchedPath::skinny_gemm);
                         else
                           EXPECT_EQ(l.batched, BatchedPath::fp16_copy_cublas);
                         break;
                       case LinearImpl::gemv_naive:  // the slow path stays the slow path
                         EXPECT_EQ(l.batched, BatchedPath::gemv_per_sequence);
                         break;
                       case LinearImpl::cublas:
                         EXPECT_EQ(l.batched, BatchedPath::cublas);
                         break;
                       case LinearImpl::dequant_cublas:
                         EXPECT_EQ(l.batched, BatchedPath::dequant_cublas);
                         break;
                     }
                     if (l.batched == BatchedPath::skinny_gemm)
                       EXPECT_TRUE(skinny_gemm_takes(l.shape, l.layout, &why)) << why;
                   }
                 });
}

TEST(LinearPlan, TheColumnsGemvRunsTheFastKernelsLinearsUpToTheCrossover) {
  // Every scheme's crossover is 2 (measured on the H200), within the kernel's instances.
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8}) {
    EXPECT_EQ(gemv_columns_crossover(s), 2) << to_string(s);
    EXPECT_LE(gemv_columns_crossover(s), kGemvColumnsMaxBatch) << to_string(s);
  }
  // 8b: every linear at 2 sequences (the down projection's 2 x 14336 inputs fit the 128 KiB
  // the kernel keeps in L1), the lm_head (fp16, 4096 inputs) too; from 3 on, none.
  for (const char* preset : {"8b-fp16", "8b-int8", "8b-int4", "8b-fp8"}) {
    const ModelConfig c = load_model_config(preset);
    const bool fp16 = c.quant.scheme == Scheme::fp16;
    for (int64_t batch = 2; batch <= 9; ++batch) {
      SCOPED_TRACE(std::string(preset) + " batch " + std::to_string(batch));
      const LinearPlan p = plan_linears(c, resolve_kernel("auto", c.quant.scheme), batch, 90, true);
      const BatchedPath above = fp16 ? BatchedPath::cublas : BatchedPath::skinny_gemm;
      for (MatrixKind k : {MatrixKind::qkv, MatrixKind::o, MatrixKind::gate_up, MatrixKind::down})
        EXPECT_EQ(p[k].batched, batch <= 2 ? BatchedPath::gemv_columns : above) << to_string(k);
      EXPECT_EQ(p[MatrixKind::lm_head].batched, batch <= 2 ? BatchedPath::gemv_columns : BatchedPath::cublas);
    }
  }
  // 70b-int4's gate/up and down lie in the fragment layout, which the kernel does not read.
  const LinearPlan p =
      plan_linears(load_model_config("70b-int4"), resolve_kernel("auto", Scheme::int4), 2, 90, true);
  EXPECT_EQ(p[MatrixKind::qkv].batched, BatchedPath::gemv_columns);
  EXPECT_EQ(p[MatrixKind::gate_up].batched, BatchedPath::fp16_copy_cublas);
  EXPECT_EQ(p[MatrixKind::down].batched, BatchedPath::fp16_copy_cublas);
  EXPECT_STREQ(to_string(BatchedPath::gemv_columns), "gemv-columns");
}

TEST(LinearPlan, OnlyFp8sFastKernelsDependOnTheCapability) {
  for (const ModelConfig& c : models())
    for (const KernelInfo* k : kernels_of(c.quant.scheme))
      for (int64_t batch : kBatches) {
        const LinearPlan a = plan_linears(c, *k, batch, 80, true), b = plan_linears(c, *k, batch, 90, true);
        const LinearPlan named = plan_linears(c, *k, batch, 80, false);
        EXPECT_EQ(a.capability, 80);
        EXPECT_EQ(b.capability, 90);
        EXPECT_EQ(a.step, b.step);
        for (MatrixKind m : kAllMatrixKinds) {
          SCOPED_TRACE(c.name + " " + k->name + " " + to_string(m));
          EXPECT_EQ(a[m].layout, b[m].layout);
          const MatrixShape& s = b[m].shape;
          if (s.scheme != Scheme::fp8 || b[m].impl != LinearImpl::gemv_fast) {
            EXPECT_EQ(a[m].impl, b[m].impl);
            EXPECT_EQ(a[m].batched, b[m].batched);
            EXPECT_EQ(a[m].fallback, b[m].fallback);
            EXPECT_EQ(named[m].refusal, "");
            continue;
          }
          // fp8's fast GEMV (and so its skinny GEMM) needs the hardware conversion of sm_89:
          // below, auto runs the naive GEMV with the reason, and the named kernel is refused.
          EXPECT_EQ(a[m].impl, LinearImpl::gemv_naive);
          EXPECT_EQ(a[m].batched, batch > 1 ? BatchedPath::gemv_per_sequence : BatchedPath::none);
          EXPECT_EQ(a[m].fallback, std::string(to_string(m)) + " [" + std::to_string(s.rows) + " x " +
                                       std::to_string(s.cols) +
                                       "]: fp8.naive, since fp8.gemv converts E4M3 with the cvt instruction "
                                       "of sm_89 and later");
          EXPECT_NE(named[m].refusal.find("kernel fp8.gemv cannot run"), std::string::npos)
              << named[m].refusal;
          EXPECT_EQ(b[m].fallback, "");
        }
      }
  // At sm_89 exactly the fast kernel runs.
  const ModelConfig c = load_model_config("8b-fp8");
  const LinearPlan p = plan_linears(c, resolve_kernel("auto", Scheme::fp8), 8, 89, false);
  EXPECT_EQ(p[MatrixKind::down].impl, LinearImpl::gemv_fast);
  EXPECT_EQ(p[MatrixKind::down].batched, BatchedPath::skinny_gemm);
  EXPECT_NO_THROW(check_plan(p));
}

TEST(LinearPlan, EveryPlanRunsTheKernelPerOpStep) {
  // The one step mode there is: a kernel (or a few) per operation, captured into one graph.
  for_every_plan(models(), true,
                 [](const ModelConfig&, const KernelInfo&, int64_t, int, const LinearPlan& p) {
                   EXPECT_EQ(p.step, StepMode::kernel_per_op);
                 });
  EXPECT_STREQ(to_string(StepMode::kernel_per_op), "kernel-per-op");
}

TEST(LinearPlan, TheWeightLayoutKeysWhichKernelsShareWeights) {
  for (const ModelConfig& c : models()) {
    SCOPED_TRACE(c.name);
    for (const KernelInfo* k : kernels_of(c.quant.scheme)) {
      const WeightLayout w = plan_linears(c, *k, 1, 90, true).weight_layout();
      // The same for every batch and with or without the fallback: one set of device weights
      // serves a sweep's runs of a kernel.
      for (int64_t batch : kBatches) EXPECT_EQ(plan_linears(c, *k, batch, 80, false).weight_layout(), w);
      // Only the fast int4 GEMV repacks; the lm_head where it is int4 too.
      const bool repacks = c.quant.scheme == Scheme::int4 && k->impl == LinearImpl::gemv_fast;
      const bool head = repacks && c.quant.lm_head == Scheme::int4;
      EXPECT_EQ(w.name(),
                repacks ? (head ? "int4-repacked" : "int4-repacked (lm_head canonical)") : "canonical")
          << k->name;
    }
    // int4.naive and int4.dequant-cublas read the canonical layout, int4.gemv its own.
    if (c.quant.scheme == Scheme::int4) {
      auto layout = [&](const char* k) {
        return plan_linears(c, resolve_kernel(k, Scheme::int4), 1, 90, true).weight_layout();
      };
      EXPECT_EQ(layout("int4.naive"), layout("int4.dequant-cublas"));
      EXPECT_NE(layout("int4.naive"), layout("int4.gemv"));
    }
  }
}

TEST(LinearPlan, TheStepsResourcesFollowTheChoices) {
  for_every_plan(
      models(), true, [](const ModelConfig&, const KernelInfo& k, int64_t batch, int, const LinearPlan& p) {
        // The GEMVs hand RMSNorm statistics and the residual's fp16 copy to each other unless the
        // blocks run cuBLAS.
        EXPECT_EQ(p.gemv_blocks(), !runs_cublas(k.impl));
        // Attention lets the O GEMV launch early only where that GEMV is int4's fast one.
        EXPECT_EQ(p.attention_triggers_early(), p[MatrixKind::o].impl == LinearImpl::gemv_fast &&
                                                    p[MatrixKind::o].shape.scheme == Scheme::int4);
        // cuBLAS: a cuBLAS kernel, or at batch > 1 any linear but the columns GEMV's, the skinny
        // GEMM's and the naive kernel's.
        bool cublas = runs_cublas(k.impl);
        int64_t copy = 0;
        for (const LinearChoice& l : p.linears) {
          cublas = cublas ||
                   (batch > 1 && l.batched != BatchedPath::gemv_columns &&
                    l.batched != BatchedPath::skinny_gemm && l.batched != BatchedPath::gemv_per_sequence);
          if (l.impl == LinearImpl::dequant_cublas)
            copy = std::max(copy, l.shape.weights());
          else if (l.batched == BatchedPath::fp16_copy_cublas)
            copy = std::max(copy, fp16_chunk_elements(l.shape.rows, l.shape.cols, p.dequant_chunk_bytes));
        }
        EXPECT_EQ(p.uses_cublas(), cublas);
        // One fp16 scratch serves every matrix that needs a copy: dequant-cublas copies the
        // largest whole, the batched step's copies their blocks (whole matrices by default).
        EXPECT_EQ(p.fp16_copy_elements(), copy);
        EXPECT_EQ(p.dequant_chunk_bytes, kDequantChunkBytes);
        if (k.impl == LinearImpl::dequant_cublas) EXPECT_GE(copy, p[MatrixKind::gate_up].shape.weights());
      });
}

// The batched step's fp16 copies are made in blocks of rows: a block's fp16 image is at most
// the block size, in whole 128-row tiles where one fits, else in the 8-row blocks of the int4
// layouts (at least one), the whole matrix when it fits; the scratch is two blocks. By default
// a block is the whole matrix.
TEST(LinearPlan, TheBatchedFp16CopiesAreMadeInBlocksOfRows) {
  constexpr int64_t kBlock = int64_t{16} << 20;
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}, {57344, 8192}, {8192, 28672}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
    const int64_t r = fp16_chunk_rows(rows, cols, kBlock);
    EXPECT_EQ(r % 128, 0);
    EXPECT_LE(2 * r * cols, kBlock);
    EXPECT_GT(2 * (r + 128) * cols, kBlock);  // the most whole tiles that fit
    EXPECT_EQ(fp16_chunk_elements(rows, cols, kBlock), 2 * r * cols);
    EXPECT_EQ(fp16_chunk_rows(rows, cols, kDequantChunkBytes), rows);  // the default: whole
    EXPECT_EQ(fp16_chunk_elements(rows, cols, kDequantChunkBytes), rows * cols);
  }
  EXPECT_EQ(fp16_chunk_rows(28672, 4096, kBlock), 2048);
  EXPECT_EQ(fp16_chunk_rows(4096, 14336, kBlock), 512);
  // Small blocks (the GPU tests'): whole blocks of 8 rows, at least one.
  EXPECT_EQ(fp16_chunk_rows(256, 128, 24 * 128 * 2), 24);
  EXPECT_EQ(fp16_chunk_rows(256, 128, 31 * 128 * 2), 24);
  EXPECT_EQ(fp16_chunk_rows(128, 256, 12 * 256 * 2), 8);
  EXPECT_EQ(fp16_chunk_rows(128, 4096, 100), 8);
  EXPECT_EQ(fp16_chunk_elements(128, 4096, 100), 2 * 8 * 4096);
  // A matrix that fits is one block, the scratch its size.
  EXPECT_EQ(fp16_chunk_rows(100, 128, 100 * 128 * 2), 100);
  EXPECT_EQ(fp16_chunk_elements(100, 128, 100 * 128 * 2), 100 * 128);
  EXPECT_EQ(fp16_chunk_rows(5, 4096, 100), 5);
  EXPECT_THROW(fp16_chunk_rows(8, 8, 0), Error);

  // 8b-int4, 8b-int8 and 8b-fp8 past one skinny launch: every block linear copies whole by
  // default (the scratch is gate/up's copy, the largest), in blocks at an engine's own size.
  for (const char* preset : {"8b-int4", "8b-int8", "8b-fp8"}) {
    SCOPED_TRACE(preset);
    const ModelConfig c = load_model_config(preset);
    LinearPlan p = plan_linears(c, resolve_kernel("auto", c.quant.scheme), 128, 90, true);
    for (MatrixKind k : {MatrixKind::qkv, MatrixKind::o, MatrixKind::gate_up, MatrixKind::down})
      EXPECT_EQ(p[k].batched, BatchedPath::fp16_copy_cublas) << to_string(k);
    EXPECT_EQ(p.fp16_chunk_rows(MatrixKind::gate_up), 28672);
    EXPECT_EQ(p.fp16_chunk_rows(MatrixKind::down), 4096);
    EXPECT_EQ(p.fp16_copy_elements(), 28672 * 4096);
    p.dequant_chunk_bytes = kBlock;  // an engine's own
    EXPECT_EQ(p.fp16_chunk_rows(MatrixKind::gate_up), 2048);
    EXPECT_EQ(p.fp16_chunk_rows(MatrixKind::down), 512);
    EXPECT_EQ(p.fp16_copy_elements(), 2 * 2048 * 4096);
  }
  // dequant-cublas copies each matrix whole, at every batch.
  const ModelConfig c = load_model_config("8b-int4");
  const LinearPlan d = plan_linears(c, resolve_kernel("int4.dequant-cublas", Scheme::int4), 128, 90, false);
  EXPECT_EQ(d.fp16_copy_elements(), 28672 * 4096);
}

TEST(LinearPlan, TheSkinnyShapesTimedAtLoadAreWhatTheResultRecords) {
  const ModelConfig c = load_model_config("8b-int4");
  LinearPlan p = plan_linears(c, resolve_kernel("auto", Scheme::int4), 16, 90, true);
  EXPECT_TRUE(p.kernel_shapes().empty());  // nothing timed yet
  ASSERT_EQ(p[MatrixKind::gate_up].batched, BatchedPath::skinny_gemm);
  p[MatrixKind::gate_up].skinny = SkinnyTiming{{4, 1, 1}, {4, 1, 2}, 34.31, 34.94};
  p[MatrixKind::qkv].skinny = SkinnyTiming{{2, 2, 2}, {4, 1, 2}, 14.5, 17.1};
  EXPECT_EQ(p.kernel_shapes(),
            (std::vector<std::string>{"qkv [6144 x 4096]: m2u2b2, 14.5 us (default m4u1b2 17.1 us)",
                                      "gate_up [28672 x 4096]: m4u1b1, 34.3 us (default m4u1b2 34.9 us)"}));
}

// config.batched_paths: none at batch 1; at a batch, every kind of matrix with its shape and
// path in step order, the path the plan gave it.
TEST(LinearPlan, TheBatchedPathsAreWhatTheResultRecords) {
  const ModelConfig c = load_model_config("8b-int4");
  EXPECT_TRUE(
      plan_linears(c, resolve_kernel("auto", Scheme::int4), 1, 90, true).batched_path_lines().empty());
  for (int64_t batch : {int64_t{2}, int64_t{16}, int64_t{256}}) {
    const LinearPlan p = plan_linears(c, resolve_kernel("auto", Scheme::int4), batch, 90, true);
    const std::vector<std::string> lines = p.batched_path_lines();
    ASSERT_EQ(lines.size(), static_cast<size_t>(kMatrixKinds)) << batch;
    EXPECT_EQ(lines[static_cast<int>(MatrixKind::gate_up)],
              fmt::format("gate_up [28672 x 4096]: {}", to_string(p[MatrixKind::gate_up].batched)))
        << batch;
    EXPECT_EQ(lines[0].rfind("qkv [6144 x 4096]: ", 0), 0u) << lines[0];
    EXPECT_EQ(lines[4].rfind("lm_head [128256 x 4096]: ", 0), 0u) << lines[4];
  }
  // The paths a growing batch reaches: the columns GEMV at 2, the skinny GEMM past it, the fp16
  // copy through cuBLAS at 256.
  EXPECT_EQ(plan_linears(c, resolve_kernel("auto", Scheme::int4), 2, 90, true).batched_path_lines()[2],
            "gate_up [28672 x 4096]: gemv-columns");
  EXPECT_EQ(plan_linears(c, resolve_kernel("auto", Scheme::int4), 16, 90, true).batched_path_lines()[2],
            "gate_up [28672 x 4096]: skinny-gemm");
  EXPECT_EQ(plan_linears(c, resolve_kernel("auto", Scheme::int4), 256, 90, true).batched_path_lines()[2],
            "gate_up [28672 x 4096]: fp16-copy-cublas");
}

TEST(LinearPlan, ListKernelsShowsTheLayoutsItsPlansUse) {
  // Every layout a plan gives a kernel's matrices is one `decodebench list kernels` names.
  for_every_plan(
      models(), true, [](const ModelConfig&, const KernelInfo& k, int64_t, int, const LinearPlan& p) {
        const std::vector<MatrixLayout> listed = layouts_read(k);
        for (const LinearChoice& l : p.linears) {
          if (l.impl != k.impl || l.shape.scheme != k.scheme) continue;  // the lm_head of another scheme
          EXPECT_NE(std::find(listed.begin(), listed.end(), l.layout), listed.end()) << to_string(l.kind);
        }
      });
  // And with the mixed-input GEMM where the plan may choose it (sm_90, from 65 sequences).
  for (const ModelConfig& c : models())
    for (const KernelInfo* k : kernels_of(c.quant.scheme)) {
      const std::vector<MatrixLayout> listed = layouts_read(*k);
      for (const LinearChoice& l : plan_linears(c, *k, 256, 90, true, true).linears)
        if (l.impl == k->impl && l.shape.scheme == k->scheme)
          EXPECT_NE(std::find(listed.begin(), listed.end(), l.layout), listed.end())
              << c.name << " " << k->name;
    }
  EXPECT_EQ(layouts_read(resolve_kernel("int4.gemv", Scheme::int4)),
            (std::vector<MatrixLayout>{MatrixLayout::int4_nibbles, MatrixLayout::int4_fragments,
                                       MatrixLayout::mixed_wgmma}));
}

TEST(LinearPlan, ListKernelsShowsTheBatchedPathsInTheOrderAGrowingBatchReachesThem) {
  for (const ModelConfig& c : models())
    for (const KernelInfo* k : kernels_of(c.quant.scheme))
      for (int cap : kCapabilities) {
        SCOPED_TRACE(c.name + " " + k->name + " sm_" + std::to_string(cap));
        const std::vector<BatchedPath> listed = batched_paths(*k);
        std::array<size_t, kMatrixKinds> reached{};
        for (int64_t batch : {2, 3, 4, 5, 8, 9, 16, 64, 65, 128}) {
          const LinearPlan p = plan_linears(c, *k, batch, cap, true);
          for (const LinearChoice& l : p.linears) {
            if (l.impl != k->impl || l.shape.scheme != k->scheme) continue;  // another scheme's lm_head
            const auto it = std::find(listed.begin(), listed.end(), l.batched);
            ASSERT_NE(it, listed.end())
                << to_string(l.kind) << " batch " << batch << ": " << to_string(l.batched);
            const size_t i = static_cast<size_t>(it - listed.begin());
            EXPECT_GE(i, reached[static_cast<int>(l.kind)]) << to_string(l.kind) << " batch " << batch;
            reached[static_cast<int>(l.kind)] = i;
          }
        }
      }
  EXPECT_EQ(batched_paths(resolve_kernel("fp16.gemv", Scheme::fp16)),
            (std::vector<BatchedPath>{BatchedPath::gemv_columns, BatchedPath::cublas}));
}

TEST(ShapePredicates, TheColumnsGemvTakesTheFastGemvsMatricesWhoseInputsFitL1) {
  const char* why = nullptr;
  const MatrixShape o{Scheme::int4, 4096, 4096, 128, true}, down{Scheme::int4, 4096, 14336, 128, true};
  EXPECT_TRUE(gemv_columns_takes(o, MatrixLayout::int4_nibbles, 2, &why));
  EXPECT_TRUE(gemv_columns_takes(o, MatrixLayout::int4_nibbles, 8, &why));
  // 2 to 8 sequences.
  EXPECT_FALSE(gemv_columns_takes(o, MatrixLayout::int4_nibbles, 1, &why));
  EXPECT_STREQ(why, "the columns GEMV takes 2 to 8 sequences");
  EXPECT_FALSE(gemv_columns_takes(o, MatrixLayout::int4_nibbles, 9, &why));
  // The batch's inputs, B x cols fp16, at most 128 KiB: 14336 inputs at 4 sequences, not 5.
  EXPECT_TRUE(gemv_columns_takes(down, MatrixLayout::int4_nibbles, 4, &why));
  EXPECT_FALSE(gemv_columns_takes(down, MatrixLayout::int4_nibbles, 5, &why));
  EXPECT_STREQ(why, "the columns GEMV keeps the inputs of all sequences in L1: at most 128 KiB of them");
  // What the fast GEMV refuses, and int4's fragment layout.
  EXPECT_FALSE(gemv_columns_takes(o, MatrixLayout::canonical, 2, &why));
  EXPECT_FALSE(gemv_columns_takes(o, MatrixLayout::int4_fragments, 2, &why));
  EXPECT_STREQ(why, "the columns GEMV reads int4 in the repacked nibble layout, not the fragment layout");
  EXPECT_FALSE(gemv_columns_takes({Scheme::int8, 2048, 376, 0, false}, MatrixLayout::canonical, 2, &why));
  // The longest rows it takes, 32768 inputs at 2 sequences, are 8 fp16 chunks a thread of a
  // block; 70b's down projection (28672 inputs) at 2 sequences, not 3.
  EXPECT_TRUE(gemv_columns_takes({Scheme::fp16, 8192, 32768, 0, false}, MatrixLayout::canonical, 2, &why));
  EXPECT_EQ(int64_t{kGemvColumnsMaxThreads} * 8 * weights_per_chunk(Scheme::fp16), 32768);
  EXPECT_TRUE(gemv_columns_takes({Scheme::fp16, 8192, 28672, 0, false}, MatrixLayout::canonical, 2, &why));
  EXPECT_FALSE(gemv_columns_takes({Scheme::fp16, 8192, 28672, 0, false}, MatrixLayout::canonical, 3, &why));
}

TEST(ShapePredicates, EachKernelsLimitsInWordsAResultCanCarry) {
  const char* why = nullptr;
  MatrixShape m{Scheme::int8, 2048, 376, 0, false};  // 376 bytes: not whole 16-byte chunks
  EXPECT_FALSE(fast_gemv_takes(m, MatrixLayout::canonical, &why));
  EXPECT_STREQ(why, "the fast kernels need the input dimension to be a multiple of 16 bytes of weights");
  EXPECT_FALSE(skinny_gemm_takes(m, MatrixLayout::canonical, &why));
  m.cols = 384;
  EXPECT_TRUE(fast_gemv_takes(m, MatrixLayout::canonical, &why));
  // int4: a power-of-two group of at least 32, in a repacked layout; the skinny GEMM only in
  // the nibble order.
  MatrixShape q{Scheme::int4, 8, 1024, 128, true};
  EXPECT_TRUE(fast_gemv_takes(q, MatrixLayout::int4_nibbles, &why));
  EXPECT_TRUE(fast_gemv_takes(q, MatrixLayout::int4_fragments, &why));
  EXPECT_FALSE(fast_gemv_takes(q, MatrixLayout::canonical, &why));
  EXPECT_TRUE(skinny_gemm_takes(q, MatrixLayout::int4_nibbles, &why));
  EXPECT_FALSE(skinny_gemm_takes(q, MatrixLayout::int4_fragments, &why));
  for (int g : {16, 48}) {
    q.group_size = g;
    EXPECT_FALSE(fast_gemv_takes(q, MatrixLayout::int4_nibbles, &why)) << g;
    EXPECT_FALSE(skinny_gemm_takes(q, MatrixLayout::int4_nibbles, &why)) << g;
  }
  // The fragment layout where it can hold a matrix (int4_frag::eligible) of >= 2e8 weights.
  EXPECT_TRUE(prefers_int4_fragments(57344, 8192, 128));   // 70b gate/up
  EXPECT_TRUE(prefers_int4_fragments(8192, 28672, 128));   // 70b down
  EXPECT_FALSE(prefers_int4_fragments(28672, 4096, 128));  // 8b gate/up
  EXPECT_FALSE(prefers_int4_fragments(10240, 8192, 128));  // 70b qkv
  EXPECT_FALSE(prefers_int4_fragments(57344, 8192, 64));   // groups that are not its segments
  EXPECT_EQ(weights_per_chunk(Scheme::fp16) * 2, 16);
  EXPECT_EQ(weights_per_chunk(Scheme::int8), 16);
  EXPECT_EQ(weights_per_chunk(Scheme::int4) / 2, 16);
}

// The mixed-input GEMM (BatchedPath::mixed_gemm): the fast kernels' int4 and int8 matrices it
// takes run it from kMixedGemmMinBatch sequences on compute capability 9.0 where the build has it
// (plan_linears' mixed_gemm), in its layout; below that batch, on another GPU or without it, the
// plan is the one without the kernel. Its layout then depends on the batch, so that engines at
// 64 and 65 sequences do not share weights.
TEST(LinearPlan, TheMixedGemmRunsInt4AndInt8AboveTheSkinnyGemmOnHopper) {
  static_assert(kMixedGemmMinBatch == kSkinnyMaxBatch + 1, "the mixed GEMM takes over from the skinny GEMM");
  for (const char* name : {"8b-int4", "8b-int8"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = load_model_config(name);
    const KernelInfo& k = resolve_kernel("auto", c.quant.scheme);
    for (int64_t batch : {int64_t{65}, int64_t{256}, int64_t{300}}) {
      const LinearPlan p = plan_linears(c, k, batch, 90, true, true);
      for (const LinearChoice& l : p.linears) {
        const bool quantized = l.shape.scheme == Scheme::int4 || l.shape.scheme == Scheme::int8;
        EXPECT_EQ(l.batched, quantized ? BatchedPath::mixed_gemm : BatchedPath::cublas) << to_string(l.kind);
        EXPECT_EQ(l.layout, quantized ? MatrixLayout::mixed_wgmma : MatrixLayout::canonical)
            << to_string(l.kind);
      }
      EXPECT_EQ(p.batched_path_lines()[2], "gate_up [28672 x 4096]: mixed-gemm");
      EXPECT_EQ(p.fp16_copy_elements(), 0);  // no fp16 copy left
      // Without the kernel (not built, DECODEBENCH_BATCHED_GEMM=fp16-copy) or on another GPU:
      // the fp16 copy, in the layout of batch 1.
      for (const LinearPlan& q :
           {plan_linears(c, k, batch, 90, true, false), plan_linears(c, k, batch, 80, true, true),
            plan_linears(c, k, batch, 89, true, true), plan_linears(c, k, batch, 100, true, true)}) {
        EXPECT_EQ(q[MatrixKind::gate_up].batched, BatchedPath::fp16_copy_cublas);
        EXPECT_EQ(q.weight_layout(), plan_linears(c, k, 1, 90, true, true).weight_layout());
      }
    }
    // Up to the skinny GEMM's batch the plan is the one without the kernel.
    for (int64_t batch : {int64_t{1}, int64_t{2}, int64_t{16}, int64_t{64}}) {
      const LinearPlan p = plan_linears(c, k, batch, 90, true, true), q = plan_linears(c, k, batch, 90, true);
      for (MatrixKind kind : kAllMatrixKinds) {
        EXPECT_EQ(p[kind].batched, q[kind].batched) << batch;
        EXPECT_EQ(p[kind].layout, q[kind].layout) << batch;
      }
    }
    const WeightLayout mixed = plan_linears(c, k, 65, 90, true, true).weight_layout();
    EXPECT_NE(mixed, plan_linears(c, k, 64, 90, true, true).weight_layout());
    EXPECT_EQ(mixed.name(), "mixed-wgmma (qkv_proj, o_proj, gate_up_proj, down_proj)");  // an fp16 lm_head
    // The slow paths keep theirs.
    for (const char* kernel : {"naive", "dequant-cublas"}) {
      const LinearPlan p = plan_linears(
          c, resolve_kernel(fmt::format("{}.{}", to_string(c.quant.scheme), kernel), c.quant.scheme), 256, 90,
          true, true);
      for (const LinearChoice& l : p.linears) EXPECT_NE(l.batched, BatchedPath::mixed_gemm) << kernel;
    }
  }
  // fp8 and fp16 never take it.
  for (const char* name : {"8b-fp8", "8b-fp16"}) {
    const ModelConfig c = load_model_config(name);
    const LinearPlan p = plan_linears(c, resolve_kernel("auto", c.quant.scheme), 256, 90, true, true);
    for (const LinearChoice& l : p.linears) EXPECT_NE(l.batched, BatchedPath::mixed_gemm) << name;
  }
}

// What the mixed-input GEMM takes: int4 and int8 with cols a multiple of 64 and int4 groups whole
// chunks that divide a row (or a row); anything else keeps the fp16 copy above 64 sequences.
TEST(LinearPlan, TheMixedGemmTakesWholeChunksAndGroups) {
  const char* why = nullptr;
  auto shape = [](Scheme s, int64_t rows, int64_t cols, int group) {
    MatrixShape m;
    m.scheme = s;
    m.rows = rows;
    m.cols = cols;
    m.group_size = group;
    return m;
  };
  EXPECT_TRUE(mixed_gemm_takes(shape(Scheme::int4, 200, 384, 128), &why));
  EXPECT_TRUE(mixed_gemm_takes(shape(Scheme::int4, 4100, 1024, 64), &why));
  EXPECT_TRUE(mixed_gemm_takes(shape(Scheme::int4, 200, 384, 384), &why));  // a group a row
  EXPECT_TRUE(mixed_gemm_takes(shape(Scheme::int8, 201, 1024, 0), &why));
  EXPECT_FALSE(mixed_gemm_takes(shape(Scheme::int4, 200, 384, 32), &why));
  EXPECT_NE(std::string(why).find("multiple of 64"), std::string::npos) << why;
  EXPECT_FALSE(mixed_gemm_takes(shape(Scheme::int4, 200, 384, 256), &why));  // 256 does not divide 384
  EXPECT_FALSE(mixed_gemm_takes(shape(Scheme::int8, 200, 376, 0), &why));
  EXPECT_FALSE(mixed_gemm_takes(shape(Scheme::fp8, 200, 384, 0), &why));
  EXPECT_FALSE(mixed_gemm_takes(shape(Scheme::fp16, 200, 384, 0), &why));
  EXPECT_STREQ(to_string(MatrixLayout::mixed_wgmma), "mixed-wgmma");
  EXPECT_STREQ(to_string(BatchedPath::mixed_gemm), "mixed-gemm");
}

// DECODEBENCH_BATCHED_GEMM: auto (or unset) lets the plan choose, fp16-copy keeps today's path.
TEST(LinearPlan, TheBatchedGemmVariableForcesTheFp16Copy) {
  EXPECT_TRUE(batched_gemm_allows_mixed(nullptr));
  EXPECT_TRUE(batched_gemm_allows_mixed(""));
  EXPECT_TRUE(batched_gemm_allows_mixed("auto"));
  EXPECT_FALSE(batched_gemm_allows_mixed("fp16-copy"));
  EXPECT_THROW(batched_gemm_allows_mixed("cublas"), Error);
}
