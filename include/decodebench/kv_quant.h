// The KV cache's schemes (--kv-cache): their arithmetic and their layout in memory, shared by
// the CPU reference, the accounting and the CUDA kernels so that every one of them stores and
// reads the same values.
//
//   fp16: K and V as computed, rounded to fp16 (the CPU reference keeps them in float).
//   fp8:  each (token, kv head) vector of head_dim values v, E4M3 codes with one float scale:
//           scale = amax(|v|) / 448 (1 for an all-zero vector)
//           q = e4m3(v / scale), to nearest even, saturating;   v' = value(q) * scale
//   int8: the same vectors, symmetric:
//           scale = amax(|v|) / 127 (1 for an all-zero vector)
//           q = clamp(rint(v / scale), -127, 127);              v' = q * scale
// The vectors quantized are K after its norm and RoPE and V, in float, as the step computes
// them; attention reads v' for every position, the new token's included. Scores and P V
// accumulate in float.
//
// One layer's cache of one sequence at P positions (each of K and V):
//   fp16:      [P, kv_dim] halves
//   fp8, int8: [P, kv_dim] one-byte codes, then [P, kv_heads] float scales at byte offset
//              P * kv_dim (a multiple of 8: head_dim is)
// and sequence s's lies at s * sequence_bytes(...) from sequence 0's: the codes and scales
// rounded up to a multiple of 16 bytes, so that every sequence's rows start 16-byte aligned
// for the kernels' 16-byte loads (fp16's rows always do).
#pragma once

#include <cmath>
#include <cstdint>

#include "decodebench/config.h"
#include "decodebench/quant.h"

namespace db::kvq {

// Bytes of one stored element (2 or 1), and of one (token, kv head) scale (0 or 4).
DB_HOST_DEVICE int element_bytes(KvScheme s) {
  return s == KvScheme::fp16 ? 2 : 1;
}
DB_HOST_DEVICE int scale_bytes(KvScheme s) {
  return s == KvScheme::fp16 ? 0 : 4;
}

// The scale of a vector whose largest magnitude is `amax`.
DB_HOST_DEVICE float scale_of(float amax, KvScheme s) {
  const float top = s == KvScheme::int8 ? static_cast<float>(quant::kInt8Max) : quant::kFp8Max;
  return amax > 0.f ? amax / top : 1.f;
}

// The code of v under `scale`, and the value a code stands for.
DB_HOST_DEVICE uint8_t quantize(float v, float scale, KvScheme s) {
  if (s == KvScheme::int8) return static_cast<uint8_t>(quant::quantize_int8(v, scale));
  return quant::f32_to_fp8_e4m3(v / scale);
}
DB_HOST_DEVICE float dequantize(uint8_t q, float scale, KvScheme s) {
  if (s == KvScheme::int8) return quant::dequantize_int8(static_cast<int8_t>(q), scale);
  return quant::fp8_e4m3_to_f32(q) * scale;
}

// v' of every element of one vector of n values, in place (the CPU reference's store).
inline void round_trip(float* v, int64_t n, KvScheme s) {
  if (s == KvScheme::fp16) return;
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(v[i]));
  const float scale = scale_of(amax, s);
  for (int64_t i = 0; i < n; ++i) v[i] = dequantize(quantize(v[i], scale, s), scale, s);
}

// Bytes of one layer's K (or V) cache of one sequence at `positions` positions: the codes
// (data_bytes) and the scales (scales_bytes); sequence_bytes, the distance from one sequence's
// cache to the next, also its padding to 16 bytes.
DB_HOST_DEVICE uint64_t data_bytes(KvScheme s, int64_t positions, int64_t kv_heads, int64_t head_dim) {
  return static_cast<uint64_t>(element_bytes(s)) * static_cast<uint64_t>(positions) *
         static_cast<uint64_t>(kv_heads) * static_cast<uint64_t>(head_dim);
}
DB_HOST_DEVICE uint64_t scales_bytes(KvScheme s, int64_t positions, int64_t kv_heads) {
  return static_cast<uint64_t>(scale_bytes(s)) * static_cast<uint64_t>(positions) *
         static_cast<uint64_t>(kv_heads);
}
DB_HOST_DEVICE uint64_t sequence_bytes(KvScheme s, int64_t positions, int64_t kv_heads, int64_t head_dim) {
  return (data_bytes(s, positions, kv_heads, head_dim) + scales_bytes(s, positions, kv_heads) + 15) / 16 * 16;
}

}  // namespace db::kvq
