// The fp16 copy of a quantized matrix a block of rows at a time, as the batched step and the
// prefill make it (gemm_rows_dequant): a block of rows of every layout has the bits of the
// same rows of the whole copy; the copy kernels of the layouts the fast kernels read have the
// canonical kernels' and the host's bits; and the GEMM over blocks of rows gives the
// product the whole copy's GEMM gives, within the fp32 accumulation's rounding.
#include <cublas_v2.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "decodebench/error.h"
#include "decodebench/half.h"
#include "decodebench/linear_plan.h"
#include "decodebench/quant.h"
#include "engine.cuh"
#include "gpu_common.cuh"
#include "prefill.cuh"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;
using dbtest::DeviceBuffer;
using dbtest::DeviceQuant;

namespace {

// A matrix of random codes: every int8 code, every finite E4M3 code, every nibble and zero
// point, with scales spread over fp16's normal and subnormal range (2^-20 to 2^-2; fp8's are
// floats), so that the products round in every way the copy kernels can round them.
QuantMatrix random_codes(Scheme s, int64_t rows, int64_t cols, int group, bool zero_point, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255), nibble(0, 15);
  std::uniform_real_distribution<float> log2_scale(-20.f, -2.f);
  QuantMatrix h;
  h.scheme = s;
  h.rows = rows;
  h.cols = cols;
  h.group_size = s == Scheme::int4 ? group : 0;
  h.zero_point = s == Scheme::int4 && zero_point;
  const int64_t n = s == Scheme::int4 ? rows * cols / 2 : rows * cols;
  for (int64_t i = 0; i < n; ++i) {
    int b = byte(rng);
    while (s == Scheme::fp8 && (b & 0x7f) == 0x7f) b = byte(rng);  // the two NaN codes
    h.qweight.push_back(static_cast<uint8_t>(b));
  }
  if (s == Scheme::fp8) {
    h.scales.resize(static_cast<size_t>(2 * rows));
    for (int64_t r = 0; r < rows; ++r) h.set_row_scale(r, std::exp2(log2_scale(rng)));
  } else {
    const int64_t params = s == Scheme::int4 ? rows * (cols / group) : rows;
    for (int64_t i = 0; i < params; ++i) h.scales.push_back(f32_to_f16(std::exp2(log2_scale(rng))));
    if (h.zero_point)
      for (int64_t i = 0; i < params; ++i) h.zeros.push_back(static_cast<uint8_t>(nibble(rng)));
  }
  return h;
}

// The host's fp16 value of every element, f32_to_f16(QuantMatrix::at).
std::vector<uint16_t> host_f16(const QuantMatrix& h) {
  std::vector<uint16_t> v(static_cast<size_t>(h.rows * h.cols));
  for (int64_t r = 0; r < h.rows; ++r)
    for (int64_t c = 0; c < h.cols; ++c) v[static_cast<size_t>(r * h.cols + c)] = f32_to_f16(h.at(r, c));
  return v;
}

std::vector<uint16_t> copy_of(const DeviceMatrix& m, bool canonical_kernel = false) {
  DeviceBuffer<uint16_t> out(static_cast<size_t>(m.rows * m.cols));
  out.poison();
  if (canonical_kernel)
    dequantize_to_f16(m, reinterpret_cast<__half*>(out.p), nullptr);
  else
    dequantize_any_to_f16(m, reinterpret_cast<__half*>(out.p), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  return out.download();
}

struct LayoutCase {
  Scheme scheme;
  MatrixLayout layout;
  int64_t rows, cols;
  int group = 0;
  bool zero_point = false;
};

std::string name_of(const LayoutCase& p) {
  return fmt::format("{} {} [{} x {}] group {} zero point {}", to_string(p.scheme), to_string(p.layout),
                     p.rows, p.cols, p.group, p.zero_point);
}

// Every layout dequantize_any_to_f16 reads: int8 and fp8 (whole 8-column pieces and, for
// int8, the element-wise fallback of an odd width), int4 canonical, in the nibble order (rows
// not whole blocks of 8, groups of 32 to 128, rows wider than one block of the copy kernel's
// 4096 columns) and in the fragment layout.
std::vector<LayoutCase> layouts() {
  return {
      {Scheme::int8, MatrixLayout::canonical, 45, 256},
      {Scheme::int8, MatrixLayout::canonical, 40, 5120},
      {Scheme::int8, MatrixLayout::canonical, 45, 376},
      {Scheme::fp8, MatrixLayout::canonical, 45, 256},
      {Scheme::fp8, MatrixLayout::canonical, 40, 5120},
      {Scheme::int4, MatrixLayout::canonical, 45, 256, 64, true},
      {Scheme::int4, MatrixLayout::canonical, 45, 256, 64, false},
      {Scheme::int4, MatrixLayout::int4_nibbles, 45, 256, 32, true},
      {Scheme::int4, MatrixLayout::int4_nibbles, 45, 256, 64, false},
      {Scheme::int4, MatrixLayout::int4_nibbles, 21, 96, 32, true},
      {Scheme::int4, MatrixLayout::int4_nibbles, 40, 5120, 128, true},
      {Scheme::int4, MatrixLayout::int4_fragments, 48, 2048, 128, true},
      {Scheme::int4, MatrixLayout::int4_fragments, 48, 2048, 128, false},
  };
}

// The matrix of `h` on the device in layout p.layout.
void lay_out(DeviceQuant& d, const LayoutCase& p) {
  if (p.layout == MatrixLayout::canonical) return;
  repack_int4(d.m, nullptr, p.layout == MatrixLayout::int4_fragments);
  ASSERT_EQ(layout_of(d.m), p.layout) << name_of(p);
}

// Rows [r0, r1) of any layout are the same rows of the whole copy, bit for bit: ranges that
// start at any row of the canonical layouts and at a block of 8 rows of the repacked ones, and
// end anywhere; a range the repacked layouts cannot cut is refused.
TEST(DequantRows, ABlockOfRowsIsTheWholeCopysRows) {
  REQUIRE_GPU();
  uint32_t seed = 1;
  for (const LayoutCase& p : layouts()) {
    const QuantMatrix h = random_codes(p.scheme, p.rows, p.cols, p.group, p.zero_point, seed++);
    DeviceQuant d(h);
    lay_out(d, p);
    const std::vector<uint16_t> whole = copy_of(d.m);
    const int64_t R = p.rows;
    std::vector<std::pair<int64_t, int64_t>> ranges = {{0, R},  {0, 8},     {8, 13},
                                                       {16, R}, {8, R - 1}, {R / 8 * 8 - 8, R}};
    if (p.layout == MatrixLayout::canonical)
      for (auto r : {std::pair<int64_t, int64_t>{3, 17}, {17, 18}, {R - 5, R}, {1, R - 1}, {R - 1, R}})
        ranges.push_back(r);
    for (const auto& [r0, r1] : ranges) {
      DeviceBuffer<uint16_t> out(static_cast<size_t>((r1 - r0) * p.cols));
      out.poison();
      dequantize_rows_to_f16(d.m, r0, r1, reinterpret_cast<__half*>(out.p), nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<uint16_t> want(whole.begin() + r0 * p.cols, whole.begin() + r1 * p.cols);
      EXPECT_EQ(out.download(), want) << name_of(p) << " rows " << r0 << " to " << r1;
    }
    if (p.layout != MatrixLayout::canonical) {
      EXPECT_THROW(matrix_rows(d.m, 3, 8), Error) << name_of(p);
      EXPECT_THROW(matrix_rows(d.m, 12, R), Error) << name_of(p);
    }
    EXPECT_THROW(matrix_rows(d.m, 0, R + 1), Error) << name_of(p);
    EXPECT_THROW(matrix_rows(d.m, 8, 8), Error) << name_of(p);
  }
}

// The copy kernels of the fast kernels' layouts (int8 and fp8 a piece of 8 codes at a time,
// int4's nibble order by the nibble masks, the fragment layout) give, for every code, zero
// point and scale, the bits of the canonical kernel (dequantize_to_f16, on the same codes in
// the canonical layout) and of the host (f32_to_f16 of QuantMatrix::at): the one rounding of
// the exact product, wherever it is formed.
TEST(DequantRows, TheFastLayoutsCopiesHaveTheCanonicalBits) {
  REQUIRE_GPU();
  uint32_t seed = 100;
  for (const LayoutCase& p : layouts()) {
    const QuantMatrix h = random_codes(p.scheme, p.rows, p.cols, p.group, p.zero_point, seed++);
    DeviceQuant canon(h), d(h);
    lay_out(d, p);
    const std::vector<uint16_t> host = host_f16(h);
    EXPECT_EQ(copy_of(canon.m, true), host) << name_of(p) << ": the canonical kernel";
    EXPECT_EQ(copy_of(d.m), host) << name_of(p);
  }
}

struct GemmCase {
  LayoutCase m;
  int64_t batch;
};

// y [batch, rows] (+)= x W^T through gemm_rows_dequant in blocks of `chunk` rows, the scratch
// exactly the blocks' (a guard after it must stay untouched).
std::vector<float> gemm_in_blocks(cublasHandle_t cublas, const DeviceMatrix& m,
                                  const DeviceBuffer<uint16_t>& x, int64_t batch,
                                  const std::vector<float>& y0, bool accumulate, int64_t chunk) {
  const int64_t n = chunk < m.rows ? 2 * chunk * m.cols : m.rows * m.cols;
  constexpr int64_t kGuard = 4096;
  DeviceBuffer<uint16_t> scratch(static_cast<size_t>(n + kGuard));
  scratch.poison();
  DeviceBuffer<float> y(y0);
  gemm_rows_dequant(cublas, m, reinterpret_cast<const __half*>(x.p), batch, y.p, accumulate,
                    reinterpret_cast<__half*>(scratch.p), chunk, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> s = scratch.download();
  for (int64_t i = n; i < n + kGuard; ++i)
    if (s[static_cast<size_t>(i)] != 0xffffu) {
      ADD_FAILURE() << "blocks of " << chunk << " rows wrote past their scratch at element " << i;
      break;
    }
  return y.download();
}

// The GEMM over blocks of rows (several block sizes, one that leaves a short last block, one
// block of 8 rows, the whole matrix as one block: the copy and GEMM the step ran before
// blocks) against the whole copy's GEMM, storing and accumulating, at 65 sequences (the
// engine's first batch past the skinny GEMM) and 3. cuBLAS forms each output from the same K
// fp16 products, exact in fp32, in an order of its own for each shape (a block's M may take
// another kernel or split K): each result is within (K + 1) 2^-23 S of the exact sum, S the
// sum of the products' magnitudes and the accumulated |y0| (K + 1 additions, each rounding
// at most 2^-23 of the partial sums' magnitudes even when the tensor cores truncate), so the
// two are within twice that of each other. Both are checked against the exact sum in double
// precision, which also catches a block written to the wrong rows.
TEST(GemmRowsDequant, BlocksOfRowsGiveTheWholeCopysProduct) {
  REQUIRE_GPU();
  cublasHandle_t cublas = nullptr;
  CUBLAS_CHECK(cublasCreate(&cublas));
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  const std::vector<GemmCase> cases = {
      {{Scheme::int8, MatrixLayout::canonical, 200, 1024}, 65},
      {{Scheme::fp8, MatrixLayout::canonical, 200, 1024}, 65},
      {{Scheme::int4, MatrixLayout::int4_nibbles, 203, 1024, 128, true}, 65},
      {{Scheme::int4, MatrixLayout::int4_fragments, 200, 2048, 128, true}, 65},
      {{Scheme::int8, MatrixLayout::canonical, 200, 1024}, 3},
      {{Scheme::int4, MatrixLayout::int4_nibbles, 203, 1024, 64, false}, 3},
  };
  int64_t identical = 0, compared = 0;
  for (const GemmCase& g : cases) {
    const LayoutCase& p = g.m;
    std::vector<float> w(static_cast<size_t>(p.rows * p.cols));
    for (float& v : w) v = 0.05f * nd(rng);
    const QuantMatrix h =
        quantize_matrix(w.data(), p.rows, p.cols, p.scheme, p.group ? p.group : 128, p.zero_point);
    DeviceQuant d(h);
    lay_out(d, p);
    const std::vector<uint16_t> wf = copy_of(d.m);  // the fp16 weights every block multiplies
    const int64_t B = g.batch, R = p.rows, K = p.cols;
    std::vector<uint16_t> xh(static_cast<size_t>(B * K));
    for (uint16_t& v : xh) v = f32_to_f16(nd(rng));
    const DeviceBuffer<uint16_t> x(xh);
    std::vector<float> y0(static_cast<size_t>(B * R));
    for (float& v : y0) v = 4.f * nd(rng);
    for (bool accumulate : {false, true}) {
      // Storing: y starts as NaN, so that a row no block writes shows.
      const std::vector<float> start = accumulate ? y0 : std::vector<float>(y0.size(), std::nanf(""));
      const std::vector<float> whole = gemm_in_blocks(cublas, d.m, x, B, start, accumulate, R);
      // The exact sums and the bound's S.
      std::vector<double> exact(y0.size()), mag(y0.size());
      for (int64_t b = 0; b < B; ++b)
        for (int64_t r = 0; r < R; ++r) {
          double e = accumulate ? y0[b * R + r] : 0.0, a = accumulate ? std::fabs(e) : 0.0;
          for (int64_t k = 0; k < K; ++k) {
            const double t = double{f16_to_f32(wf[r * K + k])} * f16_to_f32(xh[b * K + k]);
            e += t;
            a += std::fabs(t);
          }
          exact[b * R + r] = e;
          mag[b * R + r] = a;
        }
      const double u = (K + 1) * std::ldexp(1.0, -23);
      for (int64_t chunk : {R, int64_t{8}, int64_t{24}, int64_t{64}, int64_t{128}}) {
        const std::string what = fmt::format("{} batch {} blocks of {} rows{}", name_of(p), B, chunk,
                                             accumulate ? ", accumulating" : "");
        const std::vector<float> got = gemm_in_blocks(cublas, d.m, x, B, start, accumulate, chunk);
        int64_t off = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          const double tol = u * mag[i];
          const bool ok = std::fabs(got[i] - exact[i]) <= tol && std::fabs(whole[i] - exact[i]) <= tol &&
                          std::fabs(double{got[i]} - whole[i]) <= 2 * tol;
          if (!ok && off++ < 5)
            ADD_FAILURE() << what << ": sequence " << i / R << " row " << i % R << ": " << got[i]
                          << " in blocks, " << whole[i] << " whole, exact " << exact[i] << " (bound " << tol
                          << ")";
          identical += got[i] == whole[i];
          ++compared;
        }
        EXPECT_EQ(off, 0) << what;
      }
    }
  }
  CUBLAS_CHECK(cublasDestroy(cublas));
  std::printf("gemm_rows_dequant: %.1f%% of the outputs in blocks bit-identical to the whole copy's\n",
              100.0 * static_cast<double>(identical) / static_cast<double>(compared));
}

// A block size the layout cannot take is refused before anything runs.
TEST(GemmRowsDequant, BlocksOfRowsThatCutARowBlockAreRefused) {
  REQUIRE_GPU();
  const QuantMatrix h = random_codes(Scheme::int8, 40, 256, 0, false, 3);
  DeviceQuant d(h);
  EXPECT_THROW(gemm_rows_dequant(nullptr, d.m, nullptr, 3, nullptr, false, nullptr, 12, nullptr), Error);
  EXPECT_THROW(gemm_rows_dequant(nullptr, d.m, nullptr, 3, nullptr, false, nullptr, 0, nullptr), Error);
}

}  // namespace
