// The prefill's causal attention on Hopper (kernels/prefill_wgmma.cu, prefill_attention_wgmma)
// checked and timed beside the mma.sync kernel (prefill_attention_mma), both from db_kernels (lab
// tool; built where db_kernels has the sm_90a kernel):
//   build-gpu/decodebench_flash_wgmma_bench [--check | --time]
// A chunk of `rows` queries at positions p0 .. p0 + rows - 1 over an fp16 cache, head_dim 128:
// Q [rows][heads][128] already scaled by 1/sqrt(128) (as prefill_qkv leaves it), K and V in the
// cache layout [positions][kv_heads][128], O [rows][heads][128]; the query at position p attends
// to positions 0 .. p, query head h reads kv head h / (heads / kv_heads). The kernel's design is
// in its file's header.
//
// Both of the kernel's pipelines (prefill.cuh WgmmaPipeline: overlap, the product's; serial, the
// lab's) run every check and every timing.
// Checks (--check, and by default), each against the exact causal softmax: a CPU
// double-precision reference (tests/attention_reference.h) from p0 = 0 at T = 128 (one tile),
// 300 (ragged: TMA zero fill past the end) and 1024, with heads 4 and kv_heads 1 and 2, every
// row; T = 4096 with heads 32 and kv_heads 8 against the CPU on every 41st row and against the
// mma.sync kernel on every element; chunks from p0 = 300 (the diagonal off the tile grid) and
// 4096 of 333 rows (heads 4, kv_heads 1, every row) and of 4096 rows (heads 32, kv_heads 8, every
// 41st row and the mma kernel on every element). The cache holds 77 positions past the chunk,
// filled with NaN: a key read past the chunk's last position poisons the output. The tolerance
// follows the arithmetic (tolerance_of): P rounded to fp16 (2^-11 a term), the S dot product's
// fp32 sum (128 2^-23 sum|q k| in the exponent), ex2.approx and its argument's rounding (2^-16
// relative), the fp32 sums over n keys (n 2^-23 in numerator and denominator), fp16 subnormals
// of P (2^-25 a term), the fp16 output (2^-11 |o| + 2^-24). A misplaced or unmasked key moves a
// small chunk's output by far more.
// Timing (--time, and by default): one chunk from p0 = 0 of T = 4096, 16384, 32768, 65536 rows
// with heads 32, kv_heads 8: the median of several launches between CUDA events after 3
// untimed ones, beside the mma.sync kernel on the same data; then the prefill's own pattern,
// 131000 positions in chunks of 4096 (p0 = 0, 4096, ...), one timed sweep after an untimed one,
// the wgmma kernel alone (its max_abs_diff_between_kernels -1: not compared). Causal FLOPs 4
// (T (T + 1) / 2) 128 heads; one JSON line a measurement. Exit status: 0 when every check passes,
// 1 on a failed check or an error, 2 without an sm_90 GPU.
//
// Prediction (H200): every check passes; >= 500 TFLOP/s at 32768 (the mma kernel ~204). Kill:
// below 400 TFLOP/s at 32768 after two device calls (results/lab/flash-wgmma-2026-12-04/).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "attention_reference.h"
#include "bench_timing.cuh"
#include "common.cuh"
#include "prefill.cuh"

using namespace db;
using namespace db::cuda;
using dbtest::reference_row;
using dbtest::RefRow;
using dbtest::tolerance_of;

namespace {

constexpr int kHd = 128;

// A chunk of `rows` queries from position p0 over a cache of `positions` >= p0 + rows.
struct Attention {
  int64_t p0, rows, positions;
  int heads, kv_heads;
  __half *q, *k, *v, *o, *o_ref;  // [rows, heads, 128], [positions, kv_heads, 128] x2, [rows, heads, 128] x2
};

Attention make_attention(int64_t p0, int64_t rows, int64_t positions, int heads, int kv_heads) {
  if (rows < 1 || p0 < 0 || positions < p0 + rows || heads < 1 || kv_heads < 1 || heads % kv_heads)
    fail("shape p0 {} rows {} positions {} heads {} kv_heads {}: heads a multiple of kv_heads", p0, rows,
         positions, heads, kv_heads);
  Attention a{p0, rows, positions, heads, kv_heads, nullptr, nullptr, nullptr, nullptr, nullptr};
  const size_t nq = size_t(rows) * heads * kHd, nkv = size_t(positions) * kv_heads * kHd;
  CUDA_CHECK(cudaMalloc(&a.q, nq * sizeof(__half)));
  CUDA_CHECK(cudaMalloc(&a.k, nkv * sizeof(__half)));
  CUDA_CHECK(cudaMalloc(&a.v, nkv * sizeof(__half)));
  CUDA_CHECK(cudaMalloc(&a.o, nq * sizeof(__half)));
  CUDA_CHECK(cudaMalloc(&a.o_ref, nq * sizeof(__half)));
  return a;
}

void free_attention(Attention& a) {
  for (__half* p : {a.q, a.k, a.v, a.o, a.o_ref}) CUDA_CHECK(cudaFree(p));
}

PrefillAttentionArgs args_of(const Attention& a, __half* out) {
  PrefillAttentionArgs args;
  args.q = a.q;
  args.k_cache = a.k;
  args.v_cache = a.v;
  args.p0 = a.p0;
  args.rows = a.rows;
  args.heads = a.heads;
  args.kv_heads = a.kv_heads;
  args.head_dim = kHd;
  args.out = out;
  args.cache_positions = a.positions;
  args.kv = KvScheme::fp16;
  return args;
}

// The wgmma kernel's pipeline the checks and timings run (both, in turn).
WgmmaPipeline g_pipeline = WgmmaPipeline::overlap;
const char* pipeline_name(WgmmaPipeline p) {
  return p == WgmmaPipeline::overlap ? "overlap" : "serial";
}

void run_wgmma(const Attention& a, cudaStream_t stream = nullptr) {
  prefill_attention_wgmma(args_of(a, a.o), stream, g_pipeline);
}

void run_mma(const Attention& a, cudaStream_t stream = nullptr) {
  prefill_attention_mma(args_of(a, a.o_ref), stream);
}

// The checks' data: q, k in [-2, 2] (q then times 1/sqrt(128), as prefill_qkv scales it), v in
// [-1, 1], each rounded to fp16; softmax rows from nearly flat to peaked.
std::vector<__half> random_halves(size_t n, float lo, float hi, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<__half> v(n);
  for (auto& x : v) x = __float2half(dist(rng) * scale);
  return v;
}

// The timing data, filled on the device (65536 positions of 32 heads are 268M values): a hash
// of the index to [-1, 1) times `scale`.
__global__ void fill_kernel(__half* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed;
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    p[i] = __float2half((static_cast<float>(x >> 8) * (1.f / 8388608.f) - 1.f) * scale);
  }
}

void fill(__half* p, size_t n, uint32_t seed, float scale) {
  fill_kernel<<<1024, 256>>>(p, n, seed, scale);
  CUDA_CHECK_LAUNCH();
}

void upload(__half* dst, const std::vector<__half>& src) {
  CUDA_CHECK(cudaMemcpy(dst, src.data(), src.size() * sizeof(__half), cudaMemcpyHostToDevice));
}

std::vector<__half> download(const __half* src, size_t n) {
  std::vector<__half> v(n);
  CUDA_CHECK(cudaMemcpy(v.data(), src, n * sizeof(__half), cudaMemcpyDeviceToHost));
  return v;
}

struct CheckResult {
  double max_err = 0;    // largest |got - want|
  double max_ratio = 0;  // largest |got - want| / tolerance
  size_t checked = 0, bad = 0;
  void add(double got, double want, double tol) {
    const double e = std::fabs(got - want);
    max_err = std::max(max_err, e);
    max_ratio = std::max(max_ratio, e / tol);
    ++checked;
    if (!(e <= tol)) ++bad;  // NaN fails
  }
  void merge(const CheckResult& o) {
    max_err = std::max(max_err, o.max_err);
    max_ratio = std::max(max_ratio, o.max_ratio);
    checked += o.checked;
    bad += o.bad;
  }
};

bool report_check(const char* reference, const Attention& a, int row_step, const char* tol, const CheckResult& r) {
  const bool pass = r.bad == 0 && r.checked > 0;
  std::printf(
      "{\"bench\":\"flash_wgmma\",\"check\":\"causal\",\"pipeline\":\"%s\",\"p0\":%lld,\"rows\":%lld,\"t\":%lld,\"heads\":%d,"
      "\"kv_heads\":%d,\"head_dim\":%d,\"reference\":\"%s\",\"rows_checked\":\"every %d\",\"tolerance\":\"%s\","
      "\"checked\":%zu,\"max_abs_err\":%.6g,\"max_err_over_tol\":%.4g,\"bad\":%zu,\"result\":\"%s\"}\n",
      pipeline_name(g_pipeline), static_cast<long long>(a.p0), static_cast<long long>(a.rows),
      static_cast<long long>(a.p0 + a.rows), a.heads,
      a.kv_heads, kHd, reference, row_step, tol, r.checked, r.max_err, r.max_ratio, r.bad, pass ? "PASS" : "FAIL");
  std::fflush(stdout);
  return pass;
}

// Both kernels within tolerance_of of the exact value, with its scales at their largest: sum
// p|v|/l <= max|v| = 1, l >= 1, sum|q k| <= 128 * 2 * 2 / sqrt(128).
constexpr const char* kMmaTol = "2 x the cpu tolerance at sum p|v|/l = 1, l = 1, n = p0 + rows";
// Positions past the chunk in the checks' caches, NaN.
constexpr int64_t kCacheTail = 77;

// The wgmma kernel against the CPU on every row_step-th row (all heads; the last row too), and
// against the mma.sync kernel on every element when vs_mma.
bool check(int64_t p0, int64_t rows, int heads, int kv_heads, int row_step, bool vs_mma) {
  const int64_t positions = p0 + rows + kCacheTail;
  Attention a = make_attention(p0, rows, positions, heads, kv_heads);
  const size_t nq = size_t(rows) * heads * kHd, nkv = size_t(positions) * kv_heads * kHd;
  const size_t written = size_t(p0 + rows) * kv_heads * kHd;
  const uint32_t seed = static_cast<uint32_t>(p0 + rows + heads);
  const auto q = random_halves(nq, -2.f, 2.f, 1.f / std::sqrt(float(kHd)), 11 + seed);
  auto k = random_halves(nkv, -2.f, 2.f, 1.f, 12 + seed + kv_heads);
  auto v = random_halves(nkv, -1.f, 1.f, 1.f, 13 + seed);
  for (size_t i = written; i < nkv; ++i) k[i] = v[i] = __ushort_as_half(0x7FFF);  // NaN
  upload(a.q, q);
  upload(a.k, k);
  upload(a.v, v);
  CUDA_CHECK(cudaMemset(a.o, 0xFF, nq * sizeof(__half)));  // NaN: an unwritten element fails
  run_wgmma(a);
  if (vs_mma) run_mma(a);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = download(a.o, nq);
  const auto ref = vs_mma ? download(a.o_ref, nq) : std::vector<__half>{};
  free_attention(a);

  std::vector<float> qf(nq), kf(nkv), vf(nkv);
  for (size_t i = 0; i < nq; ++i) qf[i] = __half2float(q[i]);
  for (size_t i = 0; i < nkv; ++i) kf[i] = __half2float(k[i]);
  for (size_t i = 0; i < nkv; ++i) vf[i] = __half2float(v[i]);
  std::vector<int64_t> check_rows;
  for (int64_t row = 0; row < rows; row += row_step) check_rows.push_back(row);
  if (check_rows.back() != rows - 1) check_rows.push_back(rows - 1);
  const int workers = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<CheckResult> parts(workers);
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      int item = 0;
      for (int64_t row : check_rows)
        for (int h = 0; h < heads; ++h, ++item) {
          if (item % workers != w) continue;
          const RefRow r = reference_row(qf, kf, vf, heads, kv_heads, kHd, p0, row, h);
          for (int d = 0; d < kHd; ++d)
            parts[w].add(__half2float(got[(size_t(row) * heads + h) * kHd + d]), r.o[d],
                         tolerance_of(r.o[d], r.abs[d], r.l, r.qk_abs, r.keys, kHd));
        }
    });
  for (auto& th : pool) th.join();
  CheckResult cpu;
  for (const auto& p : parts) cpu.merge(p);
  bool ok = report_check("cpu", a, row_step, dbtest::kToleranceText, cpu);
  if (vs_mma) {
    const double qk_abs_max = kHd * 2.0 * 2.0 / std::sqrt(double(kHd));
    CheckResult r;
    for (size_t i = 0; i < nq; ++i) {
      const double want = __half2float(ref[i]);
      r.add(__half2float(got[i]), want, dbtest::kernels_tolerance(want, 1.0, qk_abs_max, p0 + rows, kHd));
    }
    ok &= report_check("prefill_attention_mma", a, 1, kMmaTol, r);
  }
  return ok;
}

void print_time(const char* gpu, const char* kernel, const char* shape, int64_t t, int heads, int kv_heads, int reps,
                double ms, double diff) {
  const double flops = 4.0 * (double(t) * (t + 1) / 2) * kHd * heads;
  std::printf(
      "{\"bench\":\"flash_wgmma\",\"gpu\":\"%s\",\"kernel\":\"%s\",\"shape\":\"%s\",\"t\":%lld,\"heads\":%d,"
      "\"kv_heads\":%d,\"head_dim\":%d,\"causal\":true,\"dtype\":\"fp16 in, fp32 accumulate, fp16 out\",\"reps\":%d,"
      "\"median_ms\":%.4f,\"tflops\":%.1f,\"max_abs_diff_between_kernels\":%.4g}\n",
      gpu, kernel, shape, static_cast<long long>(t), heads, kv_heads, kHd, reps, ms, flops / (ms * 1e-3) / 1e12,
      diff);
  std::fflush(stdout);
}

double max_diff(const Attention& a) {
  const size_t nq = size_t(a.rows) * a.heads * kHd;
  const auto got = download(a.o, nq);
  const auto ref = download(a.o_ref, nq);
  double diff = 0;
  for (size_t i = 0; i < nq; ++i)
    diff = std::max(diff, double(std::fabs(__half2float(got[i]) - __half2float(ref[i]))));
  return diff;
}

// One chunk of t rows from p0 = 0.
void time_shape(int64_t t, const char* gpu) {
  const int heads = 32, kv_heads = 8;
  Attention a = make_attention(0, t, t, heads, kv_heads);
  const size_t nq = size_t(t) * heads * kHd, nkv = size_t(t) * kv_heads * kHd;
  fill(a.q, nq, 21, 2.f / std::sqrt(float(kHd)));
  fill(a.k, nkv, 22, 2.f);
  fill(a.v, nkv, 23, 1.f);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  const int reps = t <= 16384 ? 10 : 5;
  const double ms_m = median_ms(stream, reps, [&] { run_mma(a, stream); });
  for (WgmmaPipeline p : {WgmmaPipeline::overlap, WgmmaPipeline::serial}) {
    g_pipeline = p;
    const double ms_w = median_ms(stream, reps, [&] { run_wgmma(a, stream); });
    // How far apart the two outputs are on this data (information, not a check: the checks
    // above bound it at 4096).
    const double diff = max_diff(a);
    print_time(gpu, p == WgmmaPipeline::overlap ? "prefill_attention_wgmma overlap" : "prefill_attention_wgmma serial",
               "one chunk", t, heads, kv_heads, reps, ms_w, diff);
  }
  g_pipeline = WgmmaPipeline::overlap;
  print_time(gpu, "prefill_attention_mma", "one chunk", t, heads, kv_heads, reps, ms_m, 0);
  CUDA_CHECK(cudaStreamDestroy(stream));
  free_attention(a);
}

// The prefill's pattern: t positions in chunks of `chunk` rows, chunk i at p0 = i chunk over the
// whole cache; a call is the whole sweep.
void time_chunked(int64_t t, int64_t chunk, const char* gpu) {
  const int heads = 32, kv_heads = 8;
  Attention a = make_attention(0, chunk, t, heads, kv_heads);
  fill(a.q, size_t(chunk) * heads * kHd, 21, 2.f / std::sqrt(float(kHd)));
  fill(a.k, size_t(t) * kv_heads * kHd, 22, 2.f);
  fill(a.v, size_t(t) * kv_heads * kHd, 23, 1.f);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  const auto sweep = [&](void (*run)(const Attention&, cudaStream_t)) {
    for (int64_t p0 = 0; p0 < t; p0 += chunk) {
      Attention c = a;
      c.p0 = p0;
      c.rows = std::min(chunk, t - p0);
      run(c, stream);
    }
  };
  // One untimed sweep, then one timed: a sweep is ~10-25 s, so the call stays inside the run
  // script's timeout. The mma.sync kernel is left out here (~22 s a sweep, 204 TFLOP/s, prefill
  // §2); the run script's decodebench prefills with each kernel.
  const auto once_ms = [&](void (*run)(const Attention&, cudaStream_t)) {
    sweep(run);
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    CUDA_CHECK(cudaEventRecord(e0, stream));
    sweep(run);
    CUDA_CHECK(cudaEventRecord(e1, stream));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    return double(ms);
  };
  char shape[64];
  std::snprintf(shape, sizeof shape, "chunks of %lld", static_cast<long long>(chunk));
  for (WgmmaPipeline p : {WgmmaPipeline::overlap, WgmmaPipeline::serial}) {
    g_pipeline = p;
    const double ms_w = once_ms(run_wgmma);
    print_time(gpu, p == WgmmaPipeline::overlap ? "prefill_attention_wgmma overlap" : "prefill_attention_wgmma serial",
               shape, t, heads, kv_heads, 1, ms_w, -1);  // -1: not compared
  }
  g_pipeline = WgmmaPipeline::overlap;
  CUDA_CHECK(cudaStreamDestroy(stream));
  free_attention(a);
}

}  // namespace

int main(int argc, char** argv) {
  bool checks = true, timing = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--check") == 0) {
      timing = false;
    } else if (std::strcmp(argv[i], "--time") == 0) {
      checks = false;
    } else {
      std::fprintf(stderr, "usage: %s [--check | --time]\n", argv[0]);
      return 2;
    }
  }
  try {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::fprintf(stderr, "flash_wgmma_bench: no CUDA device\n");
      return 2;
    }
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9 || prop.minor != 0) {
      std::fprintf(stderr, "flash_wgmma_bench: needs an sm_90 GPU (H100/H200); device 0 is %s (sm_%d%d)\n",
                   prop.name, prop.major, prop.minor);
      return 2;
    }
    bool ok = true;
    if (checks) {
      for (WgmmaPipeline p : {WgmmaPipeline::overlap, WgmmaPipeline::serial}) {
        g_pipeline = p;
        for (auto [t, heads, kv_heads] :
             {std::tuple{128, 4, 1}, std::tuple{128, 4, 2}, std::tuple{300, 4, 1}, std::tuple{300, 4, 2},
              std::tuple{1024, 4, 1}, std::tuple{1024, 4, 2}})
          ok &= check(0, t, heads, kv_heads, 1, false);
        ok &= check(0, 4096, 32, 8, 41, true);
        for (int64_t p0 : {300, 4096}) {
          ok &= check(p0, 333, 4, 1, 1, true);
          ok &= check(p0, 4096, 32, 8, 41, true);
        }
      }
      g_pipeline = WgmmaPipeline::overlap;
      std::printf("{\"bench\":\"flash_wgmma\",\"checks\":\"%s\"}\n", ok ? "PASS" : "FAIL");
      std::fflush(stdout);
    }
    if (timing) {
      for (int64_t t : {4096, 16384, 32768, 65536}) time_shape(t, prop.name);
      time_chunked(131000, 4096, prop.name);
    }
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flash_wgmma_bench: %s\n", e.what());
    return 1;
  }
}
