// Shared device helpers: the error-check family, warp reductions, streaming loads and the
// shared-memory swizzle every GEMV uses for its input vector.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "decodebench/error.h"

namespace db::cuda {

// Every CUDA call is checked; the message names the call, file and line and the error.
#define CUDA_CHECK(expr)                                                         \
  do {                                                                           \
    const cudaError_t db_err_ = (expr);                                          \
    if (db_err_ != cudaSuccess)                                                  \
      ::db::fail("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(db_err_), \
                 cudaGetErrorString(db_err_), #expr, __FILE__, __LINE__);        \
  } while (0)

// After every launch: a bad configuration surfaces here, not three kernels later.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

// Two CUDA events, destroyed on every way out (a timing that throws included); ms(): the time
// from a to b once b has completed.
struct Events {
  cudaEvent_t a = nullptr, b = nullptr;
  Events() {
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
  }
  ~Events() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  float ms() const {
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    return t;
  }
};

// The load-time tuners' timing (tune_skinny, tune_tiles): `pass()` enqueues one pass over
// `matrices` matrices on stream s; one untimed pass waited for (a kernel's first launch may
// load its module, host time in which the card idles), untimed passes until a millisecond of
// them has run (at most 32), then the median of three timed passes, in microseconds a matrix.
template <class Pass>
double median_pass_us(Pass&& pass, size_t matrices, cudaStream_t s) {
  const Events ev;
  pass();
  CUDA_CHECK(cudaStreamSynchronize(s));
  CUDA_CHECK(cudaEventRecord(ev.a, s));
  for (int i = 0; i < 32; ++i) {
    pass();
    CUDA_CHECK(cudaEventRecord(ev.b, s));
    CUDA_CHECK(cudaEventSynchronize(ev.b));
    if (ev.ms() >= 1.0f) break;
  }
  float passes_ms[3];
  for (float& v : passes_ms) {
    CUDA_CHECK(cudaEventRecord(ev.a, s));
    pass();
    CUDA_CHECK(cudaEventRecord(ev.b, s));
    CUDA_CHECK(cudaEventSynchronize(ev.b));
    v = ev.ms();
  }
  std::sort(passes_ms, passes_ms + 3);
  return 1e3 * passes_ms[1] / static_cast<double>(matrices);
}

constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sums a[0..R) over the warp, transposed: afterwards every lane holds the warp total of row
// lane_row<R>(lane). Each halving step trades half of the rows with the lane `o` away.
template <int R>
__device__ __forceinline__ float reduce_rows(float (&a)[R], int lane) {
#pragma unroll
  for (int n = R, o = kWarp / 2; n > 1; n /= 2, o /= 2) {
    const bool upper = lane & o;
#pragma unroll
    for (int i = 0; i < n / 2; ++i) {
      const float send = upper ? a[i] : a[i + n / 2];
      const float keep = upper ? a[i + n / 2] : a[i];
      a[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
    }
  }
  float v = a[0];
#pragma unroll
  for (int o = kWarp / 2 / R; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <int R>
__device__ __forceinline__ int lane_row(int lane) {
  int row = 0;
#pragma unroll
  for (int n = R, o = kWarp / 2; n > 1; n /= 2, o /= 2)
    if (lane & o) row += n / 2;
  return row;
}

// Block-wide sum for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* scratch /* [32] */) {
  v = warp_sum(v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  v = lane < warps ? scratch[lane] : 0.f;
  return warp_sum(v);
}

// D += A B on the tensor cores: mma.sync.m16n8k16 with fp16 A (row-major) and B (column-major)
// fragments and fp32 accumulators, in the PTX ISA's fragment layout.
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Weights are read once per token: stream them past L1 so the activations, scales and KV
// cache keep the cache.
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// 16 bytes global -> shared without passing through registers (sm_80+): the copy is in
// flight until cp_async_wait_all(), so it overlaps whatever the thread does in between.
// .cg caches in L2 only.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;" ::: "memory");
}

// The GEMV input vector lives in shared memory as 16-byte pieces. A lane of the int4
// kernel reads 4 consecutive pieces (64 bytes), so without a swizzle 8 lanes of a phase
// hit only 2 of the 8 16-byte bank groups (4-way conflicts). Rotating each piece within its
// 128-byte line by (piece / 8) spreads them over all 8 for the fp16, int8 and int4 reads.
__device__ __forceinline__ int swizzle_piece(int p) {
  return (p & ~7) | ((p + (p >> 3)) & 7);
}

// RMSNorm statistics handed from kernel to kernel. The kernel that writes the final value of
// the residual stream (the embedding, the O and down GEMVs) adds the sum of squares of what
// it wrote into kNormSlots slots, as fixed-point integers: integer addition is associative,
// so the total is the same whatever order the blocks finish in (a float atomicAdd would make
// the normalized input, and so the tokens, vary from run to run). The next GEMV reads the
// slots instead of re-reading the whole residual stream in every block.
constexpr int kNormSlots = 16;
constexpr float kSumsqScale = 1048576.f;  // 2^20: exact to 1e-6, room for sums up to 8.8e12

__device__ __forceinline__ void add_sumsq(unsigned long long* slots, float block_partial) {
  atomicAdd(&slots[blockIdx.x % kNormSlots], __float2ull_rn(block_partial * kSumsqScale));
}

// 1 / rms(resid) from the slots; every lane of the calling warp gets it.
__device__ __forceinline__ float inv_rms(const unsigned long long* slots, int64_t n, float eps) {
  const int lane = threadIdx.x % kWarp;
  unsigned long long s = lane < kNormSlots ? __ldcg(slots + lane) : 0ull;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return rsqrtf(static_cast<float>(s) * (1.f / kSumsqScale) / static_cast<float>(n) + eps);
}

__device__ __forceinline__ uint32_t h2_bits(__half2 h) {
  return *reinterpret_cast<uint32_t*>(&h);
}
__device__ __forceinline__ __half2 bits_h2(uint32_t u) {
  return *reinterpret_cast<__half2*>(&u);
}

// Two E4M3 codes, the low byte the low half, as their fp16 values (every E4M3 value is exact
// in fp16): one cvt.rn.f16x2.e4m3x2 from sm_89 on, CUDA's software conversion below.
__device__ __forceinline__ __half2 fp8x2_to_half2(uint32_t two) {
  const __half2_raw r =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
  return bits_h2(static_cast<uint32_t>(r.x) | (static_cast<uint32_t>(r.y) << 16));
}

// Two int8 weights as fp16, exactly, without a conversion instruction: `u` is their word with
// each byte's sign bit flipped (w ^ 0x80808080, q + 128 as an unsigned byte); the permute puts
// the two bytes `selector` picks (0x4140: bytes 0, 1; 0x4342: bytes 2, 3) under 0x64, the fp16
// 1024 + q + 128, and subtracting 1152 leaves q.
__device__ __forceinline__ __half2 int8x2_to_half2(uint32_t u, uint32_t selector) {
  const __half2 magic = bits_h2(0x64806480u);  // 1152, 1152
  return __hsub2(bits_h2(__byte_perm(u, 0x64646464u, selector)), magic);
}

// Eight elements of the RMSNorm'ed residual stream, columns 8p..8p+7, as the fp16 x every
// GEMV (and the LoRA shrink) multiplies: fp16(r * inv * norm_w), in that order, where r is
// the stream's fp16 copy where the step keeps one (resid_h: its writers store it beside the
// float stream, and a normalized GEMV's blocks, which all fetch their x right after the wait
// on the writer, then fetch half the bytes) and the float stream
// otherwise. Split in a load and a conversion so that a kernel can issue all its pieces'
// loads (and the norm statistics') before it needs any of them.
struct ResidPiece {
  float4 a, b;  // resid[8p..8p+7]; from the fp16 copy its 16 bytes ride in a's bits (b unused)
  uint4 nw;     // norm_w[8p..8p+7]
};

__device__ __forceinline__ ResidPiece load_resid_piece(const float* resid, const __half* norm_w, int64_t p) {
  const float4* r4 = reinterpret_cast<const float4*>(resid);
  return {__ldg(r4 + 2 * p), __ldg(r4 + 2 * p + 1), __ldg(reinterpret_cast<const uint4*>(norm_w) + p)};
}

// The same with norm_w's piece already loaded (it is a weight: a GEMV fetches it before the
// wait on the kernel that wrote resid).
__device__ __forceinline__ ResidPiece load_resid_piece(const float* resid, uint4 norm_w_piece, int64_t p) {
  const float4* r4 = reinterpret_cast<const float4*>(resid);
  return {__ldg(r4 + 2 * p), __ldg(r4 + 2 * p + 1), norm_w_piece};
}

// From the fp16 copy; the piece is widened only by normalize_piece.
__device__ __forceinline__ ResidPiece load_resid_piece(const __half* resid_h, uint4 norm_w_piece, int64_t p) {
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(resid_h) + p);
  return {make_float4(__uint_as_float(u.x), __uint_as_float(u.y), __uint_as_float(u.z), __uint_as_float(u.w)),
          make_float4(0.f, 0.f, 0.f, 0.f), norm_w_piece};
}

// `from_copy`: the piece came from the fp16 copy.
__device__ __forceinline__ uint4 normalize_piece(const ResidPiece& piece, float inv, bool from_copy) {
  float r[8] = {piece.a.x, piece.a.y, piece.a.z, piece.a.w, piece.b.x, piece.b.y, piece.b.z, piece.b.w};
  if (from_copy) {
    const uint32_t u[4] = {__float_as_uint(piece.a.x), __float_as_uint(piece.a.y), __float_as_uint(piece.a.z),
                           __float_as_uint(piece.a.w)};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 v = __half22float2(bits_h2(u[e]));
      r[2 * e] = v.x;
      r[2 * e + 1] = v.y;
    }
  }
  const uint32_t n[4] = {piece.nw.x, piece.nw.y, piece.nw.z, piece.nw.w};
  uint32_t h[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 g = __half22float2(bits_h2(n[e]));
    h[e] = h2_bits(
        __halves2half2(__float2half_rn(r[2 * e] * inv * g.x), __float2half_rn(r[2 * e + 1] * inv * g.y)));
  }
  return make_uint4(h[0], h[1], h[2], h[3]);
}

// One piece, loaded and normalized: from the copy where `resid_h` is set.
__device__ __forceinline__ uint4 normalized_piece(const float* resid, const __half* resid_h,
                                                  const __half* norm_w, int64_t p, float inv) {
  const uint4 nw = __ldg(reinterpret_cast<const uint4*>(norm_w) + p);
  return resid_h ? normalize_piece(load_resid_piece(resid_h, nw, p), inv, true)
                 : normalize_piece(load_resid_piece(resid, nw, p), inv, false);
}

}  // namespace db::cuda
