// What the tests of the batched linear kernels (the tiles GEMV, the skinny GEMM, the
// mixed-input GEMM) share: a matrix's weights and a batch's activations drawn from one seed, a
// call on a poisoned or y0-filled output, and the check of y = W x (y += W x) against a
// double-precision CPU reference within the kernel's bound.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "decodebench/half.h"
#include "decodebench/quant.h"
#include "gpu_common.cuh"
#include "parallel_fill.h"

namespace dbtest {

// A [rows, cols] matrix W (as its test holds it: a QuantMatrix, or fp16 bits) and a batch's
// activations.
template <class W>
struct LinearInputs {
  int64_t rows, cols, batch;
  W w;
  std::vector<uint16_t> x;  // [batch, cols] fp16 bits
  std::vector<float> y0;    // [batch, rows]: y before an accumulating call
};

// W's values normal (sd 0.02) from the generator's first number, kept as `hold` makes them;
// then x and y0 normal (sd 1) from the same generator.
template <class Hold>
auto linear_inputs(int64_t rows, int64_t cols, int64_t batch, unsigned seed, Hold hold) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> xd(0.f, 1.f);
  using W = decltype(hold(std::vector<float>()));
  LinearInputs<W> in{rows, cols, batch, hold(normal_values(rows * cols, 0.f, 0.02f, rng())), {}, {}};
  in.x.resize(static_cast<size_t>(batch * cols));
  for (auto& h : in.x) h = db::f32_to_f16(xd(rng));
  in.y0.resize(static_cast<size_t>(batch * rows));
  for (float& v : in.y0) v = xd(rng);
  return in;
}

// The same, the weights quantized to `scheme` (int4 in groups of `group`, with or without zero
// points).
inline LinearInputs<db::QuantMatrix> quantized_inputs(int64_t rows, int64_t cols, int64_t batch,
                                                      unsigned seed, db::Scheme scheme, int group,
                                                      bool zero_point) {
  return linear_inputs(rows, cols, batch, seed, [&](const std::vector<float>& w) {
    return db::quantize_matrix(w.data(), rows, cols, scheme, group, zero_point);
  });
}

// Row r of W in float: the values the kernel's operands hold.
inline void row_values(const db::QuantMatrix& q, int64_t r, std::vector<float>& row) {
  q.row(r, row.data());
}
inline void row_values(const std::vector<uint16_t>& w, int64_t r, std::vector<float>& row) {
  const int64_t cols = static_cast<int64_t>(row.size());
  for (int64_t k = 0; k < cols; ++k) row[static_cast<size_t>(k)] = db::f16_to_f32(w[r * cols + k]);
}

// y [batch, rows] after `launch()` writes it into `y`: poisoned before, or (accumulating) holding
// y0.
template <class W, class Launch>
std::vector<float> call_into(DeviceBuffer<float>& y, const LinearInputs<W>& in, bool accumulate,
                             Launch launch) {
  if (accumulate)
    y.upload(in.y0);
  else
    y.poison();
  launch();
  CUDA_CHECK(cudaDeviceSynchronize());
  return y.download();
}

// Every sequence of every row of the small shapes; of the large ones every stride-th row and the
// last 128 (the padded or last tile's among them), so that the reference stays at ~10^8
// multiply-adds. |got - ref| stays within bound(sum |w x|, ref), and every output was written.
template <class W, class Bound>
void expect_reference(const LinearInputs<W>& in, bool accumulate, const std::vector<float>& got, Bound bound,
                      const std::string& what) {
  const int64_t rows = in.rows, cols = in.cols, batch = in.batch;
  const int64_t stride = std::max<int64_t>(1, rows * cols * batch / 100'000'000);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    if (r % stride != 0 && r < rows - 128) continue;
    row_values(in.w, r, row);
    for (int64_t s = 0; s < batch; ++s) {
      double ref = accumulate ? in.y0[s * rows + r] : 0.0, mag = 0.0;
      for (int64_t k = 0; k < cols; ++k) {
        const double t = static_cast<double>(row[k]) * db::f16_to_f32(in.x[s * cols + k]);
        ref += t;
        mag += std::fabs(t);
      }
      const float v = got[s * rows + r];
      ASSERT_FALSE(std::isnan(v)) << what << " row " << r << " sequence " << s << " was not written";
      ASSERT_LE(std::fabs(v - ref), bound(mag, ref))
          << what << " row " << r << " sequence " << s << ": got " << v << ", reference " << ref;
    }
  }
}

// y = W x (accumulating: y += W x) by `launch(x, y)` matches the reference within `bound`, and a
// second call gives the same bits.
template <class W, class Launch, class Bound>
void expect_reference_and_same_bits(const LinearInputs<W>& in, bool accumulate, Launch launch, Bound bound,
                                    const std::string& what, const std::string& why_same = "") {
  DeviceBuffer<uint16_t> x(in.x);
  DeviceBuffer<float> y(in.y0.size());
  const auto run = [&] {
    return call_into(y, in, accumulate, [&] { launch(reinterpret_cast<const __half*>(x.p), y.p); });
  };
  const std::vector<float> got = run();
  expect_reference(in, accumulate, got, bound, what);
  EXPECT_EQ(run(), got) << what << ": a second call gave other bits" << why_same;
}

}  // namespace dbtest
