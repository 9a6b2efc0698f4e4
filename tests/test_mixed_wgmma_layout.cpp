// The mixed-input GEMM's layout arithmetic (kernels/mixed_wgmma_layout.h) against the
// definitions it implements: every weight has one place and the gather that packs it finds it
// there; a thread's bytes are its wgmma A fragments (PTX ISA, the m64nNk16 A figure) through the
// kernel's LOP3 / PRMT extraction; the meta entry a thread reads holds its rows' scales and zero
// constants; a CTA tile's k-chunk, dequantized from the packed bytes exactly as the kernel does
// and multiplied by X read through TMA's swizzle and the B descriptor, equals the direct product
// bit for bit; and the grid's units and K splits cover the work once.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "mixed_wgmma_layout.h"

using namespace db::mixed;
namespace wg = db::wgmma;

namespace {

float f16(uint16_t h) {
  return db::f16_to_f32(h);
}
uint16_t lo16(uint32_t v) {
  return static_cast<uint16_t>(v & 0xffff);
}
uint16_t hi16(uint32_t v) {
  return static_cast<uint16_t>(v >> 16);
}

TEST(MixedWgmmaLayout, FragmentFollowsThePtxIsa) {
  // Thread 0 of the warpgroup: a0 a1 (0, 0) (0, 1); a2 a3 (8, 0) (8, 1); a4 a5 (0, 8) (0, 9);
  // a6 a7 (8, 8) (8, 9). Warp 2, lane 5 (g 1, c 1): rows 33 / 41, columns 2, 3 / 10, 11.
  const int rows0[8] = {0, 0, 8, 8, 0, 0, 8, 8}, cols0[8] = {0, 1, 0, 1, 8, 9, 8, 9};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(wg::a_row(0, i), rows0[i]) << i;
    EXPECT_EQ(wg::a_col(0, i), cols0[i]) << i;
  }
  EXPECT_EQ(wg::a_row(69, 0), 33);
  EXPECT_EQ(wg::a_col(69, 1), 3);
  EXPECT_EQ(wg::a_row(69, 7), 41);
  EXPECT_EQ(wg::a_col(69, 6), 10);
  // slot_of inverts the fragment over a 64 x 64 block: (thread, step, element) for every weight.
  std::set<int> seen;
  for (int t = 0; t < 128; ++t)
    for (int s = 0; s < kSteps; ++s)
      for (int i = 0; i < 8; ++i) {
        const Slot sl = slot_of(wg::a_row(t, i), 16 * s + wg::a_col(t, i));
        EXPECT_EQ(sl.t, t);
        EXPECT_EQ(sl.step, s);
        EXPECT_EQ(sl.i, i);
        seen.insert(wg::a_row(t, i) * 64 + 16 * s + wg::a_col(t, i));
      }
  EXPECT_EQ(seen.size(), 64u * 64u);
}

TEST(MixedWgmmaLayout, NibbleAndByteOrdersAreBijections) {
  std::set<int> n, b;
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(int4_element(int4_nibble(i)), i);
    EXPECT_EQ(int8_byte(int8_byte(i)), i);
    n.insert(int4_nibble(i));
    b.insert(int8_byte(i));
  }
  EXPECT_EQ(n.size(), 8u);
  EXPECT_EQ(b.size(), 8u);
}

// Every element of a ragged matrix has its own nibble (int4) or byte (int8) inside the packed
// size, and the gather a repack runs (source) finds it there.
TEST(MixedWgmmaLayout, EveryWeightHasOnePlaceAndTheGatherFindsIt) {
  for (Kind k : {Kind::int4, Kind::int8}) {
    const int64_t rows = 200, cols = 192;
    std::set<std::pair<int64_t, int>> seen;
    for (int64_t r = 0; r < padded_rows(rows); ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const Place p = place(k, r, c, cols);
        ASSERT_GE(p.byte, 0);
        ASSERT_LT(p.byte, weight_bytes(k, rows, cols));
        EXPECT_TRUE(seen.insert({p.byte, p.high}).second) << r << " " << c;
        const RowCol rc = source(k, p.byte, p.high, cols);
        ASSERT_EQ(rc.row, r);
        ASSERT_EQ(rc.col, c);
      }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), padded_rows(rows) * cols);
  }
  // A (64-row tile, k-chunk) is one contiguous block: 2 KB int4, 4 KB int8.
  for (Kind k : {Kind::int4, Kind::int8}) {
    std::set<int64_t> blocks;
    for (int r = 64; r < 128; ++r)
      for (int c = 128; c < 192; ++c) blocks.insert(place(k, r, c, 256).byte / block_bytes(k));
    EXPECT_EQ(blocks.size(), 1u);
    EXPECT_EQ(*blocks.begin(), block_index(0, 2, 1, 4));
  }
}

struct Int4Matrix {
  int64_t rows, cols;
  int group;
  std::vector<uint8_t> codes;  // [rows, cols], one a byte
  std::vector<uint8_t> q;      // canonical: [rows, cols / 2]
  std::vector<uint16_t> scales;
  std::vector<uint8_t> zeros;
};

Int4Matrix random_int4(int64_t rows, int64_t cols, int group, bool pow2_scales, std::mt19937& rng) {
  Int4Matrix m{rows, cols, group, {}, {}, {}, {}};
  const int64_t groups = group_count(cols, group);
  m.codes.resize(rows * cols);
  m.q.assign(rows * cols / 2, 0);
  for (int64_t i = 0; i < rows * cols; ++i) {
    m.codes[i] = static_cast<uint8_t>(rng() % 16);
    m.q[i / 2] = static_cast<uint8_t>(m.q[i / 2] | m.codes[i] << (4 * (i % 2)));
  }
  for (int64_t i = 0; i < rows * groups; ++i) {
    const float s = pow2_scales ? std::ldexp(1.f, static_cast<int>(rng() % 3) - 1)
                                : std::ldexp(1.f + static_cast<float>(rng() % 1024) / 1024.f, -9);
    m.scales.push_back(db::f32_to_f16(s));
    m.zeros.push_back(static_cast<uint8_t>(rng() % 16));
  }
  return m;
}

uint32_t word_at(const std::vector<uint8_t>& v, int64_t at) {
  return v[at] | v[at + 1] << 8 | v[at + 2] << 16 | static_cast<uint32_t>(v[at + 3]) << 24;
}

TEST(MixedWgmmaLayout, AThreadsWordsAreItsFragmentsThroughTheExtraction) {
  std::mt19937 rng(5);
  const Int4Matrix m = random_int4(200, 256, 128, false, rng);
  std::vector<uint8_t> w(weight_bytes(Kind::int4, m.rows, m.cols)), meta(meta_bytes(m.rows, 2));
  pack_int4(m.q.data(), m.scales.data(), m.zeros.data(), m.rows, m.cols, m.group, w.data(), meta.data());
  std::vector<int8_t> q8(m.rows * m.cols);
  for (auto& v : q8) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  const std::vector<uint16_t> s8(m.rows, db::f32_to_f16(1.f));
  std::vector<uint8_t> w8(weight_bytes(Kind::int8, m.rows, m.cols)), meta8(meta_bytes(m.rows, 1));
  pack_int8(q8.data(), s8.data(), m.rows, m.cols, w8.data(), meta8.data());
  const int64_t chunks = m.cols / kChunk;
  for (int64_t rt = 0; rt < row_tiles(m.rows); ++rt)
    for (int64_t kc = 0; kc < chunks; ++kc)
      for (int h = 0; h < 2; ++h)
        for (int t = 0; t < 128; ++t)
          for (int s = 0; s < kSteps; ++s) {
            const int64_t b4 = block_index(rt, kc, h, chunks) * 2048 + 16 * t + 4 * s;
            const int64_t b8 = block_index(rt, kc, h, chunks) * 4096 + (s / 2) * 2048 + 16 * t + 8 * (s % 2);
            for (int r = 0; r < 4; ++r) {
              const uint32_t v4 = int4_raw_register(word_at(w, b4), r);
              const uint32_t v8 = int8_raw_register(word_at(w8, b8), word_at(w8, b8 + 4), r);
              for (int e = 0; e < 2; ++e) {
                const int i = 2 * r + e;  // the fragment's element
                const int64_t row = rt * kCtaRows + h * kTileRows + wg::a_row(t, i);
                const int64_t col = kc * kChunk + 16 * s + wg::a_col(t, i);
                const int q = row < m.rows ? m.codes[row * m.cols + col] : 0;
                // Registers 1 and 3 (rows g + 8) hold 1024 + 16 q, the others 1024 + q.
                EXPECT_EQ(f16(e ? hi16(v4) : lo16(v4)), 1024.f + (r % 2 ? 16.f : 1.f) * q)
                    << row << " " << col << " thread " << t << " step " << s << " element " << i;
                const int q8v = row < m.rows ? q8[row * m.cols + col] : 0;
                EXPECT_EQ(f16(e ? hi16(v8) : lo16(v8)), 1024.f + 128.f + q8v) << row << " " << col;
              }
            }
          }
}

TEST(MixedWgmmaLayout, AThreadsMetaEntryHoldsItsRows) {
  // Thread t of consumer h reads entry 32 h + t / 4: its rows a_row(t, 0) (lo) and a_row(t, 2)
  // (hi) of the consumer's 64.
  const int64_t groups = 3;
  for (int64_t gi = 0; gi < groups; ++gi)
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < 128; ++t) {
        const int64_t rt = 2;
        const int64_t entry = (rt * groups + gi) * kMetaBytes + (32 * h + t / 4) * kMetaEntryBytes;
        const MetaPlace lo = meta_place(rt * kCtaRows + 64 * h + wg::a_row(t, 0), gi, groups);
        const MetaPlace hi = meta_place(rt * kCtaRows + 64 * h + wg::a_row(t, 2), gi, groups);
        EXPECT_EQ(lo.byte, entry);
        EXPECT_EQ(lo.hi, 0);
        EXPECT_EQ(hi.byte, entry);
        EXPECT_EQ(hi.hi, 1);
      }
}

// fp16 arithmetic as the kernel's HSUB2 / HFMA2 / HMUL2 round it (to nearest even): the exact
// result rounded once. Inputs here are such that a float (or double, for the FMA) holds the
// exact result, so one rounding to fp16 is the hardware's.
uint16_t hsub(uint16_t a, uint16_t b) {
  return db::f32_to_f16(f16(a) - f16(b));
}
uint16_t hfma(uint16_t a, uint16_t b, uint16_t c) {
  return db::f32_to_f16(static_cast<float>(static_cast<double>(f16(a)) * f16(b) + f16(c)));
}
uint16_t hmul(uint16_t a, uint16_t b) {
  return db::f32_to_f16(f16(a) * f16(b));
}

// The kernel's dequantization of register r of a k16 step's A fragment, half e, from the raw
// register and the thread's meta entry (words: scales, zero constants).
uint16_t dequant_half(Kind k, uint32_t raw, int r, int e, uint32_t scales, uint32_t zcs) {
  const uint16_t v = e ? hi16(raw) : lo16(raw);
  const uint16_t s = r % 2 ? hi16(scales) : lo16(scales), z = r % 2 ? hi16(zcs) : lo16(zcs);
  if (k == Kind::int4 && r % 2) return hmul(hfma(v, db::f32_to_f16(1.f / 16), z), s);
  return hmul(hsub(v, z), s);
}

// One CTA tile (128 rows, both consumers) over one k-chunk at N = 8 sequences, every thread's
// four wgmma steps emulated from the packed bytes and a TMA-swizzled X tile read through the B
// descriptor, against the direct product of the canonical weights: equal exactly (integer codes,
// power-of-two scales, integer x: every sum is an exact integer). With arbitrary fp16 scales each
// dequantized weight equals fp16((q - z) s), the value kernels/weights.cu's dequantize_to_f16
// writes.
void emulate_chunk(Kind k, bool zero_point, int group, bool pow2_scales) {
  std::mt19937 rng(17 + static_cast<int>(k) + 2 * zero_point + group);
  const int64_t rows = 200, cols = 256;  // rows 128-199 real in tile 1, 200-255 padding
  const int n = 8;
  Int4Matrix m = random_int4(rows, cols, k == Kind::int8 ? 0 : group, pow2_scales, rng);
  if (!zero_point) m.zeros.assign(m.zeros.size(), 8);
  std::vector<int8_t> q8(rows * cols);
  for (auto& v : q8) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  const int64_t groups = k == Kind::int8 ? 1 : group_count(cols, group);
  std::vector<uint8_t> w(weight_bytes(k, rows, cols)), meta(meta_bytes(rows, groups));
  if (k == Kind::int4)
    pack_int4(m.q.data(), m.scales.data(), zero_point ? m.zeros.data() : nullptr, rows, cols, group, w.data(),
              meta.data());
  else
    pack_int8(q8.data(), m.scales.data(), rows, cols, w.data(), meta.data());
  auto weight = [&](int64_t r, int64_t c) -> uint16_t {  // the canonical dequantization
    if (r >= rows) return 0;
    const int64_t g = k == Kind::int8 ? r : r * groups + c / (cols / groups);
    const float d = k == Kind::int8 ? q8[r * cols + c] : m.codes[r * cols + c] - m.zeros[g];
    return db::f32_to_f16(d * f16(m.scales[g]));
  };
  std::vector<int> x(n * cols);
  for (int& v : x) v = static_cast<int>(rng() % 5) - 2;

  const int64_t chunks = cols / kChunk;
  for (int64_t rt = 0; rt < row_tiles(rows); ++rt)
    for (int64_t kc = 0; kc < chunks; ++kc) {
      // The X tile as TMA leaves it in shared memory (n rows of 64 fp16, 128-byte swizzle), and
      // the B operand of step s as wgmma reads it through the descriptor.
      std::vector<uint16_t> tile(n * 64);
      for (int r = 0; r < n; ++r)
        for (int c = 0; c < 64; ++c)
          tile[wg::tma_sw128_offset(r, 2 * c) / 2] =
              db::f32_to_f16(static_cast<float>(x[r * cols + kc * 64 + c]));
      const uint64_t desc = wg::kmajor_sw128_desc(0);
      const int64_t gi = kc / chunks_per_group(cols, k == Kind::int8 ? 0 : group);
      for (int h = 0; h < 2; ++h) {
        double d[64][8] = {};
        for (int t = 0; t < 128; ++t) {
          const int64_t entry = (rt * groups + gi) * kMetaBytes + (32 * h + t / 4) * kMetaEntryBytes;
          const uint32_t scales = word_at(meta, entry), zcs = word_at(meta, entry + 4);
          const int64_t blk = block_index(rt, kc, h, chunks) * block_bytes(k);
          for (int s = 0; s < kSteps; ++s) {
            uint32_t raw[4];
            for (int r = 0; r < 4; ++r)
              raw[r] = k == Kind::int4 ? int4_raw_register(word_at(w, blk + 16 * t + 4 * s), r)
                                       : int8_raw_register(
                                             word_at(w, blk + (s / 2) * 2048 + 16 * t + 8 * (s % 2)),
                                             word_at(w, blk + (s / 2) * 2048 + 16 * t + 8 * (s % 2) + 4), r);
            for (int i = 0; i < 8; ++i) {
              const uint16_t a = dequant_half(k, raw[i / 2], i / 2, i % 2, scales, zcs);
              const int row = wg::a_row(t, i), kk = wg::a_col(t, i);
              const int64_t grow = rt * kCtaRows + 64 * h + row, gcol = kc * 64 + 16 * s + kk;
              ASSERT_EQ(a, weight(grow, gcol)) << "row " << grow << " col " << gcol << " thread " << t;
              for (int j = 0; j < n; ++j) {
                const uint32_t at = wg::wgmma_kmajor_sw128_addr(desc + 2 * s, j, kk);
                d[row][j] += static_cast<double>(f16(a)) * f16(tile[at / 2]);
              }
            }
          }
        }
        if (!pow2_scales) continue;
        for (int row = 0; row < 64; ++row)
          for (int j = 0; j < n; ++j) {
            const int64_t grow = rt * kCtaRows + 64 * h + row;
            double direct = 0;
            for (int c = 0; c < 64; ++c)
              direct += static_cast<double>(f16(weight(grow, kc * 64 + c))) * x[j * cols + kc * 64 + c];
            ASSERT_EQ(d[row][j], direct) << "row " << grow << " sequence " << j << " chunk " << kc;
          }
      }
    }
}

TEST(MixedWgmmaLayout, ATilesWgmmasFromThePackedBytesEqualTheProductInt4) {
  emulate_chunk(Kind::int4, true, 128, true);
  emulate_chunk(Kind::int4, false, 64, true);
  emulate_chunk(Kind::int4, true, 0, true);  // a group a row
}

TEST(MixedWgmmaLayout, ATilesWgmmasFromThePackedBytesEqualTheProductInt8) {
  emulate_chunk(Kind::int8, false, 0, true);
}

TEST(MixedWgmmaLayout, DequantizedWeightsAreDequantizeToF16sBits) {
  emulate_chunk(Kind::int4, true, 128, false);
  emulate_chunk(Kind::int4, false, 64, false);
  emulate_chunk(Kind::int8, false, 0, false);
}

TEST(MixedWgmmaLayout, SupportsWholeChunksAndGroupsOfWholeChunks) {
  const char* why = nullptr;
  EXPECT_TRUE(supports(Kind::int4, 200, 4096, 128, &why));
  EXPECT_TRUE(supports(Kind::int4, 200, 4096, 64, &why));
  EXPECT_TRUE(supports(Kind::int4, 200, 4096, 0, &why));
  EXPECT_TRUE(supports(Kind::int4, 200, 4096, 4096, &why));
  EXPECT_TRUE(supports(Kind::int8, 1, 64, 0, &why));
  EXPECT_FALSE(supports(Kind::int4, 200, 4096, 32, &why));
  EXPECT_FALSE(supports(Kind::int4, 200, 4160, 128, &why));  // 65 chunks: not whole groups of 2
  EXPECT_FALSE(supports(Kind::int8, 200, 4100, 0, &why));
  EXPECT_EQ(chunks_per_group(4096, 128), 2);
  EXPECT_EQ(chunks_per_group(4096, 0), 64);
  EXPECT_EQ(group_count(4096, 0), 1);
  EXPECT_EQ(group_count(14336, 128), 112);
}

TEST(MixedWgmmaLayout, NTileIsTheBatchRoundedUpToAnInstance) {
  EXPECT_EQ(n_tile_for(1), 8);
  EXPECT_EQ(n_tile_for(8), 8);
  EXPECT_EQ(n_tile_for(9), 16);
  EXPECT_EQ(n_tile_for(65), 128);
  EXPECT_EQ(n_tile_for(256), 256);
  EXPECT_EQ(n_tile_for(300), 256);
}

TEST(MixedWgmmaLayout, UnitsCoverEveryTileAndChunkOnce) {
  for (int64_t rows : {200, 4100, 6144})
    for (int64_t batch : {1, 65, 300})
      for (int forced : {0, 1, 3, 7})
        for (int n_tile : {0, 64}) {
          const int64_t cols = 1024;
          const Plan p = make_plan(Kind::int4, rows, cols, batch, 132, forced, n_tile);
          EXPECT_EQ(p.n_tile, n_tile > 0 && batch > 64 ? 64 : n_tile_for(batch));
          ASSERT_GE(p.splits, 1);
          ASSERT_LE(p.splits, p.chunks);
          std::vector<int> covered(p.row_tiles * p.seq_tiles * p.chunks, 0);
          for (int64_t u = 0; u < p.units; ++u) {
            const Unit c = unit_coord(u, p.seq_tiles, p.splits);
            ASSERT_LT(c.rt, p.row_tiles);
            const KRange kr = split_range(c.split, p.splits, p.chunks);
            ASSERT_LT(kr.k0, kr.k1) << "an empty split";
            for (int64_t kc = kr.k0; kc < kr.k1; ++kc) ++covered[(c.rt * p.seq_tiles + c.st) * p.chunks + kc];
          }
          for (int v : covered) ASSERT_EQ(v, 1);
          EXPECT_EQ(p.grid, std::min<int64_t>(p.units, 132));
          EXPECT_EQ(p.seq_tiles * p.n_tile >= batch, true);
        }
}

TEST(MixedWgmmaLayout, SplitsFillTheSmsWhenTilesAreFewAndShrinkWithTheBatch) {
  // The 8b shapes at 132 SMs (one sequence tile): the split minimises split_cost, tiles filling
  // two waves are never split, and a matrix with fewer tiles than SMs is, less at 256 sequences
  // (its partials cost ~7 chunks) than at 16 (they cost a fraction of one).
  for (Kind k : {Kind::int4, Kind::int8})
    for (int64_t batch : {16, 256})
      for (auto [rows, cols] :
           {std::pair<int64_t, int64_t>{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}}) {
        const Plan p = make_plan(k, rows, cols, batch, 132);
        for (int s = 1; s <= kMaxSplits; ++s)
          EXPECT_LE(split_cost(k, p.n_tile, p.row_tiles, p.chunks, p.splits, 132),
                    split_cost(k, p.n_tile, p.row_tiles, p.chunks, s, 132));
        if (p.row_tiles < 132) {
          EXPECT_GT(p.splits, 1) << rows << "x" << cols;
        }
        if (p.row_tiles >= 264) {
          EXPECT_EQ(p.splits, 1);
        }
        EXPECT_LE(make_plan(k, rows, cols, 256, 132).splits, make_plan(k, rows, cols, 16, 132).splits);
      }
  EXPECT_EQ(make_plan(Kind::int4, 4096, 4096, 16, 132).splits, 4);   // 32 tiles: 128 units, one round
  EXPECT_EQ(make_plan(Kind::int4, 6144, 4096, 256, 132).splits, 2);  // 48 tiles: 96 units
  EXPECT_EQ(make_plan(Kind::int4, 65536, 4096, 16, 132).splits, 1);  // 512 tiles
  // Partials only with splits, after a counter region of fixed size.
  const Plan one = make_plan(Kind::int4, 65536, 4096, 16, 132),
             four = make_plan(Kind::int4, 4096, 4096, 16, 132);
  EXPECT_EQ(workspace_bytes(one), kCounterBytes);
  EXPECT_EQ(workspace_bytes(four), kCounterBytes + four.units * kCtaRows * 16 * 4);
  EXPECT_TRUE(counters_fit(four));
}

}  // namespace
