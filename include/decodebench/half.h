// fp16 and bf16 conversions written with integer operations only, so the host and the
// device round identically (round-to-nearest-even, subnormals and inf/nan kept). Weights
// travel as uint16_t bit patterns on the host; device code reinterprets them as __half.
#pragma once

#include "decodebench/host_device.h"

namespace db {

DB_HOST_DEVICE uint16_t f32_to_f16(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {                                               // half subnormal range
    if (ax < 0x33000000u) return static_cast<uint16_t>(sign);           // <= 2^-25 rounds to 0
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // value / 2^-24 = m >> shift
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t h = (ax >> 13) - (112u << 10);
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

DB_HOST_DEVICE float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) return bits_float(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return bits_float(sign);
    e = 113;  // normalise the subnormal
    while ((m & 0x400u) == 0) {
      m <<= 1;
      --e;
    }
    m &= 0x3ffu;
    return bits_float(sign | (e << 23) | (m << 13));
  }
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

DB_HOST_DEVICE float bf16_to_f32(uint16_t b) {
  return bits_float(static_cast<uint32_t>(b) << 16);
}

// Smallest fp16 value >= f for finite f > 0 (used for scales so that |q| never exceeds the
// integer range after rounding the scale to fp16).
DB_HOST_DEVICE uint16_t f32_to_f16_up(float f) {
  uint16_t h = f32_to_f16(f);
  if (f16_to_f32(h) < f) ++h;
  return h;
}

}  // namespace db
