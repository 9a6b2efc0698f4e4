// The int4 tiles layout (MatrixLayout::int4_tiles) that the tiles GEMV reads
// (kernels/gemv_tiles.cu), as arithmetic a CPU can check (tests/test_int4_tiles_layout.cpp):
// int4 weights laid out so that one 16-byte load a lane is the A operands of four
// mma.m16n8k16, and 32 contiguous bytes of one sequence's x are that lane's B operands for the
// same four, up to 8 sequences a mma (its N). The repack (kernels/weights.cu) writes it from the
// canonical layout through place() and meta_word(); the fp16 copies read it back through the
// same (kernels/prefill.cu).
//
// A tile is 16 rows x 64 columns, 512 bytes: lane l = 4 g + c holds rows g and g + 8 at
// columns 16 c .. 16 c + 15 of the tile, 16 bytes, word s (0..3) the columns 16 c + 4 s ..
// 16 c + 4 s + 3 of both rows. The mma's k index is a permutation of the columns: in k-step s,
// "k" 2c + e and 2c + 8 + e (e = 0, 1) stand for columns 16 c + 4 s + e and 16 c + 4 s + 2 + e,
// for the A fragment (rows g, g + 8) and the B fragment (sequence g) alike: a dot product does
// not care in which order its terms come, only that A and B agree. So the B fragment of lane
// (g, c) for all four k-steps is x[g][16 c .. 16 c + 15] of the tile's columns, two 16-byte
// loads.
//
// A word's 8 nibbles (nibble i at bits 4 i .. 4 i + 3), chosen so that the kernel's four LOP3s
// on the word and on the word >> 8 give the fragment's four registers without a permute:
//   nibbles 0, 4: row g,     columns 4s + 0, 4s + 1  -> a0, a1 (the low halves of 0x000f000f)
//   nibbles 2, 6: row g,     columns 4s + 2, 4s + 3  -> a4, a5 (the same on the word >> 8)
//   nibbles 1, 5: row g + 8, columns 4s + 0, 4s + 1  -> a2, a3 (0x00f000f0: 16 x the nibble)
//   nibbles 3, 7: row g + 8, columns 4s + 2, 4s + 3  -> a6, a7 (the same on the word >> 8)
// Rows g are therefore 1024 + q in fp16 and rows g + 8 are 1024 + 16 q: the kernel subtracts
// 1024 + z from the first and takes (v / 16) - (64 + z) of the second, both exact in fp16.
//
// Tiles are stored row tile by row tile, each row tile's column tiles in order; a matrix's
// rows are padded to whole row tiles with zero codes. The meta of a row tile and group is 16
// words, row r's word the fp16 bits of its scale (low half) and of its zero constant (high
// half): 1024 + z for rows 0..7 of the tile, which take q - z as (1024 + q) - (1024 + z), and
// -(64 + z) for rows 8..15, which take it as fma(1024 + 16 q, 1/16, -(64 + z)); a symmetric
// matrix stores its constant zero point (8). A group is a power of two of at least 128 columns
// (kStepCols, two column tiles: the kernel's step reads one meta word a row for both tiles);
// padded rows have scale 0 and zero point 0. 4 bytes a row and group, against the canonical
// layout's 2 (3 with zero points): an 8b layer is 115.9 MB in it against 114.2, the 1.7 MB
// that the byte account does not count (it counts the canonical bytes, the floor).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DB_TILES_HD __host__ __device__
#else
#define DB_TILES_HD
#endif

namespace db::tiles {

constexpr int kTileRows = 16;
constexpr int kTileCols = 64;
constexpr int kTileBytes = kTileRows * kTileCols / 2;  // 512
constexpr int kStepCols = 2 * kTileCols;               // 128: the kernel's step, the smallest group
constexpr int kMetaWords = kTileRows;                  // a row tile's meta words a group

// Row tiles of a matrix of `rows` rows (the last one padded), and the rows they hold.
DB_TILES_HD constexpr int64_t row_tiles(int64_t rows) {
  return (rows + kTileRows - 1) / kTileRows;
}
DB_TILES_HD constexpr int64_t padded_rows(int64_t rows) {
  return row_tiles(rows) * kTileRows;
}
// Bytes of a [rows, cols] matrix's codes and of its meta in groups of `group` columns.
DB_TILES_HD constexpr int64_t code_bytes(int64_t rows, int64_t cols) {
  return padded_rows(rows) * cols / 2;
}
DB_TILES_HD constexpr int64_t meta_bytes(int64_t rows, int64_t cols, int64_t group) {
  return row_tiles(rows) * (cols / group) * kMetaWords * 4;
}

// Where element (row, col) of the canonical matrix lives: the byte offset of its tile from the
// start, the lane, the word s and the nibble inside the word.
struct Place {
  int64_t tile;  // row tile * column tiles + column tile
  int lane, word, nibble;
};

DB_TILES_HD constexpr Place place(int64_t row, int64_t col, int64_t col_tiles) {
  const int64_t rt = row / kTileRows, ct = col / kTileCols;
  const int r = static_cast<int>(row % kTileRows), k = static_cast<int>(col % kTileCols);
  const int g = r % 8, hi = r / 8;                    // rows g (hi 0) and g + 8 (hi 1) of the lane
  const int c = k / 16, s = (k % 16) / 4, j = k % 4;  // lane column c, word s, column 4s + j
  // j 0, 1 -> nibbles 0, 4 (row g) or 1, 5 (row g + 8); j 2, 3 -> nibbles 2, 6 or 3, 7.
  const int nibble = (j % 2) * 4 + (j / 2) * 2 + hi;
  return Place{rt * col_tiles + ct, 4 * g + c, s, nibble};
}

// The byte of the packed matrix holding (row, col), and whether it is the high nibble.
DB_TILES_HD constexpr int64_t byte_of(const Place& p) {
  return p.tile * kTileBytes + int64_t{p.lane} * 16 + p.word * 4 + p.nibble / 2;
}

// The column of the tile that the mma's "k" index kk (0..15) of k-step s stands for: the
// permutation the A and B fragments share. "k" kk is held by the lanes of lane column
// c = (kk % 8) / 2 (2c, 2c + 1, 2c + 8, 2c + 9 are theirs).
DB_TILES_HD constexpr int column_of_k(int s, int kk) {
  const int c = (kk % 8) / 2, e = kk % 2;
  return 16 * c + 4 * s + (kk >= 8 ? 2 : 0) + e;
}

// mma.m16n8k16's fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16" with .f16): the
// (row, k) of element i (0..7) of lane (g, c)'s A fragment, and the (k, n) of element i (0..3)
// of its B fragment; D's element i (0..3) is (row, n).
struct RowK {
  int row, k;
};
DB_TILES_HD constexpr RowK a_element(int lane, int i) {
  const int g = lane / 4, c = lane % 4;
  return RowK{g + ((i / 2) % 2) * 8, 2 * c + (i % 2) + (i / 4) * 8};
}
DB_TILES_HD constexpr RowK b_element(int lane, int i) {  // row: k, k: n
  const int g = lane / 4, c = lane % 4;
  return RowK{2 * c + (i % 2) + (i / 2) * 8, g};
}
DB_TILES_HD constexpr RowK d_element(int lane, int i) {  // row, k: n
  const int g = lane / 4, c = lane % 4;
  return RowK{g + (i / 2) * 8, 2 * c + (i % 2)};
}

// The index of row `row`'s meta word for group `group` in a matrix of `groups` groups a row.
DB_TILES_HD constexpr int64_t meta_index(int64_t row, int64_t group, int64_t groups) {
  return (row / kTileRows * groups + group) * kMetaWords + row % kTileRows;
}

// The fp16 bits of the zero constant of row r (0..15) of a tile for zero point z (0..15):
// 1024 + z (0x6400 + z: fp16's step at 1024 is 1) for rows 0..7, -(64 + z) (0xd400 + 16 z: the
// step at 64 is 1/16) for rows 8..15.
DB_TILES_HD constexpr uint32_t zero_constant_bits(int r, int z) {
  return r < 8 ? 0x6400u + static_cast<uint32_t>(z) : 0xd400u + 16u * static_cast<uint32_t>(z);
}
// Row r's meta word: the scale's fp16 bits low, the zero constant high.
DB_TILES_HD constexpr uint32_t meta_word(uint16_t scale_bits, int r, int z) {
  return scale_bits | zero_constant_bits(r, z) << 16;
}
// The zero point and the scale's bits back from row r's meta word.
DB_TILES_HD constexpr int zero_of(uint32_t word, int r) {
  const uint32_t c = word >> 16;
  return static_cast<int>(r < 8 ? c - 0x6400u : (c - 0xd400u) / 16u);
}
DB_TILES_HD constexpr uint16_t scale_bits_of(uint32_t word) {
  return static_cast<uint16_t>(word & 0xffffu);
}

// Packs the canonical codes q[row * cols + col] (0..15) of a rows x cols matrix, rows a
// multiple of 16 and cols of 64, into `out` (rows * cols / 2 bytes, zeroed by the caller): the
// CPU's form of the repack kernel's scatter.
inline void pack(const uint8_t* q, int64_t rows, int64_t cols, uint8_t* out) {
  const int64_t col_tiles = cols / kTileCols;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) {
      const Place p = place(r, k, col_tiles);
      out[byte_of(p)] |= static_cast<uint8_t>((q[r * cols + k] & 15) << (4 * (p.nibble % 2)));
    }
}

// The kernel's dequantization of word `w` as raw values: the four registers' (low, high)
// nibbles in the order of the A fragment's elements a0..a7 (a0 a1 from w & 0x000f000f, a2 a3
// from (w & 0x00f000f0) >> 4, a4 a5 and a6 a7 the same on w >> 8).
DB_TILES_HD constexpr int fragment_nibble(uint32_t w, int i) {
  const uint32_t v = (i / 4) ? w >> 8 : w;                  // a4..a7 from the word >> 8
  const uint32_t sel = (i / 2) % 2 ? v >> 4 : v;            // a2 a3, a6 a7: the 0x00f000f0 nibbles
  return static_cast<int>((i % 2 ? sel >> 16 : sel) & 15);  // odd elements: the high half
}

}  // namespace db::tiles
