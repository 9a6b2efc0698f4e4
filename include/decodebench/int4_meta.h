// Where the fast int4 GEMV finds a scale or zero point: the packed meta layout, shared by the
// repack kernel that writes it (kernels/weights.cu), the GEMV that reads it (kernels/gemv.cu)
// and the CPU test that checks it is a permutation.
//
// The canonical layout stores a matrix's group parameters row by row, [rows][G] (G groups a
// row). The packed one cuts the rows into blocks of 8 and stores each block group-major,
// [G][8]: the 8 scales (or zero points) of one group of one block are adjacent, so a thread
// of the rows kernel fetches those of its 8 rows with one 16-byte load (8 bytes for zero
// points) instead of eight scalar loads. A block keeps the index range it has in the
// canonical layout ([8 b G, 8 b G + 8 G)), so the repack permutes each block in place; the
// last block of a matrix whose rows are not a multiple of 8 holds n = rows % 8 rows and is
// stored [G][n] in its own range.
#pragma once

#include <cstdint>

#include "decodebench/hd.h"

namespace db::int4_meta {

constexpr int kBlockRows = 8;

// Rows in the block that holds `row`: 8, or fewer in the last block.
DB_HD int64_t block_rows(int64_t rows, int64_t row) {
  const int64_t first = row / kBlockRows * kBlockRows;
  return rows - first < kBlockRows ? rows - first : kBlockRows;
}

// Index of (row, group) in the packed layout of a [rows][groups] parameter array.
DB_HD int64_t packed_index(int64_t rows, int64_t groups, int64_t row, int64_t group) {
  const int64_t first = row / kBlockRows * kBlockRows;
  return first * groups + group * block_rows(rows, row) + (row - first);
}

}  // namespace db::int4_meta
