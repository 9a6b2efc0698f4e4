// The layout arithmetic of the Hopper wgmma kernels (the prefill attention, prefill_wgmma.cu,
// and the lab's GEMM, tests/bench/wgmma_bench.cu) that a CPU can check
// (tests/test_wgmma_layout.cpp): the wgmma shared-memory matrix descriptor, the 128-byte swizzle
// that TMA writes and wgmma reads, the A register fragment and the accumulator fragment of
// wgmma's m64nNk16 (16-bit inputs, f32 results), and the order in which a persistent grid walks
// the output tiles.
//
// Operands are K-major fp16 tiles of 64 columns: one 128-byte row an M (or N) index, rows
// consecutive, the tile on a 1024-byte boundary of shared memory. TMA with
// CU_TENSOR_MAP_SWIZZLE_128B stores such a box with each row's eight 16-byte chunks permuted
// (chunk c of row r lands at chunk c ^ (r % 8)); a wgmma descriptor with the 128-byte swizzle
// mode reads the same permutation, so the two agree with no shuffling in between.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DB_WGMMA_HD __host__ __device__
#else
#define DB_WGMMA_HD
#endif

namespace db::wgmma {

// The swizzle modes of the descriptor's bits 62-63 (PTX ISA, "Matrix Descriptor Format").
enum class Swizzle : uint32_t { none = 0, b128 = 1, b64 = 2, b32 = 3 };

// A descriptor field holding a byte address or offset: bits 4-17 of it (the four low bits are
// zero: operands are 16-byte aligned; shared memory addresses fit 18 bits).
DB_WGMMA_HD constexpr uint64_t desc_field(uint32_t bytes) {
  return (bytes & 0x3FFFFu) >> 4;
}

// The 64-bit matrix descriptor of wgmma.mma_async's shared-memory operands:
//   bits  0-13  start address >> 4
//   bits 16-29  leading dimension byte offset >> 4: the distance between two core matrices
//               along K; unused by K-major swizzled layouts (whose K extent per instruction,
//               32 bytes, stays inside one 128-byte row), conventionally 16 there
//   bits 32-45  stride dimension byte offset >> 4: the distance between two groups of 8 rows
//               along M or N (1024 bytes for 128-byte rows)
//   bits 49-51  matrix base offset: 0 when the swizzle pattern's 1024-byte repeat starts on a
//               1024-byte boundary, as every tile here does
//   bits 62-63  the swizzle mode
DB_WGMMA_HD constexpr uint64_t make_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                         Swizzle swizzle, uint32_t base_offset = 0) {
  return desc_field(smem_addr) | desc_field(lbo_bytes) << 16 | desc_field(sbo_bytes) << 32 |
         uint64_t{base_offset & 7u} << 49 | uint64_t{static_cast<uint32_t>(swizzle)} << 62;
}

// The descriptor of a K-major fp16 operand with 128-byte rows, 128-byte swizzle, starting at
// `smem_addr`: the tile's base plus 32 bytes for each k16 step inside its 64 columns. The
// hardware swizzles the absolute address it computes, so a start 32, 64 or 96 bytes past the
// 1024-byte boundary selects the k16 slice with no change to the base offset.
DB_WGMMA_HD constexpr uint64_t kmajor_sw128_desc(uint32_t smem_addr) {
  return make_desc(smem_addr, 16, 1024, Swizzle::b128);
}

DB_WGMMA_HD constexpr uint32_t desc_start(uint64_t d) {
  return static_cast<uint32_t>(d & 0x3FFF) << 4;
}
DB_WGMMA_HD constexpr uint32_t desc_lbo(uint64_t d) {
  return static_cast<uint32_t>(d >> 16 & 0x3FFF) << 4;
}
DB_WGMMA_HD constexpr uint32_t desc_sbo(uint64_t d) {
  return static_cast<uint32_t>(d >> 32 & 0x3FFF) << 4;
}
DB_WGMMA_HD constexpr uint32_t desc_base_offset(uint64_t d) {
  return static_cast<uint32_t>(d >> 49 & 7);
}
DB_WGMMA_HD constexpr Swizzle desc_swizzle(uint64_t d) {
  return static_cast<Swizzle>(d >> 62 & 3);
}

// The 128-byte swizzle of a shared-memory byte address (CUTLASS's Swizzle<3,4,3>): bits 4-6,
// the 16-byte chunk inside a 128-byte row, XOR bits 7-9, the row's index modulo 8. An
// involution that keeps every 16-byte chunk whole and stays inside its 1024-byte block.
DB_WGMMA_HD constexpr uint32_t swizzle128(uint32_t addr) {
  return addr ^ ((addr >> 7 & 7u) << 4);
}

// Where a TMA load with CU_TENSOR_MAP_SWIZZLE_128B into a 1024-byte aligned tile of 128-byte
// box rows puts byte `col_byte` (0-127) of box row `row`, relative to the tile.
DB_WGMMA_HD constexpr uint32_t tma_sw128_offset(uint32_t row, uint32_t col_byte) {
  return swizzle128(row * 128 + col_byte);
}

// The shared-memory byte address from which wgmma reads element (row, k) of a K-major 16-bit
// operand through descriptor `d` with the 128-byte swizzle: the PTX ISA's canonical layout
// ((8,m),(T,2k)):((8T,SBO),(1,T)) in units of elements with T = 8 (row r of a group of 8 at
// r * 128 bytes, groups at SBO, the 16 k of one instruction contiguous), then the swizzle of
// the absolute address. row: 0 to 63 (A) or N-1 (B); k: 0-15.
DB_WGMMA_HD constexpr uint32_t wgmma_kmajor_sw128_addr(uint64_t d, uint32_t row, uint32_t k) {
  return swizzle128(desc_start(d) + (row / 8) * desc_sbo(d) + (row % 8) * 128 + k * 2);
}

// The accumulator fragment of wgmma.m64nNk16 with f32 results: thread `t` (0-127) of the
// warpgroup holds N/2 floats; float j sits at row acc_row(t, j), column acc_col(t, j) of the
// 64 x N result. Each warp owns 16 rows; every 8 columns repeat the mma.m16n8 pattern: a quad
// of lanes shares a row, a thread holds two adjacent columns in rows r and r + 8.
DB_WGMMA_HD constexpr int acc_row(int t, int j) {
  return 16 * (t / 32) + (t % 32) / 4 + 8 * ((j / 2) % 2);
}
DB_WGMMA_HD constexpr int acc_col(int t, int j) {
  return 8 * (j / 4) + 2 * (t % 4) + j % 2;
}

// The A register fragment of wgmma.m64nNk16 with .f16/.bf16 inputs (PTX ISA, "Register Fragments",
// the figure of the m64nNk16 A layout): thread `t` (0-127) of the warpgroup holds 8 elements
// a0..a7 in four .f16x2 registers (a0 the low half of the first); element i sits at row
// a_row(t, i), column a_col(t, i) of the 64 x 16 tile. Each warp owns 16 rows; inside them it is
// mma.m16n8k16's A: a quad of lanes shares a row, a thread holds two adjacent columns in rows
// r and r + 8 for columns 0-7 (a0-a3), then the same for columns 8-15 (a4-a7).
DB_WGMMA_HD constexpr int a_row(int t, int i) {
  return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2);
}
DB_WGMMA_HD constexpr int a_col(int t, int i) {
  return 2 * (t % 4) + i % 2 + 8 * (i / 4);
}

// The output tile a persistent grid computes as its `tile`-th (0 to tiles_m * tiles_n - 1):
// tiles run down columns of `group_m` row tiles, so the CTAs in flight together share a few
// B tiles and a band of A (L2 reuse); the last band may be narrower.
struct TileCoord {
  int m, n;  // tile indices along M and N
};
DB_WGMMA_HD constexpr TileCoord tile_coord(int tile, int tiles_m, int tiles_n, int group_m) {
  const int per_band = group_m * tiles_n;
  const int band = tile / per_band;
  const int first_m = band * group_m;
  const int rows = tiles_m - first_m < group_m ? tiles_m - first_m : group_m;
  const int in_band = tile - band * per_band;
  return {first_m + in_band % rows, in_band / rows};
}

}  // namespace db::wgmma
