// The mixed-input GEMM on Hopper (kernels/mixed_gemm.cuh): int4 or int8 weights x fp16
// activations on wgmma with the weights as the register operand (Machete's design), sm_90a code
// alone (the Hopper kernels' object library, DB_HOPPER).
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
// mbarrier) when the wgmmas that read its x have completed.
// Every mbarrier wait is bounded (mbarrier.cuh mbar_wait_bounded: 2 s, then a trap), so that a
// wrong byte count or a lost arrival ends the launch with an error instead of hanging the step
// (and the graph, and the process); it costs a clock read every few hundred polls.
// Split K: when the output tiles fill fewer than two waves of SMs, a tile's chunks are split
// (choose_splits); each unit writes its fp32 partial to a workspace, counts itself on the tile's
// counter, and the last to arrive adds the partials in split order (deterministic whatever the
// arrival order), writes y and resets the counter for the next launch.
//
// ptxas (nvcc 13.0, -Xptxas -v): 12 instances (N 8-256 x int4/int8), 168 registers each (the
// cap of the 384-thread launch bound; setmaxnreg moves them to 40 and 232 at run time), no
// stack, no spills, none of ptxas's wgmma serialisation notes.
#include <cuda.h>
#include <cuda_fp16.h>

#include <mutex>

#include "common.cuh"
#include "mbarrier.cuh"
#include "mixed_gemm.cuh"
#include "mixed_wgmma_layout.h"
#include "tma_wgmma.cuh"
#include "wgmma_layout.h"
#include "wgmma_rs.cuh"

namespace db::cuda {

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
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
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
__device__ __forceinline__ void load_fragments(uint32_t stage, int consumer, int t,
                                               uint32_t (&a)[mixed::kSteps][4]) {
  using C = Cfg<N, K>;
  const uint32_t w = stage + C::kXBytes + consumer * mixed::block_bytes(K);
  const uint2 m =
      ld_shared_v2(stage + C::kXBytes + C::kWBytes + (32 * consumer + t / 4) * mixed::kMetaEntryBytes);
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
      a[s][0] =
          hmul2(hsub2(lop3_and_or(w0, 0x000f000fu, 0x64006400u), z_lo), s_lo);  // (1024 + q) - (1024 + z)
      a[s][1] = hmul2(hfma2(lop3_and_or(w0, 0x00f000f0u, 0x64006400u), kSixteenth, z_hi),
                      s_hi);  // 64 + q - (64 + z)
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
        a[s][r] = hmul2(
            hsub2(prmt(words[2 * s + r / 2], 0x64646464u, r % 2 ? 0x5351u : 0x5250u), r % 2 ? z_hi : z_lo),
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
  for (int k = 0; k < mixed::kSteps; ++k) hopper::wgmma_rs<N>(acc, frag[k], desc + 2 * k, !first || k > 0);
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
          bulk_load(stage + C::kXBytes,
                    a.w + mixed::block_index(c.rt, kc, 0, a.chunks) * mixed::block_bytes(K), C::kWBytes,
                    &full[s]);
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

// ---- launchers

// A launch prepared for (matrix, x, batch): the plan and x's tensor map (boxes of 64 columns x
// n_tile sequences, zero-filled past the batch).
struct Prepared {
  mixed::Plan plan;
  CUtensorMap tm_x;
};

template <int N, Kind K>
void set_smem_attribute() {
  CUDA_CHECK(cudaFuncSetAttribute(mixed_gemm<N, K>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(Cfg<N, K>::kSmemBytes)));
}

// Every instance's shared-memory size, once a process: at the engine's load through
// mixed_gemm_setup(), before it captures the step into a graph, and again (a no-op then) on each
// launch for callers that did not.
void set_smem_attributes() {
  static std::once_flag once;
  std::call_once(once, [] {
    set_smem_attribute<8, Kind::int4>();
    set_smem_attribute<16, Kind::int4>();
    set_smem_attribute<32, Kind::int4>();
    set_smem_attribute<64, Kind::int4>();
    set_smem_attribute<128, Kind::int4>();
    set_smem_attribute<256, Kind::int4>();
    set_smem_attribute<8, Kind::int8>();
    set_smem_attribute<16, Kind::int8>();
    set_smem_attribute<32, Kind::int8>();
    set_smem_attribute<64, Kind::int8>();
    set_smem_attribute<128, Kind::int8>();
    set_smem_attribute<256, Kind::int8>();
  });
}

template <int N, Kind K>
void launch_instance(const Prepared& p, const MixedArgs& a, cudaStream_t s) {
  mixed_gemm<N, K><<<p.plan.grid, kThreads, Cfg<N, K>::kSmemBytes, s>>>(p.tm_x, a);
}

template <Kind K>
void launch_kind(const Prepared& p, const MixedArgs& a, cudaStream_t s) {
  switch (p.plan.n_tile) {
    case 8:
      return launch_instance<8, K>(p, a, s);
    case 16:
      return launch_instance<16, K>(p, a, s);
    case 32:
      return launch_instance<32, K>(p, a, s);
    case 64:
      return launch_instance<64, K>(p, a, s);
    case 128:
      return launch_instance<128, K>(p, a, s);
    case 256:
      return launch_instance<256, K>(p, a, s);
    default:
      fail("gemm_mixed: no instance for N = {} (8, 16, 32, 64, 128, 256)", p.plan.n_tile);
  }
}

}  // namespace

bool mixed_gemm_built() {
  return true;
}

void mixed_gemm_setup() {
  set_smem_attributes();
}

void gemm_mixed_with(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                     void* workspace, int64_t workspace_bytes, MixedGemmOptions o, cudaStream_t s) {
  const char* why = nullptr;
  if (!mixed_gemm_supports(w, &why)) fail("gemm_mixed: [{} x {}]: {}", w.rows, w.cols, why);
  if (batch < 1 || batch > (int64_t{1} << 30)) fail("gemm_mixed: a batch of {}", batch);
  Prepared p;
  p.plan = mixed_gemm_plan(w, batch, o);
  if (mixed::workspace_bytes(p.plan) > workspace_bytes)
    fail("gemm_mixed: the workspace holds {} bytes, the plan needs {}", workspace_bytes,
         mixed::workspace_bytes(p.plan));
  if (!mixed::counters_fit(p.plan))
    fail("gemm_mixed: {} output tiles split {} ways: more counters than {} bytes hold",
         p.plan.row_tiles * p.plan.seq_tiles, p.plan.splits, mixed::kCounterBytes);
  p.tm_x = hopper::sw128_map(x, batch, w.cols, w.cols, p.plan.n_tile);
  set_smem_attributes();
  const Kind k = mixed_kind(w.scheme);
  MixedArgs a;
  a.w = static_cast<const uint8_t*>(w.qweight);
  a.meta = mixed_meta(w);
  a.y = y;
  a.counters = static_cast<int*>(workspace);
  a.partials = reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + mixed::kCounterBytes);
  a.rows = w.rows;
  a.chunks = p.plan.chunks;
  a.chunks_per_group = k == Kind::int8 ? p.plan.chunks : mixed::chunks_per_group(w.cols, w.group_size);
  a.groups = k == Kind::int8 ? 1 : mixed::group_count(w.cols, w.group_size);
  a.units = p.plan.units;
  a.batch = static_cast<int>(batch);
  a.seq_tiles = p.plan.seq_tiles;
  a.splits = p.plan.splits;
  a.accumulate = accumulate;
  if (k == Kind::int4)
    launch_kind<Kind::int4>(p, a, s);
  else
    launch_kind<Kind::int8>(p, a, s);
  CUDA_CHECK_LAUNCH();
}

void gemm_mixed(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                void* workspace, cudaStream_t s) {
  gemm_mixed_with(w, x, batch, y, accumulate, workspace,
                  static_cast<int64_t>(mixed_gemm_workspace_bytes(w.rows, w.cols, batch)), {}, s);
}

}  // namespace db::cuda
