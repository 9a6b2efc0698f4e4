// The fp16 tiles layout's arithmetic (kernels/fp16_tiles_layout.h) against the definitions it
// implements: every element of a matrix, padded rows included, has one place, and the places
// cover the packed matrix; a lane's words are mma.m16n8k16's A fragments (PTX ISA) of the
// step's two tiles at the permuted columns; a lane's 16 bytes of x are its B fragments for both;
// a whole step's two mmas, emulated lane by lane from the packed bytes, compute the step's
// product with x exactly; and the padded sizes.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "decodebench/half.h"
#include "fp16_tiles_layout.h"
#include "tiles_layout_test_util.h"

using namespace db::tiles16;
using db::tiles::a_element;
using db::tiles::b_element;
using db::tiles::RowK;

namespace {

TEST(Fp16TilesLayout, EveryElementHasItsOwnPlaceAndThePlacesCoverThePaddedMatrix) {
  const int64_t rows = 40, cols = 96;  // rows padded to 48
  const int64_t padded = padded_rows(rows);
  std::set<int64_t> seen;
  for (int64_t r = 0; r < padded; ++r)
    for (int64_t k = 0; k < cols; ++k) {
      const Place p = place(r, k, cols / kTileCols);
      ASSERT_GE(p.lane, 0);
      ASSERT_LT(p.lane, 32);
      ASSERT_LT(p.word, 4);
      ASSERT_LT(p.half, 2);
      ASSERT_EQ(p.tile / (cols / kTileCols), r / kTileRows) << "a row's places are in its row tile";
      EXPECT_TRUE(seen.insert(index_of(p)).second) << r << " " << k;
    }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), padded * cols);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), padded * cols - 1);
  EXPECT_EQ(weight_bytes(rows, cols), padded * cols * 2);
}

TEST(Fp16TilesLayout, ALanesWordsAreItsAFragmentsAtThePermutedColumns) {
  const int64_t rows = 32, cols = 96;
  std::mt19937 rng(7);
  std::vector<uint16_t> w(rows * cols), packed(rows * cols, 0);
  for (uint16_t& v : w) v = static_cast<uint16_t>(rng());
  pack(w.data(), rows, cols, packed.data());
  const int64_t col_tiles = cols / kTileCols;
  for (int64_t rt = 0; rt < rows / kTileRows; ++rt)
    for (int64_t ct = 0; ct < col_tiles; ++ct)
      for (int lane = 0; lane < 32; ++lane) {
        const int64_t at = ((rt * col_tiles + ct) * kTileBytes + lane * 16) / 2;  // the lane's 8 values
        const int64_t step = ct / 2;
        const int h = static_cast<int>(ct % 2);
        for (int i = 0; i < 8; ++i) {  // element i: word i / 2, half i % 2, as the mma takes the words
          const RowK e = a_element(lane, i);
          const int64_t row = rt * kTileRows + e.row, col = step * kStepCols + column_of_k(h, e.k);
          ASSERT_EQ(packed[at + i], w[row * cols + col])
              << "tile " << rt << "," << ct << " lane " << lane << " element " << i;
        }
      }
}

TEST(Fp16TilesLayout, ALanesXSliceIsItsBFragmentsForBothTiles) {
  // Lane (g, c) loads x[g][8 c .. 8 c + 7] of the step; tile h uses halves 4 h .. 4 h + 3 as b0..b3.
  dbtest::expect_x_slices_are_b_fragments(2, 8, column_of_k);
}

TEST(Fp16TilesLayout, AStepsTwoMmasComputeItsProductExactly) {
  // Two row tiles x two steps of small integers (exact in fp16 and in the sums), 8 sequences:
  // D[row][n] = sum over the steps' tiles and "k" of A B, A from the packed values of the lane
  // that holds each element and B from that lane's x slice, against sum over columns of w x.
  const int64_t rows = 32, cols = 2 * kStepCols, col_tiles = cols / kTileCols;
  std::mt19937 rng(11);
  std::vector<uint16_t> w(rows * cols), packed(rows * cols, 0);
  std::vector<int> wv(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) {
    wv[i] = static_cast<int>(rng() % 61) - 30;
    w[i] = db::f32_to_f16(static_cast<float>(wv[i]));
  }
  std::vector<int> x(8 * cols);
  for (int& v : x) v = static_cast<int>(rng() % 9) - 4;
  pack(w.data(), rows, cols, packed.data());
  for (int64_t rt = 0; rt < rows / kTileRows; ++rt) {
    float d[16][8] = {};  // the row tile's sums, as the mma accumulates them in fp32
    for (int64_t step = 0; step < cols / kStepCols; ++step)
      for (int h = 0; h < 2; ++h) {
        float a[16][16], b[16][8];
        for (int lane = 0; lane < 32; ++lane) {
          const int64_t at = ((rt * col_tiles + 2 * step + h) * kTileBytes + lane * 16) / 2;
          for (int i = 0; i < 8; ++i)
            a[a_element(lane, i).row][a_element(lane, i).k] = db::f16_to_f32(packed[at + i]);
          for (int i = 0; i < 4; ++i)  // the lane's x slice of the step, halves 4 h + i
            b[b_element(lane, i).row][b_element(lane, i).k] =
                static_cast<float>(x[(lane / 4) * cols + step * kStepCols + 8 * (lane % 4) + 4 * h + i]);
        }
        for (int r = 0; r < 16; ++r)
          for (int n = 0; n < 8; ++n)
            for (int k = 0; k < 16; ++k) d[r][n] += a[r][k] * b[k][n];
      }
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) {
        int64_t direct = 0;
        for (int64_t col = 0; col < cols; ++col) direct += wv[(rt * 16 + r) * cols + col] * x[n * cols + col];
        EXPECT_EQ(d[r][n], static_cast<float>(direct)) << rt << " " << r << " " << n;
      }
  }
}

TEST(Fp16TilesLayout, RowsArePaddedToWholeTiles) {
  EXPECT_EQ(row_tiles(200), 13);
  EXPECT_EQ(padded_rows(4100), 4112);
  EXPECT_EQ(weight_bytes(200, 384), 208 * 384 * 2);
  EXPECT_EQ(kStepCols, 2 * kTileCols);
  EXPECT_EQ(kTileBytes, 512);
  EXPECT_EQ(kTileRows, db::tiles::kTileRows);  // the kernel's row tiles are every scheme's
}

}  // namespace
