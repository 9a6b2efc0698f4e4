// What the tiles GEMV's tests of every scheme (int4, int8, fp16) share: int8's and fp16's cases
// and the mma chain's bound, the kernel's call at a shape, the checks against the reference at
// the default and at every launchable shape, the default shapes, what it takes and refuses to
// launch, and the checks of the tiles' fp16 copy.
#pragma once

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "decodebench/linear_shapes.h"
#include "gemv_tiles.cuh"
#include "gpu_common.cuh"
#include "gpu_linear_reference.cuh"
#include "prefill.cuh"
#include "weights.cuh"

namespace dbtest {

// A case of the int8 and fp16 tests: [rows, cols] at `batch` sequences, y stored or accumulated.
struct TilesCase {
  int64_t rows, cols, batch;
  bool accumulate = false;
};

// "4096x14336_b8_acc": the tests' parameter names.
inline std::string tiles_case_name(const TilesCase& c) {
  return fmt::format("{}x{}_b{}{}", c.rows, c.cols, c.batch, c.accumulate ? "_acc" : "");
}

// The seed of a case's inputs (linear_inputs).
inline unsigned tiles_case_seed(const TilesCase& c) {
  return static_cast<unsigned>(c.rows * 37 + c.cols * 5 + c.batch);
}

// The bound on |got - exact| of one output of the int8 and fp16 tiles, relative to sum |w x|,
// for terms exact in fp32 (each scheme's test says why its are). A warp's accumulators take
// every mma of its steps: a term passes through at most 16 additions inside its mma (counted one
// by one, the tensor cores' order not being specified) and one a later mma of the warp
// (`mmas_a_step` a step, ceil(steps / 4) steps a warp at 4 warps a block or more), one a warp
// when the warps' sums meet (8 at most) and `scale_roundings` more: each rounding by at most
// 2^-23 of the partial sum (the tensor cores' fp32 additions truncate).
inline double mma_chain_bound(int64_t steps, int mmas_a_step, int scale_roundings) {
  return std::ldexp(16 + mmas_a_step * ((steps + 3) / 4) + 8 + scale_roundings, -23);
}

// |got - exact| of one output at most `relative` of sum |w x| (each scheme's file derives it),
// and an accumulating call's one more rounding of the result.
inline auto tiles_bound(double relative, bool accumulate) {
  return [=](double mag, double ref) {
    return relative * mag + (accumulate ? std::ldexp(std::fabs(ref), -23) : 0.0) + 1e-30;
  };
}

// y of one call at `shape` (the default: tiles_shape's) on a poisoned (or, accumulating,
// y0-filled) output.
template <class W>
std::vector<float> tiles_call(const db::cuda::DeviceMatrix& m, const LinearInputs<W>& in, bool accumulate,
                              const DeviceBuffer<uint16_t>& x, DeviceBuffer<float>& y,
                              db::TilesShape shape = {}) {
  return call_into(y, in, accumulate, [&] {
    db::cuda::gemv_tiles_shaped(m, reinterpret_cast<const __half*>(x.p), in.batch, y.p, accumulate, shape,
                                nullptr);
  });
}

// The kernel takes the tiles `m` at the batch, matches the reference at its default shape and
// gives the same bits on a second call.
template <class W>
void expect_tiles_reference_and_same_bits(const db::cuda::DeviceMatrix& m, const LinearInputs<W>& in,
                                          bool accumulate, double relative, const std::string& what) {
  const char* why = nullptr;
  ASSERT_TRUE(db::cuda::gemv_tiles_supports(m, in.batch, &why)) << what << ": " << why;
  expect_reference_and_same_bits(
      in, accumulate,
      [&](const __half* x, float* y) {
        db::cuda::gemv_tiles_shaped(m, x, in.batch, y, accumulate, {}, nullptr);
      },
      tiles_bound(relative, accumulate), what);
}

// Every launchable shape (tiles_launchable_shapes: the lab's too) matches the reference.
template <class W>
void expect_every_launchable_shape(const db::cuda::DeviceMatrix& m, const LinearInputs<W>& in,
                                   bool accumulate, double relative, const std::string& name) {
  DeviceBuffer<uint16_t> x(in.x);
  DeviceBuffer<float> y(in.y0.size());
  for (const db::TilesShape& k : db::cuda::tiles_launchable_shapes()) {
    const std::string what =
        fmt::format("{} row tiles {} warps {} ahead {}", name, k.row_tiles, k.warps, k.ahead);
    expect_reference(in, accumulate, tiles_call(m, in, accumulate, x, y, k),
                     tiles_bound(relative, accumulate), what);
  }
}

// The shape gemv_tiles runs for each [rows, cols] of `shape`, in its scheme's tiles, at 2, 8, 9 and
// 16 sequences is an instantiated one.
inline void expect_default_shapes_instantiated(db::MatrixShape shape,
                                               std::initializer_list<std::pair<int64_t, int64_t>> sizes) {
  const std::vector<db::TilesShape> all = db::cuda::tiles_kernel_shapes();
  for (auto [rows, cols] : sizes)
    for (int64_t batch : {2, 8, 9, 16}) {
      shape.rows = rows;
      shape.cols = cols;
      const db::TilesShape s =
          db::cuda::tiles_shape(db::cuda::device_matrix(shape, db::tiles_layout(shape.scheme)), batch);
      EXPECT_TRUE(std::any_of(
          all.begin(), all.end(),
          [&](const db::TilesShape& k) { return k.row_tiles == s.row_tiles && k.warps == s.warps; }))
          << rows << "x" << cols << " batch " << batch << ": " << s.row_tiles << " row tiles x " << s.warps
          << " warps";
    }
}

// gemv_tiles takes a [200, 1024] matrix of `scheme` (int8, fp16) in its tiles at 2 and 16
// sequences, not at 17, and not in the canonical layout: the reason it gives for the last.
inline const char* expect_takes_up_to_16_sequences_in_tiles(db::Scheme scheme) {
  const db::MatrixShape shape{scheme, 200, 1024, 0, false};
  const db::cuda::DeviceMatrix m = db::cuda::device_matrix(shape, db::tiles_layout(scheme));
  const char* why = nullptr;
  EXPECT_TRUE(db::cuda::gemv_tiles_supports(m, 2, &why));
  EXPECT_TRUE(db::cuda::gemv_tiles_supports(m, 16, &why));
  EXPECT_FALSE(db::cuda::gemv_tiles_supports(m, 17, &why));
  EXPECT_FALSE(
      db::cuda::gemv_tiles_supports(db::cuda::device_matrix(shape, db::MatrixLayout::canonical), 2, &why));
  return why;
}

// gemv_tiles refuses `m` before launching, `reason` in its message.
inline void expect_launch_refused(const db::cuda::DeviceMatrix& m, const std::string& reason) {
  try {
    db::cuda::gemv_tiles(m, nullptr, 2, nullptr, false, nullptr);
    ADD_FAILURE() << "a launch the kernel does not take";
  } catch (const db::Error& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

// Rows [r0, r1) of `m` copied to fp16.
inline std::vector<uint16_t> copy_rows(const db::cuda::DeviceMatrix& m, int64_t r0, int64_t r1) {
  DeviceBuffer<uint16_t> out(static_cast<size_t>((r1 - r0) * m.cols));
  out.poison();
  db::cuda::dequantize_rows_to_f16(m, r0, r1, reinterpret_cast<__half*>(out.p), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  return out.download();
}

// The canonical kernel's fp16 copy of the canonical matrix `m`.
inline std::vector<uint16_t> canonical_fp16(const db::cuda::DeviceMatrix& m) {
  DeviceBuffer<uint16_t> out(static_cast<size_t>(m.rows * m.cols));
  db::cuda::dequantize_to_f16(m, reinterpret_cast<__half*>(out.p), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  return out.download();
}

// The fp16 copy of the tiles `m` is `whole` (the canonical matrix's fp16 bits), and so is any
// block of rows of it (at multiples of 8, as the copies' blocks start, and not of 16);
// matrix_rows cuts the tiles at whole tiles only.
inline void expect_fp16_copies(const db::cuda::DeviceMatrix& m, const std::vector<uint16_t>& whole,
                               const std::string& what) {
  DeviceBuffer<uint16_t> tiled(whole.size());
  tiled.poison();
  db::cuda::dequantize_any_to_f16(m, reinterpret_cast<__half*>(tiled.p), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  ASSERT_EQ(tiled.download(), whole) << what;
  const int64_t R = m.rows, cols = m.cols;
  for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, R}, {8, 40}, {16, R}, {24, 25}, {R - 8, R}}) {
    const std::vector<uint16_t> want(whole.begin() + r0 * cols, whole.begin() + r1 * cols);
    EXPECT_EQ(copy_rows(m, r0, r1), want) << what << " rows " << r0 << " to " << r1;
  }
  // A cut at a whole tile is the tiles of those rows; elsewhere it is refused.
  const db::cuda::DeviceMatrix cut = db::cuda::matrix_rows(m, 16, R);
  EXPECT_EQ(cut.rows, R - 16);
  const std::vector<uint16_t> want(whole.begin() + 16 * cols, whole.end());
  EXPECT_EQ(copy_rows(cut, 0, R - 16), want) << what;
  EXPECT_THROW(db::cuda::matrix_rows(m, 8, R), db::Error) << what;
}

}  // namespace dbtest
