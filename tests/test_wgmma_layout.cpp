// The Hopper GEMM's layout arithmetic (kernels/wgmma_layout.h) against the definitions it
// implements: the PTX ISA's wgmma matrix descriptor fields, the 128-byte swizzle of TMA and
// wgmma, the f32 accumulator fragment of wgmma.m64nNk16, and the persistent grid's tile order.
#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

#include "wgmma_layout.h"

using namespace db::wgmma;

namespace {

TEST(WgmmaLayout, DescriptorFieldsSitWhereThePtxIsaPutsThem) {
  // start 0x400 (bits 0-13: 0x40), LBO 16 (bits 16-29: 1), SBO 1024 (bits 32-45: 64),
  // 128-byte swizzle (bits 62-63: 1).
  EXPECT_EQ(make_desc(0x400, 16, 1024, Swizzle::b128), 0x4000004000010040ull);
  EXPECT_EQ(make_desc(0, 0, 0, Swizzle::none), 0ull);
  EXPECT_EQ(make_desc(0, 0, 0, Swizzle::b64), 2ull << 62);
  EXPECT_EQ(make_desc(0, 0, 0, Swizzle::b32), 3ull << 62);
  EXPECT_EQ(make_desc(0, 0, 0, Swizzle::none, 5), 5ull << 49);
  // Each 14-bit field holds bits 4-17 of its byte count and touches no neighbour.
  EXPECT_EQ(make_desc(0x3FFF0, 0, 0, Swizzle::none), 0x3FFFull);
  EXPECT_EQ(make_desc(0, 0x3FFF0, 0, Swizzle::none), 0x3FFFull << 16);
  EXPECT_EQ(make_desc(0, 0, 0x3FFF0, Swizzle::none), 0x3FFFull << 32);
  // Bits outside the fields stay zero whatever goes in: 14-15, 30-31, 46-48, 52-61.
  const uint64_t all = make_desc(0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, Swizzle::b32, 0xFFFFFFFF);
  EXPECT_EQ(all & (3ull << 14 | 3ull << 30 | 7ull << 46 | 0x3FFull << 52), 0ull);
}

TEST(WgmmaLayout, DescriptorFieldsReadBackWhatWentIn) {
  for (uint32_t addr : {0u, 1024u, 0x8000u + 32u, 196608u + 96u, 0x3FFF0u}) {
    const uint64_t d = kmajor_sw128_desc(addr);
    EXPECT_EQ(desc_start(d), addr);
    EXPECT_EQ(desc_lbo(d), 16u);
    EXPECT_EQ(desc_sbo(d), 1024u);
    EXPECT_EQ(desc_base_offset(d), 0u);
    EXPECT_EQ(desc_swizzle(d), Swizzle::b128);
  }
  // The kernel steps K by adding 32 bytes' worth (2) to the descriptor: the start field moves,
  // nothing else does (no carry: shared memory addresses stay below 2^18).
  const uint64_t d = kmajor_sw128_desc(0x30000);
  EXPECT_EQ(d + 2, kmajor_sw128_desc(0x30000 + 32));
  EXPECT_EQ(d + 6, kmajor_sw128_desc(0x30000 + 96));
}

// The 128-byte swizzle as the CUDA programming guide's TMA swizzle table draws it: in each
// 1024-byte block of eight 128-byte rows, row r's 16-byte chunk c moves to chunk c ^ r.
TEST(WgmmaLayout, Swizzle128PermutesChunksByRowAsDefined) {
  const int table[8][8] = {{0, 1, 2, 3, 4, 5, 6, 7}, {1, 0, 3, 2, 5, 4, 7, 6}, {2, 3, 0, 1, 6, 7, 4, 5},
                           {3, 2, 1, 0, 7, 6, 5, 4}, {4, 5, 6, 7, 0, 1, 2, 3}, {5, 4, 7, 6, 1, 0, 3, 2},
                           {6, 7, 4, 5, 2, 3, 0, 1}, {7, 6, 5, 4, 3, 2, 1, 0}};
  for (uint32_t block : {0u, 1024u, 7u * 1024u})
    for (uint32_t r = 0; r < 8; ++r)
      for (uint32_t c = 0; c < 8; ++c)
        for (uint32_t b = 0; b < 16; b += 5) {
          const uint32_t addr = block + r * 128 + c * 16 + b;
          EXPECT_EQ(swizzle128(addr), block + r * 128 + table[r][c] * 16 + b) << addr;
        }
}

TEST(WgmmaLayout, Swizzle128IsAnInvolutionInsideEachBlock) {
  std::set<uint32_t> seen;
  for (uint32_t a = 0; a < 4096; ++a) {
    const uint32_t s = swizzle128(a);
    EXPECT_EQ(s / 1024, a / 1024);
    EXPECT_EQ(s % 16, a % 16);
    EXPECT_EQ(swizzle128(s), a);
    seen.insert(s);
  }
  EXPECT_EQ(seen.size(), 4096u);
}

// What wgmma reads through the kernel's descriptors is what TMA wrote there: for each k16 step
// of a 64-column tile (descriptor start advanced 32 bytes a step), each row of the operand and
// each of its 16 k, the canonical K-major 128-byte-swizzle address equals the place TMA's
// swizzle put element (row, 16 * step + k). A: the two consumers' 64-row halves of a 128-row
// tile; B: 256 rows. Tiles at several 1024-byte aligned places in shared memory.
TEST(WgmmaLayout, WgmmaReadsTheElementTmaWroteAtEveryKStep) {
  for (uint32_t tile : {0u, 16384u, 3u * 49152u + 16384u}) {
    for (uint32_t rows : {128u, 256u}) {
      const uint32_t half_rows = rows == 128 ? 64 : 256;  // rows one instruction reads
      for (uint32_t first = 0; first < rows; first += half_rows) {
        for (uint32_t step = 0; step < 4; ++step) {
          const uint64_t d = kmajor_sw128_desc(tile + first * 128 + step * 32);
          for (uint32_t r = 0; r < half_rows; ++r)
            for (uint32_t k = 0; k < 16; ++k) {
              const uint32_t want = tile + tma_sw128_offset(first + r, (16 * step + k) * 2);
              ASSERT_EQ(wgmma_kmajor_sw128_addr(d, r, k), want)
                  << "tile " << tile << " row " << first + r << " step " << step << " k " << k;
            }
        }
      }
    }
  }
}

TEST(WgmmaLayout, AccumulatorFragmentCoversTheTileOnce) {
  for (int n : {128, 256}) {
    std::vector<int> hits(64 * n, 0);
    for (int t = 0; t < 128; ++t)
      for (int j = 0; j < n / 2; ++j) {
        const int r = acc_row(t, j), c = acc_col(t, j);
        ASSERT_TRUE(r >= 0 && r < 64 && c >= 0 && c < n);
        ++hits[r * n + c];
      }
    for (int h : hits) EXPECT_EQ(h, 1);
  }
  // The PTX ISA's figure for the f32 accumulator of m64nNk16: thread 0 holds (0,0) (0,1)
  // (8,0) (8,1) then (0,8); lane 5 of warp 1 starts at row 16 + 1, column 2; the second of
  // each pair is the next column.
  EXPECT_EQ(std::make_pair(acc_row(0, 0), acc_col(0, 0)), std::make_pair(0, 0));
  EXPECT_EQ(std::make_pair(acc_row(0, 1), acc_col(0, 1)), std::make_pair(0, 1));
  EXPECT_EQ(std::make_pair(acc_row(0, 2), acc_col(0, 2)), std::make_pair(8, 0));
  EXPECT_EQ(std::make_pair(acc_row(0, 3), acc_col(0, 3)), std::make_pair(8, 1));
  EXPECT_EQ(std::make_pair(acc_row(0, 4), acc_col(0, 4)), std::make_pair(0, 8));
  EXPECT_EQ(std::make_pair(acc_row(37, 0), acc_col(37, 0)), std::make_pair(17, 2));
  EXPECT_EQ(std::make_pair(acc_row(127, 127), acc_col(127, 127)), std::make_pair(63, 255));
}

TEST(WgmmaLayout, TileOrderVisitsEveryTileOnceInBandsOfRows) {
  for (auto [tm, tn] :
       {std::pair{64, 32}, std::pair{32, 16}, std::pair{2, 2}, std::pair{17, 3}, std::pair{1, 5}}) {
    std::vector<int> hits(tm * tn, 0);
    for (int t = 0; t < tm * tn; ++t) {
      const TileCoord c = tile_coord(t, tm, tn, 16);
      ASSERT_TRUE(c.m >= 0 && c.m < tm && c.n >= 0 && c.n < tn) << t;
      ++hits[c.m * tn + c.n];
      EXPECT_EQ(c.m / 16, t / (16 * tn));  // a band of 16 row tiles is finished before the next
    }
    for (int h : hits) EXPECT_EQ(h, 1);
  }
  // Consecutive tiles run down a column of the band.
  EXPECT_EQ(tile_coord(1, 64, 32, 16).m, 1);
  EXPECT_EQ(tile_coord(1, 64, 32, 16).n, 0);
  EXPECT_EQ(tile_coord(16, 64, 32, 16).n, 1);
}

}  // namespace
