// Marks functions that must compile, and give bit-identical results, on the host and the
// device: the fp16 conversions, the quantizers and the synthetic weight generator.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DB_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define DB_HOST_DEVICE inline
#endif

namespace db {

DB_HOST_DEVICE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

DB_HOST_DEVICE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

}  // namespace db
