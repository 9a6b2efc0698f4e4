// The columns GEMV of the batched step (see gemv_columns.cuh). Kernels first, the launchers last.
//
// The rows kernel (kernels/gemv.cu) with NB sequences. Thread t of a block owns the 16-byte
// weight chunks t, t + T, ... (Chunks of them) of every row and the block walks a balanced
// range of rows Rows at a time, the next group's weights loaded before this group's
// reduction, as there. What differs is x. NB sequences' x slices do not fit in a thread's
// registers beside its NB x Rows sums (int4 at 8 sequences: 128 registers of x alone), so a
// group reads them again, one 16-byte piece of each sequence at a time, from L1, where one
// copy serves every block on the SM: the launcher takes at most kGemvColumnsInputBytes of x.
// A piece meets the same columns of the group's Rows rows; each row's weights there are
// dequantized once into four half2 pairs, and each pair is multiplied into the NB sequences'
// half2 accumulators. A chunk's pieces (two chunks' for fp16) make one fp16 partial sum of
// each row and sequence, 8 products a half (int4: 16), added in fp32 as the rows kernel adds
// its chunk dots; int4's group scale multiplies it there, int8's and fp8's row scale the
// row's total.
#include <algorithm>
#include <vector>

#include "common.cuh"
#include "decodebench/linear_shapes.h"
#include "gemv_columns.cuh"
#include "int4_dot.cuh"
#include "pdl.cuh"
#include "rows_grid.cuh"

namespace db::cuda {
namespace {

constexpr int kMaxThreads = kGemvColumnsMaxThreads;

struct ColumnsArgs {
  DeviceMatrix m;
  const __half* x = nullptr;  // [batch, cols]
  float* y = nullptr;         // [batch, rows]
  int batch = 0;              // at most the instance's sequences
  int group_shift = 0;        // int4: log2(group_size / 32), a group's chunks
  bool accumulate = false;
};

// 16-byte pieces of fp16 x a chunk's columns take: fp16 1, int8 and fp8 2, int4 4.
template <Scheme S>
constexpr int kPieces = weights_per_chunk(S) / 8;

// The four weight pairs of a chunk that meet piece p of x (its half2 words x, y, z, w), in
// fp16: fp16 as stored; int8 q, exact (the row scale multiplies the row's sums); fp8 its E4M3
// value times 2^-8, exact (the sums of values under 1.75 have fp16's headroom; the row scale
// times 2^8 multiplies them); int4 q - zero, exact (the group scale multiplies each partial
// sum), with the zero point's constants `lo_sub` and `hi_add` (int4_dot.cuh).
template <Scheme S>
__device__ __forceinline__ void weight_pairs(uint4 w, int p, __half2 lo_sub, __half2 hi_add,
                                             __half2 (&v)[4]) {
  if constexpr (S == Scheme::fp16) {
    v[0] = bits_h2(w.x), v[1] = bits_h2(w.y), v[2] = bits_h2(w.z), v[3] = bits_h2(w.w);
  } else if constexpr (S == Scheme::int8) {
    const uint32_t a = (p == 0 ? w.x : w.z) ^ 0x80808080u, b = (p == 0 ? w.y : w.w) ^ 0x80808080u;
    v[0] = int8x2_to_half2(a, 0x4140u), v[1] = int8x2_to_half2(a, 0x4342u);
    v[2] = int8x2_to_half2(b, 0x4140u), v[3] = int8x2_to_half2(b, 0x4342u);
  } else if constexpr (S == Scheme::fp8) {
    const uint32_t a = p == 0 ? w.x : w.z, b = p == 0 ? w.y : w.w;
    const __half2 k = bits_h2(0x1c001c00u);  // 2^-8, 2^-8
    v[0] = __hmul2(fp8x2_to_half2(a), k), v[1] = __hmul2(fp8x2_to_half2(a >> 16), k);
    v[2] = __hmul2(fp8x2_to_half2(b), k), v[3] = __hmul2(fp8x2_to_half2(b >> 16), k);
  } else {
    int4_pairs(p == 0 ? w.x : p == 1 ? w.y : p == 2 ? w.z : w.w, lo_sub, hi_add, v);
  }
}

// One halving step of reduce_rows (common.cuh) and the steps after it, by recursion, so that
// every index into `a` is a compile-time constant: reduce_rows's own loop, at 16 or 32 sums,
// is not unrolled and keeps its array in local memory.
template <int n, int o, int N>
__device__ __forceinline__ void halve(float (&a)[N], int lane) {
  if constexpr (n > 1) {
    const bool upper = lane & o;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float send = upper ? a[i] : a[i + n / 2];
      const float keep = upper ? a[i + n / 2] : a[i];
      a[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
    }
    halve<n / 2, o / 2>(a, lane);
  }
}

// A thread's sums s[N] (N a power of two) over its warp into out[N]: transposed as reduce_rows
// does, 32 sums at a time, so that each lane ends with one sum's warp total (lane_row).
template <int N>
__device__ __forceinline__ void reduce_into(float (&s)[N], int lane, float* out) {
  constexpr int M = N < kWarp ? N : kWarp;  // sums a pass
#pragma unroll
  for (int h = 0; h < N / M; ++h) {
    float t[M];
#pragma unroll
    for (int i = 0; i < M; ++i) t[i] = s[h * M + i];
    halve<M, kWarp / 2>(t, lane);
    float v = t[0];
#pragma unroll
    for (int o = kWarp / 2 / M; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane % (kWarp / M) == 0) out[h * M + lane_row<M>(lane)] = v;
  }
}

// NB: the sequences of the instance (a launch of fewer masks the rest: their x reads as zero
// and their sums are not written). Chunks, Rows: as in the rows kernel.
template <Scheme S, int NB, int Chunks, int Rows>
__global__ void __launch_bounds__(kMaxThreads) gemv_columns_kernel(ColumnsArgs a) {
  static_assert(Rows == 2 || Rows == 4 || Rows == 8,
                "a group of rows lies inside one block of 8 (int4 meta)");
  pdl_trigger();  // the next kernel may launch and issue its own weight loads
  constexpr int P = kPieces<S>;
  constexpr int N = NB * Rows;  // a thread's sums of a group, [sequence][row]
  __shared__ float part[2][kMaxThreads / kWarp][N];
  const DeviceMatrix& m = a.m;
  const int T = blockDim.x, warps = T / kWarp;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int C = static_cast<int>(m.cols / weights_per_chunk(S));
  const int64_t groups = (m.rows + Rows - 1) / Rows;
  int64_t g = groups * blockIdx.x / gridDim.x;
  const int64_t g_end = groups * (blockIdx.x + 1) / gridDim.x;
  const uint4* base = static_cast<const uint4*>(m.qweight);

  // As the rows kernel: per-thread load offsets once; a thread past the last chunk loads the
  // last chunk again (finite weights) against x read as zero.
  const int G = S == Scheme::int4 ? static_cast<int>(m.cols >> (a.group_shift + 5)) : 1;  // groups a row
  int col[Chunks], gcol[Chunks];
  bool live[Chunks];
#pragma unroll
  for (int k = 0; k < Chunks; ++k) {
    live[k] = threadIdx.x + k * T < C;
    col[k] = min(static_cast<int>(threadIdx.x) + k * T, C - 1);
    gcol[k] = S == Scheme::int4 ? col[k] >> a.group_shift : 0;
  }
  uint4 w[Rows][Chunks];
  GroupMeta<Rows> gm[S == Scheme::int4 ? Chunks : 1];
  auto load = [&](int64_t group) {
    const int64_t row0 = group * Rows;
    const int last = (m.rows - row0 < Rows ? static_cast<int>(m.rows - row0) : Rows) - 1;  // a tail
    const uint4* wrow = base + row0 * C;  // group repeats its last row
#pragma unroll
    for (int r = 0; r < Rows; ++r)
#pragma unroll
      for (int k = 0; k < Chunks; ++k) w[r][k] = ld_stream(wrow + min(r, last) * C + col[k]);
    if constexpr (S == Scheme::int4) {
#pragma unroll
      for (int k = 0; k < Chunks; ++k) load_group_meta<Rows>(gm[k], m, G, row0, gcol[k]);
    }
  };
  // Launched with PDL (pdl.cuh): the first group's weights are loaded before the wait; x and
  // y after it.
  if (g < g_end) load(g);
  pdl_wait();
  const uint4* x = reinterpret_cast<const uint4*>(a.x);
  const int64_t x_pieces = m.cols / 8;  // a sequence's

  for (int buf = 0; g < g_end; ++g, buf ^= 1) {
    float sum[N];
#pragma unroll
    for (int i = 0; i < N; ++i) sum[i] = 0.f;
    __half2 acc[N];
#pragma unroll
    for (int k = 0; k < Chunks; ++k) {
      // fp16 partial sums of a chunk (fp16: of two): 8 products a half for fp16, int8 and
      // fp8, 16 for int4.
      if (S != Scheme::fp16 || k % 2 == 0) {
#pragma unroll
        for (int i = 0; i < N; ++i) acc[i] = __float2half2_rn(0.f);
      }
      // Not unrolled: unrolled, the compiler issues every piece's x loads at once (NB x P x 4
      // registers) and spills.
#pragma unroll 1
      for (int p = 0; p < P; ++p) {
        uint4 xp[NB];
#pragma unroll
        for (int b = 0; b < NB; ++b)
          xp[b] = live[k] && b < a.batch ? __ldg(x + b * x_pieces + static_cast<int64_t>(col[k]) * P + p)
                                         : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int r = 0; r < Rows; ++r) {
          __half2 lo_sub = __float2half2_rn(0.f), hi_add = lo_sub;
          if constexpr (S == Scheme::int4) {
            // Both halves of each constant by one byte permute (int4_dot_q).
            const uint32_t zeros = gm[k].z[r / 4], byte = r % 4, sel = 0x4040u | (byte << 8) | byte;
            lo_sub = bits_h2(__byte_perm(zeros, 0x64u, sel));
            hi_add = bits_h2(__byte_perm(zeros << 4, 0xd4u, sel));
          }
          __half2 v[4];
          weight_pairs<S>(w[r][k], p, lo_sub, hi_add, v);
#pragma unroll
          for (int b = 0; b < NB; ++b) {
            const uint4 xb = xp[b];
            __half2& c = acc[b * Rows + r];
            c = __hfma2(v[0], bits_h2(xb.x), c);
            c = __hfma2(v[1], bits_h2(xb.y), c);
            c = __hfma2(v[2], bits_h2(xb.z), c);
            c = __hfma2(v[3], bits_h2(xb.w), c);
          }
        }
      }
      if (S != Scheme::fp16 || k % 2 == 1 || k == Chunks - 1) {  // the partial sums into fp32
#pragma unroll
        for (int r = 0; r < Rows; ++r) {
          float scale = 1.f;
          if constexpr (S == Scheme::int4) {
            const __half2 sc = bits_h2(gm[k].s[r / 2]);
            scale = r % 2 ? __high2float(sc) : __low2float(sc);
          }
#pragma unroll
          for (int b = 0; b < NB; ++b) {
            const float2 f = __half22float2(acc[b * Rows + r]);
            sum[b * Rows + r] = fmaf(f.x + f.y, scale, sum[b * Rows + r]);
          }
        }
      }
    }
    if (g + 1 < g_end) load(g + 1);
    reduce_into<N>(sum, lane, part[buf][warp]);
    __syncthreads();
    for (int i = threadIdx.x; i < N; i += T) {  // thread i finishes sequence i / Rows, row i % Rows
      const int b = i / Rows;
      const int64_t row = g * Rows + i % Rows;
      if (b >= a.batch || row >= m.rows) continue;
      float v = 0.f;
      for (int j = 0; j < warps; ++j) v += part[buf][j][i];  // a fixed order: deterministic
      if constexpr (S == Scheme::int8) v *= __half2float(m.scales[row]);
      if constexpr (S == Scheme::fp8) v *= fp8_scales(m)[row] * 256.f;
      float* y = a.y + b * m.rows + row;
      *y = a.accumulate ? *y + v : v;
    }
  }
}

// ------------------------------------------------------------------ launcher

// The instantiated shapes, (sequences, chunks, rows): every shape the defaults below reach on
// a matrix the kernel takes (gemv_columns_takes bounds a row's chunks: fp16 at 8 sequences has
// at most 1024) and a few more for decodebench_skinny_bench --tune. Compiled for the 128
// registers a thread of a 512-thread block has: (8, 1, 8), (8, 2, 4) but for fp16, and int4's
// (2, 1, 4) spill some (ptxas -v), the shapes the defaults reach none.
// clang-format off
#define DB_COLUMNS_SHAPES(X)                                        \
  X(2, 1, 8) X(2, 1, 4) X(2, 2, 4) X(2, 2, 2) X(2, 4, 2) X(2, 8, 2) \
  X(4, 1, 8) X(4, 1, 4) X(4, 2, 4) X(4, 2, 2) X(4, 4, 2)            \
  X(8, 1, 8) X(8, 1, 4) X(8, 2, 4) X(8, 2, 2)
// clang-format on

template <Scheme S>
const void* kernel_of(int nb, int chunks, int rows) {
#define DB_COLUMNS(NB_, K_, R_)                \
  if (nb == NB_ && chunks == K_ && rows == R_) \
    return reinterpret_cast<const void*>(&gemv_columns_kernel<S, NB_, K_, R_>);
  DB_COLUMNS_SHAPES(DB_COLUMNS)
#undef DB_COLUMNS
  return nullptr;
}

// The kernel of a shape; null where it is not instantiated.
const void* kernel_or_null(Scheme s, int nb, int chunks, int rows) {
  switch (s) {
    case Scheme::fp16:
      return kernel_of<Scheme::fp16>(nb, chunks, rows);
    case Scheme::int8:
      return kernel_of<Scheme::int8>(nb, chunks, rows);
    case Scheme::int4:
      return kernel_of<Scheme::int4>(nb, chunks, rows);
    case Scheme::fp8:
      return kernel_of<Scheme::fp8>(nb, chunks, rows);
  }
  return nullptr;
}

const void* kernel_for(Scheme s, int nb, int chunks, int rows) {
  if (const void* k = kernel_or_null(s, nb, chunks, rows)) return k;
  fail("columns GEMV: no {} kernel for {} sequences x {} chunks a thread x {} rows a group", to_string(s), nb,
       chunks, rows);
}

// The instance for `batch` sequences: the narrowest that holds them.
int instance_columns(int64_t batch) {
  return batch <= 2 ? 2 : (batch <= 4 ? 4 : 8);
}

// The defaults by scheme and instance (2, 4, 8 sequences), as {chunks, rows}, chosen without
// a GPU by their registers (ptxas -v: none spills) and their x traffic: a group reads x from
// L1 once, NB x kPieces / rows times the weights' bytes, here 1 or 2 up to 4 sequences (4 for
// int4 on long rows, at 4 rows a group), and at 8 sequences 2 for fp16, 4 for int8 and fp8 and 8
// for int4, whose half2 arithmetic bounds it first. At 2 sequences, the rows kernel's shapes;
// 8 weight loads of 16 bytes in flight a thread for fp16 and int4, 4 for int8 and fp8, as there.
struct Default {
  int chunks, rows;
};
Default default_shape(Scheme s, int nb) {
  const int i = nb == 2 ? 0 : (nb == 4 ? 1 : 2);
  static constexpr Default kFp16[] = {{4, 2}, {2, 4}, {2, 4}};
  static constexpr Default kInt8[] = {{1, 4}, {1, 4}, {1, 4}};
  static constexpr Default kInt4[] = {{1, 8}, {1, 8}, {1, 4}};
  switch (s) {
    case Scheme::fp16:
      return kFp16[i];
    case Scheme::int8:
    case Scheme::fp8:  // int8's: the same bytes a weight
      return kInt8[i];
    case Scheme::int4:
      return kInt4[i];
  }
  fail("columns GEMV: unknown scheme");
}

// Chunks a thread for `chunks`: doubled until a row fits one block (kMaxThreads).
int fitted_chunks(const DeviceMatrix& m, int chunks) {
  while (threads_for(m, chunks) > kMaxThreads) {
    if (chunks >= 8) fail("columns GEMV: {} columns is too many for one block", m.cols);
    chunks *= 2;
  }
  return chunks;
}

int occupancy_of(const DeviceMatrix& m, int nb, int chunks, int rows) {
  return blocks_per_sm(kernel_for(m.scheme, nb, chunks, rows), 0, threads_for(m, chunks));
}

}  // namespace

bool gemv_columns_supports(const DeviceMatrix& w, int64_t batch, const char** why) {
  return gemv_columns_takes(shape_of(w), layout_of(w), batch, why);
}

ColumnsShape columns_shape(const DeviceMatrix& w, int64_t batch) {
  ColumnsShape s;
  s.columns = instance_columns(batch);
  const Default d = default_shape(w.scheme, s.columns);
  s.chunks = fitted_chunks(w, d.chunks);
  s.rows = std::max(2, std::min(d.rows, 8 / s.chunks));
  s.blocks_per_sm = occupancy_of(w, s.columns, s.chunks, s.rows);
  // A block alone on its SM idles it at every group's barrier (the rows kernel's long-row
  // rule): half the rows and twice the chunks keep the loads in flight with half the threads.
  while (s.blocks_per_sm < 2 && s.rows >= 4 && s.chunks < 8 &&
         kernel_or_null(w.scheme, s.columns, 2 * s.chunks, s.rows / 2)) {
    s.chunks *= 2;
    s.rows /= 2;
    s.blocks_per_sm = occupancy_of(w, s.columns, s.chunks, s.rows);
  }
  return s;
}

void gemv_columns_shaped(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                         ColumnsShape shape, cudaStream_t s) {
  const char* why = nullptr;
  if (!gemv_columns_supports(w, batch, &why))
    fail("columns GEMV [{}x{}] at {} sequences: {}", w.rows, w.cols, batch, why);
  const ColumnsShape d = columns_shape(w, batch);
  const int nb = shape.columns ? shape.columns : d.columns;
  if (nb < batch) fail("columns GEMV: an instance of {} sequences for a batch of {}", nb, batch);
  if ((shape.chunks == 0) != (shape.rows == 0))
    fail("columns GEMV: a shape sets both chunks and rows, or neither");
  const int chunks = shape.chunks ? fitted_chunks(w, shape.chunks) : d.chunks;
  const int rows = shape.rows ? shape.rows : d.rows;
  const int threads = threads_for(w, chunks);
  const void* kernel = kernel_for(w.scheme, nb, chunks, rows);
  int occupancy = blocks_per_sm(kernel, 0, threads);
  if (shape.blocks_per_sm > 0) occupancy = std::min(occupancy, shape.blocks_per_sm);
  ColumnsArgs a;
  a.m = w;
  a.x = x;
  a.y = y;
  a.batch = static_cast<int>(batch);
  a.accumulate = accumulate;
  while (w.scheme == Scheme::int4 && (32 << a.group_shift) < w.group_size) ++a.group_shift;
  void* args[] = {&a};
  launch_raw(kernel, dim3(static_cast<unsigned>(balanced_grid(w.rows, rows, occupancy))), dim3(threads), 0, s,
             args);
}

void gemv_columns(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                  cudaStream_t s) {
  gemv_columns_shaped(w, x, batch, y, accumulate, {}, s);
}

std::vector<ColumnsShape> columns_kernel_shapes() {
  std::vector<ColumnsShape> v;
#define DB_COLUMNS(NB_, K_, R_) v.push_back({NB_, K_, R_, 0});
  DB_COLUMNS_SHAPES(DB_COLUMNS)
#undef DB_COLUMNS
#undef DB_COLUMNS_SHAPES
  return v;
}

}  // namespace db::cuda
