// The canonical quantization arithmetic, shared by the CPU reference, the file writer and
// the device-side quantizer (synthetic weights, quantize-on-load, merged adapters), so
// that every producer of a quantized weight agrees bit for bit.
//
//   int8: per output row, symmetric.   scale = fp16_up(amax / 127)
//                                      q = clamp(rint(w / scale), -127, 127)
//                                      w' = q * scale
//   int4: per group of `g` columns.    with zero point (default):
//                                        lo = min(min w, 0), hi = max(max w, 0)
//                                        scale = fp16_up((hi - lo) / 15)
//                                        zero = clamp(rint(-lo / scale), 0, 15)
//                                      without: scale = fp16_up(amax / 7), zero = 8
//                                      q = clamp(rint(w / scale) + zero, 0, 15)
//                                      w' = (q - zero) * scale
//   fp8:  per output row, E4M3.        scale = amax / 448 (float; 1 for an all-zero row)
//                                      q = e4m3(w / scale), to nearest even, saturating
//                                      w' = value(q) * scale
// Rounding the scale up to fp16 keeps every element within scale/2 of its original value.
// fp8 keeps its scale in float, as published FP8 checkpoints do (docs/weights.md).
// rintf (round half to even) and IEEE division behave identically on host and device.
#pragma once

#include <cmath>

#include "decodebench/half.h"

namespace db::quant {

constexpr int kInt8Max = 127;
constexpr int kInt4Max = 15;
constexpr int kInt4SymmetricZero = 8;
constexpr float kFp8Max = 448.f;  // the largest finite E4M3 value

struct Int4Params {
  uint16_t scale;  // fp16 bits
  uint8_t zero;    // 0..15
};

DB_HOST_DEVICE float clampf(float v, float lo, float hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// A scale of zero (an all-zero row or group) would divide by zero: any positive scale
// represents zeros exactly, so use 1.
DB_HOST_DEVICE uint16_t safe_scale(float s) {
  return s > 0.f ? f32_to_f16_up(s) : f32_to_f16(1.f);
}

DB_HOST_DEVICE uint16_t int8_scale(float amax) {
  return safe_scale(amax / static_cast<float>(kInt8Max));
}

DB_HOST_DEVICE int8_t quantize_int8(float w, float scale) {
  return static_cast<int8_t>(clampf(rintf(w / scale), -kInt8Max, kInt8Max));
}

DB_HOST_DEVICE float dequantize_int8(int8_t q, float scale) {
  return static_cast<float>(q) * scale;
}

DB_HOST_DEVICE Int4Params int4_params(float wmin, float wmax, bool zero_point) {
  Int4Params p;
  if (zero_point) {
    const float lo = wmin < 0.f ? wmin : 0.f;
    const float hi = wmax > 0.f ? wmax : 0.f;
    p.scale = safe_scale((hi - lo) / static_cast<float>(kInt4Max));
    const float s = f16_to_f32(p.scale);
    p.zero = static_cast<uint8_t>(clampf(rintf(-lo / s), 0.f, static_cast<float>(kInt4Max)));
  } else {
    const float amax = fmaxf(fabsf(wmin), fabsf(wmax));
    p.scale = safe_scale(amax / 7.f);
    p.zero = kInt4SymmetricZero;
  }
  return p;
}

DB_HOST_DEVICE uint8_t quantize_int4(float w, float scale, int zero) {
  return static_cast<uint8_t>(
      clampf(rintf(w / scale) + static_cast<float>(zero), 0.f, static_cast<float>(kInt4Max)));
}

DB_HOST_DEVICE float dequantize_int4(uint8_t q, float scale, int zero) {
  return static_cast<float>(static_cast<int>(q) - zero) * scale;
}

// Canonical int4 packing: two values per byte, the even column in the low nibble.
DB_HOST_DEVICE uint8_t pack_int4(uint8_t even, uint8_t odd) {
  return static_cast<uint8_t>((even & 0xf) | ((odd & 0xf) << 4));
}
DB_HOST_DEVICE uint8_t unpack_int4(uint8_t byte, int col) {
  return (col & 1) ? (byte >> 4) : (byte & 0xf);
}

// ---- E4M3: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, 0x7f and
// 0xff are NaN, 448 the largest finite value, subnormals m * 2^-9. The same codes and
// rounding as CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) and
// __nv_cvt_fp8x2_to_halfraw2 (tests/test_quant.cpp checks all 256 codes; the gpu tests
// compare with the device's conversion).

// The value of a code (exact in float and in fp16).
DB_HOST_DEVICE float fp8_e4m3_to_f32(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t e = (code >> 3) & 0xfu, m = code & 0x7u;
  if (e == 0xfu && m == 0x7u) return bits_float(sign | 0x7fc00000u);  // NaN
  if (e == 0) return bits_float(sign | float_bits(static_cast<float>(m) * (1.f / 512.f)));
  return bits_float(sign | ((e - 7u + 127u) << 23) | (m << 20));
}

// The nearest code (ties to even), saturating: beyond 448 (infinity included) gives +-448,
// NaN gives 0x7f with the sign.
DB_HOST_DEVICE uint8_t f32_to_fp8_e4m3(float f) {
  const uint32_t x = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t abits = x & 0x7fffffffu;
  if (abits > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  const float a = bits_float(abits);
  if (a > kFp8Max) return static_cast<uint8_t>(sign | 0x7eu);
  if (a < 1.f / 64.f)  // below the smallest normal: m * 2^-9, m = 8 is the smallest normal's code
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(rintf(a * 512.f)));
  const int e = static_cast<int>(abits >> 23) - 127;                 // -6..8
  const float mant = bits_float((abits & 0x7fffffu) | 0x3f800000u);  // [1, 2)
  // (mant - 1) * 8 is exact; a rounded-up 8 carries into the exponent.
  const uint32_t q = static_cast<uint32_t>(rintf((mant - 1.f) * 8.f));
  return static_cast<uint8_t>(sign | ((static_cast<uint32_t>(e + 7) << 3) + q));
}

// A zero scale (an all-zero row) would divide by zero, as would one that underflows: any
// positive scale represents zeros exactly, so use 1.
DB_HOST_DEVICE float fp8_scale(float amax) {
  const float s = amax / kFp8Max;
  return s > 0.f ? s : 1.f;
}

DB_HOST_DEVICE uint8_t quantize_fp8(float w, float scale) {
  return f32_to_fp8_e4m3(w / scale);
}

DB_HOST_DEVICE float dequantize_fp8(uint8_t q, float scale) {
  return fp8_e4m3_to_f32(q) * scale;
}

}  // namespace db::quant
