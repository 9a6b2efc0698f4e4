// The fp16 copy of a quantized matrix a block of rows at a time (dequantize_rows_to_f16): a
// block of rows of every layout has the bits of the same rows of the whole copy, and the copy
// kernels of the layouts the fast kernels read have the canonical kernels' and the host's
// bits.
#include <fmt/format.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "decodebench/error.h"
#include "decodebench/half.h"
#include "decodebench/quant.h"
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

}  // namespace
