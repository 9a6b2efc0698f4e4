// The quantized GEMM of a batched decode step at many sequences (see quant_gemm.cuh).
//
// mma.m16n8k16 computes D[16 x 8] += A[16 x 16] B[16 x 8]; A is 16 rows of W, B is 16 columns
// of X for 8 sequences, D lands in y transposed (y is [batch, rows]). A dot product does not
// care in which order its k terms come, so the k slots of an mma are assigned to the columns a
// lane's weights hold in their stored order, and X is read at the same columns:
//
//   - A k-tile is 128 columns. Lane (g, c) (g = lane / 4, c = lane % 4) takes columns
//     [32c, 32c + 32) of the tile in rows g and g + 8 of each 16-row tile: one 16-byte chunk of
//     int4 (eight words of the nibble order, 0,2,4,6,1,3,5,7 inside each), two of int8 or fp8.
//   - Step (j, h), j < 4, h < 2, is one mma: the lane's columns 32c + 8j + 4h + {0, 1} are
//     its k slots 2c, 2c + 1 (registers a0, a1 of rows g, g + 8; b0) and + {2, 3} its slots
//     2c + 8, 2c + 9 (a2, a3; b1). int4 word j unpacks (int4_pairs) into the four column pairs
//     of 8j..8j+7, two a step; an int8 or fp8 word is one step's four columns.
//   - So a lane's B registers of step (j, h) are X[n][32c + 8j + 4h .. + 3] of sequence n = g of
//     the 8-sequence tile: the 16-byte piece 4c + j of the row holds both steps of j.
//
// Shared memory per stage: X [128 sequences][128 columns] fp16, its 16-byte pieces permuted in
// each row (piece 4c + j at 4j + c, XOR 4 in odd rows) so that the 8 lanes of a phase, which
// read pieces 4c + j of two adjacent rows, hit 8 different bank groups; W [rows of the block]
// [the tile's bytes] as stored (int4: 64 bytes a row, adjacent rows in the other half of the
// banks) or, for int8 and fp8 (128 bytes a row), its two chunks a lane swapped in odd rows; int4's
// scales and zero points, 16 and 8 bytes a block of 8 rows and group, as the packed meta lays
// them out. A stage is copied by cp.async, zero-filled past the matrix, the batch and the
// columns (zero weights against zero x add nothing).
//
// A block is 8 warps: warps_m along the rows (32 rows, two 16-row tiles each) times 8 /
// warps_m along the sequences, which take the block's 16 tiles of 8 sequences in turn (tile
// w, w + 8 / warps_m, ...): a batch that fills only part of the block's 128 sequences costs
// each warp the tiles it has, and tiles past the batch are skipped. Columns split over blocks
// where the tiles are too few for the SMs; the last block of a tile to finish adds the splits'
// partial sums in split order (deterministic) and writes y.
#include <algorithm>
#include <map>
#include <mutex>

#include "common.cuh"
#include "int4_dot.cuh"
#include "int4_meta.h"
#include "pdl.cuh"
#include "quant_gemm.cuh"

namespace db::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarp;
constexpr int kTileK = 128;                  // columns of a k-tile
constexpr int kTileN = 128;                  // sequences of a block
constexpr int kSeqTiles = kTileN / 8;        // tiles of 8 sequences a block
constexpr int kMaxStages = 4;                // k-tiles in the ring, at most
constexpr int kXRowBytes = kTileK * 2;       // one sequence's 128 columns of fp16
constexpr int kMaxTileGroups = kTileK / 32;  // groups of a k-tile, at the smallest group (32)
constexpr int kRowTiles = 2;                 // 16-row tiles a warp
constexpr int kMaxSplits = 8;
constexpr int kMinTilesPerSplit = 4;  // k-tiles: a split shorter than the ring does not fill it

// Bytes of one row of a W tile, and the 16-byte chunks of it a lane holds (1 or 2).
template <Scheme S>
constexpr int kWRowBytes = S == Scheme::int4 ? kTileK / 2 : kTileK;
template <Scheme S>
constexpr int kLaneChunks = kWRowBytes<S> / 64;

template <Scheme S, int WM>
struct Smem {
  static constexpr int kRows = 32 * WM;  // rows of a block
  static constexpr int kX = kTileN * kXRowBytes;
  static constexpr int kW = kRows * kWRowBytes<S>;
  static constexpr int kMetaEntries = S == Scheme::int4 ? kRows / 8 * kMaxTileGroups : 0;
  static constexpr int kScales = kMetaEntries * 16;
  static constexpr int kZeros = kMetaEntries * 8;
  static constexpr int kStage = kX + kW + kScales + kZeros;
};

struct QuantArgs {
  DeviceMatrix m;
  const __half* x = nullptr;  // [batch, cols]
  float* y = nullptr;         // [batch, rows]
  int batch = 0;
  int splits = 1;
  int k_tiles = 0;
  int stages = kMaxStages;  // 2 to kMaxStages
  int group_shift = 0;      // int4: log2(group_size)
  bool accumulate = false;
  float* partial = nullptr;      // [tiles][splits][row tiles][seq tiles][threads] float4, splits > 1
  unsigned* counters = nullptr;  // [tiles], zero between launches
};

// 16 (or 8) bytes global -> shared, or zeros where !ok (nothing is read then).
__device__ __forceinline__ void cp_async16_or_zero(void* smem, const void* gmem, bool ok) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem), "r"(ok ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async8_or_zero(void* smem, const void* gmem, bool ok) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(gmem), "r"(ok ? 8 : 0)
               : "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Where X's piece q (columns 8q..8q+7 of the tile) of sequence row n lies in the row, and back
// (the map swaps the two 2-bit fields of q, its own inverse, then XORs odd rows).
__device__ __forceinline__ int x_slot(int q, int n) {
  return (((q & 3) << 2) | (q >> 2)) ^ ((n & 1) << 2);
}
__device__ __forceinline__ int x_piece(int slot, int n) {
  const int t = slot ^ ((n & 1) << 2);
  return ((t & 3) << 2) | (t >> 2);
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}

// An int8 or fp8 word (columns 0..3) as two fp16 pairs (0, 1) and (2, 3), exact; the row scale
// comes after the sums.
template <Scheme S>
__device__ __forceinline__ void byte_pairs(uint32_t w, uint32_t& p0, uint32_t& p1) {
  if constexpr (S == Scheme::int8) {
    // q + 128 as a byte under 0x64 is fp16 1024 + q + 128; minus 1152 is q, exact.
    const __half2 magic = bits_h2(0x64806480u);
    const uint32_t u = w ^ 0x80808080u;
    p0 = h2_bits(__hsub2(bits_h2(__byte_perm(u, 0x64646464u, 0x4140u)), magic));
    p1 = h2_bits(__hsub2(bits_h2(__byte_perm(u, 0x64646464u, 0x4342u)), magic));
  } else {
    p0 = h2_bits(fp8x2_to_half2(w));
    p1 = h2_bits(fp8x2_to_half2(w >> 16));
  }
}

template <Scheme S, int WM>
__global__ void __launch_bounds__(kThreads, 1) quant_gemm_kernel(QuantArgs a) {
  pdl_trigger();  // the next kernel may launch and issue its own weight loads
  using L = Smem<S, WM>;
  constexpr int WN = kWarps / WM;     // warps along the sequences
  constexpr int NT = kSeqTiles / WN;  // 8-sequence tiles a warp
  constexpr int RB = kWRowBytes<S>;
  constexpr int LC = kLaneChunks<S>;
  constexpr int kRowChunks = RB / 16;
  constexpr int kColsPerChunk = weights_per_chunk(S);
  extern __shared__ __align__(16) unsigned char smem[];
  const DeviceMatrix& m = a.m;
  const int tid = threadIdx.x, warp = tid / kWarp, lane = tid % kWarp, g = lane / 4, c = lane % 4;
  const int wm = warp % WM, wn = warp / WM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * L::kRows;
  const int split = blockIdx.z;
  const int kt0 = static_cast<int>(static_cast<int64_t>(a.k_tiles) * split / a.splits);
  const int nk = static_cast<int>(static_cast<int64_t>(a.k_tiles) * (split + 1) / a.splits) - kt0;
  const int64_t row_bytes = S == Scheme::int4 ? m.cols / 2 : m.cols;
  const int64_t groups = S == Scheme::int4 ? m.cols >> a.group_shift : 0;
  const int tile_groups = S == Scheme::int4 ? (a.group_shift >= 7 ? 1 : kTileK >> a.group_shift) : 0;
  const unsigned char* wbase = static_cast<const unsigned char*>(m.qweight);

  auto load_w = [&](int stage, int kt) {
    unsigned char* ws = smem + stage * L::kStage + L::kX;
    static_assert(L::kRows * kRowChunks % kThreads == 0, "whole weight chunks a thread");
#pragma unroll
    for (int k = 0; k < L::kRows * kRowChunks / kThreads; ++k) {
      const int i = tid + k * kThreads;
      const int r = i / kRowChunks, p = i % kRowChunks;
      const int q = LC == 2 ? p ^ (r & 1) : p;
      const int64_t row = r0 + r, col = static_cast<int64_t>(kt) * kTileK + q * kColsPerChunk;
      const bool ok = row < m.rows && col < m.cols;
      const unsigned char* src =
          ok ? wbase + row * row_bytes + (static_cast<int64_t>(kt) * RB + 16 * q) : wbase;
      cp_async16_or_zero(ws + r * RB + 16 * p, src, ok);
    }
    if constexpr (S == Scheme::int4) {
      unsigned char* ss = smem + stage * L::kStage + L::kX + L::kW;
      if (tid < L::kRows / 8 * tile_groups) {
        const int rb = tid / tile_groups, gl = tid % tile_groups;
        const int64_t row = r0 + 8 * rb;
        const int64_t grp = ((static_cast<int64_t>(kt) * kTileK) >> a.group_shift) + gl;
        const bool ok = row < m.rows && grp < groups;
        const int64_t e = ok ? int4_meta::packed_index(groups, row, grp) : 0;
        cp_async16_or_zero(ss + 16 * tid, m.scales + e, ok);
        if (m.zero_point) cp_async8_or_zero(ss + L::kScales + 8 * tid, m.zeros + e, ok);
      }
    }
  };
  auto load_x = [&](int stage, int kt) {
    unsigned char* xs = smem + stage * L::kStage;
    static_assert(kTileN * (kXRowBytes / 16) % kThreads == 0, "whole x pieces a thread");
#pragma unroll
    for (int k = 0; k < kTileN * (kXRowBytes / 16) / kThreads; ++k) {
      const int i = tid + k * kThreads;
      const int n = i / (kXRowBytes / 16), slot = i % (kXRowBytes / 16);
      const int64_t b = n0 + n, col = static_cast<int64_t>(kt) * kTileK + 8 * x_piece(slot, n);
      const bool ok = b < a.batch && col < m.cols;
      cp_async16_or_zero(xs + n * kXRowBytes + 16 * slot, ok ? a.x + b * m.cols + col : a.x, ok);
    }
  };

  float acc[kRowTiles][NT][4];
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
    for (int n = 0; n < NT; ++n) acc[t][n][0] = acc[t][n][1] = acc[t][n][2] = acc[t][n][3] = 0.f;
  // The warp's sequence tiles that hold a sequence of the batch: a prefix of its NT.
  const int64_t live_base = a.batch - n0 - 8 * wn;  // sequences from the warp's first tile on
  auto live = [&](int n) { return 8 * WN * n < live_base; };

  auto compute = [&](int stage) {
    const unsigned char* xs = smem + stage * L::kStage;
    const unsigned char* ws = xs + L::kX;
    uint4 w[kRowTiles][2][LC];
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int rl = 32 * wm + 16 * t + 8 * h + g;
#pragma unroll
        for (int i = 0; i < LC; ++i) {
          const int p = LC == 2 ? (c * LC + i) ^ (rl & 1) : c;
          w[t][h][i] = *reinterpret_cast<const uint4*>(ws + rl * RB + 16 * p);
        }
      }
    // int4: (q - zero) * scale of each of the lane's rows at its group; 0x64zz is 1024 + zero,
    // 0xd4(16 zero) is -(64 + zero), both exact.
    uint32_t scale2[kRowTiles][2], lo_sub[kRowTiles][2], hi_add[kRowTiles][2];
    if constexpr (S == Scheme::int4) {
      const unsigned char* ss = ws + L::kW;
      const int gl = a.group_shift >= 7 ? 0 : (32 * c) >> a.group_shift;
#pragma unroll
      for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int rl = 32 * wm + 16 * t + 8 * h + g;
          const int e = ((rl >> 3) * tile_groups + gl) * 8 + (rl & 7);
          const uint32_t s = reinterpret_cast<const uint16_t*>(ss)[e];
          const uint32_t z = m.zero_point ? ss[L::kScales + e] : 8u;
          scale2[t][h] = s | (s << 16);
          lo_sub[t][h] = 0x64006400u | z | (z << 16);
          hi_add[t][h] = 0xd400d400u | (z << 4) | (z << 20);
        }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t A[kRowTiles][2][4];  // [row tile][step h][a0..a3]
#pragma unroll
      for (int t = 0; t < kRowTiles; ++t) {
        if constexpr (S == Scheme::int4) {
          __half2 v[2][4];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            int4_pairs(word_of(w[t][h][0], j), bits_h2(lo_sub[t][h]), bits_h2(hi_add[t][h]), v[h]);
#pragma unroll
            for (int k = 0; k < 4; ++k) v[h][k] = __hmul2(v[h][k], bits_h2(scale2[t][h]));
          }
#pragma unroll
          for (int s = 0; s < 2; ++s) {
            A[t][s][0] = h2_bits(v[0][2 * s]);
            A[t][s][1] = h2_bits(v[1][2 * s]);
            A[t][s][2] = h2_bits(v[0][2 * s + 1]);
            A[t][s][3] = h2_bits(v[1][2 * s + 1]);
          }
        } else {
#pragma unroll
          for (int s = 0; s < 2; ++s) {
            // Step (j, s) is word 2 (j % 2) + s of the lane's chunk j / 2.
            byte_pairs<S>(word_of(w[t][0][j / 2], 2 * (j % 2) + s), A[t][s][0], A[t][s][2]);
            byte_pairs<S>(word_of(w[t][1][j / 2], 2 * (j % 2) + s), A[t][s][1], A[t][s][3]);
          }
        }
      }
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        if (!live(n)) continue;
        const int seq = 8 * (wn + WN * n) + g;
        const uint4 xv = *reinterpret_cast<const uint4*>(xs + seq * kXRowBytes + 16 * x_slot(4 * c + j, g));
#pragma unroll
        for (int t = 0; t < kRowTiles; ++t) {
          frag::mma(acc[t][n], A[t][0][0], A[t][0][1], A[t][0][2], A[t][0][3], xv.x, xv.y);
          frag::mma(acc[t][n], A[t][1][0], A[t][1][1], A[t][1][2], A[t][1][3], xv.z, xv.w);
        }
      }
    }
  };

  // The ring: stages - 1 k-tiles in flight ahead of the one being multiplied. The weights of
  // the first ones (constant) are requested before the wait on the kernel before, x after it.
  const int stages = a.stages;
  for (int s = 0; s < stages - 1; ++s)
    if (s < nk) load_w(s, kt0 + s);
  pdl_wait();
  for (int s = 0; s < stages - 1; ++s) {
    if (s < nk) load_x(s, kt0 + s);
    cp_async_commit();  // group s: x of stage s (and, in group 0, the weights of every stage)
  }
  for (int it = 0, stage = 0; it < nk; ++it, stage = stage + 1 == stages ? 0 : stage + 1) {
    // Stage `stage` is here for every thread once at most stages - 2 later groups are pending;
    // after the barrier the stage before it, which the next k-tile refills, is free.
    if (stages >= 4)
      cp_async_wait<2>();
    else if (stages == 3)
      cp_async_wait<1>();
    else
      cp_async_wait<0>();
    __syncthreads();
    const int next = it + stages - 1;
    if (next < nk) {
      const int into = stage == 0 ? stages - 1 : stage - 1;
      load_w(into, kt0 + next);
      load_x(into, kt0 + next);
    }
    cp_async_commit();
    compute(stage);
  }
  cp_async_wait<0>();

  // Element (t, n, i) of the warp: row 16 t + g + 8 (i / 2) of its rows, sequence 2 c + i % 2 of
  // its n-th tile.
  if (a.splits > 1) {
    const int64_t tile = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
    float4* part = reinterpret_cast<float4*>(a.partial);
    auto at = [&](int s, int t, int n) {
      return part + (((tile * a.splits + s) * kRowTiles + t) * NT + n) * kThreads + tid;
    };
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
      for (int n = 0; n < NT; ++n)
        if (live(n)) *at(split, t, n) = make_float4(acc[t][n][0], acc[t][n][1], acc[t][n][2], acc[t][n][3]);
    __threadfence();
    __syncthreads();
    __shared__ bool last;
    if (tid == 0) last = atomicAdd(&a.counters[tile], 1u) == static_cast<unsigned>(a.splits - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        if (!live(n)) continue;
        float4 v = split == 0 ? make_float4(acc[t][n][0], acc[t][n][1], acc[t][n][2], acc[t][n][3])
                              : __ldcg(at(0, t, n));
        for (int s = 1; s < a.splits; ++s) {
          const float4 p = s == split ? make_float4(acc[t][n][0], acc[t][n][1], acc[t][n][2], acc[t][n][3])
                                      : __ldcg(at(s, t, n));
          v.x += p.x, v.y += p.y, v.z += p.z, v.w += p.w;
        }
        acc[t][n][0] = v.x, acc[t][n][1] = v.y, acc[t][n][2] = v.z, acc[t][n][3] = v.w;
      }
    if (tid == 0) a.counters[tile] = 0;  // ready for the next launch
  }
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
    for (int i = 0; i < 4; i += 2) {
      const int64_t row = r0 + 32 * wm + 16 * t + g + 8 * (i / 2);
      if (row >= m.rows) continue;
      float scale = 1.f;
      if constexpr (S == Scheme::int8) scale = __half2float(m.scales[row]);
      if constexpr (S == Scheme::fp8) scale = fp8_scales(m)[row];
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t seq = n0 + 8 * (wn + WN * n) + 2 * c + e;
          if (seq >= a.batch) continue;
          float* y = a.y + seq * m.rows + row;
          const float v = acc[t][n][i + e] * scale;
          *y = a.accumulate ? *y + v : v;
        }
    }
}

using KernelFn = void (*)(QuantArgs);

template <Scheme S>
KernelFn kernel_for(int warps_m) {
  if (warps_m == 4) return &quant_gemm_kernel<S, 4>;
  if (warps_m == 2) return &quant_gemm_kernel<S, 2>;
  fail("quantized GEMM: no kernel with {} row warps (2 or 4)", warps_m);
}

KernelFn kernel_for(Scheme s, int warps_m) {
  switch (s) {
    case Scheme::int8:
      return kernel_for<Scheme::int8>(warps_m);
    case Scheme::int4:
      return kernel_for<Scheme::int4>(warps_m);
    case Scheme::fp8:
      return kernel_for<Scheme::fp8>(warps_m);
    case Scheme::fp16:
      break;
  }
  fail("quantized GEMM: no kernel for {}", to_string(s));
}

// Bytes of one stage of the ring (int8 and fp8 take the same).
int stage_bytes(Scheme s, int warps_m) {
  const bool int4 = s == Scheme::int4;
  if (warps_m == 4) return int4 ? Smem<Scheme::int4, 4>::kStage : Smem<Scheme::int8, 4>::kStage;
  return int4 ? Smem<Scheme::int4, 2>::kStage : Smem<Scheme::int8, 2>::kStage;
}

// Dynamic shared memory a block may have on this device (the kernel's own static bytes, a
// flag, kept aside).
int smem_available() {
  static const int n = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin) - 256;
  return n;
}

// The launch's grid: tiles of 128 sequences (x) and of 32 warps_m rows (y), the columns split
// over z; and the ring's depth.
struct Grid {
  int warps_m = 4, stages = kMaxStages;
  int64_t seq_tiles = 0, row_tiles = 0;
  int k_tiles = 0, splits = 1;
  int64_t tiles() const { return seq_tiles * row_tiles; }
  size_t tile_elements() const { return static_cast<size_t>(32 * warps_m) * kTileN; }
};

// The default split: the one whose blocks fill the SMs (one block an SM) in the fewest waves
// per unit of work, each split beyond the first charged 10% for its partial sums' round trip
// through L2; at least kMinTilesPerSplit k-tiles a split.
int default_splits(int64_t tiles, int k_tiles) {
  const int64_t slots = sm_count();
  int best = 1;
  double best_cost = static_cast<double>((tiles + slots - 1) / slots);
  for (int s = 2; s <= kMaxSplits && k_tiles / s >= kMinTilesPerSplit; ++s) {
    const double waves = static_cast<double>((tiles * s + slots - 1) / slots);
    const double cost = waves / s * (1.0 + 0.1 * (s - 1));
    if (cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}

// The default: 4 row warps where three stages of theirs fit the device's shared memory (the
// H200's 227 KB holds four), else 2; as many stages as fit, at most kMaxStages.
Grid grid_for(Scheme scheme, int64_t rows, int64_t cols, int64_t batch, QuantGemmShape t) {
  Grid g;
  g.warps_m = t.warps_m ? t.warps_m : (3 * stage_bytes(scheme, 4) <= smem_available() ? 4 : 2);
  if (g.warps_m != 2 && g.warps_m != 4) fail("quantized GEMM: {} row warps (2 or 4)", g.warps_m);
  const int fit = std::min(kMaxStages, smem_available() / stage_bytes(scheme, g.warps_m));
  g.stages = t.stages ? std::min(t.stages, fit) : fit;
  if (g.stages < 2)
    fail("quantized GEMM: two stages of {} bytes of shared memory do not fit this GPU's {} a block",
         stage_bytes(scheme, g.warps_m), smem_available());
  g.seq_tiles = (batch + kTileN - 1) / kTileN;
  g.row_tiles = (rows + 32 * g.warps_m - 1) / (32 * g.warps_m);
  g.k_tiles = static_cast<int>((cols + kTileK - 1) / kTileK);
  g.splits = t.splits ? std::clamp(t.splits, 1, std::min(kMaxSplits, g.k_tiles))
                      : default_splits(g.tiles(), g.k_tiles);
  return g;
}

constexpr size_t kCounterBytes = 256;  // alignment of the partials after the counters

size_t counter_bytes(int64_t tiles) {
  return (static_cast<size_t>(tiles) * 4 + kCounterBytes - 1) / kCounterBytes * kCounterBytes;
}

}  // namespace

bool quant_gemm_supports(const DeviceMatrix& w, const char** why) {
  return quant_gemm_takes(shape_of(w), layout_of(w), why);
}

QuantGemmShape quant_gemm_resolved(Scheme scheme, int64_t rows, int64_t cols, int64_t batch,
                                   QuantGemmShape t) {
  const Grid g = grid_for(scheme, rows, cols, batch, t);
  return {g.warps_m, g.splits, g.stages};
}

size_t quant_gemm_workspace_bytes(Scheme scheme, int64_t rows, int64_t cols, int64_t batch,
                                  QuantGemmShape t) {
  const Grid g = grid_for(scheme, rows, cols, batch, t);
  if (g.splits == 1) return 0;
  return counter_bytes(g.tiles()) + 4 * g.tiles() * g.splits * g.tile_elements();
}

void gemm_quant(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                void* workspace, cudaStream_t s, QuantGemmShape t) {
  const char* why = nullptr;
  if (!quant_gemm_supports(w, &why)) fail("quantized GEMM [{}x{}]: {}", w.rows, w.cols, why);
  if (batch < 1) fail("quantized GEMM: batch {} (at least 1)", batch);
  const Grid g = grid_for(w.scheme, w.rows, w.cols, batch, t);
  if (g.row_tiles > 65535 || g.seq_tiles > 65535)
    fail("quantized GEMM [{}x{}] at batch {}: more tiles than a grid holds", w.rows, w.cols, batch);
  if (g.splits > 1 && workspace == nullptr) fail("quantized GEMM: a split launch needs its workspace");
  QuantArgs a;
  a.m = w;
  a.x = x;
  a.y = y;
  a.batch = static_cast<int>(batch);
  a.splits = g.splits;
  a.k_tiles = g.k_tiles;
  a.stages = g.stages;
  while (w.scheme == Scheme::int4 && (1 << a.group_shift) < w.group_size) ++a.group_shift;
  a.accumulate = accumulate;
  a.counters = static_cast<unsigned*>(workspace);
  a.partial =
      g.splits > 1
          ? reinterpret_cast<float*>(static_cast<unsigned char*>(workspace) + counter_bytes(g.tiles()))
          : nullptr;
  const KernelFn k = kernel_for(w.scheme, g.warps_m);
  const int smem = g.stages * stage_bytes(w.scheme, g.warps_m);
  // Above the default 48 KB of shared memory a block: the kernel's limit raised to the most any
  // launch asks (never lowered, so an earlier, larger launch still runs).
  static std::mutex mu;
  static std::map<const void*, int> raised;
  {
    std::lock_guard<std::mutex> lock(mu);
    int& r = raised[reinterpret_cast<const void*>(k)];
    if (smem > r) {
      CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      r = smem;
    }
  }
  launch(k,
         dim3(static_cast<unsigned>(g.seq_tiles), static_cast<unsigned>(g.row_tiles),
              static_cast<unsigned>(g.splits)),
         dim3(kThreads), static_cast<size_t>(smem), s, a);
}

}  // namespace db::cuda
