// The tiles GEMV on int8 weights (kernels/gemv_tiles.cu, Bits 8) and its layout
// (kernels/weights.cu's repack_int8_tiles, kernels/prefill.cu's fp16 copy) against
// double-precision CPU references: 2, 3, 8, 9 and 16 sequences (one and two mmas a k-step, the
// rest of a sequence tile masked) on rows that are not whole tiles (200, 4100) and columns of 6
// and 16 steps, the 8b shapes, store and accumulate; every instantiated shape; the same bits on
// a second call; the default shape; what the kernel refuses. Then the layout:
// every code where int8_tiles_layout.h puts it (biased by 128), the padded rows code 0, the
// row scales as they were; the fp16 copy of the tiles has the canonical copy's bits, whole and
// a block of rows at a time.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "decodebench/half.h"
#include "decodebench/linear_shapes.h"
#include "decodebench/quant.h"
#include "gemv_tiles.cuh"
#include "gpu_common.cuh"
#include "gpu_tiles_test_util.cuh"
#include "int8_tiles_layout.h"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;
using namespace dbtest;

namespace {

using Case = TilesCase;

// The bound on |got - exact| of one output, relative to sum |w x| (mma_chain_bound). Each term
// q x is exact in fp32 (8 bits times 11), and the exact w x is its product with the fp16 row
// scale: 4 mmas a step, and the scale's product rounds once more, the partial sums at most
// sum |w x| / scale. An accumulating call rounds once more, by 2^-24 of the result. The bound
// stays below one term's share of the sum (sum |w x| / cols) for every shape here.
double relative_bound(int64_t cols) {
  return mma_chain_bound(cols / tiles8::kStepCols, 4, 1);
}

LinearInputs<QuantMatrix> make_inputs(const Case& c) {
  return quantized_inputs(c.rows, c.cols, c.batch, tiles_case_seed(c), Scheme::int8, 0, false);
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

class Int8TilesTest : public ::testing::TestWithParam<Case> {};

TEST_P(Int8TilesTest, EverySequenceMatchesTheCpuReferenceAndTheBitsRepeat) {
  REQUIRE_GPU();
  const Case c = GetParam();
  const LinearInputs<QuantMatrix> in = make_inputs(c);
  DeviceQuant dq(in.w);
  const DeviceTiles8 t(dq.m);
  expect_tiles_reference_and_same_bits(t.m, in, c.accumulate, relative_bound(c.cols), tiles_case_name(c));
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
                         [](const auto& info) { return tiles_case_name(info.param); });

// Every instantiated shape at 5 and 12 sequences, on a matrix of fewer steps than some blocks'
// warps (200 x 384: 6 steps) and one of more, the second accumulating.
TEST(Int8Tiles, EveryInstantiatedShapeMatchesTheCpuReference) {
  REQUIRE_GPU();
  for (const Case& c :
       {Case{200, 384, 5}, Case{200, 384, 12}, Case{4100, 1024, 5, true}, Case{4100, 1024, 12, true}}) {
    const LinearInputs<QuantMatrix> in = make_inputs(c);
    DeviceQuant dq(in.w);
    const DeviceTiles8 t(dq.m);
    expect_every_launchable_shape(t.m, in, c.accumulate, relative_bound(c.cols), tiles_case_name(c));
  }
}

TEST(Int8Tiles, TheDefaultShapeIsAnInstantiatedShape) {
  REQUIRE_GPU();
  expect_default_shapes_instantiated({Scheme::int8, 0, 0, 0, false},
                                     {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}});
}

// int8's bytes stream as int4's at the same shape: a block's bytes twice int4's for the same
// columns, the same bytes in flight a warp (two 512-byte tiles a row tile and step).
TEST(Int8Tiles, TheShapeModelCountsInt8sBytes) {
  EXPECT_NEAR(tiles_shape_us(4096, 4096, {1, 8}, 3, 132, 8),
              2 * tiles_shape_us(4096, 4096, {1, 8}, 3, 132, 4), 1e-9);
}

TEST(Int8Tiles, RefusesWhatItDoesNotTakeWithTheReason) {
  REQUIRE_GPU();
  expect_takes_up_to_16_sequences_in_tiles(Scheme::int8);
  expect_launch_refused(
      device_matrix({Scheme::int8, 200, 1056, 0, false}, MatrixLayout::int8_tiles),  // 16.5 steps
      "whole steps of 64 columns");
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
    ASSERT_NO_FATAL_FAILURE(expect_fp16_copies(t.m, canonical_fp16(dq.m), what));
  }
}

}  // namespace
