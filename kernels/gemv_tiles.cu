// The tiles GEMV of the batched step (see gemv_tiles.cuh). Kernels first, the launchers last.
//
// Why: the batch-1 rows GEMV (kernels/gemv.cu) spends an FMA a weight on its one sequence, so
// a second sequence costs it another (the columns GEMV: 1.38x at 2 sequences,
// results/lab/batch.md §22). Here the dequantization and the mmas are the same for 1 to 8
// sequences.
//
// A block of W warps takes RT row tiles (16 RT rows) over all columns, warp w the steps of 128
// columns (two column tiles) w, w + W, ...; each step's loads (RT x 2 tiles x 16 bytes of
// weights a lane, RT x 2 meta words, 2 x 32 bytes of x a sequence tile) are issued one step
// ahead. Per 16-byte word of weights: 4 LOP3 and a shift make the A fragments' (1024 + q,
// 1024 + 16 q) pairs, 2 HSUB2 and 2 HFMA2 take out 1024 + z and 64 + z, exactly (q - z in
// fp16: int4_tiles_layout.h). A step's 8 k-steps accumulate into fp32 accumulators of their
// own, which the step's group scale then adds to the row's sums (4 FFMA a lane and sequence
// tile), so a group of 256 or more columns takes its scale a step, as a group of 128 does; the
// warps' sums meet in shared memory and are added in warp order (deterministic).
//
// int8 (Bits 8, int8_tiles_layout.h) runs the same kernel on tiles of 16 rows x 32 columns: a
// step is two column tiles, 64 columns, the same 1 KiB of weights a row tile and warp in flight;
// a lane's 16 bytes of a tile are two k-steps' A fragments, each register one PRMT under 0x64
// and one HSUB2 of 1152 (the codes are stored biased by 128), and its B fragments one 16-byte
// piece of x a sequence tile. The row scale multiplies each row's total in the epilogue, as the
// columns GEMV does for int8: the mmas accumulate q x in fp32 straight into the row's sums.
//
// fp16 (Bits 16, fp16_tiles_layout.h) runs it on tiles of 16 rows x 16 columns: a step is two
// column tiles, 32 columns, again 1 KiB of weights a row tile; a lane's 16 bytes of a tile are
// one mma's A fragment as they are (no dequantization, no meta, no scale), and one 16-byte piece
// of x a sequence tile is its B fragments for both tiles of the step. x a step is half of int8's
// per weight byte: 512 bytes a sequence tile and warp against RT KiB of weights (int8: 1 KiB).
#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "common.cuh"
#include "decodebench/linear_shapes.h"
#include "fp16_tiles_layout.h"
#include "gemv_tiles.cuh"
#include "int4_tiles_layout.h"
#include "int8_tiles_layout.h"
#include "pdl.cuh"
#include "rows_grid.cuh"
#include "shape_choice.h"

namespace db::cuda {
namespace {

using tiles::kMetaWords;
using tiles::kStepCols;
using tiles::kTileBytes;
using tiles::kTileCols;
using tiles::kTileRows;

struct TilesArgs {
  const uint8_t* w = nullptr;      // the codes: row tiles x column tiles x 512 bytes
  const uint32_t* meta = nullptr;  // int4: row tiles x groups x 16 words
  const __half* x = nullptr;       // [batch, cols]
  float* y = nullptr;              // [batch, rows]
  int64_t rows = 0, cols = 0;
  int batch = 0;                       // at most the instance's sequences (8 NT); the rest read as zero
  int group_shift = 0;                 // int4: log2(group / 128): step i's group is i >> group_shift
  const __half* row_scales = nullptr;  // int8: [rows]
  bool accumulate = false;
};

// A scheme's tiles: Bits 4 (int4_tiles_layout.h), 8 (int8_tiles_layout.h) or 16
// (fp16_tiles_layout.h). A step is two column tiles; a lane's x of a step is `pieces` 16-byte
// pieces a sequence for each of `x_tiles` column tiles (int4, int8: each tile its own; fp16: one
// piece for both).
template <int Bits>
struct Tiles {
  static constexpr int tile_cols = Bits == 4   ? tiles::kTileCols
                                   : Bits == 8 ? tiles8::kTileCols
                                               : tiles16::kTileCols;
  static constexpr int step_cols = 2 * tile_cols;
  static constexpr int pieces = Bits == 4 ? 2 : 1;
  static constexpr int x_tiles = Bits == 16 ? 1 : 2;
  static constexpr int ksteps = Bits == 4 ? 4 : Bits == 8 ? 2 : 1;  // mma k-steps a tile
  // The first column of piece k of lane column c in column tile h of step `step`: int4's lane
  // holds 16 c .. 16 c + 15 of its 64-column tile, int8's 8 c .. 8 c + 7 of its 32, fp16's
  // 8 c .. 8 c + 7 of the step's 32 (both tiles, h 0).
  __device__ __forceinline__ static int64_t x_col(int64_t step, int h, int k, int c) {
    if constexpr (Bits == 4) return step * step_cols + h * tile_cols + 16 * c + 8 * k;
    if constexpr (Bits == 16) return step * step_cols + 8 * c;
    return step * step_cols + h * tile_cols + 8 * c;
  }
};
static_assert(tiles::kTileBytes == tiles8::kTileBytes && tiles::kTileBytes == tiles16::kTileBytes,
              "every scheme's tiles are 512 bytes");
static_assert(tiles16::kTileRows == kTileRows && tiles8::kTileRows == kTileRows, "tiles of 16 rows");

// ------------------------------------------------------------------ the inputs and the outputs

// Sequence b's inputs x[b][col .. col + 7], one 16-byte piece (col a multiple of 8). Every x
// the kernel reads comes through here, after the PDL wait.
__device__ __forceinline__ uint4 x_piece(const TilesArgs& a, int b, int64_t col) {
  return __ldg(reinterpret_cast<const uint4*>(a.x + int64_t{b} * a.cols + col));
}

// Sequence b's finished sum for row `row`: stored, or added to what y holds (accumulate).
// Every output the kernel writes goes through here, once.
__device__ __forceinline__ void store_y(const TilesArgs& a, int b, int64_t row, float v) {
  float* y = a.y + int64_t{b} * a.rows + row;
  *y = a.accumulate ? *y + v : v;
}

// ------------------------------------------------------------------ dequantization

// (a & mask) | 0x64006400: two nibbles under fp16's 1024.
__device__ __forceinline__ uint32_t nibbles_1024(uint32_t a, uint32_t mask) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(a), "r"(mask), "r"(0x64006400u));
  return r;
}

__device__ __forceinline__ uint32_t hsub2_bits(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("sub.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

__device__ __forceinline__ uint32_t hfma2_bits(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

// Word w of a lane's tile load as the A fragment of one mma: q - z of rows g (zlo: 1024 + z
// twice) and g + 8 (zhi: -(64 + z) twice), exactly (int4_tiles_layout.h's nibble order).
__device__ __forceinline__ void dequant(uint32_t w, uint32_t zlo, uint32_t zhi, uint32_t (&a)[4]) {
  constexpr uint32_t kSixteenth = 0x2c002c00u;  // 1/16 twice
  const uint32_t w8 = w >> 8;
  a[0] = hsub2_bits(nibbles_1024(w, 0x000f000fu), zlo);
  a[1] = hfma2_bits(nibbles_1024(w, 0x00f000f0u), kSixteenth, zhi);
  a[2] = hsub2_bits(nibbles_1024(w8, 0x000f000fu), zlo);
  a[3] = hfma2_bits(nibbles_1024(w8, 0x00f000f0u), kSixteenth, zhi);
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// A meta word's zero constant in both halves.
__device__ __forceinline__ uint32_t zero_pair(uint32_t meta) {
  return meta >> 16 | (meta & 0xffff0000u);
}

__device__ __forceinline__ float scale_of(uint32_t meta) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(meta & 0xffffu)));
}

// ------------------------------------------------------------------ the kernel

// A step's weights for a warp's RT row tiles: the lane's 16 bytes of each of the step's two
// column tiles, and (int4) the meta words of its rows g and g + 8.
template <int RT>
struct StepWeights {
  uint4 w[RT][2];
  uint32_t m_lo[RT], m_hi[RT];
};
// A step's x for NT tiles of 8 sequences: the lane's P pieces of 16 bytes of each of H column
// tiles ([sequence tile][column tile][piece]; int4 32 bytes a tile, int8 16, fp16 16 for both).
template <int NT, int H, int P>
struct StepInputs {
  uint4 x[NT][H][P];
};

// Weights and meta are written at load, never by the step's kernels: loaded before the wait.
// A row tile past the matrix (the grid's last block) loads the block's first again.
template <int Bits, int RT>
__device__ __forceinline__ void load_weights(const TilesArgs& a, int64_t rt0, int64_t row_tiles, int64_t step,
                                             int lane, StepWeights<RT>& L) {
  const int g = lane / 4;
  const int64_t col_tiles = a.cols / Tiles<Bits>::tile_cols, groups = (a.cols / kStepCols) >> a.group_shift;
  const int64_t group = step >> a.group_shift;
#pragma unroll
  for (int t = 0; t < RT; ++t) {
    const int64_t rt = rt0 + t < row_tiles ? rt0 + t : rt0;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      L.w[t][h] = ld_stream(
          reinterpret_cast<const uint4*>(a.w + (rt * col_tiles + 2 * step + h) * kTileBytes + lane * 16));
    if constexpr (Bits == 4) {
      const uint32_t* m = a.meta + (rt * groups + group) * kMetaWords;
      L.m_lo[t] = __ldg(m + g);
      L.m_hi[t] = __ldg(m + g + 8);
    }
  }
}

// Lane (g, c) reads x[8 nt + g][16 c .. 16 c + 15] (int4) or [8 c .. 8 c + 7] (int8) of each of
// the step's column tiles, or [8 c .. 8 c + 7] of the step (fp16): its B fragments for the
// tiles' k-steps (int4_tiles_layout.h, int8_tiles_layout.h, fp16_tiles_layout.h). Sequences past
// the batch read as zero.
template <int Bits, int NT>
__device__ __forceinline__ void load_inputs(const TilesArgs& a, int64_t step, int lane,
                                            StepInputs<NT, Tiles<Bits>::x_tiles, Tiles<Bits>::pieces>& L) {
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int seq = nt * 8 + g;
#pragma unroll
    for (int h = 0; h < Tiles<Bits>::x_tiles; ++h)
#pragma unroll
      for (int k = 0; k < Tiles<Bits>::pieces; ++k)
        L.x[nt][h][k] =
            seq < a.batch ? x_piece(a, seq, Tiles<Bits>::x_col(step, h, k, c)) : make_uint4(0, 0, 0, 0);
  }
}

// Word w's bytes `sel` picks (0x4140: 0, 1; 0x4342: 2, 3) as two fp16 codes: under 0x64, the
// fp16 1024 + q + 128, less 1152 (int8_tiles_layout.h), exactly.
__device__ __forceinline__ uint32_t int8_pair(uint32_t w, uint32_t sel) {
  return hsub2_bits(__byte_perm(w, 0x64646464u, sel), 0x64806480u);
}

// k-step s (0, 1) of an int8 tile's 16 bytes as the A fragment: words 2 s (a0..a3) and 2 s + 1
// (a4..a7), rows g in bytes 0, 1 and g + 8 in bytes 2, 3.
__device__ __forceinline__ void dequant8(const uint4& v, int s, uint32_t (&a)[4]) {
  const uint32_t w0 = word(v, 2 * s), w1 = word(v, 2 * s + 1);
  a[0] = int8_pair(w0, 0x4140u);
  a[1] = int8_pair(w0, 0x4342u);
  a[2] = int8_pair(w1, 0x4140u);
  a[3] = int8_pair(w1, 0x4342u);
}

// Bits: the scheme's tiles (4: int4, 8: int8, 16: fp16); RT row tiles a block, NT tiles of 8 sequences (1:
// up to 8, 2: up to 16), W warps; D: the steps of weights a warp has in flight beyond the one it
// multiplies (1: the next; 2 and 4, lab builds only: D times the bytes in flight an SM for
// ~(D - 1) 8 RT more registers).
template <int Bits, int RT, int NT, int W, int D>
__global__ void __launch_bounds__(W* kWarp) gemv_tiles_kernel(TilesArgs a) {
  static_assert(D >= 1 && D <= 4, "one to four steps of weights ahead");
  using T = Tiles<Bits>;
  pdl_trigger();  // the next kernel may launch and issue its own weight loads
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t row_tiles = tiles::row_tiles(a.rows), steps = a.cols / T::step_cols;
  const int64_t rt0 = int64_t{blockIdx.x} * RT;
  float tot[RT][NT][4] = {};
  StepWeights<RT> ring[D];  // ring[k]: the weights of the warp's step k ahead of this one (0: this)
  StepInputs<NT, T::x_tiles, T::pieces> xc;
  // Launched with PDL (pdl.cuh): the first D steps' weights before the wait, x after it.
#pragma unroll
  for (int k = 0; k < D; ++k)
    if (warp + k * W < steps) load_weights<Bits, RT>(a, rt0, row_tiles, warp + k * W, lane, ring[k]);
  pdl_wait();
  if (warp < steps) load_inputs<Bits, NT>(a, warp, lane, xc);
  for (int64_t i = warp; i < steps; i += W) {
    StepWeights<RT> wn;  // step i + D W's weights, step i + W's x (x comes from L2, not HBM)
    StepInputs<NT, T::x_tiles, T::pieces> xn;
    if (i + D * W < steps) load_weights<Bits, RT>(a, rt0, row_tiles, i + D * W, lane, wn);
    if (i + W < steps) load_inputs<Bits, NT>(a, i + W, lane, xn);
    const StepWeights<RT>& wc = ring[0];
    if constexpr (Bits == 16) {  // the lane's words are the A fragment; the mmas into the row's sums
      static_assert(T::ksteps == 1, "an fp16 tile is one k-step");
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int t = 0; t < RT; ++t) {
          const uint32_t frag[4] = {wc.w[t][h].x, wc.w[t][h].y, wc.w[t][h].z, wc.w[t][h].w};
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)  // tile h: halves 4 h .. 4 h + 3 of the lane's 8 columns
            mma16816(tot[t][nt], frag, word(xc.x[nt][0][0], 2 * h), word(xc.x[nt][0][0], 2 * h + 1));
        }
    } else if constexpr (Bits == 8) {  // the mmas straight into the row's sums: the scale is the epilogue's
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int s = 0; s < T::ksteps; ++s)
#pragma unroll
          for (int t = 0; t < RT; ++t) {
            uint32_t frag[4];
            dequant8(wc.w[t][h], s, frag);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)  // k-step s: halves 4 s .. 4 s + 3 of the lane's 8 columns
              mma16816(tot[t][nt], frag, word(xc.x[nt][h][0], 2 * s), word(xc.x[nt][h][0], 2 * s + 1));
          }
    } else {  // int4: each step's sums times its group's scales
      float acc[RT][NT][4] = {};
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int s = 0; s < T::ksteps; ++s)
#pragma unroll
          for (int t = 0; t < RT; ++t) {
            uint32_t frag[4];
            dequant(word(wc.w[t][h], s), zero_pair(wc.m_lo[t]), zero_pair(wc.m_hi[t]), frag);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)  // k-step s: halves 4 s .. 4 s + 3 of the lane's 16 columns
              mma16816(acc[t][nt], frag, word(xc.x[nt][h][s / 2], (2 * s) % 4),
                       word(xc.x[nt][h][s / 2], (2 * s + 1) % 4));
          }
#pragma unroll
      for (int t = 0; t < RT; ++t) {
        const float s_lo = scale_of(wc.m_lo[t]), s_hi = scale_of(wc.m_hi[t]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {  // D's elements 0, 1: row g; 2, 3: row g + 8
          tot[t][nt][0] = fmaf(s_lo, acc[t][nt][0], tot[t][nt][0]);
          tot[t][nt][1] = fmaf(s_lo, acc[t][nt][1], tot[t][nt][1]);
          tot[t][nt][2] = fmaf(s_hi, acc[t][nt][2], tot[t][nt][2]);
          tot[t][nt][3] = fmaf(s_hi, acc[t][nt][3], tot[t][nt][3]);
        }
      }
    }
#pragma unroll
    for (int k = 0; k + 1 < D; ++k) ring[k] = ring[k + 1];
    ring[D - 1] = wn;
    xc = xn;
  }
  // The warps' sums in shared memory, added in warp order: thread idx finishes row tile t, row
  // r and sequence n, held by lane 4 (r % 8) + (n % 8) / 2 as D's element 2 (r / 8) + n % 2.
  __shared__ float red[W][RT][NT][kWarp][4];
#pragma unroll
  for (int t = 0; t < RT; ++t)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) red[warp][t][nt][lane][e] = tot[t][nt][e];
  __syncthreads();
  for (int idx = threadIdx.x; idx < RT * kTileRows * 8 * NT; idx += W * kWarp) {
    const int t = idx / (kTileRows * 8 * NT), r = idx / (8 * NT) % kTileRows, n = idx % (8 * NT);
    const int64_t row = (rt0 + t) * kTileRows + r;
    if (n >= a.batch || row >= a.rows) continue;
    const int nt = n / 8, src = 4 * (r % 8) + (n % 8) / 2, e = (r / 8) * 2 + n % 2;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < W; ++w) sum += red[w][t][nt][src][e];
    if constexpr (Bits == 8) sum *= __half2float(a.row_scales[row]);  // the row scale (int8)
    store_y(a, n, row, sum);
  }
}

// ------------------------------------------------------------------ launcher

// The instantiated shapes, (row tiles, warps), each at NT 1 and 2: the lab bench's. ptxas -v
// (sm_90, nvcc 13): none spills; the registers a thread are in docs/kernels.md. Those more
// steps ahead, (row tiles, warps, D): DB_TILES_AHEAD_SHAPES, and in lab builds (DB_DEV) also
// DB_TILES_LAB_SHAPES for the bench and the gpu tests.
// clang-format off
#define DB_TILES_SHAPES(X) X(1, 4) X(2, 4) X(1, 8) X(2, 8) X(4, 4)
#define DB_TILES_AHEAD_SHAPES(X) X(1, 4, 2) X(2, 4, 2) X(1, 8, 2) X(2, 8, 2)
#define DB_TILES_LAB_SHAPES(X) X(1, 4, 4) X(1, 8, 4) X(2, 8, 4)
// clang-format on

template <int Bits>
const void* kernel_of(int nt, int rt, int warps, int ahead) {
#define DB_TILES(RT_, W_, D_)                                                                \
  if (rt == RT_ && warps == W_ && ahead == D_)                                               \
    return nt == 1 ? reinterpret_cast<const void*>(&gemv_tiles_kernel<Bits, RT_, 1, W_, D_>) \
                   : reinterpret_cast<const void*>(&gemv_tiles_kernel<Bits, RT_, 2, W_, D_>);
#define DB_TILES_1(RT_, W_) DB_TILES(RT_, W_, 1)
  DB_TILES_SHAPES(DB_TILES_1)
  DB_TILES_AHEAD_SHAPES(DB_TILES)
#if defined(DB_DEV)
  DB_TILES_LAB_SHAPES(DB_TILES)
#endif
#undef DB_TILES_1
#undef DB_TILES
  return nullptr;
}

// The one dispatch from the matrix's scheme to the kernel's Bits.
const void* kernel_for(Scheme scheme, int nt, TilesShape s) {
  const void* k = nullptr;
  if (scheme == Scheme::int4)
    k = kernel_of<4>(nt, s.row_tiles, s.warps, s.ahead);
  else if (scheme == Scheme::int8)
    k = kernel_of<8>(nt, s.row_tiles, s.warps, s.ahead);
  else if (scheme == Scheme::fp16)
    k = kernel_of<16>(nt, s.row_tiles, s.warps, s.ahead);
  else
    fail("tiles GEMV: int4, int8 and fp16 only, not {}", to_string(scheme));
  if (!k)
    fail("tiles GEMV: no kernel for {} row tiles x {} warps, {} steps ahead", s.row_tiles, s.warps, s.ahead);
  return k;
}

// The instance's sequence tiles: one mma a k-step up to 8 sequences, two up to 16.
int sequence_tiles(int64_t batch) {
  return batch <= 8 ? 1 : 2;
}

}  // namespace

double tiles_stream_gbps(double kib) {
  static constexpr double kKib[] = {8, 16, 32, 64}, kGbps[] = {2195, 3369, 4290, 4416};
  if (kib <= kKib[0]) return kGbps[0] * kib / kKib[0];
  for (int i = 1; i < 4; ++i)
    if (kib <= kKib[i])
      return kGbps[i - 1] + (kGbps[i] - kGbps[i - 1]) * (kib - kKib[i - 1]) / (kKib[i] - kKib[i - 1]);
  return kGbps[3];
}

double tiles_shape_us(int64_t rows, int64_t cols, TilesShape shape, int occupancy, int sms, int bits) {
  const int64_t blocks = (tiles::row_tiles(rows) + shape.row_tiles - 1) / shape.row_tiles;
  const int64_t per_sm = (blocks + sms - 1) / sms;  // the busiest SM's blocks
  const double block_bytes = static_cast<double>(shape.row_tiles) * kTileRows * cols * bits / 8;
  double us = 0;
  for (int64_t left = per_sm; left > 0; left -= occupancy) {
    const int64_t resident = std::min<int64_t>(left, occupancy);
    const double kib = static_cast<double>(resident) * shape.warps * shape.row_tiles *
                       shape.ahead;                                       // 1 KiB a row tile and step
    us += resident * block_bytes / (tiles_stream_gbps(kib) * 1e3 / sms);  // bytes / (bytes a us an SM)
  }
  return us;
}

bool gemv_tiles_supports(const DeviceMatrix& w, int64_t batch, const char** why) {
  return tiles_gemv_takes(shape_of(w), layout_of(w), batch, why);
}

TilesShape tiles_shape(const DeviceMatrix& w, int64_t batch) {
  // Once a process for a matrix shape and instance (an eager step asks at every launch).
  static std::mutex mu;
  static std::map<std::tuple<Scheme, int64_t, int64_t, int>, TilesShape> chosen;
  const int nt = sequence_tiles(batch);
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(w.scheme, w.rows, w.cols, nt);
  if (auto it = chosen.find(key); it != chosen.end()) return it->second;
  TilesShape best;
  double best_us = std::numeric_limits<double>::infinity();
  const int bits = w.scheme == Scheme::fp16 ? 16 : w.scheme == Scheme::int8 ? 8 : 4;
  for (const TilesShape& s : tiles_kernel_shapes()) {  // the first of equal ones
    if (s.ahead != 1) continue;                        // the lab's
    const int occupancy = blocks_per_sm(kernel_for(w.scheme, nt, s), 0, s.warps * kWarp);
    const double us = tiles_shape_us(w.rows, w.cols, s, occupancy, sm_count(), bits);
    if (us < best_us) best = s, best_us = us;
  }
  chosen.emplace(key, best);
  return best;
}

void gemv_tiles_shaped(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                       TilesShape shape, cudaStream_t s) {
  const char* why = nullptr;
  if (!gemv_tiles_supports(w, batch, &why))
    fail("tiles GEMV [{}x{}] at {} sequences: {}", w.rows, w.cols, batch, why);
  if ((shape.row_tiles == 0) != (shape.warps == 0))
    fail("tiles GEMV: a shape sets both row tiles and warps, or neither");
  const TilesShape sh = shape.row_tiles ? shape : tiles_shape(w, batch);
  const void* kernel = kernel_for(w.scheme, sequence_tiles(batch), sh);
  TilesArgs a;
  a.w = static_cast<const uint8_t*>(w.qweight);
  if (w.scheme == Scheme::int8)
    a.row_scales = w.scales;
  else if (w.scheme == Scheme::int4)
    a.meta = tiles_meta(w);
  a.x = x;
  a.y = y;
  a.rows = w.rows;
  a.cols = w.cols;
  a.batch = static_cast<int>(batch);
  a.accumulate = accumulate;
  if (w.scheme == Scheme::int4)
    while ((kStepCols << a.group_shift) < w.group_size) ++a.group_shift;
  void* args[] = {&a};
  const int64_t blocks = (tiles::row_tiles(w.rows) + sh.row_tiles - 1) / sh.row_tiles;
  launch_raw(kernel, dim3(static_cast<unsigned>(blocks)), dim3(sh.warps * kWarp), 0, s, args);
}

void gemv_tiles(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                cudaStream_t s) {
  gemv_tiles_shaped(w, x, batch, y, accumulate, {}, s);
}

TilesTiming tune_tiles(const std::vector<const DeviceMatrix*>& ms, const __half* x, int64_t batch, float* y,
                       cudaStream_t s) {
  if (ms.empty()) fail("tune_tiles: no matrices");
  auto time_us = [&](const TilesShape& t) {
    return median_pass_us(
        [&] {
          for (const DeviceMatrix* m : ms) gemv_tiles_shaped(*m, x, batch, y, false, t, s);
        },
        ms.size(), s);
  };
  std::vector<TilesShape> shapes{tiles_shape(*ms.front(), batch)};
  for (const TilesShape& t : tiles_kernel_shapes())
    if (t.row_tiles != shapes[0].row_tiles || t.warps != shapes[0].warps || t.ahead != shapes[0].ahead)
      shapes.push_back(t);
  return timing_of<TilesTiming>(shapes, choose_shape(shapes, time_us));
}

std::vector<TilesShape> tiles_kernel_shapes() {
  std::vector<TilesShape> v;
#define DB_TILES(RT_, W_) v.push_back({RT_, W_, 1});
  DB_TILES_SHAPES(DB_TILES)
#undef DB_TILES
#define DB_TILES(RT_, W_, D_) v.push_back({RT_, W_, D_});
  DB_TILES_AHEAD_SHAPES(DB_TILES)
#undef DB_TILES
  return v;
}

std::vector<TilesShape> tiles_lab_shapes() {
  std::vector<TilesShape> v;
#if defined(DB_DEV)
#define DB_TILES(RT_, W_, D_) v.push_back({RT_, W_, D_});
  DB_TILES_LAB_SHAPES(DB_TILES)
#undef DB_TILES
#endif
  return v;
}
#undef DB_TILES_LAB_SHAPES
#undef DB_TILES_AHEAD_SHAPES
#undef DB_TILES_SHAPES

}  // namespace db::cuda
