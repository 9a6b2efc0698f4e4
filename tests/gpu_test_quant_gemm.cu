// The batched step's quantized GEMM (kernels/quant_gemm.cu) against a double-precision CPU
// reference: int8, fp8 and int4 (groups of 32, 64 and 128, with and without zero points),
// shapes that are not multiples of a row tile or a 128-column k-tile and the 8b shapes,
// batches inside one block's 128 sequences and past it, store and accumulate, at the default
// shape and at every row-warp count and several column splits; and the same bits on a
// second call.
#include <algorithm>
#include <cmath>
#include <random>

#include "decodebench/half.h"
#include "gpu_common.cuh"
#include "quant_gemm.cuh"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;
using dbtest::DeviceBuffer;
using dbtest::DeviceQuant;

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

// The tensor cores multiply fp16 operands exactly and add in fp32. int4's operands are
// (q - zero) * scale rounded to fp16 once: 2^-11 of each product at most. int8's and fp8's
// are exact (q, and E4M3 values, are fp16 numbers; the row scale multiplies the fp32 sum once),
// so only the fp32 additions round: a lane's chain is at most cols / 16 mma steps plus the
// splits, each adding at most 2^-24 of the running magnitude, under 2^-12 of sum |w x| for
// any input dimension below 2^16.
double tolerance(Scheme s) {
  return s == Scheme::int4 ? 1.0 / 2048 : 1.0 / 4096;
}

class QuantGemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(QuantGemmTest, EveryColumnMatchesTheCpuReferenceAtEveryShape) {
  REQUIRE_GPU();
  const Case c = GetParam();
  std::mt19937 rng(static_cast<unsigned>(c.rows * 31 + c.cols * 7 + c.batch));
  std::normal_distribution<float> wd(0.f, 0.02f), xd(0.f, 1.f);
  std::vector<float> w(static_cast<size_t>(c.rows * c.cols));
  for (float& v : w) v = wd(rng);
  const QuantMatrix q = quantize_matrix(w.data(), c.rows, c.cols, c.scheme, c.group, c.zero_point);
  std::vector<uint16_t> x(static_cast<size_t>(c.batch * c.cols));
  for (auto& h : x) h = f32_to_f16(xd(rng));
  std::vector<float> y0(static_cast<size_t>(c.batch * c.rows));
  for (float& v : y0) v = xd(rng);

  DeviceQuant dq(q);
  if (c.scheme == Scheme::int4) repack_int4(dq.m, nullptr, false);
  const char* why = nullptr;
  ASSERT_TRUE(quant_gemm_supports(dq.m, &why)) << name(c) << ": " << why;

  // The default shape, then both row-warp counts unsplit and split over 2, 3 and 8 blocks (as
  // many as the k-tiles allow), with rings of 2, 3 and 4 stages (as many as fit).
  const std::vector<QuantGemmShape> shapes = {{},        {2, 1, 4}, {2, 2, 4}, {2, 3, 2}, {2, 8, 3},
                                              {4, 1, 4}, {4, 2, 3}, {4, 3, 4}, {4, 8, 2}};
  size_t ws_bytes = 16;
  for (const QuantGemmShape& t : shapes)
    ws_bytes = std::max(ws_bytes, quant_gemm_workspace_bytes(c.scheme, c.rows, c.cols, c.batch, t));
  DeviceBuffer<uint16_t> dx(x);
  DeviceBuffer<float> dy(y0.size());
  DeviceBuffer<uint8_t> ws(ws_bytes);
  CUDA_CHECK(cudaMemset(ws.p, 0, ws.n));
  auto run = [&](const QuantGemmShape& t) {
    if (c.accumulate)
      CUDA_CHECK(cudaMemcpy(dy.p, y0.data(), 4 * y0.size(), cudaMemcpyHostToDevice));
    else
      dy.poison();
    gemm_quant(dq.m, reinterpret_cast<const __half*>(dx.p), c.batch, dy.p, c.accumulate, ws.p, nullptr, t);
    CUDA_CHECK(cudaDeviceSynchronize());
    return dy.download();
  };

  // Every row of the small shapes; of the large ones every stride-th row and the last tile's,
  // so that the reference stays at ~10^8 multiply-adds. Every column of each row.
  const int64_t stride = std::max<int64_t>(1, c.rows * c.cols * c.batch / 100'000'000);
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < c.rows; ++r)
    if (r % stride == 0 || r >= c.rows - 128) rows.push_back(r);
  std::vector<double> ref(rows.size() * c.batch), mag(rows.size() * c.batch);
  std::vector<float> row(static_cast<size_t>(c.cols));
  for (size_t i = 0; i < rows.size(); ++i) {
    q.row(rows[i], row.data());
    for (int64_t b = 0; b < c.batch; ++b) {
      double s = c.accumulate ? y0[b * c.rows + rows[i]] : 0.0, m = 0.0;
      for (int64_t k = 0; k < c.cols; ++k) {
        const double t = static_cast<double>(row[k]) * f16_to_f32(x[b * c.cols + k]);
        s += t;
        m += std::fabs(t);
      }
      ref[i * c.batch + b] = s;
      mag[i * c.batch + b] = m;
    }
  }

  for (const QuantGemmShape& t : shapes) {
    const QuantGemmShape used = quant_gemm_resolved(c.scheme, c.rows, c.cols, c.batch, t);
    const std::string what = fmt::format("{} m{}s{}r{}", name(c), used.warps_m, used.splits, used.stages);
    const std::vector<float> got = run(t);
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t b = 0; b < c.batch; ++b) {
        const float v = got[b * c.rows + rows[i]];
        ASSERT_FALSE(std::isnan(v)) << what << " row " << rows[i] << " column " << b << " was not written";
        ASSERT_LE(std::fabs(v - ref[i * c.batch + b]), tolerance(c.scheme) * mag[i * c.batch + b] + 1e-5)
            << what << " row " << rows[i] << " column " << b << ": got " << v << ", reference "
            << ref[i * c.batch + b];
      }
    EXPECT_EQ(run(t), got) << what << ": a second call gave other bits (the split order is fixed)";
  }
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (Scheme s : {Scheme::int8, Scheme::int4, Scheme::fp8}) {
    // Not multiples of a row tile (rows) or of a 128-column k-tile (1088 columns), batches in
    // one block, at its edge, past it and in a partly filled third one.
    for (int64_t b : {1, 2, 17, 64, 65, 128, 129, 256, 300})
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{7, 256}, {130, 1088}, {1000, 2048}})
        v.push_back({s, rows, cols, b, cols % 128 == 0 ? 128 : 64});
    // The 8b shapes: qkv, o, gate/up, down, at the first batch past the skinny GEMM's and at 256.
    for (int64_t b : {65, 256})
      for (auto [rows, cols] :
           {std::pair<int64_t, int64_t>{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}})
        v.push_back({s, rows, cols, b});
    v.push_back({s, 1000, 2048, 100, 128, true, true});  // accumulate into y
  }
  // int4's groups (32, 64, 128, and 256: a k-tile inside a group) with and without zero points.
  for (int g : {32, 64, 128, 256})
    for (bool zp : {true, false})
      for (int64_t b : {17, 256}) v.push_back({Scheme::int4, 130, 1024, b, g, zp});
  v.push_back({Scheme::int4, 4096, 4096, 256, 128, false});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, QuantGemmTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return name(info.param); });

TEST(QuantGemm, RefusesFp16AndTheFragmentLayoutWithAReason) {
  DeviceMatrix m;
  m.scheme = Scheme::int4;
  m.rows = 8;
  m.cols = 1024;
  m.group_size = 128;
  m.int4_repacked = true;
  m.int4_frag = true;
  const char* why = nullptr;
  EXPECT_FALSE(quant_gemm_supports(m, &why));
  ASSERT_NE(why, nullptr);
  m.int4_frag = false;
  EXPECT_TRUE(quant_gemm_supports(m, &why));
  m.int4_repacked = false;  // the canonical layout
  EXPECT_FALSE(quant_gemm_supports(m, &why));
  m.scheme = Scheme::fp16;
  why = nullptr;
  EXPECT_FALSE(quant_gemm_supports(m, &why));
  ASSERT_NE(why, nullptr);
  m.scheme = Scheme::int8;
  m.cols = 1000;  // not whole 16-byte chunks
  EXPECT_FALSE(quant_gemm_supports(m, &why));
}

// The default shape's workspace is what its launch uses: none unsplit, and a split launch's
// partial sums for every tile and split.
TEST(QuantGemm, TheWorkspaceHoldsTheSplitsPartialSums) {
  REQUIRE_GPU();
  EXPECT_EQ(quant_gemm_workspace_bytes(Scheme::int4, 4096, 4096, 256, {4, 1, 2}), 0u);
  const size_t two = quant_gemm_workspace_bytes(Scheme::int4, 4096, 4096, 256, {4, 2, 2});
  // 32 row tiles x 2 sequence tiles x 2 splits x 128 x 128 floats, and the counters.
  EXPECT_GE(two, 32ull * 2 * 2 * 128 * 128 * 4);
  EXPECT_LT(two, 32ull * 2 * 2 * 128 * 128 * 4 + 4096);
  for (Scheme s : {Scheme::int8, Scheme::int4, Scheme::fp8}) {
    const QuantGemmShape d = quant_gemm_resolved(s, 4096, 4096, 256);
    EXPECT_TRUE(d.warps_m == 2 || d.warps_m == 4) << to_string(s);
    EXPECT_GE(d.splits, 1) << to_string(s);
    EXPECT_GE(d.stages, 2) << to_string(s);
    EXPECT_LE(d.stages, 4) << to_string(s);
    // A shape's stages are capped at what fits, never raised.
    EXPECT_EQ(quant_gemm_resolved(s, 4096, 4096, 256, {d.warps_m, 1, 2}).stages, 2) << to_string(s);
  }
}

}  // namespace
