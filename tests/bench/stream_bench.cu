// Whether an int4 dot on the tensor cores, fed from a shared-memory ring, outruns the weight
// stream, and what the dependencies between the matrices then cost (lab tool, not a test;
// results/lab/ holds the runs):
//   build-gpu/decodebench_stream_bench [--layers N] [--slots S] [--reps R] [--warps 4|8|16]
//                                      [--only FLAGS]  (one launch of that mode, for a profiler)
//
// The chain is 8b's four layer matrices (qkv, o, gate/up, down; int4, groups of 128 with zero
// points) x N layers, each fed the previous one's output (qkv's first 4096 rows stand in for
// attention's output; qkv's and gate/up's inputs are RMS-normalized as they are staged). One
// block an SM for the whole chain, launched cooperatively so that every block is resident:
//   - every block owns an equal, contiguous range of 16-row tiles of every matrix, over all its
//     columns, so a row's sum never leaves its block and no partial sums cross blocks;
//   - a producer lane streams the block's ranges, matrix after matrix, into a ring of stages
//     (16 rows x 2048 columns with their scales and zero points, 17152 bytes, one bulk copy
//     each) and never waits for an input: weights do not depend on x;
//   - W consumer warps split each stage by columns. A lane's 8 bytes of a 32-column chunk are
//     the A operands of two mma.m16n8k16 (16 rows x 16 columns each): one for the low nibbles
//     of its bytes (1024 + v after one LOP3), one for the high nibbles (1024 + 16 v); x is the
//     B operand, staged once a matrix in the order the lanes read it. The 1024s and the zero
//     point come out once a group and row from the group's sums of x. ~0.8 instructions a
//     weight, against ~2 for the half2 dot of the rows kernel;
//   - at a tile's end the warps' row sums meet in shared memory in a fixed order (the same
//     bits on every run); at a matrix's end the block counts itself done, and before the next
//     matrix the consumers wait until every block has (the dependency), then stage its input.
// Lines, each ms a chain and the fraction of the read bandwidth measured in this process:
//   kernels          today's rows GEMVs, one launch a matrix with PDL, as a CUDA graph;
//   stream alone     the ring with consumers that release each stage unread;
//   consumers alone  the consumers on stages never copied (their own ceiling);
//   no waits         copy and dot, each matrix's input raced (timing only);
//   waits            the whole thing: copy, dot and the dependencies;
//   no dot, waits    the ring and the dependencies without arithmetic.
// Before timing, the full kernel's every output (fp32 sums before the epilogue) is checked
// against a plain fp32 reference of the same weights on the input the kernel staged.
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
#include "gemv.cuh"
#include "int4_dot.cuh"
#include "decodebench/int4_frag.h"
#include "decodebench/linear_shapes.h"
#include "mbarrier.cuh"
#include "probe.cuh"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;

namespace {

constexpr int kTileRows = 16, kStageCols = 2048, kGroup = 128, kChunkCols = 32;
constexpr int kStageChunks = kStageCols / kChunkCols;  // 64 chunks, 32 pairs of chunks
constexpr int kStageGroups = kStageCols / kGroup;      // 16
constexpr int kWBytes = kTileRows * kStageCols / 2;    // 16384
// The stage layout: weights [32 chunk pairs][32 lanes][16 bytes] (lane (g, t) = (lane / 4,
// lane % 4) holds the A operands of both chunks: stage_nibble says which weight is where),
// then scales [16 groups][8 g] half2 (rows g, g + 8), then zero points [16 groups][8 g] u16.
constexpr int kScaleOff = kWBytes;
constexpr int kZeroOff = kScaleOff + kStageGroups * 8 * 4;
constexpr int kStageBytes = kZeroOff + kStageGroups * 8 * 2;  // 17152, a multiple of 16
constexpr int kMaxCols = 14336;
constexpr int kMaxSlots = 16;
constexpr float kFixed = 1048576.f;  // sums of squares in fixed point (associative: the same bits)
constexpr int kRedBufs = 16;  // tiles in flight at the reduction: a warp leads by at most kMaxSlots stages

// Args::flags. kWait: consumers wait for a matrix's input (without: timing only, inputs raced).
// kNoDot: consumers release each stage unread; kNoCopy: the producer hands out slots without
// copying; kNoStage: no staging of x at a new matrix; kNoTile: no reduction or epilogue at a
// tile's end (all timing only: what each part costs). kSuspend: the consumers' waits on a full
// slot may suspend instead of polling. kCheck: write the sums and staged inputs for the check.
enum Flags : int { kWait = 1, kNoDot = 2, kNoCopy = 4, kCheck = 8, kNoStage = 16, kNoTile = 32, kSuspend = 64 };

struct SMat {
  const unsigned char* stages;  // tiles x (cols / 2048) stages, a tile's stages in k order
  const __half* x;              // input, cols values
  __half* y;                    // rows values, or rows / 2 for silu_mul
  int rows, cols, tiles;
  int silu;                     // rows are interleaved (gate, up) pairs: y = silu(gate) * up
  int norm;                     // x is RMS-normalized as it is staged
  int feeds_norm;               // the next matrix normalizes this one's output: count its squares
};

struct Args {
  const SMat* mats;
  int n, slots, flags;
  unsigned epoch;                // launches since `done` was zeroed
  unsigned* done;                // [n] blocks finished with the matrix, over all launches
  unsigned long long* sumsq;     // [2][n] fixed-point sums of squares of outputs, by launch parity
  unsigned long long sumsq_x0;   // the chain input's
  float* ydbg;                   // kCheck: every matrix's fp32 row sums, back to back
  __half* xdbg;                  // kCheck: every matrix's staged input, back to back
  const long long* ydbg_off;     // [n]
  const long long* xdbg_off;     // [n]
};

// The weight at nibble n of word j of lane `lane`'s 16 bytes of chunk pair P: row and column
// inside the stage. Word j covers chunk 2P + j / 2; j odd is the second k-half (+8) of the mma.
// Nibbles 0, 4 / 2, 6 are 1024 + v after mask 0x000f000f of the word / the word >> 8: the low
// mma's rows g / g + 8 at k = 2t, 2t + 1; nibbles 1, 5 / 3, 7 with mask 0x00f000f0 the high mma's.
__host__ __device__ inline void stage_nibble(int P, int lane, int j, int n, int& row, int& col) {
  const int g = lane / 4, t = lane % 4, c = 2 * P + j / 2, h = j % 2;
  row = g + ((n >> 1) & 1) * 8;
  col = kChunkCols * c + (n & 1) * 16 + 8 * h + 2 * t + (n >> 2);
}

// --- synthetic weights: q, zero point and scale of every element from a hash, so that the
// stage layout and the reference need no canonical copy.
__host__ __device__ inline uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
__device__ inline int wq(int m, int r, int c) {
  return static_cast<int>(mix((uint64_t(m) << 48) | (uint64_t(r) << 24) | uint64_t(c)) >> 60);
}
__device__ inline int wz(int m, int r, int grp) {
  return static_cast<int>(mix(0x5a5a000000000000ull ^ (uint64_t(m) << 40) ^ (uint64_t(r) << 20) ^ grp) >> 60);
}
__device__ inline __half ws(int m, int r, int grp, int cols) {
  const double u = static_cast<double>(mix(0xa5a5000000000000ull ^ (uint64_t(m) << 40) ^ (uint64_t(r) << 20) ^ grp) >> 40) /
                   16777216.0;
  // (q - z) has variance 42.5 for independent uniform nibbles: outputs at rms ~1 for x at rms 1.
  return __float2half_rn(static_cast<float>((0.5 + u) / std::sqrt(42.5 * cols)));
}

__global__ void to_stage_layout(int m, int rows, int cols, unsigned char* out) {
  const int kst = cols / kStageCols;
  const int64_t pieces = int64_t(rows / kTileRows) * kst * 32 * 32;  // 16-byte pieces of weights
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < pieces; i += int64_t(gridDim.x) * blockDim.x) {
    const int lane = static_cast<int>(i % 32), P = static_cast<int>(i / 32 % 32);
    const int64_t stage = i / 1024;
    const int tile = static_cast<int>(stage / kst), ks = static_cast<int>(stage % kst);
    uint32_t w[4];
    for (int j = 0; j < 4; ++j) {
      uint32_t word = 0;
      for (int n = 0; n < 8; ++n) {
        int r, c;
        stage_nibble(P, lane, j, n, r, c);
        word |= uint32_t(wq(m, tile * kTileRows + r, ks * kStageCols + c)) << (4 * n);
      }
      w[j] = word;
    }
    *reinterpret_cast<uint4*>(out + stage * kStageBytes + (P * 32 + lane) * 16) = make_uint4(w[0], w[1], w[2], w[3]);
  }
  const int64_t metas = int64_t(rows / kTileRows) * kst * kStageGroups * 8;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < metas; i += int64_t(gridDim.x) * blockDim.x) {
    const int g = static_cast<int>(i % 8), grp = static_cast<int>(i / 8 % kStageGroups);
    const int64_t stage = i / (8 * kStageGroups);
    const int tile = static_cast<int>(stage / kst), ks = static_cast<int>(stage % kst);
    const int r0 = tile * kTileRows + g, G = ks * kStageGroups + grp;
    unsigned char* st = out + stage * kStageBytes;
    reinterpret_cast<__half2*>(st + kScaleOff)[grp * 8 + g] = __halves2half2(ws(m, r0, G, cols), ws(m, r0 + 8, G, cols));
    reinterpret_cast<uint16_t*>(st + kZeroOff)[grp * 8 + g] = uint16_t(wz(m, r0, G) | (wz(m, r0 + 8, G) << 8));
  }
}

// The reference: a warp a row, fp32, from the hash; also sum |w x| for the tolerance.
__global__ void reference_rows(int m, int rows, int cols, const __half* x, float* y, float* absdot) {
  const int lane = threadIdx.x % 32;
  for (int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += gridDim.x * (blockDim.x / 32)) {
    float s = 0.f, a = 0.f;
    for (int c = lane; c < cols; c += 32) {
      const float w = __half2float(ws(m, r, c / kGroup, cols)) * float(wq(m, r, c) - wz(m, r, c / kGroup));
      const float v = w * __half2float(x[c]);
      s += v, a += std::fabs(v);
    }
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o), a += __shfl_xor_sync(0xffffffffu, a, o);
    if (lane == 0) y[r] = s, absdot[r] = a;
  }
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
using namespace db::hopper;

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// A warp's share of one stage, in registers: CPW chunks (CPW / 4 groups) of 16 rows. The
// consumers load the next stage's share before computing this one's (two sets, alternating),
// so that a stage's wait and shared-memory round trip hide under the previous stage's dot.
template <int CW>
struct Share {
  static constexpr int CPW = kStageChunks / CW, GPW = CPW / 4;
  uint4 w[CPW / 2];  // the lane's 16 bytes of each chunk pair
  uint32_t s[GPW];   // scales of rows g, g + 8 (half2)
  uint32_t z[GPW];   // zero points of rows g, g + 8 (bytes)
  float2 gs[GPW];    // the group's (1024 SxL + 64 SxH, SxL + SxH)
};

// xs: this stage's first chunk of the permuted x ([chunk][t] 16 bytes); gs: its first group's sums.
template <int CW>
__device__ __forceinline__ void load_share(Share<CW>& r, const unsigned char* st, const float2* gs, int w, int lane) {
  constexpr int CPW = Share<CW>::CPW, GPW = Share<CW>::GPW;
  const int g = lane / 4;
  const uint4* wp = reinterpret_cast<const uint4*>(st) + w * (CPW / 2) * 32 + lane;
#pragma unroll
  for (int p = 0; p < CPW / 2; ++p) r.w[p] = wp[p * 32];
  const uint32_t* sc = reinterpret_cast<const uint32_t*>(st + kScaleOff);
  const uint16_t* zc = reinterpret_cast<const uint16_t*>(st + kZeroOff);
#pragma unroll
  for (int gi = 0; gi < GPW; ++gi) {
    r.s[gi] = sc[(w * GPW + gi) * 8 + g];
    r.z[gi] = zc[(w * GPW + gi) * 8 + g];
    r.gs[gi] = gs[w * GPW + gi];
  }
}

// The share's dot into rows g (y0) and g + 8 (y1), x's B operands read from xs (this stage's
// first chunk of the permuted x: [chunk][t] 16 bytes, x at 2t, 8 + 2t (low mma) and 16 + 2t,
// 24 + 2t (high) of the chunk) here rather than with the share: registers. Each group's low and
// high mmas accumulate in two chains each (chunks 0-1 and 2-3), no chain longer than two.
template <int CW>
__device__ __forceinline__ void dot_share(const Share<CW>& r, const uint4* xs, int w, int lane, float& y0, float& y1) {
  constexpr int CPW = Share<CW>::CPW, GPW = Share<CW>::GPW;
  uint4 xv[CPW];
#pragma unroll
  for (int c = 0; c < CPW; ++c) xv[c] = xs[(w * CPW + c) * 4 + lane % 4];
#pragma unroll
  for (int gi = 0; gi < GPW; ++gi) {
    float dl[2][4] = {}, dh[2][4] = {};
#pragma unroll
    for (int cc = 0; cc < 4; ++cc) {
      const int c = gi * 4 + cc, k = cc / 2;
      const uint4 v = r.w[c / 2];
      const uint32_t w0 = c % 2 ? v.z : v.x, w1 = c % 2 ? v.w : v.y;
      const uint32_t u0 = w0 >> 8, u1 = w1 >> 8;
      frag::mma(dl[k], and_or<0x000f000fu, 0x64006400u>(w0), and_or<0x000f000fu, 0x64006400u>(u0),
                and_or<0x000f000fu, 0x64006400u>(w1), and_or<0x000f000fu, 0x64006400u>(u1), xv[c].x, xv[c].y);
      frag::mma(dh[k], and_or<0x00f000f0u, 0x64006400u>(w0), and_or<0x00f000f0u, 0x64006400u>(u0),
                and_or<0x00f000f0u, 0x64006400u>(w1), and_or<0x00f000f0u, 0x64006400u>(u1), xv[c].z, xv[c].w);
    }
    const __half2 s2 = bits_h2(r.s[gi]);
    const float2 gst = r.gs[gi];
    // sum v x = dl + dh / 16 - (1024 SxL + 64 SxH); minus z (SxL + SxH); times the scale.
    const float d0 = fmaf(dh[0][0] + dh[1][0], 0.0625f, dl[0][0] + dl[1][0]) - gst.x;
    const float d1 = fmaf(dh[0][2] + dh[1][2], 0.0625f, dl[0][2] + dl[1][2]) - gst.x;
    y0 = fmaf(__low2float(s2), fmaf(-float(r.z[gi] & 0xffu), gst.y, d0), y0);
    y1 = fmaf(__high2float(s2), fmaf(-float(r.z[gi] >> 8), gst.y, d1), y1);
  }
}
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void advance(int& slot, unsigned& phase, int slots) {
  if (++slot == slots) slot = 0, phase ^= 1;
}

// A tile's end in warp `warp`: its row sums into shared memory; the last warp of the block to
// arrive (a counter, no barrier) adds them in warp order and applies the epilogue.
template <int CW>
__device__ __forceinline__ void end_tile(const Args& a, const SMat& M, int m, int tile, unsigned buf, float* red,
                                         unsigned* cnt, int warp, int lane, unsigned par, float& y0, float& y1) {
  const int g = lane / 4;
  float* rb = red + buf * CW * 16;
  if (lane % 4 == 0) rb[warp * 16 + g] = y0, rb[warp * 16 + g + 8] = y1;
  y0 = y1 = 0.f;
  __syncwarp();
  unsigned last = 0;
  if (lane == 0) {
    __threadfence_block();
    last = atomicAdd(&cnt[buf], 1u) == CW - 1;
  }
  if (!__shfl_sync(0xffffffffu, last, 0)) return;
  __threadfence_block();
  float v = 0.f;
  if (lane < 16)
#pragma unroll
    for (int w = 0; w < CW; ++w) v += rb[w * 16 + lane];
  const int row = tile * kTileRows + lane;
  if ((a.flags & kCheck) && lane < 16) a.ydbg[a.ydbg_off[m] + row] = v;
  const float up = __shfl_down_sync(0xffffffffu, v, 1);
  float sq = 0.f;
  if (lane < 16) {
    if (M.silu) {
      if (lane % 2 == 0) {
        const __half out = __float2half_rn(v / (1.f + __expf(-v)) * up);
        M.y[row / 2] = out;
        sq = __half2float(out) * __half2float(out);
      }
    } else {
      const __half out = __float2half_rn(v);
      M.y[row] = out;
      sq = __half2float(out) * __half2float(out);
    }
  }
  if (M.feeds_norm) {
    for (int o = 8; o; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
    if (lane == 0) atomicAdd(&a.sumsq[par * a.n + m], static_cast<unsigned long long>(sq * kFixed + 0.5f));
  }
  if (lane == 0) cnt[buf] = 0;
  __threadfence();  // this tile's outputs and squares before the block's count
}
#endif

template <int CW>
__global__ void __launch_bounds__((CW + 1) * 32, 1) stream_kernel(Args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kConsumers = CW * 32;
  constexpr int kPieces = (kMaxCols / 8 + kConsumers - 1) / kConsumers;  // a consumer's 16-byte pieces of x
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* ring = smem;
  uint4* xs = reinterpret_cast<uint4*>(ring + a.slots * kStageBytes);                 // [cols / 32][4]
  float2* gstat = reinterpret_cast<float2*>(xs + kMaxCols / 8);                       // [cols / 128]
  float* red = reinterpret_cast<float*>(gstat + kMaxCols / kGroup);                   // [kRedBufs][CW][16]
  unsigned* cnt = reinterpret_cast<unsigned*>(red + kRedBufs * CW * 16);              // [kRedBufs]
  uint64_t* full = reinterpret_cast<uint64_t*>(cnt + kRedBufs);
  uint64_t* empty = full + kMaxSlots;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, G = gridDim.x, b = blockIdx.x;
  if (threadIdx.x == 0) {
    for (int i = 0; i < a.slots; ++i) mbar_init(&full[i], 1), mbar_init(&empty[i], CW);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (threadIdx.x < kRedBufs) cnt[threadIdx.x] = 0;
  // This launch's sums of squares start at zero: the other parity's, which the next launch
  // uses, are zeroed here (the previous launch has completed).
  const unsigned par = a.epoch & 1;
  for (int i = b * blockDim.x + threadIdx.x; i < a.n; i += G * blockDim.x) a.sumsq[(par ^ 1) * a.n + i] = 0;
  __syncthreads();

  if (warp == CW) {  // the producer
    if (lane == 0) {
      unsigned it = 0;
      for (int m = 0; m < a.n; ++m) {
        const SMat& M = a.mats[m];
        const int kst = M.cols / kStageCols, t0 = M.tiles * b / G, t1 = M.tiles * (b + 1) / G;
        const unsigned char* src = M.stages + int64_t(t0) * kst * kStageBytes;
        for (int s = 0; s < (t1 - t0) * kst; ++s, ++it) {
          const int slot = static_cast<int>(it % a.slots);
          mbar_wait(&empty[slot], ((it / a.slots) & 1) ^ 1);
          if (a.flags & kNoCopy)
            mbar_arrive(&full[slot]);
          else
            bulk_copy(ring + slot * kStageBytes, src + int64_t(s) * kStageBytes, kStageBytes, &full[slot]);
        }
      }
    }
    return;
  }

  const int tid = threadIdx.x;  // < kConsumers
  const unsigned suspend = a.flags & kSuspend ? 1000000u : 0u;
  int slot = 0;
  unsigned phase = 0, tcount = 0;
  for (int m = 0; m <= a.n; ++m) {
    // Every consumer is done with matrix m - 1, its tiles reduced and written: count the block.
    named_sync(1, kConsumers);
    if (m > 0 && tid == 0) red_release(&a.done[m - 1], 1);
    if (m == a.n) break;
    const SMat& M = a.mats[m];
    const int kst = M.cols / kStageCols, t0 = M.tiles * b / G, t1 = M.tiles * (b + 1) / G;
    // The dependency: matrix m - 1 finished by every block.
    if (m > 0 && (a.flags & kWait)) {
      if (tid == 0) {
        const unsigned target = (a.epoch + 1) * G;
        while (ld_acquire(&a.done[m - 1]) < target) {
        }
      }
      named_sync(1, kConsumers);
    }
    // Stage x: normalized (qkv, gate/up), permuted into the lanes' B order, with its groups' sums.
    if (!(a.flags & kNoStage)) {
      const int pieces = M.cols / 8;
      uint4 xin[kPieces];
#pragma unroll
      for (int i = 0; i < kPieces; ++i)
        if (tid + i * kConsumers < pieces) xin[i] = __ldcg(reinterpret_cast<const uint4*>(M.x) + tid + i * kConsumers);
      float inv = 1.f;
      if (M.norm) {  // ordered after the wait by its barrier; issued beside x's loads
        const unsigned long long ss = m == 0 ? a.sumsq_x0 : __ldcg(&a.sumsq[par * a.n + m - 1]);
        inv = rsqrtf(static_cast<float>(static_cast<double>(ss) / kFixed) / M.cols + 1e-5f);
      }
#pragma unroll
      for (int i = 0; i < kPieces; ++i) {
        const int q = tid + i * kConsumers;
        if (q >= pieces) continue;  // uniform across a warp: pieces is a multiple of 32
        uint32_t h[4] = {xin[i].x, xin[i].y, xin[i].z, xin[i].w};
        float sum = 0.f;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          float2 f = __half22float2(bits_h2(h[k]));
          if (M.norm) {
            const __half2 nh = __floats2half2_rn(f.x * inv, f.y * inv);
            h[k] = h2_bits(nh);
            f = __half22float2(nh);
          }
          sum += f.x + f.y;
          // The pair at column 32 c + o of the chunk: slot o / 8, lane quad t = o % 8 / 2.
          const int c = q / 4, o = (q % 4) * 8 + 2 * k;
          reinterpret_cast<uint32_t*>(xs)[(c * 4 + (o % 8) / 2) * 4 + o / 8] = h[k];
        }
        if ((a.flags & kCheck) && b == 0)
          reinterpret_cast<uint4*>(a.xdbg + a.xdbg_off[m])[q] = make_uint4(h[0], h[1], h[2], h[3]);
        // A group is 16 consecutive pieces: half a warp. Pieces 0, 1 of each 4 are its low halves.
        float lo = (q % 4) < 2 ? sum : 0.f, hi = (q % 4) < 2 ? 0.f : sum;
#pragma unroll
        for (int o = 1; o < 16; o <<= 1) {
          lo += __shfl_xor_sync(0xffffffffu, lo, o);
          hi += __shfl_xor_sync(0xffffffffu, hi, o);
        }
        if (q % 16 == 0) gstat[q / 16] = make_float2(1024.f * lo + 64.f * hi, lo + hi);
      }
      named_sync(1, kConsumers);
    }

    // The block's stages of matrix m, two register sets alternating: stage s + 1's share is
    // loaded before stage s's dot. A tile ends every kst stages: the warps' row sums meet in
    // shared memory and the last warp to arrive (a counter, no barrier) reduces them in warp
    // order and applies the epilogue.
    const int S = (t1 - t0) * kst;
    float y0 = 0.f, y1 = 0.f;
    if (S > 0) {
      Share<CW> ra, rb;
      int sl1 = slot;
      unsigned ph1 = phase;
      const bool dot = !(a.flags & kNoDot), tiles = !(a.flags & kNoTile);
      mbar_wait(&full[slot], phase, suspend);
      if (dot) load_share<CW>(ra, ring + slot * kStageBytes, gstat, warp, lane);
      for (int s = 0; s < S; s += 2) {
        // stage s (set ra, slot `slot`); fetch s + 1 into rb
        sl1 = slot, ph1 = phase;
        advance(sl1, ph1, a.slots);
        if (s + 1 < S) {
          const int k1 = (s + 1) % kst;
          mbar_wait(&full[sl1], ph1, suspend);
          if (dot) load_share<CW>(rb, ring + sl1 * kStageBytes, gstat + k1 * kStageGroups, warp, lane);
        }
        if (dot) dot_share<CW>(ra, xs + (s % kst) * kStageChunks * 4, warp, lane, y0, y1);
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[slot]);
        if (tiles && (s + 1) % kst == 0)
          end_tile<CW>(a, M, m, t0 + s / kst, tcount++ % kRedBufs, red, cnt, warp, lane, par, y0, y1);
        slot = sl1, phase = ph1;
        if (s + 1 >= S) break;
        // stage s + 1 (set rb); fetch s + 2 into ra
        sl1 = slot, ph1 = phase;
        advance(sl1, ph1, a.slots);
        if (s + 2 < S) {
          const int k2 = (s + 2) % kst;
          mbar_wait(&full[sl1], ph1, suspend);
          if (dot) load_share<CW>(ra, ring + sl1 * kStageBytes, gstat + k2 * kStageGroups, warp, lane);
        }
        if (dot) dot_share<CW>(rb, xs + ((s + 1) % kst) * kStageChunks * 4, warp, lane, y0, y1);
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[slot]);
        if (tiles && (s + 2) % kst == 0)
          end_tile<CW>(a, M, m, t0 + (s + 1) / kst, tcount++ % kRedBufs, red, cnt, warp, lane, par, y0, y1);
        slot = sl1, phase = ph1;
      }
    }
  }
#endif
}

struct Mat {
  DeviceMatrix rows_kernel;  // today's GEMV's weights (values differ; the bytes and shapes match)
  unsigned char* stages = nullptr;
  int64_t rows, cols;
  bool silu, norm;
  __half* y = nullptr;
  float* yk = nullptr;
  __half* actk = nullptr;
  size_t bytes() const { return static_cast<size_t>(rows * cols / 2 + rows * (cols / kGroup) * 3); }
};

template <int CW>
int run_with(int layers, int slots, int reps, int only) {
  int dev = 0, major = 0, sms = 0, max_smem = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (major < 9) fail("stream bench: needs sm_90 (bulk copies)");
  const int fixed_smem = kMaxCols / 8 * 16 + kMaxCols / kGroup * 8 + (kRedBufs * CW * 16 + kRedBufs) * 4 + 2 * kMaxSlots * 8;
  if (slots == 0) slots = std::min(kMaxSlots, (max_smem - fixed_smem) / kStageBytes);
  if (slots < 2 || slots > kMaxSlots) fail("stream bench: --slots 2..{}", kMaxSlots);
  const size_t smem = static_cast<size_t>(slots) * kStageBytes + fixed_smem;
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  struct Shape { int64_t rows, cols; bool silu, norm; };
  const Shape layer[4] = {{6144, 4096, false, true}, {4096, 4096, false, false},
                          {28672, 4096, true, true}, {4096, 14336, false, false}};
  std::vector<Mat> mats;
  size_t total_bytes = 0;
  for (int l = 0; l < layers; ++l)
    for (int j = 0; j < 4; ++j) {
      Mat mt;
      mt.rows = layer[j].rows, mt.cols = layer[j].cols, mt.silu = layer[j].silu, mt.norm = layer[j].norm;
      const int m = static_cast<int>(mats.size());
      CUDA_CHECK(cudaMalloc(&mt.stages, mt.rows / kTileRows * (mt.cols / kStageCols) * kStageBytes));
      to_stage_layout<<<2048, 256, 0, s>>>(m, static_cast<int>(mt.rows), static_cast<int>(mt.cols), mt.stages);
      CUDA_CHECK_LAUNCH();
      DeviceMatrix& d = mt.rows_kernel;
      d.scheme = Scheme::int4, d.rows = mt.rows, d.cols = mt.cols, d.group_size = kGroup, d.zero_point = true;
      const MatrixBytes mb = device_matrix_bytes(d);
      CUDA_CHECK(cudaMalloc(&d.qweight, mb.weights));
      CUDA_CHECK(cudaMalloc(&d.scales, mb.scales));
      CUDA_CHECK(cudaMalloc(&d.zeros, mb.zeros));
      quantize_synthetic(d, RowMap{}, 0, mt.rows, SyntheticSource{7, static_cast<uint64_t>(m), synth::Dist::matrix}, s);
      repack_int4(d, s, prefers_int4_fragments(d.rows, d.cols, kGroup));
      CUDA_CHECK(cudaMalloc(&mt.y, mt.rows * 2));
      CUDA_CHECK(cudaMalloc(&mt.yk, mt.rows * 4));
      CUDA_CHECK(cudaMalloc(&mt.actk, mt.rows));
      total_bytes += mt.bytes();
      mats.push_back(mt);
    }
  CUDA_CHECK(cudaStreamSynchronize(s));
  const int n = static_cast<int>(mats.size());

  std::vector<uint16_t> x0h(4096);
  double ss0 = 0;
  for (int i = 0; i < 4096; ++i) {
    x0h[i] = f32_to_f16(std::sin(0.37f * i) * 1.4f);
    ss0 += double(f16_to_f32(x0h[i])) * f16_to_f32(x0h[i]);
  }
  __half* x0;
  CUDA_CHECK(cudaMalloc(&x0, 4096 * 2));
  CUDA_CHECK(cudaMemcpy(x0, x0h.data(), 4096 * 2, cudaMemcpyHostToDevice));

  // --- today's kernels, one launch a matrix, as a graph
  cudaGraphExec_t exec;
  {
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < n; ++i) {
      GemvInput in;
      in.x = i == 0 ? x0 : mats[i - 1].y;  // the values do not matter here, the order does
      GemvOutput out;
      if (!mats[i].silu)
        out.epilogue = Epilogue::store, out.y = mats[i].yk;
      else
        out.epilogue = Epilogue::silu_mul, out.act = mats[i].actk;
      gemv(mats[i].rows_kernel, in, out, GemvVariant::fast, s);
    }
    cudaGraph_t gr;
    CUDA_CHECK(cudaStreamEndCapture(s, &gr));
    CUDA_CHECK(cudaGraphInstantiate(&exec, gr, 0));
    CUDA_CHECK(cudaGraphDestroy(gr));
  }

  // --- the persistent chain
  std::vector<SMat> sm(n);
  std::vector<long long> yoff(n), xoff(n);
  long long ytot = 0, xtot = 0;
  for (int i = 0; i < n; ++i) {
    const Mat& m = mats[i];
    sm[i] = SMat{m.stages, i == 0 ? x0 : mats[i - 1].y, m.y, static_cast<int>(m.rows), static_cast<int>(m.cols),
                 static_cast<int>(m.rows / kTileRows), m.silu, m.norm, i + 1 < n && mats[i + 1].norm};
    yoff[i] = ytot, xoff[i] = xtot;
    ytot += m.rows, xtot += m.cols;
  }
  SMat* dsm;
  unsigned* done;
  unsigned long long* sumsq;
  float* ydbg;
  __half* xdbg;
  long long *dyoff, *dxoff;
  CUDA_CHECK(cudaMalloc(&dsm, n * sizeof(SMat)));
  CUDA_CHECK(cudaMemcpy(dsm, sm.data(), n * sizeof(SMat), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMalloc(&done, n * 4));
  CUDA_CHECK(cudaMemset(done, 0, n * 4));
  CUDA_CHECK(cudaMalloc(&sumsq, 2 * n * 8));
  CUDA_CHECK(cudaMemset(sumsq, 0, 2 * n * 8));
  CUDA_CHECK(cudaMalloc(&ydbg, ytot * 4));
  CUDA_CHECK(cudaMalloc(&xdbg, xtot * 2));
  CUDA_CHECK(cudaMalloc(&dyoff, n * 8));
  CUDA_CHECK(cudaMalloc(&dxoff, n * 8));
  CUDA_CHECK(cudaMemcpy(dyoff, yoff.data(), n * 8, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dxoff, xoff.data(), n * 8, cudaMemcpyHostToDevice));
  auto kernel = stream_kernel<CW>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  int occ = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, (CW + 1) * 32, smem));
  if (occ < 1) fail("stream bench: a block of {} bytes of shared memory does not fit", smem);
  unsigned epoch = 0;
  auto launch = [&](int flags) {
    Args a{dsm, n, slots, flags, epoch++, done, sumsq, static_cast<unsigned long long>(ss0 * kFixed + 0.5),
           ydbg, xdbg, dyoff, dxoff};
    void* args[] = {&a};
    CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), sms, (CW + 1) * 32, args, smem, s));
  };

  if (only >= 0) {  // one launch of one mode (a profiler's run)
    launch(only);
    CUDA_CHECK(cudaStreamSynchronize(s));
    return 0;
  }
  bool failed = false;
  // --- the check: the whole kernel once, every matrix against the reference on its staged x
  launch(kWait | kCheck);
  CUDA_CHECK(cudaStreamSynchronize(s));
  {
    float *yr, *ab;
    CUDA_CHECK(cudaMalloc(&yr, ytot * 4));
    CUDA_CHECK(cudaMalloc(&ab, ytot * 4));
    for (int i = 0; i < n; ++i)
      reference_rows<<<1024, 256, 0, s>>>(i, sm[i].rows, sm[i].cols, xdbg + xoff[i], yr + yoff[i], ab + yoff[i]);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaStreamSynchronize(s));  // s does not synchronize with the copies below
    std::vector<float> got(ytot), ref(ytot), absd(ytot);
    CUDA_CHECK(cudaMemcpy(got.data(), ydbg, ytot * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(ref.data(), yr, ytot * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(absd.data(), ab, ytot * 4, cudaMemcpyDeviceToHost));
    // Per matrix: rows past the tolerance, the worst finite error, the rms of the sums, and the
    // first failing row, so that a failure says where it starts.
    double worst = 0;
    int bad = 0, worst_m = 0, shown = 0;
    for (int i = 0; i < n; ++i) {
      int mbad = 0;
      double mworst = 0, rms = 0;
      long long first = -1;
      for (long long r = yoff[i]; r < yoff[i] + sm[i].rows; ++r) {
        const double e = std::fabs(double(got[r]) - ref[r]) / std::max(1e-30, double(absd[r]));
        rms += double(ref[r]) * ref[r];
        if (!(e <= 8.0 / 2048)) {  // the rows kernel's tolerance: 8 x 2^-11 of sum |w x|
          ++mbad;
          if (first < 0) first = r;
        } else if (e > mworst) {
          mworst = e;
        }
      }
      if (mworst > worst) worst = mworst, worst_m = i;
      bad += mbad;
      if (mbad && shown++ < 6)
        std::printf("  matrix %d (%dx%d): %d rows past, first row %lld: got %g ref %g sum|w x| %g; rms %g\n", i,
                    sm[i].rows, sm[i].cols, mbad, first - yoff[i], got[first], ref[first], absd[first],
                    std::sqrt(rms / sm[i].rows));
    }
    std::printf("check: %d matrices, worst passing |error| / sum|w x| %.3g (matrix %d), %d rows past 8 x 2^-11%s\n", n,
                worst, worst_m, bad, bad ? "  FAILED" : "");
    CUDA_CHECK(cudaFree(yr));
    CUDA_CHECK(cudaFree(ab));
    failed = bad > 0;  // the timing still runs: a wrong index seldom changes the instructions
  }

  const double bw = measure_read_GBps(size_t{4} << 30);
  auto time_ms = [&](auto&& run) { return median_ms(s, reps, run); };
  auto line = [&](const char* what, double ms) {
    const double gbs = total_bytes / (ms * 1e6);
    std::printf("w%d %-22s %7.3f ms  %6.0f GB/s  %.3f of %.0f GB/s\n", CW, what, ms, gbs, gbs / bw, bw);
  };
  std::printf("w%d chain: %d layers x 4 int4 matrices, %.3f GB; %d SMs, %d slots of %d bytes, %d consumer warps\n", CW,
              layers, total_bytes / 1e9, sms, slots, kStageBytes, CW);
  line("kernels (graph, PDL)", time_ms([&] { CUDA_CHECK(cudaGraphLaunch(exec, s)); }));
  line("stream alone", time_ms([&] { launch(kNoDot); }));
  line("stream alone, suspend", time_ms([&] { launch(kNoDot | kSuspend); }));
  line("stream, no stage/tile", time_ms([&] { launch(kNoDot | kNoStage | kNoTile); }));
  line("consumers alone", time_ms([&] { launch(kNoCopy); }));
  line("cons. no stage", time_ms([&] { launch(kNoCopy | kNoStage); }));
  line("cons. no stage/tile", time_ms([&] { launch(kNoCopy | kNoStage | kNoTile); }));
  line("no waits", time_ms([&] { launch(0); }));
  line("waits", time_ms([&] { launch(kWait); }));
  line("no dot, waits", time_ms([&] { launch(kWait | kNoDot); }));
  line("kernels (graph, PDL)", time_ms([&] { CUDA_CHECK(cudaGraphLaunch(exec, s)); }));
  return failed ? 1 : 0;
}

int run(int argc, char** argv) {
  int layers = 32, slots = 0, reps = 20, warps = 8, only = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--layers")) layers = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--slots")) slots = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--warps")) warps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--only")) only = std::atoi(argv[i + 1]);  // one Args::flags value
    else fail("stream bench: unknown option {}", argv[i]);
  }
  if (layers < 1 || reps < 1) fail("stream bench: --layers >= 1, --reps >= 1");
  switch (warps) {
    case 4: return run_with<4>(layers, slots, reps, only);
    case 8: return run_with<8>(layers, slots, reps, only);
    case 16: return run_with<16>(layers, slots, reps, only);
    default: fail("stream bench: --warps 4, 8 or 16");
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
