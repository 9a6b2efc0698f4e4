// How far an fp8 or int8 KV cache may move a model's logits from an fp16 cache's: the bound
// the CPU tests (test_kv_cache.cpp) hold the reference to, and that GPU tests build on.
#pragma once

#include <cmath>

#include "decodebench/config.h"

namespace db_test {

// The bound on the logits' move relative to the largest logit, from the scheme's rounding of
// one stored (token, kv head) vector v of head_dim d values (kv_quant.h), as a relative error
// e = ||v' - v|| / ||v||:
//   int8: every value within half a step, scale / 2 = amax / 254, and the largest exact, so
//         ||v' - v|| <= sqrt(d - 1) amax / 254 while ||v|| >= amax: e <= sqrt(d - 1) / 254
//         (0.0219 at d = 32).
//   fp8:  E4M3 keeps 3 mantissa bits: a normal value within half a unit, 2^-4 of itself; one
//         below the normal range (|v / scale| < 2^-6) within half the subnormal step, 2^-10
//         scale = 2^-10 amax / 448: e <= 2^-4 + sqrt(d) 2^-10 / 448 (0.0626 at d = 32).
// Each layer's attention reads its cache twice: K through the scores (q . k moved by at most
// e ||q|| ||k||) and V through their weighted sum (a convex combination of vectors each moved
// by at most e of itself), so each of the 2 L reads moves that layer's attention output by
// about e of itself. Independent roundings add in quadrature: the logits move by about
// e sqrt(2 L) of themselves. As the weights' quantized golden test does with its estimate,
// this allows 3x that, for the RMS of the move against the logits' and for its largest
// element against the largest logit. An fp16 cache: 0 (the CPU reference keeps it in float).
inline double kv_logits_bound(const db::ModelConfig& c, db::KvScheme s) {
  if (s == db::KvScheme::fp16) return 0;
  const double d = static_cast<double>(c.head_dim);
  const double e = s == db::KvScheme::int8 ? std::sqrt(d - 1) / 254
                                           : std::ldexp(1.0, -4) + std::sqrt(d) * std::ldexp(1.0, -10) / 448;
  return 3 * e * std::sqrt(2.0 * static_cast<double>(c.num_hidden_layers));
}

}  // namespace db_test
