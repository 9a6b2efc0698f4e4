// The layout arithmetic of the Hopper mixed-input GEMM (kernels/mixed_gemm.cu) that a
// CPU can check (tests/test_mixed_wgmma_layout.cpp): int4 or int8 weights W [rows, cols] stored
// so that one consumer thread's shared-memory load is its wgmma A fragments, the dequantization
// those loads go through, where the scales and zero points go, and how the grid splits the work.
//
// Y[b, r] = sum_c W[r, c] X[b, c] is computed as wgmma's D = A B^T with the weights as A (M: 64
// rows a consumer warpgroup, from registers) and the activations X as B (N: the sequences, K-major
// in shared memory through a descriptor, loaded by TMA with the 128-byte swizzle as in
// wgmma_bench). A CTA owns 128 rows (two consumers) and a tile of N sequences; a stage holds one
// k-chunk of 64 columns (four k16 steps).
//
// Weights. Rows are padded with zeros to a multiple of 128 (kCtaRows), cols must be a multiple of
// 64 (kChunk). The block of (CTA row tile rt, chunk kc, half h) -- rows 128 rt + 64 h .. + 63,
// columns 64 kc .. 64 kc + 63 -- is contiguous, the two halves of a (rt, kc) side by side, chunks
// in order: block index (rt * chunks + kc) * 2 + h.
//   int4 (2048 bytes a block): thread t's 16 bytes at 16 t, word s (bytes 4s .. 4s + 3) its A
//     fragment of k16 step s, element i of the fragment in nibble 4 (i % 2) + i / 2 (nibble n at
//     bits 4n .. 4n + 3). The kernel then gets the four f16x2 registers from the word w with
//       lop3(w, 0x000f000f, 0x64006400)       -> (1024 + q0, 1024 + q1)        register 0 (row g)
//       lop3(w, 0x00f000f0, 0x64006400)       -> (1024 + 16 q2, 1024 + 16 q3)  register 1 (row g+8)
//       the same two on w >> 8               -> elements 4, 5 and 6, 7         registers 2, 3
//     (the tiles GEMV's magic-number dequantization, int4_tiles_layout.h), and q - z exactly in
//     fp16 as (1024 + q) - (1024 + z) for registers 0 and 2 and as (1024 + 16 q) / 16 - (64 + z)
//     (one HFMA2) for registers 1 and 3: rows g and g + 8 of a lane sit in different registers.
//   int8 (4096 bytes a block): k16 steps 0, 1 in the first 2048 bytes and 2, 3 in the second,
//     thread t's 16 bytes at 16 t of each (so that a warp's 16-byte loads are conflict-free),
//     step s's 8 bytes at 8 (s % 2); element i at byte 4 (i / 4) + 2 (i % 2) + (i % 4) / 2. The
//     byte is u = q + 128 (0..255); prmt(word, 0x64646464, 0x5250) and (.., 0x5351) give the
//     pairs (1024 + u) of elements (0, 1) and (2, 3) of the word, and (1024 + u) - 1152 = q
//     exactly.
// Either way q - z (or q) is exact in fp16; one HMUL2 by the scale then rounds it once to the
// fp16 value fp16((q - z) s) -- the bits of kernels/weights.cu's dequantize_to_f16, whose float
// product is exact -- and the wgmma's fp32 accumulation does the rest. A separate HMUL2 (rather
// than an HFMA2 with a pre-scaled zero) because (1024 + z) s is not representable in fp16.
//
// Scales and zero points ("meta"). A group is group_size columns, a multiple of 64 (a chunk never
// straddles two), or the whole row (int8 always: its scale is a row's). The meta of (CTA row tile
// rt, group gi) is 512 bytes at (rt * groups + gi) * 512: 64 entries of 8 bytes, entry
// e = 32 h + 8 w + g for rows r = 128 rt + 64 h + 16 w + g (the "lo" row) and r + 8 (the "hi"
// row): word 0 the fp16 scales (lo in the low half), word 1 the fp16 zero constants, for int4
// 1024 + z (lo) and -(64 + z) (hi), for int8 1152 for both. Thread t of consumer h reads entry
// 32 h + t / 4 (the four lanes of a quad share their rows: a broadcast).
#pragma once

#include <cstdint>

#include "decodebench/half.h"
#include "decodebench/linear_shapes.h"
#include "wgmma_layout.h"

namespace db::mixed {

constexpr int kTileRows = 64;  // a consumer warpgroup's rows: wgmma's M
constexpr int kCtaRows = 128;  // a CTA's rows: two consumers
constexpr int kChunk = 64;     // columns a stage: four k16 steps
constexpr int kSteps = kChunk / 16;
constexpr int kMetaEntryBytes = 8;
constexpr int kMetaBytes = (kCtaRows / 2) * kMetaEntryBytes;  // an entry a pair of rows g, g + 8
static_assert(kMetaBytes == 512, "64 entries of 8 bytes");

enum class Kind { int4, int8 };

DB_WGMMA_HD constexpr int block_bytes(Kind k) {
  return k == Kind::int4 ? 2048 : 4096;
}

DB_WGMMA_HD constexpr int64_t padded_rows(int64_t rows) {
  return (rows + kCtaRows - 1) / kCtaRows * kCtaRows;
}
DB_WGMMA_HD constexpr int64_t row_tiles(int64_t rows) {
  return padded_rows(rows) / kCtaRows;
}
// The weights' bytes in this layout (padded rows included) and the meta's.
DB_WGMMA_HD constexpr int64_t weight_bytes(Kind k, int64_t rows, int64_t cols) {
  return padded_rows(rows) * cols / (k == Kind::int4 ? 2 : 1);
}
DB_WGMMA_HD constexpr int64_t meta_bytes(int64_t rows, int64_t groups) {
  return row_tiles(rows) * groups * kMetaBytes;
}

// Whether the kernel takes a matrix (the plan's predicate, decodebench/linear_shapes.h
// mixed_gemm_takes, whose chunk is kChunk); `why` says what it does not take. group_size 0 or
// cols: a group a row (int8 always).
inline bool supports(Kind k, int64_t rows, int64_t cols, int group_size, const char** why) {
  MatrixShape m;
  m.scheme = k == Kind::int4 ? Scheme::int4 : Scheme::int8;
  m.rows = rows;
  m.cols = cols;
  m.group_size = k == Kind::int4 ? group_size : 0;
  return mixed_gemm_takes(m, why);
}

// Columns a group, in chunks (a group a row: all of them).
DB_WGMMA_HD constexpr int64_t chunks_per_group(int64_t cols, int group_size) {
  return group_size == 0 || group_size >= cols ? cols / kChunk : group_size / kChunk;
}

// Groups a row.
DB_WGMMA_HD constexpr int64_t group_count(int64_t cols, int group_size) {
  return cols / (chunks_per_group(cols, group_size) * kChunk);
}

// ---- the A fragment (wgmma_layout.h's a_row / a_col, the PTX ISA's m64nNk16 A figure)

// The int4 nibble (0-7) of a fragment word that holds element i (0-7), and back.
DB_WGMMA_HD constexpr int int4_nibble(int i) {
  return 4 * (i % 2) + i / 2;
}
DB_WGMMA_HD constexpr int int4_element(int nibble) {
  return 2 * (nibble % 4) + nibble / 4;
}
// The int8 byte (0-7) of a k16 step's 8 bytes that holds element i, and back (an involution:
// elements 1 and 2 of each word trade places, so one PRMT gives the pair (0, 1), another (2, 3)).
DB_WGMMA_HD constexpr int int8_byte(int i) {
  return 4 * (i / 4) + 2 * (i % 2) + (i % 4) / 2;
}

// Where element (row, col) of the canonical matrix lives in the packed array: the byte and, for
// int4, whether it is the high nibble.
struct Place {
  int64_t byte;
  int high;  // int4: 1 for bits 4-7
};

// The (thread, k16 step, fragment element) that holds (row, col) of a 64 x 64 block: row 0-63,
// col 0-63. The inverse of a_row / a_col: warp = row / 16, lane (g, c) with g = row % 8 and
// c = (col % 8) / 2; element i has bit 1 for row + 8, bit 2 for col + 8, bit 0 for the odd col.
struct Slot {
  int t = 0, step = 0, i = 0;
};
DB_WGMMA_HD constexpr Slot slot_of(int row, int col) {
  const int k = col % 16;
  const int t = 32 * (row / 16) + 4 * (row % 8) + (k % 8) / 2;
  const int i = (k % 2) + 2 * ((row % 16) / 8) + 4 * (k / 8);
  return Slot{t, col / 16, i};
}

DB_WGMMA_HD constexpr int64_t block_index(int64_t rt, int64_t kc, int half, int64_t chunks) {
  return (rt * chunks + kc) * 2 + half;
}

DB_WGMMA_HD constexpr Place place(Kind k, int64_t row, int64_t col, int64_t cols) {
  const int64_t chunks = cols / kChunk;
  const int64_t rt = row / kCtaRows, kc = col / kChunk;
  const int half = static_cast<int>((row % kCtaRows) / kTileRows);
  const Slot s = slot_of(static_cast<int>(row % kTileRows), static_cast<int>(col % kChunk));
  const int64_t base = block_index(rt, kc, half, chunks) * block_bytes(k);
  if (k == Kind::int4) {
    const int nibble = int4_nibble(s.i);
    return Place{base + 16 * s.t + 4 * s.step + nibble / 2, nibble % 2};
  }
  return Place{base + (s.step / 2) * 2048 + 16 * s.t + 8 * (s.step % 2) + int8_byte(s.i), 0};
}

// The canonical (row, col) whose value sits in byte `byte` (and nibble `high`, int4) of the
// packed array: what a repack kernel with a thread an output byte gathers.
struct RowCol {
  int64_t row, col;
};
DB_WGMMA_HD constexpr RowCol source(Kind k, int64_t byte, int high, int64_t cols) {
  const int64_t chunks = cols / kChunk;
  const int64_t block = byte / block_bytes(k);
  const int in = static_cast<int>(byte % block_bytes(k));
  const int half = static_cast<int>(block % 2);
  const int64_t kc = (block / 2) % chunks, rt = (block / 2) / chunks;
  int t = 0, step = 0, i = 0;
  if (k == Kind::int4) {
    t = in / 16;
    step = (in % 16) / 4;
    i = int4_element(2 * (in % 4) + high);
  } else {
    t = (in % 2048) / 16;
    step = 2 * (in / 2048) + (in % 16) / 8;
    i = int8_byte(in % 8);
  }
  return RowCol{rt * kCtaRows + half * kTileRows + wgmma::a_row(t, i),
                kc * kChunk + 16 * step + wgmma::a_col(t, i)};
}

// The meta entry of (row, group): its byte offset; the scale's fp16 sits at +0 (lo row) or +2
// (hi row), the zero constant's at +4 or +6.
struct MetaPlace {
  int64_t byte;  // of the entry
  int hi;        // 1: the row is the entry's row + 8
};
DB_WGMMA_HD constexpr MetaPlace meta_place(int64_t row, int64_t group, int64_t groups) {
  const int64_t rt = row / kCtaRows;
  const int r = static_cast<int>(row % kCtaRows);
  const int e = 32 * (r / 64) + 8 * ((r % 64) / 16) + r % 8;
  return MetaPlace{(rt * groups + group) * kMetaBytes + int64_t{e} * kMetaEntryBytes, (r % 16) / 8};
}

// The fp16 zero constant of a row: int4 1024 + z (lo rows, subtracted from 1024 + q) or
// -(64 + z) (hi rows, added to (1024 + 16 q) / 16); int8 1152 (subtracted from 1024 + u).
DB_WGMMA_HD constexpr float zero_constant(Kind k, int zero, int hi) {
  return k == Kind::int8 ? 1152.f
         : hi            ? -(64.f + static_cast<float>(zero))
                         : 1024.f + static_cast<float>(zero);
}

// Byte `b` of the packed int4 weights, gathered from the canonical codes q [rows, cols / 2] (two
// a byte, even column low); rows past `rows` give code 0. What a repack kernel with a thread an
// output byte computes.
DB_WGMMA_HD constexpr uint8_t int4_packed_byte(const uint8_t* q, int64_t rows, int64_t cols, int64_t b) {
  uint32_t v = 0;
  for (int high = 0; high < 2; ++high) {
    const RowCol rc = source(Kind::int4, b, high, cols);
    const uint32_t code =
        rc.row < rows ? (q[rc.row * (cols / 2) + rc.col / 2] >> (4 * (rc.col % 2))) & 15u : 0u;
    v |= code << (4 * high);
  }
  return static_cast<uint8_t>(v);
}

// Byte `b` of the packed int8 weights from the canonical q [rows, cols] (-127..127): u = q + 128;
// rows past `rows` give 128 (q = 0).
DB_WGMMA_HD constexpr uint8_t int8_packed_byte(const int8_t* q, int64_t rows, int64_t cols, int64_t b) {
  const RowCol rc = source(Kind::int8, b, 0, cols);
  return static_cast<uint8_t>((rc.row < rows ? q[rc.row * cols + rc.col] : 0) + 128);
}

// The meta of a matrix: scales [rows, groups] fp16 bits (int8: groups 1, a scale a row), zeros
// [rows, groups] (int4; nullptr: 8, no zero point). Padded rows get scale 0 (and zero 0), so
// whatever their codes they contribute exact zeros.
inline void pack_meta(Kind k, const uint16_t* scales, const uint8_t* zeros, int64_t rows, int64_t groups,
                      uint8_t* meta) {
  for (int64_t r = 0; r < padded_rows(rows); ++r)
    for (int64_t gi = 0; gi < groups; ++gi) {
      const MetaPlace m = meta_place(r, gi, groups);
      const uint16_t s = r < rows ? scales[r * groups + gi] : 0;
      const int z = r < rows ? (zeros ? zeros[r * groups + gi] : 8) : 0;
      const uint16_t zc = f32_to_f16(zero_constant(k, z, m.hi));
      meta[m.byte + 2 * m.hi] = static_cast<uint8_t>(s & 0xff);
      meta[m.byte + 2 * m.hi + 1] = static_cast<uint8_t>(s >> 8);
      meta[m.byte + 4 + 2 * m.hi] = static_cast<uint8_t>(zc & 0xff);
      meta[m.byte + 4 + 2 * m.hi + 1] = static_cast<uint8_t>(zc >> 8);
    }
}

// A whole canonical int4 matrix (group_size 0: a group a row) into `w` (weight_bytes) and `meta`
// (meta_bytes).
inline void pack_int4(const uint8_t* q, const uint16_t* scales, const uint8_t* zeros, int64_t rows,
                      int64_t cols, int group_size, uint8_t* w, uint8_t* meta) {
  for (int64_t b = 0; b < weight_bytes(Kind::int4, rows, cols); ++b)
    w[b] = int4_packed_byte(q, rows, cols, b);
  pack_meta(Kind::int4, scales, zeros, rows, group_count(cols, group_size), meta);
}

// A whole canonical int8 matrix (scales [rows]).
inline void pack_int8(const int8_t* q, const uint16_t* scales, int64_t rows, int64_t cols, uint8_t* w,
                      uint8_t* meta) {
  for (int64_t b = 0; b < weight_bytes(Kind::int8, rows, cols); ++b)
    w[b] = int8_packed_byte(q, rows, cols, b);
  pack_meta(Kind::int8, scales, nullptr, rows, 1, meta);
}

// ---- the kernel's dequantization of one k16 step, as integer bit operations a CPU can run

// lop3 with immediate 0xea: (a & b) | c.
DB_WGMMA_HD constexpr uint32_t lop3_and_or(uint32_t a, uint32_t b, uint32_t c) {
  return (a & b) | c;
}
// prmt.b32 d, a, b, sel (default mode): byte j of d is byte (sel >> 4 j) & 7 of {b, a} (a bytes
// 0-3, b bytes 4-7); the selectors used here never set the sign-replicate bit.
DB_WGMMA_HD constexpr uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  const uint64_t ab = uint64_t{b} << 32 | a;
  uint32_t d = 0;
  for (int j = 0; j < 4; ++j)
    d |= static_cast<uint32_t>(ab >> (8 * ((sel >> (4 * j)) & 7)) & 0xff) << (8 * j);
  return d;
}

// The raw f16x2 registers (before the zero constant and the scale) of an int4 fragment word:
// register r of a k16 step's A fragment. Registers 1 and 3 hold 1024 + 16 q.
DB_WGMMA_HD constexpr uint32_t int4_raw_register(uint32_t word, int r) {
  const uint32_t v = r >= 2 ? word >> 8 : word;
  return lop3_and_or(v, r % 2 ? 0x00f000f0u : 0x000f000fu, 0x64006400u);
}
// The raw f16x2 register r (0-3) of an int8 k16 step from its two words (w0: registers 0, 1;
// w1: 2, 3): 1024 + u of its two elements.
DB_WGMMA_HD constexpr uint32_t int8_raw_register(uint32_t w0, uint32_t w1, int r) {
  return prmt(r < 2 ? w0 : w1, 0x64646464u, r % 2 ? 0x5351u : 0x5250u);
}

// ---- the grid: CTA row tiles x sequence tiles x k splits

// Sequences a CTA takes: the instantiated N tiles (wgmma's N), the batch rounded up to one of
// them, 256 above.
DB_WGMMA_HD constexpr int n_tile_for(int64_t batch) {
  return batch <= 8 ? 8 : batch <= 16 ? 16 : batch <= 32 ? 32 : batch <= 64 ? 64 : batch <= 128 ? 128 : 256;
}

// The chunks [k0, k1) of split `split` of `splits` over `chunks`: as even as whole chunks allow.
struct KRange {
  int64_t k0, k1;
};
DB_WGMMA_HD constexpr KRange split_range(int split, int splits, int64_t chunks) {
  return KRange{chunks * split / splits, chunks * (split + 1) / splits};
}

// A work unit of the persistent grid: unit u (0 to tiles * splits - 1) is (row tile, sequence
// tile, split) with the sequence tiles fastest (the CTAs that read the same weights run side by
// side: L2 serves the second) and the splits of a tile next (their partials meet while L2 still
// holds them).
struct Unit {
  int64_t rt;
  int st, split;
};
DB_WGMMA_HD constexpr Unit unit_coord(int64_t u, int seq_tiles, int splits) {
  return Unit{u / seq_tiles / splits, static_cast<int>(u % seq_tiles),
              static_cast<int>((u / seq_tiles) % splits)};
}

// The time model the split choice minimises (nanoseconds; H200-class figures, a choice only
// needs their ratios): a unit takes its chunks, each the longer of streaming its weight block
// and meta at the SM's share of HBM and its wgmmas at the SM's share of the tensor cores, plus a
// fixed drain (the last wgmma, the epilogue's latency) and, split, its fp32 partial written and
// read back through L2 (128 x N x 8 bytes: at N = 256 as long as ~7 chunks, which is why large
// batches split less). Units run in whole rounds over the SMs.
constexpr double kHbmBytesPerNs = 4500.0;      // ~4.5 TB/s streamed
constexpr double kTensorFlopPerNs = 900000.0;  // ~900 TFLOP/s dense fp16
constexpr double kL2BytesPerNs = 8000.0;       // partials: written, then read by another SM
constexpr double kUnitDrainNs = 500.0;
constexpr int kMaxSplits = 16;

DB_WGMMA_HD constexpr double chunk_ns(Kind k, int n_tile, int sms) {
  const double bytes = 2.0 * block_bytes(k) + kMetaBytes;
  const double mem = bytes / (kHbmBytesPerNs / sms);
  const double mma = 2.0 * kCtaRows * n_tile * kChunk / (kTensorFlopPerNs / sms);
  return mem > mma ? mem : mma;
}

DB_WGMMA_HD constexpr double split_cost(Kind k, int n_tile, int64_t tiles, int64_t chunks, int splits,
                                        int sms) {
  const int64_t rounds = (tiles * splits + sms - 1) / sms;
  const double partial = splits > 1 ? 2.0 * kCtaRows * n_tile * 4 / (kL2BytesPerNs / sms) : 0.0;
  return static_cast<double>(rounds) *
         (static_cast<double>((chunks + splits - 1) / splits) * chunk_ns(k, n_tile, sms) + kUnitDrainNs +
          partial);
}

// K splits for `tiles` output tiles of `chunks` chunks on `sms` SMs: 1 when the tiles fill two
// waves, else the cheapest by split_cost (the fewest on a tie), at most kMaxSplits and chunks.
DB_WGMMA_HD constexpr int choose_splits(Kind k, int n_tile, int64_t tiles, int64_t chunks, int sms) {
  if (tiles >= 2 * int64_t{sms}) return 1;
  int best = 1;
  for (int s = 2; s <= kMaxSplits && s <= chunks; ++s)
    if (split_cost(k, n_tile, tiles, chunks, s, sms) < split_cost(k, n_tile, tiles, chunks, best, sms))
      best = s;
  return best;
}

struct Plan {
  int n_tile;         // sequences a CTA (wgmma's N)
  int seq_tiles;      // ceil(batch / n_tile)
  int64_t row_tiles;  // CTA row tiles (128 rows)
  int64_t chunks;     // k-chunks of 64 columns
  int splits;         // K splits a tile
  int64_t units;      // row_tiles * seq_tiles * splits
  int grid;           // persistent CTAs: min(units, sms)
};

// splits_override > 0 forces the split count (clamped to chunks); n_tile_override > 0 a smaller
// N tile than the batch's (an instantiated one, n_tile_for rounds it up), more sequence tiles
// instead of splits.
DB_WGMMA_HD constexpr Plan make_plan(Kind k, int64_t rows, int64_t cols, int64_t batch, int sms,
                                     int splits_override = 0, int n_tile_override = 0) {
  Plan p{};
  p.n_tile = n_tile_override > 0 && n_tile_override < n_tile_for(batch) ? n_tile_for(n_tile_override)
                                                                        : n_tile_for(batch);
  p.seq_tiles = static_cast<int>((batch + p.n_tile - 1) / p.n_tile);
  p.row_tiles = row_tiles(rows);
  p.chunks = cols / kChunk;
  const int64_t tiles = p.row_tiles * p.seq_tiles;
  p.splits = splits_override > 0 ? (splits_override < p.chunks ? splits_override : static_cast<int>(p.chunks))
                                 : choose_splits(k, p.n_tile, tiles, p.chunks, sms);
  p.units = tiles * p.splits;
  p.grid = static_cast<int>(p.units < sms ? p.units : sms);
  return p;
}

// The workspace of the kernel: a counter an output tile (int32, zero between launches: the last
// unit of a tile resets its counter) in a region of fixed size, so that the counters of one plan
// never overlap the partials of another that shares the workspace, then with splits an fp32
// partial of kCtaRows x n_tile a unit.
constexpr int64_t kCounterBytes = int64_t{1} << 16;
DB_WGMMA_HD constexpr bool counters_fit(const Plan& p) {
  return p.splits == 1 || p.row_tiles * p.seq_tiles * 4 <= kCounterBytes;
}
DB_WGMMA_HD constexpr int64_t workspace_bytes(const Plan& p) {
  return kCounterBytes + (p.splits > 1 ? p.units * kCtaRows * int64_t{p.n_tile} * 4 : 0);
}

}  // namespace db::mixed
