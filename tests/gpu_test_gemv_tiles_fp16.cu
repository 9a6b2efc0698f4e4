// The tiles GEMV on fp16 weights (kernels/gemv_tiles.cu, Bits 16) and its layout
// (kernels/weights.cu's repack_fp16_tiles, kernels/prefill.cu's fp16 copy of rows and the tied
// embedding's gather) against double-precision CPU references: 2, 3, 8, 9 and 16 sequences (one
// and two mmas a tile, the rest of a sequence tile masked) on rows that are not whole tiles (200,
// 4100) and columns of 1, 3 and 32 steps, the 8b shapes and its lm_head, store and accumulate;
// every launchable shape; the same bits on a second call; the default shape; what the kernel
// refuses. Then the layout: every value where fp16_tiles_layout.h puts it, the padded rows zero;
// the fp16 copy of rows of the tiles is the canonical matrix, whole and a block of rows at a
// time; the gather of embedding rows from the tiles is the canonical gather.
#include <random>
#include <string>
#include <vector>

#include "decodebench/half.h"
#include "decodebench/linear_shapes.h"
#include "fp16_tiles_layout.h"
#include "gemv_tiles.cuh"
#include "gpu_common.cuh"
#include "gpu_tiles_test_util.cuh"
#include "prefill.cuh"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;
using namespace dbtest;

namespace {

using Case = TilesCase;

// The bound on |got - exact| of one output, relative to sum |w x| (mma_chain_bound). Each term
// w x is exact in fp32 (11 bits times 11): 2 mmas a step (one a tile), the partial sums at most
// sum |w x|, no scale. An accumulating call rounds once more, by 2^-24 of the result.
double relative_bound(int64_t cols) {
  return mma_chain_bound(cols / tiles16::kStepCols, 2, 0);
}

// w [rows, cols] fp16 bits.
LinearInputs<std::vector<uint16_t>> make_inputs(const Case& c) {
  return linear_inputs(c.rows, c.cols, c.batch, tiles_case_seed(c), [](const std::vector<float>& w) {
    std::vector<uint16_t> h(w.size());
    for (size_t i = 0; i < w.size(); ++i) h[i] = f32_to_f16(w[i]);
    return h;
  });
}

// A canonical fp16 matrix on the device, and its repack into the fp16 tiles layout, in buffers
// of their own.
struct DeviceTiles16 {
  DeviceBuffer<uint16_t> canonical_values;
  DeviceMatrix canonical;
  DeviceMatrix m;
  DeviceBuffer<uint16_t> values;
  DeviceTiles16(const std::vector<uint16_t>& w, int64_t rows, int64_t cols)
      : canonical_values(w),
        canonical(device_matrix({Scheme::fp16, rows, cols, 0, false}, MatrixLayout::canonical)),
        m(device_matrix({Scheme::fp16, rows, cols, 0, false}, MatrixLayout::fp16_tiles)),
        values(device_matrix_bytes(m).weights / 2) {
    canonical.qweight = canonical_values.p;
    values.poison();  // the repack writes every value, the padded rows' too
    m.qweight = values.p;
    repack_fp16_tiles(canonical, m, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
  }
};

class Fp16TilesTest : public ::testing::TestWithParam<Case> {};

TEST_P(Fp16TilesTest, EverySequenceMatchesTheCpuReferenceAndTheBitsRepeat) {
  REQUIRE_GPU();
  const Case c = GetParam();
  const LinearInputs<std::vector<uint16_t>> in = make_inputs(c);
  const DeviceTiles16 t(in.w, c.rows, c.cols);
  expect_tiles_reference_and_same_bits(t.m, in, c.accumulate, relative_bound(c.cols), tiles_case_name(c));
}

std::vector<Case> cases() {
  std::vector<Case> v;
  // Rows past the last whole tile (200 = 12 x 16 + 8, 4100 = 256 x 16 + 4), 1, 3 and 32 steps of
  // 32 columns, one and two mmas a tile with the rest of the sequence tile masked.
  for (int64_t b : {2, 3, 8, 9, 16})
    for (auto [rows, cols] :
         {std::pair<int64_t, int64_t>{200, 32}, {200, 96}, {200, 1024}, {4100, 96}, {4100, 1024}})
      v.push_back({rows, cols, b});
  for (int64_t b : {3, 9, 16})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{200, 96}, {4100, 1024}})
      v.push_back({rows, cols, b, true});
  // The 8b shapes: qkv, o, gate/up, down, and the lm_head.
  for (int64_t b : {2, 16}) v.push_back({6144, 4096, b});
  v.push_back({4096, 4096, 8});
  for (int64_t b : {2, 9}) v.push_back({28672, 4096, b});
  for (int64_t b : {3, 16}) v.push_back({4096, 14336, b});
  v.push_back({4096, 14336, 8, true});
  for (int64_t b : {8, 16}) v.push_back({128256, 4096, b});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp16TilesTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return tiles_case_name(info.param); });

// Every launchable shape (the lab's four steps ahead too) at 5 and 12 sequences, on a matrix of
// fewer steps than some blocks' warps (200 x 96: 3 steps) and one of more, the second
// accumulating.
TEST(Fp16Tiles, EveryLaunchableShapeMatchesTheCpuReference) {
  REQUIRE_GPU();
  for (const Case& c :
       {Case{200, 96, 5}, Case{200, 96, 12}, Case{4100, 1024, 5, true}, Case{4100, 1024, 12, true}}) {
    const LinearInputs<std::vector<uint16_t>> in = make_inputs(c);
    const DeviceTiles16 t(in.w, c.rows, c.cols);
    expect_every_launchable_shape(t.m, in, c.accumulate, relative_bound(c.cols), tiles_case_name(c));
  }
}

TEST(Fp16Tiles, TheDefaultShapeIsAnInstantiatedShape) {
  REQUIRE_GPU();
  expect_default_shapes_instantiated(
      {Scheme::fp16, 0, 0, 0, false},
      {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}});
}

// fp16's bytes stream as int4's at the same shape: a block's bytes four times int4's for the
// same columns, the same bytes in flight a warp (two 512-byte tiles a row tile and step).
TEST(Fp16Tiles, TheShapeModelCountsFp16sBytes) {
  EXPECT_NEAR(tiles_shape_us(4096, 4096, {1, 8}, 3, 132, 16),
              4 * tiles_shape_us(4096, 4096, {1, 8}, 3, 132, 4), 1e-9);
}

TEST(Fp16Tiles, RefusesWhatItDoesNotTakeWithTheReason) {
  REQUIRE_GPU();
  EXPECT_STREQ(expect_takes_up_to_16_sequences_in_tiles(Scheme::fp16),
               "the tiles GEMV reads fp16 in the fp16 tiles layout");
  expect_launch_refused(
      device_matrix({Scheme::fp16, 200, 1040, 0, false}, MatrixLayout::fp16_tiles),  // 32.5 steps
      "whole steps of 32 columns");
}

// ------------------------------------------------------------------ the layout

std::vector<uint16_t> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (uint16_t& h : v) {
    h = static_cast<uint16_t>(rng());
    if ((h & 0x7c00u) == 0x7c00u) h &= 0xbfffu;  // no infinities or NaNs: any finite bits
  }
  return v;
}

const std::pair<int64_t, int64_t> kLayoutShapes[] = {{200, 96}, {48, 2048}, {4100, 1024}};

TEST(Fp16TilesLayout, TheRepackPutsEveryValueWhereTheLayoutSays) {
  REQUIRE_GPU();
  uint32_t seed = 1;
  for (auto [rows, cols] : kLayoutShapes) {
    const std::string what = fmt::format("[{} x {}]", rows, cols);
    const std::vector<uint16_t> w = random_values(rows * cols, seed++);
    const DeviceTiles16 t(w, rows, cols);
    const std::vector<uint16_t> values = t.values.download();
    const int64_t col_tiles = cols / tiles16::kTileCols;
    for (int64_t r = 0; r < tiles16::padded_rows(rows); ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const uint16_t got = values[static_cast<size_t>(tiles16::index_of(tiles16::place(r, c, col_tiles)))];
        const uint16_t want = r < rows ? w[static_cast<size_t>(r * cols + c)] : 0;
        ASSERT_EQ(got, want) << what << " row " << r << " column " << c;
      }
    const MatrixBytes b = device_matrix_bytes(t.m);
    EXPECT_EQ(b.weights, static_cast<uint64_t>(tiles16::padded_rows(rows) * cols * 2)) << what;
    EXPECT_EQ(b.scales, 0u) << what;
    EXPECT_EQ(b.zeros, 0u) << what;
  }
}

// The prefill's fp16 copy of rows of the tiles is the canonical matrix, bit for bit, whole and
// any block of rows of it (at multiples of 8, as the copies' blocks start, and not of 16);
// matrix_rows cuts them at whole tiles only.
TEST(Fp16TilesLayout, ItsFp16CopyIsTheCanonicalMatrixWholeAndInBlocksOfRows) {
  REQUIRE_GPU();
  uint32_t seed = 10;
  for (auto [rows, cols] : kLayoutShapes) {
    const std::string what = fmt::format("[{} x {}]", rows, cols);
    const std::vector<uint16_t> whole = random_values(rows * cols, seed++);
    const DeviceTiles16 t(whole, rows, cols);
    ASSERT_NO_FATAL_FAILURE(expect_fp16_copies(t.m, whole, what));
  }
}

// A tied lm_head in the fp16 tiles is the embedding: the batched step's and the prefill's
// gather (embed_rows) read its rows from the tiles as the canonical table's, exactly, the first,
// a padded tile's and the last token among them.
TEST(Fp16TilesLayout, TheEmbeddingGatherReadsTheTilesAsTheCanonicalTable) {
  REQUIRE_GPU();
  for (auto [vocab, hidden] : {std::pair<int64_t, int64_t>{200, 96}, {1000, 2048}}) {
    const std::string what = fmt::format("[{} x {}]", vocab, hidden);
    std::mt19937 rng(static_cast<unsigned>(vocab));
    std::normal_distribution<float> d(0.f, 1.f);
    std::vector<uint16_t> w(static_cast<size_t>(vocab * hidden));
    for (uint16_t& h : w) h = f32_to_f16(d(rng));
    const DeviceTiles16 t(w, vocab, hidden);
    const std::vector<int32_t> tokens = {0,
                                         7,
                                         static_cast<int32_t>(vocab / 2),
                                         static_cast<int32_t>(vocab - 1),
                                         static_cast<int32_t>(vocab - 9),
                                         16,
                                         15,
                                         3};
    DeviceBuffer<int32_t> tok(tokens);
    const int64_t rows = static_cast<int64_t>(tokens.size());
    DeviceBuffer<float> from_tiles(static_cast<size_t>(rows * hidden)), from_canonical(from_tiles.n);
    from_tiles.poison();
    from_canonical.poison();
    embed_rows(t.m, tok.p, rows, from_tiles.p, nullptr);
    embed_rows(t.canonical, tok.p, rows, from_canonical.p, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> got = from_tiles.download(), want = from_canonical.download();
    EXPECT_EQ(got, want) << what;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t k = 0; k < hidden; k += 37)
        ASSERT_EQ(got[i * hidden + k], f16_to_f32(w[tokens[i] * hidden + k])) << what << " row " << i;
  }
}

}  // namespace
