// GEMV kernels for batch=1 decode. Kernels first, the launchers last.
//
// The fast kernel (the rows kernel, below) keeps the input vector x in registers: each
// thread owns the same 16-byte weight chunks of every row, loads its slice of x once
// (RMSNorm applied on the fly, with the sum of squares its producer left) and walks a
// balanced range of rows a few at a time. The naive kernel (the slow path users select)
// stages x in shared memory and dequantizes one weight at a time.
#include <algorithm>
#include <type_traits>
#include <utility>

#include "common.cuh"
#include "decodebench/int4_frag.h"
#include "decodebench/quant.h"
#include "gemv.cuh"
#include "int4_dot.cuh"
#include "int4_meta.h"
#include "pdl.cuh"
#include "rows_grid.cuh"

namespace db::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarp;

// ------------------------------------------------------------------ staging and epilogues

__device__ void stage_x(const GemvInput& in, int64_t cols, uint4* xs, float* red) {
  const int pieces = static_cast<int>((cols + 7) / 8);
  const bool vec = cols % 8 == 0;
  float inv = 1.f;
  if (in.resid && in.sumsq) {
    inv = inv_rms(in.sumsq, cols, in.eps);
  } else if (in.resid) {
    float ss = 0.f;
    if (vec) {
      const float4* r4 = reinterpret_cast<const float4*>(in.resid);
      for (int i = threadIdx.x; i < cols / 4; i += blockDim.x) {
        const float4 v = r4[i];
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      }
    } else {
      for (int i = threadIdx.x; i < cols; i += blockDim.x) ss += in.resid[i] * in.resid[i];
    }
    ss = block_sum(ss, red);
    inv = rsqrtf(ss / static_cast<float>(cols) + in.eps);
  }
  for (int p = threadIdx.x; p < pieces; p += blockDim.x) {
    if (!in.resid && vec) {
      xs[swizzle_piece(p)] = reinterpret_cast<const uint4*>(in.x)[p];
      continue;
    }
    __align__(16) __half h[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int64_t c = static_cast<int64_t>(p) * 8 + k;
      float v = 0.f;
      if (c < cols) {
        const float r = in.resid_h ? __half2float(in.resid_h[c]) : (in.resid ? in.resid[c] : 0.f);
        v = in.resid ? r * inv * __half2float(in.norm_w[c]) : __half2float(in.x[c]);
      }
      h[k] = __float2half_rn(v);
    }
    xs[swizzle_piece(p)] = *reinterpret_cast<const uint4*>(h);
  }
  __syncthreads();
}

__device__ __forceinline__ float x_at(const uint4* xs, int64_t c) {
  const __half* piece = reinterpret_cast<const __half*>(&xs[swizzle_piece(static_cast<int>(c / 8))]);
  return __half2float(piece[c % 8]);
}

// Lane 0 of a warp finishes a task of rows r0 and r0 + 1 (r1_valid false on an odd tail).
// `ssq` collects the squares of the residual stream's new values when out.sumsq is set.
__device__ __forceinline__ void finish_task(const GemvOutput& out, int64_t r0, bool r1_valid, float v0,
                                            float v1, unsigned long long& best, float& ssq) {
  if (out.addend) {
    v0 += out.addend[r0];
    if (r1_valid) v1 += out.addend[r0 + 1];
  }
  switch (out.epilogue) {
    case Epilogue::store:
      out.y[r0] = v0;
      if (r1_valid) out.y[r0 + 1] = v1;
      break;
    case Epilogue::residual: {
      const float n0 = out.resid[r0] + v0;
      out.resid[r0] = n0;
      if (out.resid_h) out.resid_h[r0] = __float2half_rn(n0);
      ssq += n0 * n0;
      if (r1_valid) {
        const float n1 = out.resid[r0 + 1] + v1;
        out.resid[r0 + 1] = n1;
        if (out.resid_h) out.resid_h[r0 + 1] = __float2half_rn(n1);
        ssq += n1 * n1;
      }
      break;
    }
    case Epilogue::silu_mul:  // rows come in (gate, up) pairs; the launcher checks rows is even
      out.act[r0 / 2] = __float2half_rn(v0 / (1.f + expf(-v0)) * v1);
      break;
    case Epilogue::logits:
      out.y[r0] = v0;
      best = max(best, argmax_key(v0, static_cast<uint32_t>(r0)));
      if (r1_valid) {
        out.y[r0 + 1] = v1;
        best = max(best, argmax_key(v1, static_cast<uint32_t>(r0 + 1)));
      }
      break;
  }
}

// One atomic per block for the argmax (per-row atomics on one address would serialize) and
// one for the norm statistics. Lane 0 of each warp holds `best` and `ssq`.
__device__ void finish_block(const GemvOutput& out, unsigned long long best, float ssq) {
  __shared__ float block_ssq[kWarpsPerBlock];
  const bool stats = out.epilogue == Epilogue::residual && out.sumsq;
  if (stats) {
    if (threadIdx.x % kWarp == 0) block_ssq[threadIdx.x / kWarp] = ssq;
    __syncthreads();
    if (threadIdx.x == 0) {
      float t = 0.f;
      for (int i = 0; i < kWarpsPerBlock; ++i) t += block_ssq[i];  // a fixed order: deterministic
      add_sumsq(out.sumsq, t);
    }
  }
  if (out.epilogue != Epilogue::logits) return;
  __shared__ unsigned long long block_best[kWarpsPerBlock];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) block_best[warp] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long b = 0;
    for (int i = 0; i < kWarpsPerBlock; ++i) b = max(b, block_best[i]);
    atomicMax(out.argmax_key, b);
  }
}

// ------------------------------------------------------------------ fast dot products
// Each returns the contribution of one 16-byte weight chunk against the matching x, given
// the chunk's scale (and zero point) that were loaded with it.

// Per-chunk dequantization parameters, fetched in the same round as the weights (int8's; int4
// fetches a group's at once, GroupMeta below).
// Each field is a whole register that its load writes directly: as a {uint16_t, uint8_t}
// pair, ptxas packed the zero point into the scale's register with a PRMT right after the
// loads were issued, and that PRMT waited for the zero point to arrive, a full memory round
// trip before the warp could go on to the previous group's reduction (ncu: the int4 kernel's
// largest stall).
struct Meta {
  uint32_t scale;  // fp16 bits
  uint32_t zero;
};

// ChunkDot<S>: the rows kernel's dot of one 16-byte chunk of scheme S's weights (kCols of
// them) against x.
template <Scheme S>
struct ChunkDot;

template <>
struct ChunkDot<Scheme::fp16> {
  static constexpr int kCols = weights_per_chunk(Scheme::fp16);
  __device__ static float dot_x(uint4 w, const uint4 (&xv)[1], Meta) { return dot_x(w, xv[0]); }
  __device__ static float dot_x(uint4 w, uint4 x) {
    __half2 acc = __hmul2(bits_h2(w.x), bits_h2(x.x));
    acc = __hfma2(bits_h2(w.y), bits_h2(x.y), acc);
    acc = __hfma2(bits_h2(w.z), bits_h2(x.z), acc);
    acc = __hfma2(bits_h2(w.w), bits_h2(x.w), acc);
    return __low2float(acc) + __high2float(acc);
  }
};

template <>
struct ChunkDot<Scheme::int8> {
  static constexpr int kCols = weights_per_chunk(Scheme::int8);
  // int8 -> fp16 without a conversion instruction (common.cuh).
  __device__ static __half2 pair(uint32_t u, uint32_t selector) { return int8x2_to_half2(u, selector); }
  __device__ static float dot_x(uint4 w, const uint4 (&xv)[2], Meta mt) {
    const uint32_t x[8] = {xv[0].x, xv[0].y, xv[0].z, xv[0].w, xv[1].x, xv[1].y, xv[1].z, xv[1].w};
    return dot_x(w, x, mt);
  }
  __device__ static float dot_x(uint4 w, const uint32_t (&x)[8], Meta mt) {
    const uint32_t u[4] = {w.x ^ 0x80808080u, w.y ^ 0x80808080u, w.z ^ 0x80808080u, w.w ^ 0x80808080u};
    __half2 acc0 = __float2half2_rn(0.f), acc1 = acc0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      acc0 = __hfma2(pair(u[j], 0x4140u), bits_h2(x[2 * j]), acc0);
      acc1 = __hfma2(pair(u[j], 0x4342u), bits_h2(x[2 * j + 1]), acc1);
    }
    const __half2 acc = __hadd2(acc0, acc1);
    return (__low2float(acc) + __high2float(acc)) *
           __half2float(__ushort_as_half(static_cast<uint16_t>(mt.scale)));
  }
};

template <>
struct ChunkDot<Scheme::fp8> {
  static constexpr int kCols = weights_per_chunk(Scheme::fp8);
  // E4M3 pairs -> half2 by the hardware conversion, times 2^-8 (exact: the smallest value,
  // 2^-9, becomes 2^-17, an fp16 subnormal) so that the half2 sums have the headroom of
  // values below 1.75 (448 unscaled would overflow fp16 at a few hundred times x); the
  // float sum takes the 2^8 back with the row scale (mt.scale holds its float bits).
  __device__ static __half2 pair(uint32_t two) {
    return __hmul2(fp8x2_to_half2(two), bits_h2(0x1c001c00u));  // 2^-8, 2^-8
  }
  __device__ static float dot_x(uint4 w, const uint4 (&xv)[2], Meta mt) {
    const uint32_t x[8] = {xv[0].x, xv[0].y, xv[0].z, xv[0].w, xv[1].x, xv[1].y, xv[1].z, xv[1].w};
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
    __half2 acc0 = __float2half2_rn(0.f), acc1 = acc0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      acc0 = __hfma2(pair(u[j]), bits_h2(x[2 * j]), acc0);
      acc1 = __hfma2(pair(u[j] >> 16), bits_h2(x[2 * j + 1]), acc1);
    }
    const __half2 acc = __hadd2(acc0, acc1);
    return (__low2float(acc) + __high2float(acc)) * (__uint_as_float(mt.scale) * 256.f);
  }
};

template <>
struct ChunkDot<Scheme::int4> {
  static constexpr int kCols = weights_per_chunk(Scheme::int4);
  // The chunk's sum before its group scale (int4_dot.cuh); the scales and zero points are in
  // the packed layout (kernels/int4_meta.h) and the scale multiplies the sum once, in fp32.
  __device__ static float dot_q(uint4 w, const uint4 (&xv)[4], uint32_t zeros, int byte) {
    return int4_dot_q(w, xv, zeros, byte);
  }
};

// ------------------------------------------------------------------ the rows kernel
// The fast kernel for every scheme. x lives in registers: thread t of a block owns the
// 16-byte weight chunks t, t + T, ... (Chunks of them) of every row, so it loads its slice of x
// once (RMSNorm applied on the fly from the producer's statistics when x is the residual
// stream) and keeps it for all the rows of the block. Nothing is staged through shared
// memory and no block re-reads the whole of x: the warp kernel's prologue (sum resid, sync,
// stage x, sync) cost every block a few microseconds in which only its first weight loads
// were in flight. A block walks a contiguous, balanced range of rows, Rows at a time: Rows x Chunks
// weight loads per thread issued together, the next group's issued before this group's
// reduction; the reduction is a transposing warp shuffle (Rows rows in Rows - 1 + 5 - log2 Rows
// shuffles instead of 5 Rows) and one shared-memory exchange across warps per group.
//
// The template parameters: Chunks, the 16-byte weight chunks a thread owns in each row; Rows,
// the rows of a group; Pieces, the 16-byte pieces of fp16 x that one chunk's columns take
// (fp16 1, int8 2, int4 4); Fragments, int4 in the tensor-core dot's fragment layout.
//
// Threads per block, at most: 512 leaves 128 registers a thread, no spills at 16 weight loads
// in flight. Rows too long for one block take more chunks per thread (rows_shape).
constexpr int kRowsMaxThreads = 512;

// int4 at up to four pieces of x a thread (its default shapes) loads its slice at once
// (load_x_slice), and its pieces of norm_w, a weight, before the wait on the previous kernel,
// so that only the residual stream and its statistics are read after it (8b-int4 1.776 ->
// 1.769 ms). The chunks a thread loads that way; 0: piece by piece.
template <Scheme S, int Chunks, int Pieces>
constexpr int kAtOnce = S == Scheme::int4&& Chunks* Pieces <= 4 ? Chunks : 0;

template <Scheme S, int Chunks, int Pieces>
__device__ __forceinline__ void load_norm_w(const GemvInput& in, int row_chunks,
                                            uint4 (&nw)[kAtOnce<S, Chunks, Pieces> ? Chunks : 1][Pieces]) {
  if (!in.resid) return;
#pragma unroll
  for (int k = 0; k < kAtOnce<S, Chunks, Pieces>; ++k) {
    const int c = min(static_cast<int>(threadIdx.x) + k * static_cast<int>(blockDim.x), row_chunks - 1);
#pragma unroll
    for (int j = 0; j < Pieces; ++j)
      nw[k][j] = __ldg(reinterpret_cast<const uint4*>(in.norm_w) + static_cast<int64_t>(c) * Pieces + j);
  }
}

// This thread's slice of x: Pieces 16-byte pieces of fp16 for each chunk it owns, zero past the last
// chunk. From the residual stream it is normalized exactly as stage_x does, with the norm_w
// pieces load_norm_w fetched where kAtOnce.
template <Scheme S, int Chunks, int Pieces>
__device__ __forceinline__ void load_x_slice(
    const GemvInput& in, int64_t cols, int row_chunks, uint4 (&xv)[Chunks][Pieces], float* red,
    const uint4 (&nw)[kAtOnce<S, Chunks, Pieces> ? Chunks : 1][Pieces]) {
  const int T = blockDim.x;
  if (!in.resid) {
#pragma unroll
    for (int k = 0; k < Chunks; ++k) {
      const int c = threadIdx.x + k * T;
#pragma unroll
      for (int j = 0; j < Pieces; ++j)
        xv[k][j] = c < row_chunks ? __ldg(reinterpret_cast<const uint4*>(in.x) + c * Pieces + j)
                                  : make_uint4(0, 0, 0, 0);
    }
    return;
  }
  // int4 at up to four pieces a thread (its default shapes): all the pieces' loads go out
  // before the statistics are read and before any piece is converted. Piece by piece, the
  // conversion of one piece waits for its loads before the next piece's are issued: four
  // round trips in a row. int4's kernels already use 128 registers for their
  // weights, so this costs them none; int8's and fp16's would grow (fewer blocks per SM) and
  // keep the piece-by-piece order.
  constexpr int kAll = kAtOnce<S, Chunks, Pieces>;
  ResidPiece raw[kAll ? kAll : 1][Pieces];
#pragma unroll
  for (int k = 0; k < kAll; ++k) {
    // Past the end: a real piece, zeroed below.
    const int c = min(static_cast<int>(threadIdx.x) + k * T, row_chunks - 1);
#pragma unroll
    for (int j = 0; j < Pieces; ++j) {
      const int64_t p = static_cast<int64_t>(c) * Pieces + j;
      raw[k][j] =
          in.resid_h ? load_resid_piece(in.resid_h, nw[k][j], p) : load_resid_piece(in.resid, nw[k][j], p);
    }
  }
  float inv;
  if (in.sumsq) {
    inv = inv_rms(in.sumsq, cols, in.eps);
  } else {  // no statistics: the whole block sums the residual stream (cols % 8 == 0 here)
    float ss = 0.f;
    const float4* r4 = reinterpret_cast<const float4*>(in.resid);
    for (int i = threadIdx.x; i < cols / 4; i += T) {
      const float4 v = r4[i];
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    inv = rsqrtf(block_sum(ss, red) / static_cast<float>(cols) + in.eps);
  }
#pragma unroll
  for (int k = 0; k < Chunks; ++k) {
    const int c = threadIdx.x + k * T;
#pragma unroll
    for (int j = 0; j < Pieces; ++j) {
      if (c >= row_chunks) {
        xv[k][j] = make_uint4(0, 0, 0, 0);
      } else if constexpr (kAll > 0) {
        xv[k][j] = normalize_piece(raw[k][j], inv, in.resid_h != nullptr);
      } else {
        xv[k][j] =
            normalized_piece(in.resid, in.resid_h, in.norm_w, static_cast<int64_t>(c) * Pieces + j, inv);
      }
    }
  }
}

template <Scheme S, int Chunks, int Rows, bool Fragments = false>
__global__ void __launch_bounds__(kRowsMaxThreads)
    gemv_rows_kernel(DeviceMatrix m, GemvInput in, GemvOutput out, int group_shift) {
  static_assert(Rows >= 2 && Rows % 2 == 0 && Rows <= kWarp, "rows are finished in pairs");
  pdl_trigger();  // the next kernel may launch and issue its own weight loads
  using Dot = ChunkDot<S>;
  constexpr int kPieces = Dot::kCols / 8;  // 16-byte pieces of x per chunk
  __shared__ float part[2][kRowsMaxThreads / kWarp][Rows];
  __shared__ float red[kWarp];
  const int T = blockDim.x, warps = T / kWarp;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int C = static_cast<int>(m.cols / Dot::kCols);
  const int64_t groups = (m.rows + Rows - 1) / Rows;
  int64_t g = groups * blockIdx.x / gridDim.x;
  const int64_t g_end = groups * (blockIdx.x + 1) / gridDim.x;
  const uint4* base = static_cast<const uint4*>(m.qweight);

  // Per-thread constants of the loads, so that a group costs one multiply and then a short
  // offset per row (64-bit index arithmetic per load was a third of the int4 kernel's
  // instructions). A thread past the last chunk loads the last chunk again (x is zero there
  // and its dot is skipped), so the loads need no branch.
  const int G = S == Scheme::int4 ? static_cast<int>(m.cols >> (group_shift + 5)) : 1;  // meta per row
  int col[Chunks], gcol[Chunks];
  bool live[Chunks];
#pragma unroll
  for (int k = 0; k < Chunks; ++k) {
    live[k] = threadIdx.x + k * T < C;
    col[k] = min(static_cast<int>(threadIdx.x) + k * T, C - 1);
    gcol[k] = S == Scheme::int4 ? col[k] >> group_shift : 0;
    // The fragment layout: the lane's segment of its warp's span is its group.
    if constexpr (Fragments)
      gcol[k] = col[k] / kWarp * (int4_frag::kSpanCols / int4_frag::kSegmentCols) + lane / 4;
  }
  const uint16_t* scales = reinterpret_cast<const uint16_t*>(m.scales);
  // Every index into w and mt must be a compile-time constant once unrolled: an array
  // indexed at run time lives in local memory, not in registers.
  uint4 w[Rows][Chunks];
  constexpr bool kRowScale = S == Scheme::int8 || S == Scheme::fp8;
  Meta mt[kRowScale ? Rows : 1][Chunks];  // int8, fp8: each row's scale
  GroupMeta<Rows> gm[S == Scheme::int4 ? Chunks : 1];
  auto load = [&](int64_t group) {
    const int64_t row0 = group * Rows;
    const int last = (m.rows - row0 < Rows ? static_cast<int>(m.rows - row0) : Rows) -
                     1;  // a tail group repeats its last row
    const uint4* wrow = base + row0 * C;
    const uint16_t* srow = scales + row0;  // int8: a scale a row
#pragma unroll
    for (int r = 0; r < Rows; ++r) {
      const int rr = min(r, last);
#pragma unroll
      for (int k = 0; k < Chunks; ++k) {
        w[r][k] = ld_stream(wrow + rr * C + col[k]);
        if constexpr (S == Scheme::int8) mt[r][k] = {__ldg(srow + rr), 0};
        if constexpr (S == Scheme::fp8) mt[r][k] = {__float_as_uint(__ldg(fp8_scales(m) + row0 + rr)), 0};
      }
    }
    if constexpr (S == Scheme::int4) {
#pragma unroll
      for (int k = 0; k < Chunks; ++k) load_group_meta<Rows>(gm[k], m, G, row0, gcol[k]);
    }
  };
  // Launched with PDL (pdl.cuh): the weights are constant, so their first loads are issued
  // while the previous kernel is still finishing, and so are int4's norm_w pieces; x and
  // everything written come after the wait.
  if (g < g_end) load(g);
  uint4 nw[kAtOnce<S, Chunks, kPieces> ? Chunks : 1][kPieces];
  load_norm_w<S, Chunks, kPieces>(in, C, nw);
  pdl_wait();
  uint4 xv[Chunks][kPieces];
  load_x_slice<S, Chunks, kPieces>(in, m.cols, C, xv, red, nw);
  // The fragment layout: each warp hands its coalesced x slice to its lanes' B registers
  // through its own stage of shared memory (loading x there directly, 16 scattered 4-byte
  // loads a lane, makes the O and down GEMVs slower).
  frag::XFrag xf[Fragments ? Chunks : 1];
  if constexpr (Fragments) {
    extern __shared__ __align__(16) unsigned char frag_stage[];
#pragma unroll
    for (int k = 0; k < Chunks; ++k)
      frag::stage_b(xf[k], xv[k], frag_stage + (warp * Chunks + k) * frag::kWarpStage, lane);
  }

  unsigned long long best = 0;
  float ssq = 0.f;
  // Once a group's dots are done, its registers take the next group's loads, in flight
  // during this group's reduction. part[buf] alternates: it is rewritten two groups later,
  // after the next barrier.
  for (int buf = 0; g < g_end; ++g, buf ^= 1) {
    float acc[Rows];
    if constexpr (Fragments) {
#pragma unroll
      for (int r = 0; r < Rows; ++r) acc[r] = 0.f;
#pragma unroll
      for (int k = 0; k < Chunks; ++k) frag::dot_rows<Rows, Chunks>(acc, w, k, xf[k], gm[k], lane, live[k]);
    } else {
#pragma unroll
      for (int r = 0; r < Rows; ++r) {
        acc[r] = 0.f;
#pragma unroll
        for (int k = 0; k < Chunks; ++k) {
          // A select, not a branch: a branch cost three instructions per row and chunk. A
          // thread past the last chunk reloaded a real chunk (finite) against zero x.
          if constexpr (S == Scheme::int4) {
            const __half2 sc = bits_h2(gm[k].s[r / 2]);
            const uint32_t z = gm[k].z[r / 4];
            // The scale multiplies into the row's sum in one fma (zero past the last chunk).
            const float scale = r % 2 ? __high2float(sc) : __low2float(sc);
            acc[r] = fmaf(Dot::dot_q(w[r][k], xv[k], z, r % 4), live[k] ? scale : 0.f, acc[r]);
          } else {
            const float d = Dot::dot_x(w[r][k], xv[k], mt[r][k]);
            acc[r] += live[k] ? d : 0.f;
          }
        }
      }
    }
    if (g + 1 < g_end) load(g + 1);
    const float v = reduce_rows<Rows>(acc, lane);
    if (lane % (kWarp / Rows) == 0) part[buf][warp][lane_row<Rows>(lane)] = v;
    __syncthreads();
    if (threadIdx.x < Rows / 2) {  // thread i finishes rows 2i and 2i + 1 (a gate/up pair for silu_mul)
      const int64_t r = g * Rows + 2 * threadIdx.x;
      if (r < m.rows) {
        float v0 = 0.f, v1 = 0.f;
        for (int i = 0; i < warps; ++i) {
          v0 += part[buf][i][2 * threadIdx.x];
          v1 += part[buf][i][2 * threadIdx.x + 1];
        }
        finish_task(out, r, r + 1 < m.rows, v0, v1, best, ssq);
      }
    }
  }
  if (warp == 0) {  // only threads of warp 0 finished rows
    if (out.epilogue == Epilogue::logits) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
      if (lane == 0) atomicMax(out.argmax_key, best);
    }
    if (out.epilogue == Epilogue::residual && out.sumsq) {
      ssq = warp_sum(ssq);
      if (lane == 0) add_sumsq(out.sumsq, ssq);
    }
  }
}

// ------------------------------------------------------------------ naive (the slow path)

// One weight at a time from the canonical layout: a byte load, a shift and mask, an
// int->float conversion, a scale load, an fp32 multiply-add. What a kernel that "unpacks
// less efficiently" does. fp16 (--kernel auto's fallback only) is an instantiation of its
// own: a third run-time case per weight makes the int8 kernel 4x and the int4 one 1.6x
// slower (8b-int8.naive 25.7 ms a step against 6.35), and the int8/int4 kernel stays the one
// the committed matrix timed. fp8 is one of its own for the same reason; its conversion is
// CUDA's (one instruction from sm_89 on, software below), so it runs on any GPU.
enum class NaiveWeights { quantized, fp16, fp8 };

template <NaiveWeights K>
__device__ __forceinline__ float naive_weight(const DeviceMatrix& m, int64_t r, int64_t c) {
  if constexpr (K == NaiveWeights::fp16) {
    return __half2float(static_cast<const __half*>(m.qweight)[r * m.cols + c]);
  } else if constexpr (K == NaiveWeights::fp8) {
    const uint8_t q = static_cast<const uint8_t*>(m.qweight)[r * m.cols + c];
    return __low2float(fp8x2_to_half2(q)) * fp8_scales(m)[r];
  } else {
    if (m.scheme == Scheme::int8) {
      const int8_t q = static_cast<const int8_t*>(m.qweight)[r * m.cols + c];
      return static_cast<float>(q) * __half2float(m.scales[r]);
    }
    const uint8_t byte = static_cast<const uint8_t*>(m.qweight)[(r * m.cols + c) / 2];
    const int q = (c & 1) ? (byte >> 4) : (byte & 0xf);
    const int64_t g = r * (m.cols / m.group_size) + c / m.group_size;
    const int zero = m.zero_point ? m.zeros[g] : 8;
    return static_cast<float>(q - zero) * __half2float(m.scales[g]);
  }
}

template <NaiveWeights K>
__global__ void __launch_bounds__(kThreads) gemv_naive_kernel(DeviceMatrix m, GemvInput in, GemvOutput out) {
  extern __shared__ uint4 xs[];
  __shared__ float red[kWarp];
  stage_x(in, m.cols, xs, red);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t tasks = (m.rows + 1) / 2;
  unsigned long long best = 0;
  float ssq = 0.f;
  for (int64_t task = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp; task < tasks;
       task += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const int64_t r0 = 2 * task;
    const bool r1_valid = r0 + 1 < m.rows;
    float a0 = 0.f, a1 = 0.f;
    for (int64_t c = lane; c < m.cols; c += kWarp) {
      const float x = x_at(xs, c);
      a0 += naive_weight<K>(m, r0, c) * x;
      if (r1_valid) a1 += naive_weight<K>(m, r0 + 1, c) * x;
    }
    a0 = warp_sum(a0);
    a1 = warp_sum(a1);
    if (lane == 0) finish_task(out, r0, r1_valid, a0, a1, best, ssq);
  }
  finish_block(out, best, ssq);
}

// ------------------------------------------------------------------ launcher

template <int N>
using Int = std::integral_constant<int, N>;

// Instantiated where the weight loads in flight, Rows x Chunks, are at most 16 (more spills
// registers).
template <Scheme S, int Chunks>
const void* rows_kernel_r(int rows) {
  constexpr int kLoads = 16;
  if constexpr (2 * Chunks <= kLoads)
    if (rows == 2) return reinterpret_cast<const void*>(&gemv_rows_kernel<S, Chunks, 2>);
  if constexpr (4 * Chunks <= kLoads)
    if (rows == 4) return reinterpret_cast<const void*>(&gemv_rows_kernel<S, Chunks, 4>);
  if constexpr (8 * Chunks <= kLoads)
    if (rows == 8) return reinterpret_cast<const void*>(&gemv_rows_kernel<S, Chunks, 8>);
  fail("gemv: no rows kernel for {} rows per group x {} chunks per thread", rows, Chunks);
}

// The fragment layout's instances: the launcher's shapes only.
const void* frag_kernel(int kpt, int rows) {
  constexpr Scheme S = Scheme::int4;
  if (kpt == 1 && rows == 8) return reinterpret_cast<const void*>(&gemv_rows_kernel<S, 1, 8, true>);
  if (kpt == 1 && rows == 4) return reinterpret_cast<const void*>(&gemv_rows_kernel<S, 1, 4, true>);
  if (kpt == 2 && rows == 4) return reinterpret_cast<const void*>(&gemv_rows_kernel<S, 2, 4, true>);
  fail("gemv: no fragment-layout kernel for {} rows per group x {} chunks per thread", rows, kpt);
}

template <Scheme S>
const void* rows_kernel(int kpt, int rows) {
  switch (kpt) {
    case 1:
      return rows_kernel_r<S, 1>(rows);
    case 2:
      return rows_kernel_r<S, 2>(rows);
    case 4:
      return rows_kernel_r<S, 4>(rows);
    case 8:
      return rows_kernel_r<S, 8>(rows);
  }
  fail("gemv: {} chunks per thread is not one of 1, 2, 4, 8", kpt);
}

// The rows kernel for a matrix at `chunks` chunks a thread and `rows` rows a group.
const void* rows_kernel_for(const DeviceMatrix& m, int chunks, int rows) {
  if (m.int4_frag) return frag_kernel(chunks, rows);
  switch (m.scheme) {
    case Scheme::fp16:
      return rows_kernel<Scheme::fp16>(chunks, rows);
    case Scheme::int8:
      return rows_kernel<Scheme::int8>(chunks, rows);
    case Scheme::int4:
      return rows_kernel<Scheme::int4>(chunks, rows);
    case Scheme::fp8:
      return rows_kernel<Scheme::fp8>(chunks, rows);
  }
  fail("gemv: unknown scheme");
}

// The fragment kernel's x stages: one per warp and chunk set.
size_t rows_smem(const DeviceMatrix& m, int threads, int chunks) {
  return m.int4_frag ? size_t{frag::kWarpStage} * (threads / kWarp) * chunks : 0;
}

// Chunks a thread for a shape's `chunks`: doubled until a row fits one block (kRowsMaxThreads).
int fitted_chunks(const DeviceMatrix& m, int chunks) {
  while (threads_for(m, chunks) > kRowsMaxThreads) {
    if (chunks >= 8) fail("gemv: {} columns is too many for one block", m.cols);
    chunks *= 2;  // long rows: more chunks per thread
  }
  return chunks;
}

}  // namespace

// Defaults: fp16 4 chunks x 2 rows and int4 1 x 8 (8 weight loads of 16 bytes in flight per
// thread, 64 bytes of x in registers); int8 1 x 4, twice the threads of 2 x 4 with half the
// loads each, the fastest int8 shape in the GEMV bench's --tune. Rows too long for one block
// (kRowsMaxThreads) take more chunks per thread.
RowsShape rows_shape(const DeviceMatrix& m) {
  const bool row_scaled = m.scheme == Scheme::int8 || m.scheme == Scheme::fp8;  // fp8 runs int8's shapes
  const int default_rows = m.scheme == Scheme::fp16 ? 2 : (row_scaled ? 4 : 8);
  RowsShape shape;
  shape.chunks = fitted_chunks(m, m.scheme == Scheme::fp16 ? 4 : 1);
  shape.rows = std::max(2, std::min(default_rows, 8 / shape.chunks));  // Rows x Chunks <= 8 spills nothing
                                                                       // (ptxas -v)
  auto occupancy = [&] {
    const int threads = threads_for(m, shape.chunks);
    return blocks_per_sm(rows_kernel_for(m, shape.chunks, shape.rows), rows_smem(m, threads, shape.chunks),
                         threads);
  };
  shape.blocks_per_sm = occupancy();
  // A block alone on its SM (the down_proj's long rows: 448 threads) stalls the whole SM at
  // every group's barrier; with two blocks, one's barrier overlaps the other's loads.
  // - int8 halves its rows (fewer registers): 8b-int8 2.427 -> 2.378 ms on H200.
  // - int4 halving its rows alone also halves the loads each thread has in flight, and is
  //   slower (2.093 -> 2.136 ms). It trades rows for chunks per
  //   thread instead: half the threads, each with the same 8 loads in flight. 8b down_proj
  //   R8 x K1 (448 threads, one block per SM) -> R4 x K2 (224, two): 8b-int4 1.929 -> 1.907
  //   ms, 4b-int4 1.556 -> 1.503. Only down to 4 rows: 70b's down_proj, already at R4 x K2,
  //   is slower at R2 x K4 (13.45 -> 13.64 ms).
  for (;;) {
    if (shape.blocks_per_sm >= 2 || shape.rows <= 2) break;
    if (row_scaled) {
      shape.rows /= 2;
    } else if (m.scheme == Scheme::int4 && shape.rows > 4) {
      shape.rows /= 2;
      shape.chunks *= 2;
    } else {
      break;
    }
    shape.blocks_per_sm = occupancy();
  }
  return shape;
}

void gemv_rows(const DeviceMatrix& w, const GemvInput& in, const GemvOutput& out, RowsShape shape,
               cudaStream_t stream) {
  const char* why = nullptr;
  if (!gemv_supports(w, GemvVariant::fast, &why)) fail("gemv [{}x{}]: {}", w.rows, w.cols, why);
  if (shape.chunks < 1 || shape.rows < 1)
    fail("gemv: a shape of {} rows x {} chunks", shape.rows, shape.chunks);
  const int chunks = fitted_chunks(w, shape.chunks), threads = threads_for(w, chunks);
  const void* kernel = rows_kernel_for(w, chunks, shape.rows);
  const size_t smem = rows_smem(w, threads, chunks);
  int occupancy = blocks_per_sm(kernel, smem, threads);
  if (shape.blocks_per_sm > 0) occupancy = std::min(occupancy, shape.blocks_per_sm);
  int group_shift = 0;  // log2(32-column chunks per group)
  while (w.scheme == Scheme::int4 && (32 << group_shift) < w.group_size) ++group_shift;
  DeviceMatrix m = w;
  GemvInput i = in;
  GemvOutput o = out;
  void* args[] = {&m, &i, &o, &group_shift};
  launch_raw(kernel, dim3(static_cast<unsigned>(balanced_grid(w.rows, shape.rows, occupancy))), dim3(threads),
             smem, stream, args);
}

bool gemv_supports(const DeviceMatrix& w, GemvVariant v, const char** why) {
  if (v == GemvVariant::naive) return true;  // any shape; for fp16 only as --kernel auto's fallback
  return fast_gemv_takes(shape_of(w), layout_of(w), why);
}

void gemv(const DeviceMatrix& w, const GemvInput& in, const GemvOutput& out, GemvVariant v,
          cudaStream_t stream) {
  const char* why = nullptr;
  if (!gemv_supports(w, v, &why)) fail("gemv [{}x{}]: {}", w.rows, w.cols, why);
  if (out.epilogue == Epilogue::silu_mul && w.rows % 2 != 0)
    fail("gemv: silu_mul needs interleaved row pairs");
  if (v == GemvVariant::fast) {
    gemv_rows(w, in, out, rows_shape(w), stream);
    return;
  }
  const void* kernel =
      w.scheme == Scheme::fp16  ? reinterpret_cast<const void*>(&gemv_naive_kernel<NaiveWeights::fp16>)
      : w.scheme == Scheme::fp8 ? reinterpret_cast<const void*>(&gemv_naive_kernel<NaiveWeights::fp8>)
                                : reinterpret_cast<const void*>(&gemv_naive_kernel<NaiveWeights::quantized>);
  const size_t smem =
      static_cast<size_t>((w.cols + 63) / 64) * 128;  // whole lines: the swizzle permutes within one
  const int64_t tasks = (w.rows + 1) / 2;
  const int64_t needed = (tasks + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int grid = static_cast<int>(
      std::min<int64_t>(needed, int64_t{sm_count()} * blocks_per_sm(kernel, smem, kThreads)));
  DeviceMatrix m = w;
  GemvInput i = in;
  GemvOutput o = out;
  void* args[] = {&m, &i, &o};
  CUDA_CHECK(cudaLaunchKernel(kernel, dim3(grid), dim3(kThreads), args, smem, stream));
}

}  // namespace db::cuda
