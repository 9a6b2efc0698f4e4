// The int8 tiles layout's arithmetic (kernels/int8_tiles_layout.h) against the definitions it
// implements: every element of a matrix has one byte; a lane's words, taken apart as the kernel
// does, are mma.m16n8k16's A fragments (PTX ISA) of its two k-steps at the permuted columns; a
// lane's 16 bytes of x are its B fragments at the same columns; a whole tile's two mmas,
// emulated lane by lane, compute the tile's product with x exactly; the PRMT-under-0x64 and
// HSUB2 of 1152 make q exactly in fp16; and the padded sizes.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "decodebench/half.h"
#include "int8_tiles_layout.h"
#include "tiles_layout_test_util.h"

using namespace db::tiles8;
using db::tiles::a_element;
using db::tiles::b_element;
using db::tiles::RowK;

namespace {

uint32_t word_at(const std::vector<uint8_t>& p, int64_t at) {
  return p[at] | p[at + 1] << 8 | p[at + 2] << 16 | static_cast<uint32_t>(p[at + 3]) << 24;
}

TEST(Int8TilesLayout, EveryElementHasItsOwnByte) {
  const int64_t rows = 48, cols = 128;
  std::set<int64_t> seen;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) {
      const Place p = place(r, k, cols / kTileCols);
      ASSERT_GE(p.lane, 0);
      ASSERT_LT(p.lane, 32);
      ASSERT_LT(p.word, 4);
      ASSERT_LT(p.byte, 4);
      EXPECT_TRUE(seen.insert(byte_of(p)).second) << r << " " << k;
    }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), rows * cols);
  EXPECT_EQ(*seen.rbegin(), rows * cols - 1);
}

TEST(Int8TilesLayout, ALanesWordsAreItsAFragmentsAtThePermutedColumns) {
  const int64_t rows = 32, cols = 96;
  std::mt19937 rng(7);
  std::vector<int8_t> q(rows * cols);
  std::vector<uint8_t> packed(rows * cols, 0);
  for (int8_t& v : q) v = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
  pack(q.data(), rows, cols, packed.data());
  for (int64_t rt = 0; rt < rows / kTileRows; ++rt)
    for (int64_t ct = 0; ct < cols / kTileCols; ++ct)
      for (int lane = 0; lane < 32; ++lane) {
        const int64_t at = (rt * (cols / kTileCols) + ct) * kTileBytes + lane * 16;
        const uint32_t w[4] = {word_at(packed, at), word_at(packed, at + 4), word_at(packed, at + 8),
                               word_at(packed, at + 12)};
        for (int s = 0; s < 2; ++s)
          for (int i = 0; i < 8; ++i) {
            const RowK e = a_element(lane, i);
            const int64_t row = rt * kTileRows + e.row, col = ct * kTileCols + column_of_k(s, e.k);
            ASSERT_EQ(fragment_code(w, s, i), q[row * cols + col])
                << "tile " << rt << "," << ct << " lane " << lane << " k-step " << s << " element " << i;
          }
      }
}

TEST(Int8TilesLayout, ALanesXSliceIsItsBFragments) {
  // Lane (g, c) loads x[g][8 c .. 8 c + 7]; k-step s uses halves 4 s .. 4 s + 3 as b0..b3.
  dbtest::expect_x_slices_are_b_fragments(2, 8, column_of_k);
}

TEST(Int8TilesLayout, ATilesMmasComputeItsProductExactly) {
  // One 16 x 32 tile, 8 sequences: D[row][n] = sum over k-steps and "k" of A B, the elements
  // gathered from the lanes that hold them, against sum over columns of q x.
  std::mt19937 rng(11);
  std::vector<int8_t> q(kTileRows * kTileCols);
  std::vector<uint8_t> packed(kTileBytes, 0);
  for (int8_t& v : q) v = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
  std::vector<int64_t> x(8 * kTileCols);
  for (int64_t& v : x) v = static_cast<int64_t>(rng() % 7) - 3;
  pack(q.data(), kTileRows, kTileCols, packed.data());
  int64_t a[2][16][16], b[2][16][8];  // [k-step][row][k], [k-step][k][n]
  for (int lane = 0; lane < 32; ++lane) {
    const uint32_t w[4] = {word_at(packed, lane * 16), word_at(packed, lane * 16 + 4),
                           word_at(packed, lane * 16 + 8), word_at(packed, lane * 16 + 12)};
    for (int s = 0; s < 2; ++s) {
      for (int i = 0; i < 8; ++i) a[s][a_element(lane, i).row][a_element(lane, i).k] = fragment_code(w, s, i);
      for (int i = 0; i < 4; ++i)  // the lane's x slice, halves 4 s + i
        b[s][b_element(lane, i).row][b_element(lane, i).k] =
            x[(lane / 4) * kTileCols + 8 * (lane % 4) + 4 * s + i];
    }
  }
  for (int row = 0; row < kTileRows; ++row)
    for (int n = 0; n < 8; ++n) {
      int64_t mma = 0, direct = 0;
      for (int s = 0; s < 2; ++s)
        for (int k = 0; k < 16; ++k) mma += a[s][row][k] * b[s][k][n];
      for (int col = 0; col < kTileCols; ++col) direct += q[row * kTileCols + col] * x[n * kTileCols + col];
      EXPECT_EQ(mma, direct) << row << " " << n;
    }
}

// 0x64 over a stored byte is the fp16 1024 + q + 128 (fp16's step at 1024 is 1), and taking
// 1152 from it leaves q, exactly (rounded to fp16, as HSUB2 rounds it).
TEST(Int8TilesLayout, BytesUnder0x64LessOneThousandOneHundredFiftyTwoAreQ) {
  EXPECT_EQ(db::f16_to_f32(0x6480), 1152.f);
  for (int q = -128; q < 128; ++q) {
    const uint16_t bits = static_cast<uint16_t>(0x6400 | code_byte(static_cast<int8_t>(q)));
    const float v = db::f16_to_f32(bits) - 1152.f;
    EXPECT_EQ(db::f16_to_f32(db::f32_to_f16(v)), static_cast<float>(q)) << q;
  }
}

TEST(Int8TilesLayout, RowsArePaddedToWholeTiles) {
  EXPECT_EQ(row_tiles(200), 13);
  EXPECT_EQ(padded_rows(4100), 4112);
  EXPECT_EQ(code_bytes(200, 384), 208 * 384);
  EXPECT_EQ(kStepCols, 2 * kTileCols);
  EXPECT_EQ(kTileBytes, 512);
}

}  // namespace
