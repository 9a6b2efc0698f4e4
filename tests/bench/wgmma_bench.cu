// A Hopper fp16 GEMM on wgmma fed by TMA, checked and timed beside cuBLAS (lab tool, sm_90a only):
//   build-gpu/decodebench_wgmma_bench [--check | --time]
// D[M,N] (fp16) = A[M,K] * B[N,K]^T with fp32 accumulation, both operands K-major (row-major A;
// B row-major as [N,K], the layout of a linear layer's weight). The building block of the
// FlashAttention-3-class prefill attention and the mixed-input (int4 x fp16) GEMM: the same
// ring, barriers, descriptors and warp roles carry over, only the operands' loads change.
//
// The kernel: a persistent grid (one CTA an SM, 197 KB of shared memory) walks 128 x 256 output
// tiles in bands of 16 row tiles (wgmma_layout.h's tile_coord). Three warpgroups a CTA: the
// first issues TMA (cp.async.bulk.tensor.2d, 128-byte swizzle) from one thread into a ring of 4
// stages of 64 columns of K (A: 128 x 64, B: 256 x 64; 48 KB a stage); the other two each
// compute 64 rows of the tile with wgmma.mma_async m64n256k16 (both operands from shared
// memory through matrix descriptors; 128 fp32 accumulators a thread), keep one k-block of
// wgmma in flight and free a stage once the wgmma reading it has completed. A stage's "full"
// mbarrier completes on the producer's arrival and the TMA's bytes; its "empty" mbarrier on
// one arrival from each of the 8 consumer warps. The producer warpgroup gives registers away
// (setmaxnreg.dec 40) and the consumers take them (setmaxnreg.inc 232). The epilogue converts
// the accumulators to fp16 and stores them from registers while the producer already fills the
// ring for the next tile. ptxas -v: 168 registers, no spills, and none of its C7515/C7519
// notes (it prints them when another instruction touches the accumulators between wgmmas and
// it has to serialise them or inject warpgroup.arrive).
//
// Checks (--check, and by default): integers in [-2, 2] make every partial sum an exact fp32
// integer, so the result is exact whatever the summation order: the kernel must equal the CPU
// reference bit for bit (tolerance 0) at 128x256x64 (one tile, one k-block), 256x384x512 (N
// half a tile past a multiple of 256), 200x328x136 (M, N and K ragged: TMA's zero fill and the
// guarded stores), 1024x1024x1024, and equal cuBLAS bit for bit at 8192^3 (|sums| ~1000 at
// most, below fp16's 2048 exact-integer limit). Values in [-1, 1] at 256x384x512 against a double
// CPU reference within 2^-11 |ref| + 2^-24 (fp16 rounding) + K 2^-23 sum|a b| (fp32 summation).
// Timing (--time, and by default): M = N = K = 4096 and 8192, random values in [-1, 1], the
// median of 20 launches between CUDA events after 3 untimed ones, beside cublasGemmEx on the
// same operands (fp16 in and out, CUBLAS_COMPUTE_32F); one JSON line a measurement. Exit
// status: 0 when every check passes, 1 on a failed check or an error, 2 without an sm_90 GPU.
//
// Prediction (H200): correct at every check shape; 8192^3 at 600-680 TFLOP/s (cuBLAS ~700-760),
// 4096^3 at 520-620 (3.9 waves of tiles on 132 SMs). Target: >= 600 at 8192^3.
// Kill criterion: any check failing is a bug to fix before anything is built on it; below
// 400 TFLOP/s at 8192^3 the design stops (the pipeline does not hide TMA or the epilogue) and
// the next step is a profile, not more features. Between 400 and 600: clusters with TMA
// multicast, a shared-memory (stmatrix + TMA store) epilogue, or ping-pong consumers.
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "bench_timing.cuh"
#include "common.cuh"
#include "mbarrier.cuh"
#include "tma_wgmma.cuh"
#include "wgmma_layout.h"

using namespace db;
using namespace db::cuda;

namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64;  // output tile; K a stage (128 bytes of fp16)
constexpr int kStages = 4;
constexpr int kConsumers = 2;                     // warpgroups of wgmma, 64 rows of the tile each
constexpr int kThreads = 128 * (1 + kConsumers);  // warpgroup 0 produces
constexpr int kGroupM = 16;                       // row tiles a band (tile_coord)
constexpr uint32_t kABytes = kBM * kBK * 2, kBBytes = kBN * kBK * 2;
constexpr uint32_t kStageBytes = kABytes + kBBytes;
// The ring, its alignment slack (128-byte swizzle: tiles on 1024-byte boundaries) and the
// 2 x kStages mbarriers.
constexpr size_t kSmemBytes = size_t{kStages} * kStageBytes + 1024 + 2 * kStages * sizeof(uint64_t);
static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "tiles on 1024-byte boundaries");
static_assert(kSmemBytes <= 227 * 1024, "an H100/H200 CTA's shared memory");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using hopper::fence_registers;
using hopper::mbar_arrive;
using hopper::mbar_expect_tx;
using hopper::mbar_init;
using hopper::mbar_wait;
using hopper::smem_u32;
using hopper::tma_load_2d;
using hopper::wgmma_commit;
using hopper::wgmma_fence;
using hopper::wgmma_wait;

// d (+)= A[64 x 16] * B[256 x 16]^T, both K-major in shared memory (descriptors a, b); d is
// overwritten when accumulate is false.
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16\n"
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
      " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n"
      " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n"
      " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63,\n"
      " %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,\n"
      " %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95,\n"
      " %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111,\n"
      " %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127},\n"
      " %128, %129, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]),
        "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]),
        "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]),
        "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]),
        "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]),
        "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]),
        "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]),
        "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]),
        "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}
#endif

// D[M,N] = A[M,K] * B[N,K]^T; tm_a, tm_b: A and B as 2-D tensor maps (inner dimension K, boxes
// of 64 x 128 and 64 x 256, 128-byte swizzle, zero fill past the edges). M, N: any (the stores
// are guarded), N even; K a multiple of 8 (TMA's 16-byte row stride).
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_gemm(const __grid_constant__ CUtensorMap tm_a, const __grid_constant__ CUtensorMap tm_b,
               __half* __restrict__ d, int M, int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);  // [kStages]
  uint64_t* empty = full + kStages;                                            // [kStages]

  const int warpgroup = threadIdx.x / 128;
  const int t = threadIdx.x % 128;  // thread in its warpgroup
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);                // the producer's expect_tx arrival (plus the bytes)
      mbar_init(&empty[s], kConsumers * 4);  // lane 0 of each consumer warp
    }
    // The barriers' initialisation visible to the async proxy (TMA's complete_tx).
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();

  const int tiles_m = (M + kBM - 1) / kBM, tiles_n = (N + kBN - 1) / kBN;
  const int tiles = tiles_m * tiles_n;
  const int kblocks = (K + kBK - 1) / kBK;

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (t == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(&tm_a) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(&tm_b) : "memory");
      uint32_t it = 0;  // k-blocks loaded so far: stage it % kStages, its use it / kStages
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const wgmma::TileCoord c = wgmma::tile_coord(tile, tiles_m, tiles_n, kGroupM);
        for (int kb = 0; kb < kblocks; ++kb, ++it) {
          const uint32_t s = it % kStages, phase = (it / kStages) & 1;
          mbar_wait(&empty[s], phase ^ 1);  // the first use of a stage passes at once
          uint8_t* stage = smem + s * kStageBytes;
          mbar_expect_tx(&full[s], kStageBytes);  // a box past the edge still counts whole
          tma_load_2d(stage, &tm_a, kb * kBK, c.m * kBM, &full[s]);
          tma_load_2d(stage + kABytes, &tm_b, kb * kBK, c.n * kBN, &full[s]);
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int consumer = warpgroup - 1;  // rows 64 * consumer to 64 * consumer + 63 of the tile
  const int lane = t % 32;
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
  const uint32_t ring = smem_u32(smem);
  uint32_t it = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const wgmma::TileCoord c = wgmma::tile_coord(tile, tiles_m, tiles_n, kGroupM);
    for (int kb = 0; kb < kblocks; ++kb, ++it) {
      const uint32_t s = it % kStages, phase = (it / kStages) & 1;
      mbar_wait(&full[s], phase);
      const uint32_t a = ring + s * kStageBytes + consumer * 64 * 128;  // this consumer's 64 rows
      const uint32_t b = a - consumer * 64 * 128 + kABytes;
      const uint64_t desc_a = wgmma::kmajor_sw128_desc(a), desc_b = wgmma::kmajor_sw128_desc(b);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < kBK / 16; ++k)  // k16 steps: 32 bytes further along the swizzled rows
        wgmma_m64n256k16(acc, desc_a + 2 * k, desc_b + 2 * k, kb > 0 || k > 0);
      wgmma_commit();
      if (kb > 0) {  // the previous k-block's wgmma has completed: free its stage
        wgmma_wait<1>();
        if (lane == 0) mbar_arrive(&empty[(it - 1) % kStages]);
      }
    }
    wgmma_wait<0>();
    fence_registers(acc);
    if (lane == 0 && kblocks > 0) mbar_arrive(&empty[(it - 1) % kStages]);

    // Epilogue: each thread's pairs of adjacent columns as half2 (wgmma_layout.h's acc_row,
    // acc_col), straight from registers.
    const int row0 = c.m * kBM + consumer * 64 + wgmma::acc_row(t, 0);
    const int col0 = c.n * kBN + wgmma::acc_col(t, 0);
#pragma unroll
    for (int j = 0; j < 32; ++j) {  // 8 columns a step
      const int col = col0 + 8 * j;
      if (col < N) {  // N even: col + 1 < N too
        if (row0 < M)
          *reinterpret_cast<__half2*>(d + size_t(row0) * N + col) =
              __floats2half2_rn(acc[4 * j], acc[4 * j + 1]);
        if (row0 + 8 < M)
          *reinterpret_cast<__half2*>(d + size_t(row0 + 8) * N + col) =
              __floats2half2_rn(acc[4 * j + 2], acc[4 * j + 3]);
      }
    }
  }
#endif
}

// ---- host

#define CUBLAS_CHECK(expr)                                                                               \
  do {                                                                                                   \
    const cublasStatus_t db_st_ = (expr);                                                                \
    if (db_st_ != CUBLAS_STATUS_SUCCESS)                                                                 \
      ::db::fail("cuBLAS error {} in {} at {}:{}", static_cast<int>(db_st_), #expr, __FILE__, __LINE__); \
  } while (0)

// A row-major fp16 matrix [rows, cols] as a tensor map of boxes of 64 columns x box_rows rows,
// 128-byte swizzled, zero-filled past its edges.
CUtensorMap kmajor_map(const __half* p, int rows, int cols, int box_rows) {
  return hopper::sw128_map(p, rows, cols, cols, box_rows);
}

struct Gemm {
  int m, n, k;
  __half *a, *b, *d;  // [m,k], [n,k], [m,n] on the device
  CUtensorMap map_a, map_b;
};

Gemm make_gemm(int m, int n, int k) {
  if (m < 1 || n < 2 || n % 2 || k < 8 || k % 8) fail("shape {}x{}x{}: N even, K a multiple of 8", m, n, k);
  Gemm g{m, n, k, nullptr, nullptr, nullptr, {}, {}};
  CUDA_CHECK(cudaMalloc(&g.a, size_t(m) * k * sizeof(__half)));
  CUDA_CHECK(cudaMalloc(&g.b, size_t(n) * k * sizeof(__half)));
  CUDA_CHECK(cudaMalloc(&g.d, size_t(m) * n * sizeof(__half)));
  g.map_a = kmajor_map(g.a, m, k, kBM);
  g.map_b = kmajor_map(g.b, n, k, kBN);
  return g;
}

void free_gemm(Gemm& g) {
  CUDA_CHECK(cudaFree(g.a));
  CUDA_CHECK(cudaFree(g.b));
  CUDA_CHECK(cudaFree(g.d));
}

int sm_count() {
  static int n = 0;
  if (!n) {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  }
  return n;
}

void run_wgmma(const Gemm& g, cudaStream_t stream = nullptr) {
  const int tiles = ((g.m + kBM - 1) / kBM) * ((g.n + kBN - 1) / kBN);
  wgmma_gemm<<<std::min(tiles, sm_count()), kThreads, kSmemBytes, stream>>>(g.map_a, g.map_b, g.d, g.m, g.n,
                                                                            g.k);
  CUDA_CHECK_LAUNCH();
}

// The same product through cuBLAS into `d`: row-major D = A B^T is column-major D^T = B A^T
// ("TN": B transposed, A as is, both with leading dimension K).
void run_cublas(cublasHandle_t h, const Gemm& g, __half* d) {
  const float one = 1.f, zero = 0.f;
  CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, g.n, g.m, g.k, &one, g.b, CUDA_R_16F, g.k, g.a,
                            CUDA_R_16F, g.k, &zero, d, CUDA_R_16F, g.n, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

std::vector<__half> random_halves(size_t n, bool integers, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> ints(-2, 2);
  std::uniform_real_distribution<float> reals(-1.f, 1.f);
  std::vector<__half> v(n);
  for (auto& x : v) x = __float2half(integers ? float(ints(rng)) : reals(rng));
  return v;
}

void upload(__half* dst, const std::vector<__half>& src) {
  CUDA_CHECK(cudaMemcpy(dst, src.data(), src.size() * sizeof(__half), cudaMemcpyHostToDevice));
}

std::vector<__half> download(const __half* src, size_t n) {
  std::vector<__half> v(n);
  CUDA_CHECK(cudaMemcpy(v.data(), src, n * sizeof(__half), cudaMemcpyDeviceToHost));
  return v;
}

// The CPU reference in double, rows spread over the host's threads: ref[i*n+j] = sum a b and
// abs[i*n+j] = sum |a b| (the scale of fp32's summation error).
void cpu_reference(const std::vector<__half>& a, const std::vector<__half>& b, int m, int n, int k,
                   std::vector<double>& ref, std::vector<double>& abs) {
  std::vector<float> af(a.size()), bf(b.size());
  for (size_t i = 0; i < a.size(); ++i) af[i] = __half2float(a[i]);
  for (size_t i = 0; i < b.size(); ++i) bf[i] = __half2float(b[i]);
  ref.assign(size_t(m) * n, 0.0);
  abs.assign(size_t(m) * n, 0.0);
  const int workers = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      for (int i = w; i < m; i += workers)
        for (int j = 0; j < n; ++j) {
          const float* x = &af[size_t(i) * k];
          const float* y = &bf[size_t(j) * k];
          double s = 0, sa = 0;
          for (int q = 0; q < k; ++q) {
            const double p = double(x[q]) * y[q];
            s += p;
            sa += std::fabs(p);
          }
          ref[size_t(i) * n + j] = s;
          abs[size_t(i) * n + j] = sa;
        }
    });
  for (auto& th : pool) th.join();
}

struct CheckResult {
  double max_err = 0;    // largest |got - want|
  double max_ratio = 0;  // largest |got - want| / tolerance (0/0 counts as 0)
  size_t bad = 0;
};

// got against want element by element, tolerance tol(i) (0: bit-exact in value).
template <class Tol>
CheckResult compare(const std::vector<__half>& got, const std::vector<double>& want, Tol&& tol) {
  CheckResult r;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(double(__half2float(got[i])) - want[i]);
    const double t = tol(i);
    r.max_err = std::max(r.max_err, e);
    if (e > t || std::isnan(e)) ++r.bad;
    if (t > 0) r.max_ratio = std::max(r.max_ratio, e / t);
  }
  return r;
}

constexpr const char* kExact = "exact";
// fp16 output rounding (relative 2^-11, absolute 2^-24 among subnormals) plus the worst case of
// K fp32 additions, each off by up to an ulp (2^-23 relative: a tensor core's adder may
// truncate). A misplaced operand element is off by O(1), hundreds of tolerances.
constexpr const char* kRealsTol = "2^-11|ref| + 2^-24 + K 2^-23 sum|ab|";

bool report_check(const char* what, int m, int n, int k, const char* reference, const char* tol,
                  const CheckResult& r) {
  const bool pass = r.bad == 0;
  std::printf(
      "{\"bench\":\"wgmma_gemm\",\"check\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"reference\":\"%s\","
      "\"tolerance\":"
      "\"%s\",\"max_abs_err\":%.6g,\"max_err_over_tol\":%.4g,\"bad\":%zu,\"result\":\"%s\"}\n",
      what, m, n, k, reference, tol, r.max_err, r.max_ratio, r.bad, pass ? "PASS" : "FAIL");
  std::fflush(stdout);
  return pass;
}

bool check_against_cpu(int m, int n, int k, bool integers) {
  Gemm g = make_gemm(m, n, k);
  const auto a = random_halves(size_t(m) * k, integers, 1 + m);
  const auto b = random_halves(size_t(n) * k, integers, 2 + n);
  upload(g.a, a);
  upload(g.b, b);
  CUDA_CHECK(cudaMemset(g.d, 0xFF, size_t(m) * n * sizeof(__half)));  // NaN: an unwritten element fails
  run_wgmma(g);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = download(g.d, size_t(m) * n);
  free_gemm(g);
  std::vector<double> ref, abs;
  cpu_reference(a, b, m, n, k, ref, abs);
  CheckResult r;
  if (integers) {  // exact integers, far inside fp16's exact range: rounding changes nothing
    r = compare(got, ref, [](size_t) { return 0.0; });
  } else {
    r = compare(got, ref, [&](size_t i) {
      return std::ldexp(std::fabs(ref[i]), -11) + std::ldexp(1.0, -24) + k * std::ldexp(abs[i], -23);
    });
  }
  return report_check(integers ? "integers" : "reals", m, n, k, "cpu", integers ? kExact : kRealsTol, r);
}

bool check_against_cublas(cublasHandle_t h, int m, int n, int k) {
  Gemm g = make_gemm(m, n, k);
  upload(g.a, random_halves(size_t(m) * k, true, 3));
  upload(g.b, random_halves(size_t(n) * k, true, 4));
  __half* ref_d = nullptr;
  CUDA_CHECK(cudaMalloc(&ref_d, size_t(m) * n * sizeof(__half)));
  CUDA_CHECK(cudaMemset(g.d, 0xFF, size_t(m) * n * sizeof(__half)));
  run_wgmma(g);
  run_cublas(h, g, ref_d);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = download(g.d, size_t(m) * n);
  const auto want_h = download(ref_d, size_t(m) * n);
  CUDA_CHECK(cudaFree(ref_d));
  free_gemm(g);
  std::vector<double> want(want_h.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = __half2float(want_h[i]);
  return report_check("integers", m, n, k, "cublas", kExact, compare(got, want, [](size_t) { return 0.0; }));
}

void time_shape(cublasHandle_t h, int s, const char* gpu) {
  Gemm g = make_gemm(s, s, s);
  upload(g.a, random_halves(size_t(s) * s, false, 5));
  upload(g.b, random_halves(size_t(s) * s, false, 6));
  __half* ref_d = nullptr;
  CUDA_CHECK(cudaMalloc(&ref_d, size_t(s) * s * sizeof(__half)));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  CUBLAS_CHECK(cublasSetStream(h, stream));
  const double flops = 2.0 * s * s * s;
  const double ms_w = median_ms(stream, 20, [&] { run_wgmma(g, stream); });
  const double ms_c = median_ms(stream, 20, [&] { run_cublas(h, g, ref_d); });
  for (auto [kernel, ms] : {std::pair{"wgmma_128x256x64_s4", ms_w}, std::pair{"cublas", ms_c}})
    std::printf(
        "{\"bench\":\"wgmma_gemm\",\"gpu\":\"%s\",\"kernel\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"dtype\":"
        "\"fp16 in, "
        "fp32 accumulate, fp16 out\",\"reps\":20,\"median_ms\":%.4f,\"tflops\":%.1f}\n",
        gpu, kernel, s, s, s, ms, flops / (ms * 1e-3) / 1e12);
  std::fflush(stdout);
  CUBLAS_CHECK(cublasSetStream(h, nullptr));
  CUDA_CHECK(cudaStreamDestroy(stream));
  CUDA_CHECK(cudaFree(ref_d));
  free_gemm(g);
}

}  // namespace

int main(int argc, char** argv) {
  bool check = true, timing = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--check") == 0) {
      timing = false;
    } else if (std::strcmp(argv[i], "--time") == 0) {
      check = false;
    } else {
      std::fprintf(stderr, "usage: %s [--check | --time]\n", argv[0]);
      return 2;
    }
  }
  try {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::fprintf(stderr, "wgmma_bench: no CUDA device\n");
      return 2;
    }
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9 || prop.minor != 0) {
      std::fprintf(stderr, "wgmma_bench: needs an sm_90 GPU (H100/H200); device 0 is %s (sm_%d%d)\n",
                   prop.name, prop.major, prop.minor);
      return 2;
    }
    CUDA_CHECK(
        cudaFuncSetAttribute(wgmma_gemm, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    bool ok = true;
    if (check) {
      for (auto [m, n, k] : {std::tuple{128, 256, 64}, std::tuple{256, 384, 512}, std::tuple{200, 328, 136},
                             std::tuple{1024, 1024, 1024}})
        ok &= check_against_cpu(m, n, k, true);
      ok &= check_against_cpu(256, 384, 512, false);
      ok &= check_against_cublas(h, 8192, 8192, 8192);
      std::printf("{\"bench\":\"wgmma_gemm\",\"checks\":\"%s\"}\n", ok ? "PASS" : "FAIL");
      std::fflush(stdout);
    }
    if (timing)
      for (int s : {4096, 8192}) time_shape(h, s, prop.name);
    CUBLAS_CHECK(cublasDestroy(h));
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wgmma_bench: %s\n", e.what());
    return 1;
  }
}
