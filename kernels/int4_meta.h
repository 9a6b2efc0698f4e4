// Where the fast int4 GEMV finds a scale or zero point: the packed meta layout, shared by the
// repack kernel that writes it (kernels/weights.cu), the GEMV that reads it (kernels/gemv.cu),
// the allocations that hold it and the CPU test that checks it.
//
// The canonical layout stores a matrix's group parameters row by row, [rows][G] (G groups a
// row). The packed one cuts the rows into blocks of 8 and stores each block group-major,
// [G][8]: the 8 scales (or zero points) of one group of one block are adjacent, so a thread
// of the rows kernel fetches those of its 8 rows with one 16-byte load (8 bytes for zero
// points) instead of eight scalar loads. A block keeps the index range it has in the
// canonical layout ([8 b G, 8 b G + 8 G)), so the repack permutes each block in place. The
// last block of a matrix whose rows are not a multiple of 8 is stored [G][8] too, its missing
// rows repeating its last one, so an array that will be packed holds padded_rows(rows) rows:
// every group then takes the same loads (a separate path for that one short block, a branch
// in every group's loads, cost 8b-int4 0.8% and 4b-int4 1.3%).
#pragma once

#include <cstdint>

#include "decodebench/host_device.h"

namespace db::int4_meta {

constexpr int kBlockRows = 8;

// Rows of parameters an array to be packed must hold: `rows` rounded up to whole blocks.
DB_HOST_DEVICE int64_t padded_rows(int64_t rows) {
  return (rows + kBlockRows - 1) / kBlockRows * kBlockRows;
}

// Rows of the matrix in the block that holds `row`: 8, or fewer in the last block.
DB_HOST_DEVICE int64_t block_rows(int64_t rows, int64_t row) {
  const int64_t first = row / kBlockRows * kBlockRows;
  return rows - first < kBlockRows ? rows - first : kBlockRows;
}

// Index of (row, group) in the packed layout of a [padded rows][groups] parameter array; rows
// past the matrix's last one index its padding.
DB_HOST_DEVICE int64_t packed_index(int64_t groups, int64_t row, int64_t group) {
  const int64_t first = row / kBlockRows * kBlockRows;
  return first * groups + group * kBlockRows + (row - first);
}

}  // namespace db::int4_meta
