// The fp16 tiles layout (MatrixLayout::fp16_tiles) that the tiles GEMV reads for fp16 weights
// (kernels/gemv_tiles.cu), as arithmetic a CPU can check (tests/test_fp16_tiles_layout.cpp):
// fp16 weights laid out so that one 16-byte load a lane is the A operand of one
// mma.m16n8k16, and 16 contiguous bytes of one sequence's x are that lane's B operands for the
// two mmas of a step (its two tiles), up to 8 sequences a mma (its N). The repack
// (kernels/weights.cu) writes it from the canonical layout through place(); the fp16 copies of
// rows (kernels/prefill.cu) and the tied embedding's gather read it back through the same. No
// scales: the values are the weights.
//
// A tile is 16 rows x 16 columns, 512 bytes; the kernel's step is two tiles, 32 columns (the
// same 1 KiB of weights a row tile as the int4 and int8 steps). The mma's k index is a
// permutation of the step's columns, so that lane (g, c)'s B fragments for both tiles of a step
// are x[g][8 c .. 8 c + 7] of the step's columns, one 16-byte load: in tile h (0, 1) "k" 2c + e
// and 2c + 8 + e (e = 0, 1) stand for step columns 8 c + 4 h + e and 8 c + 4 h + 2 + e, for
// the A fragment (rows g, g + 8) and the B fragment (sequence g) alike; halves 4 h .. 4 h + 3 of
// the lane's x are tile h's b0..b3. Tile h thus holds step columns 8 c + 4 h .. 8 c + 4 h + 3 of
// each lane column c (not 16 contiguous columns).
//
// Lane l = 4 g + c holds 16 bytes of a tile, the four registers of its A fragment:
//   word 0: row g,     columns 8c + 4h, + 1      -> a0 a1
//   word 1: row g + 8, the same columns          -> a2 a3
//   word 2: row g,     columns 8c + 4h + 2, + 3  -> a4 a5
//   word 3: row g + 8, the same columns          -> a6 a7
// each word two fp16 values, the lower column in the low half. Tiles are stored row tile by row
// tile, each row tile's column tiles in order (step i's tiles are column tiles 2 i and 2 i + 1);
// a matrix's rows are padded to whole row tiles with zeros. The input dimension is whole steps.
#pragma once

#include <cstdint>

#include "int4_tiles_layout.h"  // DB_TILES_HD, the mma's fragment elements (a_element, b_element)

namespace db::tiles16 {

constexpr int kTileRows = 16;
constexpr int kTileCols = 16;
constexpr int kTileBytes = kTileRows * kTileCols * 2;  // 512
constexpr int kStepCols = 2 * kTileCols;               // 32: the kernel's step, two column tiles

DB_TILES_HD constexpr int64_t row_tiles(int64_t rows) {
  return (rows + kTileRows - 1) / kTileRows;
}
DB_TILES_HD constexpr int64_t padded_rows(int64_t rows) {
  return row_tiles(rows) * kTileRows;
}
// Bytes of a [rows, cols] matrix's tiles.
DB_TILES_HD constexpr int64_t weight_bytes(int64_t rows, int64_t cols) {
  return padded_rows(rows) * cols * 2;
}

// Where element (row, col) of the canonical matrix lives: its tile, the lane, the word and the
// half (0: low) inside the word.
struct Place {
  int64_t tile;  // row tile * column tiles + column tile
  int lane, word, half;
};

DB_TILES_HD constexpr Place place(int64_t row, int64_t col, int64_t col_tiles) {
  const int64_t rt = row / kTileRows, step = col / kStepCols;
  const int r = static_cast<int>(row % kTileRows), k = static_cast<int>(col % kStepCols);
  const int g = r % 8, hi = r / 8;                  // rows g (hi 0) and g + 8 (hi 1) of the lane
  const int c = k / 8, h = (k % 8) / 4, j = k % 4;  // lane column c, tile h, column 8c + 4h + j
  return Place{rt * col_tiles + 2 * step + h, 4 * g + c, 2 * (j / 2) + hi, j % 2};
}

// The index of the fp16 value of the packed matrix holding (row, col).
DB_TILES_HD constexpr int64_t index_of(const Place& p) {
  return (p.tile * kTileBytes + int64_t{p.lane} * 16 + p.word * 4 + p.half * 2) / 2;
}

// The step column that the mma's "k" index kk (0..15) of tile h (0, 1) stands for: the
// permutation the A and B fragments share.
DB_TILES_HD constexpr int column_of_k(int h, int kk) {
  const int c = (kk % 8) / 2, e = kk % 2;
  return 8 * c + 4 * h + (kk >= 8 ? 2 : 0) + e;
}

// Packs the canonical values w[row * cols + col] (fp16 bits) of a rows x cols matrix, rows a
// multiple of 16 and cols of 32, into `out` (rows * cols values): the CPU's form of the repack
// kernel's gather.
inline void pack(const uint16_t* w, int64_t rows, int64_t cols, uint16_t* out) {
  const int64_t col_tiles = cols / kTileCols;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) out[index_of(place(r, k, col_tiles))] = w[r * cols + k];
}

}  // namespace db::tiles16
