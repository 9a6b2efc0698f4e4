// The layout arithmetic of the Hopper causal prefill attention (prefill_wgmma.cu) that a CPU can
// check (tests/test_flash_wgmma_layout.cpp), on top of wgmma_layout.h's K-major descriptors,
// swizzle and accumulator fragment:
//   - the A register fragment of wgmma.m64nNk16 with 16-bit inputs, and how the f32 accumulator
//     of S = Q K^T (m64n128) becomes the A operand P of O += P V without moving a value between
//     threads;
//   - the descriptor of an MN-major operand with the 128-byte swizzle (V: [key][dim] in shared
//     memory, dims contiguous, is wgmma's B with the keys as K and the dims as N, read with
//     imm-trans-b = 1);
//   - a chunk's positions: the causal bounds of a query tile (the key tiles it walks, the ones
//     it masks), a fragment element's query and key positions, the TMA boxes' coordinates in
//     the maps of the queries and of the cache, and the order in which the grid's CTAs take
//     (query head, query tile).
#pragma once

#include <cstdint>

#include "wgmma_layout.h"

namespace db::flash_wgmma {

// The A register fragment of wgmma.m64nNk16 (wgmma_layout.h, shared with the mixed-input GEMM).
using wgmma::a_col;
using wgmma::a_row;

// P = S rounded to fp16 as the A operand of the P V product's k16 step `kk` (keys 16 kk to
// 16 kk + 15 of the tile): element i of thread t's A fragment is S accumulator float
// p_acc_index(kk, i) of the same thread. The accumulator repeats every 8 columns the pattern
// that A repeats in its two 8-column halves, so the mapping is the identity on a thread's
// registers: A register r (0-3) of step kk packs accumulators 8 kk + 2 r (low) and
// 8 kk + 2 r + 1 (high).
DB_WGMMA_HD constexpr int p_acc_index(int kk, int i) {
  return 8 * kk + i;
}

// The descriptor of an MN-major 16-bit operand in the 128-byte swizzle mode, the PTX ISA's
// canonical layout ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)) in elements, T = 8: 64 consecutive N
// (128 bytes, one swizzle atom's row) contiguous, the next 64 N at LBO bytes; 8 consecutive K
// at 128 bytes, the next 8 K at SBO bytes. A TMA box of 64 dims x rows keys with
// CU_TENSOR_MAP_SWIZZLE_128B is that layout with SBO = 1024 (eight 128-byte rows) and, for N
// beyond 64, LBO = the distance to the box holding the next 64 dims.
DB_WGMMA_HD constexpr uint64_t mnmajor_sw128_desc(uint32_t smem_addr, uint32_t lbo_bytes) {
  return wgmma::make_desc(smem_addr, lbo_bytes, 1024, wgmma::Swizzle::b128);
}

// The shared-memory byte address from which wgmma reads element (k, n) of an MN-major 16-bit
// B operand (k: 0-15, n: 0 to N-1) through descriptor `d` with the 128-byte swizzle: the
// canonical layout above from the descriptor's start, then the swizzle of the absolute address.
DB_WGMMA_HD constexpr uint32_t wgmma_mnmajor_sw128_addr(uint64_t d, uint32_t k, uint32_t n) {
  return wgmma::swizzle128(wgmma::desc_start(d) + (n / 64) * wgmma::desc_lbo(d) + (n % 64) * 2 +
                           (k / 8) * wgmma::desc_sbo(d) + (k % 8) * 128);
}

// Q, K and V tiles in shared memory: 128 rows (queries or keys) of 128 dims, each as two TMA
// boxes of 64 dims (128-byte rows, 128-byte swizzle, 1024-byte aligned), the second kBoxBytes
// after the first.
constexpr uint32_t kBoxBytes = 128 * 128;

// The K-major descriptor of rows first_row to first_row + 63 (Q: a consumer's 64 queries) or
// 0 to 127 (K) of such a tile for the Q K^T product's k16 step kk (dims 16 kk to 16 kk + 15):
// box kk / 4, 32 bytes further along the swizzled rows for each step inside it.
DB_WGMMA_HD constexpr uint64_t kmajor_tile_desc(uint32_t tile_addr, uint32_t first_row, int kk) {
  return wgmma::kmajor_sw128_desc(tile_addr + static_cast<uint32_t>(kk / 4) * kBoxBytes + first_row * 128 +
                                  static_cast<uint32_t>(kk % 4) * 32);
}

// The MN-major descriptor of a V tile for the P V product's k16 step kk (keys 16 kk to
// 16 kk + 15, all 128 dims as N): 16 rows (2048 bytes, two whole swizzle blocks) further on per
// step; LBO the distance to the box of dims 64-127.
DB_WGMMA_HD constexpr uint64_t v_tile_desc(uint32_t tile_addr, int kk) {
  return mnmajor_sw128_desc(tile_addr + static_cast<uint32_t>(kk) * 16 * 128, kBoxBytes);
}

// A chunk's causal bounds: query row r (0 to rows - 1) is the query at position p0 + r and
// attends to the cache's positions 0 .. p0 + r. Query tiles hold `bm` rows, key tiles `bn`
// positions. Query tile qt's last query is at position p0 + min(qt bm + bm - 1, rows - 1); it
// walks key tiles 0 .. causal_key_tiles - 1.
DB_WGMMA_HD constexpr int causal_key_tiles(int qt, int bm, int bn, int rows, int p0) {
  const int last = qt * bm + bm - 1 < rows - 1 ? qt * bm + bm - 1 : rows - 1;
  return (p0 + last) / bn + 1;
}
// Whether key tile kt holds a key past some query of query tile qt (its last key after the
// tile's first query, at position p0 + qt bm), so that the causal mask must be applied to it;
// the tiles before it need none. With bm == bn that is the diagonal tile alone when p0 is a
// multiple of bn, the two tiles the diagonal crosses otherwise.
DB_WGMMA_HD constexpr bool key_tile_needs_mask(int qt, int kt, int bm, int bn, int p0) {
  return kt * bn + bn - 1 > p0 + qt * bm;
}
// Whether the key at position `key` is hidden from the query at position `query`.
DB_WGMMA_HD constexpr bool causal_masked(int key, int query) {
  return key > query;
}

// The chunk's row and the cache position of S accumulator float j of thread t (0-127) of
// consumer warpgroup `consumer` (queries 64 consumer .. 64 consumer + 63 of the tile) in
// query tile qt and key tile kt.
DB_WGMMA_HD constexpr int query_row(int qt, int bm, int consumer, int t, int j) {
  return qt * bm + 64 * consumer + wgmma::acc_row(t, j);
}
DB_WGMMA_HD constexpr int key_position(int kt, int bn, int t, int j) {
  return kt * bn + wgmma::acc_col(t, j);
}

// The kv head query head `head` reads (grouped-query attention: heads / kv_heads query heads a
// kv head, consecutive).
DB_WGMMA_HD constexpr int kv_head_of(int head, int heads, int kv_heads) {
  return head / (heads / kv_heads);
}

// Head vectors of 128 dims: the one head size the kernel takes (Q K^T's 8 k16 steps, P V's N).
constexpr int kHeadDim = 128;

// A TMA box's coordinates in a 2-D tensor map, (inner, outer) = (column, row).
struct BoxCoord {
  int inner, outer;
};
// Box b (dims 64 b to 64 b + 63) of query head `head`'s tile qt of `bm` rows, in the map of the
// chunk's queries as [rows][heads * 128]: its rows past `rows` are zeros.
DB_WGMMA_HD constexpr BoxCoord q_box(int head, int qt, int bm, int b) {
  return {head * kHeadDim + 64 * b, qt * bm};
}
// Box b of kv head `kv_head`'s key tile kt of `bn` positions, in the map of a K or V cache as
// [kv_map_rows][kv_heads * 128].
DB_WGMMA_HD constexpr BoxCoord kv_box(int kv_head, int kt, int bn, int b) {
  return {kv_head * kHeadDim + 64 * b, kt * bn};
}
// The K and V maps' rows: the positions up to the chunk's last query. TMA fills a box's rows
// past them with zeros, so the cache's positions after the chunk (not written yet: anything,
// NaN included, whose product with a masked P of 0 would still be NaN) never reach a tile.
DB_WGMMA_HD constexpr int64_t kv_map_rows(int64_t p0, int64_t rows) {
  return p0 + rows;
}
// The bytes the two boxes of a tile (128 rows of 128 dims) complete on its mbarrier: TMA
// credits a box's whole size whether or not part of it lies past the map and is zero-filled
// (measured by the wgmma GEMM bench's ragged shapes), as long as the box starts inside the
// map, which every box the kernel loads does (tests/test_flash_wgmma_layout.cpp).
constexpr uint32_t kTileBytes = 2 * kBoxBytes;

// Where element `dim` of row `row`'s output for query head `head` goes in O [rows][heads][128].
DB_WGMMA_HD constexpr int64_t out_offset(int row, int heads, int head, int dim) {
  return (int64_t{row} * heads + head) * kHeadDim + dim;
}

// The work of CTA `block` (0 to heads * q_tiles - 1): the longest query tiles first (the last
// tile walks the most keys, so the grid's tail is short tiles), and within a query tile the
// heads in order, so that the heads / kv_heads query heads sharing a kv head run side by side
// and read its K and V tiles from L2.
struct CtaWork {
  int head, q_tile;
};
DB_WGMMA_HD constexpr CtaWork cta_work(int block, int heads, int q_tiles) {
  return {block % heads, q_tiles - 1 - block / heads};
}

}  // namespace db::flash_wgmma
