// The tiles GEMV on int8 weights (kernels/gemv_tiles.cu, Bits 8) and its layout
// (kernels/weights.cu's repack_int8_tiles, kernels/prefill.cu's fp16 copy) against
// double-precision CPU references: 2, 3, 8, 9 and 16 sequences (one and two mmas a k-step, the
// rest of a sequence tile masked) on rows that are not whole tiles (200, 4100) and columns of 6
// and 16 steps, the 8b shapes, store and accumulate; every instantiated shape; the same bits on
// a second call; the default shape; what the kernel refuses. Then the layout:
// every code where int8_tiles_layout.h puts it (biased by 128), the padded rows code 0, the
// row scales as they were; the fp16 copy of the tiles has the canonical copy's bits, whole and
// a block of rows at a time.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "decodebench/half.h"
#include "decodebench/linear_shapes.h"
#include "decodebench/quant.h"
#include "gemv_tiles.cuh"
#include "gpu_common.cuh"
#include "int8_tiles_layout.h"
#include "parallel_fill.h"
#include "prefill.cuh"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;
using dbtest::DeviceBuffer;
using dbtest::DeviceQuant;
using dbtest::normal_values;

namespace {

struct Case {
  int64_t rows, cols, batch;
  bool accumulate = false;
};

std::string name(const Case& c) {
  return fmt::format("{}x{}_b{}{}", c.rows, c.cols, c.batch, c.accumulate ? "_acc" : "");
}

// The bound on |got - exact| of one output, relative to sum |w x|. Each term q x is exact in
// fp32 (8 bits times 11), and the exact w x is its product with the fp16 row scale. A warp's
// accumulators take every mma of its steps: a term passes through at most 16 additions inside
// its mma (counted one by one, the tensor cores' order not being specified) and one a later mma
// of the warp (4 a step, ceil(steps / 4) steps a warp at 4 warps a block or more), one a warp
// when the warps' sums meet (8 at most) and the scale's product: each rounding by at most 2^-23
// of the partial sum (the tensor cores' fp32 additions truncate), the partial sums at most
// sum |w x| / scale. An accumulating call rounds once more, by 2^-24 of the result. The bound
// stays below one term's share of the sum (sum |w x| / cols) for every shape here.
double relative_bound(int64_t cols) {
  const int64_t steps = cols / tiles8::kStepCols;
  return std::ldexp(16 + 4 * ((steps + 3) / 4) + 8 + 1, -23);
}
double bound(const Case& c, double mag, double ref) {
  return relative_bound(c.cols) * mag + (c.accumulate ? std::ldexp(std::fabs(ref), -23) : 0.0) + 1e-30;
}

struct Inputs {
  QuantMatrix q;
  std::vector<uint16_t> x;  // [batch, cols] fp16 bits
  std::vector<float> y0;    // [batch, rows]: y before an accumulating call
};

Inputs make_inputs(const Case& c) {
  std::mt19937 rng(static_cast<unsigned>(c.rows * 37 + c.cols * 5 + c.batch));
  std::normal_distribution<float> xd(0.f, 1.f);
  const std::vector<float> w = normal_values(c.rows * c.cols, 0.f, 0.02f, rng());
  Inputs in;
  in.q = quantize_matrix(w.data(), c.rows, c.cols, Scheme::int8, 0, false);
  in.x.resize(static_cast<size_t>(c.batch * c.cols));
  for (auto& h : in.x) h = f32_to_f16(xd(rng));
  in.y0.resize(static_cast<size_t>(c.batch * c.rows));
  for (float& v : in.y0) v = xd(rng);
  return in;
}

// A canonical int8 matrix repacked into the int8 tiles layout, in buffers of its own.
struct DeviceTiles8 {
  DeviceMatrix m;
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<uint16_t> scales;
  explicit DeviceTiles8(const DeviceMatrix& canonical)
      : m(device_matrix(shape_of(canonical), MatrixLayout::int8_tiles)),
        codes(device_matrix_bytes(m).weights),
        scales(device_matrix_bytes(m).scales / 2) {
    codes.poison();  // the repack writes every byte, the padded rows' too
    scales.poison();
    m.qweight = codes.p;
    m.scales = reinterpret_cast<__half*>(scales.p);
    repack_int8_tiles(canonical, m, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
  }
};

std::vector<float> run(const Case& c, const Inputs& in, const DeviceMatrix& m,
                       const DeviceBuffer<uint16_t>& x, DeviceBuffer<float>& y, TilesShape shape = {}) {
  if (c.accumulate)
    y.upload(in.y0);
  else
    y.poison();
  gemv_tiles_shaped(m, reinterpret_cast<const __half*>(x.p), c.batch, y.p, c.accumulate, shape, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  return y.download();
}

// Every row of the small shapes; of the large ones every stride-th row and the last 128 (the
// padded tile's among them), so that the reference stays at ~10^8 multiply-adds.
void expect_reference(const Case& c, const Inputs& in, const std::vector<float>& got,
                      const std::string& what) {
  const int64_t stride = std::max<int64_t>(1, c.rows * c.cols * c.batch / 100'000'000);
  std::vector<float> row(static_cast<size_t>(c.cols));
  for (int64_t r = 0; r < c.rows; ++r) {
    if (r % stride != 0 && r < c.rows - 128) continue;
    in.q.row(r, row.data());
    for (int64_t s = 0; s < c.batch; ++s) {
      double ref = c.accumulate ? in.y0[s * c.rows + r] : 0.0, mag = 0.0;
      for (int64_t k = 0; k < c.cols; ++k) {
        const double t = static_cast<double>(row[k]) * f16_to_f32(in.x[s * c.cols + k]);
        ref += t;
        mag += std::fabs(t);
      }
      const float v = got[s * c.rows + r];
      ASSERT_FALSE(std::isnan(v)) << what << " row " << r << " sequence " << s << " was not written";
      ASSERT_LE(std::fabs(v - ref), bound(c, mag, ref))
          << what << " row " << r << " sequence " << s << ": got " << v << ", reference " << ref;
    }
  }
}

class Int8TilesTest : public ::testing::TestWithParam<Case> {};

TEST_P(Int8TilesTest, EverySequenceMatchesTheCpuReferenceAndTheBitsRepeat) {
  REQUIRE_GPU();
  const Case c = GetParam();
  const Inputs in = make_inputs(c);
  DeviceQuant dq(in.q);
  const DeviceTiles8 t(dq.m);
  const char* why = nullptr;
  ASSERT_TRUE(gemv_tiles_supports(t.m, c.batch, &why)) << name(c) << ": " << why;
  DeviceBuffer<uint16_t> x(in.x);
  DeviceBuffer<float> y(in.y0.size());
  const std::vector<float> got = run(c, in, t.m, x, y);
  expect_reference(c, in, got, name(c));
  EXPECT_EQ(run(c, in, t.m, x, y), got) << name(c) << ": a second call gave other bits";
}

std::vector<Case> cases() {
  std::vector<Case> v;
  // Rows past the last whole tile (200 = 12 x 16 + 8, 4100 = 256 x 16 + 4), 6 and 16 steps of 64
  // columns, one and two mmas a k-step with the rest of the sequence tile masked.
  for (int64_t b : {2, 3, 8, 9, 16})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{200, 384}, {200, 1024}, {4100, 384}, {4100, 1024}})
      v.push_back({rows, cols, b});
  for (int64_t b : {3, 9, 16})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{200, 384}, {4100, 1024}})
      v.push_back({rows, cols, b, true});
  // The 8b shapes: qkv, o, gate/up, down.
  for (int64_t b : {2, 16}) v.push_back({6144, 4096, b});
  v.push_back({4096, 4096, 8});
  for (int64_t b : {2, 9}) v.push_back({28672, 4096, b});
  for (int64_t b : {3, 16}) v.push_back({4096, 14336, b});
  v.push_back({4096, 14336, 8, true});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, Int8TilesTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return name(info.param); });

// Every instantiated shape at 5 and 12 sequences, on a matrix of fewer steps than some blocks'
// warps (200 x 384: 6 steps) and one of more, the second accumulating.
TEST(Int8Tiles, EveryInstantiatedShapeMatchesTheCpuReference) {
  REQUIRE_GPU();
  for (const Case& c :
       {Case{200, 384, 5}, Case{200, 384, 12}, Case{4100, 1024, 5, true}, Case{4100, 1024, 12, true}}) {
    const Inputs in = make_inputs(c);
    DeviceQuant dq(in.q);
    const DeviceTiles8 t(dq.m);
    DeviceBuffer<uint16_t> x(in.x);
    DeviceBuffer<float> y(in.y0.size());
    for (const TilesShape& k : tiles_launchable_shapes()) {
      const std::string what =
          fmt::format("{} row tiles {} warps {} ahead {}", name(c), k.row_tiles, k.warps, k.ahead);
      expect_reference(c, in, run(c, in, t.m, x, y, k), what);
    }
  }
}

TEST(Int8Tiles, TheDefaultShapeIsAnInstantiatedShape) {
  REQUIRE_GPU();
  const std::vector<TilesShape> all = tiles_kernel_shapes();
  for (auto [rows, cols] :
       {std::pair<int64_t, int64_t>{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}})
    for (int64_t batch : {2, 8, 9, 16}) {
      DeviceMatrix m = device_matrix({Scheme::int8, rows, cols, 0, false}, MatrixLayout::int8_tiles);
      const TilesShape s = tiles_shape(m, batch);
      EXPECT_TRUE(
          std::any_of(all.begin(), all.end(),
                      [&](const TilesShape& k) { return k.row_tiles == s.row_tiles && k.warps == s.warps; }))
          << rows << "x" << cols << " batch " << batch;
    }
}

// int8's bytes stream as int4's at the same shape: a block's bytes twice int4's for the same
// columns, the same bytes in flight a warp (two 512-byte tiles a row tile and step).
TEST(Int8Tiles, TheShapeModelCountsInt8sBytes) {
  EXPECT_NEAR(tiles_shape_us(4096, 4096, {1, 8}, 3, 132, 8),
              2 * tiles_shape_us(4096, 4096, {1, 8}, 3, 132, 4), 1e-9);
}

TEST(Int8Tiles, RefusesWhatItDoesNotTakeWithTheReason) {
  REQUIRE_GPU();
  DeviceMatrix m = device_matrix({Scheme::int8, 200, 1024, 0, false}, MatrixLayout::int8_tiles);
  const char* why = nullptr;
  EXPECT_TRUE(gemv_tiles_supports(m, 2, &why));
  EXPECT_TRUE(gemv_tiles_supports(m, 16, &why));
  EXPECT_FALSE(gemv_tiles_supports(m, 17, &why));
  EXPECT_FALSE(gemv_tiles_supports(
      device_matrix({Scheme::int8, 200, 1024, 0, false}, MatrixLayout::canonical), 2, &why));
  m.cols = 1056;  // 16.5 steps
  try {
    gemv_tiles(m, nullptr, 2, nullptr, false, nullptr);
    ADD_FAILURE() << "a launch the kernel does not take";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("whole steps of 64 columns"), std::string::npos) << e.what();
  }
}

// ------------------------------------------------------------------ the layout

QuantMatrix random_codes(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> log2_scale(-20.f, -2.f);
  QuantMatrix h;
  h.scheme = Scheme::int8;
  h.rows = rows;
  h.cols = cols;
  for (int64_t i = 0; i < rows * cols; ++i) h.qweight.push_back(static_cast<uint8_t>(byte(rng)));
  for (int64_t i = 0; i < rows; ++i) h.scales.push_back(f32_to_f16(std::exp2(log2_scale(rng))));
  return h;
}

const std::pair<int64_t, int64_t> kLayoutShapes[] = {{200, 384}, {48, 2048}, {4100, 1024}};

TEST(Int8TilesLayout, TheRepackPutsEveryCodeWhereTheLayoutSays) {
  REQUIRE_GPU();
  uint32_t seed = 1;
  for (auto [rows, cols] : kLayoutShapes) {
    const std::string what = fmt::format("[{} x {}]", rows, cols);
    const QuantMatrix h = random_codes(rows, cols, seed++);
    DeviceQuant dq(h);
    const DeviceTiles8 t(dq.m);
    const std::vector<uint8_t> codes = t.codes.download();
    const int64_t col_tiles = cols / tiles8::kTileCols;
    for (int64_t r = 0; r < tiles8::padded_rows(rows); ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t got = codes[static_cast<size_t>(tiles8::byte_of(tiles8::place(r, c, col_tiles)))];
        const uint8_t want = tiles8::code_byte(
            r < rows ? static_cast<int8_t>(h.qweight[static_cast<size_t>(r * cols + c)]) : 0);
        ASSERT_EQ(got, want) << what << " row " << r << " column " << c;
      }
    EXPECT_EQ(t.scales.download(), h.scales) << what;
    const MatrixBytes b = device_matrix_bytes(t.m);
    EXPECT_EQ(b.weights, static_cast<uint64_t>(tiles8::padded_rows(rows) * cols)) << what;
    EXPECT_EQ(b.scales, static_cast<uint64_t>(rows * 2)) << what;
    EXPECT_EQ(b.zeros, 0u) << what;
  }
}

std::vector<uint16_t> copy_rows(const DeviceMatrix& m, int64_t r0, int64_t r1) {
  DeviceBuffer<uint16_t> out(static_cast<size_t>((r1 - r0) * m.cols));
  out.poison();
  dequantize_rows_to_f16(m, r0, r1, reinterpret_cast<__half*>(out.p), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  return out.download();
}

// The fp16 copy of the int8 tiles has the canonical kernel's bits, whole and any block of rows
// of it (at multiples of 8, as the copies' blocks start, and not of 16); matrix_rows cuts them
// at whole tiles only.
TEST(Int8TilesLayout, ItsFp16CopyHasTheCanonicalBitsWholeAndInBlocksOfRows) {
  REQUIRE_GPU();
  uint32_t seed = 10;
  for (auto [rows, cols] : kLayoutShapes) {
    const std::string what = fmt::format("[{} x {}]", rows, cols);
    const QuantMatrix h = random_codes(rows, cols, seed++);
    DeviceQuant dq(h);
    const DeviceTiles8 t(dq.m);
    DeviceBuffer<uint16_t> canon(static_cast<size_t>(rows * cols)), tiled(canon.n);
    dequantize_to_f16(dq.m, reinterpret_cast<__half*>(canon.p), nullptr);
    tiled.poison();
    dequantize_any_to_f16(t.m, reinterpret_cast<__half*>(tiled.p), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> whole = canon.download();
    ASSERT_EQ(tiled.download(), whole) << what;
    const int64_t R = rows;
    for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, R}, {8, 40}, {16, R}, {24, 25}, {R - 8, R}}) {
      const std::vector<uint16_t> want(whole.begin() + r0 * cols, whole.begin() + r1 * cols);
      EXPECT_EQ(copy_rows(t.m, r0, r1), want) << what << " rows " << r0 << " to " << r1;
    }
    const DeviceMatrix cut = matrix_rows(t.m, 16, R);
    EXPECT_EQ(cut.rows, R - 16);
    const std::vector<uint16_t> want(whole.begin() + 16 * cols, whole.end());
    EXPECT_EQ(copy_rows(cut, 0, R - 16), want) << what;
    EXPECT_THROW(matrix_rows(t.m, 8, R), Error) << what;
  }
}

}  // namespace
