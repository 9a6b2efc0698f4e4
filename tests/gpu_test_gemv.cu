// Every GEMV kernel against the CPU reference on fresh random inputs, across shapes that
// are not multiples of the tile and the real 8b/4b/70b layer shapes, with every epilogue;
// the rows kernel also in shapes chosen by hand, single and double-buffered.
#include <cmath>
#include <cstring>
#include <random>

#include "decodebench/half.h"
#include "decodebench/quant.h"
#include "gpu_common.cuh"
#include "parallel_fill.h"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;
using dbtest::DeviceBuffer;
using dbtest::DeviceQuant;
using dbtest::normal_values;
using dbtest::parallel_for;

namespace {

struct Case {
  Scheme scheme;
  GemvVariant variant;
  int64_t rows, cols;
  bool zero_point = true;  // int4: asymmetric groups (false: symmetric, no zero points stored)
  int group = 0;           // int4 group size; 0: 128 where it divides the columns, else 32
};

const char* variant_name(GemvVariant v) {
  switch (v) {
    case GemvVariant::fast:
      return "gemv";
    case GemvVariant::naive:
      return "naive";
  }
  return "?";
}

std::string name(const Case& c) {
  return fmt::format("{}.{} [{} x {}]{}{}", to_string(c.scheme), variant_name(c.variant), c.rows, c.cols,
                     c.zero_point ? "" : " symmetric", c.group ? fmt::format(" g{}", c.group) : "");
}

// Fast kernels accumulate up to 8 fp16 products per accumulator before converting to fp32;
// each fused multiply-add rounds once, by at most 2^-11 of the partial sum, which is at most
// sum |w x|. So |y - ref| <= 8 * 2^-11 * sum |w x|. The naive kernels accumulate in fp32:
// 2^-24 per add over at most `cols` adds, well under 1e-5 for these sizes. fp8's sums are in
// units of 2^8 scale (the values times 2^-8), the same roundings relative to the partial sums;
// its products below fp16's normal range round by at most 2^-25 of those units, far under
// 2^-11 of a chunk's sum.
double tolerance(GemvVariant v) {
  return v == GemvVariant::naive ? 1e-5 : 8.0 / 2048.0;
}

struct Problem {
  QuantMatrix w;
  std::vector<uint16_t> x;  // fp16 bits
  std::vector<double> ref, mag;
};

Problem make_problem(const Case& c, std::mt19937& rng) {
  Problem p;
  std::normal_distribution<float> xd(0.f, 1.f);
  const std::vector<float> w = normal_values(c.rows * c.cols, 0.f, 0.02f, rng());
  const int group = c.group ? c.group : c.cols % 128 == 0 ? 128 : 32;
  p.w = quantize_matrix(w.data(), c.rows, c.cols, c.scheme, group, c.zero_point);
  p.x.resize(static_cast<size_t>(c.cols));
  for (auto& h : p.x) h = f32_to_f16(xd(rng));
  p.ref.assign(static_cast<size_t>(c.rows), 0.0);
  p.mag.assign(static_cast<size_t>(c.rows), 0.0);
  parallel_for(c.rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(c.cols));
    for (int64_t r = r0; r < r1; ++r) {
      p.w.row(r, row.data());
      for (int64_t k = 0; k < c.cols; ++k) {
        const double t = static_cast<double>(row[k]) * f16_to_f32(p.x[k]);
        p.ref[r] += t;
        p.mag[r] += std::fabs(t);
      }
    }
  });
  return p;
}

// One store-epilogue GEMV of c's problem p through `launch(m, in, out)`, on a poisoned output
// (the int4 weights repacked first where `repack`), every row checked against the reference.
template <class Launch>
void check_rows(const Case& c, const Problem& p, bool repack, Launch launch, bool fragments = false) {
  DeviceQuant dq(p.w);
  if (repack) repack_int4(dq.m, nullptr, fragments);
  ASSERT_EQ(dq.m.int4_frag, fragments) << name(c) << ": the fragment layout was asked for an eligible shape";
  DeviceBuffer<uint16_t> x(p.x);
  DeviceBuffer<float> y(static_cast<size_t>(c.rows));
  y.poison();
  GemvInput in;
  in.x = reinterpret_cast<const __half*>(x.p);
  GemvOutput out;
  out.epilogue = Epilogue::store;
  out.y = y.p;
  launch(dq.m, in, out);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = y.download();
  for (int64_t r = 0; r < c.rows; ++r) {
    ASSERT_FALSE(std::isnan(got[r])) << name(c) << " row " << r << " was not written";
    ASSERT_LE(std::fabs(got[r] - p.ref[r]), tolerance(c.variant) * p.mag[r] + 1e-6)
        << name(c) << " row " << r << ": got " << got[r] << ", reference " << p.ref[r];
  }
}

class GemvTest : public ::testing::TestWithParam<Case> {};

TEST_P(GemvTest, MatchesTheCpuReferenceAndWritesEveryRow) {
  REQUIRE_GPU();
  const Case c = GetParam();
  std::mt19937 rng(static_cast<unsigned>(c.rows * 131 + c.cols));
  const Problem p = make_problem(c, rng);
  check_rows(c, p, c.variant != GemvVariant::naive && c.scheme == Scheme::int4,
             [&](DeviceMatrix& m, const GemvInput& in, const GemvOutput& out) {
               gemv(m, in, out, c.variant, nullptr);
             });
}

std::vector<Case> cases() {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 64},       {7, 96},       {33, 160},     {130, 1088},    // not multiples of any tile
      {6144, 4096},  {4096, 4096},  {28672, 4096}, {4096, 14336},  // 8b: qkv, o, gate/up, down
      {6144, 2560},  {2560, 4096},  {2560, 9728},                  // 4b: qkv, o, down
      {10240, 8192}, {8192, 28672},                                // 70b: qkv, down
  };
  std::vector<Case> out;
  for (auto [r, k] : shapes) {
    for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8}) {
      out.push_back({s, GemvVariant::fast, r, k});
      if (s != Scheme::fp16) out.push_back({s, GemvVariant::naive, r, k});
    }
    // Symmetric int4 (no zero points): the kernels load the symmetric zero point instead.
    for (GemvVariant v : {GemvVariant::fast, GemvVariant::naive})
      out.push_back({Scheme::int4, v, r, k, false});
  }
  // The other int4 group sizes (the fast kernels take 32-column chunks: 1, 2, 4 or 8 a group),
  // asymmetric and symmetric, on a short shape, the 8b qkv and the 8b down (the launcher's
  // R8 x K1 and R4 x K2 kernels).
  for (auto [r, k] : std::vector<std::pair<int64_t, int64_t>>{{33, 512}, {6144, 4096}, {4096, 14336}})
    for (int group : {64, 256})
      for (bool zp : {true, false}) out.push_back({Scheme::int4, GemvVariant::fast, r, k, zp, group});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvTest, ::testing::ValuesIn(cases()), [](const auto& info) {
  const Case& c = info.param;
  return fmt::format("{}_{}_{}x{}{}{}", to_string(c.scheme), variant_name(c.variant), c.rows, c.cols,
                     c.zero_point ? "" : "_sym", c.group ? fmt::format("_g{}", c.group) : "");
});

// int4 in the tensor-core dot's fragment layout (include/decodebench/int4_frag.h): whole blocks of 8
// rows and spans of 1024 columns at group size 128, from one block to the real 8b, 1b and 70b
// shapes (the launcher's R8 x K1, R4 x K1 and R4 x K2 kernels among them). The
// tensor cores accumulate in fp32 from exact products, so the fast kernels' bound holds.
class GemvFragTest : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(GemvFragTest, MatchesTheCpuReference) {
  REQUIRE_GPU();
  for (bool zero_point : {true, false}) {
    const Case c{Scheme::int4, GemvVariant::fast, GetParam().first, GetParam().second, zero_point};
    std::mt19937 rng(static_cast<unsigned>(c.rows * 17 + c.cols));
    const Problem p = make_problem(c, rng);
    ASSERT_NO_FATAL_FAILURE(check_rows(
        c, p, true,
        [&](DeviceMatrix& m, const GemvInput& in, const GemvOutput& out) {
          gemv(m, in, out, c.variant, nullptr);
        },
        true));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemvFragTest,
    ::testing::Values(std::pair<int64_t, int64_t>{8, 1024}, std::pair<int64_t, int64_t>{24, 3072},
                      std::pair<int64_t, int64_t>{2048, 2048}, std::pair<int64_t, int64_t>{2048, 8192},
                      std::pair<int64_t, int64_t>{6144, 4096}, std::pair<int64_t, int64_t>{4096, 4096},
                      std::pair<int64_t, int64_t>{28672, 4096}, std::pair<int64_t, int64_t>{4096, 14336},
                      std::pair<int64_t, int64_t>{10240, 8192}, std::pair<int64_t, int64_t>{8192, 28672}),
    [](const auto& info) { return fmt::format("int4_frag_{}x{}", info.param.first, info.param.second); });

// The rows kernel in shapes chosen by hand (gemv_rows) against the CPU reference. One block
// per SM, so that the row counts below set the groups per block: a matrix of one row; blocks
// of one group each; then blocks of n - 1 and n groups in one launch (odd and even counts:
// part[] alternates between groups); with and without a short last group (rows not a
// multiple of R).
struct TunedCase {
  Scheme scheme;
  int rows_per_group, chunks;  // 0: the scheme's defaults, as gemv() takes them
  int64_t cols;
  bool zero_point = true;
};

class GemvTunedTest : public ::testing::TestWithParam<TunedCase> {};

TEST_P(GemvTunedTest, MatchesTheCpuReferenceWithAnyGroupsPerBlock) {
  REQUIRE_GPU();
  const TunedCase c = GetParam();
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  // The defaults' groups are at most 8 rows: their layouts still have tails and many groups.
  const int64_t R = c.rows_per_group ? c.rows_per_group : 8;
  // {n, rows short}: n groups per block at most (0: a single group), the last group short.
  const std::pair<int64_t, int64_t> layouts[] = {{0, R - 1}, {1, 1}, {2, 0}, {3, 1}, {4, R - 1}};
  for (const auto& [n, short_by] : layouts) {
    // n * sms - 1 groups over sms blocks: one block of n - 1 groups, the others n.
    const int64_t rows = (n ? R * (n * sms - 1) : R) - short_by;
    const Case pc{c.scheme, GemvVariant::fast, rows, c.cols, c.zero_point};
    std::mt19937 rng(static_cast<unsigned>(rows * 131 + c.cols));
    const Problem p = make_problem(pc, rng);
    ASSERT_NO_FATAL_FAILURE(check_rows(
        pc, p, c.scheme == Scheme::int4, [&](DeviceMatrix& m, const GemvInput& in, const GemvOutput& out) {
          RowsShape shape = c.rows_per_group ? RowsShape{c.chunks, c.rows_per_group, 0} : rows_shape(m);
          shape.blocks_per_sm = 1;
          gemv_rows(m, in, out, shape, nullptr);
        }));
  }
}

std::vector<TunedCase> tuned_cases() {
  // Shapes of R x K <= 8 at 1056 columns (threads past the last chunk: 33 int4 chunks), and
  // the default shapes at 4096 and 14336 columns (long rows take more chunks per thread).
  const std::pair<int, int> shapes[] = {{2, 1}, {2, 2}, {2, 4}, {4, 1}, {4, 2}, {8, 1}};
  std::vector<TunedCase> out;
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4}) {
    for (auto [r, k] : shapes) out.push_back({s, r, k, 1056});
    out.push_back({s, 0, 0, 4096});
    out.push_back({s, 0, 0, 14336});
  }
  // Symmetric int4 in every shape: each group size of rows loads the symmetric zero point its
  // own way, and the short last group another.
  for (auto [r, k] : shapes) out.push_back({Scheme::int4, r, k, 1056, false});
  out.push_back({Scheme::int4, 0, 0, 4096, false});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvTunedTest, ::testing::ValuesIn(tuned_cases()), [](const auto& info) {
  const TunedCase& c = info.param;
  return fmt::format("{}_R{}K{}_{}{}", to_string(c.scheme), c.rows_per_group, c.chunks, c.cols,
                     c.zero_point ? "" : "_sym");
});

// The epilogues and the fused RMSNorm prologue, on one int4 matrix with the fast kernel.
struct EpilogueCase {
  GemvVariant variant;
  int64_t rows, cols;
  bool fragments = false;  // int4 in the tensor-core dot's layout
};

class GemvEpilogue : public ::testing::TestWithParam<EpilogueCase> {};

// Every epilogue, the addend, and the RMSNorm statistics and fp16 copy a residual epilogue
// hands to the next GEMV, and x normalized from that copy, against a host computation: the
// rows kernel with and without a tail group.
TEST_P(GemvEpilogue, NormResidualSiluArgmaxAddendAndStatistics) {
  REQUIRE_GPU();
  const EpilogueCase c = GetParam();
  const int64_t rows = c.rows, cols = c.cols;
  std::mt19937 rng(static_cast<unsigned>(99 + rows));
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> resid(cols), prev(rows), addend(rows);
  std::vector<uint16_t> norm_w(cols);
  for (float& v : resid) v = d(rng);
  for (auto& h : norm_w) h = f32_to_f16(1.f + 0.1f * d(rng));
  for (float& v : prev) v = d(rng);
  for (float& v : addend) v = d(rng);
  std::vector<float> w(rows * cols);
  for (float& v : w) v = 0.02f * d(rng);
  const QuantMatrix q = quantize_matrix(w.data(), rows, cols, Scheme::int4, 128, true);

  // Reference: x = fp16(resid * rsqrt(mean(resid^2) + eps) * norm_w), y = W x.
  double ss = 0;
  for (float v : resid) ss += double(v) * v;
  const double inv = 1.0 / std::sqrt(ss / cols + 1e-5);
  std::vector<double> x(cols), y(rows, 0.0), mag(rows, 0.0);
  for (int64_t k = 0; k < cols; ++k)
    x[k] = f16_to_f32(f32_to_f16(float(resid[k] * inv * f16_to_f32(norm_w[k]))));
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    q.row(r, row.data());
    for (int64_t k = 0; k < cols; ++k) {
      y[r] += row[k] * x[k];
      mag[r] += std::fabs(row[k] * x[k]);
    }
  }
  const double tol = 8.0 / 2048.0;

  DeviceQuant dq(q);
  repack_int4(dq.m, nullptr, c.fragments);
  ASSERT_EQ(dq.m.int4_frag, c.fragments);
  DeviceBuffer<float> dres(resid), dprev(prev), dadd(addend), dy(rows), dy2(rows);
  DeviceBuffer<uint16_t> dnorm(norm_w), dact(rows / 2);
  DeviceBuffer<unsigned long long> key(1), slots(std::vector<unsigned long long>(kNormSlots, 0)),
      in_slots(std::vector<unsigned long long>(kNormSlots, 0));
  CUDA_CHECK(cudaMemset(key.p, 0, 8));
  GemvInput in;
  in.resid = dres.p;
  in.norm_w = reinterpret_cast<const __half*>(dnorm.p);
  in.eps = 1e-5f;

  GemvOutput out;
  out.epilogue = Epilogue::residual;
  out.resid = dprev.p;
  out.addend = dadd.p;
  out.sumsq = slots.p;
  DeviceBuffer<uint16_t> dprev_h(rows);  // the residual stream's fp16 copy, written beside it
  dprev_h.poison();
  out.resid_h = reinterpret_cast<__half*>(dprev_h.p);
  gemv(dq.m, in, out, c.variant, nullptr);
  out.addend = nullptr;
  out.sumsq = nullptr;
  out.resid_h = nullptr;
  out.epilogue = Epilogue::silu_mul;
  out.act = reinterpret_cast<__half*>(dact.p);
  dact.poison();
  gemv(dq.m, in, out, c.variant, nullptr);
  out.epilogue = Epilogue::logits;
  out.y = dy.p;
  out.argmax_key = key.p;
  gemv(dq.m, in, out, c.variant, nullptr);
  // The same product with the statistics given instead of summed by the kernel.
  std::vector<unsigned long long> given(kNormSlots, 0);
  given[3] = static_cast<unsigned long long>(std::llround(ss * kSumsqScale));
  in_slots.upload(given);
  GemvInput in2 = in;
  in2.sumsq = in_slots.p;
  GemvOutput out2;
  out2.epilogue = Epilogue::store;
  out2.y = dy2.p;
  dy2.poison();
  gemv(dq.m, in2, out2, c.variant, nullptr);
  // And with x normalized from the residual stream's fp16 copy (the statistics still the
  // float stream's): x = fp16(fp16(resid) * inv * norm_w).
  std::vector<uint16_t> resid_h(cols);
  for (int64_t k = 0; k < cols; ++k) resid_h[k] = f32_to_f16(resid[k]);
  DeviceBuffer<uint16_t> dres_h(resid_h);
  DeviceBuffer<float> dy3(rows);
  dy3.poison();
  GemvInput in3 = in2;
  in3.resid_h = reinterpret_cast<const __half*>(dres_h.p);
  out2.y = dy3.p;
  gemv(dq.m, in3, out2, c.variant, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> y_h(rows, 0.0);
  for (int64_t k = 0; k < cols; ++k)
    x[k] = f16_to_f32(f32_to_f16(float(f16_to_f32(resid_h[k]) * inv * f16_to_f32(norm_w[k]))));
  for (int64_t r = 0; r < rows; ++r) {
    q.row(r, row.data());
    for (int64_t k = 0; k < cols; ++k) y_h[r] += row[k] * x[k];
  }
  const std::vector<float> got_y3 = dy3.download();
  const std::vector<uint16_t> got_res_h = dprev_h.download();

  const std::vector<float> got_res = dprev.download(), got_y = dy.download(), got_y2 = dy2.download();
  const std::vector<uint16_t> got_act = dact.download();
  double new_ss = 0;
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_LE(std::fabs(got_res[r] - (prev[r] + addend[r] + y[r])), tol * mag[r] + 1e-5)
        << "residual row " << r;
    ASSERT_LE(std::fabs(got_y[r] - y[r]), tol * mag[r] + 1e-5) << "logits row " << r;
    // rsqrt of a sum that differs in its last bits: x may move by one fp16 ulp per element.
    ASSERT_LE(std::fabs(got_y2[r] - y[r]), 2 * tol * mag[r] + 1e-5) << "with given statistics, row " << r;
    ASSERT_LE(std::fabs(got_y3[r] - y_h[r]), 2 * tol * mag[r] + 1e-5) << "x from the fp16 copy, row " << r;
    ASSERT_EQ(got_res_h[r], f32_to_f16(got_res[r])) << "fp16 copy of residual row " << r;
    new_ss += double(got_res[r]) * got_res[r];
  }
  unsigned long long total = 0;
  for (unsigned long long v : slots.download()) total += v;
  // Each block's float partial rounds once to 2^-20: error <= blocks * 2^-21 plus float sums.
  EXPECT_NEAR(static_cast<double>(total) / kSumsqScale, new_ss, 1e-5 * new_ss + 1e-3)
      << "residual statistics";
  for (int64_t i = 0; i < rows / 2; ++i) {
    const double g = got_y[2 * i],
                 u = got_y[2 * i + 1];  // the kernel's own rows, so only the epilogue is tested
    const double want = g / (1 + std::exp(-g)) * u;
    ASSERT_NEAR(f16_to_f32(got_act[i]), want, 1e-3 * std::fabs(want) + 1e-6) << "silu_mul " << i;
  }
  int64_t best = 0;
  for (int64_t r = 1; r < rows; ++r)
    if (got_y[r] > got_y[best]) best = r;
  EXPECT_EQ(argmax_index(key.download()[0]), static_cast<uint32_t>(best));
}

INSTANTIATE_TEST_SUITE_P(Kernels, GemvEpilogue,
                         ::testing::Values(EpilogueCase{GemvVariant::fast, 256, 4096},
                                           EpilogueCase{GemvVariant::fast, 258, 512},
                                           EpilogueCase{GemvVariant::fast, 256, 4096, true},
                                           EpilogueCase{GemvVariant::fast, 64, 14336, true}),
                         [](const auto& info) {
                           return fmt::format("{}_{}x{}{}", variant_name(info.param.variant), info.param.rows,
                                              info.param.cols, info.param.fragments ? "_frag" : "");
                         });

// dequant-cublas's fp16 copy: every element exactly fp16(QuantMatrix::at), in the vector
// kernel (whole 8-column pieces) and the element-wise fallback (cols % 8 != 0, a group of 4).
TEST(Dequantize, EveryElementIsTheHostValueRoundedToFp16) {
  REQUIRE_GPU();
  struct Shape {
    Scheme scheme;
    int64_t rows, cols;
    int group;
    bool zero_point;
  };
  const Shape shapes[] = {{Scheme::int8, 37, 264, 0, false},  {Scheme::int4, 37, 256, 32, true},
                          {Scheme::int4, 5, 384, 128, false}, {Scheme::int8, 9, 100, 0, false},
                          {Scheme::int4, 9, 100, 4, true},    {Scheme::fp8, 37, 264, 0, false},
                          {Scheme::fp8, 9, 100, 0, false}};
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.f, 0.05f);
  for (const Shape& sh : shapes) {
    std::vector<float> w(static_cast<size_t>(sh.rows * sh.cols));
    for (float& v : w) v = d(rng);
    const QuantMatrix q = quantize_matrix(w.data(), sh.rows, sh.cols, sh.scheme, sh.group, sh.zero_point);
    DeviceQuant dq(q);
    DeviceBuffer<uint16_t> out(static_cast<size_t>(sh.rows * sh.cols));
    out.poison();
    dequantize_to_f16(dq.m, reinterpret_cast<__half*>(out.p), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> got = out.download();
    for (int64_t r = 0; r < sh.rows; ++r)
      for (int64_t c = 0; c < sh.cols; ++c)
        ASSERT_EQ(got[r * sh.cols + c], f32_to_f16(q.at(r, c)))
            << to_string(sh.scheme) << " [" << sh.rows << " x " << sh.cols << "] at " << r << ", " << c;
  }
}

// What a repack needs allocated (weights.cuh device_matrix_bytes): int4's scales and zero
// points for whole blocks of 8 rows, everything else exactly the byte account's.
TEST(DeviceMatrixBytes, Int4MetaCoversWholeBlocksOfEightRows) {
  for (int64_t rows : {1, 7, 8, 9, 37, 4096}) {
    DeviceMatrix m;
    m.rows = rows;
    m.cols = 512;
    for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8}) {
      for (bool zp : {true, false}) {
        m.scheme = s;
        m.group_size = s == Scheme::int4 ? 128 : 0;
        m.zero_point = s == Scheme::int4 && zp;
        const MatrixBytes want = matrix_bytes(rows, m.cols, s, m.group_size, m.zero_point);
        const MatrixBytes got = device_matrix_bytes(m);
        EXPECT_EQ(got.weights, want.weights) << rows;
        if (s != Scheme::int4) {
          EXPECT_EQ(got.scales, want.scales) << rows;
          continue;
        }
        const uint64_t padded_groups = static_cast<uint64_t>((rows + 7) / 8 * 8) * (m.cols / 128);
        EXPECT_EQ(got.scales, padded_groups * 2) << rows;
        EXPECT_EQ(got.zeros, zp ? padded_groups : 0) << rows;
        EXPECT_GE(got.scales, want.scales) << rows;
      }
    }
  }
}

// The host codec (quant.h) is CUDA's conversion: every code decodes to the value
// __nv_cvt_fp8x2_to_halfraw2 gives (the kernels' path), and a sweep of floats (every fp16
// value, the midpoints of neighbouring codes and either side, random bit patterns with NaN
// and infinities) encodes to __nv_cvt_float_to_fp8's code, saturating.
__global__ void fp8_device_codec(const float* in, uint8_t* enc, int n, uint16_t* dec) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    enc[i] = __nv_cvt_float_to_fp8(in[i], __NV_SATFINITE, __NV_E4M3);
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < 128) {  // codes 2t, 2t + 1 as one pair
    const uint32_t two = static_cast<uint32_t>(2 * t) | (static_cast<uint32_t>(2 * t + 1) << 8);
    const uint32_t h = h2_bits(fp8x2_to_half2(two));
    dec[2 * t] = static_cast<uint16_t>(h & 0xffffu);
    dec[2 * t + 1] = static_cast<uint16_t>(h >> 16);
  }
}

TEST(Fp8Codec, TheHostCodecIsTheDevicesConversion) {
  REQUIRE_GPU();
  std::vector<float> in;
  for (uint32_t h = 0; h < 65536; ++h) in.push_back(f16_to_f32(static_cast<uint16_t>(h)));
  for (int code = 0; code < 0x7e; ++code) {
    const float lo = quant::fp8_e4m3_to_f32(static_cast<uint8_t>(code));
    const float hi = quant::fp8_e4m3_to_f32(static_cast<uint8_t>(code + 1));
    const float mid = (lo + hi) / 2;
    for (float v : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f)}) {
      in.push_back(v);
      in.push_back(-v);
    }
  }
  std::mt19937 rng(11);
  for (int i = 0; i < (1 << 20); ++i) {
    const uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    in.push_back(f);
  }
  for (float v : {448.f, 449.f, 464.f, 480.f, 1e30f, INFINITY, -INFINITY, NAN}) in.push_back(v);
  DeviceBuffer<float> d_in(in);
  DeviceBuffer<uint8_t> enc(in.size());
  DeviceBuffer<uint16_t> dec(256);
  fp8_device_codec<<<1024, 256>>>(d_in.p, enc.p, static_cast<int>(in.size()), dec.p);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = enc.download();
  for (size_t i = 0; i < in.size(); ++i) {
    const uint8_t host = quant::f32_to_fp8_e4m3(in[i]);
    if (std::isnan(in[i])) {
      ASSERT_EQ(got[i] & 0x7f, 0x7f) << "NaN";
      ASSERT_EQ(host & 0x7f, 0x7f) << "NaN";
      continue;
    }
    ASSERT_EQ(host, got[i]) << "float " << in[i] << " (bits " << std::hex << [&] {
      uint32_t u;
      std::memcpy(&u, &in[i], 4);
      return u;
    }() << ")";
  }
  const std::vector<uint16_t> values = dec.download();
  for (int code = 0; code < 256; ++code) {
    const float host = quant::fp8_e4m3_to_f32(static_cast<uint8_t>(code));
    const float dev = f16_to_f32(values[code]);
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(dev)) << code;
    } else {
      EXPECT_EQ(host, dev) << code;
      EXPECT_EQ(std::signbit(host), std::signbit(dev)) << code;
    }
  }
}

TEST(ArgmaxKey, LargestValueThenLowestIndex) {
  EXPECT_GT(argmax_key(1.0f, 5), argmax_key(0.5f, 1));
  EXPECT_GT(argmax_key(-0.5f, 5), argmax_key(-1.0f, 1));
  EXPECT_GT(argmax_key(2.0f, 3), argmax_key(2.0f, 4));  // tie: the lower index wins
  EXPECT_GT(argmax_key(0.0f, 0), argmax_key(-0.0f, 0) - 1);
  EXPECT_EQ(argmax_index(argmax_key(3.0f, 123456)), 123456u);
}

}  // namespace
