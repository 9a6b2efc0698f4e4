// LoRA shrink and expand kernels (see lora.cuh).
//
// Sizes: with rank r, the shrink reads targets * r rows of A over the input dimension (8b's
// q/k/v at r = 16: 48 x 4096 halves, 384 KB) and the expand reads B, one row of r halves per
// output row. Both are small next to the base GEMV; they are written for clarity and a full
// reduction per row rather than for the last microsecond.
#include <algorithm>

#include "common.cuh"
#include "lora.cuh"
#include "pdl.cuh"

namespace db::cuda {
namespace {

constexpr int kShrinkThreads = 256;
// Rows of A per shrink block. One: the block count (targets x rank, 16-48 at rank 16) is the
// kernel's only parallelism, and each row costs a block-wide reduction (measured on the H200:
// the external mode's added kernels took ~5 us each with 4 rows per block).
constexpr int kShrinkRows = 1;
constexpr int kExpandThreads = 256;

// Eight fp16 products summed into `acc` in fp32, in column order.
__device__ __forceinline__ float dot8(uint4 a, uint4 x, float acc) {
  const uint32_t aw[4] = {a.x, a.y, a.z, a.w}, xw[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 af = __half22float2(bits_h2(aw[j])), xf = __half22float2(bits_h2(xw[j]));
    acc = fmaf(af.x, xf.x, acc);
    acc = fmaf(af.y, xf.y, acc);
  }
  return acc;
}

// A block owns kShrinkRows consecutive rows of A; its threads stride over the input (16-byte
// pieces when `vec`, single elements otherwise) and the block reduces each row at the end.
// x: either `x` or, with `resid`, the normalized residual stream (LoraGroup).
struct ShrinkInput {
  const __half* x = nullptr;
  const float* resid = nullptr;
  const __half* resid_h = nullptr;
  const __half* norm_w = nullptr;
  const unsigned long long* sumsq = nullptr;
  float eps = 0.f;
};

__global__ void __launch_bounds__(kShrinkThreads)
    lora_shrink_kernel(const __half* a, int64_t rows, int64_t in, ShrinkInput src, float* t, bool vec) {
  pdl_trigger();  // pdl.cuh: the next kernel may launch now
  pdl_wait();     // x, or resid and its statistics; t may still be read by the last expand
  __shared__ float red[kWarp];
  const __half* x = src.x;
  const float inv = src.resid ? inv_rms(src.sumsq, in, src.eps) : 1.f;  // resid: vec is true
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kShrinkRows;
  float acc[kShrinkRows];
#pragma unroll
  for (int r = 0; r < kShrinkRows; ++r) acc[r] = 0.f;
  if (vec) {
    const int64_t pieces = in / 8;
    const uint4* x4 = reinterpret_cast<const uint4*>(x);
    for (int64_t p = threadIdx.x; p < pieces; p += blockDim.x) {
      const uint4 xv = src.resid ? normalized_piece(src.resid, src.resid_h, src.norm_w, p, inv) : x4[p];
#pragma unroll
      for (int r = 0; r < kShrinkRows; ++r)
        if (r0 + r < rows)
          acc[r] = dot8(ld_stream(reinterpret_cast<const uint4*>(a + (r0 + r) * in) + p), xv, acc[r]);
    }
  } else {
    for (int64_t i = threadIdx.x; i < in; i += blockDim.x) {
      const float xi = __half2float(x[i]);
#pragma unroll
      for (int r = 0; r < kShrinkRows; ++r)
        if (r0 + r < rows) acc[r] = fmaf(__half2float(a[(r0 + r) * in + i]), xi, acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < kShrinkRows; ++r) {
    const float v = block_sum(acc[r], red);  // every thread takes part, tail rows included
    if (threadIdx.x == 0 && r0 + r < rows) t[r0 + r] = v;
  }
}

// One thread per output row of the group (the segments' rows, in order), t staged in shared
// memory. Writes every row of the fused layout, so the delta buffer needs no clearing.
// `vec`: every B row is whole, 16-byte aligned pieces (rank % 8 == 0, aligned bases).
__global__ void __launch_bounds__(kExpandThreads) lora_expand_kernel(LoraGroup g, int64_t total, bool vec) {
  pdl_trigger();
  pdl_wait();  // t, from the shrink; delta may still be read by the last GEMV
  extern __shared__ float ts[];
  const int n = g.targets * g.rank;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ts[i] = g.t[i];
  __syncthreads();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int s = 0;
    int64_t local = i;
    while (s + 1 < g.segments && local >= g.seg[s].rows) {
      local -= g.seg[s].rows;
      ++s;
    }
    const LoraSegment& sg = g.seg[s];
    float v = 0.f;
    if (sg.b) {
      const __half* br = sg.b + local * g.rank;
      const float* tk = ts + sg.slot * g.rank;
      float acc = 0.f;
      int k = 0;
      if (vec) {  // the row of B in 16-byte pieces; the same fmaf order as the scalar loop
        for (; k < g.rank; k += 8) {
          const uint4 piece = __ldg(reinterpret_cast<const uint4*>(br + k));
          const uint32_t hw[4] = {piece.x, piece.y, piece.z, piece.w};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float2 bf = __half22float2(bits_h2(hw[j]));
            acc = fmaf(bf.x, tk[k + 2 * j], acc);
            acc = fmaf(bf.y, tk[k + 2 * j + 1], acc);
          }
        }
      }
      for (; k < g.rank; ++k) acc = fmaf(__half2float(br[k]), tk[k], acc);
      v = g.scale * acc;
    }
    g.delta[sg.offset + local * sg.stride] = v;
  }
}

__global__ void add_rows_kernel(float* y, const float* addend, int64_t n) {
  pdl_trigger();
  pdl_wait();  // y and addend
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += addend[i];
}

int grid_for(int64_t n, int threads) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, 65536)));
}

}  // namespace

static void shrink(const __half* a, int64_t rows, int64_t in, const ShrinkInput& src, float* t,
                   cudaStream_t s) {
  if (rows <= 0) return;
  const int64_t blocks = (rows + kShrinkRows - 1) / kShrinkRows;
  if (blocks > 0x7fffffff) fail("lora_shrink: {} rows is too many", rows);
  // 16-byte loads need whole 8-element pieces and 16-byte aligned rows.
  const uintptr_t base =
      reinterpret_cast<uintptr_t>(a) |
      (src.resid ? reinterpret_cast<uintptr_t>(src.resid) | reinterpret_cast<uintptr_t>(src.norm_w)
                 : reinterpret_cast<uintptr_t>(src.x));
  const bool vec = in % 8 == 0 && base % 16 == 0;
  if (src.resid && !vec) fail("lora_shrink: the normalizing shrink needs 16-byte pieces ({} inputs)", in);
  launch(lora_shrink_kernel, static_cast<unsigned>(blocks), kShrinkThreads, 0, s, a, rows, in, src, t, vec);
}

void lora_shrink(const __half* a, int64_t rows, int64_t in, const __half* x, float* t, cudaStream_t s) {
  ShrinkInput src;
  src.x = x;
  shrink(a, rows, in, src, t, s);
}

void lora_expand(const LoraGroup& g, cudaStream_t s) {
  if (g.segments < 1 || g.segments > kLoraMaxSegments) fail("lora_expand: {} segments", g.segments);
  int64_t total = 0;
  for (int i = 0; i < g.segments; ++i) total += g.seg[i].rows;
  if (total <= 0) return;
  const size_t smem = sizeof(float) * static_cast<size_t>(g.targets) * static_cast<size_t>(g.rank);
  if (smem > 48 * 1024)
    fail("lora_expand: rank {} x {} adapted linears needs {} bytes of shared memory, more than 48 KB", g.rank,
         g.targets, smem);
  bool vec = g.rank % 8 == 0;
  for (int i = 0; i < g.segments; ++i) vec = vec && reinterpret_cast<uintptr_t>(g.seg[i].b) % 16 == 0;
  launch(lora_expand_kernel, grid_for(total, kExpandThreads), kExpandThreads, smem, s, g, total, vec);
}

void lora_apply(const LoraGroup& g, cudaStream_t s) {
  ShrinkInput src;
  src.x = g.x;
  src.resid = g.resid;
  src.resid_h = g.resid_h;
  src.norm_w = g.norm_w;
  src.sumsq = g.sumsq;
  src.eps = g.eps;
  shrink(g.a, static_cast<int64_t>(g.targets) * g.rank, g.in, src, g.t, s);
  lora_expand(g, s);
}

void add_rows(float* y, const float* addend, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  launch(add_rows_kernel, grid_for(n, 256), 256, 0, s, y, addend, n);
}

}  // namespace db::cuda
