// The Hopper prefill attention's layout arithmetic (kernels/flash_wgmma_layout.h) against the
// definitions it implements: the PTX ISA's A register fragment of wgmma.m64nNk16, the S
// accumulator reused as that fragment, the MN-major 128-byte-swizzle descriptor of V, and a
// whole tile's S = Q K^T and O = P V emulated through TMA's swizzle, the descriptors and the
// fragments against a direct product; then a chunk's causal tile bounds from any p0, the mask
// on every fragment element, the boxes' coordinates in their maps, a whole chunk's indexing
// emulated against the causal softmax, and the grid's order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "flash_wgmma_layout.h"

using namespace db::flash_wgmma;
using db::wgmma::acc_col;
using db::wgmma::acc_row;

namespace {

TEST(FlashWgmmaLayout, AFragmentCoversTheTileOnceAsThePtxIsaDrawsIt) {
  std::vector<int> hits(64 * 16, 0);
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < 8; ++i) {
      const int r = a_row(t, i), c = a_col(t, i);
      ASSERT_TRUE(r >= 0 && r < 64 && c >= 0 && c < 16);
      ++hits[r * 16 + c];
    }
  for (int h : hits) EXPECT_EQ(h, 1);
  // The figure of the m64nNk16 A fragment: thread 0 holds a0,a1 at (0,0),(0,1), a2,a3 at
  // (8,0),(8,1), a4..a7 the same 8 columns on; lane 5 of warp 1 starts at row 17, column 2;
  // the last thread ends at (63, 15).
  const std::pair<int, int> t0[8] = {{0, 0}, {0, 1}, {8, 0}, {8, 1}, {0, 8}, {0, 9}, {8, 8}, {8, 9}};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(std::make_pair(a_row(0, i), a_col(0, i)), t0[i]) << i;
  EXPECT_EQ(std::make_pair(a_row(37, 0), a_col(37, 0)), std::make_pair(17, 2));
  EXPECT_EQ(std::make_pair(a_row(127, 7), a_col(127, 7)), std::make_pair(63, 15));
}

// Accumulator float p_acc_index(kk, i) of S (64 x 128) holds the element that A fragment
// element i of the P V product's step kk needs: same thread, same row, key 16 kk + a_col.
TEST(FlashWgmmaLayout, SAccumulatorIsThePAFragmentInPlace) {
  for (int t = 0; t < 128; ++t)
    for (int kk = 0; kk < 8; ++kk)
      for (int i = 0; i < 8; ++i) {
        const int j = p_acc_index(kk, i);
        ASSERT_TRUE(j >= 0 && j < 64);
        EXPECT_EQ(acc_row(t, j), a_row(t, i)) << t << " " << kk << " " << i;
        EXPECT_EQ(acc_col(t, j), 16 * kk + a_col(t, i)) << t << " " << kk << " " << i;
      }
}

TEST(FlashWgmmaLayout, VDescriptorFieldsAndSteps) {
  const uint32_t tile = 0x12000;  // 1024-byte aligned
  const uint64_t d = v_tile_desc(tile, 0);
  EXPECT_EQ(db::wgmma::desc_start(d), tile);
  EXPECT_EQ(db::wgmma::desc_lbo(d), kBoxBytes);  // the box of dims 64-127
  EXPECT_EQ(db::wgmma::desc_sbo(d), 1024u);      // the next 8 keys
  EXPECT_EQ(db::wgmma::desc_base_offset(d), 0u);
  EXPECT_EQ(db::wgmma::desc_swizzle(d), db::wgmma::Swizzle::b128);
  // Each k16 step moves the start 2048 bytes (128 in the 16-byte field) and nothing else.
  for (int kk = 0; kk < 8; ++kk) EXPECT_EQ(v_tile_desc(tile, kk), d + 128u * kk);
}

// The PTX ISA's canonical MN-major 128-byte-swizzle layout, ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))
// in elements with T = 8, spelled out mode by mode in bytes, then Swizzle<3,4,3>.
TEST(FlashWgmmaLayout, MnMajorAddressFollowsTheCanonicalLayout) {
  const uint32_t lbo = 8192, sbo = 1024;
  const uint64_t d = db::wgmma::make_desc(0, lbo, sbo, db::wgmma::Swizzle::b128);
  for (uint32_t k = 0; k < 16; ++k)
    for (uint32_t n = 0; n < 128; ++n) {
      const uint32_t linear = (n % 8) * 2 + (n / 8 % 8) * 16 + (n / 64) * lbo + (k % 8) * 128 + (k / 8) * sbo;
      EXPECT_EQ(wgmma_mnmajor_sw128_addr(d, k, n), db::wgmma::swizzle128(linear)) << k << " " << n;
    }
}

// What wgmma reads through the V descriptors is what TMA wrote: for every step kk, key k of
// it and dim n, the MN-major address is where TMA's 128-byte swizzle put (key 16 kk + k,
// dim n) of the two 64-dim boxes.
TEST(FlashWgmmaLayout, WgmmaReadsTheVElementTmaWrote) {
  for (uint32_t tile : {0u, 32768u, 3u * 65536u + 32768u}) {
    for (int kk = 0; kk < 8; ++kk) {
      const uint64_t d = v_tile_desc(tile, kk);
      for (uint32_t k = 0; k < 16; ++k)
        for (uint32_t n = 0; n < 128; ++n) {
          const uint32_t key = 16 * kk + k;
          const uint32_t want = tile + (n / 64) * kBoxBytes + db::wgmma::tma_sw128_offset(key, (n % 64) * 2);
          ASSERT_EQ(wgmma_mnmajor_sw128_addr(d, k, n), want) << tile << " " << kk << " " << k << " " << n;
        }
    }
  }
}

TEST(FlashWgmmaLayout, WgmmaReadsTheQAndKElementsTmaWrote) {
  const uint32_t tile = 65536;
  for (uint32_t first : {0u, 64u}) {  // the two consumers' 64 queries; K: all 128 keys from 0
    for (int kk = 0; kk < 8; ++kk) {
      const uint64_t d = kmajor_tile_desc(tile, first, kk);
      for (uint32_t r = 0; r < 128 - first; ++r)
        for (uint32_t k = 0; k < 16; ++k) {
          const uint32_t dim = 16 * kk + k;
          const uint32_t want =
              tile + (dim / 64) * kBoxBytes + db::wgmma::tma_sw128_offset(first + r, (dim % 64) * 2);
          ASSERT_EQ(db::wgmma::wgmma_kmajor_sw128_addr(d, r, k), want) << first << " " << kk << " " << r;
        }
    }
  }
}

// A whole tile as the kernel computes it, emulated: Q (128 x 128), K and V (128 keys x 128
// dims) written into a byte image of shared memory by TMA's swizzle; each consumer's S (64 x
// 128) accumulated into its threads' fragments by 8 k16 steps through the K-major descriptors;
// P taken from the S fragment (p_acc_index) as A, V read through the MN-major descriptors, O
// accumulated into the threads' fragments. Small integers keep every sum exact; the result must
// equal (Q K^T) V computed directly.
TEST(FlashWgmmaLayout, EmulatedTileProductMatchesDirectProduct) {
  constexpr uint32_t kQ = 0, kK = 2 * kBoxBytes, kV = 4 * kBoxBytes;
  std::vector<int> smem(6 * kBoxBytes / 2, 0);  // one int a 16-bit element
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> dist(-2, 2);
  int q[128][128], k[128][128], v[128][128];
  for (int r = 0; r < 128; ++r)
    for (int c = 0; c < 128; ++c) {
      q[r][c] = dist(rng);
      k[r][c] = dist(rng);
      v[r][c] = dist(rng);
    }
  auto tma_store = [&](uint32_t tile, int(&m)[128][128]) {
    for (uint32_t r = 0; r < 128; ++r)
      for (uint32_t c = 0; c < 128; ++c)
        smem[(tile + (c / 64) * kBoxBytes + db::wgmma::tma_sw128_offset(r, (c % 64) * 2)) / 2] = m[r][c];
  };
  tma_store(kQ, q);
  tma_store(kK, k);
  tma_store(kV, v);
  auto at = [&](uint32_t addr) { return smem[addr / 2]; };
  std::vector<std::vector<long>> qk(128, std::vector<long>(128, 0));  // the direct Q K^T
  for (int r = 0; r < 128; ++r)
    for (int key = 0; key < 128; ++key)
      for (int d = 0; d < 128; ++d) qk[r][key] += q[r][d] * k[key][d];

  for (int consumer = 0; consumer < 2; ++consumer) {
    std::vector<std::vector<long>> s(128, std::vector<long>(64, 0)), o(128, std::vector<long>(64, 0));
    for (int kk = 0; kk < 8; ++kk) {
      const uint64_t da = kmajor_tile_desc(kQ, 64 * consumer, kk), db_ = kmajor_tile_desc(kK, 0, kk);
      for (int t = 0; t < 128; ++t)
        for (int j = 0; j < 64; ++j)
          for (int x = 0; x < 16; ++x)
            s[t][j] += long{at(db::wgmma::wgmma_kmajor_sw128_addr(da, acc_row(t, j), x))} *
                       at(db::wgmma::wgmma_kmajor_sw128_addr(db_, acc_col(t, j), x));
    }
    for (int kk = 0; kk < 8; ++kk) {
      const uint64_t dv = v_tile_desc(kV, kk);
      // A of this step, as the threads hold it: a[t][i] at (a_row(t, i), a_col(t, i)).
      std::vector<std::vector<long>> a(128, std::vector<long>(8));
      for (int t = 0; t < 128; ++t)
        for (int i = 0; i < 8; ++i) a[t][i] = s[t][p_acc_index(kk, i)];
      std::vector<long> a_tile(64 * 16);
      for (int t = 0; t < 128; ++t)
        for (int i = 0; i < 8; ++i) a_tile[a_row(t, i) * 16 + a_col(t, i)] = a[t][i];
      for (int t = 0; t < 128; ++t)
        for (int j = 0; j < 64; ++j)
          for (int x = 0; x < 16; ++x)
            o[t][j] += a_tile[acc_row(t, j) * 16 + x] * at(wgmma_mnmajor_sw128_addr(dv, x, acc_col(t, j)));
    }
    for (int t = 0; t < 128; ++t)
      for (int j = 0; j < 64; ++j) {
        const int row = 64 * consumer + acc_row(t, j), col = acc_col(t, j);
        long want = 0;
        for (int key = 0; key < 128; ++key) want += qk[row][key] * v[key][col];
        ASSERT_EQ(o[t][j], want) << "consumer " << consumer << " row " << row << " col " << col;
      }
  }
}

// The chunks the tests walk: p0 at 0, inside the first tile, on a tile boundary and past it,
// off one; rows of one query, ragged tiles, whole tiles.
constexpr int kP0s[] = {0, 1, 127, 128, 300, 4096};
constexpr int kRows[] = {1, 127, 128, 129, 333, 1024};

// The key tiles a query tile walks are exactly those holding a key some query of it attends to,
// and the masked ones include every one holding a key past one of its queries.
TEST(FlashWgmmaLayout, CausalBoundsMatchBruteForce) {
  for (auto [bm, bn] : {std::pair{128, 128}, std::pair{128, 64}, std::pair{64, 128}})
    for (int p0 : kP0s)
      for (int rows : kRows) {
        const int q_tiles = (rows + bm - 1) / bm, keys = p0 + rows;
        for (int qt = 0; qt < q_tiles; ++qt) {
          const int first = p0 + qt * bm, last = p0 + std::min(qt * bm + bm, rows) - 1;  // positions
          int walked = 0;
          for (int kt = 0; kt * bn < keys; ++kt) {
            // Some query attends to some key of the tile: its first key is at or before the last
            // query. Some key is past some query: its last key (in the chunk or past it, where
            // TMA fills zeros that must not count) is after the first query.
            const bool attends = kt * bn <= last;
            const bool past = kt * bn + bn - 1 > first;
            if (attends) {
              EXPECT_EQ(kt, walked) << "the walked tiles start at 0 and have no gap";
              ++walked;
              // A walked tile with a key past some query must be masked.
              if (past) {
                EXPECT_TRUE(key_tile_needs_mask(qt, kt, bm, bn, p0)) << bm << " " << bn << " " << p0;
              }
            }
            // A tile that needs no mask has every key (in the chunk or not) at or before the
            // tile's first query.
            if (!key_tile_needs_mask(qt, kt, bm, bn, p0)) {
              EXPECT_LE(kt * bn + bn - 1, first);
            }
          }
          EXPECT_EQ(causal_key_tiles(qt, bm, bn, rows, p0), walked)
              << bm << " " << bn << " " << p0 << " " << rows << " " << qt;
        }
      }
  // 128 x 128 tiles from p0 = 0: query tile qt walks qt + 1 key tiles and masks the last alone;
  // from p0 = 300 (44 into tile 2) it walks tiles 0 .. (300 + 128 qt + 127) / 128 and masks the
  // two the diagonal crosses.
  for (int qt = 0; qt < 8; ++qt) {
    EXPECT_EQ(causal_key_tiles(qt, 128, 128, 1024, 0), qt + 1);
    for (int kt = 0; kt <= qt; ++kt) EXPECT_EQ(key_tile_needs_mask(qt, kt, 128, 128, 0), kt == qt);
    EXPECT_EQ(causal_key_tiles(qt, 128, 128, 1024, 300), qt + 4);
    for (int kt = 0; kt < qt + 4; ++kt)
      EXPECT_EQ(key_tile_needs_mask(qt, kt, 128, 128, 300), kt == qt + 2 || kt == qt + 3) << qt << " " << kt;
  }
}

// Over every thread's S fragment of every walked tile, the kernel's mask (applied on the tiles
// key_tile_needs_mask picks, per element by causal_masked of key_position against p0 +
// query_row) hides exactly the keys past each query; every query row, padding past the chunk
// included, sees key 0 in tile 0, so its running maximum is finite from the first tile on.
TEST(FlashWgmmaLayout, MaskHidesExactlyTheKeysPastEachQuery) {
  constexpr int bm = 128, bn = 128;
  for (int p0 : kP0s)
    for (int rows : kRows) {
      const int q_tiles = (rows + bm - 1) / bm;
      for (int qt = 0; qt < q_tiles; ++qt)
        for (int kt = 0; kt < causal_key_tiles(qt, bm, bn, rows, p0); ++kt)
          for (int consumer = 0; consumer < 2; ++consumer)
            for (int t = 0; t < 128; ++t)
              for (int j = 0; j < 64; ++j) {
                const int row = query_row(qt, bm, consumer, t, j), key = key_position(kt, bn, t, j);
                ASSERT_EQ(row, qt * bm + 64 * consumer + acc_row(t, j));
                const bool hidden = key_tile_needs_mask(qt, kt, bm, bn, p0) && causal_masked(key, p0 + row);
                ASSERT_EQ(hidden, key > p0 + row) << p0 << " " << rows << " " << qt << " " << kt;
                if (kt == 0 && key == 0) {
                  ASSERT_FALSE(hidden);
                }
              }
    }
}

// Every box the kernel loads starts inside its map, so that TMA credits its whole size to the
// barrier (kTileBytes a tile): the Q tiles' first row is a row of the chunk, the walked key
// tiles' first position at most the chunk's last one.
TEST(FlashWgmmaLayout, EveryBoxStartsInsideItsMap) {
  constexpr int bm = 128, bn = 128;
  EXPECT_EQ(kTileBytes, 2u * 64 * 128 * 2);  // two boxes of 64 fp16 dims x 128 rows
  for (int p0 : kP0s)
    for (int rows : kRows)
      for (int heads : {1, 8, 32})
        for (int kv_heads : {1, heads / 4 > 0 ? heads / 4 : 1, heads}) {
          const int q_tiles = (rows + bm - 1) / bm;
          for (int qt = 0; qt < q_tiles; ++qt)
            for (int head = 0; head < heads; ++head)
              for (int b = 0; b < 2; ++b) {
                const BoxCoord q = q_box(head, qt, bm, b);
                EXPECT_LT(q.outer, rows);
                EXPECT_EQ(q.inner % 64, 0);
                EXPECT_LE(q.inner + 64, heads * kHeadDim);
                const int kvh = kv_head_of(head, heads, kv_heads);
                ASSERT_TRUE(kvh >= 0 && kvh < kv_heads);
                const int last_kt = causal_key_tiles(qt, bm, bn, rows, p0) - 1;
                const BoxCoord k = kv_box(kvh, last_kt, bn, b);
                EXPECT_LT(k.outer, kv_map_rows(p0, rows)) << p0 << " " << rows << " " << qt;
                EXPECT_LE(k.inner + 64, kv_heads * kHeadDim);
              }
        }
}

// The kernel's indexing end to end on the CPU, in double precision: a chunk's queries and a
// cache longer than the chunk whose positions past it hold NaN; Q, K and V tiles read through
// q_box and kv_box from maps of `rows` and kv_map_rows rows (zeros past them, as TMA fills);
// each consumer's S tile assembled from its threads' fragments (query_row, key_position, each
// element once), masked as the kernel masks it, the online softmax tile by tile over the key
// tiles the query tile walks, O stored from the fragments at out_offset. Every output equals
// the direct causal softmax over the cache, and none is NaN.
TEST(FlashWgmmaLayout, EmulatedChunkMatchesTheCausalSoftmax) {
  constexpr int bm = 128, bn = 128, hd = kHeadDim;
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (auto [p0, rows, heads, kv_heads] : {std::tuple{300, 133, 4, 2}, std::tuple{0, 129, 2, 1},
                                           std::tuple{128, 1, 4, 4}, std::tuple{4076, 40, 2, 1}}) {
    const int cache = p0 + rows + 50, kv_dim = kv_heads * hd, q_dim = heads * hd;
    std::vector<double> q(size_t(rows) * q_dim), k(size_t(cache) * kv_dim), v(size_t(cache) * kv_dim);
    for (auto& x : q) x = dist(rng);
    for (size_t i = 0; i < k.size(); ++i) {
      const bool written = int(i / kv_dim) < p0 + rows;
      k[i] = written ? dist(rng) : NAN;
      v[i] = written ? dist(rng) : NAN;
    }
    // Row r, dim d of the tile whose box 0 is at `at` (box d / 64 at kv_box/q_box's b), from a
    // map of `map_rows` rows of `width` values.
    const auto tile_at = [](const std::vector<double>& m, int64_t map_rows, int width, BoxCoord at, int r,
                            int c) {
      const int64_t row = int64_t{at.outer} + r;
      return row < map_rows ? m[size_t(row * width + at.inner + c)] : 0.0;
    };
    std::vector<double> out(size_t(rows) * q_dim, NAN);
    const int q_tiles = (rows + bm - 1) / bm;
    for (int block = 0; block < heads * q_tiles; ++block) {
      const CtaWork w = cta_work(block, heads, q_tiles);
      const int kvh = kv_head_of(w.head, heads, kv_heads);
      const auto q_at = [&](int r, int d) {
        return tile_at(q, rows, q_dim, q_box(w.head, w.q_tile, bm, d / 64), r, d % 64);
      };
      for (int consumer = 0; consumer < 2; ++consumer) {
        std::vector<double> o(64 * hd, 0.0), mx(64, -INFINITY), l(64, 0.0);
        for (int kt = 0; kt < causal_key_tiles(w.q_tile, bm, bn, rows, p0); ++kt) {
          const auto kv_at = [&](const std::vector<double>& m, int r, int d) {
            return tile_at(m, kv_map_rows(p0, rows), kv_dim, kv_box(kvh, kt, bn, d / 64), r, d % 64);
          };
          std::vector<double> s(64 * bn, NAN);
          for (int t = 0; t < 128; ++t)
            for (int j = 0; j < 64; ++j) {
              const int row = query_row(w.q_tile, bm, consumer, t, j), key = key_position(kt, bn, t, j);
              const int r = row - w.q_tile * bm - 64 * consumer, c = key - kt * bn;
              ASSERT_TRUE(r >= 0 && r < 64 && c >= 0 && c < bn && std::isnan(s[r * bn + c]));
              double dot = 0;
              for (int d = 0; d < hd; ++d) dot += q_at(64 * consumer + r, d) * kv_at(k, c, d);
              if (key_tile_needs_mask(w.q_tile, kt, bm, bn, p0) && causal_masked(key, p0 + row))
                dot = -INFINITY;
              s[r * bn + c] = dot;
            }
          for (int r = 0; r < 64; ++r) {
            double nm = mx[r];
            for (int c = 0; c < bn; ++c) nm = std::max(nm, s[r * bn + c]);
            ASSERT_TRUE(std::isfinite(nm)) << "row " << r << " of tile " << kt;
            const double scale = std::exp(mx[r] - nm);
            mx[r] = nm;
            l[r] *= scale;
            for (int d = 0; d < hd; ++d) o[r * hd + d] *= scale;
            for (int c = 0; c < bn; ++c) {
              const double p = std::exp(s[r * bn + c] - nm);
              l[r] += p;
              for (int d = 0; d < hd; ++d) o[r * hd + d] += p * kv_at(v, c, d);
            }
          }
        }
        for (int t = 0; t < 128; ++t)
          for (int j = 0; j < 64; ++j) {
            const int row = query_row(w.q_tile, bm, consumer, t, j), r = row - w.q_tile * bm - 64 * consumer;
            if (row < rows)
              out[size_t(out_offset(row, heads, w.head, acc_col(t, j)))] = o[r * hd + acc_col(t, j)] / l[r];
          }
      }
    }
    for (int row = 0; row < rows; ++row)
      for (int h = 0; h < heads; ++h) {
        const int kvh = kv_head_of(h, heads, kv_heads);
        std::vector<double> sc(p0 + row + 1);
        double mx = -INFINITY, l = 0;
        for (int key = 0; key <= p0 + row; ++key) {
          double dot = 0;
          for (int d = 0; d < hd; ++d)
            dot += q[size_t(row) * q_dim + h * hd + d] * k[size_t(key) * kv_dim + kvh * hd + d];
          sc[key] = dot;
          mx = std::max(mx, dot);
        }
        for (double& x : sc) l += (x = std::exp(x - mx));
        for (int d = 0; d < hd; ++d) {
          double want = 0;
          for (int key = 0; key <= p0 + row; ++key) want += sc[key] * v[size_t(key) * kv_dim + kvh * hd + d];
          ASSERT_NEAR(out[size_t(row) * q_dim + h * hd + d], want / l, 1e-9)
              << "p0 " << p0 << " rows " << rows << ": row " << row << " head " << h << " dim " << d;
        }
      }
  }
}

TEST(FlashWgmmaLayout, GridRunsLongestTilesFirstAndHeadsOfAKvHeadTogether) {
  const int heads = 32, kv_heads = 8, q_tiles = 33;
  std::vector<int> hits(heads * q_tiles, 0);
  int prev_tile = q_tiles;
  for (int b = 0; b < heads * q_tiles; ++b) {
    const CtaWork w = cta_work(b, heads, q_tiles);
    ASSERT_TRUE(w.head >= 0 && w.head < heads && w.q_tile >= 0 && w.q_tile < q_tiles);
    ++hits[w.q_tile * heads + w.head];
    EXPECT_LE(w.q_tile, prev_tile);  // never a longer tile after a shorter one
    prev_tile = w.q_tile;
    // The group of heads / kv_heads consecutive CTAs reads one kv head's tiles.
    const int group = heads / kv_heads;
    const CtaWork first = cta_work(b - b % group, heads, q_tiles);
    EXPECT_EQ(w.head / group, first.head / group);
    EXPECT_EQ(w.q_tile, first.q_tile);
  }
  for (int h : hits) EXPECT_EQ(h, 1);
  EXPECT_EQ(cta_work(0, heads, q_tiles).q_tile, q_tiles - 1);
}

}  // namespace
