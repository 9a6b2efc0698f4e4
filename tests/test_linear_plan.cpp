// The linear plan (include/decodebench/linear_plan.h): which implementation, layout and batched
// path runs each kind of matrix, asserted for every preset x every kernel of its scheme x batch
// 1, 2, 8, 9, 16, 17, 128 x compute capability 80, 90, on the host, as the CUDA engine carries
// it out; with the tiles GEMV on and off (DECODEBENCH_TILES and each scheme's switch).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>
#include <vector>

#include "decodebench/config.h"
#include "decodebench/error.h"
#include "decodebench/int4_frag.h"
#include "decodebench/kernel_registry.h"
#include "decodebench/linear_plan.h"
#include "env_guard.h"

using namespace db;

namespace {

// 1; 2, the columns GEMV's crossover and the tiles GEMV's first; 8 and 9, one mma's sequences
// and one past; 16 and 17, the tiles GEMV's last and one past; past one skinny launch.
const int64_t kBatches[] = {1, 2, 3, 8, 9, 16, 17, 128};
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

// Whether the plan lays a matrix out in tiles for the tiles GEMV: int4's, int8's or fp16's fast
// kernel, 2 (fp16 block matrices 3) to 16 sequences, a shape the scheme's layout holds, the
// variables not off.
bool expects_tiles(const LinearChoice& l, int64_t batch) {
  const char* why = nullptr;
  const Scheme s = l.shape.scheme;
  const bool holds = s == Scheme::int8   ? int8_tiles_hold(l.shape, &why)
                     : s == Scheme::fp16 ? fp16_tiles_hold(l.shape, &why)
                                         : int4_tiles_hold(l.shape, &why);
  return l.impl == LinearImpl::gemv_fast && batch >= tiles_gemv_min_batch(s, l.kind == MatrixKind::lm_head) &&
         batch <= kTilesGemvMaxBatch && holds && tiles_enabled(s);
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
      models(), true, [](const ModelConfig&, const KernelInfo&, int64_t batch, int, const LinearPlan& p) {
        for (const LinearChoice& l : p.linears) {
          const MatrixShape& m = l.shape;
          if (m.scheme != Scheme::int4 || l.impl != LinearImpl::gemv_fast) {
            // What files hold, but int8's and fp16's tiles at the tiles GEMV's batches.
            const bool tiles = m.scheme != Scheme::int4 && expects_tiles(l, batch);
            EXPECT_EQ(l.layout, tiles ? tiles_layout(m.scheme) : MatrixLayout::canonical)
                << to_string(l.kind);
            continue;
          }
          if (expects_tiles(l, batch)) continue;  // the tiles GEMV's batches (below)
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

// From 2 to 16 sequences the batched step runs int4's fast-kernel matrices that the tiles
// layout holds on the tiles GEMV, in that layout; batch 1 and past 16 keep the rows GEMV's
// layout. DECODEBENCH_INT4_TILES=off keeps it at every batch.
TEST(LinearPlan, Int4MatricesTheTilesLayoutHoldsLieInItFrom2To16Sequences) {
  for (const char* variable : {static_cast<const char*>(nullptr), "on", "off"}) {
    const dbtest::EnvGuard v("DECODEBENCH_INT4_TILES", variable);
    SCOPED_TRACE(variable ? variable : "unset");
    for_every_plan(models(), true,
                   [&](const ModelConfig&, const KernelInfo&, int64_t batch, int, const LinearPlan& p) {
                     for (const LinearChoice& l : p.linears) {
                       if (l.shape.scheme != Scheme::int4) continue;  // int8's and fp16's own tests, below
                       const bool tiles = expects_tiles(l, batch);
                       EXPECT_EQ(l.layout == MatrixLayout::int4_tiles, tiles) << to_string(l.kind);
                       EXPECT_EQ(l.batched == BatchedPath::tiles_gemv, tiles) << to_string(l.kind);
                       if (variable && std::string(variable) == "off") EXPECT_FALSE(tiles);
                     }
                   });
  }
  // 8b-int4's block matrices (groups of 128) at 2, 8 and 16; tiny-int4's groups of 64 it does not hold.
  const dbtest::EnvGuard v("DECODEBENCH_INT4_TILES", nullptr);
  for (int64_t batch : {1, 2, 8, 16, 17}) {
    const LinearPlan p =
        plan_linears(load_model_config("8b-int4"), resolve_kernel("auto", Scheme::int4), batch, 90, true);
    for (MatrixKind k : {MatrixKind::qkv, MatrixKind::o, MatrixKind::gate_up, MatrixKind::down})
      EXPECT_EQ(p[k].layout == MatrixLayout::int4_tiles, batch >= 2 && batch <= 16)
          << to_string(k) << " " << batch;
    EXPECT_EQ(p[MatrixKind::lm_head].layout,  // fp16: its own tiles
              batch >= 2 && batch <= 16 ? MatrixLayout::fp16_tiles : MatrixLayout::canonical);
  }
  const LinearPlan tiny =
      plan_linears(load_model_config("tiny-int4"), resolve_kernel("auto", Scheme::int4), 8, 90, true);
  EXPECT_EQ(tiny[MatrixKind::qkv].layout, MatrixLayout::int4_nibbles);
  EXPECT_EQ(tiny[MatrixKind::qkv].batched, BatchedPath::skinny_gemm);
}

// The same for int8: from 2 to 16 sequences its fast-kernel matrices of whole 64-column steps
// lie in the int8 tiles layout and run the tiles GEMV; batch 1 and past 16 keep the canonical
// layout (the rows GEMV, the skinny GEMM). DECODEBENCH_INT8_TILES=off or DECODEBENCH_TILES=off
// keeps the columns GEMV at 2 and the skinny GEMM above; DECODEBENCH_INT4_TILES does not touch
// int8.
TEST(LinearPlan, Int8MatricesLieInTheInt8TilesFrom2To16Sequences) {
  for (const char* variable : {static_cast<const char*>(nullptr), "on", "off"})
    for (const char* name : {"DECODEBENCH_INT8_TILES", "DECODEBENCH_TILES"}) {
      const dbtest::EnvGuard v(name, variable);
      SCOPED_TRACE(std::string(name) + "=" + (variable ? variable : "unset"));
      for_every_plan(models(), true,
                     [&](const ModelConfig&, const KernelInfo&, int64_t batch, int, const LinearPlan& p) {
                       for (const LinearChoice& l : p.linears) {
                         if (l.shape.scheme != Scheme::int8) continue;
                         const bool tiles = expects_tiles(l, batch);
                         EXPECT_EQ(l.layout == MatrixLayout::int8_tiles, tiles) << to_string(l.kind);
                         EXPECT_EQ(l.batched == BatchedPath::tiles_gemv, tiles) << to_string(l.kind);
                         if (variable && std::string(variable) == "off") EXPECT_FALSE(tiles);
                       }
                     });
    }
  const ModelConfig c = load_model_config("8b-int8");
  const KernelInfo& k = resolve_kernel("auto", Scheme::int8);
  for (const char* variable : {static_cast<const char*>(nullptr), "off"}) {
    const dbtest::EnvGuard v("DECODEBENCH_INT8_TILES", variable);
    const dbtest::EnvGuard int4("DECODEBENCH_INT4_TILES",
                                variable ? nullptr : "off");  // int4's switch off: int8 keeps its tiles
    const bool on = variable == nullptr;
    EXPECT_EQ(tiles_enabled(Scheme::int8), on);
    for (int64_t batch : {1, 2, 8, 16, 17}) {
      const LinearPlan p = plan_linears(c, k, batch, 90, true);
      const bool tiles = on && batch >= 2 && batch <= 16;
      for (MatrixKind m : {MatrixKind::qkv, MatrixKind::o, MatrixKind::gate_up, MatrixKind::down}) {
        SCOPED_TRACE(std::string(to_string(m)) + " " + std::to_string(batch));
        EXPECT_EQ(p[m].layout, tiles ? MatrixLayout::int8_tiles : MatrixLayout::canonical);
        const BatchedPath off = batch == 1   ? BatchedPath::none
                                : batch == 2 ? BatchedPath::gemv_columns
                                             : BatchedPath::skinny_gemm;
        EXPECT_EQ(p[m].batched, tiles ? BatchedPath::tiles_gemv : off);
      }
      // The fp16 lm_head lies in the fp16 tiles from 2 to 16 sequences, whatever int8's switch says.
      const bool head_tiles = batch >= 2 && batch <= 16;
      EXPECT_EQ(p[MatrixKind::lm_head].layout,
                head_tiles ? MatrixLayout::fp16_tiles : MatrixLayout::canonical);
      EXPECT_EQ(p[MatrixKind::lm_head].batched, head_tiles   ? BatchedPath::tiles_gemv
                                                : batch == 1 ? BatchedPath::none
                                                             : BatchedPath::cublas);
      EXPECT_EQ(p.weight_layout().name(), tiles        ? "int8-tiles (lm_head fp16-tiles)"
                                          : head_tiles ? "canonical (lm_head fp16-tiles)"
                                                       : "canonical");
    }
  }
  {
    const dbtest::EnvGuard v("DECODEBENCH_TILES", "off");
    EXPECT_FALSE(tiles_enabled(Scheme::int8));
    EXPECT_FALSE(tiles_enabled(Scheme::int4));
    EXPECT_FALSE(int4_tiles_enabled());
  }
  const dbtest::EnvGuard v("DECODEBENCH_INT8_TILES", "yes");
  try {
    plan_linears(c, k, 8, 90, true);
    ADD_FAILURE() << "a value other than on or off";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("DECODEBENCH_INT8_TILES=yes: on or off", 0), 0u) << e.what();
  }
}

// The same for fp16: from 2 to 16 sequences the fast kernel's fp16 lm_head of whole 32-column
// steps lies in the fp16 tiles layout and runs the tiles GEMV (fp16.gemv's, and every other
// scheme's kernels', which the fast GEMV runs), tied to the embedding or not, and fp16.gemv's
// block matrices from 3 to 16 (at 2 the columns GEMV); batch 1 and past 16 keep the canonical
// layout (the rows GEMV, cuBLAS). DECODEBENCH_FP16_TILES=off or DECODEBENCH_TILES=off keeps the
// columns GEMV at 2 and cuBLAS above; the int4 and int8 switches do not touch fp16.
TEST(LinearPlan, Fp16MatricesLieInTheFp16TilesFrom2Or3To16Sequences) {
  for (const char* variable : {static_cast<const char*>(nullptr), "on", "off"})
    for (const char* name : {"DECODEBENCH_FP16_TILES", "DECODEBENCH_TILES"}) {
      const dbtest::EnvGuard v(name, variable);
      SCOPED_TRACE(std::string(name) + "=" + (variable ? variable : "unset"));
      for_every_plan(models(), true,
                     [&](const ModelConfig&, const KernelInfo&, int64_t batch, int, const LinearPlan& p) {
                       for (const LinearChoice& l : p.linears) {
                         if (l.shape.scheme != Scheme::fp16) continue;
                         const bool tiles = expects_tiles(l, batch);
                         EXPECT_EQ(l.layout == MatrixLayout::fp16_tiles, tiles) << to_string(l.kind);
                         EXPECT_EQ(l.batched == BatchedPath::tiles_gemv, tiles) << to_string(l.kind);
                         if (variable && std::string(variable) == "off") EXPECT_FALSE(tiles);
                       }
                     });
    }
  // 8b-fp16 on fp16.gemv at 1, 2, 3, 8, 16 and 17 sequences, the switch unset and off.
  const ModelConfig c = load_model_config("8b-fp16");
  const KernelInfo& k = resolve_kernel("auto", Scheme::fp16);
  for (const char* variable : {static_cast<const char*>(nullptr), "off"}) {
    const dbtest::EnvGuard v("DECODEBENCH_FP16_TILES", variable);
    const dbtest::EnvGuard int8("DECODEBENCH_INT8_TILES", variable ? nullptr : "off");  // not fp16's
    const bool on = variable == nullptr;
    EXPECT_EQ(tiles_enabled(Scheme::fp16), on);
    for (int64_t batch : {1, 2, 3, 8, 16, 17}) {
      const LinearPlan p = plan_linears(c, k, batch, 90, true);
      for (MatrixKind m : kAllMatrixKinds) {
        SCOPED_TRACE(std::string(to_string(m)) + " " + std::to_string(batch));
        const bool tiles = on && batch >= (m == MatrixKind::lm_head ? 2 : 3) && batch <= 16;
        EXPECT_EQ(p[m].layout, tiles ? MatrixLayout::fp16_tiles : MatrixLayout::canonical);
        const BatchedPath off = batch == 1   ? BatchedPath::none
                                : batch == 2 ? BatchedPath::gemv_columns
                                             : BatchedPath::cublas;
        EXPECT_EQ(p[m].batched, tiles ? BatchedPath::tiles_gemv : off);
      }
      EXPECT_EQ(p.weight_layout().name(), !on || batch == 1 || batch > 16 ? "canonical"
                                          : batch == 2                    ? "canonical (lm_head fp16-tiles)"
                                                                          : "fp16-tiles");
      EXPECT_EQ(p.fp16_copy_elements(), 0);  // the batched step copies none of them
    }
  }
  // 8b-int4's fp16 lm_head at 2 to 16 sequences, on its own switch.
  const ModelConfig i4 = load_model_config("8b-int4");
  const KernelInfo& gemv4 = resolve_kernel("auto", Scheme::int4);
  for (int64_t batch = 1; batch <= 17; ++batch) {
    const LinearChoice head = plan_linears(i4, gemv4, batch, 90, true)[MatrixKind::lm_head];
    const bool tiles = batch >= 2 && batch <= 16;
    EXPECT_EQ(head.impl, LinearImpl::gemv_fast) << batch;
    EXPECT_EQ(head.layout, tiles ? MatrixLayout::fp16_tiles : MatrixLayout::canonical) << batch;
    EXPECT_EQ(head.batched, tiles        ? BatchedPath::tiles_gemv
                            : batch == 1 ? BatchedPath::none
                                         : BatchedPath::cublas)
        << batch;
  }
  {
    const dbtest::EnvGuard off("DECODEBENCH_FP16_TILES", "off");
    const LinearPlan p = plan_linears(i4, gemv4, 8, 90, true);
    EXPECT_EQ(p[MatrixKind::gate_up].batched, BatchedPath::tiles_gemv);  // int4's own switch
    EXPECT_EQ(p[MatrixKind::lm_head].batched, BatchedPath::cublas);
    EXPECT_EQ(p.weight_layout().name(), "int4-tiles (lm_head canonical)");
  }
  EXPECT_EQ(plan_linears(i4, gemv4, 8, 90, true).weight_layout().name(), "int4-tiles (lm_head fp16-tiles)");
  // A tied lm_head (1b: the embedding itself, 128256 x 2048) the same: the embedding then lies in
  // the fp16 tiles, and its gather reads them (embed_rows).
  for (const char* preset : {"1b-int4", "1b-fp16"}) {
    SCOPED_TRACE(preset);
    const ModelConfig t = load_model_config(preset);
    ASSERT_TRUE(lm_head_tied(t));
    const KernelInfo& auto_k = resolve_kernel("auto", t.quant.scheme);
    for (int64_t batch : {1, 2, 8, 16, 17}) {
      const LinearChoice head = plan_linears(t, auto_k, batch, 90, true)[MatrixKind::lm_head];
      const bool tiles = batch >= 2 && batch <= 16;
      EXPECT_EQ(head.shape.rows, 128256);
      EXPECT_EQ(head.shape.cols, 2048);
      EXPECT_EQ(head.layout, tiles ? MatrixLayout::fp16_tiles : MatrixLayout::canonical) << batch;
      EXPECT_EQ(head.batched == BatchedPath::tiles_gemv, tiles) << batch;
    }
  }
  // fp16.cublas keeps its own path: the tiles are the fast GEMV's only.
  for (const LinearChoice& l :
       plan_linears(c, resolve_kernel("fp16.cublas", Scheme::fp16), 8, 90, false).linears) {
    EXPECT_EQ(l.layout, MatrixLayout::canonical) << to_string(l.kind);
    EXPECT_EQ(l.batched, BatchedPath::cublas) << to_string(l.kind);
  }
  const dbtest::EnvGuard v("DECODEBENCH_FP16_TILES", "no");
  try {
    plan_linears(c, k, 8, 90, true);
    ADD_FAILURE() << "a value other than on or off";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("DECODEBENCH_FP16_TILES=no: on or off", 0), 0u) << e.what();
  }
}

// The variable is read at every plan: "off" keeps today's paths, "on" or unset allows the
// tiles, anything else is refused in one line.
TEST(LinearPlan, TheTilesVariableIsOnOrOff) {
  const ModelConfig c = load_model_config("8b-int4");
  const KernelInfo& k = resolve_kernel("auto", Scheme::int4);
  {
    const dbtest::EnvGuard v("DECODEBENCH_INT4_TILES", "off");
    const dbtest::EnvGuard fp16("DECODEBENCH_FP16_TILES", "off");  // the fp16 lm_head's own switch
    EXPECT_FALSE(int4_tiles_enabled());
    EXPECT_EQ(plan_linears(c, k, 2, 90, true)[MatrixKind::gate_up].batched, BatchedPath::gemv_columns);
    EXPECT_EQ(plan_linears(c, k, 8, 90, true)[MatrixKind::gate_up].batched, BatchedPath::skinny_gemm);
    EXPECT_EQ(plan_linears(c, k, 8, 90, true).weight_layout(),
              plan_linears(c, k, 1, 90, true).weight_layout());
  }
  for (const char* on : {static_cast<const char*>(nullptr), "", "on"}) {
    const dbtest::EnvGuard v("DECODEBENCH_INT4_TILES", on);
    EXPECT_TRUE(int4_tiles_enabled());
    EXPECT_EQ(plan_linears(c, k, 8, 90, true)[MatrixKind::gate_up].batched, BatchedPath::tiles_gemv);
  }
  const dbtest::EnvGuard v("DECODEBENCH_INT4_TILES", "0");
  try {
    plan_linears(c, k, 8, 90, true);
    ADD_FAILURE() << "a value other than on or off";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("DECODEBENCH_INT4_TILES=0: on or off", 0), 0u) << e.what();
  }
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
                         // The tiles GEMV on the matrices in a tiles layout (2 to 16 sequences). The columns
                         // GEMV up to the scheme's crossover, where it takes the matrix. Above: cuBLAS
                         // streams fp16 faster than the skinny GEMM; the skinny GEMM takes int8 and int4 in
                         // the nibble order up to one launch of sequences; the rest is an fp16 copy for
                         // cuBLAS.
                         if (l.layout == MatrixLayout::int4_tiles || l.layout == MatrixLayout::int8_tiles ||
                             l.layout == MatrixLayout::fp16_tiles)
                           EXPECT_EQ(l.batched, BatchedPath::tiles_gemv);
                         else if (batch <= gemv_columns_crossover(l.shape.scheme) &&
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
                     if (l.batched == BatchedPath::tiles_gemv)
                       EXPECT_TRUE(tiles_gemv_takes(l.shape, l.layout, batch, &why)) << why;
                   }
                 });
}

TEST(LinearPlan, TheColumnsGemvRunsTheFastKernelsLinearsUpToTheCrossover) {
  // int4 and int8 as without the tiles GEMV (their own tests are above).
  const dbtest::EnvGuard off("DECODEBENCH_TILES", "off");
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
  EXPECT_STREQ(to_string(BatchedPath::tiles_gemv), "tiles-gemv");
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
  const dbtest::EnvGuard v("DECODEBENCH_INT4_TILES", nullptr);
  for (const ModelConfig& c : models()) {
    SCOPED_TRACE(c.name);
    for (const KernelInfo* k : kernels_of(c.quant.scheme)) {
      const WeightLayout w = plan_linears(c, *k, 1, 90, true).weight_layout();
      // Only the fast int4 GEMV repacks; the lm_head where it is int4 too.
      const bool repacks = c.quant.scheme == Scheme::int4 && k->impl == LinearImpl::gemv_fast;
      const bool head = repacks && c.quant.lm_head == Scheme::int4;
      EXPECT_EQ(w.name(),
                repacks ? (head ? "int4-repacked" : "int4-repacked (lm_head canonical)") : "canonical")
          << k->name;
      // The same with or without the fallback and at every batch but the tiles GEMV's, 2 to 16,
      // where int4's matrices the tiles layout holds lie in it (every int4 preset's but
      // tiny-int4's, whose groups of 64 it does not hold): one set of device weights serves a
      // sweep's runs of a kernel at batch 1 and past 16, another from 2 to 16 (fp16.gemv's two:
      // its lm_head alone at 2, every matrix from 3).
      // int8's and fp16's fast kernel the same in their tiles layouts (every int8 and fp16 preset's
      // shapes), and the fp16 lm_head that the fast GEMV runs beside another scheme's blocks (any
      // kernel of theirs) in the fp16 tiles.
      const char* why = nullptr;
      const Scheme s = c.quant.scheme;
      const bool fast = k->impl == LinearImpl::gemv_fast;
      const MatrixShape qkv = matrix_shape(c, MatrixKind::qkv);
      const bool blocks_tiles = fast && (s == Scheme::int4   ? int4_tiles_hold(qkv, &why)
                                         : s == Scheme::int8 ? int8_tiles_hold(qkv, &why)
                                         : s == Scheme::fp16 ? fp16_tiles_hold(qkv, &why)
                                                             : false);
      const bool own_head = c.quant.lm_head == s;
      const bool head_tiles = own_head ? blocks_tiles
                                       : c.quant.lm_head == Scheme::fp16 &&
                                             fp16_tiles_hold(matrix_shape(c, MatrixKind::lm_head), &why);
      // At each batch: the blocks in their tiles from 2 (fp16's from 3), the fp16 lm_head from 2.
      for (int64_t batch : kBatches) {
        const bool blocks_b =
            blocks_tiles && batch >= tiles_gemv_min_batch(s, false) && batch <= kTilesGemvMaxBatch;
        const bool head_b = head_tiles && batch >= 2 && batch <= kTilesGemvMaxBatch;
        const std::string blocks_name = blocks_b  ? to_string(tiles_layout(s))
                                        : repacks ? "int4-nibbles"
                                                  : "canonical";
        const std::string name = !blocks_b && !head_b             ? w.name()
                                 : own_head && blocks_b == head_b ? blocks_name
                                 : head_b                         ? blocks_name + " (lm_head fp16-tiles)"
                                                                  : blocks_name + " (lm_head canonical)";
        const WeightLayout b = plan_linears(c, *k, batch, 90, true).weight_layout();
        EXPECT_EQ(b.name(), name) << k->name << " " << batch;
        EXPECT_EQ(plan_linears(c, *k, batch, 80, false).weight_layout(), b) << batch;
        EXPECT_EQ(b == w, !blocks_b && !head_b) << k->name << " " << batch;
      }
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
  // A layout that mixes the tiles with others names each kind's.
  WeightLayout mixed;
  mixed.matrices = {MatrixLayout::int4_tiles, MatrixLayout::int4_nibbles, MatrixLayout::int4_tiles,
                    MatrixLayout::int4_tiles, MatrixLayout::canonical};
  EXPECT_EQ(
      mixed.name(),
      "qkv_proj int4-tiles, o_proj int4-nibbles, gate_up_proj int4-tiles, down_proj int4-tiles, lm_head "
      "canonical");
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
          cublas = cublas || (batch > 1 && l.batched != BatchedPath::gemv_columns &&
                              l.batched != BatchedPath::tiles_gemv && l.batched != BatchedPath::skinny_gemm &&
                              l.batched != BatchedPath::gemv_per_sequence);
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
  LinearPlan p = plan_linears(c, resolve_kernel("auto", Scheme::int4), 17, 90, true);
  EXPECT_TRUE(p.kernel_shapes().empty());  // nothing timed yet
  ASSERT_EQ(p[MatrixKind::gate_up].batched, BatchedPath::skinny_gemm);
  p[MatrixKind::gate_up].skinny = SkinnyTiming{{4, 1, 1}, {4, 1, 2}, 34.31, 34.94};
  p[MatrixKind::qkv].skinny = SkinnyTiming{{2, 2, 2}, {4, 1, 2}, 14.5, 17.1};
  EXPECT_EQ(p.kernel_shapes(),
            (std::vector<std::string>{"qkv [6144 x 4096]: m2u2b2, 14.5 us (default m4u1b2 17.1 us)",
                                      "gate_up [28672 x 4096]: m4u1b1, 34.3 us (default m4u1b2 34.9 us)"}));
}

// The tiles GEMV's timed shapes go the same way, with their steps ahead where past 1.
TEST(LinearPlan, TheTilesShapesTimedAtLoadAreWhatTheResultRecords) {
  const dbtest::EnvGuard v("DECODEBENCH_TILES", nullptr);
  const dbtest::EnvGuard int4("DECODEBENCH_INT4_TILES", nullptr);
  const ModelConfig c = load_model_config("8b-int4");
  LinearPlan p = plan_linears(c, resolve_kernel("auto", Scheme::int4), 2, 90, true);
  EXPECT_TRUE(p.kernel_shapes().empty());
  ASSERT_EQ(p[MatrixKind::down].batched, BatchedPath::tiles_gemv);
  p[MatrixKind::down].tiles = TilesTiming{{1, 8, 2}, {1, 8, 1}, 12.24, 16.84};
  p[MatrixKind::qkv].tiles = TilesTiming{{1, 8, 1}, {1, 8, 1}, 6.39, 6.39};
  EXPECT_EQ(p.kernel_shapes(),
            (std::vector<std::string>{"qkv [6144 x 4096]: rt1w8, 6.4 us (default rt1w8 6.4 us)",
                                      "down_proj [4096 x 14336]: rt1w8a2, 12.2 us (default rt1w8 16.8 us)"}));
  EXPECT_EQ(tiles_shape_label({2, 4, 1}), "rt2w4");
  EXPECT_EQ(tiles_shape_label({2, 4, 2}), "rt2w4a2");
}

// config.batched_paths: none at batch 1; at a batch, every kind of matrix with its shape and
// path in step order, the path the plan gave it.
TEST(LinearPlan, TheBatchedPathsAreWhatTheResultRecords) {
  const dbtest::EnvGuard v("DECODEBENCH_INT4_TILES", nullptr);
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
  // The paths a growing batch reaches: the tiles GEMV from 2 to 16, the skinny GEMM past it,
  // the fp16 copy through cuBLAS at 256; the fp16 lm_head the tiles GEMV from 2 to 16 too.
  const std::vector<std::string> two =
      plan_linears(c, resolve_kernel("auto", Scheme::int4), 2, 90, true).batched_path_lines();
  EXPECT_EQ(two[2], "gate_up [28672 x 4096]: tiles-gemv");
  EXPECT_EQ(two[4], "lm_head [128256 x 4096]: tiles-gemv");
  EXPECT_EQ(plan_linears(c, resolve_kernel("auto", Scheme::int4), 16, 90, true).batched_path_lines()[2],
            "gate_up [28672 x 4096]: tiles-gemv");
  EXPECT_EQ(plan_linears(c, resolve_kernel("auto", Scheme::int4), 17, 90, true).batched_path_lines()[2],
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
  // And with the mixed-input GEMM where the plan may choose it (sm_90, 17 to 128 sequences).
  for (const ModelConfig& c : models())
    for (const KernelInfo* k : kernels_of(c.quant.scheme)) {
      const std::vector<MatrixLayout> listed = layouts_read(*k);
      for (const LinearChoice& l : plan_linears(c, *k, 64, 90, true, true).linears)
        if (l.impl == k->impl && l.shape.scheme == k->scheme)
          EXPECT_NE(std::find(listed.begin(), listed.end(), l.layout), listed.end())
              << c.name << " " << k->name;
    }
  EXPECT_EQ(layouts_read(resolve_kernel("int4.gemv", Scheme::int4)),
            (std::vector<MatrixLayout>{MatrixLayout::int4_nibbles, MatrixLayout::int4_fragments,
                                       MatrixLayout::int4_tiles, MatrixLayout::mixed_wgmma}));
  EXPECT_EQ(layouts_read(resolve_kernel("int8.gemv", Scheme::int8)),
            (std::vector<MatrixLayout>{MatrixLayout::canonical, MatrixLayout::int8_tiles,
                                       MatrixLayout::mixed_wgmma}));
  EXPECT_EQ(layouts_read(resolve_kernel("fp16.gemv", Scheme::fp16)),
            (std::vector<MatrixLayout>{MatrixLayout::canonical, MatrixLayout::fp16_tiles}));
}

TEST(LinearPlan, ListKernelsShowsTheBatchedPathsInTheOrderAGrowingBatchReachesThem) {
  for (const ModelConfig& c : models())
    for (const KernelInfo* k : kernels_of(c.quant.scheme))
      for (int cap : kCapabilities)
        for (bool mixed : {false, true}) {
          SCOPED_TRACE(c.name + " " + k->name + " sm_" + std::to_string(cap) + (mixed ? " mixed" : ""));
          const std::vector<BatchedPath> listed = batched_paths(*k);
          std::array<size_t, kMatrixKinds> reached{};
          for (int64_t batch : {2, 3, 4, 5, 8, 9, 16, 17, 64, 65, 128, 129, 256}) {
            const LinearPlan p = plan_linears(c, *k, batch, cap, true, mixed);
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
  EXPECT_EQ(
      batched_paths(resolve_kernel("fp16.gemv", Scheme::fp16)),
      (std::vector<BatchedPath>{BatchedPath::gemv_columns, BatchedPath::tiles_gemv, BatchedPath::cublas}));
  EXPECT_EQ(
      batched_paths(resolve_kernel("int4.gemv", Scheme::int4)),
      (std::vector<BatchedPath>{BatchedPath::tiles_gemv, BatchedPath::gemv_columns, BatchedPath::skinny_gemm,
                                BatchedPath::mixed_gemm, BatchedPath::fp16_copy_cublas}));
  EXPECT_EQ(
      batched_paths(resolve_kernel("int8.gemv", Scheme::int8)),
      (std::vector<BatchedPath>{BatchedPath::tiles_gemv, BatchedPath::gemv_columns, BatchedPath::skinny_gemm,
                                BatchedPath::mixed_gemm, BatchedPath::fp16_copy_cublas}));
  EXPECT_EQ(batched_paths(resolve_kernel("fp8.gemv", Scheme::fp8)),
            (std::vector<BatchedPath>{BatchedPath::gemv_columns, BatchedPath::skinny_gemm,
                                      BatchedPath::fp16_copy_cublas}));
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

TEST(ShapePredicates, TheTilesGemvTakesInt4InItsLayoutInGroupsOf128OrMoreUpTo16Sequences) {
  const char* why = nullptr;
  const MatrixShape o{Scheme::int4, 4096, 4096, 128, true};
  EXPECT_TRUE(int4_tiles_hold(o, &why));
  EXPECT_TRUE(tiles_gemv_takes(o, MatrixLayout::int4_tiles, 1, &why));
  EXPECT_TRUE(tiles_gemv_takes(o, MatrixLayout::int4_tiles, 16, &why));
  EXPECT_FALSE(tiles_gemv_takes(o, MatrixLayout::int4_tiles, 17, &why));
  EXPECT_STREQ(why, "the tiles GEMV takes 1 to 16 sequences");
  EXPECT_FALSE(tiles_gemv_takes(o, MatrixLayout::int4_nibbles, 2, &why));
  EXPECT_STREQ(why, "the tiles GEMV reads int4 in the tiles layout");
  // Rows of any count (the last tile padded), symmetric or not, groups of 128, 256, 512.
  for (int g : {128, 256, 512})
    for (bool zp : {true, false})
      EXPECT_TRUE(int4_tiles_hold({Scheme::int4, 4100, 1024, g, zp}, &why)) << g << " " << zp;
  // Groups below 128 or not a power of two, and other schemes, it does not hold.
  for (int g : {32, 64, 384}) {
    EXPECT_FALSE(int4_tiles_hold({Scheme::int4, 4096, 1536, g, true}, &why)) << g;
    EXPECT_STREQ(
        why, "the tiles layout needs a power-of-two group of at least 128 columns and whole groups a row");
  }
  EXPECT_FALSE(int4_tiles_hold({Scheme::int8, 4096, 4096, 0, false}, &why));
  EXPECT_STREQ(why, "the tiles layout holds int4 weights");
  // No other kernel reads it.
  EXPECT_FALSE(fast_gemv_takes(o, MatrixLayout::int4_tiles, &why));
  EXPECT_STREQ(why,
               "the fast GEMV reads int4 in the nibble order or the fragment layout, not the tiles layout");
  EXPECT_FALSE(gemv_columns_takes(o, MatrixLayout::int4_tiles, 2, &why));
  EXPECT_FALSE(skinny_gemm_takes(o, MatrixLayout::int4_tiles, &why));
  EXPECT_STREQ(to_string(MatrixLayout::int4_tiles), "int4-tiles");
}

TEST(ShapePredicates, TheTilesGemvTakesInt8InItsLayoutInWholeStepsOf64ColumnsUpTo16Sequences) {
  const char* why = nullptr;
  const MatrixShape o{Scheme::int8, 4100, 1024, 0, false};
  EXPECT_TRUE(int8_tiles_hold(o, &why));
  EXPECT_TRUE(tiles_hold(o, &why));
  EXPECT_EQ(tiles_layout(Scheme::int8), MatrixLayout::int8_tiles);
  EXPECT_EQ(tiles_layout(Scheme::int4), MatrixLayout::int4_tiles);
  EXPECT_EQ(tiles_layout(Scheme::fp8), MatrixLayout::canonical);
  EXPECT_TRUE(tiles_gemv_takes(o, MatrixLayout::int8_tiles, 2, &why));
  EXPECT_TRUE(tiles_gemv_takes(o, MatrixLayout::int8_tiles, 16, &why));
  EXPECT_FALSE(tiles_gemv_takes(o, MatrixLayout::int8_tiles, 17, &why));
  EXPECT_FALSE(tiles_gemv_takes(o, MatrixLayout::canonical, 2, &why));
  EXPECT_STREQ(why, "the tiles GEMV reads int8 in the int8 tiles layout");
  EXPECT_FALSE(tiles_gemv_takes(o, MatrixLayout::int4_tiles, 2, &why));
  EXPECT_TRUE(int8_tiles_hold({Scheme::int8, 200, 384, 0, false}, &why));
  EXPECT_FALSE(int8_tiles_hold({Scheme::int8, 4096, 4128, 0, false}, &why));  // 4128 = 64 * 64 + 32
  EXPECT_STREQ(why, "the int8 tiles layout needs whole steps of 64 columns a row");
  EXPECT_FALSE(int8_tiles_hold({Scheme::int4, 4096, 4096, 128, false}, &why));
  EXPECT_STREQ(why, "the int8 tiles layout holds int8 weights");
  // No other kernel reads it.
  EXPECT_FALSE(fast_gemv_takes(o, MatrixLayout::int8_tiles, &why));
  EXPECT_STREQ(why, "the fast GEMV reads int8 in the canonical layout, not the tiles layout");
  EXPECT_FALSE(gemv_columns_takes(o, MatrixLayout::int8_tiles, 2, &why));
  EXPECT_FALSE(skinny_gemm_takes(o, MatrixLayout::int8_tiles, &why));
  EXPECT_STREQ(to_string(MatrixLayout::int8_tiles), "int8-tiles");
}

TEST(ShapePredicates, TheTilesGemvTakesFp16InItsLayoutInWholeStepsOf32ColumnsUpTo16Sequences) {
  const char* why = nullptr;
  const MatrixShape o{Scheme::fp16, 4100, 1024, 0, false};
  EXPECT_TRUE(fp16_tiles_hold(o, &why));
  EXPECT_TRUE(tiles_hold(o, &why));
  EXPECT_EQ(tiles_layout(Scheme::fp16), MatrixLayout::fp16_tiles);
  EXPECT_TRUE(tiles_gemv_takes(o, MatrixLayout::fp16_tiles, 2, &why));
  EXPECT_TRUE(tiles_gemv_takes(o, MatrixLayout::fp16_tiles, 16, &why));
  EXPECT_FALSE(tiles_gemv_takes(o, MatrixLayout::fp16_tiles, 17, &why));
  EXPECT_FALSE(tiles_gemv_takes(o, MatrixLayout::canonical, 2, &why));
  EXPECT_STREQ(why, "the tiles GEMV reads fp16 in the fp16 tiles layout");
  EXPECT_TRUE(fp16_tiles_hold({Scheme::fp16, 200, 96, 0, false}, &why));
  EXPECT_FALSE(fp16_tiles_hold({Scheme::fp16, 4096, 4112, 0, false}, &why));  // 4112 = 128 * 32 + 16
  EXPECT_STREQ(why, "the fp16 tiles layout needs whole steps of 32 columns a row");
  EXPECT_FALSE(fp16_tiles_hold({Scheme::int8, 4096, 4096, 0, false}, &why));
  EXPECT_STREQ(why, "the fp16 tiles layout holds fp16 weights");
  // No other kernel reads it.
  EXPECT_FALSE(fast_gemv_takes(o, MatrixLayout::fp16_tiles, &why));
  EXPECT_STREQ(why, "the fast GEMV reads fp16 in the canonical layout, not the tiles layout");
  EXPECT_FALSE(gemv_columns_takes(o, MatrixLayout::fp16_tiles, 2, &why));
  EXPECT_FALSE(skinny_gemm_takes(o, MatrixLayout::fp16_tiles, &why));
  EXPECT_STREQ(to_string(MatrixLayout::fp16_tiles), "fp16-tiles");
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
// takes run it from 17 to 128 sequences on compute capability 9.0 where the build has it
// (plan_linears' mixed_gemm), in its layout; at 1 to 16 sequences, above 128, on another GPU or
// without it, the plan is the one without the kernel (the tiles GEMV to 16, the skinny GEMM to
// 64, the fp16 copy + cuBLAS above). Its layout then depends on the batch, so that engines at
// 16, 17, 128 and 129 sequences do not share weights.
TEST(LinearPlan, TheMixedGemmRunsInt4AndInt8From17To128SequencesOnHopper) {
  static_assert(kMixedGemmMinBatch == kTilesGemvMaxBatch + 1,
                "the mixed GEMM takes over from the tiles GEMV");
  static_assert(kMixedGemmMaxBatch == 128, "above 128 the fp16 copy + cuBLAS is faster in the step");
  const dbtest::EnvGuard unset("DECODEBENCH_MIXED_GEMM", nullptr);
  for (const char* name : {"8b-int4", "8b-int8", "tiny-int4", "tiny-int8"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = load_model_config(name);
    const KernelInfo& k = resolve_kernel("auto", c.quant.scheme);
    for (int64_t batch : {int64_t{17}, int64_t{32}, int64_t{64}, int64_t{65}, int64_t{128}}) {
      SCOPED_TRACE(batch);
      const LinearPlan p = plan_linears(c, k, batch, 90, true, true);
      for (const LinearChoice& l : p.linears) {
        const bool quantized = l.shape.scheme == Scheme::int4 || l.shape.scheme == Scheme::int8;
        if (quantized) {
          EXPECT_EQ(l.batched, BatchedPath::mixed_gemm) << to_string(l.kind);
          EXPECT_EQ(l.layout, MatrixLayout::mixed_wgmma) << to_string(l.kind);
        } else {
          EXPECT_NE(l.batched, BatchedPath::mixed_gemm) << to_string(l.kind);
        }
      }
      EXPECT_EQ(p.fp16_copy_elements(), 0);  // no fp16 copy left
      // Without the kernel (not built) or on another GPU: the skinny GEMM to 64 and the fp16
      // copy above, in the layout of batch 1.
      for (const LinearPlan& q :
           {plan_linears(c, k, batch, 90, true, false), plan_linears(c, k, batch, 80, true, true),
            plan_linears(c, k, batch, 89, true, true), plan_linears(c, k, batch, 100, true, true)}) {
        EXPECT_EQ(q[MatrixKind::gate_up].batched,
                  batch <= kSkinnyMaxBatch ? BatchedPath::skinny_gemm : BatchedPath::fp16_copy_cublas);
        EXPECT_EQ(q.weight_layout(), plan_linears(c, k, 1, 90, true, true).weight_layout());
      }
    }
    // 1 to 16 and above 128 sequences the plan is the one without the kernel: the tiles GEMV (or,
    // for tiny-int4's groups of 64, the columns GEMV and the skinny GEMM) at 2 to 16, the fp16
    // copy above 128.
    for (int64_t batch : {int64_t{1}, int64_t{2}, int64_t{16}, int64_t{129}, int64_t{256}}) {
      const LinearPlan p = plan_linears(c, k, batch, 90, true, true), q = plan_linears(c, k, batch, 90, true);
      for (MatrixKind kind : kAllMatrixKinds) {
        EXPECT_EQ(p[kind].batched, q[kind].batched) << batch;
        EXPECT_EQ(p[kind].layout, q[kind].layout) << batch;
        EXPECT_NE(p[kind].batched, BatchedPath::mixed_gemm) << batch;
      }
    }
    EXPECT_EQ(plan_linears(c, k, 129, 90, true, true)[MatrixKind::gate_up].batched,
              BatchedPath::fp16_copy_cublas);
    const WeightLayout mixed = plan_linears(c, k, 17, 90, true, true).weight_layout();
    EXPECT_EQ(mixed, plan_linears(c, k, 128, 90, true, true).weight_layout());
    EXPECT_NE(mixed, plan_linears(c, k, 16, 90, true, true).weight_layout());
    EXPECT_NE(mixed, plan_linears(c, k, 129, 90, true, true).weight_layout());
    // The 8b presets' lm_head is fp16 (cuBLAS, canonical); the tiny ones' is quantized and runs it too.
    EXPECT_EQ(mixed.name(),
              c.quant.lm_head == Scheme::fp16 ? "mixed-wgmma (lm_head canonical)" : "mixed-wgmma");
    // The slow paths keep theirs.
    for (const char* kernel : {"naive", "dequant-cublas"}) {
      const LinearPlan p = plan_linears(
          c, resolve_kernel(fmt::format("{}.{}", to_string(c.quant.scheme), kernel), c.quant.scheme), 64, 90,
          true, true);
      for (const LinearChoice& l : p.linears) EXPECT_NE(l.batched, BatchedPath::mixed_gemm) << kernel;
    }
  }
  // 8b-int4's gate/up at the batches around the ranges' ends.
  {
    const ModelConfig c = load_model_config("8b-int4");
    const KernelInfo& k = resolve_kernel("auto", Scheme::int4);
    const std::pair<int64_t, BatchedPath> want[] = {
        {16, BatchedPath::tiles_gemv}, {17, BatchedPath::mixed_gemm},  {64, BatchedPath::mixed_gemm},
        {65, BatchedPath::mixed_gemm}, {128, BatchedPath::mixed_gemm}, {129, BatchedPath::fp16_copy_cublas}};
    for (const auto& [batch, path] : want) {
      const LinearPlan p = plan_linears(c, k, batch, 90, true, true);
      EXPECT_EQ(p[MatrixKind::gate_up].batched, path) << batch;
      if (path == BatchedPath::mixed_gemm)
        EXPECT_EQ(p.batched_path_lines()[2], "gate_up [28672 x 4096]: mixed-gemm") << batch;
    }
  }
  // fp8 and fp16 never take it.
  for (const char* name : {"8b-fp8", "8b-fp16"})
    for (int64_t batch : {int64_t{17}, int64_t{64}, int64_t{128}}) {
      const ModelConfig c = load_model_config(name);
      const LinearPlan p = plan_linears(c, resolve_kernel("auto", c.quant.scheme), batch, 90, true, true);
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

// DECODEBENCH_MIXED_GEMM is read at every plan: "off" keeps the paths without the kernel (the
// skinny GEMM to 64 sequences, the fp16 copy + cuBLAS above) and the layout of batch 1, for
// both schemes; "on", empty or unset allows it; anything else is refused in one line.
TEST(LinearPlan, TheMixedGemmVariableIsOnOrOff) {
  for (const char* name : {"8b-int4", "8b-int8"}) {
    SCOPED_TRACE(name);
    const ModelConfig c = load_model_config(name);
    const KernelInfo& k = resolve_kernel("auto", c.quant.scheme);
    {
      const dbtest::EnvGuard v("DECODEBENCH_MIXED_GEMM", "off");
      EXPECT_FALSE(mixed_gemm_enabled());
      for (int64_t batch : {int64_t{17}, int64_t{64}, int64_t{65}, int64_t{128}}) {
        const LinearPlan p = plan_linears(c, k, batch, 90, true, true);
        EXPECT_EQ(p[MatrixKind::gate_up].batched,
                  batch <= kSkinnyMaxBatch ? BatchedPath::skinny_gemm : BatchedPath::fp16_copy_cublas)
            << batch;
        EXPECT_EQ(p.weight_layout(), plan_linears(c, k, 1, 90, true, true).weight_layout()) << batch;
      }
      // The tiles GEMV keeps its range.
      EXPECT_EQ(plan_linears(c, k, 16, 90, true, true)[MatrixKind::gate_up].batched, BatchedPath::tiles_gemv);
    }
    for (const char* on : {static_cast<const char*>(nullptr), "", "on"}) {
      const dbtest::EnvGuard v("DECODEBENCH_MIXED_GEMM", on);
      EXPECT_TRUE(mixed_gemm_enabled());
      EXPECT_EQ(plan_linears(c, k, 64, 90, true, true)[MatrixKind::gate_up].batched, BatchedPath::mixed_gemm);
    }
    // The tiles switch does not touch it.
    {
      const dbtest::EnvGuard v("DECODEBENCH_TILES", "off");
      EXPECT_EQ(plan_linears(c, k, 17, 90, true, true)[MatrixKind::gate_up].batched, BatchedPath::mixed_gemm);
    }
    const dbtest::EnvGuard v("DECODEBENCH_MIXED_GEMM", "fp16-copy");
    try {
      plan_linears(c, k, 64, 90, true, true);
      ADD_FAILURE() << "a value other than on or off";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("DECODEBENCH_MIXED_GEMM=fp16-copy: on or off", 0), 0u)
          << e.what();
    }
  }
}
