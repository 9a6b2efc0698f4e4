// The exact causal attention of one query of a prefill chunk, in double precision, and how far
// an fp16-in, fp32-accumulate, fp16-out kernel may be from it: shared by the gpu tests
// (tests/gpu_test_prefill.cu) and the lab's bench (tests/bench/flash_wgmma_bench.cu).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dbtest {

// The exact output of one (row, head) and the scales of its rounding errors.
struct RefRow {
  std::vector<double> o;    // [head_dim]
  std::vector<double> abs;  // [head_dim]: sum_k p_k |v_k,d| / l (A in tolerance_of)
  double l = 0;             // sum_k p_k with the largest p = 1
  double qk_abs = 0;        // max_k sum_d |q_d k_k,d|
  int64_t keys = 0;
};

// Row `row` of a chunk from position p0 (the query at p0 + row, attending to positions 0 ..
// p0 + row), query head `head`: q [rows][heads][head_dim] (already scaled), k and v the cache
// [positions][kv_heads][head_dim], query head h reading kv head h / (heads / kv_heads).
inline RefRow reference_row(const std::vector<float>& q, const std::vector<float>& k,
                            const std::vector<float>& v, int heads, int kv_heads, int head_dim, int64_t p0,
                            int64_t row, int head) {
  const int kvh = head / (heads / kv_heads);
  const float* qr = &q[(size_t(row) * heads + head) * head_dim];
  RefRow r;
  r.keys = p0 + row + 1;
  std::vector<double> s(static_cast<size_t>(r.keys));
  double mx = -INFINITY;
  for (int64_t key = 0; key < r.keys; ++key) {
    const float* kr = &k[(size_t(key) * kv_heads + kvh) * head_dim];
    double dot = 0, a = 0;
    for (int d = 0; d < head_dim; ++d) {
      dot += double(qr[d]) * kr[d];
      a += std::fabs(double(qr[d]) * kr[d]);
    }
    s[size_t(key)] = dot;
    mx = std::max(mx, dot);
    r.qk_abs = std::max(r.qk_abs, a);
  }
  r.o.assign(size_t(head_dim), 0.0);
  r.abs.assign(size_t(head_dim), 0.0);
  for (int64_t key = 0; key < r.keys; ++key) {
    const double p = std::exp(s[size_t(key)] - mx);
    r.l += p;
    const float* vr = &v[(size_t(key) * kv_heads + kvh) * head_dim];
    for (int d = 0; d < head_dim; ++d) {
      r.o[size_t(d)] += p * vr[d];
      r.abs[size_t(d)] += p * std::fabs(double(vr[d]));
    }
  }
  for (int d = 0; d < head_dim; ++d) {
    r.o[size_t(d)] /= r.l;
    r.abs[size_t(d)] /= r.l;
  }
  return r;
}

// How far the kernel's fp16 output may be from the exact value o: relative errors of each term
// p v, times A = sum p|v| / l, in numerator and denominator alike: P rounded to fp16 (2^-11 a
// term), S's fp32 dot product of head_dim terms through exp (head_dim 2^-23 sum|q k| in the
// exponent) and ex2.approx with its argument's rounding (2^-16), the fp32 sums over n keys (n
// 2^-23); plus fp16 subnormals of P (2^-25 a term, over l) and the output's rounding (2^-11
// |o| + 2^-24). A misplaced or unmasked key moves a small chunk's output by far more.
inline double tolerance_of(double o, double abs, double l, double qk_abs, int64_t keys, int head_dim) {
  const double e_p = head_dim * std::ldexp(qk_abs, -23) + std::ldexp(1.0, -16);
  const double e_sum = double(keys) * std::ldexp(1.0, -23);
  return (std::ldexp(1.0, -11) + 2 * e_p + 2 * e_sum) * abs + double(keys) * std::ldexp(1.0, -25) / l +
         std::ldexp(std::fabs(o), -11) + std::ldexp(1.0, -24);
}

// tolerance_of in words, for reports.
constexpr const char* kToleranceText =
    "(2^-11 + 2 e_p + 2 n 2^-23) sum p|v|/l + n 2^-25/l + 2^-11|o| + 2^-24";

// Two kernels each within tolerance_of of the exact value are within twice its largest value of
// each other: at sum p|v|/l <= max|v|, l >= 1 and sum|q k| at its bound for the data.
inline double kernels_tolerance(double o, double max_abs_v, double qk_abs_max, int64_t keys, int head_dim) {
  return 2 * tolerance_of(o, max_abs_v, 1.0, qk_abs_max, keys, head_dim);
}

}  // namespace dbtest
