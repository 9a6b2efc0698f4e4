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
// Rounding the scale up to fp16 keeps every element within scale/2 of its original value.
// rintf (round half to even) and IEEE division behave identically on host and device.
#pragma once

#include <cmath>

#include "decodebench/half.h"

namespace db::quant {

constexpr int kInt8Max = 127;
constexpr int kInt4Max = 15;
constexpr int kInt4SymmetricZero = 8;

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

}  // namespace db::quant
