// The batched step's tiles GEMV (kernels/gemv_tiles.cu) and its layout (kernels/weights.cu's
// repack_int4_tiles, kernels/prefill.cu's fp16 copy) against double-precision CPU references:
// int4 with and without zero points at 2, 3, 8, 9 and 16 sequences (one and two mmas a
// k-step, the rest of a sequence tile masked) on rows that are not whole tiles (200, 4100) and
// columns of 3 and 8 steps, groups of 128 to 512, the 8b shapes, store and accumulate; every
// instantiated shape; the same bits on a second call; the default shape and the model that
// picks it; what the kernel refuses. Then the layout: every code and meta word where
// int4_tiles_layout.h puts it, the padded rows zero; the fp16 copy of the tiles has the
// canonical copy's bits, whole and a block of rows at a time.
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
#include "gpu_tiles_test_util.cuh"
#include "int4_tiles_layout.h"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;
using namespace dbtest;

namespace {

struct Case {
  int64_t rows, cols, batch;
  int group = 128;
  bool zero_point = true;
  bool accumulate = false;
};

std::string name(const Case& c) {
  return fmt::format("{}x{}_b{}_g{}{}{}", c.rows, c.cols, c.batch, c.group, c.zero_point ? "" : "_sym",
                     c.accumulate ? "_acc" : "");
}

// The bound on |got - exact| of one output, relative to sum |w x| (the terms are exact: the
// canonical value s (q - z) is exact in fp32, 11 bits times 5, and so is each fp16 product
// the mma forms, (q - z) times x, 5 bits times 11). Each term then passes through at most 128
// additions in its step's mma chain (16 a mma, 8 k-steps: counted one by one, as the tensor
// cores' order inside an mma is not specified), the scale's fma, an addition a step of the row
// and one a warp when the warps' sums meet: 128 + 1 + cols / 128 + 8 roundings (8 warps at
// most), each by at most 2^-23 of the partial sum (the tensor cores' fp32 additions truncate:
// a whole ulp, not half), and the partial sums are at most sum |w x|. An accumulating call
// rounds once more, by 2^-24 of the result. The bound stays below one term's share of the sum
// (sum |w x| / cols) for every shape here: a code or a scale read from the wrong place fails.
double relative_bound(const Case& c) {
  const double roundings = tiles::kStepCols + 1 + static_cast<double>(c.cols / tiles::kStepCols) + 8;
  return std::ldexp(roundings, -23);
}

LinearInputs<QuantMatrix> make_inputs(const Case& c) {
  return quantized_inputs(c.rows, c.cols, c.batch,
                          static_cast<unsigned>(c.rows * 31 + c.cols * 7 + c.batch + c.group), Scheme::int4,
                          c.group, c.zero_point);
}

// A canonical matrix repacked into the tiles layout, in buffers of its own.
struct DeviceTiles {
  DeviceMatrix m;
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<uint32_t> meta;
  static DeviceMatrix tiles_of(const DeviceMatrix& canonical) {
    return device_matrix(shape_of(canonical), MatrixLayout::int4_tiles);
  }
  explicit DeviceTiles(const DeviceMatrix& canonical)
      : m(tiles_of(canonical)),
        codes(device_matrix_bytes(m).weights),
        meta(device_matrix_bytes(m).scales / 4) {
    codes.poison();  // the repack writes every byte, the padded rows' too
    meta.poison();
    m.qweight = codes.p;
    m.scales = reinterpret_cast<__half*>(meta.p);
    repack_int4_tiles(canonical, m, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
  }
};

class TilesTest : public ::testing::TestWithParam<Case> {};

TEST_P(TilesTest, EverySequenceMatchesTheCpuReferenceAndTheBitsRepeat) {
  REQUIRE_GPU();
  const Case c = GetParam();
  const LinearInputs<QuantMatrix> in = make_inputs(c);
  DeviceQuant dq(in.w);
  const DeviceTiles t(dq.m);
  expect_tiles_reference_and_same_bits(t.m, in, c.accumulate, relative_bound(c), name(c));
}

std::vector<Case> cases() {
  std::vector<Case> v;
  // Rows past the last whole tile (200 = 12 x 16 + 8, 4100 = 256 x 16 + 4), 3 and 8 steps of 128
  // columns, one and two mmas a k-step with the rest of the sequence tile masked, symmetric.
  for (bool zp : {true, false})
    for (int64_t b : {2, 3, 8, 9, 16})
      for (auto [rows, cols] :
           {std::pair<int64_t, int64_t>{200, 384}, {200, 1024}, {4100, 384}, {4100, 1024}})
        v.push_back({rows, cols, b, 128, zp});
  // Accumulating into y.
  for (int64_t b : {3, 9, 16})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{200, 384}, {4100, 1024}})
      v.push_back({rows, cols, b, 128, true, true});
  // Groups of 256 and 512: several steps a group.
  for (bool zp : {true, false})
    for (int64_t b : {2, 9}) v.push_back({4100, 1024, b, 256, zp});
  v.push_back({200, 1024, 16, 512, true});
  // The 8b shapes: qkv, o, gate/up, down.
  for (int64_t b : {2, 16}) v.push_back({6144, 4096, b});
  v.push_back({4096, 4096, 8});
  v.push_back({4096, 4096, 16, 128, false});
  for (int64_t b : {2, 9}) v.push_back({28672, 4096, b});
  for (int64_t b : {3, 16}) v.push_back({4096, 14336, b});
  v.push_back({4096, 14336, 8, 128, true, true});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, TilesTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return name(info.param); });

// Every instantiated shape at 5 and 12 sequences (one and two sequence tiles, masked), on a
// matrix of fewer steps than a block's warps (200 x 384: some warps idle) and one of more, the
// second accumulating.
TEST(Tiles, EveryInstantiatedShapeMatchesTheCpuReference) {
  REQUIRE_GPU();
  for (const Case& c : {Case{200, 384, 5}, Case{200, 384, 12}, Case{4100, 1024, 5, 128, false, true},
                        Case{4100, 1024, 12, 256, true, true}}) {
    const LinearInputs<QuantMatrix> in = make_inputs(c);
    DeviceQuant dq(in.w);
    const DeviceTiles t(dq.m);
    expect_every_launchable_shape(t.m, in, c.accumulate, relative_bound(c), name(c));
  }
}

// The timed choice (tune_tiles, the engine's at load) is an instantiated shape: the default
// unless another was timed 3% faster; and the kernel at that shape gives the reference's sums.
TEST(Tiles, TheTimedShapeIsAnInstantiatedShapeAndTheDefaultUnlessFaster) {
  REQUIRE_GPU();
  const std::vector<TilesShape> all = tiles_kernel_shapes();
  for (const Case& c : {Case{4096, 4096, 2}, Case{4100, 1024, 12}}) {
    const LinearInputs<QuantMatrix> in = make_inputs(c);
    DeviceQuant dq(in.w);
    const DeviceTiles t(dq.m);
    DeviceBuffer<uint16_t> x(in.x);
    DeviceBuffer<float> y(in.y0.size());
    const TilesTiming tt =
        tune_tiles({&t.m, &t.m}, reinterpret_cast<const __half*>(x.p), c.batch, y.p, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const TilesShape s = tt.shape, d = tiles_shape(t.m, c.batch);
    EXPECT_TRUE(std::any_of(all.begin(), all.end(),
                            [&](const TilesShape& k) {
                              return k.row_tiles == s.row_tiles && k.warps == s.warps && k.ahead == s.ahead;
                            }))
        << name(c) << ": " << tiles_shape_label(s);
    EXPECT_EQ(tiles_shape_label(tt.default_shape), tiles_shape_label(d)) << name(c);
    if (tiles_shape_label(s) == tiles_shape_label(d))
      EXPECT_EQ(tt.us, tt.default_us) << name(c);
    else
      EXPECT_LE(tt.us, 0.97 * tt.default_us) << name(c);
    expect_reference(in, c.accumulate, tiles_call(t.m, in, c.accumulate, x, y, s),
                     tiles_bound(relative_bound(c), c.accumulate), name(c) + " at " + tiles_shape_label(s));
  }
}

// The shape gemv_tiles runs is an instantiated one: the model's fastest (below) at the
// occupancy each instance's registers give on this GPU.
TEST(Tiles, TheDefaultShapeIsAnInstantiatedShape) {
  REQUIRE_GPU();
  expect_default_shapes_instantiated({Scheme::int4, 0, 0, 128, true},
                                     {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}});
}

// The model streams each SM's blocks at the bandwidth their bytes in flight reach (the flight
// bench's curve, linear between its points).
TEST(Tiles, TheShapeModelStreamsAtTheBandwidthItsBytesInFlightReach) {
  EXPECT_DOUBLE_EQ(tiles_stream_gbps(32), 4290);
  EXPECT_DOUBLE_EQ(tiles_stream_gbps(4), 2195.0 / 2);
  EXPECT_DOUBLE_EQ(tiles_stream_gbps(24), (3369.0 + 4290) / 2);
  EXPECT_DOUBLE_EQ(tiles_stream_gbps(1000), 4416);
  // 8b's o projection, 256 row tiles of 32 KiB: at one row tile and 8 warps a block, 2 blocks
  // on the busiest of 132 SMs, both resident at 3 a SM: 16 KiB in flight.
  EXPECT_NEAR(tiles_shape_us(4096, 4096, {1, 8}, 3, 132), 2 * 32768 / (3369e3 / 132), 1e-9);
  // Resident one at a time, the same two blocks stream at 8 KiB in flight.
  EXPECT_NEAR(tiles_shape_us(4096, 4096, {1, 8}, 1, 132), 2 * 32768 / (2195e3 / 132), 1e-9);
}

// What the kernel does not take it refuses with the reason, before launching.
TEST(Tiles, RefusesWhatItDoesNotTakeWithTheReason) {
  REQUIRE_GPU();
  DeviceMatrix m = device_matrix({Scheme::int4, 200, 1024, 128, true}, MatrixLayout::int4_tiles);
  const char* why = nullptr;
  EXPECT_TRUE(gemv_tiles_supports(m, 1, &why));
  EXPECT_TRUE(gemv_tiles_supports(m, 16, &why));
  EXPECT_FALSE(gemv_tiles_supports(m, 0, &why));
  EXPECT_FALSE(gemv_tiles_supports(m, 17, &why));
  EXPECT_FALSE(gemv_tiles_supports(
      device_matrix({Scheme::int4, 200, 1024, 128, true}, MatrixLayout::int4_nibbles), 2, &why));
  m.group_size = 64;
  EXPECT_FALSE(gemv_tiles_supports(m, 2, &why));
  expect_launch_refused(m, "at least 128 columns");
  m.group_size = 128;
  EXPECT_THROW(gemv_tiles_shaped(m, nullptr, 2, nullptr, false, {3, 4}, nullptr), Error);  // not instantiated
}

// ------------------------------------------------------------------ the layout

// A matrix of random codes, zero points and scales (every nibble and zero point).
QuantMatrix random_codes(int64_t rows, int64_t cols, int group, bool zero_point, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255), nibble(0, 15);
  std::uniform_real_distribution<float> log2_scale(-20.f, -2.f);
  QuantMatrix h;
  h.scheme = Scheme::int4;
  h.rows = rows;
  h.cols = cols;
  h.group_size = group;
  h.zero_point = zero_point;
  for (int64_t i = 0; i < rows * cols / 2; ++i) h.qweight.push_back(static_cast<uint8_t>(byte(rng)));
  for (int64_t i = 0; i < rows * (cols / group); ++i) {
    h.scales.push_back(f32_to_f16(std::exp2(log2_scale(rng))));
    if (zero_point) h.zeros.push_back(static_cast<uint8_t>(nibble(rng)));
  }
  return h;
}

struct LayoutCase {
  int64_t rows, cols;
  int group;
  bool zero_point;
};
const LayoutCase kLayoutCases[] = {{200, 384, 128, true}, {200, 384, 128, false}, {48, 2048, 256, true}};

// The repack puts every code where place() says and every meta word as meta_word() says, the
// symmetric zero point where there is none; the padded rows' codes are zero, their scales 0.
TEST(TilesLayout, TheRepackPutsEveryCodeAndMetaWordWhereTheLayoutSays) {
  REQUIRE_GPU();
  uint32_t seed = 1;
  for (const LayoutCase& p : kLayoutCases) {
    const std::string what =
        fmt::format("[{} x {}] group {} zero point {}", p.rows, p.cols, p.group, p.zero_point);
    const QuantMatrix h = random_codes(p.rows, p.cols, p.group, p.zero_point, seed++);
    DeviceQuant dq(h);
    const DeviceTiles t(dq.m);
    const std::vector<uint8_t> codes = t.codes.download();
    const std::vector<uint32_t> meta = t.meta.download();
    const int64_t groups = p.cols / p.group, col_tiles = p.cols / tiles::kTileCols;
    for (int64_t r = 0; r < tiles::padded_rows(p.rows); ++r) {
      for (int64_t c = 0; c < p.cols; ++c) {
        const tiles::Place pl = tiles::place(r, c, col_tiles);
        const int got = (codes[static_cast<size_t>(tiles::byte_of(pl))] >> (4 * (pl.nibble % 2))) & 15;
        const int want = r < p.rows ? quant::unpack_int4(h.qweight[static_cast<size_t>((r * p.cols + c) / 2)],
                                                         static_cast<int>(c))
                                    : 0;
        ASSERT_EQ(got, want) << what << " row " << r << " column " << c;
      }
      for (int64_t g = 0; g < groups; ++g) {
        const int row_in_tile = static_cast<int>(r % tiles::kTileRows);
        uint32_t want = tiles::meta_word(0, row_in_tile, 0);
        if (r < p.rows) {
          const size_t i = static_cast<size_t>(r * groups + g);
          want = tiles::meta_word(h.scales[i], row_in_tile,
                                  p.zero_point ? h.zeros[i] : quant::kInt4SymmetricZero);
        }
        ASSERT_EQ(meta[static_cast<size_t>(tiles::meta_index(r, g, groups))], want)
            << what << " row " << r << " group " << g;
      }
    }
    // What it allocates: the padded rows' codes, a word a row and group, no zeros.
    const MatrixBytes b = device_matrix_bytes(t.m);
    EXPECT_EQ(b.weights, static_cast<uint64_t>(tiles::padded_rows(p.rows) * p.cols / 2)) << what;
    EXPECT_EQ(b.scales, static_cast<uint64_t>(tiles::padded_rows(p.rows) * groups * 4)) << what;
    EXPECT_EQ(b.zeros, 0u) << what;
  }
}

// The fp16 copy of the tiles (the prefill's and the batched step's copies) has the canonical
// kernel's bits, whole and any block of rows of it (starting at multiples of 8, as the copies'
// blocks do, and not of 16); matrix_rows cuts the tiles at whole tiles only.
TEST(TilesLayout, ItsFp16CopyHasTheCanonicalBitsWholeAndInBlocksOfRows) {
  REQUIRE_GPU();
  uint32_t seed = 10;
  for (const LayoutCase& p : kLayoutCases) {
    const std::string what =
        fmt::format("[{} x {}] group {} zero point {}", p.rows, p.cols, p.group, p.zero_point);
    const QuantMatrix h = random_codes(p.rows, p.cols, p.group, p.zero_point, seed++);
    DeviceQuant dq(h);
    const DeviceTiles t(dq.m);
    ASSERT_NO_FATAL_FAILURE(expect_fp16_copies(t.m, canonical_fp16(dq.m), what));
  }
}

}  // namespace
