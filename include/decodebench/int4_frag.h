// The int4 weight layout of the tensor-core dot (kernels/gemv.cu, kernels/int4_dot.cuh): where
// each nibble of a block of 8 rows goes, shared by the repack kernel that writes it
// (kernels/weights.cu), the linear plan that decides which matrices take it
// (decodebench/linear_shapes.h) and the CPU tests that check it against the mma fragment rules.
//
// The rows kernel gives thread t of a block the 16-byte chunks t, t + T, ... of every row of
// a group of 8 rows, and loads them as 8 loads (one per row) from the group's rows, which are
// contiguous. This layout keeps that addressing and only permutes the bytes inside each
// block of 8 rows and 1024 columns (a "span": the 32 chunks of one warp), so that the 16
// bytes a lane loads at "row" i are the A operands of four mma.m16n8k16:
//
//   - M (16) is 2 rows x 8 segments: A row m < 8 is row 2p of the pair p, segment m; A row
//     m >= 8 is row 2p + 1, segment m - 8. A segment is 128 columns of the span.
//   - N (8) is the 8 segments of x: B column n holds x of segment n, so D[m][n] is useful
//     where n is m's segment (2 of each lane quad's 8 outputs).
//   - K (16) is 16 columns of a segment; the span's 8 x 16 = 128 columns of a segment are
//     the k-steps j = 0..7.
//
// Lane l (group g = l / 4, c = l % 4) holds, for one mma, A[g][2c, 2c+1], A[g+8][2c, 2c+1],
// A[g][2c+8, 2c+9] and A[g+8][2c+8, 2c+9] (PTX ISA, "Matrix Fragments for mma.m16n8k16").
// Those 8 nibbles are one 32-bit word, placed so that two masks and one shift make the four
// fp16 pairs without moving a nibble: (q & 0x000f000f) | 0x6400_6400 is 1024 + v of A[g][2c,
// 2c+1], the mask 0x00f000f0 gives 1024 + 16 v of A[g][2c+8, 2c+9], and the same on q >> 8
// gives row g + 8's. Hence nibble n of the word is row 2p + (n >> 1 & 1), column 2c + 8 (n & 1)
// + (n >> 2) of the k-step.
//
// The 16 bytes of lane l at "row" i of the group are the words of pair p = i / 2 and k-steps
// j = 4 (i % 2) + u, u = 0..3. So a warp's 8 loads of a group cover the pairs and k-steps of
// its span once, as the 8 rows of the repacked layout did.
//
// Segments of 128 columns are the quantization groups at group size 128: a lane's outputs
// D[g][g] and D[g+8][g] are the dots of one group of one row (rows 2p and 2p + 1).
#pragma once

#include <cstdint>

#include "decodebench/host_device.h"

namespace db::int4_frag {

constexpr int kRows = 8;           // rows of a block (the rows kernel's group)
constexpr int kSpanCols = 1024;    // columns of a span: one warp's 32 chunks of 32
constexpr int kSegmentCols = 128;  // columns of a segment (and of a quantization group)

// Matrices this layout can hold: whole blocks and spans, and groups that are segments.
DB_HOST_DEVICE bool eligible(int64_t rows, int64_t cols, int group_size) {
  return rows > 0 && rows % kRows == 0 && cols % kSpanCols == 0 && group_size == kSegmentCols;
}

struct Source {
  int row;  // within the block of 8
  int col;  // within the span of 1024
};

// Where nibble n of word u of lane `lane`'s 16 bytes at "row" i of a block comes from.
DB_HOST_DEVICE Source source(int i, int lane, int u, int n) {
  const int p = i / 2, j = 4 * (i % 2) + u;
  const int g = lane / 4, c = lane % 4;
  return {2 * p + ((n >> 1) & 1), g * kSegmentCols + 16 * j + 2 * c + 8 * (n & 1) + (n >> 2)};
}

// Where a nibble lies, the inverse of source(): the block's "row" i, chunk `lane` of the
// span, word u of the chunk, nibble n of the word, for row `row` (within the block of 8) and
// column `col` (within the span of 1024).
struct Place {
  int i, lane, u, n;
};

DB_HOST_DEVICE Place locate(int row, int col) {
  const int g = col / kSegmentCols, k = col % kSegmentCols, j = k / 16, kk = k % 16;
  return {2 * (row / 2) + j / 4, 4 * g + ((kk >> 1) & 3), j % 4,
          ((kk & 1) << 2) | ((row & 1) << 1) | ((kk >> 3) & 1)};
}

// The column of x in B register r (0: k-slots 2c, 2c+1; 1: 2c+8, 2c+9), half h, at k-step j,
// of lane `lane` (segment g = lane / 4), within the span.
DB_HOST_DEVICE int x_col(int lane, int j, int r, int h) {
  return (lane / 4) * kSegmentCols + 16 * j + 2 * (lane % 4) + 8 * r + h;
}

}  // namespace db::int4_frag
