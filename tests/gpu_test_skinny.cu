// The batched step's skinny GEMM (kernels/skinny.cu) against a double-precision CPU
// reference: every scheme, shapes that are not multiples of any tile and the real 8b shapes,
// batches from 1 to past one launch's 64 columns, store and accumulate, int4 groups of 32 to
// 128 with and without zero points; and the same bits on a second call.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "decodebench/half.h"
#include "gpu_common.cuh"
#include "gpu_linear_reference.cuh"
#include "skinny.cuh"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;
using namespace dbtest;

namespace {

struct Case {
  Scheme scheme;
  int64_t rows, cols, batch;
  int group = 128;  // int4
  bool zero_point = true;
  bool accumulate = false;
};

std::string name(const Case& c) {
  return fmt::format("{}_{}x{}_b{}{}{}{}", to_string(c.scheme), c.rows, c.cols, c.batch,
                     c.scheme == Scheme::int4 ? fmt::format("_g{}", c.group) : "", c.zero_point ? "" : "_sym",
                     c.accumulate ? "_acc" : "");
}

// The tensor cores multiply fp16 operands exactly and add in fp32; int4's operands are
// (q - zero) * scale rounded to fp16 once, 2^-11 of each product at most. So |y - ref| is
// bounded by 2^-11 sum |w x| for int4 and well under it for fp16, int8 and fp8 (fp32 sums of
// exact products: E4M3 values are exact in fp16); 2^-12 leaves those the rounding of the fp32
// additions.
double tolerance(Scheme s) {
  return s == Scheme::int4 ? 1.0 / 2048 : 1.0 / 4096;
}

class SkinnyTest : public ::testing::TestWithParam<Case> {};

TEST_P(SkinnyTest, EveryColumnMatchesTheCpuReference) {
  REQUIRE_GPU();
  const Case c = GetParam();
  const LinearInputs<QuantMatrix> in =
      quantized_inputs(c.rows, c.cols, c.batch, static_cast<unsigned>(c.rows * 31 + c.cols * 7 + c.batch),
                       c.scheme, c.group, c.zero_point);
  DeviceQuant dq(in.w);
  if (c.scheme == Scheme::int4) repack_int4(dq.m, nullptr, false);
  const char* why = nullptr;
  ASSERT_TRUE(skinny_supports(dq.m, &why)) << name(c) << ": " << why;
  DeviceBuffer<uint8_t> ws(skinny_workspace_bytes(c.rows, c.cols, c.batch));
  CUDA_CHECK(cudaMemset(ws.p, 0, ws.n));
  const double tol = tolerance(c.scheme);
  expect_reference_and_same_bits(
      in, c.accumulate,
      [&](const __half* x, float* y) { gemm_skinny(dq.m, x, c.batch, y, c.accumulate, ws.p, nullptr); },
      [tol](double mag, double) { return tol * mag + 1e-5; }, name(c), " (the split order is fixed)");
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8}) {
    // Not multiples of a tile (rows) or of a chunk set (columns), across the batch shapes.
    for (int64_t b : {1, 2, 3, 8, 9, 17, 33, 64, 65})
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{7, 256}, {130, 1088}, {1000, 2048}})
        v.push_back({s, rows, cols, b, cols % 128 == 0 ? 128 : 32});
    // The 8b shapes: qkv, o, gate/up, down at the batches of the sweep's knees.
    for (int64_t b : {2, 16, 64})
      for (auto [rows, cols] :
           {std::pair<int64_t, int64_t>{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}})
        v.push_back({s, rows, cols, b});
    v.push_back({s, 1000, 2048, 17, 128, true, true});  // accumulate into y
  }
  for (int g : {32, 64})
    for (bool zp : {true, false}) v.push_back({Scheme::int4, 130, 1024, 17, g, zp});
  v.push_back({Scheme::int4, 4096, 4096, 16, 128, false});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, SkinnyTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return name(info.param); });

// Every instantiated shape of the kernel (skinny_kernel_shapes) on a matrix that is not a
// multiple of any of its tiles, against the default shape's result within the bound.
TEST(Skinny, EveryTunedShapeGivesTheDefaultsResult) {
  REQUIRE_GPU();
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8}) {
    const int64_t rows = 200, cols = 1536;
    std::mt19937 rng(5);
    std::normal_distribution<float> d(0.f, 0.05f);
    std::vector<float> w(static_cast<size_t>(rows * cols));
    for (float& v : w) v = d(rng);
    const QuantMatrix q = quantize_matrix(w.data(), rows, cols, s, 64, true);
    DeviceQuant dq(q);
    if (s == Scheme::int4) repack_int4(dq.m, nullptr, false);
    std::vector<uint16_t> x(static_cast<size_t>(64 * cols));
    for (auto& h : x) h = f32_to_f16(d(rng) * 20);
    DeviceBuffer<uint16_t> dx(x);
    DeviceBuffer<float> y(static_cast<size_t>(64 * rows));
    DeviceBuffer<uint8_t> ws(skinny_workspace_bytes(rows, cols, 64));
    CUDA_CHECK(cudaMemset(ws.p, 0, ws.n));
    for (const SkinnyKernelShape& k : skinny_kernel_shapes()) {
      const int64_t batch = k.max_batch - 3;  // 5, 13, 29, 61: a ragged last group of 8
      const __half* xp = reinterpret_cast<const __half*>(dx.p);
      y.poison();
      gemm_skinny(dq.m, xp, batch, y.p, false, ws.p, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> want = y.download();
      for (int bps : {1, 8}) {
        y.poison();
        gemm_skinny_tuned(dq.m, xp, batch, y.p, false, ws.p, {k.row_tiles, k.chunks, bps}, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> got = y.download();
        for (int64_t i = 0; i < batch * rows; ++i)
          ASSERT_NEAR(got[i], want[i], 1e-3 * (1 + std::fabs(want[i])))
              << to_string(s) << " batch " << batch << " m" << k.row_tiles << "u" << k.chunks << "b" << bps
              << " element " << i;
      }
    }
  }
}

// The shape tune_skinny picks is the default or an instantiated shape for the batch, with every
// field set, no slower than the default by its own timing, and computes the default's result.
TEST(Skinny, TheTunedShapeIsAnInstantiatedOneAndGivesTheDefaultsResult) {
  REQUIRE_GPU();
  const int64_t rows = 200, cols = 1536;
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.f, 0.05f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& v : w) v = d(rng);
  for (Scheme s : {Scheme::int8, Scheme::int4, Scheme::fp8}) {
    const QuantMatrix q = quantize_matrix(w.data(), rows, cols, s, 64, true);
    DeviceQuant a(q), b(q);  // two copies, as a layer's matrix over two layers
    if (s == Scheme::int4) repack_int4(a.m, nullptr, false), repack_int4(b.m, nullptr, false);
    std::vector<uint16_t> x(static_cast<size_t>(64 * cols));
    for (auto& h : x) h = f32_to_f16(d(rng) * 20);
    DeviceBuffer<uint16_t> dx(x);
    const __half* xp = reinterpret_cast<const __half*>(dx.p);
    DeviceBuffer<float> y(static_cast<size_t>(64 * rows));
    DeviceBuffer<uint8_t> ws(skinny_workspace_bytes(rows, cols, 64));
    CUDA_CHECK(cudaMemset(ws.p, 0, ws.n));
    for (int64_t batch : {5, 13, 61}) {
      const SkinnyTiming c = tune_skinny({&a.m, &b.m}, xp, batch, y.p, ws.p, nullptr);
      const std::string what =
          fmt::format("{} batch {} {}", to_string(s), batch, skinny_shape_label(c.shape));
      const SkinnyShape def = skinny_resolved(s, batch, {});
      EXPECT_EQ(skinny_shape_label(c.default_shape), skinny_shape_label(def)) << what;
      const std::vector<SkinnyKernelShape> shapes = skinny_kernel_shapes();
      const bool listed = std::any_of(shapes.begin(), shapes.end(), [&](const SkinnyKernelShape& k) {
        return k.max_batch == skinny_max_batch(batch) && k.row_tiles == c.shape.row_tiles &&
               k.chunks == c.shape.chunks;
      });
      EXPECT_TRUE(skinny_shape_label(c.shape) == skinny_shape_label(def) || listed) << what;
      EXPECT_GT(c.shape.blocks_per_sm, 0) << what;
      EXPECT_GT(c.us, 0) << what;
      EXPECT_LE(c.us, c.default_us) << what;
      y.poison();
      gemm_skinny(a.m, xp, batch, y.p, false, ws.p, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> want = y.download();
      y.poison();
      gemm_skinny_tuned(a.m, xp, batch, y.p, false, ws.p, c.shape, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> got = y.download();
      for (int64_t i = 0; i < batch * rows; ++i)
        ASSERT_NEAR(got[i], want[i], 1e-3 * (1 + std::fabs(want[i]))) << what << " element " << i;
    }
  }
}

TEST(Skinny, RefusesTheFragmentLayoutWithAReason) {
  DeviceMatrix m;
  m.scheme = Scheme::int4;
  m.rows = 8;
  m.cols = 1024;
  m.group_size = 128;
  m.int4_repacked = true;
  m.int4_frag = true;
  const char* why = nullptr;
  EXPECT_FALSE(skinny_supports(m, &why));
  ASSERT_NE(why, nullptr);
  m.int4_frag = false;
  EXPECT_TRUE(skinny_supports(m, &why));
  m.scheme = Scheme::fp16;
  m.cols = 1020;
  EXPECT_FALSE(skinny_supports(m, &why));
}

}  // namespace
