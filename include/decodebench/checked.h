// Arithmetic on sizes that come from input (configs, adapter ranks, command-line counts,
// tensor shapes): a db::Error that says what overflowed instead of a wrapped value, which in
// signed arithmetic is undefined behaviour and in sizes a wrong allocation.
#pragma once

#include <cstdint>

#include "decodebench/error.h"

namespace db {

inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) fail("{}: {} x {} overflows 64-bit integers", what, a, b);
  return r;
}

inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) fail("{}: {} + {} overflows 64-bit integers", what, a, b);
  return r;
}

}  // namespace db
