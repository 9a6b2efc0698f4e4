// A Hopper mixed-input GEMM, int4 or int8 weights x fp16 activations on wgmma with the weights as
// the register operand (Machete's design), checked and timed beside cuBLAS (lab tool, sm_90a):
//   build-gpu/decodebench_mixed_wgmma_bench [--check-only] [--splits S] [--ntile N] [rows cols]...
// y[b * rows + r] (+)= sum_c W[r, c] x[b * cols + c] for every sequence b < batch, W quantized
// (int4: w = (q - z) s, a scale and zero point a row and group of 64 k columns or a whole row;
// int8: w = q s, a scale a row), x fp16, y fp32: the batched decode step's linear, the signature
// of the product's gemm_skinny.
//
// Why: above 64 sequences the product dequantizes int4/int8 weights into an fp16 copy in HBM for
// cuBLAS (8b-int4 at 256 sequences 13.6 ms a step against fp16's 9.5). Two designs that avoid the
// copy failed (batch.md §23: mma.sync with warps dequantizing their own fragments, 178 TFLOP/s;
// §24: the copies through L2). Here the weights are stored offline so that a thread's one
// shared-memory load is its wgmma A fragments (tests/bench/mixed_wgmma_layout.h), dequantized in
// registers by a few LOP3/PRMT and exact fp16 steps and fed to wgmma.mma_async as A from registers
// while x is wgmma's B from shared memory (TMA, 128-byte swizzle, as in wgmma_bench). The
// dequantization a weight does not grow with the batch, so the same kernel should stream weights
// at bandwidth at small batches too.
//
// The kernel: a persistent grid (one CTA an SM) walks units (128 weight rows x N sequences x a K
// split; mixed_wgmma_layout.h unit_coord). Three warpgroups: the first gives registers away
// (setmaxnreg.dec 40) and one thread of it fills a ring of stages, a stage one k-chunk of 64
// columns: the two 64-row weight blocks (one 1-D bulk copy, 4 KB int4 / 8 KB int8), the chunk's
// group meta (a bulk copy, 512 bytes) and the x tile of N sequences x 64 columns (TMA, 128-byte
// swizzle, zero-filled past the batch); one expect_tx of the stage's bytes. The other two
// (setmaxnreg.inc 232) each own 64 rows: per chunk one 16-byte (int4) or two (int8) ld.shared of
// the thread's fragment bytes and an 8-byte one of its rows' meta, the dequantization to fp16
// (q - z exact, then one HMUL2 by the scale: fp16((q - z) s), the bits of dequantize_to_f16), then
// four wgmma.m64nNk16 with A from registers and B through a K-major descriptor. The A registers
// are double-buffered across chunks so that a chunk's wgmmas run while the next chunk is loaded
// and dequantized (one wgmma group in flight); a stage is released (8 warp arrivals on its empty
// mbarrier) when the wgmmas that read its x have completed. Every mbarrier wait is bounded (2 s,
// then a message and a trap).
// Split K: when the output tiles fill fewer than two waves of SMs, a tile's chunks are split
// (choose_splits); each unit writes its fp32 partial to a workspace, counts itself on the tile's
// counter, and the last to arrive adds the partials in split order (deterministic whatever the
// arrival order), writes y and resets the counter for the next launch.
//
// Checks (before any timing; exit 1 on a failure): integer-valued weights and x (power-of-two
// scales, x in [-2, 2]: every fp32 partial sum is an exact integer or half-integer) against the
// CPU with tolerance 0: int4 with and without a zero point at groups of 64, 128 and a whole row,
// and int8, at batches 1, 7, 8, 9, 64, 65, 256, 300 on 200 x 384 (rows ragged in the last CTA
// tile); the same with one split forced, with every chunk its own split, and accumulating into
// y. Random data (fp16 scales, x in [-1, 1]) against a double-precision CPU dot of the same
// fp16-rounded dequantized weights within cols 2^-22 sum |w x| (fp32 accumulation, ~4x room), on
// 4100 x 1024 at 1, 9, 65, 300 for every scheme, and on the 8b shapes (every 13th row) at 16 and
// 256 for int4 (group 128, zero point) and int8.
// Timing: one 8b layer's four matrices (qkv 6144 x 4096, o 4096 x 4096, gate/up 28672 x 4096,
// down 4096 x 14336, or the shapes given) at 8-512 sequences, int4 (group 128, zero point) and
// int8, beside cuBLAS on fp16 weights of the same shape and the product's dequantize_to_f16 +
// cublasGemmEx path (gemm_rows), every launch on another copy of its matrix (the copies exceed
// L2). One JSON line a (kernel, scheme, batch): microseconds a layer and each matrix's, TFLOP/s,
// GB/s of the weight bytes the kernel reads (its layout's weights and meta; cuBLAS fp16: the
// fp16 weights; dequant+cuBLAS: the canonical quantized bytes).
//
// Exit status: 0 when every check passes, 1 on a failure or an error, 2 without an sm_90 GPU.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_timing.cuh"
#include "common.cuh"
#include "decodebench/half.h"
#include "mbarrier.cuh"
#include "mixed_wgmma_layout.h"
#include "tma_wgmma.cuh"
#include "weights.cuh"
#include "wgmma_layout.h"
#include "wgmma_rs.cuh"

using namespace db;
using namespace db::cuda;
using mixed::Kind;

namespace {

constexpr int kConsumers = 2;
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kMaxStages = 16;
constexpr size_t kSmemBudget = 227 * 1024;  // an H100/H200 CTA's dynamic shared memory

// The shared memory of an instance: a ring of stages, each [x tile | weights | meta].
template <int N, Kind K>
struct Cfg {
  static constexpr uint32_t kXBytes = N * 128;  // N rows of 64 fp16, 128-byte swizzled
  static constexpr uint32_t kWBytes = kConsumers * mixed::block_bytes(K);
  static constexpr uint32_t kStageTx = kXBytes + kWBytes + mixed::kMetaBytes;
  static constexpr uint32_t kStageBytes = (kStageTx + 1023) / 1024 * 1024;  // x tiles on 1024-byte boundaries
  static constexpr int kFit = static_cast<int>((kSmemBudget - 1024 - 2 * kMaxStages * 8 - 16) / kStageBytes);
  static constexpr int kStages = kFit < kMaxStages ? kFit : kMaxStages;
  // The ring, the 1024-byte alignment slack, 2 x kStages mbarriers and the last-unit flag.
  static constexpr size_t kSmemBytes = size_t{kStages} * kStageBytes + 1024 + 2 * kStages * 8 + 16;
  static_assert(kStages >= 2, "a ring of at least two stages");
  static_assert(kSmemBytes <= kSmemBudget, "an H100/H200 CTA's shared memory");
};

struct MixedArgs {
  const uint8_t* w;     // mixed_wgmma_layout.h's blocks: row tiles x chunks x 2 x block_bytes
  const uint8_t* meta;  // row tiles x groups x 512 bytes
  float* y;             // [batch, rows]
  int* counters;        // [row tiles x seq tiles] (mixed::kCounterBytes), zero between launches
  float* partials;      // [units][2 consumers][64 x N] with splits
  int64_t rows, chunks, chunks_per_group, groups, units;
  int batch, seq_tiles, splits;
  int accumulate;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using hopper::bulk_load;
using hopper::fence_registers;
using hopper::mbar_arrive;
using hopper::mbar_expect_tx;
using hopper::mbar_init;
using hopper::mbar_wait_bounded;
using hopper::smem_u32;
using hopper::tma_load_2d;
using hopper::wgmma_commit;
using hopper::wgmma_fence;
using hopper::wgmma_wait;

__device__ __forceinline__ uint32_t lop3_and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(a), "r"(b), "r"(c));  // (a & b) | c
  return r;
}
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}
__device__ __forceinline__ uint32_t hsub2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}
__device__ __forceinline__ uint32_t hmul2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint2 ld_shared_v2(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr));
  return v;
}

// Pins the values of `a` before what follows (the wgmma.fence): the dequantization may not sink
// past it.
__device__ __forceinline__ void fence_fragment(uint32_t (&a)[mixed::kSteps][4]) {
#pragma unroll
  for (int s = 0; s < mixed::kSteps; ++s)
#pragma unroll
    for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(a[s][r])::"memory");
}

// The thread's A fragments of one k-chunk (four k16 steps) from the stage's weight block and
// meta entry, dequantized as mixed_wgmma_layout.h lays out: registers 0 and 2 hold rows g, 1 and
// 3 rows g + 8 of the thread's warp (PTX ISA, "Register Fragments", the m64nNk16 A figure for
// .f16; wgmma_layout.h a_row / a_col), the lower column of each pair in the low half.
template <int N, Kind K>
__device__ __forceinline__ void load_fragments(uint32_t stage, int consumer, int t, uint32_t (&a)[mixed::kSteps][4]) {
  using C = Cfg<N, K>;
  const uint32_t w = stage + C::kXBytes + consumer * mixed::block_bytes(K);
  const uint2 m = ld_shared_v2(stage + C::kXBytes + C::kWBytes + (32 * consumer + t / 4) * mixed::kMetaEntryBytes);
  // Each row's scale and zero constant in both halves of an f16x2.
  const uint32_t s_lo = prmt(m.x, 0, 0x1010), s_hi = prmt(m.x, 0, 0x3232);
  const uint32_t z_lo = prmt(m.y, 0, 0x1010), z_hi = prmt(m.y, 0, 0x3232);
  if constexpr (K == Kind::int4) {
    constexpr uint32_t kSixteenth = 0x2c002c00u;  // 1/16 twice
    const uint4 v = ld_shared_v4(w + 16 * t);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int s = 0; s < mixed::kSteps; ++s) {
      const uint32_t w0 = words[s], w8 = words[s] >> 8;
      a[s][0] = hmul2(hsub2(lop3_and_or(w0, 0x000f000fu, 0x64006400u), z_lo), s_lo);  // (1024 + q) - (1024 + z)
      a[s][1] = hmul2(hfma2(lop3_and_or(w0, 0x00f000f0u, 0x64006400u), kSixteenth, z_hi), s_hi);  // 64 + q - (64 + z)
      a[s][2] = hmul2(hsub2(lop3_and_or(w8, 0x000f000fu, 0x64006400u), z_lo), s_lo);
      a[s][3] = hmul2(hfma2(lop3_and_or(w8, 0x00f000f0u, 0x64006400u), kSixteenth, z_hi), s_hi);
    }
  } else {
    const uint4 v0 = ld_shared_v4(w + 16 * t);         // steps 0, 1
    const uint4 v1 = ld_shared_v4(w + 2048 + 16 * t);  // steps 2, 3
    const uint32_t words[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
    for (int s = 0; s < mixed::kSteps; ++s)
#pragma unroll
      for (int r = 0; r < 4; ++r)  // (1024 + u) - 1152 = q
        a[s][r] = hmul2(hsub2(prmt(words[2 * s + r / 2], 0x64646464u, r % 2 ? 0x5351u : 0x5250u), r % 2 ? z_hi : z_lo),
                        r % 2 ? s_hi : s_lo);
  }
}

// One k-chunk of a consumer: wait for its stage, dequantize into frag, four wgmmas, then (past the
// unit's first chunk) wait for the previous chunk's wgmmas and release that chunk's stage.
template <int N, Kind K>
__device__ __forceinline__ void consume_chunk(uint32_t ring, uint64_t* full, uint64_t* empty, uint32_t it,
                                              bool first, int consumer, int t, float (&acc)[N / 2],
                                              uint32_t (&frag)[mixed::kSteps][4]) {
  using C = Cfg<N, K>;
  const uint32_t s = it % C::kStages, phase = (it / C::kStages) & 1;
  mbar_wait_bounded(&full[s], phase);
  const uint32_t stage = ring + s * C::kStageBytes;
  load_fragments<N, K>(stage, consumer, t, frag);
  fence_fragment(frag);
  // PTX ISA, "wgmma.fence": required before a wgmma.mma_async whose A registers (or accumulators)
  // other instructions have written.
  wgmma_fence();
  // x's K-major descriptor (PTX ISA, "Matrix Descriptor Format" and "Shared Memory Matrix
  // Layout"; wgmma_layout.h kmajor_sw128_desc): 128-byte rows, SBO 1024 to the next 8
  // sequences, 128-byte swizzle; each k16 step 32 bytes further (2 in the start address's
  // 16-byte units), as wgmma_bench advances its B.
  const uint64_t desc = wgmma::kmajor_sw128_desc(stage);
#pragma unroll
  for (int k = 0; k < mixed::kSteps; ++k) bench::wgmma_rs<N>(acc, frag[k], desc + 2 * k, !first || k > 0);
  wgmma_commit();
  // PTX ISA, "wgmma.wait_group": the A registers and the shared memory a wgmma reads may not be
  // touched before a wait_group that covers it. Waiting for all but the newest group: the
  // previous chunk's wgmmas have completed, so its frag buffer and its stage's x are free.
  if (!first) {
    wgmma_wait<1>();
    if (t % 32 == 0) mbar_arrive(&empty[(it - 1) % C::kStages]);
  }
}
#endif

template <int N, Kind K>
__global__ void __launch_bounds__(kThreads, 1)
    mixed_gemm(const __grid_constant__ CUtensorMap tm_x, const MixedArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = Cfg<N, K>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kStages * C::kStageBytes);  // [kStages]
  uint64_t* empty = full + C::kStages;                                               // [kStages]
  volatile int* last_flag = reinterpret_cast<volatile int*>(empty + C::kStages);

  const int warpgroup = threadIdx.x / 128;
  const int t = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      mbar_init(&full[s], 1);                // the producer's expect_tx arrival (plus the bytes)
      mbar_init(&empty[s], kConsumers * 4);  // lane 0 of each consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (t == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(&tm_x) : "memory");
      uint32_t it = 0;  // chunks loaded so far: stage it % kStages, its use it / kStages
      for (int64_t u = blockIdx.x; u < a.units; u += gridDim.x) {
        const mixed::Unit c = mixed::unit_coord(u, a.seq_tiles, a.splits);
        const mixed::KRange kr = mixed::split_range(c.split, a.splits, a.chunks);
        // The chunk's group kept by counting, not dividing: a 64-bit division a chunk would cost
        // the lone producer thread a good part of a chunk's ~240 cycles at small batches.
        int64_t group = kr.k0 / a.chunks_per_group, in_group = kr.k0 - group * a.chunks_per_group;
        for (int64_t kc = kr.k0; kc < kr.k1; ++kc, ++it) {
          const uint32_t s = it % C::kStages, phase = (it / C::kStages) & 1;
          mbar_wait_bounded(&empty[s], phase ^ 1);  // the first use of a stage passes at once
          uint8_t* stage = smem + s * C::kStageBytes;
          // PTX ISA, "mbarrier.expect_tx", "cp.async.bulk.tensor" and "cp.async.bulk": one
          // arrival announcing the stage's bytes, then three copies completing them; a box past
          // the batch still counts whole (its rows zero-filled).
          mbar_expect_tx(&full[s], C::kStageTx);
          tma_load_2d(stage, &tm_x, static_cast<int>(kc * mixed::kChunk), c.st * N, &full[s]);
          bulk_load(stage + C::kXBytes, a.w + mixed::block_index(c.rt, kc, 0, a.chunks) * mixed::block_bytes(K),
                    C::kWBytes, &full[s]);
          bulk_load(stage + C::kXBytes + C::kWBytes, a.meta + (c.rt * a.groups + group) * mixed::kMetaBytes,
                    mixed::kMetaBytes, &full[s]);
          if (++in_group == a.chunks_per_group) {
            in_group = 0;
            ++group;
          }
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int consumer = warpgroup - 1;  // rows 64 consumer .. 64 consumer + 63 of the CTA tile
  float acc[N / 2];
#pragma unroll
  for (int j = 0; j < N / 2; ++j) acc[j] = 0.f;
  uint32_t frag[2][mixed::kSteps][4];  // chunks alternate: one is read by wgmmas in flight
  const uint32_t ring = smem_u32(smem);
  uint32_t it = 0;
  for (int64_t u = blockIdx.x; u < a.units; u += gridDim.x) {
    const mixed::Unit c = mixed::unit_coord(u, a.seq_tiles, a.splits);
    const mixed::KRange kr = mixed::split_range(c.split, a.splits, a.chunks);
    for (int64_t kc = kr.k0; kc < kr.k1; kc += 2) {
      consume_chunk<N, K>(ring, full, empty, it++, kc == kr.k0, consumer, t, acc, frag[0]);
      if (kc + 1 < kr.k1) consume_chunk<N, K>(ring, full, empty, it++, false, consumer, t, acc, frag[1]);
    }
    wgmma_wait<0>();
    fence_registers(acc);
    if (t % 32 == 0) mbar_arrive(&empty[(it - 1) % C::kStages]);

    // The accumulator fragment (PTX ISA, "Register Fragments", the m64nNk16 D figure;
    // wgmma_layout.h acc_row / acc_col): float j at row acc_row(t, j) of the consumer's 64,
    // sequence acc_col(t, j) of the tile's N.
    const int64_t row0 = c.rt * mixed::kCtaRows + 64 * consumer;
    const int seq0 = c.st * N;
    auto store = [&](int j, float v) {
      const int64_t row = row0 + wgmma::acc_row(t, j);
      const int seq = seq0 + wgmma::acc_col(t, j);
      if (row < a.rows && seq < a.batch) {
        float* p = a.y + int64_t{seq} * a.rows + row;
        *p = a.accumulate ? *p + v : v;
      }
    };
    if (a.splits == 1) {
#pragma unroll
      for (int j = 0; j < N / 2; ++j) store(j, acc[j]);
      continue;
    }
    // Split K: this unit's partial, float4 q of thread t at (q * 128 + t) (coalesced), then the
    // tile's counter; the last unit to count adds the partials in split order.
    const int64_t tile = c.rt * a.seq_tiles + c.st;
    const int64_t part_floats = int64_t{kConsumers} * 64 * N;  // a unit's
    float4* mine = reinterpret_cast<float4*>(a.partials + (tile * a.splits + c.split) * part_floats +
                                             int64_t{consumer} * 64 * N);
#pragma unroll
    for (int q = 0; q < N / 8; ++q)
      mine[q * 128 + t] = make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
    __threadfence();
    asm volatile("bar.sync 1, 256;" ::: "memory");  // the two consumer warpgroups
    if (threadIdx.x == 128) {
      const int before = atomicAdd(a.counters + tile, 1);
      *last_flag = before == a.splits - 1;
      if (before == a.splits - 1) a.counters[tile] = 0;  // every split has counted: ready for the next launch
    }
    asm volatile("bar.sync 1, 256;" ::: "memory");
    if (!*last_flag) continue;
    __threadfence();
    const float4* base = reinterpret_cast<const float4*>(a.partials + tile * a.splits * part_floats +
                                                         int64_t{consumer} * 64 * N);
#pragma unroll
    for (int q = 0; q < N / 8; ++q) {
      float4 sum = __ldcg(base + q * 128 + t);
      for (int sp = 1; sp < a.splits; ++sp) {
        const float4 p = __ldcg(base + sp * (part_floats / 4) + q * 128 + t);
        sum.x += p.x;
        sum.y += p.y;
        sum.z += p.z;
        sum.w += p.w;
      }
      store(4 * q, sum.x);
      store(4 * q + 1, sum.y);
      store(4 * q + 2, sum.z);
      store(4 * q + 3, sum.w);
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

int sm_count() {
  static int n = 0;
  if (!n) {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  }
  return n;
}

const char* kind_name(Kind k) {
  return k == Kind::int4 ? "int4" : "int8";
}

// A matrix in the mixed layout on the GPU.
struct MixedMatrix {
  Kind kind = Kind::int4;
  int64_t rows = 0, cols = 0;
  int group_size = 0;  // int4: columns a group, 0 a whole row; int8: 0
  bool zero_point = false;
  uint8_t* w = nullptr;
  uint8_t* meta = nullptr;
  int64_t groups() const { return kind == Kind::int8 ? 1 : mixed::group_count(cols, group_size); }
  int64_t w_bytes() const { return mixed::weight_bytes(kind, rows, cols); }
  int64_t meta_bytes() const { return mixed::meta_bytes(rows, groups()); }
};

MixedMatrix alloc_mixed(Kind k, int64_t rows, int64_t cols, int group_size, bool zero_point) {
  const char* why = nullptr;
  if (!mixed::supports(k, rows, cols, group_size, &why))
    fail("mixed_gemm: {} {}x{} group {}: {}", kind_name(k), rows, cols, group_size, why);
  MixedMatrix m;
  m.kind = k;
  m.rows = rows;
  m.cols = cols;
  m.group_size = k == Kind::int8 ? 0 : group_size;
  m.zero_point = zero_point;
  CUDA_CHECK(cudaMalloc(&m.w, m.w_bytes()));
  CUDA_CHECK(cudaMalloc(&m.meta, m.meta_bytes()));
  return m;
}

void free_mixed(MixedMatrix& m) {
  CUDA_CHECK(cudaFree(m.w));
  CUDA_CHECK(cudaFree(m.meta));
  m.w = m.meta = nullptr;
}

// A launch prepared for (matrix, x, batch): the plan and x's tensor map (boxes of 64 columns x
// n_tile sequences, zero-filled past the batch).
struct Prepared {
  mixed::Plan plan;
  CUtensorMap tm_x;
};

Prepared prepare(const MixedMatrix& m, const __half* x, int64_t batch, int splits_override = 0,
                 int n_tile_override = 0) {
  Prepared p;
  p.plan = mixed::make_plan(m.kind, m.rows, m.cols, batch, sm_count(), splits_override, n_tile_override);
  p.tm_x = hopper::sw128_map(x, batch, m.cols, m.cols, p.plan.n_tile);
  return p;
}

template <int N, Kind K>
void launch_instance(const Prepared& p, const MixedArgs& a, cudaStream_t s) {
  using C = Cfg<N, K>;
  static bool attribute_set = false;
  if (!attribute_set) {
    CUDA_CHECK(cudaFuncSetAttribute(mixed_gemm<N, K>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(C::kSmemBytes)));
    attribute_set = true;
  }
  mixed_gemm<N, K><<<p.plan.grid, kThreads, C::kSmemBytes, s>>>(p.tm_x, a);
}

template <Kind K>
void launch_kind(const Prepared& p, const MixedArgs& a, cudaStream_t s) {
  switch (p.plan.n_tile) {
    case 8: return launch_instance<8, K>(p, a, s);
    case 16: return launch_instance<16, K>(p, a, s);
    case 32: return launch_instance<32, K>(p, a, s);
    case 64: return launch_instance<64, K>(p, a, s);
    case 128: return launch_instance<128, K>(p, a, s);
    case 256: return launch_instance<256, K>(p, a, s);
    default: fail("mixed_gemm: no instance for N = {} (8, 16, 32, 64, 128, 256)", p.plan.n_tile);
  }
}

// y (+)= W x^T for `batch` sequences; `ws` holds mixed::workspace_bytes(p.plan), its counters
// zero (the kernel leaves them zero).
void run_mixed(const MixedMatrix& m, const Prepared& p, int64_t batch, float* y, bool accumulate, void* ws,
               int64_t ws_bytes, cudaStream_t s = nullptr) {
  if (mixed::workspace_bytes(p.plan) > ws_bytes)
    fail("mixed_gemm: the workspace holds {} bytes, the plan needs {}", ws_bytes, mixed::workspace_bytes(p.plan));
  if (!mixed::counters_fit(p.plan))
    fail("mixed_gemm: {} output tiles split {} ways: more counters than {} bytes hold", p.plan.row_tiles * p.plan.seq_tiles,
         p.plan.splits, mixed::kCounterBytes);
  MixedArgs a;
  a.w = m.w;
  a.meta = m.meta;
  a.y = y;
  a.counters = static_cast<int*>(ws);
  a.partials = reinterpret_cast<float*>(static_cast<uint8_t*>(ws) + mixed::kCounterBytes);
  a.rows = m.rows;
  a.chunks = p.plan.chunks;
  a.chunks_per_group = m.kind == Kind::int8 ? p.plan.chunks : mixed::chunks_per_group(m.cols, m.group_size);
  a.groups = m.groups();
  a.units = p.plan.units;
  a.batch = static_cast<int>(batch);
  a.seq_tiles = p.plan.seq_tiles;
  a.splits = p.plan.splits;
  a.accumulate = accumulate;
  if (m.kind == Kind::int4)
    launch_kind<Kind::int4>(p, a, s);
  else
    launch_kind<Kind::int8>(p, a, s);
  CUDA_CHECK_LAUNCH();
}

// ---- host data: canonical matrices, their packing and the CPU reference

uint64_t mix64(uint64_t z) {  // splitmix64's finaliser: a value an index, in any thread order
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class F>
void parallel_for(int64_t n, F&& f) {
  const int workers = static_cast<int>(std::max(1u, std::min(32u, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      for (int64_t i = n * w / workers; i < n * (w + 1) / workers; ++i) f(i);
    });
  for (auto& th : pool) th.join();
}

// A quantized matrix in the canonical format (include/decodebench/quant.h's layouts).
struct HostMatrix {
  Kind kind = Kind::int4;
  int64_t rows = 0, cols = 0;
  int group_size = 0;  // int4 columns a group (0: a row); int8 0
  bool zero_point = false;
  std::vector<uint8_t> q4;       // int4 [rows, cols / 2], even column low
  std::vector<int8_t> q8;        // int8 [rows, cols]
  std::vector<uint16_t> scales;  // fp16 bits [rows, groups]
  std::vector<uint8_t> zeros;    // int4 with a zero point [rows, groups]
  int64_t groups() const { return kind == Kind::int8 ? 1 : mixed::group_count(cols, group_size); }
  // The dequantized weight as fp16 bits: fp16((q - z) s), dequantize_to_f16's value.
  float weight(int64_t r, int64_t c) const {
    const int64_t g = r * groups() + c / (cols / groups());
    const float s = f16_to_f32(scales[g]);
    if (kind == Kind::int8) return f16_to_f32(f32_to_f16(static_cast<float>(q8[r * cols + c]) * s));
    const int q = (q4[r * (cols / 2) + c / 2] >> (4 * (c % 2))) & 15;
    const int z = zero_point ? zeros[g] : 8;
    return f16_to_f32(f32_to_f16(static_cast<float>(q - z) * s));
  }
};

// integers: codes anywhere in their range, scales 1/2, 1 or 2 (every product and sum exact);
// otherwise fp16 scales around 2^-9 (int4) or 2^-13 (int8), weights of ~0.01 like a model's.
HostMatrix random_matrix(Kind k, int64_t rows, int64_t cols, int group_size, bool zero_point, bool integers,
                         uint64_t seed) {
  HostMatrix m;
  m.kind = k;
  m.rows = rows;
  m.cols = cols;
  m.group_size = k == Kind::int8 ? 0 : group_size;
  m.zero_point = k == Kind::int4 && zero_point;
  const int64_t groups = m.groups();
  if (k == Kind::int4) {
    m.q4.resize(rows * cols / 2);
    parallel_for(rows * cols / 2, [&](int64_t i) { m.q4[i] = static_cast<uint8_t>(mix64(seed * 7919 + i)); });
  } else {
    m.q8.resize(rows * cols);
    parallel_for(rows * cols,
                 [&](int64_t i) { m.q8[i] = static_cast<int8_t>(static_cast<int>(mix64(seed * 7919 + i) % 255) - 127); });
  }
  m.scales.resize(rows * groups);
  m.zeros.resize(rows * groups);
  for (int64_t i = 0; i < rows * groups; ++i) {
    const uint64_t h = mix64(seed * 104729 + i + (uint64_t{1} << 40));
    const float s = integers ? std::ldexp(1.f, static_cast<int>(h % 3) - 1)
                             : std::ldexp(1.f + static_cast<float>(h % 1024) / 1024.f, k == Kind::int4 ? -9 : -13);
    m.scales[i] = f32_to_f16(s);
    m.zeros[i] = static_cast<uint8_t>((h >> 20) % 16);
  }
  return m;
}

// Packs `h` into the mixed layout on the host (threads over the output bytes) and uploads it.
MixedMatrix upload_mixed(const HostMatrix& h) {
  MixedMatrix m = alloc_mixed(h.kind, h.rows, h.cols, h.group_size, h.zero_point);
  std::vector<uint8_t> w(m.w_bytes()), meta(m.meta_bytes());
  if (h.kind == Kind::int4)
    parallel_for(m.w_bytes(), [&](int64_t b) { w[b] = mixed::int4_packed_byte(h.q4.data(), h.rows, h.cols, b); });
  else
    parallel_for(m.w_bytes(), [&](int64_t b) { w[b] = mixed::int8_packed_byte(h.q8.data(), h.rows, h.cols, b); });
  mixed::pack_meta(h.kind, h.scales.data(), h.zero_point ? h.zeros.data() : nullptr, h.rows, m.groups(),
                   meta.data());
  CUDA_CHECK(cudaMemcpy(m.w, w.data(), w.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(m.meta, meta.data(), meta.size(), cudaMemcpyHostToDevice));
  return m;
}

struct Workspace {
  void* p = nullptr;
  int64_t bytes = 0;
  void ensure(int64_t need) {
    if (need <= bytes) return;
    if (p) CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaMalloc(&p, need));
    CUDA_CHECK(cudaMemset(p, 0, need));  // the counters start at zero
    bytes = need;
  }
  ~Workspace() {
    if (p) cudaFree(p);
  }
};

struct CheckCase {
  const char* name;
  Kind kind;
  int64_t rows, cols;
  int group_size;
  bool zero_point, integers;
  std::vector<int> batches;
  int row_step = 1;   // check every row_step-th row
  int splits = 0;     // > 0: forced
  bool accumulate = false;
  int n_tile = 0;     // > 0: a smaller N tile than the batch's, forced
};

// Runs the kernel on one case at each batch against the CPU; returns the outputs past their bound.
int64_t check_case(const CheckCase& cc, Workspace& ws, uint64_t seed) {
  const HostMatrix h = random_matrix(cc.kind, cc.rows, cc.cols, cc.group_size, cc.zero_point, cc.integers, seed);
  MixedMatrix m = upload_mixed(h);
  const int max_b = *std::max_element(cc.batches.begin(), cc.batches.end());
  std::vector<__half> xh(int64_t{max_b} * cc.cols);
  std::vector<float> xf(xh.size());
  for (size_t i = 0; i < xh.size(); ++i) {
    const uint64_t r = mix64(seed * 31 + i + (uint64_t{3} << 50));
    const float v = cc.integers ? static_cast<float>(static_cast<int>(r % 5) - 2)
                                : static_cast<float>(static_cast<int>(r % 2001) - 1000) / 1000.f;
    xh[i] = __float2half_rn(v);
    xf[i] = __half2float(xh[i]);
  }
  // The reference: every row_step-th row, every sequence up to max_b, in double.
  const int64_t checked = (cc.rows + cc.row_step - 1) / cc.row_step;
  std::vector<double> ref(checked * max_b), mag(checked * max_b);
  parallel_for(checked, [&](int64_t i) {
    const int64_t r = i * cc.row_step;
    std::vector<float> wr(cc.cols);
    for (int64_t c = 0; c < cc.cols; ++c) wr[c] = h.weight(r, c);
    for (int b = 0; b < max_b; ++b) {
      double s = 0, a = 0;
      const float* x = &xf[int64_t{b} * cc.cols];
      for (int64_t c = 0; c < cc.cols; ++c) {
        const double p = static_cast<double>(wr[c]) * x[c];
        s += p;
        a += std::fabs(p);
      }
      ref[i * max_b + b] = s;
      mag[i * max_b + b] = a;
    }
  });
  __half* x = nullptr;
  float* y = nullptr;
  CUDA_CHECK(cudaMalloc(&x, xh.size() * sizeof(__half)));
  CUDA_CHECK(cudaMalloc(&y, int64_t{max_b} * cc.rows * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(x, xh.data(), xh.size() * sizeof(__half), cudaMemcpyHostToDevice));
  int64_t bad_total = 0;
  for (int b : cc.batches) {
    const Prepared p = prepare(m, x, b, cc.splits, cc.n_tile);
    ws.ensure(mixed::workspace_bytes(p.plan));
    // accumulate: y starts at small integers the kernel must add to; otherwise NaN, so that an
    // output the kernel never writes fails.
    std::vector<float> y0(int64_t{b} * cc.rows);
    for (size_t i = 0; i < y0.size(); ++i)
      y0[i] = cc.accumulate ? static_cast<float>(static_cast<int>(mix64(i + seed) % 7) - 3) : NAN;
    CUDA_CHECK(cudaMemcpy(y, y0.data(), y0.size() * sizeof(float), cudaMemcpyHostToDevice));
    run_mixed(m, p, b, y, cc.accumulate, ws.p, ws.bytes);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> got(y0.size());
    CUDA_CHECK(cudaMemcpy(got.data(), y, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    int64_t bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < checked; ++i)
      for (int s = 0; s < b; ++s) {
        const int64_t r = i * cc.row_step;
        const double want = ref[i * max_b + s] + (cc.accumulate ? y0[int64_t{s} * cc.rows + r] : 0.0);
        const double tol = cc.integers ? 0.0 : cc.cols * std::ldexp(mag[i * max_b + s], -22) + 1e-30;
        const double err = std::fabs(static_cast<double>(got[int64_t{s} * cc.rows + r]) - want);
        if (tol > 0) worst = std::max(worst, err / tol);
        if (!(err <= tol)) {
          if (bad++ < 3)
            fmt::print(stderr, "check {} B={}: row {} sequence {}: {} against {} (tolerance {:.3g})\n", cc.name, b,
                       r, s, got[int64_t{s} * cc.rows + r], want, tol);
        }
      }
    bad_total += bad;
    fmt::print(
        "{{\"bench\": \"mixed_wgmma\", \"check\": \"{}\", \"scheme\": \"{}\", \"group\": {}, \"zero_point\": {}, "
        "\"rows\": {}, \"cols\": {}, \"batch\": {}, \"n_tile\": {}, \"splits\": {}, \"accumulate\": {}, \"data\": "
        "\"{}\", \"rows_checked\": {}, \"tolerance\": \"{}\", \"max_err_over_tol\": {:.4f}, \"bad\": {}, "
        "\"result\": \"{}\"}}\n",
        cc.name, kind_name(cc.kind), m.group_size, m.zero_point, cc.rows, cc.cols, b, p.plan.n_tile, p.plan.splits,
        cc.accumulate, cc.integers ? "integers" : "reals", checked, cc.integers ? "exact" : "cols 2^-22 sum|wx|",
        worst, bad, bad == 0 ? "PASS" : "FAIL");
    std::fflush(stdout);
  }
  CUDA_CHECK(cudaFree(x));
  CUDA_CHECK(cudaFree(y));
  free_mixed(m);
  return bad_total;
}

int64_t run_checks(const std::vector<std::pair<int64_t, int64_t>>& big_shapes) {
  Workspace ws;
  const std::vector<int> all = {1, 7, 8, 9, 64, 65, 256, 300};
  std::vector<CheckCase> cases = {
      {"int4 g128 zp", Kind::int4, 200, 384, 128, true, true, all},
      {"int4 g64 symmetric", Kind::int4, 200, 384, 64, false, true, all},
      {"int4 row zp", Kind::int4, 200, 384, 0, true, true, all},
      {"int8", Kind::int8, 200, 384, 0, false, true, all},
      {"int4 g128 zp, one split", Kind::int4, 200, 384, 128, true, true, {9, 65, 300}, 1, 1},
      {"int4 g128 zp, a split a chunk", Kind::int4, 200, 384, 128, true, true, {9, 65, 300}, 1, 6},
      {"int4 g128 zp, accumulate", Kind::int4, 200, 384, 128, true, true, {9, 300}, 1, 0, true},
      {"int8, one split, accumulate", Kind::int8, 200, 384, 0, false, true, {65}, 1, 1, true},
      {"int4 g128 zp, N tile 64", Kind::int4, 200, 384, 128, true, true, {65, 256, 300}, 1, 0, false, 64},
      {"int4 g128 zp 4100", Kind::int4, 4100, 1024, 128, true, false, {1, 9, 65, 300}},
      {"int4 g64 symmetric 4100", Kind::int4, 4100, 1024, 64, false, false, {1, 9, 65, 300}},
      {"int4 row zp 4100", Kind::int4, 4100, 1024, 0, true, false, {1, 9, 65, 300}},
      {"int8 4100", Kind::int8, 4100, 1024, 0, false, false, {1, 9, 65, 300}},
  };
  for (auto [r, c] : big_shapes) {
    cases.push_back({"int4 g128 zp 8b", Kind::int4, r, c, 128, true, false, {16, 256}, 13});
    cases.push_back({"int8 8b", Kind::int8, r, c, 0, false, false, {16, 256}, 13});
  }
  int64_t bad = 0;
  uint64_t seed = 1;
  for (const CheckCase& cc : cases) bad += check_case(cc, ws, seed++);
  return bad;
}

// ---- timing

constexpr size_t kRotateBytes = size_t{512} << 20;  // >> the H200's 50 MB L2

void* alloc_filled(size_t bytes, int value) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
  CUDA_CHECK(cudaMemset(p, value, bytes));
  return p;
}

size_t copies_for(size_t bytes) {
  return kRotateBytes / bytes + 2;
}

struct Line {
  const char* kernel;
  std::string scheme;
  int64_t batch;
  std::vector<double> us;
  uint64_t bytes;
  double flop;
  std::string plans;
};

void print_line(const Line& l, const char* gpu) {
  double total = 0;
  std::string each;
  for (double u : l.us) {
    total += u;
    each += fmt::format("{}{:.2f}", each.empty() ? "" : ", ", u);
  }
  fmt::print(
      "{{\"bench\": \"mixed_wgmma\", \"gpu\": \"{}\", \"kernel\": \"{}\", \"scheme\": \"{}\", \"batch\": {}, "
      "\"us_layer\": {:.2f}, \"us_matrices\": [{}], \"tflops\": {:.1f}, \"weight_gbps\": {:.0f}{}}}\n",
      gpu, l.kernel, l.scheme, l.batch, total, each, l.flop / (total * 1e-6) / 1e12, l.bytes / total / 1e3,
      l.plans.empty() ? "" : ", \"plans\": [" + l.plans + "]");
  std::fflush(stdout);
}

void run_timing(const std::vector<std::pair<int64_t, int64_t>>& shapes, int splits_override, int n_tile_override,
                const char* gpu) {
  const std::vector<int64_t> batches = {8, 16, 32, 64, 128, 256, 512};
  const int64_t max_b = batches.back();
  int64_t max_rows = 0, max_cols = 0, max_elems = 0;
  double layer_flop = 0;
  for (auto [r, c] : shapes) {
    max_rows = std::max(max_rows, r);
    max_cols = std::max(max_cols, c);
    max_elems = std::max(max_elems, r * c);
    layer_flop += 2.0 * r * c;
  }
  __half* x = static_cast<__half*>(alloc_filled(2ull * max_b * max_cols, 0x3c));  // ~1.0
  float* y = static_cast<float*>(alloc_filled(4ull * max_b * max_rows, 0));
  cublasHandle_t h;
  CUBLAS_CHECK(cublasCreate(&h));
  auto gemm = [&](const __half* w, int64_t rows, int64_t cols, int64_t b) {  // gemm_rows's call
    const float one = 1.f, zero = 0.f;
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(b),
                              static_cast<int>(cols), &one, w, CUDA_R_16F, static_cast<int>(cols), x, CUDA_R_16F,
                              static_cast<int>(cols), &zero, y, CUDA_R_32F, static_cast<int>(rows),
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };

  {  // cuBLAS on fp16 weights
    std::vector<std::vector<__half*>> copies(shapes.size());
    uint64_t bytes = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const size_t one = 2ull * shapes[i].first * shapes[i].second;
      for (size_t k = 0; k < copies_for(one); ++k) copies[i].push_back(static_cast<__half*>(alloc_filled(one, 0x11)));
      bytes += one;
    }
    for (int64_t b : batches) {
      Line l{"cublas_fp16", "fp16", b, {}, bytes, layer_flop * b, ""};
      for (size_t i = 0; i < shapes.size(); ++i)
        l.us.push_back(time_us([&](int k) { gemm(copies[i][k % copies[i].size()], shapes[i].first, shapes[i].second, b); },
                               40, 4));
      print_line(l, gpu);
    }
    for (auto& v : copies)
      for (__half* p : v) CUDA_CHECK(cudaFree(p));
  }

  __half* scratch = static_cast<__half*>(alloc_filled(2ull * max_elems, 0));
  Workspace ws;
  for (Kind k : {Kind::int4, Kind::int8}) {
    const std::string scheme = k == Kind::int4 ? "int4_g128_zp" : "int8";
    {  // the product's path: dequantize_to_f16 into one fp16 scratch, then cublasGemmEx
      std::vector<std::vector<DeviceMatrix>> copies(shapes.size());
      uint64_t bytes = 0;
      for (size_t i = 0; i < shapes.size(); ++i) {
        DeviceMatrix d;
        d.scheme = k == Kind::int4 ? Scheme::int4 : Scheme::int8;
        d.rows = shapes[i].first;
        d.cols = shapes[i].second;
        d.group_size = k == Kind::int4 ? 128 : 0;
        d.zero_point = k == Kind::int4;
        const MatrixBytes mb = device_matrix_bytes(d);
        for (size_t c = 0; c < copies_for(mb.total()); ++c) {
          DeviceMatrix m = d;
          m.qweight = alloc_filled(mb.weights, 0x21);
          m.scales = static_cast<__half*>(alloc_filled(mb.scales, 0x11));
          if (mb.zeros) m.zeros = static_cast<uint8_t*>(alloc_filled(mb.zeros, 0x08));
          copies[i].push_back(m);
        }
        bytes += mb.total();
      }
      for (int64_t b : batches) {
        Line l{"dequant_cublas", scheme, b, {}, bytes, layer_flop * b, ""};
        for (size_t i = 0; i < shapes.size(); ++i)
          l.us.push_back(time_us(
              [&](int c) {
                const DeviceMatrix& m = copies[i][c % copies[i].size()];
                dequantize_to_f16(m, scratch, nullptr);
                gemm(scratch, m.rows, m.cols, b);
              },
              20, 3));
        print_line(l, gpu);
      }
      for (auto& v : copies)
        for (DeviceMatrix& m : v) {
          CUDA_CHECK(cudaFree(m.qweight));
          CUDA_CHECK(cudaFree(m.scales));
          if (m.zeros) CUDA_CHECK(cudaFree(m.zeros));
        }
    }
    {  // the mixed-input GEMM; values are irrelevant to its time (finite fp16 throughout)
      std::vector<std::vector<MixedMatrix>> copies(shapes.size());
      uint64_t bytes = 0;
      for (size_t i = 0; i < shapes.size(); ++i) {
        MixedMatrix one = alloc_mixed(k, shapes[i].first, shapes[i].second, k == Kind::int4 ? 128 : 0, k == Kind::int4);
        free_mixed(one);
        const size_t each = one.w_bytes() + one.meta_bytes();
        for (size_t c = 0; c < copies_for(each); ++c) {
          MixedMatrix m = one;
          m.w = static_cast<uint8_t*>(alloc_filled(one.w_bytes(), 0x21));
          m.meta = static_cast<uint8_t*>(alloc_filled(one.meta_bytes(), 0x11));
          copies[i].push_back(m);
        }
        bytes += each;
      }
      for (int64_t b : batches) {
        Line l{"mixed_wgmma", scheme, b, {}, bytes, layer_flop * b, ""};
        for (size_t i = 0; i < shapes.size(); ++i) {
          const Prepared p = prepare(copies[i][0], x, b, splits_override, n_tile_override);
          ws.ensure(mixed::workspace_bytes(p.plan));
          l.us.push_back(time_us(
              [&](int c) { run_mixed(copies[i][c % copies[i].size()], p, b, y, false, ws.p, ws.bytes); }, 40, 4));
          l.plans += fmt::format("{}\"n{}x{}s{}g{}\"", l.plans.empty() ? "" : ", ", p.plan.n_tile,
                                 p.plan.seq_tiles, p.plan.splits, p.plan.grid);
        }
        print_line(l, gpu);
      }
      for (auto& v : copies)
        for (MixedMatrix& m : v) free_mixed(m);
    }
  }
  CUDA_CHECK(cudaFree(scratch));
  CUDA_CHECK(cudaFree(x));
  CUDA_CHECK(cudaFree(y));
  CUBLAS_CHECK(cublasDestroy(h));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::pair<int64_t, int64_t>> shapes = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  bool check_only = false;
  int splits = 0, n_tile = 0;
  std::vector<int64_t> given;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--check-only") == 0) {
      check_only = true;
    } else if (std::strcmp(argv[i], "--splits") == 0 && i + 1 < argc) {
      splits = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--ntile") == 0 && i + 1 < argc) {
      n_tile = std::atoi(argv[++i]);
    } else if (argv[i][0] != '-') {
      given.push_back(std::atoll(argv[i]));
    } else {
      std::fprintf(stderr, "usage: %s [--check-only] [--splits S] [--ntile N] [rows cols]...\n", argv[0]);
      return 2;
    }
  }
  if (!given.empty()) {
    if (given.size() % 2) {
      std::fprintf(stderr, "mixed_wgmma_bench: shapes come as rows cols pairs\n");
      return 2;
    }
    shapes.clear();
    for (size_t i = 0; i < given.size(); i += 2) shapes.push_back({given[i], given[i + 1]});
  }
  try {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::fprintf(stderr, "mixed_wgmma_bench: no CUDA device\n");
      return 2;
    }
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9 || prop.minor != 0) {
      std::fprintf(stderr, "mixed_wgmma_bench: needs an sm_90 GPU (H100/H200); device 0 is %s (sm_%d%d)\n",
                   prop.name, prop.major, prop.minor);
      return 2;
    }
    const int64_t bad = run_checks(shapes);
    fmt::print("{{\"bench\": \"mixed_wgmma\", \"checks\": \"{}\", \"bad\": {}}}\n", bad == 0 ? "PASS" : "FAIL", bad);
    std::fflush(stdout);
    if (bad != 0) return 1;
    if (check_only) return 0;
    run_timing(shapes, splits, n_tile, prop.name);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixed_wgmma_bench: %s\n", e.what());
    return 1;
  }
}
