// Whether a persistent decode step streams faster than kernels, measured on the int4 GEMVs
// alone (lab tool, not a test; results/lab/ holds the runs):
//   build-gpu/decodebench_chain_bench [--layers N] [--slots S] [--reps R] [--check static]
//                                     [--only FLAGS]  (after the checks, only that launch)
// The step's breakdown says that 8b-int4 reaches 0.75 of the read bandwidth only if a step
// has no kernel boundaries: consecutive matrices overlapping completely, a block
// moving on to the next matrix's weights while the previous matrix is still being finished
// elsewhere. This bench builds the smallest thing that answers whether that design streams
// faster than today's kernels, on the bytes that decide it: 8b's four layer matrices (qkv,
// o, gate/up, down; int4, groups of 128 with zero points) x N layers, each matrix fed the
// previous one's output (qkv's first 4096 rows stand in for attention's output; qkv's and
// gate/up's inputs are RMS-normalized as they are staged, as in the step, which also keeps
// N layers of synthetic weights finite).
//   kernels:    today's rows kernel, one launch per matrix with PDL, replayed as a CUDA graph
//               (the step's structure without attention and norms);
//   persistent: one block per SM for the whole chain. Its producer thread takes row blocks of
//               the chain in order (claimed from a global counter, or with "static" block b
//               takes b, b + grid, ...) and streams each k-slab of one as a single bulk copy
//               (weights, scales and zero points of 64 rows x 1024 columns, 33 KB, contiguous
//               in this bench's stage layout) into a shared-memory ring, never waiting for a
//               matrix's input: weights do not depend on x. 16 consumer warps take the ring
//               in order with the rows kernel's dot (int4_dot.cuh), 4 rows a warp, and wait
//               for a matrix's input only when they reach its first row block: until every
//               block has counted its part of the matrix before it done.
//   split:      work items of one stage each (balance), the stages' partial sums added into
//               fp32 and the epilogue applied as the next matrix stages its input.
//   balanced:   a second kernel (bal_kernel): every block an equal share of each
//               matrix's rows over all columns, a stager warp for the dependency and x.
// The variants marked "no ..." leave a part out, for timing only (ChainArgs::flags says
// which); without waits the consumers race their inputs. Build defines: CHAIN_ROWS=8 (8
// rows a warp), CHAIN_FRAG=1 (the tensor-core dot, 8 warps of 8 rows), CHAIN_WARPS=N,
// CHAIN_SPIN=1 (polling mbarrier waits).
// Both paths read the same weights (quantize_synthetic, then repacked for the rows kernel and
// restaged for the persistent one). Every persistent output of the checked run is compared
// with the rows kernel run on the persistent run's own inputs. Prints ms per chain, GB/s of
// weight bytes and the fraction of the read bandwidth measured in the same process.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_timing.cuh"
#include "common.cuh"
#include "decodebench/half.h"
#include "decodebench/int4_frag.h"
#include "decodebench/linear_shapes.h"
#include "gemv.cuh"
#include "int4_dot.cuh"
#include "mbarrier.cuh"
#include "probe.cuh"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;

namespace {

// The stage layout. A row block is kStageRows rows; a stage is its 1024 columns of one
// k-slab: weights [rows][32 chunks of 16 bytes] (the rows kernel's nibble order inside a
// word), then scales [8 groups][rows] (fp16), then zero points [8 groups][rows] (u8).
// Consumer warps a block (16 unless built with -DCHAIN_WARPS=N); a stage is 4 rows a warp.
// Built with -DCHAIN_FRAG=1: the tensor-core dot of the rows kernel's fragment layout
// (int4_frag.h) instead, 8 rows a warp (its block of 8), 8 warps.
#ifndef CHAIN_FRAG
#define CHAIN_FRAG 0
#endif
#ifndef CHAIN_SPIN  // 1: the mbarrier waits spin (runs 1-16)
#define CHAIN_SPIN 0
#endif
#ifndef CHAIN_WARPS
#define CHAIN_WARPS (CHAIN_FRAG ? 8 : 16)
#endif
constexpr bool kFrag = CHAIN_FRAG;
// -DCHAIN_ROWS=8: the CUDA-core dot at 8 rows a warp (x's loads and a stage's fixed costs
// over twice the weights; stages of 128 rows, 66 KB).
#ifndef CHAIN_ROWS
#define CHAIN_ROWS 4
#endif
constexpr int kConsumerWarps = CHAIN_WARPS, kRowsPerWarp = kFrag ? int4_frag::kRows : CHAIN_ROWS;
static_assert(kRowsPerWarp == 4 || kRowsPerWarp == 8, "a warp's rows' scales and zero points are one vector load");
constexpr int kStageRows = kConsumerWarps * kRowsPerWarp, kSlabCols = 1024, kGroup = 128;
constexpr int kChunks = kSlabCols / 32, kGroups = kSlabCols / kGroup;
constexpr int kWeightBytes = kStageRows * kSlabCols / 2;
constexpr int kScaleOff = kWeightBytes, kZeroOff = kScaleOff + kGroups * kStageRows * 2;
constexpr int kStageBytes = kZeroOff + kGroups * kStageRows;  // 34304 at 64 rows, a multiple of 16
// Consumer warp w takes rows 4w..4w+3 (frag: 8w..8w+7) of a stage, lane c its chunk c of
// each: independent dots a lane against the same x, and a row's sum never leaves its warp.
constexpr int kConsumers = kConsumerWarps * kWarp;
static_assert(kChunks == kWarp && kSlabCols == int4_frag::kSpanCols, "a warp's lanes span a stage's columns");
constexpr int kMaxSlots = 12;
constexpr int kMaxCols = 14336;

enum class Epi : int { store = 0, silu_mul = 1 };

struct PMat {
  const unsigned char* stages;  // items x slabs records of kStageBytes
  const __half* x;              // input, cols halves (the previous matrix's output)
  __half* xin;                  // kConvert: the same buffer, which the blocks fill from the sums
  __half* y;                    // store: rows halves; silu_mul: rows / 2
  int rows, cols, slabs, items;
  int item0;                    // index of its first row block in the chain
  int sitem0;                   // kSplit: index of its first stage in the chain (items x slabs of them)
  float* sums;                  // kSplit: rows fp32 sums (and, sum_stride floats on, the other launch parity's)
  Epi epi;
  float gain;                   // outputs are scaled by it, so that N layers stay finite
  bool norm;                    // x is RMS-normalized as it is staged (qkv, gate/up: as in the step)
};

struct Tag {
  int m, item, slab;  // m < 0: the producer is done
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // used by chain_kernel's body only
using namespace db::hopper;
// Consumers' waits suspend (CHAIN_SPIN=1: poll, as runs 1-16 did; run 17 found no difference).
constexpr unsigned kSuspendNs = CHAIN_SPIN ? 0 : 1000000;
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
#endif

// ChainArgs::flags. kWait: consumers wait for a matrix's input (without: timing only, the
// inputs raced). kStatic: block b takes row blocks b, b + grid, ... of the chain instead of
// claiming them from the counter. kNoDot: consumers release each stage unread (timing only:
// the producers' and copies' own ceiling).
// kNoCopy: the producer hands out its slots without copying into them (timing only: the
// consumers' own ceiling). kNoStage: no counting, waiting or staging of x at a new matrix
// (timing only: what those cost a block).
// kSplit: a work item is one stage (64 rows x 1024 columns), not a whole row block: every
// matrix splits into >= 256 items of 33 KB, so that blocks finish a matrix together (whole
// row blocks of 64 rows left 32-68 blocks idle in qkv, o and down, and gave each down block
// a 466 KB item). Stages add their rows' partial sums into fp32 `sums` (red.add), and the
// next matrix applies the epilogue (gain, silu * up, fp16) as it stages its input.
// kConvert (with kSplit): a matrix's input is made fp16
// once, not by every block from the fp32 sums (split's staging cost 0.44 ms a chain at 8
// rows a warp): once matrix k - 1 is complete, each block converts its share
// of k - 1's sums into k's input and counts it in conv[k]; blocks stage k's input from fp16
// when conv[k] counts every block.
constexpr int kWait = 1, kStatic = 2, kNoDot = 4, kNoCopy = 8, kNoStage = 16, kSplit = 32, kConvert = 64;

struct ChainArgs {
  const PMat* mats;
  int nmats, total_items, total_stages;
  int64_t sum_stride;         // kSplit: floats from one parity's sums to the other's
  const __half* x0;           // the first matrix's input
  unsigned* claim;            // the producers' counter, zeroed before each launch
  unsigned* done;             // [nmats]: row blocks finished, over all launches
  unsigned* conv;             // kConvert, [nmats]: blocks that converted their share of the input
  unsigned epoch;             // launches since `done` was zeroed
  int slots;
  int flags;                  // the k* flags above
  unsigned long long* waited;  // SM cycles consumer 0 spent waiting for inputs, summed
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // helpers of chain_kernel's body only
// A warp's rows' scales (fp16, from sp) and zero points (bytes, from zp) of one group: one
// vector load each.
__device__ __forceinline__ GroupMeta<kRowsPerWarp> load_meta(const unsigned char* sp,
                                                             const unsigned char* zp) {
  GroupMeta<kRowsPerWarp> gm;
  if constexpr (kRowsPerWarp == 8) {
    const uint4 v = *reinterpret_cast<const uint4*>(sp);
    const uint2 z = *reinterpret_cast<const uint2*>(zp);
    gm.s[0] = v.x, gm.s[1] = v.y, gm.s[2] = v.z, gm.s[3] = v.w, gm.z[0] = z.x, gm.z[1] = z.y;
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(sp);
    gm.s[0] = v.x, gm.s[1] = v.y, gm.z[0] = *reinterpret_cast<const uint32_t*>(zp);
  }
  return gm;
}

// The scales and zero points of rows r0.. of group g of a stage.
__device__ __forceinline__ GroupMeta<kRowsPerWarp> stage_meta(const unsigned char* st, int g, int r0) {
  return load_meta(st + kScaleOff + (g * kStageRows + r0) * 2, st + kZeroOff + g * kStageRows + r0);
}

// A warp's rows' dots of one 16-byte chunk each (wv) against x (xv), scaled, added to acc.
__device__ __forceinline__ void dot_chunk_rows(float (&acc)[kRowsPerWarp], const uint4 (&wv)[kRowsPerWarp],
                                               const uint4 (&xv)[4], const GroupMeta<kRowsPerWarp>& gm) {
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const __half2 sc = bits_h2(gm.s[i / 2]);
    acc[i] =
        fmaf(int4_dot_q(wv[i], xv, gm.z[i / 4], i % 4), i % 2 ? __high2float(sc) : __low2float(sc), acc[i]);
  }
}

// Frag: the B registers and segment sums frag::stage_b makes from a warp's x, read straight
// from the block's staged x (the span is the stage's slab; x_col: int4_frag.h). stage_b's
// loop, with another load: sharing it would reorder fp32 adds in the rows kernel's fragment
// path.
__device__ __forceinline__ void frag_x(frag::XFrag& xf, const uint4* xs, int slab, int lane) {
  const __half2 sixteenth = bits_h2(0x2c002c00u);
  const unsigned char* base = reinterpret_cast<const unsigned char*>(xs);
  float lo = 0.f, hi = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int col = int4_frag::x_col(lane, j, r, 0);
      __half2 h = *reinterpret_cast<const __half2*>(base + swizzle_piece(slab * (kSlabCols / 8) + col / 8) * 16 + (col % 8) * 2);
      if (r == 1) h = __hmul2(h, sixteenth);  // exact: a power of two
      xf.b[j][r] = h2_bits(h);
      const float2 f = __half22float2(h);
      (r == 0 ? lo : hi) += f.x + f.y;
    }
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) {
    lo += __shfl_xor_sync(0xffffffffu, lo, o);
    hi += __shfl_xor_sync(0xffffffffu, hi, o);
  }
  xf.offset = 1024.f * (lo + hi);
  xf.sum = lo + 16.f * hi;
}

// kSplit: piece i (8 values) of a matrix's input from the matrix before it, whose fp32 sums
// are complete: gain, silu(gate) * up for an interleaved gate/up, rounded to fp16.
__device__ __forceinline__ uint4 epilogue_piece(const PMat& prev, int parity, int64_t stride, int i) {
  const float4* s = reinterpret_cast<const float4*>(prev.sums + parity * stride);
  float v[8];
  if (prev.epi == Epi::store) {
    const float4 a = __ldcg(s + 2 * i), b = __ldcg(s + 2 * i + 1);
    const float f[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = f[j] * prev.gain;
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 a = __ldcg(s + 4 * i + q);  // gate, up, gate, up
      const float g0 = a.x * prev.gain, u0 = a.y * prev.gain, g1 = a.z * prev.gain, u1 = a.w * prev.gain;
      v[2 * q] = g0 / (1.f + __expf(-g0)) * u0;
      v[2 * q + 1] = g1 / (1.f + __expf(-g1)) * u1;
    }
  }
  return make_uint4(h2_bits(__floats2half2_rn(v[0], v[1])), h2_bits(__floats2half2_rn(v[2], v[3])),
                    h2_bits(__floats2half2_rn(v[4], v[5])), h2_bits(__floats2half2_rn(v[6], v[7])));
}
#endif

__global__ void __launch_bounds__(kConsumers + kWarp, 1) chain_kernel(ChainArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ uint64_t full[kMaxSlots], empty[kMaxSlots];
  __shared__ Tag tags[kMaxSlots];
  __shared__ float norm_part[kConsumerWarps];
  unsigned char* ring = smem;
  // The input, kMaxCols halves, swizzled: one buffer, rewritten at a new matrix only after
  // signal_and_wait's first barrier, which every consumer reaches done with the old one.
  uint4* const xs = reinterpret_cast<uint4*>(smem + a.slots * kStageBytes);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const bool split = a.flags & kSplit;
  const int parity = static_cast<int>(a.epoch & 1);
  if (split) {  // the next launch's sums, which nothing reads or writes in this one
    float* other = a.mats[0].sums + (parity ^ 1) * a.sum_stride;
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < a.sum_stride; i += int64_t{gridDim.x} * blockDim.x)
      other[i] = 0.f;
  }
  if (threadIdx.x == 0) {
    for (int s = 0; s < a.slots; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warp == kConsumerWarps) {  // the producer
    if (lane != 0) return;
    // Dynamic claims keep the next one in flight while this one's copies are issued: an
    // atomic's round trip per row block otherwise paces the producer.
    const bool fixed = a.flags & kStatic;
    const int total = split ? a.total_stages : a.total_items;
    auto first = [&](int mm) { return split ? a.mats[mm].sitem0 : a.mats[mm].item0; };
    auto count = [&](int mm) { return split ? a.mats[mm].items * a.mats[mm].slabs : a.mats[mm].items; };
    int m = 0, item = fixed ? static_cast<int>(blockIdx.x) : static_cast<int>(atomicAdd(a.claim, 1u));
    for (unsigned k = 0;; ) {
      const int next = fixed ? item + static_cast<int>(gridDim.x)
                             : (item < total ? static_cast<int>(atomicAdd(a.claim, 1u)) : item);
      while (m < a.nmats && item >= first(m) + count(m)) ++m;
      const bool end = item >= total;
      const int local = end ? 0 : item - first(m);  // row block, or (split) stage of the matrix
      const int slabs = end || split ? 1 : a.mats[m].slabs;
      for (int s = 0; s < slabs; ++s, ++k) {
        const int slot = static_cast<int>(k % a.slots);
        const unsigned use = k / a.slots;
        if (use > 0) mbar_wait(&empty[slot], (use - 1) & 1, kSuspendNs);
        if (end) {
          tags[slot] = {-1, 0, 0};
          mbar_arrive(&full[slot]);
          return;
        }
        tags[slot] = split ? Tag{m, local / a.mats[m].slabs, local % a.mats[m].slabs} : Tag{m, local, s};
        if (a.flags & kNoCopy) {
          mbar_arrive(&full[slot]);
          continue;
        }
        const unsigned char* src =  // stages are stored row block by row block, slab by slab
            a.mats[m].stages + (static_cast<int64_t>(tags[slot].item) * a.mats[m].slabs + tags[slot].slab) * kStageBytes;
        bulk_copy(ring + static_cast<int64_t>(slot) * kStageBytes, src, kStageBytes, &full[slot]);
      }
      item = next;
    }
  }

  // The consumers: lane c of warp w takes chunk c of rows r0 = kRowsPerWarp * w, ... of a stage.
  const int t = threadIdx.x, c = lane;
  int cur = -1;
  PMat mat{};
  float acc[kRowsPerWarp] = {};
  long long waited = 0;
  int mine = 0;  // work items (row blocks, or split's stages) of `cur` this block has finished
  const bool convert = split && (a.flags & kConvert);
  // Thread 0 polls `counter` until it reaches `target`, timing the wait.
  auto wait_count = [&](const unsigned* counter, unsigned target) {
    const long long t0 = clock64();
    unsigned v = 0;
    for (;;) {
      asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
      if (v >= target) break;
    }
    waited += clock64() - t0;
  };
  // Counts this block's work items of `cur` done (one fence and one atomic per block and
  // matrix: a fence per row block made the consumers the bound), then waits until matrix
  // `next - 1` is complete. The counting comes first: a block that waited for the matrix
  // before holding back its own part of it would deadlock.
  auto signal_and_wait = [&](int next) {
    named_sync(1, kConsumers);  // every output of cur this block wrote is stored
    if (t == 0) {
      if (mine > 0) {
        __threadfence();
        atomicAdd(a.done + cur, static_cast<unsigned>(mine));
      }
      if (next > 0 && (a.flags & kWait)) {
        const PMat& prev = a.mats[next - 1];
        wait_count(a.done + next - 1, (a.epoch + 1) * static_cast<unsigned>(split ? prev.items * prev.slabs : prev.items));
      }
    }
    mine = 0;
    named_sync(1, kConsumers);
  };
  // kConvert: this block's share of the inputs of matrices converted + 1 .. last, in order,
  // each as soon as the matrix before it is complete, whether the block has items in it or
  // not (a block that left a conversion for later could wait on a matrix that needs it).
  int converted = 0;
  auto convert_through = [&](int last) {
    for (int k = converted + 1; k <= last; ++k) {
      const PMat& prev = a.mats[k - 1];
      if (t == 0 && (a.flags & kWait)) wait_count(a.done + k - 1, (a.epoch + 1) * static_cast<unsigned>(prev.items * prev.slabs));
      named_sync(1, kConsumers);
      const int pieces = a.mats[k].cols / 8, per = (pieces + gridDim.x - 1) / gridDim.x;
      const int end = min(pieces, (static_cast<int>(blockIdx.x) + 1) * per);
      for (int i = static_cast<int>(blockIdx.x) * per + t; i < end; i += kConsumers)
        reinterpret_cast<uint4*>(a.mats[k].xin)[i] = epilogue_piece(prev, parity, a.sum_stride, i);
      named_sync(1, kConsumers);
      if (t == 0) {
        __threadfence();
        atomicAdd(a.conv + k, 1u);
      }
    }
    converted = max(converted, last);
  };
  int slot = 0;
  unsigned phase = 0;
  for (unsigned k = 0;; ++k) {
    // slot = k % slots and its phase, kept incrementally: a division by the run-time slot
    // count per stage was ~30 instructions of every consumer's ~400.
    if (k > 0 && ++slot == a.slots) slot = 0, phase ^= 1;
    mbar_wait(&full[slot], phase, kSuspendNs);
    const Tag tag = tags[slot];
    if (tag.m < 0) {
      if (cur >= 0) signal_and_wait(0);
      if (convert) convert_through(a.nmats - 1);
      break;
    }
    if (tag.m != cur && (a.flags & kNoStage) && cur >= 0) {
      cur = tag.m;
      mat = a.mats[cur];
    } else if (tag.m != cur) {  // a new matrix: its input, once the matrix before it is done
      signal_and_wait(convert ? 0 : tag.m);  // kConvert: convert_through waits, matrix by matrix
      if (convert && tag.m > 0) {
        convert_through(tag.m);
        if (t == 0 && (a.flags & kWait)) wait_count(a.conv + tag.m, (a.epoch + 1) * gridDim.x);
        named_sync(1, kConsumers);
      }
      cur = tag.m;
      mat = a.mats[cur];
      const __half* in = cur == 0 ? a.x0 : mat.x;
      float ss = 0.f;
      for (int i = t; i < mat.cols / 8; i += kConsumers) {
        const uint4 v = split && !convert && cur > 0 ? epilogue_piece(a.mats[cur - 1], parity, a.sum_stride, i)
                                         : __ldcg(reinterpret_cast<const uint4*>(in) + i);
        xs[swizzle_piece(i)] = v;
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
        for (int j = 0; j < 4; ++j) {
          const float2 f = __half22float2(bits_h2(u[j]));
          ss = fmaf(f.x, f.x, fmaf(f.y, f.y, ss));
        }
      }
      if (mat.norm) {  // every thread rescales the pieces it staged, by the block's sum
        ss = warp_sum(ss);
        if (lane == 0) norm_part[warp] = ss;
        named_sync(1, kConsumers);
        ss = 0.f;
        for (int i = 0; i < kConsumerWarps; ++i) ss += norm_part[i];
        const __half2 inv = __float2half2_rn(rsqrtf(ss / mat.cols + 1e-5f));
        for (int i = t; i < mat.cols / 8; i += kConsumers) {
          uint4& v = xs[swizzle_piece(i)];
          v.x = h2_bits(__hmul2(bits_h2(v.x), inv)), v.y = h2_bits(__hmul2(bits_h2(v.y), inv));
          v.z = h2_bits(__hmul2(bits_h2(v.z), inv)), v.w = h2_bits(__hmul2(bits_h2(v.w), inv));
        }
      }
      named_sync(1, kConsumers);
    }
    if (a.flags & kNoDot) {
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);
      if (split || tag.slab == mat.slabs - 1) ++mine;
      continue;
    }
    const unsigned char* st = ring + static_cast<int64_t>(slot) * kStageBytes;
    const uint4* w = reinterpret_cast<const uint4*>(st);
    const int r0 = kRowsPerWarp * warp, g = c / (kGroup / 32);
    if constexpr (kFrag) {
      uint4 wv[kRowsPerWarp][1];
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) wv[i][0] = w[(r0 + i) * kChunks + c];
      const GroupMeta<kRowsPerWarp> gm = stage_meta(st, lane / 4, r0);  // the lane's group is its segment
      frag::XFrag xf;
      frag_x(xf, xs, tag.slab, lane);
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);  // the stage's bytes are in registers
      frag::dot_rows<kRowsPerWarp, 1>(acc, wv, 0, xf, gm, lane, true);
    } else {
      uint4 wv[kRowsPerWarp];
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) wv[i] = w[(r0 + i) * kChunks + c];
      const GroupMeta<kRowsPerWarp> gm = stage_meta(st, g, r0);
      uint4 xv[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) xv[j] = xs[swizzle_piece(tag.slab * (kSlabCols / 8) + 4 * c + j)];
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);  // the stage's bytes are in registers
      dot_chunk_rows(acc, wv, xv, gm);
    }
    if (split) {  // the stage's partial sums of its rows, into the matrix's fp32 sums
      const float v = reduce_rows<kRowsPerWarp>(acc, lane);
      if (lane % (kWarp / kRowsPerWarp) == 0)
        atomicAdd(mat.sums + parity * a.sum_stride + tag.item * kStageRows + r0 + lane_row<kRowsPerWarp>(lane), v);
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) acc[i] = 0.f;
      ++mine;
    } else if (tag.slab == mat.slabs - 1) {  // the row block is complete
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) acc[i] = warp_sum(acc[i]) * mat.gain;
      if (lane == 0) {
        const int row = tag.item * kStageRows + r0;
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; i += 2) {
          if (mat.epi == Epi::store) {
            *reinterpret_cast<__half2*>(mat.y + row + i) = __floats2half2_rn(acc[i], acc[i + 1]);
          } else {  // rows interleaved (gate_i, up_i)
            mat.y[(row + i) / 2] = __float2half_rn(acc[i] / (1.f + __expf(-acc[i])) * acc[i + 1]);
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) acc[i] = 0.f;
      ++mine;
    }
  }
  if (t == 0 && waited) atomicAdd(a.waited, static_cast<unsigned long long>(waited));
#endif
}

// A canonical int4 word (nibble order 0..7) in the rows kernel's order 0,2,4,6,1,3,5,7
// (repack_int4).
__device__ __forceinline__ uint32_t repacked_word(uint32_t w) {
  uint32_t o = 0;
  for (int q = 0; q < 4; ++q) {
    o |= ((w >> (8 * q)) & 0xfu) << (4 * q);
    o |= ((w >> (8 * q + 4)) & 0xfu) << (4 * (q + 4));
  }
  return o;
}

// Canonical int4 (weights [rows][cols/2], scales and zero points [rows][cols/128]) -> the
// stage layout. One thread per 16-byte chunk of a stage.
// `frag_q`: the same weights in the fragment layout (repack_int4 with fragments), copied as
// they are (the layout permutes bytes only inside blocks of 8 rows x 1024 columns, which a
// stage holds whole); null: the nibble order, from the canonical weights.
__global__ void to_stages_kernel(DeviceMatrix m, unsigned char* out, const uint8_t* frag_q) {
  const int slabs = static_cast<int>(m.cols / kSlabCols);
  const int64_t chunks = m.rows * (m.cols / 32);
  const int G = static_cast<int>(m.cols / kGroup);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < chunks; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / (m.cols / 32);
    const int cc = static_cast<int>(i % (m.cols / 32));  // chunk of the row
    const int64_t item = row / kStageRows;
    const int rr = static_cast<int>(row % kStageRows), slab = cc / kChunks, c = cc % kChunks;
    unsigned char* st = out + (item * slabs + slab) * kStageBytes;
    const uint32_t* src = reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(m.qweight) + row * (m.cols / 2) + cc * 16);
    uint32_t words[4];
    for (int u = 0; u < 4; ++u)
      words[u] = frag_q ? reinterpret_cast<const uint32_t*>(frag_q + row * (m.cols / 2) + cc * 16)[u]
                        : repacked_word(src[u]);
    reinterpret_cast<uint4*>(st)[rr * kChunks + c] = make_uint4(words[0], words[1], words[2], words[3]);
    if (c % (kGroup / 32) == 0) {
      const int g = c / (kGroup / 32);
      const int64_t e = row * G + slab * kGroups + g;
      reinterpret_cast<__half*>(st + kScaleOff)[g * kStageRows + rr] = m.scales[e];
      st[kZeroOff + g * kStageRows + rr] = m.zeros[e];
    }
  }
}

// ------------------------------------------------------------ the balanced persistent chain
// The row-block and split items above leave the dependencies unsolved: whole
// row blocks as work items leave blocks idle (o and down had 32-64 items for 132 blocks), and
// single stages as items pay for partial sums in fp32 and for every block touching every
// matrix with the consumers staging each input themselves (kConvert did not help: 1.55 ms).
// The balanced kernel gives every block an equal, contiguous share of each matrix's rows,
// over all its columns, so that a block's outputs are final (no fp32 sums leave the block),
// and takes everything but the dot off the consumer warps:
//   - a stage is rb rows x 1024 * (64 / rb) columns, rb chosen per matrix (16 or 32 on 8b) so
//     that its items (row blocks of rb rows) split evenly over the blocks; the consumer warps
//     of a group cover a stage as (64 / rb) column parts x (rb / rows a warp) row groups, and
//     add each stage's (or with one group, each item's) row sums into shared memory;
//   - with 8 rows a warp and 16 warps, two groups take alternate stages, each in its own
//     ring slots (kBalQ);
//   - a stager warp counts the block's part of matrix k - 1 done, waits until every block
//     has, bulk-copies x_k into shared memory, RMS-normalizes it for qkv and gate/up and
//     releases the consumers: they wait for nothing but x_k's barrier;
//   - x is bulk-copied as it is in memory, so the matrices store their outputs (and the
//     chain's x0 is given) in the order the consumers read without bank conflicts: the four
//     16-byte pieces of each 32-column chunk rotated by (c / 2) % 4, c the chunk's lane
//     (xperm). Rotating the reads instead, with the weights' words stored rotated to match,
//     changed the order of the fp16 sums in each chunk's dot: outputs 2-3x the check's
//     tolerance from the rows kernel (run 2).
// Measured: 1.34-1.45 ms a chain against the kernels' 1.22, and 1.23-1.25
// with no dot at all: each grid-wide dependency costs ~2-2.4 us of streaming here too.
constexpr int kBalRows = 64;  // a stage's row slots
constexpr int kBalScaleOff = kBalRows * kSlabCols / 2, kBalZeroOff = kBalScaleOff + kGroups * kBalRows * 2;
constexpr int kBalStageBytes = kBalZeroOff + kGroups * kBalRows;  // 34304
constexpr int kBalQ = kConsumerWarps * kRowsPerWarp / kBalRows;   // consumer groups, taking alternate stages
constexpr int kBalWarps = kConsumerWarps / kBalQ;                 // warps of a group
static_assert(kBalQ >= 1 && kBalWarps * kRowsPerWarp == kBalRows,
              "a group's warps cover a stage's row slots");
constexpr int kMaxBlockRows = 512;  // a block's rows of one matrix (8b: <= 224)
constexpr int kBal = 128;           // ChainArgs::flags: run the balanced kernel
// (Run 7 tried the norm off the dependency's path: x released as soon as it is copied, the row
// sums scaled by inv in the epilogue. sum(w x) inv is not the step's sum(w fp16(x inv)): the
// fp16 sums of each chunk's dot round differently, and qkv and gate/up failed the check by up
// to 4.8x its tolerance, so it is not measured.)

struct BMat {
  const unsigned char* stages;  // items x spi records of kBalStageBytes
  const __half* x;              // input: the previous matrix's y
  __half* y;
  int cols, rb, parts, spi, items;  // parts = 64 / rb; spi: stages an item
  Epi epi;
  float gain;
  bool norm;
};

struct BalArgs {
  const BMat* mats;
  int nmats;
  const __half* x0;  // the first matrix's input, in xperm's order
  unsigned* done;    // [nmats]: blocks done with the matrix, over all launches
  unsigned epoch;
  int slots;
  int flags;                   // kWait, kNoDot, kNoCopy
  unsigned long long* waited;  // SM cycles the stager spent waiting for other blocks, summed
};

// Where the balanced kernel keeps element r of a vector it reads as x (see above).
__host__ __device__ __forceinline__ int xperm(int r) {
  const int chunk = r >> 5, c = chunk & 31, j = (r >> 3) & 3;
  return (chunk << 5) | (((j - ((c >> 1) & 3)) & 3) << 3) | (r & 7);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Block b's items of a matrix: [items * b / grid, items * (b + 1) / grid).
__device__ __forceinline__ int2 block_items(const BMat& m) {
  return make_int2(static_cast<int>(int64_t{m.items} * blockIdx.x / gridDim.x),
                   static_cast<int>(int64_t{m.items} * (blockIdx.x + 1) / gridDim.x));
}
#endif

__global__ void __launch_bounds__(kConsumers + 2 * kWarp, 1) bal_kernel(BalArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ uint64_t full[kMaxSlots], empty[kMaxSlots], x_full, x_ready, outs_done;
  __shared__ Tag tags[kMaxSlots];
  __shared__ float pb[2][kMaxBlockRows];  // row sums of matrices k and k + 1, by k's parity
  unsigned char* ring = smem;
  __half* const xs = reinterpret_cast<__half*>(smem + a.slots * kBalStageBytes);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int i = threadIdx.x; i < 2 * kMaxBlockRows; i += blockDim.x)
    pb[i / kMaxBlockRows][i % kMaxBlockRows] = 0.f;
  if (threadIdx.x == 0) {
    for (int s = 0; s < a.slots; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kBalWarps);
    }
    mbar_init(&x_full, 1);
    mbar_init(&x_ready, kWarp);
    mbar_init(&outs_done, kConsumerWarps);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warp == kConsumerWarps) {  // the producer: this block's items of every matrix, in order
    if (lane != 0) return;
    // Entry k goes to group k % kBalQ, in that group's own slots: a slot shared by the groups
    // let one group, a stage ahead of the other, wait for a slot's next phase while the bulk
    // copy of its current one was still in flight; the parity wait then passed at once and
    // read the old stage (runs 4-6: a launch failure or a hang, 1.44 ms where it did not).
    unsigned k = 0;
    const int per_group = a.slots / kBalQ;
    auto next_slot = [&]() {
      const unsigned i = k / kBalQ;
      const int slot = static_cast<int>(k++ % kBalQ) + kBalQ * static_cast<int>(i % per_group);
      const unsigned use = i / per_group;
      if (use > 0) mbar_wait(&empty[slot], (use - 1) & 1, kSuspendNs);
      return slot;
    };
    for (int m = 0; m < a.nmats; ++m) {
      const BMat& mt = a.mats[m];
      const int2 r = block_items(mt);
      for (int it = r.x; it < r.y; ++it)
        for (int s = 0; s < mt.spi; ++s) {
          const int slot = next_slot();
          tags[slot] = {m, it - r.x, s};
          if (a.flags & kNoCopy) {
            mbar_arrive(&full[slot]);
            continue;
          }
          bulk_copy(ring + static_cast<int64_t>(slot) * kBalStageBytes,
                    mt.stages + (static_cast<int64_t>(it) * mt.spi + s) * kBalStageBytes, kBalStageBytes,
                    &full[slot]);
        }
    }
    for (int q = 0; q < kBalQ; ++q) {  // an end for each group
      const int slot = next_slot();
      tags[slot] = {-1, 0, 0};
      mbar_arrive(&full[slot]);
    }
    return;
  }

  if (warp == kConsumerWarps + 1) {  // the stager: x_k once every block is done with k - 1
    long long waited = 0;
    for (int m = 0; m <= a.nmats; ++m) {
      if (m > 0) {
        mbar_wait(&outs_done, (m - 1) & 1, kSuspendNs);  // this block's outputs of m - 1 are stored
        if (lane == 0) {
          __threadfence();
          atomicAdd(a.done + m - 1, 1u);
          if (m < a.nmats && (a.flags & kWait)) {
            const unsigned target = (a.epoch + 1) * gridDim.x;
            const long long t0 = clock64();
            for (unsigned v = 0;;) {
              asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(a.done + m - 1) : "memory");
              if (v >= target) break;
            }
            waited += clock64() - t0;
          }
        }
        __syncwarp();
      }
      if (m == a.nmats) break;
      const BMat& mt = a.mats[m];
      if (lane == 0) {
        // Other blocks stored x_k through the generic proxy, and this warp rescaled the last
        // input in place: both before the bulk copy (the async proxy) reads and writes.
        asm volatile("fence.proxy.async.global;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        bulk_copy(xs, m == 0 ? a.x0 : mt.x, static_cast<unsigned>(mt.cols) * 2, &x_full);
      }
      mbar_wait(&x_full, m & 1, kSuspendNs);
      if (mt.norm) {  // as the other kernels: inv = rsqrt(mean(x^2) + eps) in fp16, x * inv
        uint4* xv = reinterpret_cast<uint4*>(xs);
        float ss = 0.f;
        for (int i = lane; i < mt.cols / 8; i += kWarp) {
          const uint4 v = xv[i];
          const uint32_t u[4] = {v.x, v.y, v.z, v.w};
          for (int j = 0; j < 4; ++j) {
            const float2 f = __half22float2(bits_h2(u[j]));
            ss = fmaf(f.x, f.x, fmaf(f.y, f.y, ss));
          }
        }
        const __half2 inv = __float2half2_rn(rsqrtf(warp_sum(ss) / mt.cols + 1e-5f));
        for (int i = lane; i < mt.cols / 8; i += kWarp) {
          uint4& v = xv[i];
          v.x = h2_bits(__hmul2(bits_h2(v.x), inv)), v.y = h2_bits(__hmul2(bits_h2(v.y), inv));
          v.z = h2_bits(__hmul2(bits_h2(v.z), inv)), v.w = h2_bits(__hmul2(bits_h2(v.w), inv));
        }
      }
      mbar_arrive(&x_ready);  // every lane, after its own pieces
    }
    if (lane == 0 && waited) atomicAdd(a.waited, static_cast<unsigned long long>(waited));
    return;
  }

  // The consumers. Group gq takes the ring's entries gq, gq + kBalQ, ..., in its slots gq,
  // gq + kBalQ, ...; in a stage, warp wl
  // of the group takes rows rg * R.. of column part cp, lane c its chunk c of that part.
  constexpr int R = kRowsPerWarp;
  const int gq = warp / kBalWarps, wl = warp % kBalWarps, c = lane, rot = (c >> 1) & 3;
  int slot = gq, cur = -1, rg = 0, cp = 0;
  unsigned phase = 0;
  BMat mat{};
  float acc[R] = {};
  // Matrix m's epilogue: the block's row sums, complete once every consumer is past its last
  // stage, scaled and stored (silu(gate) * up for gate/up's interleaved rows), the sums
  // zeroed for matrix m + 2; then the stager may count the block done.
  auto finish = [&](int m) {
    named_sync(1, kConsumers);
    const BMat& mt = a.mats[m];
    const int2 r = block_items(mt);
    const int rows = (r.y - r.x) * mt.rb, row0 = r.x * mt.rb;
    float* p = pb[m & 1];
    if (mt.epi == Epi::store) {
      for (int i = threadIdx.x; i < rows; i += kConsumers) {
        mt.y[xperm(row0 + i)] = __float2half_rn(p[i] * mt.gain);
        p[i] = 0.f;
      }
    } else {
      for (int i = threadIdx.x; i < rows / 2; i += kConsumers) {
        const float g = p[2 * i] * mt.gain, u = p[2 * i + 1] * mt.gain;
        mt.y[xperm(row0 / 2 + i)] = __float2half_rn(g / (1.f + __expf(-g)) * u);
        p[2 * i] = p[2 * i + 1] = 0.f;
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&outs_done);
  };
  for (;;) {
    mbar_wait(&full[slot], phase, kSuspendNs);
    const Tag tag = tags[slot];
    for (const int target = tag.m < 0 ? a.nmats : tag.m; cur < target;) {  // matrices ending here
      if (cur >= 0) finish(cur);
      if (++cur < a.nmats) {
        mbar_wait(&x_ready, cur & 1, kSuspendNs);
        mat = a.mats[cur];
        rg = wl % (mat.rb / R), cp = wl / (mat.rb / R);
      }
    }
    if (tag.m < 0) break;
    if (a.flags & kNoDot) {
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);
    } else {
      const unsigned char* st = ring + static_cast<int64_t>(slot) * kBalStageBytes;
      const uint4* w = reinterpret_cast<const uint4*>(st);
      uint4 wv[R];
#pragma unroll
      for (int i = 0; i < R; ++i) wv[i] = w[((rg * R + i) * mat.parts + cp) * kChunks + c];
      const int g = cp * kGroups + c / (kGroup / 32), at = g * mat.rb + rg * R;
      const GroupMeta<R> gm = load_meta(st + kBalScaleOff + at * 2, st + kBalZeroOff + at);
      const uint4* xp =
          reinterpret_cast<const uint4*>(xs) + (tag.slab * mat.parts + cp) * (kSlabCols / 8) + 4 * c;
      uint4 xv[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) xv[j] = xp[(j - rot) & 3];  // xperm
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[slot]);  // the stage's bytes are in registers
      dot_chunk_rows(acc, wv, xv, gm);
      if (kBalQ > 1 || tag.slab == mat.spi - 1) {  // one group sees an item's stages in order: sum them first
        const float v = reduce_rows<R>(acc, lane);
        if (lane % (kWarp / R) == 0)
          atomicAdd(&pb[cur & 1][tag.item * mat.rb + rg * R + lane_row<R>(lane)], v);
#pragma unroll
        for (int i = 0; i < R; ++i) acc[i] = 0.f;
      }
    }
    if ((slot += kBalQ) >= a.slots - a.slots % kBalQ) slot = gq, phase ^= 1;  // the group's own slots
  }
#endif
}

// Canonical int4 -> the balanced stage layout of rb rows: item (row block) i's stage s holds
// weights [rb rows][parts][32 chunks of 16 bytes] (the rows kernel's nibble order), then
// scales [8 * parts groups][rb] (fp16) and zero points [8 * parts][rb]. The loop of
// to_stages_kernel with another layout.
__global__ void to_bal_stages_kernel(DeviceMatrix m, unsigned char* out, int rb) {
  const int parts = kBalRows / rb, spi = static_cast<int>(m.cols / (kSlabCols * parts));
  const int64_t chunks = m.rows * (m.cols / 32);
  const int G = static_cast<int>(m.cols / kGroup);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < chunks;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / (m.cols / 32);
    const int cc = static_cast<int>(i % (m.cols / 32));  // chunk of the row
    const int64_t item = row / rb;
    const int rr = static_cast<int>(row % rb), s = cc / (kChunks * parts), cp = (cc / kChunks) % parts,
              c = cc % kChunks;
    unsigned char* st = out + (item * spi + s) * kBalStageBytes;
    const uint32_t* src = reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(m.qweight) +
                                                            row * (m.cols / 2) + cc * 16);
    uint32_t words[4];
    for (int u = 0; u < 4; ++u) words[u] = repacked_word(src[u]);
    reinterpret_cast<uint4*>(st)[(rr * parts + cp) * kChunks + c] =
        make_uint4(words[0], words[1], words[2], words[3]);
    if (c % (kGroup / 32) == 0) {
      const int g = cp * kGroups + c / (kGroup / 32);
      const int64_t e = row * G + cc / (kGroup / 32);
      reinterpret_cast<__half*>(st + kBalScaleOff)[g * rb + rr] = m.scales[e];
      st[kBalZeroOff + g * rb + rr] = m.zeros[e];
    }
  }
}

// The balanced layout's rows an item for a matrix: the rb (a multiple of a warp's rows, at
// most 64, dividing the rows, with 1024 * 64 / rb dividing the columns) whose largest block
// share, in stages, is the least; ties to the larger rb (fewer row sums).
int bal_rows(int64_t rows, int64_t cols, int grid) {
  int best = 0;
  int64_t best_cost = 0;
  for (int rb = kBalRows; rb >= kRowsPerWarp; rb /= 2) {
    const int64_t scols = int64_t{kSlabCols} * (kBalRows / rb);
    if (rows % rb || cols % scols) continue;
    const int64_t items = rows / rb, cost = (items + grid - 1) / grid * (cols / scols);
    if (best == 0 || cost < best_cost) best = rb, best_cost = cost;
  }
  return best;
}

struct Mat {
  DeviceMatrix rows_kernel;  // repacked for gemv(): the nibble order, as 8b's step has it
  // What the persistent outputs are checked against: rows_kernel, or with CHAIN_FRAG the same
  // weights in the fragment layout (both dots then sum in fp32 where the nibble dot sums
  // each chunk in fp16, ~1e-3 apart).
  DeviceMatrix ref;
  unsigned char* stages = nullptr;
  unsigned char* bal = nullptr;  // the balanced kernel's stages, rb rows an item
  int rb = 0;
  int64_t rows, cols;
  Epi epi;
  bool norm;
  float gain;
  __half* y = nullptr;  // the persistent chain's output
  __half* yb = nullptr;  // the balanced kernel's, in xperm's order
  float* yk = nullptr;  // the kernels chain's output (store) ...
  __half* actk = nullptr;  // ... or activation (silu_mul)
  size_t bytes() const { return static_cast<size_t>(rows * cols / 2 + rows * (cols / kGroup) * 3); }
};

}  // namespace

int run(int argc, char** argv) {
  int layers = 32, slots = 0, reps = 20, check_flags = 0, only = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--layers")) layers = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--slots")) slots = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--only")) only = std::atoi(argv[i + 1]);  // one ChainArgs::flags value (a profiler's run)
    else if (!std::strcmp(argv[i], "--check")) check_flags = std::strcmp(argv[i + 1], "static") == 0 ? kStatic : 0;
    else fail("chain bench: unknown option {}", argv[i]);
  }
  int max_smem = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  if (slots == 0) slots = std::min(10, (max_smem - kMaxCols * 2 - 1024) / kStageBytes);  // as many as fit
  if (layers < 2 || slots < 2 || slots > kMaxSlots || reps < 1) fail("chain bench: --layers >= 2, --slots 2..{}, --reps >= 1", kMaxSlots);
  int dev = 0, major = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  if (major < 9) fail("chain bench: the persistent kernel needs sm_90 (bulk copies)");
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // The chain: qkv, o, gate/up, down per layer.
  struct Shape { int64_t rows, cols; Epi epi; bool norm; };
  const Shape layer[4] = {{6144, 4096, Epi::store, true}, {4096, 4096, Epi::store, false},
                          {28672, 4096, Epi::silu_mul, true}, {4096, 14336, Epi::store, false}};
  std::vector<Mat> mats;
  size_t total_bytes = 0;
  for (int l = 0; l < layers; ++l)
    for (int j = 0; j < 4; ++j) {
      Mat mt;
      mt.rows = layer[j].rows, mt.cols = layer[j].cols, mt.epi = layer[j].epi, mt.norm = layer[j].norm;
      DeviceMatrix& d = mt.rows_kernel;
      d.scheme = Scheme::int4, d.rows = mt.rows, d.cols = mt.cols, d.group_size = kGroup, d.zero_point = true;
      const MatrixBytes mb = device_matrix_bytes(d);
      CUDA_CHECK(cudaMalloc(&d.qweight, mb.weights));
      CUDA_CHECK(cudaMalloc(&d.scales, mb.scales));
      CUDA_CHECK(cudaMalloc(&d.zeros, mb.zeros));
      quantize_synthetic(d, RowMap{}, 0, mt.rows, SyntheticSource{7, static_cast<uint64_t>(mats.size()), synth::Dist::matrix}, s);
      const int64_t items = mt.rows / kStageRows, slabs = mt.cols / kSlabCols;
      CUDA_CHECK(cudaMalloc(&mt.stages, items * slabs * kStageBytes));
      uint8_t* frag_q = nullptr;
      if (kFrag) {  // a copy of the weights in the fragment layout
        DeviceMatrix f = d;
        CUDA_CHECK(cudaMalloc(&f.qweight, mb.weights));
        CUDA_CHECK(cudaMalloc(&f.scales, mb.scales));
        CUDA_CHECK(cudaMalloc(&f.zeros, mb.zeros));
        CUDA_CHECK(cudaMemcpyAsync(f.qweight, d.qweight, mb.weights, cudaMemcpyDeviceToDevice, s));
        CUDA_CHECK(cudaMemcpyAsync(f.scales, d.scales, mb.scales, cudaMemcpyDeviceToDevice, s));
        CUDA_CHECK(cudaMemcpyAsync(f.zeros, d.zeros, mb.zeros, cudaMemcpyDeviceToDevice, s));
        repack_int4(f, s, true);
        if (!f.int4_frag) fail("chain bench: the fragment layout does not take a {}x{} matrix", f.rows, f.cols);
        frag_q = static_cast<uint8_t*>(f.qweight);
        mt.ref = f;
      }
      to_stages_kernel<<<1024, 256, 0, s>>>(d, mt.stages, frag_q);
      CUDA_CHECK_LAUNCH();
      mt.rb = bal_rows(mt.rows, mt.cols, sms);
      if (mt.rb == 0 || (mt.rows / mt.rb + sms - 1) / sms * mt.rb > kMaxBlockRows)
        fail("chain bench: no balanced layout for a {}x{} matrix on {} SMs", mt.rows, mt.cols, sms);
      CUDA_CHECK(cudaMalloc(&mt.bal, mt.rows * mt.cols / (kBalRows * kSlabCols) * kBalStageBytes));
      if (!kFrag) {  // the balanced kernel has the CUDA-core dot only
        to_bal_stages_kernel<<<1024, 256, 0, s>>>(d, mt.bal, mt.rb);
        CUDA_CHECK_LAUNCH();
      }
      repack_int4(d, s, prefers_int4_fragments(d.rows, d.cols, kGroup));
      if (!kFrag) mt.ref = d;
      const int64_t outs = mt.epi == Epi::store ? mt.rows : mt.rows / 2;
      CUDA_CHECK(cudaMalloc(&mt.y, outs * 2));
      CUDA_CHECK(cudaMalloc(&mt.yb, outs * 2));
      CUDA_CHECK(cudaMalloc(&mt.yk, mt.rows * 4));
      CUDA_CHECK(cudaMalloc(&mt.actk, mt.rows));  // rows / 2 halves
      total_bytes += mt.bytes();
      mats.push_back(mt);
    }
  CUDA_CHECK(cudaStreamSynchronize(s));
  const int n = static_cast<int>(mats.size());

  // The input vector: rms ~1.
  std::vector<uint16_t> x0h(4096);
  for (int i = 0; i < 4096; ++i) x0h[i] = f32_to_f16(std::sin(0.37f * i) * 1.4f);
  __half* x0;
  CUDA_CHECK(cudaMalloc(&x0, 4096 * 2));
  CUDA_CHECK(cudaMemcpy(x0, x0h.data(), 4096 * 2, cudaMemcpyHostToDevice));

  // Gains that keep every matrix's output (for gate/up: its pre-activations) at rms 1 through
  // N layers, so that the check below compares finite values at every depth: the chain run
  // once with the rows kernel, matrix by matrix, each output rounded to fp16 as the
  // persistent kernel stores it and fed to the next.
  std::vector<float> ref_y;
  __half* xnorm;  // the rows kernel's input where the persistent kernel normalizes its own
  CUDA_CHECK(cudaMalloc(&xnorm, 4096 * 2));
  auto rows_kernel_store = [&](const Mat& m, const __half* x) {
    GemvInput in;
    in.x = x;
    if (m.norm) {  // as the kernel: inv = rsqrt(mean(x^2) + eps) rounded to fp16, x * inv in fp16
      std::vector<uint16_t> h(m.cols);
      CUDA_CHECK(cudaMemcpy(h.data(), x, m.cols * 2, cudaMemcpyDeviceToHost));
      double ss = 0;
      for (uint16_t v : h) ss += static_cast<double>(f16_to_f32(v)) * f16_to_f32(v);
      const float inv = f16_to_f32(f32_to_f16(static_cast<float>(1.0 / std::sqrt(ss / m.cols + 1e-5))));
      for (uint16_t& v : h) v = f32_to_f16(f16_to_f32(v) * inv);
      CUDA_CHECK(cudaMemcpy(xnorm, h.data(), m.cols * 2, cudaMemcpyHostToDevice));
      in.x = xnorm;
    }
    GemvOutput out;
    out.epilogue = Epilogue::store, out.y = m.yk;
    gemv(m.ref, in, out, GemvVariant::fast, s);
    ref_y.resize(m.rows);
    CUDA_CHECK(cudaMemcpyAsync(ref_y.data(), m.yk, m.rows * 4, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
  };
  // What the persistent kernel's epilogue makes of the rows kernel's sums.
  auto epilogue = [](const Mat& m, const std::vector<float>& y, int64_t r) {
    if (m.epi == Epi::store) return y[r] * m.gain;
    const float g = y[2 * r] * m.gain, u = y[2 * r + 1] * m.gain;
    return g / (1.f + std::exp(-g)) * u;
  };
  auto outputs = [](const Mat& m) { return m.epi == Epi::store ? m.rows : m.rows / 2; };
  for (int i = 0; i < static_cast<int>(mats.size()); ++i) {
    Mat& m = mats[i];
    rows_kernel_store(m, i == 0 ? x0 : mats[i - 1].y);
    double ss = 0;
    for (float v : ref_y) ss += static_cast<double>(v) * v;
    m.gain = static_cast<float>(1.0 / std::sqrt(ss / m.rows));
    std::vector<uint16_t> h(outputs(m));
    for (int64_t r = 0; r < outputs(m); ++r) h[r] = f32_to_f16(epilogue(m, ref_y, r));
    CUDA_CHECK(cudaMemcpy(m.y, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  }

  // --- today's kernels, one launch per matrix, as a graph
  cudaGraphExec_t exec;
  {
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < n; ++i) {
      GemvInput in;
      in.x = i == 0 ? x0 : mats[i - 1].y;  // the values do not matter here, the order does
      GemvOutput out;
      if (mats[i].epi == Epi::store) {
        out.epilogue = Epilogue::store, out.y = mats[i].yk;
      } else {
        out.epilogue = Epilogue::silu_mul, out.act = mats[i].actk;
      }
      gemv(mats[i].rows_kernel, in, out, GemvVariant::fast, s);
    }
    cudaGraph_t g;
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
  }
  auto time_ms = [&](auto&& run) { return median_ms(s, reps, run); };

  // --- the persistent chain
  std::vector<PMat> pm(n);
  int total_items = 0, total_stages = 0;
  int64_t total_rows = 0;
  for (int i = 0; i < n; ++i) {
    const Mat& m = mats[i];
    pm[i].stages = m.stages;
    pm[i].x = i == 0 ? x0 : mats[i - 1].y;
    pm[i].xin = i == 0 ? nullptr : mats[i - 1].y;
    pm[i].y = m.y;
    pm[i].rows = static_cast<int>(m.rows), pm[i].cols = static_cast<int>(m.cols);
    pm[i].slabs = static_cast<int>(m.cols / kSlabCols), pm[i].items = static_cast<int>(m.rows / kStageRows);
    pm[i].item0 = total_items;
    pm[i].sitem0 = total_stages;
    pm[i].epi = m.epi, pm[i].gain = m.gain, pm[i].norm = m.norm;
    total_items += pm[i].items;
    total_stages += pm[i].items * pm[i].slabs;
    total_rows += m.rows;
  }
  float* sums;  // kSplit: [2 launch parities][every matrix's rows]
  CUDA_CHECK(cudaMalloc(&sums, 2 * total_rows * 4));
  for (int i = 0, off = 0; i < n; off += pm[i].rows, ++i) pm[i].sums = sums + off;
  PMat* dpm;
  unsigned *claim, *done, *conv;
  unsigned long long* waited;
  CUDA_CHECK(cudaMalloc(&dpm, n * sizeof(PMat)));
  CUDA_CHECK(cudaMemcpy(dpm, pm.data(), n * sizeof(PMat), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMalloc(&claim, 4));
  CUDA_CHECK(cudaMalloc(&done, n * 4));
  CUDA_CHECK(cudaMalloc(&conv, n * 4));
  CUDA_CHECK(cudaMalloc(&waited, 8));
  const size_t smem = static_cast<size_t>(slots) * kStageBytes + kMaxCols * 2;
  CUDA_CHECK(cudaFuncSetAttribute(chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  CUDA_CHECK(cudaFuncSetAttribute(chain_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  int occ = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, chain_kernel, kConsumers + kWarp, smem));
  if (occ < 1) fail("chain bench: a block of {} bytes of shared memory does not fit", smem);
  unsigned epoch = 0;
  auto run_chain = [&](int flags) {
    CUDA_CHECK(cudaMemsetAsync(claim, 0, 4, s));
    ChainArgs a{dpm, n, total_items, total_stages, total_rows, x0, claim, done, conv, epoch++, slots, flags, waited};
    void* args[] = {&a};
    CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(&chain_kernel), sms, kConsumers + kWarp,
                                           args, smem, s));
  };
  // The balanced kernel's matrices and launch; its x0 in xperm's order.
  __half* x0b;
  {
    std::vector<uint16_t> h(4096);
    for (int r = 0; r < 4096; ++r) h[xperm(r)] = x0h[r];
    CUDA_CHECK(cudaMalloc(&x0b, 4096 * 2));
    CUDA_CHECK(cudaMemcpy(x0b, h.data(), 4096 * 2, cudaMemcpyHostToDevice));
  }
  std::vector<BMat> bm(n);
  for (int i = 0; i < n; ++i) {
    const Mat& m = mats[i];
    BMat& b = bm[i];
    b.stages = m.bal, b.x = i == 0 ? x0b : mats[i - 1].yb, b.y = m.yb;
    b.cols = static_cast<int>(m.cols), b.rb = m.rb, b.parts = kBalRows / m.rb;
    b.spi = static_cast<int>(m.cols / (kSlabCols * b.parts)), b.items = static_cast<int>(m.rows / m.rb);
    b.epi = m.epi, b.gain = m.gain, b.norm = m.norm;
  }
  BMat* dbm;
  CUDA_CHECK(cudaMalloc(&dbm, n * sizeof(BMat)));
  CUDA_CHECK(cudaMemcpy(dbm, bm.data(), n * sizeof(BMat), cudaMemcpyHostToDevice));
  cudaFuncAttributes bal_attr{};
  CUDA_CHECK(cudaFuncGetAttributes(&bal_attr, bal_kernel));
  const int bal_slots = std::min<int>(
      kMaxSlots, (max_smem - static_cast<int>(bal_attr.sharedSizeBytes) - kMaxCols * 2) / kBalStageBytes);
  if (bal_slots < 2 * kBalQ) fail("chain bench: {} slots of the balanced ring do not fit", bal_slots);
  const size_t bal_smem = static_cast<size_t>(bal_slots) * kBalStageBytes + kMaxCols * 2;
  CUDA_CHECK(cudaFuncSetAttribute(bal_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(bal_smem)));
  CUDA_CHECK(cudaFuncSetAttribute(bal_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, bal_kernel, kConsumers + 2 * kWarp, bal_smem));
  if (occ < 1)
    fail("chain bench: the balanced kernel's block of {} bytes of shared memory does not fit", bal_smem);
  auto run_bal = [&](int flags) {
    BalArgs a{dbm, n, x0b, done, epoch++, bal_slots, flags, waited};
    void* args[] = {&a};
    CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(&bal_kernel), sms,
                                           kConsumers + 2 * kWarp, args, bal_smem, s));
  };
  auto launch = [&](int flags) { flags& kBal ? run_bal(flags) : run_chain(flags); };
  auto fresh = [&]() {
    CUDA_CHECK(cudaMemsetAsync(done, 0, n * 4, s));  // s does not order with the legacy stream
    CUDA_CHECK(cudaMemsetAsync(conv, 0, n * 4, s));
    CUDA_CHECK(cudaMemsetAsync(waited, 0, 8, s));
    CUDA_CHECK(cudaMemsetAsync(sums, 0, 2 * total_rows * 4, s));
    epoch = 0;
  };

  // Check first: one chain, then the rows kernel on that chain's own inputs, matrix by
  // matrix (both sum the same chunk dots; they differ in the order of the fp32 sums and in
  // where the epilogue rounds). Without kSplit the persistent outputs are the fp16 y (the
  // inputs are there too); with it, the fp32 sums, and each input is rebuilt here from the
  // sums before it as the kernel stages it.
  __half* xhost;
  CUDA_CHECK(cudaMalloc(&xhost, kMaxCols * 2));
  auto check = [&](int flags) {
    fresh();
    const bool bal = flags & kBal;
    for (const Mat& m : mats)
      CUDA_CHECK(cudaMemsetAsync(bal ? m.yb : m.y, 0xff, outputs(m) * 2, s));  // NaN: every output written
    launch(kWait | flags);  // split: a row no stage added to stays 0 and fails below
    CUDA_CHECK(cudaStreamSynchronize(s));
    const bool split = flags & kSplit;
    int bad = 0;
    std::vector<unsigned> counts(n);
    CUDA_CHECK(cudaMemcpy(counts.data(), done, n * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) {
      const unsigned want = static_cast<unsigned>(flags & kBal ? sms
                                                  : split      ? pm[i].items * pm[i].slabs
                                                               : pm[i].items);
      if (counts[i] != want) std::printf("matrix %d: %u work items counted done of %u\n", i, counts[i], want), ++bad;
    }
    std::vector<float> prev_sums;
    // The balanced kernel's outputs in the order of the rows: element r of vector v.
    auto bal_vector = [&](const Mat& v) {
      std::vector<uint16_t> h(outputs(v)), o(outputs(v));
      CUDA_CHECK(cudaMemcpy(h.data(), v.yb, h.size() * 2, cudaMemcpyDeviceToHost));
      for (int64_t r = 0; r < outputs(v); ++r) o[r] = h[xperm(static_cast<int>(r))];
      return o;
    };
    for (int i = 0; i < n; ++i) {
      const int l = i / 4;
      const Mat& m = mats[i];
      const __half* x = pm[i].x;
      if (bal && i > 0) {  // its input, as the kernel read it
        const std::vector<uint16_t> h = bal_vector(mats[i - 1]);
        CUDA_CHECK(cudaMemcpy(xhost, h.data(), m.cols * 2, cudaMemcpyHostToDevice));
        x = xhost;
      }
      if (split && i > 0) {  // the input the kernel staged, from the sums before it
        std::vector<uint16_t> h(m.cols);
        for (int64_t r = 0; r < m.cols; ++r) h[r] = f32_to_f16(epilogue(mats[i - 1], prev_sums, r));
        CUDA_CHECK(cudaMemcpy(xhost, h.data(), m.cols * 2, cudaMemcpyHostToDevice));
        x = xhost;
      }
      rows_kernel_store(m, x);
      const int64_t outs = split ? m.rows : outputs(m);
      std::vector<float> got(outs), want(outs);
      if (split) {
        CUDA_CHECK(cudaMemcpy(got.data(), pm[i].sums, outs * 4, cudaMemcpyDeviceToHost));
        prev_sums = got;
        want = ref_y;
      } else {
        std::vector<uint16_t> h(outs);
        if (bal)
          h = bal_vector(m);
        else
          CUDA_CHECK(cudaMemcpy(h.data(), m.y, outs * 2, cudaMemcpyDeviceToHost));
        for (int64_t r = 0; r < outs; ++r) got[r] = f16_to_f32(h[r]), want[r] = epilogue(m, ref_y, r);
      }
      double ss = 0;
      for (float v : want) ss += static_cast<double>(v) * v;
      const double rms = std::sqrt(ss / outs);
      double worst = 0;
      int64_t at = 0;
      for (int64_t r = 0; r < outs; ++r) {
        const double err = std::fabs(got[r] - want[r]) / (1e-3 * std::fabs(want[r]) + 2e-3 * rms);
        if (!(err <= worst)) worst = err, at = r;  // NaN counts as worst
      }
      const bool ok = std::isfinite(rms) && rms > 1e-2 && worst <= 1.0;
      bad += !ok;
      if (ok && l > 1 && l != layers - 1) continue;  // print the first two layers, the last and failures
      std::printf(
          "check%s layer %2d matrix %d (%5ldx%-5ld): rms %.3f, worst error %.2f of tolerance at %ld (%g, "
          "want %g) %s\n",
          split ? " split"
          : bal ? " balanced"
                : "",
          l, i % 4, (long)m.rows, (long)m.cols, rms, worst, (long)at, got[at], want[at],
          ok ? "ok" : "FAILED");
    }
    if (bad) fail("chain bench: {} matrices of the persistent chain differ from the rows kernel", bad);
  };
  check(check_flags);
  check(check_flags | kSplit);
  check(check_flags | kSplit | kConvert);
  if (!kFrag) check(kBal);

  if (only >= 0) {
    fresh();
    for (int r = 0; r < reps; ++r) launch(only);
    CUDA_CHECK(cudaStreamSynchronize(s));
    std::printf("ran flags %d %d times\n", only, reps);
    return 0;
  }
  const double bw = measure_read_GBps(size_t{4} << 30);
  const double floor_ms = total_bytes / bw / 1e6;
  auto report = [&](const char* label, double ms) {
    std::printf("%-28s %8.3f ms  %6.0f GB/s  %.3f of %.0f GB/s\n", label, ms, total_bytes / ms / 1e6, floor_ms / ms, bw);
  };
  std::printf("chain: %d layers x 4 int4 matrices, %.3f GB of weights, scales and zero points; %d SMs, %d slots\n",
              layers, total_bytes / 1e9, sms, slots);
  std::printf(
      "balanced: %d slots of %d bytes, %d consumer group(s); rows an item qkv %d, o %d, gate/up %d, down "
      "%d\n",
      bal_slots, kBalStageBytes, kBalQ, mats[0].rb, mats[1].rb, mats[2].rb, mats[3].rb);
  report("kernels (graph, PDL)", time_ms([&] { CUDA_CHECK(cudaGraphLaunch(exec, s)); }));
  for (const auto& [flags, label] :
       {std::pair{kWait, "persistent"},
        std::pair{0, "persistent, no waits"},
        std::pair{kWait | kStatic, "persistent, static"},
        std::pair{kStatic, "persistent, static, no waits"},
        std::pair{kStatic | kNoDot, "persistent, static, no dot"},
        std::pair{kNoDot, "persistent, no dot"},
        std::pair{kStatic | kNoCopy, "persistent, static, no copy"},
        std::pair{kStatic | kNoStage, "persistent, static, no x staging"},
        std::pair{kStatic | kNoCopy | kNoStage, "persistent, static, neither"},
        std::pair{kSplit | kWait, "split"},
        std::pair{kSplit, "split, no waits"},
        std::pair{kSplit | kWait | kStatic, "split, static"},
        std::pair{kSplit | kStatic, "split, static, no waits"},
        std::pair{kSplit | kStatic | kNoCopy, "split, static, no copy"},
        std::pair{kSplit | kStatic | kNoCopy | kNoStage, "split, static, neither"},
        std::pair{kWait | kStatic | kNoDot, "persistent, static, no dot, waits"},
        std::pair{kSplit | kConvert | kWait, "split, converted"},
        std::pair{kSplit | kConvert | kWait | kStatic, "split, converted, static"},
        std::pair{kSplit | kConvert | kStatic, "split, converted, static, no waits"},
        std::pair{kSplit | kConvert | kStatic | kNoCopy, "split, converted, static, no copy"},
        std::pair{kBal | kWait, "balanced"},
        std::pair{kBal, "balanced, no waits"},
        std::pair{kBal | kWait | kNoDot, "balanced, no dot, waits"},
        std::pair{kBal | kNoDot, "balanced, no dot"},
        std::pair{kBal | kNoCopy, "balanced, no copy, no waits"},
        std::pair{kBal | kWait, "balanced again"}}) {
    if (kFrag && (flags & kBal)) continue;
    fresh();
    report(label, time_ms([&, flags = flags] { launch(flags); }));
    if (flags & kWait) {
      unsigned long long w = 0;
      CUDA_CHECK(cudaMemcpy(&w, waited, 8, cudaMemcpyDeviceToHost));
      std::printf("  %s waited for inputs %.1f us a chain per SM (SM cycles / 1.98 GHz)\n",
                  flags & kBal ? "the stager" : "consumer 0",
                  w / static_cast<double>(sms) / (reps + 3) / 1980.0);
    }
  }
  report("kernels (graph, PDL) again", time_ms([&] { CUDA_CHECK(cudaGraphLaunch(exec, s)); }));
  return 0;
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
