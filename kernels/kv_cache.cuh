// The quantized KV cache on the device (decodebench/kv_quant.h): where a cache's scales lie,
// codes as their fp16 values, and one vector quantized by a warp. The attention kernels and the
// prefill's read and write the cache through these, so that each stores and reads what the CPU
// reference does.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "common.cuh"
#include "decodebench/kv_quant.h"

namespace db::cuda {

// A cache's storage as bytes: fp8's and int8's codes and scales, where the kernels' arguments
// hold fp16's pointer type (AttentionArgs says why).
__device__ __forceinline__ uint8_t* kv_bytes(__half* p) {
  return reinterpret_cast<uint8_t*>(p);
}
__device__ __forceinline__ const uint8_t* kv_bytes(const __half* p) {
  return reinterpret_cast<const uint8_t*>(p);
}

// The scales of one sequence's cache of `positions` rows (fp8, int8): [positions, kv_heads]
// floats after its [positions, kv_dim] codes.
__device__ __forceinline__ float* kv_scales(void* cache, int64_t positions, int64_t kv_dim) {
  return reinterpret_cast<float*>(static_cast<uint8_t*>(cache) + positions * kv_dim);
}
__device__ __forceinline__ const float* kv_scales(const void* cache, int64_t positions, int64_t kv_dim) {
  return reinterpret_cast<const float*>(static_cast<const uint8_t*>(cache) + positions * kv_dim);
}

// Two codes (the low byte the low half) as the fp16 values they stand for before the scale:
// exact, E4M3 values and -127..127 both being fp16 numbers. fp8: one cvt.rn.f16x2.e4m3x2 from
// sm_89 on (fp8x2_to_half2). int8: the sign bit flipped (q + 128 as a byte), the byte put under
// 0x64 to make the fp16 1024 + q + 128, 1152 subtracted, as the int8 GEMV does.
template <KvScheme S>
__device__ __forceinline__ __half2 kv_codes2(uint32_t two) {
  static_assert(S != KvScheme::fp16, "fp16 has no codes");
  if constexpr (S == KvScheme::fp8) {
    return fp8x2_to_half2(two);
  } else {
    return __hsub2(bits_h2(__byte_perm(two ^ 0x8080u, 0x64646464u, 0x4140u)), bits_h2(0x64806480u));
  }
}

// Four codes of a word, bytes 0, 1 in `lo` and 2, 3 in `hi`.
template <KvScheme S>
__device__ __forceinline__ void kv_codes4(uint32_t w, __half2& lo, __half2& hi) {
  if constexpr (S == KvScheme::fp8) {
    lo = fp8x2_to_half2(w);
    hi = fp8x2_to_half2(w >> 16);
  } else {
    const uint32_t u = w ^ 0x80808080u;
    const __half2 magic = bits_h2(0x64806480u);
    lo = __hsub2(bits_h2(__byte_perm(u, 0x64646464u, 0x4140u)), magic);
    hi = __hsub2(bits_h2(__byte_perm(u, 0x64646464u, 0x4342u)), magic);
  }
}

// Sixteen codes (a 16-byte load) as floats, in order.
template <KvScheme S>
__device__ __forceinline__ void kv_codes16(uint4 w, float (&out)[16]) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    __half2 lo, hi;
    kv_codes4<S>(u[j], lo, hi);
    const float2 a = __half22float2(lo), b = __half22float2(hi);
    out[4 * j] = a.x;
    out[4 * j + 1] = a.y;
    out[4 * j + 2] = b.x;
    out[4 * j + 3] = b.y;
  }
}

// One code's value before the scale.
template <KvScheme S>
__device__ __forceinline__ float kv_value(uint8_t code) {
  return __low2float(kv_codes2<S>(code));
}

// The code of v under `scale` (kvq::quantize): fp8 by the hardware conversion from sm_89 on
// (__nv_cvt_float_to_fp8 gives quant.h's codes, the Fp8Codec gpu test checks every one),
// CUDA's software conversion below.
template <KvScheme S>
__device__ __forceinline__ uint8_t kv_quantize(float v, float scale) {
  if constexpr (S == KvScheme::fp8) {
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v / scale, __NV_SATFINITE, __NV_E4M3));
  } else {
    return static_cast<uint8_t>(quant::quantize_int8(v, scale));
  }
}

// One (token, kv head) vector held by a warp, lane l holding elements l E .. l E + E - 1,
// quantized as kv_quant.h says: amax over the warp, the scale, the codes. Every lane writes
// its codes to `codes` (the cache's row) and, where not null, to `copy` (shared memory);
// lane 0 writes the scale to `*scale`. Returns the scale to every lane.
template <KvScheme S, int E>
__device__ __forceinline__ float kv_store_warp(const float (&v)[E], int lane, uint8_t* codes, uint8_t* copy,
                                               float* scale) {
  float amax = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) amax = fmaxf(amax, fabsf(v[e]));
  const float s = kvq::scale_of(warp_max(amax), S);
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const uint8_t q = kv_quantize<S>(v[e], s);
    codes[lane * E + e] = q;
    if (copy) copy[lane * E + e] = q;
  }
  if (lane == 0) *scale = s;
  return s;
}

}  // namespace db::cuda
