// The tiles layout's arithmetic (kernels/int4_tiles_layout.h) against the definitions
// it implements: every element of a matrix has one nibble; the kernel's LOP3 extraction of a
// lane's word gives mma.m16n8k16's A fragment (PTX ISA) at the permuted columns; a lane's 32
// bytes of x are its B fragments at the same columns; a whole tile's mmas, emulated lane by
// lane, compute the tile's product with x exactly; the meta words' zero constants take q - z
// out exactly in fp16; and the padded sizes and meta indices of a matrix.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "decodebench/half.h"
#include "int4_tiles_layout.h"
#include "tiles_layout_test_util.h"

using namespace db::tiles;

namespace {

TEST(Int4TilesLayout, EveryElementHasItsOwnNibble) {
  const int64_t rows = 48, cols = 256;
  std::set<std::pair<int64_t, int>> seen;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) {
      const Place p = place(r, k, cols / kTileCols);
      ASSERT_GE(p.lane, 0);
      ASSERT_LT(p.lane, 32);
      ASSERT_LT(p.word, 4);
      ASSERT_LT(p.nibble, 8);
      EXPECT_TRUE(seen.insert({byte_of(p), p.nibble % 2}).second) << r << " " << k;
    }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), rows * cols);
  EXPECT_EQ(seen.rbegin()->first, rows * cols / 2 - 1);
}

TEST(Int4TilesLayout, FragmentElementsFollowThePtxIsa) {
  // a0 a1: (g, 2c), (g, 2c + 1); a2 a3: rows g + 8; a4 a5: columns + 8; a6 a7: both.
  EXPECT_EQ(a_element(4 * 3 + 2, 0).row, 3);
  EXPECT_EQ(a_element(4 * 3 + 2, 0).k, 4);
  EXPECT_EQ(a_element(4 * 3 + 2, 3).row, 11);
  EXPECT_EQ(a_element(4 * 3 + 2, 3).k, 5);
  EXPECT_EQ(a_element(4 * 3 + 2, 5).row, 3);
  EXPECT_EQ(a_element(4 * 3 + 2, 5).k, 13);
  EXPECT_EQ(a_element(4 * 3 + 2, 6).row, 11);
  EXPECT_EQ(a_element(4 * 3 + 2, 6).k, 12);
  // b0 b1: (2c, g), (2c + 1, g); b2 b3: k + 8. d0 d1: (g, 2c), (g, 2c + 1); d2 d3: row g + 8.
  EXPECT_EQ(b_element(4 * 5 + 1, 2).row, 10);
  EXPECT_EQ(b_element(4 * 5 + 1, 2).k, 5);
  EXPECT_EQ(d_element(4 * 5 + 1, 3).row, 13);
  EXPECT_EQ(d_element(4 * 5 + 1, 3).k, 3);
}

TEST(Int4TilesLayout, ALanesWordsAreItsAFragmentsAtThePermutedColumns) {
  const int64_t rows = 32, cols = 128;
  std::mt19937 rng(7);
  std::vector<uint8_t> q(rows * cols), packed(rows * cols / 2, 0);
  for (uint8_t& v : q) v = static_cast<uint8_t>(rng() % 16);
  pack(q.data(), rows, cols, packed.data());
  for (int64_t rt = 0; rt < rows / kTileRows; ++rt)
    for (int64_t ct = 0; ct < cols / kTileCols; ++ct)
      for (int lane = 0; lane < 32; ++lane)
        for (int s = 0; s < 4; ++s) {
          const int64_t at = (rt * (cols / kTileCols) + ct) * kTileBytes + lane * 16 + 4 * s;
          const uint32_t w = packed[at] | packed[at + 1] << 8 | packed[at + 2] << 16 |
                             static_cast<uint32_t>(packed[at + 3]) << 24;
          for (int i = 0; i < 8; ++i) {
            const RowK e = a_element(lane, i);
            const int64_t row = rt * kTileRows + e.row, col = ct * kTileCols + column_of_k(s, e.k);
            ASSERT_EQ(fragment_nibble(w, i), q[row * cols + col])
                << "tile " << rt << "," << ct << " lane " << lane << " word " << s << " element " << i;
          }
        }
}

TEST(Int4TilesLayout, ALanesXSliceIsItsBFragments) {
  // Lane (g, c) loads x[g][16 c .. 16 c + 15]; k-step s uses halves 4 s .. 4 s + 3 as b0..b3.
  dbtest::expect_x_slices_are_b_fragments(4, 16, column_of_k);
}

TEST(Int4TilesLayout, ATilesMmasComputeItsProductExactly) {
  // One 16 x 64 tile, 8 sequences: D[row][n] = sum over k-steps and "k" of A B, the elements
  // gathered from the lanes that hold them, against sum over columns of q x.
  std::mt19937 rng(11);
  std::vector<uint8_t> q(kTileRows * kTileCols), packed(kTileBytes, 0);
  for (uint8_t& v : q) v = static_cast<uint8_t>(rng() % 16);
  std::vector<int64_t> x(8 * kTileCols);
  for (int64_t& v : x) v = static_cast<int64_t>(rng() % 7) - 3;
  pack(q.data(), kTileRows, kTileCols, packed.data());
  int64_t a[4][16][16], b[4][16][8];  // [k-step][row][k], [k-step][k][n]
  for (int lane = 0; lane < 32; ++lane)
    for (int s = 0; s < 4; ++s) {
      const int at = lane * 16 + 4 * s;
      const uint32_t w = packed[at] | packed[at + 1] << 8 | packed[at + 2] << 16 |
                         static_cast<uint32_t>(packed[at + 3]) << 24;
      for (int i = 0; i < 8; ++i) a[s][a_element(lane, i).row][a_element(lane, i).k] = fragment_nibble(w, i);
      for (int i = 0; i < 4; ++i)  // the lane's x slice, halves 4 s + i
        b[s][b_element(lane, i).row][b_element(lane, i).k] =
            x[(lane / 4) * kTileCols + 16 * (lane % 4) + 4 * s + i];
    }
  for (int row = 0; row < kTileRows; ++row)
    for (int n = 0; n < 8; ++n) {
      int64_t mma = 0, direct = 0;
      for (int s = 0; s < 4; ++s)
        for (int k = 0; k < 16; ++k) mma += a[s][row][k] * b[s][k][n];
      for (int col = 0; col < kTileCols; ++col) direct += q[row * kTileCols + col] * x[n * kTileCols + col];
      EXPECT_EQ(mma, direct) << row << " " << n;
    }
}

// Row r's word carries its scale's bits and the zero constant the kernel takes q - z with, in
// fp16 and exactly: (1024 + q) - (1024 + z) for rows 0..7 of a tile, fma(1024 + 16 q, 1/16,
// -(64 + z)) for rows 8..15 (each result rounded to fp16, as HSUB2 and HFMA2 round it); and
// the zero point comes back from it (the fp16 copies read it).
TEST(Int4TilesLayout, MetaWordsTakeQMinusZOutExactly) {
  for (int r = 0; r < kTileRows; ++r)
    for (int z = 0; z < 16; ++z) {
      const uint32_t w = meta_word(0x2bcd, r, z);
      ASSERT_EQ(scale_bits_of(w), 0x2bcd);
      ASSERT_EQ(zero_of(w, r), z) << r;
      const float c = db::f16_to_f32(static_cast<uint16_t>(w >> 16));
      ASSERT_EQ(c, r < 8 ? 1024.f + z : -(64.f + z)) << r << " " << z;
      for (int q = 0; q < 16; ++q) {
        // The LOP3 makes 0x6400 | q (1024 + q) for rows g, 0x6400 | 16 q (1024 + 16 q) for rows g + 8.
        const float v = db::f16_to_f32(static_cast<uint16_t>(0x6400 | (r < 8 ? q : 16 * q)));
        const float got = r < 8 ? v - c : std::fma(v, db::f16_to_f32(0x2c00), c);
        EXPECT_EQ(db::f16_to_f32(db::f32_to_f16(got)), static_cast<float>(q - z))
            << r << " " << z << " " << q;
      }
    }
}

// A matrix's rows padded to whole tiles, its bytes, and where a row's meta word lies: its row
// tile's block of 16 words a group, row tile by row tile.
TEST(Int4TilesLayout, RowsArePaddedToWholeTilesAndMetaIsARowTilesWordsAGroup) {
  EXPECT_EQ(row_tiles(200), 13);
  EXPECT_EQ(padded_rows(200), 208);
  EXPECT_EQ(padded_rows(4096), 4096);
  EXPECT_EQ(code_bytes(200, 384), 208 * 192);
  EXPECT_EQ(meta_bytes(200, 384, 128), 13 * 3 * 16 * 4);
  EXPECT_EQ(meta_bytes(4100, 1024, 256), 257 * 4 * 16 * 4);
  EXPECT_EQ(meta_index(17, 2, 3), (1 * 3 + 2) * 16 + 1);
  EXPECT_EQ(meta_index(0, 0, 3), 0);
  std::set<int64_t> seen;
  for (int64_t r = 0; r < 48; ++r)
    for (int64_t g = 0; g < 3; ++g) EXPECT_TRUE(seen.insert(meta_index(r, g, 3)).second);
  EXPECT_EQ(*seen.rbegin(), 48 * 3 - 1);
  EXPECT_EQ(kStepCols, 2 * kTileCols);
}

}  // namespace
