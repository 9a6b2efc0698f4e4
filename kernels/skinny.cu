// The skinny GEMM of a batched decode step (see skinny.cuh).
//
// mma.m16n8k16 computes D[16 x 8] += A[16 x 16] B[16 x 8]. Here A is 16 rows of W, B is 16
// columns of x for 8 sequences. A dot product does not care in which order its k terms come,
// so the k slots of an mma are assigned to the weights a lane loads anyway: lane (g, c)
// (g = lane / 4, c = lane % 4) loads one 16-byte chunk of row g and one of row g + 8, the
// chunk c of a "chunk set" of four consecutive chunks, and its four A values of an mma are
// four consecutive columns of its chunks. Its B values are x at the same four columns, of
// sequence g: one 8-byte piece of x a k step. A chunk of V columns (fp16 8, int8 16, int4
// 32) feeds V / 4 mmas, and each of them runs once per 8 sequences: the weights are loaded
// and dequantized once for every column of the launch.
//
// A warp takes MT tiles of 16 rows (the block's rows) and every kWarps-th chunk set of the
// block's share of the columns; the block's warps add their accumulators through shared
// memory. Matrices with few rows split the columns over `splits` blocks as well, each writing
// its partial sums to the workspace; the last block of a tile to finish adds them in split
// order (deterministic) and writes the output.
#include <algorithm>

#include "common.cuh"
#include "int4_dot.cuh"
#include "int4_meta.h"
#include "pdl.cuh"
#include "shape_choice.h"
#include "skinny.cuh"

namespace db::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kMaxSplits = 64;

struct SkinnyArgs {
  DeviceMatrix m;
  const __half* x = nullptr;  // [batch, cols]
  float* y = nullptr;         // [batch, rows]
  int batch = 0;              // columns of this launch, at most 8 NT
  int splits = 1;
  int group_shift = 0;  // int4: log2(group_size / 32), a group's chunks
  bool accumulate = false;
  float* partial = nullptr;      // [tiles][splits][MT NT 128] with splits > 1
  unsigned* counters = nullptr;  // [tiles], zero between launches
};

template <Scheme S>
constexpr int kCols = weights_per_chunk(S);

// A chunk of one row as fp16 pairs in column order: pair p holds columns 2p, 2p + 1. int4:
// (q - zero) * scale, exact up to the product's rounding; int8: q, its row scale applied to
// the sums at the end; fp16: as stored.
template <Scheme S>
struct Pairs {
  uint32_t p[kCols<S> / 2];
};

template <Scheme S>
__device__ __forceinline__ void dequant(Pairs<S>& out, uint4 w, uint32_t scale, uint32_t zero) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
  if constexpr (S == Scheme::fp16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) out.p[i] = words[i];
  } else if constexpr (S == Scheme::int8) {
    // q + 128 as a byte under 0x64 is fp16 1024 + q + 128; minus 1152 is q, exact.
    const __half2 magic = bits_h2(0x64806480u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t u = words[i] ^ 0x80808080u;
      out.p[2 * i] = h2_bits(__hsub2(bits_h2(__byte_perm(u, 0x64646464u, 0x4140u)), magic));
      out.p[2 * i + 1] = h2_bits(__hsub2(bits_h2(__byte_perm(u, 0x64646464u, 0x4342u)), magic));
    }
  } else if constexpr (S == Scheme::fp8) {
    // E4M3 pairs by the hardware conversion, exact; the row scale is applied to the sums at
    // the end, in fp32 (the mma accumulates in fp32: no fp16 headroom to keep).
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out.p[2 * i] = h2_bits(fp8x2_to_half2(words[i]));
      out.p[2 * i + 1] = h2_bits(fp8x2_to_half2(words[i] >> 16));
    }
  } else {
    // (q - zero) * scale, the pairs in column order (int4_dot.cuh, int4_pairs). 0x64zz is
    // 1024 + zero, 0xd4(16 zero) is -(64 + zero), both exact.
    const __half2 lo_sub = bits_h2(0x64006400u | zero | (zero << 16));
    const __half2 hi_add = bits_h2(0xd400d400u | (zero << 4) | (zero << 20));
    const __half2 s2 = bits_h2(scale | (scale << 16));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __half2 v[4];
      int4_pairs(words[i], lo_sub, hi_add, v);
#pragma unroll
      for (int k = 0; k < 4; ++k) out.p[4 * i + k] = h2_bits(__hmul2(v[k], s2));
    }
  }
}

template <Scheme S, int MT, int NT, int U>
__global__ void __launch_bounds__(kThreads) skinny_kernel(SkinnyArgs a) {
  pdl_trigger();  // the next kernel may launch and issue its own weight loads
  constexpr int V = kCols<S>;
  constexpr int kMmas = V / 4;     // mmas a chunk feeds
  constexpr int kXPieces = V / 8;  // 16-byte pieces of x a chunk's columns take
  constexpr int E = MT * NT * kWarp * 4;
  const DeviceMatrix& m = a.m;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, c = lane % 4;
  const int64_t chunks = m.cols / V, sets = (chunks + 4 * U - 1) / (4 * U);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 16 * MT;
  const int split = blockIdx.y;
  const int groups = S == Scheme::int4 ? static_cast<int>(m.cols / m.group_size) : 0;
  const int64_t row_bytes = S == Scheme::fp16 ? 2 * m.cols : (S == Scheme::int4 ? m.cols / 2 : m.cols);

  // The lane's rows: g and g + 8 of each tile, the last row repeated past the end (finite
  // weights whose outputs are dropped), as 32-bit offsets from the block's first row (a
  // block's rows span less than 2^31 bytes) and, for int4, packed meta indices.
  const unsigned char* base = static_cast<const unsigned char*>(m.qweight) + row0 * row_bytes;
  uint32_t woff[MT][2], meta0[MT][2];
#pragma unroll
  for (int t = 0; t < MT; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = min(row0 + 16 * t + g + 8 * h, m.rows - 1);
      woff[t][h] = static_cast<uint32_t>((r - row0) * row_bytes);
      meta0[t][h] = static_cast<uint32_t>(int4_meta::packed_index(groups, r, 0));
    }
  float acc[MT][NT][4];
#pragma unroll
  for (int t = 0; t < MT; ++t)
#pragma unroll
    for (int n = 0; n < NT; ++n) acc[t][n][0] = acc[t][n][1] = acc[t][n][2] = acc[t][n][3] = 0.f;

  // Lane c's chunks of a set: U consecutive ones, so that a quad reads 4 U x 16 contiguous
  // bytes of each of its rows; past the last chunk, the last one again (x is zero there).
  int64_t cc[U];
  bool live[U];
  uint4 w[U][MT][2];
  auto load = [&](int64_t set) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t ci = (set * 4 + c) * U + u;
      live[u] = ci < chunks;
      cc[u] = live[u] ? ci : chunks - 1;
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          w[u][t][h] = ld_stream(reinterpret_cast<const uint4*>(base + woff[t][h]) + cc[u]);
  };
  // Launched with PDL (pdl.cuh): the weights are constant, so the warp's first set is loaded
  // while the previous kernel is still finishing; x, the workspace and y come after the wait.
  int64_t set = static_cast<int64_t>(split) * kWarps + warp;
  const int64_t stride = static_cast<int64_t>(a.splits) * kWarps;
  if (set < sets) load(set);
  pdl_wait();
  for (bool loaded = true; set < sets; set += stride, loaded = false) {
    if (!loaded) load(set);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      uint32_t scale[MT][2], zero[MT][2];
#pragma unroll
      for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          scale[t][h] = zero[t][h] = 0;
          if constexpr (S == Scheme::int4) {
            const int64_t e = meta0[t][h] + (cc[u] >> a.group_shift) * int4_meta::kBlockRows;
            scale[t][h] = __ldg(reinterpret_cast<const uint16_t*>(m.scales) + e);
            zero[t][h] = m.zero_point ? __ldg(m.zeros + e) : 8u;
          }
        }
      // x of sequences g, g + 8, ... at the chunk's columns; zero past the batch or the last
      // chunk, so a lane with nothing to add contributes zeros.
      uint4 xq[NT][kXPieces];
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const int seq = 8 * n + g;
        const uint4* xp =
            reinterpret_cast<const uint4*>(a.x + static_cast<int64_t>(seq) * m.cols + cc[u] * V);
#pragma unroll
        for (int p = 0; p < kXPieces; ++p)
          xq[n][p] = live[u] && seq < a.batch ? __ldg(xp + p) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        Pairs<S> lo, hi;  // rows g and g + 8
        dequant<S>(lo, w[u][t][0], scale[t][0], zero[t][0]);
        dequant<S>(hi, w[u][t][1], scale[t][1], zero[t][1]);
#pragma unroll
        for (int j = 0; j < kMmas; ++j) {
#pragma unroll
          for (int n = 0; n < NT; ++n) {
            const uint4 xv = xq[n][j / 2];
            const uint32_t b0 = j % 2 ? xv.z : xv.x, b1 = j % 2 ? xv.w : xv.y;
            frag::mma(acc[t][n], lo.p[2 * j], hi.p[2 * j], lo.p[2 * j + 1], hi.p[2 * j + 1], b0, b1);
          }
        }
      }
    }
  }

  // The block's warps added in order, through shared memory.
  __shared__ float red[kWarps][E];
#pragma unroll
  for (int t = 0; t < MT; ++t)
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[warp][((t * NT + n) * kWarp + lane) * 4 + i] = acc[t][n][i];
  __syncthreads();

  auto sum = [&](int e) {
    float v = 0.f;
#pragma unroll
    for (int k = 0; k < kWarps; ++k) v += red[k][e];
    return v;
  };
  // Element e of the tile: (t, n, lane, i) of the accumulators, D's row g + 8 (i / 2) and
  // column 2 c + i % 2 of tile t and sequence group n.
  auto finish = [&](int e, float v) {
    const int i = e % 4, l = (e / 4) % kWarp, n = (e / (4 * kWarp)) % NT, t = e / (4 * kWarp * NT);
    const int64_t row = row0 + 16 * t + l / 4 + 8 * (i / 2);
    const int seq = 8 * n + 2 * (l % 4) + i % 2;
    if (row >= m.rows || seq >= a.batch) return;
    if constexpr (S == Scheme::int8) v *= __half2float(m.scales[row]);
    if constexpr (S == Scheme::fp8) v *= fp8_scales(m)[row];
    float* y = a.y + static_cast<int64_t>(seq) * m.rows + row;
    *y = a.accumulate ? *y + v : v;
  };
  if (a.splits == 1) {
    for (int e = threadIdx.x; e < E; e += kThreads) finish(e, sum(e));
    return;
  }
  float* mine = a.partial + (static_cast<int64_t>(blockIdx.x) * a.splits + split) * E;
  for (int e = threadIdx.x; e < E; e += kThreads) mine[e] = sum(e);
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(&a.counters[blockIdx.x], 1u) == static_cast<unsigned>(a.splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  const float* all = a.partial + static_cast<int64_t>(blockIdx.x) * a.splits * E;
  for (int e = threadIdx.x; e < E; e += kThreads) {
    float v = 0.f;
    for (int s = 0; s < a.splits; ++s) v += __ldcg(all + static_cast<int64_t>(s) * E + e);
    finish(e, v);
  }
  if (threadIdx.x == 0) a.counters[blockIdx.x] = 0;  // ready for the next launch
}

// The shape of a launch: NT groups of 8 sequences; MT tiles of 16 rows a block and U chunks
// a lane a step (MT x U x 2 weight loads of 16 bytes in flight a lane); the split of the
// columns that gives the grid about `blocks_per_sm` blocks an SM.
struct Shape {
  int nt = 1, mt = 4, u = 1;
  int64_t tiles = 0;
  int splits = 1;
  int64_t elements() const { return int64_t{nt} * mt * kWarp * 4; }
};

// The defaults, by scheme and sequence groups (1, 2, 4, 8): the fastest shape of
// decodebench_skinny_bench --tune on 8b's layers on the H200 (docs/kernels.md#batch); for one
// group, by its times at 2, 4 and 8 sequences summed.
struct DefaultShape {
  int row_tiles, chunks, blocks_per_sm;
};
DefaultShape default_shape(Scheme scheme, int nt) {
  const int g = nt == 1 ? 0 : (nt == 2 ? 1 : (nt == 4 ? 2 : 3));
  static constexpr DefaultShape kFp16[] = {{4, 2, 4}, {4, 2, 4}, {2, 2, 2}, {1, 2, 2}};
  static constexpr DefaultShape kInt8[] = {{2, 4, 4}, {2, 2, 2}, {4, 1, 2}, {2, 1, 1}};
  static constexpr DefaultShape kInt4[] = {{4, 1, 2}, {4, 1, 2}, {4, 1, 2}, {2, 1, 1}};
  switch (scheme) {
    case Scheme::fp16:
      return kFp16[g];
    case Scheme::int8:
      return kInt8[g];
    case Scheme::int4:
      return kInt4[g];
    case Scheme::fp8:  // int8's: the same bytes a weight
      return kInt8[g];
  }
  fail("skinny GEMM: unknown scheme");
}

}  // namespace

int skinny_max_batch(int64_t batch) {
  const int64_t b = std::min(batch, kSkinnyMaxBatch);
  return b <= 8 ? 8 : (b <= 16 ? 16 : (b <= 32 ? 32 : 64));
}

namespace {

Shape launch_shape(int64_t rows, int64_t cols, Scheme scheme, int64_t batch, SkinnyShape t) {
  Shape s;
  s.nt = skinny_max_batch(batch) / 8;
  const DefaultShape d = default_shape(scheme, s.nt);
  s.mt = t.row_tiles ? t.row_tiles : d.row_tiles;
  s.u = t.chunks ? t.chunks : d.chunks;
  s.tiles = (rows + 16 * s.mt - 1) / (16 * s.mt);
  const int64_t sets = (cols / weights_per_chunk(scheme) + 4 * s.u - 1) / (4 * s.u);
  const int64_t target = int64_t{sm_count()} * (t.blocks_per_sm ? t.blocks_per_sm : d.blocks_per_sm);
  const int64_t want = (target + s.tiles - 1) / s.tiles;
  s.splits = static_cast<int>(std::clamp<int64_t>(std::min(want, sets / kWarps), 1, kMaxSplits));
  return s;
}

using KernelFn = void (*)(SkinnyArgs);

// The instantiated shapes, (NT, MT, U); skinny_kernel_shapes() lists them.
// clang-format off
#define DB_SKINNY_SHAPES(X) \
  X(1, 4, 1) X(1, 4, 2) X(1, 2, 2) X(1, 2, 4) \
  X(2, 4, 1) X(2, 4, 2) X(2, 2, 2) X(2, 2, 4) \
  X(4, 4, 1) X(4, 2, 2) \
  X(8, 2, 1) X(8, 1, 2)
// clang-format on

template <Scheme S>
KernelFn kernel_for(const Shape& sh) {
#define DB_SKINNY(NT_, MT_, U_) \
  if (sh.nt == NT_ && sh.mt == MT_ && sh.u == U_) return &skinny_kernel<S, MT_, NT_, U_>;
  DB_SKINNY_SHAPES(DB_SKINNY)
#undef DB_SKINNY
  fail("skinny GEMM: no kernel for {} sequence groups x {} row tiles x {} chunks", sh.nt, sh.mt, sh.u);
}

KernelFn kernel_for(Scheme s, const Shape& sh) {
  switch (s) {
    case Scheme::fp16:
      return kernel_for<Scheme::fp16>(sh);
    case Scheme::int8:
      return kernel_for<Scheme::int8>(sh);
    case Scheme::int4:
      return kernel_for<Scheme::int4>(sh);
    case Scheme::fp8:
      return kernel_for<Scheme::fp8>(sh);
  }
  fail("skinny GEMM: unknown scheme");
}

constexpr size_t kCounterBytes = 256;  // alignment of the partials after the counters

size_t counter_bytes(int64_t tiles) {
  return (static_cast<size_t>(tiles) * 4 + kCounterBytes - 1) / kCounterBytes * kCounterBytes;
}

}  // namespace

bool skinny_supports(const DeviceMatrix& w, const char** why) {
  return skinny_gemm_takes(shape_of(w), layout_of(w), why);
}

size_t skinny_workspace_bytes(int64_t rows, int64_t cols, int64_t batch) {
  // The most splits any shape takes: fp16's chunks at one chunk a step, the most blocks an SM.
  size_t most = 0;
  for (int mt : {1, 2, 4}) {
    const Shape sh = launch_shape(rows, cols, Scheme::fp16, batch, {mt, 1, 8});
    most = std::max<size_t>(most, counter_bytes(sh.tiles) + 4ull * sh.tiles * sh.splits * sh.elements());
  }
  return most;
}

std::vector<SkinnyKernelShape> skinny_kernel_shapes() {
  std::vector<SkinnyKernelShape> v;
#define DB_SKINNY(NT_, MT_, U_) v.push_back({8 * NT_, MT_, U_});
  DB_SKINNY_SHAPES(DB_SKINNY)
#undef DB_SKINNY
#undef DB_SKINNY_SHAPES
  return v;
}

void gemm_skinny_tuned(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                       void* workspace, SkinnyShape t, cudaStream_t s) {
  const char* why = nullptr;
  if (!skinny_supports(w, &why)) fail("skinny GEMM [{}x{}]: {}", w.rows, w.cols, why);
  if (t.blocks_per_sm > 8) fail("skinny GEMM: at most 8 blocks an SM");
  int group_shift = 0;
  while (w.scheme == Scheme::int4 && (32 << group_shift) < w.group_size) ++group_shift;
  for (int64_t b0 = 0; b0 < batch; b0 += kSkinnyMaxBatch) {
    const int64_t n = std::min(kSkinnyMaxBatch, batch - b0);
    const Shape sh = launch_shape(w.rows, w.cols, w.scheme, n, t);
    SkinnyArgs a;
    a.m = w;
    a.x = x + b0 * w.cols;
    a.y = y + b0 * w.rows;
    a.batch = static_cast<int>(n);
    a.splits = sh.splits;
    a.group_shift = group_shift;
    a.accumulate = accumulate;
    a.counters = static_cast<unsigned*>(workspace);
    a.partial = reinterpret_cast<float*>(static_cast<unsigned char*>(workspace) + counter_bytes(sh.tiles));
    launch(kernel_for(w.scheme, sh), dim3(static_cast<unsigned>(sh.tiles), static_cast<unsigned>(sh.splits)),
           dim3(kThreads), 0, s, a);
  }
}

void gemm_skinny(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                 void* workspace, cudaStream_t s) {
  gemm_skinny_tuned(w, x, batch, y, accumulate, workspace, {}, s);
}

SkinnyShape skinny_resolved(Scheme scheme, int64_t batch, SkinnyShape t) {
  const DefaultShape d = default_shape(scheme, skinny_max_batch(batch) / 8);
  return {t.row_tiles ? t.row_tiles : d.row_tiles, t.chunks ? t.chunks : d.chunks,
          t.blocks_per_sm ? t.blocks_per_sm : d.blocks_per_sm};
}

SkinnyTiming tune_skinny(const std::vector<const DeviceMatrix*>& ms, const __half* x, int64_t batch, float* y,
                         void* workspace, cudaStream_t s) {
  if (ms.empty()) fail("tune_skinny: no matrices");
  const Scheme scheme = ms.front()->scheme;
  auto time_us = [&](const SkinnyShape& t) {
    return median_pass_us(
        [&] {
          for (const DeviceMatrix* m : ms) gemm_skinny_tuned(*m, x, batch, y, false, workspace, t, s);
        },
        ms.size(), s);
  };
  std::vector<SkinnyShape> shapes{skinny_resolved(scheme, batch, {})};
  for (const SkinnyKernelShape& k : skinny_kernel_shapes()) {
    if (k.max_batch != skinny_max_batch(batch)) continue;
    for (int bps : {1, 2, 4, 8}) {
      const SkinnyShape t{k.row_tiles, k.chunks, bps};
      if (t.row_tiles != shapes[0].row_tiles || t.chunks != shapes[0].chunks ||
          t.blocks_per_sm != shapes[0].blocks_per_sm)
        shapes.push_back(t);
    }
  }
  return timing_of<SkinnyTiming>(shapes, choose_shape(shapes, time_us));
}

}  // namespace db::cuda
