// The batched prefill (Engine::prefill) against the step path: the same KV cache within the
// arithmetic's rounding and the same tokens after it, for every kernel's weight layout, head
// sizes on every attention kernel (on an H200, an fp16 cache with 128-dim heads runs the
// wgmma kernel), chunks that split the prompt, and an external adapter; the dequantization of
// both repacked int4 layouts against the canonical one; and the prefill attention's Hopper
// kernel against the exact causal softmax and the mma.sync kernel, chunk by chunk.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "attention_reference.h"
#include "decodebench/adapter.h"
#include "decodebench/cpu_reference.h"
#include "decodebench/half.h"
#include "decodebench/quant.h"
#include "engine.cuh"
#include "gpu_common.cuh"
#include "gpu_engine_trace.cuh"
#include "prefill.cuh"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;
using dbtest::DeviceBuffer;
using dbtest::DeviceQuant;
using dbtest::run_engine;
using dbtest::tiny;
using dbtest::Trace;

namespace {

// As run_engine, with the prompt through the batched prefill in chunks of `chunk` rows.
Trace run_batched(Engine& e, int64_t context, int64_t steps, int64_t chunk) {
  const int64_t vocab = e.config().vocab_size;
  std::vector<int32_t> prompt(static_cast<size_t>(context));
  for (int64_t i = 0; i < context; ++i) prompt[static_cast<size_t>(i)] = prompt_token(i, vocab);
  e.prefill(prompt, chunk);
  e.set_first_position(context);
  e.set_inputs(context, {prompt_token(context, vocab)});
  Trace t;
  for (int64_t i = 0; i < steps; ++i) {
    e.launch_graph();
    t.logits.push_back(e.logits(0));
    t.tokens.push_back(e.next_tokens()[0]);
  }
  return t;
}

using db_test::max_rel_err;

std::vector<float> cache_rows(const __half* cache, int64_t rows, int64_t kv_dim) {
  std::vector<uint16_t> h(static_cast<size_t>(rows * kv_dim));
  CUDA_CHECK(cudaMemcpy(h.data(), cache, 2 * h.size(), cudaMemcpyDeviceToHost));
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = f16_to_f32(h[i]);
  return f;
}

// The two paths round differently (GEMM against GEMV sums, fp16 queries against fp32 ones,
// one softmax against split ones), each within the engine's bound against the CPU
// reference (gpu_test_engine.cu, 1e-2 of the largest logit); so are they against each other.
constexpr double kBound = 1e-2;

// The step path's tokens after the batched prefill, and its logits and cache within kBound.
// `dequant_chunk_bytes`: the prefill engine's blocks of fp16 copies (0: the default).
void expect_same_as_steps(const WeightSource& ws, const KernelInfo& kernel, int64_t context, int64_t chunk,
                          const std::string& what, int64_t dequant_chunk_bytes = 0) {
  const int64_t steps = 16;
  Engine s(ws, kernel, context + steps, true);
  Engine b(load_device_weights(ws, kernel, context + steps, true), kernel, context + steps, true, 1,
           std::nullopt, dequant_chunk_bytes);
  const Trace step = run_engine(s, context, steps, true);
  const Trace batched = run_batched(b, context, steps, chunk);
  const ModelConfig& c = ws.config();
  for (int64_t l : {int64_t{0}, c.num_hidden_layers - 1}) {
    const DeviceLayer& ls = s.device_layers()[l];
    const DeviceLayer& lb = b.device_layers()[l];
    EXPECT_LE(
        max_rel_err(cache_rows(lb.k_cache, context, c.kv_dim()), cache_rows(ls.k_cache, context, c.kv_dim())),
        kBound)
        << what << " K of layer " << l;
    EXPECT_LE(
        max_rel_err(cache_rows(lb.v_cache, context, c.kv_dim()), cache_rows(ls.v_cache, context, c.kv_dim())),
        kBound)
        << what << " V of layer " << l;
  }
  for (int64_t i = 0; i < steps; ++i) {
    ASSERT_LE(max_rel_err(batched.logits[i], step.logits[i]), kBound) << what << " step " << i;
    const std::vector<float>& ref = step.logits[i];
    std::vector<float> sorted = ref;
    std::nth_element(sorted.begin(), sorted.begin() + 1, sorted.end(), std::greater<float>());
    ASSERT_EQ(batched.tokens[i], step.tokens[i])
        << what << " step " << i << " (the step path's top-2 gap there: " << sorted[0] - sorted[1] << ")";
  }
}

struct PrefillCase {
  const char* preset;
  Scheme scheme;
  const char* kernel;
  int64_t context, chunk;
  int64_t head_dim = 0, heads = 0, kv_heads = 0;  // 0: the preset's
  bool qwen3 = false;                             // the preset's shapes with qwen3's q/k norms
};

class PrefillVsSteps : public ::testing::TestWithParam<PrefillCase> {};

TEST_P(PrefillVsSteps, SameCacheSameTokens) {
  REQUIRE_GPU();
  const PrefillCase p = GetParam();
  ModelConfig c = tiny(p.scheme, p.preset);
  if (p.qwen3) c.arch = Arch::qwen3;
  if (p.head_dim) {
    c.head_dim = p.head_dim;
    c.num_attention_heads = p.heads;
    c.num_key_value_heads = p.kv_heads;
  }
  validate(c, "test");
  const WeightSource ws(c, "", 11);
  expect_same_as_steps(ws, resolve_kernel(p.kernel, p.scheme), p.context, p.chunk, p.kernel);
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, PrefillVsSteps,
    ::testing::Values(
        // every weight layout the GEMMs dequantize: fp16, int8, int4 canonical and repacked
        PrefillCase{"tiny", Scheme::fp16, "auto", 300, 64},
        PrefillCase{"tiny", Scheme::fp16, "fp16.cublas", 300, 64},
        PrefillCase{"tiny", Scheme::int8, "auto", 300, 64},
        PrefillCase{"tiny", Scheme::int8, "int8.dequant-cublas", 200, 0},
        PrefillCase{"tiny", Scheme::int4, "auto", 300, 64},
        PrefillCase{"tiny", Scheme::int4, "int4.naive", 300, 100},
        PrefillCase{"tiny", Scheme::int4, "int4.dequant-cublas", 130, 0},
        // one token; one chunk; chunks of one row
        PrefillCase{"tiny", Scheme::fp16, "auto", 1, 0}, PrefillCase{"tiny", Scheme::fp16, "auto", 1000, 0},
        PrefillCase{"tiny", Scheme::int4, "auto", 40, 1},
        // qwen2's biases, qwen3's q/k norms
        PrefillCase{"tiny-qwen2", Scheme::int4, "auto", 300, 64},
        PrefillCase{"tiny-qwen2", Scheme::fp16, "auto", 150, 0},
        PrefillCase{"tiny", Scheme::fp16, "auto", 300, 64, 0, 0, 0, true},
        PrefillCase{"tiny", Scheme::int8, "auto", 150, 0, 0, 0, 0, true},
        // head sizes: the tensor-core kernel (64, 80, 96, 128) and the plain one (24, 160, 256)
        PrefillCase{"tiny", Scheme::fp16, "auto", 200, 64, 24, 4, 2},
        PrefillCase{"tiny", Scheme::fp16, "auto", 200, 64, 96, 4, 1},
        PrefillCase{"tiny", Scheme::fp16, "auto", 200, 0, 80, 6, 2},
        PrefillCase{"tiny", Scheme::fp16, "auto", 200, 64, 160, 2, 2},
        PrefillCase{"tiny", Scheme::fp16, "auto", 300, 128, 256, 4, 2, true},
        PrefillCase{"tiny", Scheme::fp16, "auto", 300, 0, 64, 16, 1},
        PrefillCase{"tiny", Scheme::int4, "auto", 300, 64, 128, 12, 2},
        // 128-dim heads on an fp16 cache (the wgmma kernel on an H100/H200): chunks from p0 =
        // 0, 300, 600, whole and ragged query tiles
        PrefillCase{"tiny", Scheme::fp16, "auto", 700, 300, 128, 8, 2}),
    [](const auto& info) {
      const PrefillCase& p = info.param;
      std::string k = p.kernel;
      std::replace_if(
          k.begin(), k.end(), [](char ch) { return ch == '.' || ch == '-'; }, '_');
      std::string preset = p.preset;
      std::replace(preset.begin(), preset.end(), '-', '_');
      return fmt::format("{}{}_{}_{}_ctx{}_chunk{}_hd{}", preset, p.qwen3 ? "_qwen3" : "",
                         to_string(p.scheme), k, p.context, p.chunk, p.head_dim);
    });

// An external LoRA adapter: the prefill adds its low-rank term to every adapted linear.
TEST(Prefill, ExternalAdapterGivesTheStepPathsTokens) {
  REQUIRE_GPU();
  for (Scheme s : {Scheme::fp16, Scheme::int4}) {
    const ModelConfig c = tiny(s);
    const Adapter a = load_adapter("synthetic:rank=8,alpha=24", c, 5, AdapterMode::external);
    const WeightSource ws(c, "", 5, &a);
    expect_same_as_steps(ws, resolve_kernel("auto", s), 200, 64, fmt::format("{} external", to_string(s)));
  }
}

// The prefill's quantized GEMMs go through fp16 copies a block of rows at a time, as the
// batched step's: in blocks that cut every matrix of the tiny model into several (24 rows of
// 128 inputs, 8 of 256), from every layout, the step path's tokens.
TEST(Prefill, Fp16CopiesInBlocksOfRowsGiveTheStepPathsTokens) {
  REQUIRE_GPU();
  for (const auto& [scheme, kernel] :
       {std::pair{Scheme::int8, "auto"}, std::pair{Scheme::fp8, "auto"}, std::pair{Scheme::int4, "auto"},
        std::pair{Scheme::int4, "int4.naive"}, std::pair{Scheme::int8, "int8.dequant-cublas"}}) {
    const WeightSource ws(tiny(scheme), "", 11);
    expect_same_as_steps(ws, resolve_kernel(kernel, scheme), 200, 64,
                         fmt::format("{} {} in blocks", to_string(scheme), kernel), 24 * 128 * 2);
  }
}

// The repacked int4 layouts (the nibble order, the tensor-core fragments) dequantize to the
// canonical layout's values exactly, for every scale and zero point.
TEST(Prefill, RepackedInt4DequantizesLikeTheCanonicalLayout) {
  REQUIRE_GPU();
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 0.05f);
  for (bool fragments : {false, true})
    for (bool zero_point : {false, true}) {
      const int64_t rows = 24, cols = 2048;
      std::vector<float> w(static_cast<size_t>(rows * cols));
      for (float& v : w) v = nd(rng);
      const QuantMatrix h = quantize_matrix(w.data(), rows, cols, Scheme::int4, 128, zero_point);
      DeviceQuant canon(h), packed(h);
      repack_int4(packed.m, nullptr, fragments);
      ASSERT_EQ(packed.m.int4_frag, fragments);
      DeviceBuffer<uint16_t> want(static_cast<size_t>(rows * cols)), got(static_cast<size_t>(rows * cols));
      got.poison();
      dequantize_any_to_f16(canon.m, reinterpret_cast<__half*>(want.p), nullptr);
      dequantize_any_to_f16(packed.m, reinterpret_cast<__half*>(got.p), nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      EXPECT_EQ(got.download(), want.download()) << "fragments " << fragments << " zero point " << zero_point;
    }
}

// The row-wise RMSNorm (the prefill's and the batched step's) past the 8192 values a row its
// 1024 threads hold in registers (a user's config with a hidden size above 8192 takes the
// loop that reads the row twice), against the norm in double precision. The kernel's sum of
// squares is a float sum of depth at most ~30 (a thread's share, then two warp trees), so
// its relative error is under 30 * 2^-24; with rsqrtf's 2 ulp the float x * inv * w is within
// ~4e-6 of the exact value, and the fp16 rounding of it lands on the exact value's nearest
// fp16 or its neighbour: at most one fp16 ulp apart.
TEST(RmsnormRows, RowsPastTheRegisterPathMatchTheNormInDoublePrecision) {
  REQUIRE_GPU();
  std::mt19937 rng(7);
  std::normal_distribution<float> xd(0.f, 2.f);
  std::uniform_real_distribution<float> wd(0.25f, 1.75f);
  const float eps = 1e-5f;
  const int64_t rows = 3;
  for (int64_t n : {int64_t{8192}, int64_t{8193}, int64_t{12288}, int64_t{16384 + 5}, int64_t{53248}}) {
    std::vector<float> x(static_cast<size_t>(rows * n));
    for (float& v : x) v = xd(rng);
    std::vector<uint16_t> w(static_cast<size_t>(n));
    for (uint16_t& v : w) v = f32_to_f16(wd(rng));
    DeviceBuffer<float> dx(x);
    DeviceBuffer<uint16_t> dw(w);
    DeviceBuffer<uint16_t> dy(static_cast<size_t>(rows * n));
    dy.poison();
    rmsnorm_rows(dx.p, reinterpret_cast<const __half*>(dw.p), eps, rows, n, reinterpret_cast<__half*>(dy.p),
                 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> y = dy.download();
    int64_t off = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += double{x[r * n + i]} * x[r * n + i];
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
      for (int64_t i = 0; i < n; ++i) {
        const double exact = x[r * n + i] * inv * f16_to_f32(w[i]);
        const double got = f16_to_f32(y[r * n + i]);
        const double ulp = std::ldexp(1.0, std::max(std::ilogb(std::fabs(exact) + 1e-30), -14) - 10);
        if (!(std::fabs(got - exact) <= 1.5 * ulp) && off++ < 5)
          ADD_FAILURE() << "n " << n << " row " << r << " element " << i << ": " << got << " against "
                        << exact;
      }
    }
    EXPECT_EQ(off, 0) << "n " << n;
  }
}

// The prefill attention's Hopper kernel (prefill_attention_wgmma) on chunks from positions off
// and on its 128-position tiles, ragged and whole, over caches longer than the chunk whose
// positions past it hold NaN, at grouped-query ratios from 1 to 16: within tolerance_of of the
// exact causal softmax on a sample of rows (every head, every dim, the last row among them),
// and within twice it of the mma.sync kernel on every element. Both tolerances follow the
// arithmetic (tests/attention_reference.h): fp16 P, fp32 sums, ex2.approx, fp16 output.
struct WgmmaCase {
  int64_t p0, rows;
  int heads, kv_heads;
  WgmmaPipeline pipeline;
};

class PrefillAttentionWgmma : public ::testing::TestWithParam<WgmmaCase> {};

TEST_P(PrefillAttentionWgmma, MatchesTheCausalSoftmaxAndTheMmaKernel) {
  REQUIRE_ARCH_CODE(90, prefill_attention_wgmma_built(), "the wgmma attention kernel");
  const WgmmaCase c = GetParam();
  if (!prefill_wgmma_pipeline_built(c.pipeline))
    GTEST_SKIP() << "the serial pipeline is a lab variant (builds with -DDECODEBENCH_DEV=ON)";
  constexpr int hd = 128;
  const int64_t positions = c.p0 + c.rows + 77;
  const size_t nq = size_t(c.rows) * c.heads * hd, nkv = size_t(positions) * c.kv_heads * hd;
  const size_t written = size_t(c.p0 + c.rows) * c.kv_heads * hd;
  std::mt19937 rng(static_cast<uint32_t>(c.p0 * 7 + c.rows + c.heads));
  std::uniform_real_distribution<float> d2(-2.f, 2.f), d1(-1.f, 1.f);
  std::vector<uint16_t> q(nq), k(nkv), v(nkv);
  for (auto& x : q) x = f32_to_f16(d2(rng) / std::sqrt(float(hd)));  // as prefill_qkv scales it
  for (size_t i = 0; i < nkv; ++i) {
    k[i] = i < written ? f32_to_f16(d2(rng)) : uint16_t{0x7FFF};  // NaN past the chunk
    v[i] = i < written ? f32_to_f16(d1(rng)) : uint16_t{0x7FFF};
  }
  DeviceBuffer<uint16_t> dq(q), dk(k), dv(v), out_w(nq), out_m(nq);
  out_w.poison();
  out_m.poison();
  PrefillAttentionArgs a;
  a.q = reinterpret_cast<const __half*>(dq.p);
  a.k_cache = reinterpret_cast<const __half*>(dk.p);
  a.v_cache = reinterpret_cast<const __half*>(dv.p);
  a.p0 = c.p0;
  a.rows = c.rows;
  a.heads = c.heads;
  a.kv_heads = c.kv_heads;
  a.head_dim = hd;
  a.cache_positions = positions;
  a.kv = KvScheme::fp16;
  a.out = reinterpret_cast<__half*>(out_w.p);
  prefill_attention_wgmma(a, nullptr, c.pipeline);
  a.out = reinterpret_cast<__half*>(out_m.p);
  prefill_attention_mma(a, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> got = out_w.download(), mma = out_m.download();

  std::vector<float> qf(nq), kf(nkv), vf(nkv);
  for (size_t i = 0; i < nq; ++i) qf[i] = f16_to_f32(q[i]);
  for (size_t i = 0; i < nkv; ++i) kf[i] = f16_to_f32(k[i]);
  for (size_t i = 0; i < nkv; ++i) vf[i] = f16_to_f32(v[i]);
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < c.rows; r += std::max<int64_t>(1, c.rows / 48)) rows.push_back(r);
  if (rows.back() != c.rows - 1) rows.push_back(c.rows - 1);
  const int workers = static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  std::vector<int64_t> bad(workers, 0);
  std::vector<std::string> first(workers);
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      int item = 0;
      for (int64_t row : rows)
        for (int h = 0; h < c.heads; ++h, ++item) {
          if (item % workers != w) continue;
          const dbtest::RefRow r = dbtest::reference_row(qf, kf, vf, c.heads, c.kv_heads, hd, c.p0, row, h);
          for (int d = 0; d < hd; ++d) {
            const double g = f16_to_f32(got[(size_t(row) * c.heads + h) * hd + d]);
            const double tol = dbtest::tolerance_of(r.o[d], r.abs[d], r.l, r.qk_abs, r.keys, hd);
            if (!(std::fabs(g - r.o[d]) <= tol) && bad[w]++ == 0)
              first[w] = fmt::format("row {} head {} dim {}: {} against {} (tolerance {})", row, h, d, g,
                                     r.o[d], tol);
          }
        }
    });
  for (auto& t : pool) t.join();
  for (int w = 0; w < workers; ++w) EXPECT_EQ(bad[w], 0) << "against the cpu, first: " << first[w];

  // The mma.sync kernel, every element: both within tolerance_of at sum p|v|/l <= max|v| = 1,
  // l >= 1, sum|q k| <= 128 * 2 * 2 / sqrt(128).
  const double qk_abs_max = hd * 2.0 * 2.0 / std::sqrt(double(hd));
  int64_t off = 0;
  for (size_t i = 0; i < nq; ++i) {
    const double want = f16_to_f32(mma[i]), g = f16_to_f32(got[i]);
    const double tol = dbtest::kernels_tolerance(want, 1.0, qk_abs_max, c.p0 + c.rows, hd);
    if (!(std::fabs(g - want) <= tol) && off++ < 5)
      ADD_FAILURE() << "element " << i << " (row " << i / (size_t(c.heads) * hd) << "): " << g
                    << " against the mma kernel's " << want;
  }
  EXPECT_EQ(off, 0);
}

std::vector<WgmmaCase> wgmma_cases() {
  // Query heads / kv heads: 8b's 32/8, none shared, 8 and 16 a kv head, 2 a kv head.
  const std::pair<int, int> groups[] = {{32, 8}, {8, 8}, {32, 4}, {16, 16}, {16, 1}, {4, 2}};
  std::vector<WgmmaCase> cases;
  for (WgmmaPipeline pipeline : {WgmmaPipeline::overlap, WgmmaPipeline::serial}) {
    int i = 0;
    for (int64_t p0 : {0, 128, 300, 4096})
      for (int64_t rows : {1, 127, 128, 333, 4096}) {
        const auto [heads, kv_heads] = groups[i++ % 6];
        cases.push_back({p0, rows, heads, kv_heads, pipeline});
      }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Chunks, PrefillAttentionWgmma, ::testing::ValuesIn(wgmma_cases()),
                         [](const auto& info) {
                           const WgmmaCase& c = info.param;
                           return fmt::format("{}_p0_{}_rows_{}_heads_{}_kv_{}",
                                              c.pipeline == WgmmaPipeline::overlap ? "overlap" : "serial",
                                              c.p0, c.rows, c.heads, c.kv_heads);
                         });

}  // namespace
