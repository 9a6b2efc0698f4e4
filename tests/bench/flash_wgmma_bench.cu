// Causal prefill attention on Hopper's wgmma fed by TMA, FlashAttention-3's structure, checked and
// timed beside prefill_attention() (lab tool, sm_90a only):
//   build-gpu/decodebench_flash_wgmma_bench [--check | --time]
// One sequence of T positions from p0 = 0, head_dim 128, fp16 in, fp32 accumulate, fp16 out:
// Q [T][heads][128] already scaled by 1/sqrt(128) (as prefill_qkv leaves it), K and V in the
// cache layout [positions][kv_heads][128], O [T][heads][128]; query t attends to keys 0..t,
// query head h reads kv head h / (heads / kv_heads).
//
// The kernel: a CTA per (query head, tile of 128 queries), the longest tiles first and the query
// heads of one kv head side by side (flash_wgmma_layout.h's cta_work), one CTA an SM (160 KB of
// shared memory). Three warpgroups: the first gives registers away (setmaxnreg.dec 24) and one
// thread of it issues TMA (cp.async.bulk.tensor.2d, 128-byte swizzle, boxes of 64 dims x 128
// rows): the Q tile once, then for each key tile up to the tile's last query a K tile and a V
// tile (128 keys x 128 dims, two boxes each) into a ring of 2 stages; K and V of a stage complete
// on their own "full" mbarriers, so S can start before V has landed, and the stage is free again
// when the 8 consumer warps have arrived on its "empty" mbarrier. The other two warpgroups
// (setmaxnreg.inc 240) own 64 queries each and, for each key tile:
//   S = Q K^T: 8 wgmma.m64n128k16 with Q and K from shared memory (K-major descriptors);
//   the causal mask on the diagonal tile only; the online softmax in base 2 (log2(e) folded
//   into one FMA before ex2.approx) on the accumulator fragment in registers, a row's max
//   across the 4 lanes of its quad, its sum kept per thread until the end;
//   O += P V: P rounded to fp16 in registers, the S accumulator fragment read in place as
//   wgmma's A fragment (p_acc_index), 8 wgmma.m64n128k16 with A from registers and V from
//   shared memory as an MN-major B (imm-trans-b = 1, v_tile_desc);
// then normalise by the row sums and store O from registers as half2.
// This first version keeps one wgmma batch in flight and waits for it (S, then P V) before
// touching its registers. A second version would add FlashAttention-3's two overlaps: the two
// consumers' ping-pong (named barriers so that one warpgroup's softmax runs while the other's
// GEMMs do) and, inside a warpgroup, the next tile's S = Q K^T issued before this tile's
// softmax (a second S accumulator, 64 more registers).
// ptxas -v (nvcc 13, sm_90a): 168 registers (the cap of the 384-thread launch bound; setmaxnreg
// moves them to 24 and 240 at run time), no stack, no spills, and none of its C7515/C7519 notes
// (wgmma serialised because another instruction touches its registers in flight).
//
// Checks (--check, and by default), each against the exact causal softmax: a CPU
// double-precision reference at T = 128 (one tile), 300 (ragged: TMA zero fill past the end) and
// 1024, with heads 4 and kv_heads 1 and 2, every row; T = 4096 with heads 32 and kv_heads 8
// against the CPU on every 41st row and against prefill_attention() on every element. The
// tolerance follows the arithmetic (tolerance_of): P rounded to fp16 (2^-11 a term), the S dot
// product's fp32 sum (128 2^-23 sum|q k| in the exponent), ex2.approx and its argument's
// rounding (2^-16 relative), the fp32 sums over n keys (n 2^-23 in numerator and denominator),
// fp16 subnormals of P (2^-25 a term), the fp16 output (2^-11 |o| + 2^-24). A misplaced or
// unmasked key moves a small tile's output by far more.
// Timing (--time, and by default): T = 4096, 16384, 32768, 65536 with heads 32, kv_heads 8: the
// median of several launches between CUDA events after 3 untimed ones, beside
// prefill_attention() on the same data, causal FLOPs 4 (T (T + 1) / 2) 128 heads; one JSON line a
// measurement. Exit status: 0 when every check passes, 1 on a failed check or an error, 2
// without an sm_90 GPU.
//
// Prediction (H200): every check passes; >= 500 TFLOP/s at 32768 (prefill_attention ~204). Kill:
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

#include "bench_timing.cuh"
#include "common.cuh"
#include "flash_wgmma_layout.h"
#include "mbarrier.cuh"
#include "prefill.cuh"
#include "tma_wgmma.cuh"
#include "wgmma_layout.h"

using namespace db;
using namespace db::cuda;

namespace {

constexpr int kHd = 128;       // head_dim: 8 k16 steps of Q K^T, N of P V
constexpr int kBM = 128;       // queries a CTA
constexpr int kBN = 128;       // keys a tile: N of Q K^T, 8 k16 steps of P V
constexpr int kStages = 2;     // K and V tiles in the ring
constexpr int kConsumers = 2;  // warpgroups of wgmma, 64 queries each
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr uint32_t kTileBytes = 2 * flash_wgmma::kBoxBytes;  // 128 rows x 128 dims, two boxes
// Q, then the stages' K and V tiles; the alignment slack (tiles on 1024-byte boundaries); the
// Q barrier and 3 a stage (K full, V full, empty).
constexpr size_t kSmemBytes =
    size_t{kTileBytes} * (1 + 2 * kStages) + 1024 + (1 + 3 * kStages) * sizeof(uint64_t);
static_assert(kSmemBytes <= 227 * 1024, "an H100/H200 CTA's shared memory");
static_assert(kBM == kBN, "the causal mask falls on the diagonal tile alone");
constexpr float kLog2e = 1.4426950408889634f;

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

// d (+)= A[64 x 16] * B[128 x 16]^T, both K-major in shared memory (descriptors a, b); d is
// overwritten when accumulate is false.
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16\n"
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
      " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n"
      " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n"
      " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},\n"
      " %64, %65, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

// d += A[64 x 16] * B[16 x 128]: A from registers (the m64nNk16 A fragment, four f16x2), B
// MN-major in shared memory (descriptor b, imm-trans-b = 1).
__device__ __forceinline__ void wgmma_m64n128k16_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16\n"
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,\n"
      " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,\n"
      " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,\n"
      " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},\n"
      " {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
        "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
        "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
        "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
#endif

// O = causal softmax(Q K^T) V for one sequence of t positions; tm_q: Q as [t, heads * 128],
// tm_k, tm_v: K and V as [t, kv_heads * 128], boxes of 64 x 128, 128-byte swizzle, zero fill
// past the end. A CTA per (head, query tile): gridDim.x = heads * ceil(t / 128).
__global__ void __launch_bounds__(kThreads, 1)
    flash_wgmma_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                       const __grid_constant__ CUtensorMap tm_v, __half* __restrict__ out, int t_len,
                       int heads, int kv_heads) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint8_t* q_tile = smem;
  uint8_t* ring = smem + kTileBytes;  // stage s: K at ring + 2 s kTileBytes, V kTileBytes on
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + kTileBytes * (1 + 2 * kStages));
  uint64_t* k_full = q_full + 1;        // [kStages]
  uint64_t* v_full = k_full + kStages;  // [kStages]
  uint64_t* empty = v_full + kStages;   // [kStages]

  const int q_tiles = (t_len + kBM - 1) / kBM;
  const flash_wgmma::CtaWork work = flash_wgmma::cta_work(blockIdx.x, heads, q_tiles);
  const int kv_head = work.head / (heads / kv_heads);
  const int key_tiles = flash_wgmma::causal_key_tiles(work.q_tile, kBM, kBN, t_len);

  const int warpgroup = threadIdx.x / 128;
  const int t = threadIdx.x % 128;  // thread in its warpgroup
  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&k_full[s], 1);  // the producer's expect_tx arrival (plus the bytes)
      mbar_init(&v_full[s], 1);
      mbar_init(&empty[s], kConsumers * 4);  // lane 0 of each consumer warp
    }
    // The barriers' initialisation visible to the async proxy (TMA's complete_tx).
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
    if (t == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(&tm_q) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(&tm_k) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(&tm_v) : "memory");
      mbar_expect_tx(q_full, kTileBytes);  // a box past the end still counts whole
      for (int b = 0; b < 2; ++b)
        tma_load_2d(q_tile + b * flash_wgmma::kBoxBytes, &tm_q, work.head * kHd + 64 * b, work.q_tile * kBM,
                    q_full);
      for (int kt = 0; kt < key_tiles; ++kt) {
        const int s = kt % kStages;
        const uint32_t phase = (kt / kStages) & 1;
        mbar_wait(&empty[s], phase ^ 1);  // the first use of a stage passes at once
        uint8_t* k_tile = ring + s * 2 * kTileBytes;
        uint8_t* v_tile = k_tile + kTileBytes;
        mbar_expect_tx(&k_full[s], kTileBytes);
        for (int b = 0; b < 2; ++b)
          tma_load_2d(k_tile + b * flash_wgmma::kBoxBytes, &tm_k, kv_head * kHd + 64 * b, kt * kBN,
                      &k_full[s]);
        mbar_expect_tx(&v_full[s], kTileBytes);
        for (int b = 0; b < 2; ++b)
          tma_load_2d(v_tile + b * flash_wgmma::kBoxBytes, &tm_v, kv_head * kHd + 64 * b, kt * kBN,
                      &v_full[s]);
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
  const int consumer = warpgroup - 1;  // queries 64 consumer .. 64 consumer + 63 of the tile
  const int lane = t % 32;
  // This thread's two rows of the fragment (acc_row: r and r + 8), as positions.
  const int row0 = work.q_tile * kBM + 64 * consumer + wgmma::acc_row(t, 0);
  const uint32_t q_addr = smem_u32(q_tile), ring_addr = smem_u32(ring);

  float o[64];
#pragma unroll
  for (int j = 0; j < 64; ++j) o[j] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};  // of S, in natural units
  float row_sum[2] = {0.f, 0.f};              // this thread's part of the row's sum of P

  mbar_wait(q_full, 0);
  for (int kt = 0; kt < key_tiles; ++kt) {
    const int s = kt % kStages;
    const uint32_t phase = (kt / kStages) & 1;
    const uint32_t k_addr = ring_addr + s * 2 * kTileBytes, v_addr = k_addr + kTileBytes;

    float sacc[64];  // a fresh accumulator each tile: nothing of the last tile's S stays live
    mbar_wait(&k_full[s], phase);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kHd / 16; ++kk)
      wgmma_m64n128k16_ss(sacc, flash_wgmma::kmajor_tile_desc(q_addr, 64 * consumer, kk),
                          flash_wgmma::kmajor_tile_desc(k_addr, 0, kk), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(sacc);

    if (flash_wgmma::key_tile_needs_mask(work.q_tile, kt, kBM, kBN)) {
#pragma unroll
      for (int j = 0; j < 64; ++j)
        if (kt * kBN + wgmma::acc_col(t, j) > row0 + 8 * ((j / 2) % 2)) sacc[j] = -INFINITY;
    }

    // Row maxima across the quad; every row has a key at or before its query in this tile
    // (key 0 of tile 0, its own position in the diagonal tile), so the maxima stay finite.
    float new_max[2] = {row_max[0], row_max[1]};
#pragma unroll
    for (int j = 0; j < 64; ++j) new_max[(j / 2) % 2] = fmaxf(new_max[(j / 2) % 2], sacc[j]);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      new_max[r] = fmaxf(new_max[r], __shfl_xor_sync(0xffffffffu, new_max[r], 1));
      new_max[r] = fmaxf(new_max[r], __shfl_xor_sync(0xffffffffu, new_max[r], 2));
    }
    float scale[2], neg_max2[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      scale[r] = ex2((row_max[r] - new_max[r]) * kLog2e);  // 0 on the first tile
      row_max[r] = new_max[r];
      row_sum[r] *= scale[r];
      neg_max2[r] = -new_max[r] * kLog2e;
    }
#pragma unroll
    for (int j = 0; j < 64; ++j) o[j] *= scale[(j / 2) % 2];
    uint32_t p[8][4];  // the A fragment of each k16 step of P V
#pragma unroll
    for (int j = 0; j < 64; ++j) {
      sacc[j] = ex2(fmaf(sacc[j], kLog2e, neg_max2[(j / 2) % 2]));
      row_sum[(j / 2) % 2] += sacc[j];
    }
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        p[kk][r] = pack_half2(sacc[flash_wgmma::p_acc_index(kk, 2 * r)],
                              sacc[flash_wgmma::p_acc_index(kk, 2 * r + 1)]);

    mbar_wait(&v_full[s], phase);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) wgmma_m64n128k16_rs(o, p[kk], flash_wgmma::v_tile_desc(v_addr, kk));
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(o);
    if (lane == 0) mbar_arrive(&empty[s]);  // this warp is done with the stage's K and V
  }

  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    inv[r] = 1.f / sum;
  }
  const int64_t q_stride = int64_t{heads} * kHd;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + 8 * r;
    if (row < t_len) {
      __half* dst = out + row * q_stride + work.head * kHd + wgmma::acc_col(t, 0);
#pragma unroll
      for (int c = 0; c < 16; ++c)  // 8 columns a step
        *reinterpret_cast<__half2*>(dst + 8 * c) =
            __floats2half2_rn(o[4 * c + 2 * r] * inv[r], o[4 * c + 2 * r + 1] * inv[r]);
    }
  }
#endif
}

// ---- host

struct Attention {
  int t, heads, kv_heads;
  __half *q, *k, *v, *o, *o_ref;  // [t, heads, 128], [t, kv_heads, 128] x2, [t, heads, 128] x2
  CUtensorMap map_q, map_k, map_v;
};

Attention make_attention(int t, int heads, int kv_heads) {
  if (t < 1 || heads < 1 || kv_heads < 1 || heads % kv_heads)
    fail("shape t {} heads {} kv_heads {}: heads a multiple of kv_heads", t, heads, kv_heads);
  Attention a{t, heads, kv_heads, nullptr, nullptr, nullptr, nullptr, nullptr, {}, {}, {}};
  const size_t nq = size_t(t) * heads * kHd, nkv = size_t(t) * kv_heads * kHd;
  CUDA_CHECK(cudaMalloc(&a.q, nq * sizeof(__half)));
  CUDA_CHECK(cudaMalloc(&a.k, nkv * sizeof(__half)));
  CUDA_CHECK(cudaMalloc(&a.v, nkv * sizeof(__half)));
  CUDA_CHECK(cudaMalloc(&a.o, nq * sizeof(__half)));
  CUDA_CHECK(cudaMalloc(&a.o_ref, nq * sizeof(__half)));
  a.map_q = hopper::sw128_map(a.q, t, int64_t{heads} * kHd, int64_t{heads} * kHd, kBM);
  a.map_k = hopper::sw128_map(a.k, t, int64_t{kv_heads} * kHd, int64_t{kv_heads} * kHd, kBN);
  a.map_v = hopper::sw128_map(a.v, t, int64_t{kv_heads} * kHd, int64_t{kv_heads} * kHd, kBN);
  return a;
}

void free_attention(Attention& a) {
  for (__half* p : {a.q, a.k, a.v, a.o, a.o_ref}) CUDA_CHECK(cudaFree(p));
}

void run_flash(const Attention& a, cudaStream_t stream = nullptr) {
  const int blocks = a.heads * ((a.t + kBM - 1) / kBM);
  flash_wgmma_kernel<<<blocks, kThreads, kSmemBytes, stream>>>(a.map_q, a.map_k, a.map_v, a.o, a.t, a.heads,
                                                               a.kv_heads);
  CUDA_CHECK_LAUNCH();
}

void run_prefill(const Attention& a, cudaStream_t stream = nullptr) {
  PrefillAttentionArgs args;
  args.q = a.q;
  args.k_cache = a.k;
  args.v_cache = a.v;
  args.p0 = 0;
  args.rows = a.t;
  args.heads = a.heads;
  args.kv_heads = a.kv_heads;
  args.head_dim = kHd;
  args.out = a.o_ref;
  args.cache_positions = a.t;
  args.kv = KvScheme::fp16;
  prefill_attention(args, stream);
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

// The exact output of one (row, head) and the scales of its rounding errors.
struct RefRow {
  std::vector<double> o;    // [128]
  std::vector<double> abs;  // [128]: sum_k p_k |v_k,d| / l (A in tolerance_of)
  double l = 0;             // sum_k p_k with the largest p = 1
  double qk_abs = 0;        // max_k sum_d |q_d k_k,d|
  int keys = 0;
};

RefRow reference_row(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                     int heads, int kv_heads, int row, int head) {
  const int kvh = head / (heads / kv_heads);
  const float* qr = &q[(size_t(row) * heads + head) * kHd];
  RefRow r;
  r.keys = row + 1;
  std::vector<double> s(r.keys);
  double mx = -INFINITY;
  for (int key = 0; key <= row; ++key) {
    const float* kr = &k[(size_t(key) * kv_heads + kvh) * kHd];
    double dot = 0, a = 0;
    for (int d = 0; d < kHd; ++d) {
      dot += double(qr[d]) * kr[d];
      a += std::fabs(double(qr[d]) * kr[d]);
    }
    s[key] = dot;
    mx = std::max(mx, dot);
    r.qk_abs = std::max(r.qk_abs, a);
  }
  r.o.assign(kHd, 0.0);
  r.abs.assign(kHd, 0.0);
  for (int key = 0; key <= row; ++key) {
    const double p = std::exp(s[key] - mx);
    r.l += p;
    const float* vr = &v[(size_t(key) * kv_heads + kvh) * kHd];
    for (int d = 0; d < kHd; ++d) {
      r.o[d] += p * vr[d];
      r.abs[d] += p * std::fabs(double(vr[d]));
    }
  }
  for (int d = 0; d < kHd; ++d) {
    r.o[d] /= r.l;
    r.abs[d] /= r.l;
  }
  return r;
}

// How far the kernel's fp16 output may be from the exact value o (see the header): relative
// errors of each term p v (P's fp16 rounding, S's fp32 dot product through exp, ex2.approx, the
// fp32 sums) times A = sum p|v| / l, in numerator and denominator alike, plus P's subnormals and
// the output's rounding.
double tolerance_of(double o, double abs, double l, double qk_abs, int keys) {
  const double e_p = kHd * std::ldexp(qk_abs, -23) + std::ldexp(1.0, -16);
  const double e_sum = keys * std::ldexp(1.0, -23);
  return (std::ldexp(1.0, -11) + 2 * e_p + 2 * e_sum) * abs + keys * std::ldexp(1.0, -25) / l +
         std::ldexp(std::fabs(o), -11) + std::ldexp(1.0, -24);
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

bool report_check(const char* reference, int t, int heads, int kv_heads, int row_step, const char* tol,
                  const CheckResult& r) {
  const bool pass = r.bad == 0 && r.checked > 0;
  std::printf(
      "{\"bench\":\"flash_wgmma\",\"check\":\"causal\",\"t\":%d,\"heads\":%d,\"kv_heads\":%d,\"head_dim\":%d,"
      "\"reference\":\"%s\",\"rows\":\"every %d\",\"tolerance\":\"%s\",\"checked\":%zu,\"max_abs_err\":%.6g,"
      "\"max_err_over_tol\":%.4g,\"bad\":%zu,\"result\":\"%s\"}\n",
      t, heads, kv_heads, kHd, reference, row_step, tol, r.checked, r.max_err, r.max_ratio, r.bad,
      pass ? "PASS" : "FAIL");
  std::fflush(stdout);
  return pass;
}

constexpr const char* kCpuTol = "(2^-11 + 2 e_p + 2 n 2^-23) sum p|v|/l + n 2^-25/l + 2^-11|o| + 2^-24";
// Both kernels within kCpuTol of the exact value, with its scales at their largest: sum p|v|/l
// <= max|v| = 1, l >= 1, sum|q k| <= 128 * 2 * 2 / sqrt(128).
constexpr const char* kPrefillTol = "2 x the cpu tolerance at sum p|v|/l = 1, l = 1, n = t";

// The kernel against the CPU on every row_step-th row (all heads), and against
// prefill_attention() on every element when vs_prefill.
bool check(int t, int heads, int kv_heads, int row_step, bool vs_prefill) {
  Attention a = make_attention(t, heads, kv_heads);
  const size_t nq = size_t(t) * heads * kHd, nkv = size_t(t) * kv_heads * kHd;
  const auto q = random_halves(nq, -2.f, 2.f, 1.f / std::sqrt(float(kHd)), 11 + t + heads);
  const auto k = random_halves(nkv, -2.f, 2.f, 1.f, 12 + t + kv_heads);
  const auto v = random_halves(nkv, -1.f, 1.f, 1.f, 13 + t);
  upload(a.q, q);
  upload(a.k, k);
  upload(a.v, v);
  CUDA_CHECK(cudaMemset(a.o, 0xFF, nq * sizeof(__half)));  // NaN: an unwritten element fails
  run_flash(a);
  if (vs_prefill) run_prefill(a);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = download(a.o, nq);
  const auto ref = vs_prefill ? download(a.o_ref, nq) : std::vector<__half>{};
  free_attention(a);

  std::vector<float> qf(nq), kf(nkv), vf(nkv);
  for (size_t i = 0; i < nq; ++i) qf[i] = __half2float(q[i]);
  for (size_t i = 0; i < nkv; ++i) kf[i] = __half2float(k[i]);
  for (size_t i = 0; i < nkv; ++i) vf[i] = __half2float(v[i]);
  const int workers = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<CheckResult> parts(workers);
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      int item = 0;
      for (int row = 0; row < t; row += row_step)
        for (int h = 0; h < heads; ++h, ++item) {
          if (item % workers != w) continue;
          const RefRow r = reference_row(qf, kf, vf, heads, kv_heads, row, h);
          for (int d = 0; d < kHd; ++d)
            parts[w].add(__half2float(got[(size_t(row) * heads + h) * kHd + d]), r.o[d],
                         tolerance_of(r.o[d], r.abs[d], r.l, r.qk_abs, r.keys));
        }
    });
  for (auto& th : pool) th.join();
  CheckResult cpu;
  for (const auto& p : parts) cpu.merge(p);
  bool ok = report_check("cpu", t, heads, kv_heads, row_step, kCpuTol, cpu);
  if (vs_prefill) {
    const double qk_abs_max = kHd * 2.0 * 2.0 / std::sqrt(double(kHd));
    CheckResult r;
    for (size_t i = 0; i < nq; ++i) {
      const double want = __half2float(ref[i]);
      r.add(__half2float(got[i]), want, 2 * tolerance_of(want, 1.0, 1.0, qk_abs_max, t));
    }
    ok &= report_check("prefill_attention", t, heads, kv_heads, 1, kPrefillTol, r);
  }
  return ok;
}

void time_shape(int t, const char* gpu) {
  const int heads = 32, kv_heads = 8;
  Attention a = make_attention(t, heads, kv_heads);
  const size_t nq = size_t(t) * heads * kHd, nkv = size_t(t) * kv_heads * kHd;
  fill(a.q, nq, 21, 2.f / std::sqrt(float(kHd)));
  fill(a.k, nkv, 22, 2.f);
  fill(a.v, nkv, 23, 1.f);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  const int reps = t <= 16384 ? 10 : 5;
  const double ms_f = median_ms(stream, reps, [&] { run_flash(a, stream); });
  const double ms_p = median_ms(stream, reps, [&] { run_prefill(a, stream); });
  // How far apart the two outputs are on this data (information, not a check: the checks above
  // bound it at 4096).
  const auto got = download(a.o, nq);
  const auto ref = download(a.o_ref, nq);
  double diff = 0;
  for (size_t i = 0; i < nq; ++i)
    diff = std::max(diff, double(std::fabs(__half2float(got[i]) - __half2float(ref[i]))));
  const double flops = 4.0 * (double(t) * (t + 1) / 2) * kHd * heads;
  for (auto [kernel, ms] : {std::pair{"flash_wgmma_128x128_s2", ms_f}, std::pair{"prefill_attention", ms_p}})
    std::printf(
        "{\"bench\":\"flash_wgmma\",\"gpu\":\"%s\",\"kernel\":\"%s\",\"t\":%d,\"heads\":%d,\"kv_heads\":%d,"
        "\"head_dim\":%d,\"causal\":true,\"dtype\":\"fp16 in, fp32 accumulate, fp16 out\",\"reps\":%d,"
        "\"median_ms\":%.4f,\"tflops\":%.1f,\"max_abs_diff_between_kernels\":%.4g}\n",
        gpu, kernel, t, heads, kv_heads, kHd, reps, ms, flops / (ms * 1e-3) / 1e12, diff);
  std::fflush(stdout);
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
    CUDA_CHECK(cudaFuncSetAttribute(flash_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(kSmemBytes)));
    bool ok = true;
    if (checks) {
      for (auto [t, heads, kv_heads] :
           {std::tuple{128, 4, 1}, std::tuple{128, 4, 2}, std::tuple{300, 4, 1}, std::tuple{300, 4, 2},
            std::tuple{1024, 4, 1}, std::tuple{1024, 4, 2}})
        ok &= check(t, heads, kv_heads, 1, false);
      ok &= check(4096, 32, 8, 41, true);
      std::printf("{\"bench\":\"flash_wgmma\",\"checks\":\"%s\"}\n", ok ? "PASS" : "FAIL");
      std::fflush(stdout);
    }
    if (timing)
      for (int t : {4096, 16384, 32768, 65536}) time_shape(t, prop.name);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flash_wgmma_bench: %s\n", e.what());
    return 1;
  }
}
