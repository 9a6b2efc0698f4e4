// The prefill's causal attention on Hopper (sm_90a): wgmma fed by TMA, FlashAttention-3's
// structure; prefill_attention() runs it on a compute capability 9.0 GPU for an fp16 cache and
// head_dim 128 (prefill_attention_plan.h). Built only where CMAKE_CUDA_ARCHITECTURES holds 90
// (the Hopper kernels' object library, sm_90a code alone: DB_HOPPER).
//
// A chunk of `rows` queries at positions p0 .. p0 + rows - 1, Q [rows][heads][128] already
// scaled by 1/sqrt(128) (as prefill_qkv leaves it), K and V from the fp16 cache
// [cache_positions][kv_heads][128], O [rows][heads][128]; the query at position p attends to
// positions 0 .. p; query head h reads kv head h / (heads / kv_heads). fp16 in, fp32
// accumulate, fp16 out.
//
// A CTA per (query head, tile of 128 query rows), the longest tiles first and the query heads of
// one kv head side by side (flash_wgmma_layout.h's cta_work), one CTA an SM (225 KB of shared
// memory with the overlapped pipeline's 3 stages, 161 KB with the serial one's 2). Three warpgroups: the
// first gives registers away (setmaxnreg.dec 24) and one thread of it issues TMA (cp.async.bulk.tensor.2d,
// 128-byte swizzle, boxes of 64 dims x 128 rows): the Q tile once, then for each key tile up to the tile's
// last query a K tile and a V tile (128 positions x 128 dims, two boxes each) into a ring of stages; K and V
// of a stage complete on their own "full" mbarriers, so S can start before V has landed, and the stage is
// free again when the 8 consumer warps have arrived on its "empty" mbarrier. The maps of K and V end at the
// chunk's last position (kv_map_rows): TMA fills the rest of a box with zeros, so positions the
// prefill has not written yet never reach a tile. The other two warpgroups (setmaxnreg.inc 240)
// own 64 queries each and, for each key tile:
//   S = Q K^T: 8 wgmma.m64n128k16 with Q and K from shared memory (K-major descriptors);
//   the causal mask, element by element, on the tiles the diagonal crosses (one when p0 is a
//   multiple of 128, two otherwise; key_tile_needs_mask); the online softmax in base 2 (log2(e)
//   folded into one FMA before ex2.approx) on the accumulator fragment in registers, a row's
//   max across the 4 lanes of its quad, its sum kept per thread until the end;
//   O += P V: P rounded to fp16 in registers, the S accumulator fragment read in place as
//   wgmma's A fragment (p_acc_index), 8 wgmma.m64n128k16 with A from registers and V from
//   shared memory as an MN-major B (imm-trans-b = 1, v_tile_desc);
// then normalise by the row sums and store O from registers as half2.
// The pipeline (prefill.cuh WgmmaPipeline): overlap, the product's, issues key tile kt's S before
// tile kt - 1's P V and runs tile kt's softmax while that P V is in flight (FlashAttention-3's
// overlap inside a warpgroup; a stage is released a tile later, hence 3 stages); serial, a lab
// variant in DEV builds, waits for each wgmma batch before touching its registers. Not in either:
// the consumers' ping-pong on named barriers, and the 8-bit caches.
//
// Every mbarrier wait is the plain try_wait loop: the byte counts are exact. A tile's two boxes
// complete kTileBytes whatever part of them TMA zero-fills, and every box starts inside its map
// (the Q tile's first row is a row of the chunk, a walked key tile's first position at most the
// chunk's last); tests/test_flash_wgmma_layout.cpp checks both over ragged chunks from any p0.
//
// ptxas -v (nvcc 13, sm_90a): 168 registers (the cap of the 384-thread launch bound;
// setmaxnreg moves them to 24 and 240 at run time), no stack, no spills, and none of its
// C7515/C7519 notes (wgmma serialised because another instruction touches its registers).
#include <cuda.h>
#include <cuda_fp16.h>

#include "common.cuh"
#include "flash_wgmma_layout.h"
#include "mbarrier.cuh"
#include "prefill.cuh"
#include "tma_wgmma.cuh"
#include "wgmma_layout.h"

namespace db::cuda {
namespace {

namespace fw = flash_wgmma;

constexpr int kHd = fw::kHeadDim;  // 8 k16 steps of Q K^T, N of P V
constexpr int kBM = 128;           // query rows a CTA
constexpr int kBN = 128;           // positions a key tile: N of Q K^T, 8 k16 steps of P V
constexpr int kConsumers = 2;      // warpgroups of wgmma, 64 queries each
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr uint32_t kTileBytes = fw::kTileBytes;  // 128 rows x 128 dims, two boxes
// K and V tiles in the ring: the overlapped pipeline releases a stage a tile later (its V is
// read by the next tile's P V), so it keeps one more for the producer to fill meanwhile.
constexpr int stages_of(WgmmaPipeline p) {
  return p == WgmmaPipeline::overlap ? 3 : 2;
}
// Q, then the stages' K and V tiles; the alignment slack (tiles on 1024-byte boundaries); the
// Q barrier and 3 a stage (K full, V full, empty).
constexpr size_t smem_bytes(WgmmaPipeline p) {
  return size_t{kTileBytes} * (1 + 2 * stages_of(p)) + 1024 + (1 + 3 * stages_of(p)) * sizeof(uint64_t);
}
static_assert(smem_bytes(WgmmaPipeline::overlap) <= 227 * 1024, "an H100/H200 CTA's shared memory");
static_assert(smem_bytes(WgmmaPipeline::serial) <= 227 * 1024, "an H100/H200 CTA's shared memory");
static_assert(kBM == kBN, "a query tile's diagonal crosses at most two key tiles");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr float kLog2e = 1.4426950408889634f;
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

// O = causal softmax(Q K^T) V for a chunk of `rows` queries from position p0; tm_q: Q as
// [rows, heads * 128], tm_k, tm_v: K and V as [p0 + rows, kv_heads * 128], boxes of 64 x 128,
// 128-byte swizzle, zero fill past the end. A CTA per (head, query tile): gridDim.x = heads *
// ceil(rows / 128).
template <WgmmaPipeline kPipeline>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_wgmma_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                         const __grid_constant__ CUtensorMap tm_v, __half* __restrict__ out, int rows, int p0,
                         int heads, int kv_heads) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kStages = stages_of(kPipeline);
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint8_t* q_tile = smem;
  uint8_t* ring = smem + kTileBytes;  // stage s: K at ring + 2 s kTileBytes, V kTileBytes on
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + kTileBytes * (1 + 2 * kStages));
  uint64_t* k_full = q_full + 1;        // [kStages]
  uint64_t* v_full = k_full + kStages;  // [kStages]
  uint64_t* empty = v_full + kStages;   // [kStages]

  const int q_tiles = (rows + kBM - 1) / kBM;
  const fw::CtaWork work = fw::cta_work(blockIdx.x, heads, q_tiles);
  const int kv_head = fw::kv_head_of(work.head, heads, kv_heads);
  const int key_tiles = fw::causal_key_tiles(work.q_tile, kBM, kBN, rows, p0);

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
      for (int b = 0; b < 2; ++b) {
        const fw::BoxCoord c = fw::q_box(work.head, work.q_tile, kBM, b);
        tma_load_2d(q_tile + b * fw::kBoxBytes, &tm_q, c.inner, c.outer, q_full);
      }
      for (int kt = 0; kt < key_tiles; ++kt) {
        const int s = kt % kStages;
        const uint32_t phase = (kt / kStages) & 1;
        mbar_wait(&empty[s], phase ^ 1);  // the first use of a stage passes at once
        uint8_t* k_tile = ring + s * 2 * kTileBytes;
        uint8_t* v_tile = k_tile + kTileBytes;
        mbar_expect_tx(&k_full[s], kTileBytes);
        for (int b = 0; b < 2; ++b) {
          const fw::BoxCoord c = fw::kv_box(kv_head, kt, kBN, b);
          tma_load_2d(k_tile + b * fw::kBoxBytes, &tm_k, c.inner, c.outer, &k_full[s]);
        }
        mbar_expect_tx(&v_full[s], kTileBytes);
        for (int b = 0; b < 2; ++b) {
          const fw::BoxCoord c = fw::kv_box(kv_head, kt, kBN, b);
          tma_load_2d(v_tile + b * fw::kBoxBytes, &tm_v, c.inner, c.outer, &v_full[s]);
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
  const int consumer = warpgroup - 1;  // queries 64 consumer .. 64 consumer + 63 of the tile
  const int lane = t % 32;
  // This thread's two rows of the fragment (acc_row: r and r + 8): the first's chunk row, and
  // the first's position.
  const int row0 = fw::query_row(work.q_tile, kBM, consumer, t, 0);
  const int pos0 = p0 + row0;
  const uint32_t q_addr = smem_u32(q_tile), ring_addr = smem_u32(ring);

  float o[64];
#pragma unroll
  for (int j = 0; j < 64; ++j) o[j] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};  // of S, in natural units
  float row_sum[2] = {0.f, 0.f};              // this thread's part of the row's sum of P

  // Key tile kt's S = Q K^T into acc: 8 wgmmas on its stage's K, committed as one group.
  const auto issue_s = [&](float(&acc)[64], int kt) {
    const int s = kt % kStages;
    mbar_wait(&k_full[s], (kt / kStages) & 1);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kHd / 16; ++kk)
      wgmma_m64n128k16_ss(acc, fw::kmajor_tile_desc(q_addr, 64 * consumer, kk),
                          fw::kmajor_tile_desc(ring_addr + s * 2 * kTileBytes, 0, kk), kk > 0);
    wgmma_commit();
  };
  // O += P V of key tile kt: 8 wgmmas, P from registers, V from its stage, committed as one group.
  const auto issue_pv = [&](const uint32_t(&pa)[8][4], int kt) {
    const int s = kt % kStages;
    mbar_wait(&v_full[s], (kt / kStages) & 1);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk)
      wgmma_m64n128k16_rs(o, pa[kk], fw::v_tile_desc(ring_addr + s * 2 * kTileBytes + kTileBytes, kk));
    wgmma_commit();
  };
  // Key tile kt's S turned into its P in place: the keys past a row's query masked (its
  // position pos0, or pos0 + 8 for the fragment's second row, the zero-filled positions past the
  // chunk among them), the row maxima across the quad, the base-2 exponentials from them, this
  // thread's part of the row sums. `scale` gets each row's factor from the old maxima to the new
  // (0 on the first tile), which O, not yet rescaled, still has to take. Key tile 0 holds
  // position 0, which every row attends to, so the running maxima are finite from the first tile
  // on, and a later tile whose keys are all past a row's query (the second tile the diagonal
  // crosses) leaves them as they are.
  const auto softmax = [&](float(&acc)[64], int kt, float(&scale)[2]) {
    if (fw::key_tile_needs_mask(work.q_tile, kt, kBM, kBN, p0)) {
#pragma unroll
      for (int j = 0; j < 64; ++j)
        if (fw::causal_masked(fw::key_position(kt, kBN, t, j), pos0 + 8 * ((j / 2) % 2))) acc[j] = -INFINITY;
    }
    float new_max[2] = {row_max[0], row_max[1]};
#pragma unroll
    for (int j = 0; j < 64; ++j) new_max[(j / 2) % 2] = fmaxf(new_max[(j / 2) % 2], acc[j]);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      new_max[r] = fmaxf(new_max[r], __shfl_xor_sync(0xffffffffu, new_max[r], 1));
      new_max[r] = fmaxf(new_max[r], __shfl_xor_sync(0xffffffffu, new_max[r], 2));
    }
    float neg_max2[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      scale[r] = ex2((row_max[r] - new_max[r]) * kLog2e);
      row_max[r] = new_max[r];
      row_sum[r] *= scale[r];
      neg_max2[r] = -new_max[r] * kLog2e;
    }
#pragma unroll
    for (int j = 0; j < 64; ++j) {
      acc[j] = ex2(fmaf(acc[j], kLog2e, neg_max2[(j / 2) % 2]));
      row_sum[(j / 2) % 2] += acc[j];
    }
  };
  const auto rescale_o = [&](const float(&scale)[2]) {
#pragma unroll
    for (int j = 0; j < 64; ++j) o[j] *= scale[(j / 2) % 2];
  };
  // P rounded to fp16 as the A fragment of each k16 step of P V.
  const auto pack_p = [&](const float(&acc)[64], uint32_t(&pa)[8][4]) {
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        pa[kk][r] = pack_half2(acc[fw::p_acc_index(kk, 2 * r)], acc[fw::p_acc_index(kk, 2 * r + 1)]);
  };
  // This warp is done with key tile kt's stage (its K and its V).
  const auto release = [&](int kt) {
    if (lane == 0) mbar_arrive(&empty[kt % kStages]);
  };

  float sacc[64];
  uint32_t p[8][4];
  float scale[2];
  mbar_wait(q_full, 0);
  if constexpr (kPipeline == WgmmaPipeline::serial) {
    // Each wgmma batch waited for before its registers are touched.
    for (int kt = 0; kt < key_tiles; ++kt) {
      issue_s(sacc, kt);
      wgmma_wait<0>();
      fence_registers(sacc);
      softmax(sacc, kt, scale);
      rescale_o(scale);
      pack_p(sacc, p);
      issue_pv(p, kt);
      wgmma_wait<0>();
      fence_registers(o);
      release(kt);
    }
  } else {
    // FlashAttention-3's overlap inside a warpgroup: tile kt's S = Q K^T is issued before tile
    // kt - 1's P V, and tile kt's softmax runs while that P V is in flight. O takes tile kt's
    // rescale once the P V into it is done; P V of tile kt - 1 reads p, so tile kt's P is packed
    // from sacc only then. Invariant at the top of iteration kt: O holds tiles < kt - 1 in units
    // of tile kt - 1's maxima, p is tile kt - 1's P.
    issue_s(sacc, 0);
    wgmma_wait<0>();
    fence_registers(sacc);
    softmax(sacc, 0, scale);  // O is still zero: its factor does not matter
    pack_p(sacc, p);
    for (int kt = 1; kt < key_tiles; ++kt) {
      issue_s(sacc, kt);
      issue_pv(p, kt - 1);
      wgmma_wait<1>();  // the older group, tile kt's S, is complete
      fence_registers(sacc);
      softmax(sacc, kt, scale);
      wgmma_wait<0>();  // tile kt - 1's P V is complete: O and p are free
      fence_registers(o);
      release(kt - 1);
      rescale_o(scale);
      pack_p(sacc, p);
    }
    issue_pv(p, key_tiles - 1);
    wgmma_wait<0>();
    fence_registers(o);
    release(key_tiles - 1);
  }

  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    inv[r] = 1.f / sum;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + 8 * r;
    if (row < rows) {
      __half* dst = out + fw::out_offset(row, heads, work.head, wgmma::acc_col(t, 0));
#pragma unroll
      for (int c = 0; c < 16; ++c)  // 8 columns a step
        *reinterpret_cast<__half2*>(dst + 8 * c) =
            __floats2half2_rn(o[4 * c + 2 * r] * inv[r], o[4 * c + 2 * r + 1] * inv[r]);
    }
  }
#endif
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <WgmmaPipeline kPipeline>
void launch_wgmma(const PrefillAttentionArgs& a, cudaStream_t s) {
  static bool configured = false;  // per device would be exact; decodebench runs on one
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(prefill_wgmma_kernel<kPipeline>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem_bytes(kPipeline))));
    configured = true;
  }
  const int64_t q_dim = int64_t{a.heads} * kHd, kv_dim = int64_t{a.kv_heads} * kHd;
  const int64_t kv_rows = fw::kv_map_rows(a.p0, a.rows);
  const CUtensorMap map_q = hopper::sw128_map(a.q, a.rows, q_dim, q_dim, kBM);
  const CUtensorMap map_k = hopper::sw128_map(a.k_cache, kv_rows, kv_dim, kv_dim, kBN);
  const CUtensorMap map_v = hopper::sw128_map(a.v_cache, kv_rows, kv_dim, kv_dim, kBN);
  const int64_t blocks = int64_t{a.heads} * ((a.rows + kBM - 1) / kBM);
  prefill_wgmma_kernel<kPipeline><<<static_cast<unsigned>(blocks), kThreads, smem_bytes(kPipeline), s>>>(
      map_q, map_k, map_v, a.out, static_cast<int>(a.rows), static_cast<int>(a.p0), a.heads, a.kv_heads);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool prefill_wgmma_pipeline_built(WgmmaPipeline p) {
#if defined(DB_DEV)
  return true;
#else
  return p == WgmmaPipeline::overlap;
#endif
}

void prefill_attention_wgmma(const PrefillAttentionArgs& a, cudaStream_t s, WgmmaPipeline pipeline) {
  if (a.rows <= 0) return;
  if (a.kv != KvScheme::fp16 || a.head_dim != kHd)
    fail("prefill_attention_wgmma: an fp16 cache and head_dim {} only (got {} and {})", kHd, to_string(a.kv),
         a.head_dim);
  if (a.heads < 1 || a.kv_heads < 1 || a.heads % a.kv_heads != 0)
    fail("prefill_attention_wgmma: {} query heads over {} kv heads", a.heads, a.kv_heads);
  // Positions are ints in the kernel and TMA's coordinates are 32-bit.
  if (a.p0 < 0 || a.p0 + a.rows > a.cache_positions || a.p0 + a.rows > (int64_t{1} << 30))
    fail("prefill_attention_wgmma: rows {} from position {} in a cache of {} positions", a.rows, a.p0,
         a.cache_positions);
  if (!aligned16(a.q) || !aligned16(a.k_cache) || !aligned16(a.v_cache) || !aligned16(a.out))
    fail("prefill_attention_wgmma: q, the cache and out 16-byte aligned (TMA's global addresses)");
  if (pipeline == WgmmaPipeline::serial) {
#if defined(DB_DEV)
    return launch_wgmma<WgmmaPipeline::serial>(a, s);
#else
    fail("prefill_attention_wgmma: the serial pipeline is a lab variant (builds with -DDECODEBENCH_DEV=ON)");
#endif
  }
  launch_wgmma<WgmmaPipeline::overlap>(a, s);
}

}  // namespace db::cuda
