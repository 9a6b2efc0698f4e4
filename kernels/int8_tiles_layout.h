// The int8 tiles layout (MatrixLayout::int8_tiles) that the tiles GEMV reads for int8 weights
// (kernels/gemv_tiles.cu), as arithmetic a CPU can check (tests/test_int8_tiles_layout.cpp):
// int8 weights laid out so that one 16-byte load a lane is the A operands of two
// mma.m16n8k16, and 16 contiguous bytes of one sequence's x are that lane's B operands for the
// same two, up to 8 sequences a mma (its N). The repack (kernels/weights.cu) writes it from the
// canonical layout through place(); the fp16 copies read it back through the same
// (kernels/prefill.cu). The row scales stay as in the canonical layout, fp16 [rows].
//
// A tile is 16 rows x 32 columns, 512 bytes: lane l = 4 g + c holds rows g and g + 8 at
// columns 8 c .. 8 c + 7 of the tile, 16 bytes. The mma's k index is a permutation of the
// columns, as in the int4 tiles (int4_tiles_layout.h): in k-step s (0, 1), "k" 2c + e and
// 2c + 8 + e (e = 0, 1) stand for columns 8 c + 4 s + e and 8 c + 4 s + 2 + e, for the A
// fragment (rows g, g + 8) and the B fragment (sequence g) alike. So the B fragments of lane
// (g, c) for both k-steps are x[g][8 c .. 8 c + 7] of the tile's columns, one 16-byte load:
// halves 4 s .. 4 s + 3 are k-step s's b0..b3.
//
// Word 2 s + u (u = 0, 1) of a lane's 16 bytes is k-step s's A registers 2 u and 2 u + 1:
//   bytes 0, 1: row g,     columns 8c + 4s + 2u, + 1  -> a0 a1 (u 0) or a4 a5 (u 1)
//   bytes 2, 3: row g + 8, the same columns           -> a2 a3 (u 0) or a6 a7 (u 1)
// Each byte is the code plus 128 (q ^ 0x80, an unsigned byte): one PRMT puts two of them under
// 0x64, the fp16 1024 + q + 128, and one HSUB2 of 1152 leaves q, exactly (common.cuh
// int8x2_to_half2 takes its word in this form). The bias is the repack's, so the kernel needs no
// XOR. Tiles are stored row tile by row tile, each row tile's column tiles in order; a matrix's
// rows are padded to whole row tiles with code 0 (byte 0x80). The kernel's step is two column
// tiles, 64 columns: the input dimension is whole steps.
#pragma once

#include <cstdint>

#include "int4_tiles_layout.h"  // the mma's fragment elements (a_element, b_element, d_element)

namespace db::tiles8 {

constexpr int kTileRows = 16;
constexpr int kTileCols = 32;
constexpr int kTileBytes = kTileRows * kTileCols;  // 512
constexpr int kStepCols = 2 * kTileCols;           // 64: the kernel's step, two column tiles
constexpr int kCodeBias = 128;                     // a byte holds q + 128

DB_TILES_HD constexpr int64_t row_tiles(int64_t rows) {
  return (rows + kTileRows - 1) / kTileRows;
}
DB_TILES_HD constexpr int64_t padded_rows(int64_t rows) {
  return row_tiles(rows) * kTileRows;
}
// Bytes of a [rows, cols] matrix's codes (its scales are the canonical [rows] fp16).
DB_TILES_HD constexpr int64_t code_bytes(int64_t rows, int64_t cols) {
  return padded_rows(rows) * cols;
}

// Where element (row, col) of the canonical matrix lives: its tile, the lane, the word and the
// byte inside the word.
struct Place {
  int64_t tile;  // row tile * column tiles + column tile
  int lane, word, byte;
};

DB_TILES_HD constexpr Place place(int64_t row, int64_t col, int64_t col_tiles) {
  const int64_t rt = row / kTileRows, ct = col / kTileCols;
  const int r = static_cast<int>(row % kTileRows), k = static_cast<int>(col % kTileCols);
  const int g = r % 8, hi = r / 8;                  // rows g (hi 0) and g + 8 (hi 1) of the lane
  const int c = k / 8, s = (k % 8) / 4, j = k % 4;  // lane column c, k-step s, column 4s + j
  return Place{rt * col_tiles + ct, 4 * g + c, 2 * s + j / 2, 2 * hi + j % 2};
}

// The byte of the packed matrix holding (row, col).
DB_TILES_HD constexpr int64_t byte_of(const Place& p) {
  return p.tile * kTileBytes + int64_t{p.lane} * 16 + p.word * 4 + p.byte;
}

// The column of the tile that the mma's "k" index kk (0..15) of k-step s (0, 1) stands for: the
// permutation the A and B fragments share.
DB_TILES_HD constexpr int column_of_k(int s, int kk) {
  const int c = (kk % 8) / 2, e = kk % 2;
  return 8 * c + 4 * s + (kk >= 8 ? 2 : 0) + e;
}

// The kernel's dequantization of a lane's words as raw codes: element i (0..7) of k-step s's
// A fragment is byte 2 ((i / 2) % 2) + i % 2 of word 2 s + i / 4, less the bias.
DB_TILES_HD constexpr int fragment_code(const uint32_t (&words)[4], int s, int i) {
  const uint32_t w = words[2 * s + i / 4];
  return static_cast<int>((w >> (8 * (2 * ((i / 2) % 2) + i % 2))) & 0xffu) - kCodeBias;
}

// The stored byte of code q.
DB_TILES_HD constexpr uint8_t code_byte(int8_t q) {
  return static_cast<uint8_t>(static_cast<uint8_t>(q) ^ 0x80u);
}

// Packs the canonical codes q[row * cols + col] of a rows x cols matrix, rows a multiple of 16
// and cols of 32, into `out` (rows * cols bytes): the CPU's form of the repack kernel's scatter.
inline void pack(const int8_t* q, int64_t rows, int64_t cols, uint8_t* out) {
  const int64_t col_tiles = cols / kTileCols;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) out[byte_of(place(r, k, col_tiles))] = code_byte(q[r * cols + k]);
}

}  // namespace db::tiles8
