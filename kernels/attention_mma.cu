// Decode attention on the tensor cores (attention_mma.cuh), for caches long enough that the
// KV stream is the step's cost.
//
// Why: the one-block-a-chunk kernel (attention.cu) computes the scores, softmax and P V in
// fp32 on the CUDA cores, ~2,000 instructions a thread per 128 positions; at long context
// that arithmetic, not DRAM, bounds its KV stream (about half the read bandwidth). Here Q K^T
// and P V are mma.sync.m16n8k16 (fp16 in, fp32 accumulate) and a warp spends a few hundred
// instructions on 16 positions of a 128-wide head (8 KB of fp16 K and V).
//
// Grid: (kv heads, grid splits, batch), W warps a block: 12, one block an SM, where the GPU
// lets a block have their 160 to 210 KB of shared memory (the H200), else 4 (sm_86 / sm_89,
// the A100 for most shapes; attention_mma_choose_warps). As many blocks a kv head as the GPU
// holds at once: the grid is one wave (attention_mma_plan.h), so no block pays a second
// prologue and no SM idles behind a tail of short blocks; 12-warp blocks leave a third as
// many partials as 4-warp ones (3 an SM on the H200) for the last block to merge. Block
// `split` takes the contiguous range of positions the plan gives it at the run's `pos`;
// blocks past the active ones return at once.
//
// The new token's K and V and the queries are computed here, not by a kernel before: every
// block needs its queries right after its wait, and a kernel boundary costs ~2 us of stream.
//
// 1. Before pdl_wait (the cached rows below pos are written by earlier steps only, pdl.cuh):
//    each warp issues the cp.async copies of its first tile of 16 positions (K and V rows, and
//    the 8-bit schemes' scales) into a ring of kStages tiles of its own in shared memory; the
//    ring's other tiles follow after the wait, once the queries' operands are requested, so
//    that those loads do not queue in DRAM behind every block's whole ring. Warp w takes tiles
//    w, w + W, ... of the block's range; rows past the range and the row at pos are
//    zero-filled (no global read).
// 2. After the wait: the group's queries (bias, q norm, RoPE, times log2(e) / sqrt(hd)) to
//    fp16 in shared memory, rows past the group zero: the A operand, rows = query heads. The
//    block holding pos also computes the new K (bias, k norm, RoPE) and V, stores them in the
//    cache as the scheme does (fp16, or codes with one float scale), and keeps the stored
//    form for its ring. One warp a vector, as in attention.cu.
// 3. Each warp walks its tiles, a tile's copies waited for by that warp alone (no block
//    barrier in the loop), the next tile's copies issued as a buffer frees up:
//      S = Q K^T: K [key][dim] as it lies is the "col" B operand, ldmatrix without .trans;
//      online softmax in base 2 per query row, across the quad of lanes holding a row, the
//      output accumulators rescaled only in tiles where some row's max grew;
//      P V: the score accumulators of the tile's two 8-key halves, rounded to fp16, are the
//      A operand as they lie; V [key][dim] through ldmatrix.trans is the B operand.
//    The row at pos is patched into its tile from the step's own K and V before use.
// 4. The warps' (max, sum, output) merge through shared memory; with one active block that
//    is the output, else the block writes its partial (attention.cuh's part_o / part_ml
//    layout, max in natural-log units) and the last block of the kv head to finish (a
//    counter, as in attention.cu) merges all of them by log-sum-exp in one pass, in the
//    blocks' order, kMergeBatch partials' loads in flight at a time, and resets the counter.
//
// 8-bit caches (fp8 E4M3, int8): the codes convert exactly to fp16 (E4M3 values and
// -127..127 are fp16 values), so the mmas run on codes converted in registers, not on
// dequantized copies. A key's K scale multiplies its score column (fp32) after Q K^T. The V
// scales are not applied to P's columns: P times an fp8 scale (amax / 448) lands in fp16's
// subnormals for most keys of a long cache, where it loses up to all of its bits. Instead a
// key's V codes are multiplied (hmul2) by its scale as a fraction of the largest scale the
// warp has met, and the output accumulators count in units of that largest scale, converted
// with the softmax's rescaling when it grows and to values at the end: every factor in fp16
// is at most 1 and normal. The byte tiles are read by the same ldmatrix instructions as 16-bit pairs:
//   K: a lane gets 4 consecutive codes (dims 4c..4c+3) of its key; the k index of the mma is
//      permuted to match (the query fragments are loaded in the same order), dot products
//      being indifferent to the order of their terms;
//   V: ldmatrix.trans gives a lane the codes of keys 2c, 2c + 1 at dims 2g, 2g + 1; one
//      byte permute makes the even dims' pair and another the odd dims', each the B operand
//      of its own mma, so a lane's accumulators hold dims 4c..4c+3 of a 16-dim block.
#include "attention_mma.cuh"

#include <algorithm>

#include "common.cuh"
#include "decodebench/kv_quant.h"
#include "norm_rope.cuh"
#include "pdl.cuh"

namespace db::cuda {
namespace {

constexpr int kTile = kAttentionMmaTile;      // positions a warp takes at a time: one k-step of P V
constexpr int kMergeBatch = 16;               // the merge's partials a thread loads at once
constexpr int kRows = kAttentionMmaMaxGroup;  // mma's 16 rows: the group's query heads, then zeros
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// The kernel's warps a block are its template argument W, 4 or 12 (attention_mma_choose_warps);
// its registers are sized for kMinBlocks<W> blocks an SM: 3 of 4 warps, 1 of 12.
template <int W>
constexpr int kMinBlocks = std::max(1, 12 / W);

// A warp's ring: kStages stages, each a tile's K rows, V rows and (8-bit schemes) their
// scales. Rows padded by 16 bytes: a row is an odd number of 16-byte units, so the 8 rows an
// ldmatrix phase reads start in 8 different bank groups. A block's ring takes 16 KB a warp
// (kBudget), all of it in flight while the warps wait: 3 blocks of 4 warps, or 1 of 12, keep
// ~200 KB in flight on an H200 SM, several times what its latency needs at full bandwidth; a
// block of 4 warps fits the 99 KB an sm_86 / sm_89 block may have.
template <int HD, KvScheme KV, int W>
struct Ring {
  static constexpr int kBudget = 16 * 1024 * W;
  static constexpr bool kCodes = KV != KvScheme::fp16;
  static constexpr int kElem = kCodes ? 1 : 2;            // bytes an element
  static constexpr int kPieces = HD * kElem / 16;         // 16-byte pieces of a row
  static constexpr int kRowBytes = HD * kElem + 16;       // a row in shared memory
  static constexpr int kScales = kCodes ? 2 * kTile : 0;  // floats: the tile's K scales, then V's
  static constexpr int kStageBytes = 2 * kTile * kRowBytes + 4 * kScales;
  static constexpr int kStages = std::clamp(kBudget / W / kStageBytes, 2, 8);
  static constexpr int kBytes = W * kStages * kStageBytes;
  static_assert(kBytes >= 4 * (W * kRows * HD + W * kRows * 2), "the warps' merge fits the ring");
  static_assert(kBytes >= 24 * W * kWarp, "the merge's float4 and float2 a thread fit the ring");
};

// How a warp's lanes copy a tile's rows (the issue lambda of the kernel): kLanesRow lanes a
// row, a lane taking kPiecesLane 16-byte pieces of it kLanesRow pieces apart (the last ones
// absent where a row's pieces are not a multiple of kLanesRow: kRagged), kRowsRound rows a
// round of the warp and kRounds rounds a tile. With 8 lanes a row a round reads 128
// contiguous bytes of each of its rows.
template <int HD, KvScheme KV>
struct Copies {
  static constexpr int kPieces = Ring<HD, KV, 4>::kPieces;
  static constexpr int kLanesRow = kPieces >= 8 ? 8 : kPieces >= 4 ? 4 : 2;
  static constexpr int kPiecesLane = (kPieces + kLanesRow - 1) / kLanesRow;
  static constexpr bool kRagged = kPieces % kLanesRow != 0;
  static constexpr int kRowsRound = kWarp / kLanesRow;
  static constexpr int kRounds = kTile / kRowsRound;
  static_assert(kTile % kRowsRound == 0, "a tile's rows are whole rounds of the warp");
};

// 2^x by the SFU alone: results below 2^-126 flush to zero, which a softmax weight can lose.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// 16 bytes global -> shared, or 16 zeros without reading global memory when !valid.
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem), "r"(n) : "memory");
}

// The same for 4 bytes (a scale).
__device__ __forceinline__ void cp_async4_zfill(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(gmem), "r"(n) : "memory");
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// (M, L, acc) <- their log-sum-exp merge with a partial of max p.x (natural log), sum p.y and
// outputs o; M is finite after (p.x is).
__device__ __forceinline__ void merge_partial(float& M, float& L, float4& acc, float2 p, float4 o) {
  const float M2 = fmaxf(M, p.x), c_old = expf(M - M2), c_new = expf(p.x - M2);
  L = L * c_old + p.y * c_new;
  acc.x = acc.x * c_old + o.x * c_new;
  acc.y = acc.y * c_old + o.y * c_new;
  acc.z = acc.z * c_old + o.z * c_new;
  acc.w = acc.w * c_old + o.w * c_new;
  M = M2;
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  return h2_bits(__floats2half2_rn(lo, hi));
}

// Two bytes of `x`, selected by a byte permute (the low one the low half), as the fp16 values
// of their codes: E4M3 by one conversion; int8 as 1024 + 128 + code (exponent byte 0x64 over
// the biased byte) minus 1152, exact.
template <KvScheme KV>
__device__ __forceinline__ uint32_t codes_to_half2(uint32_t x, unsigned lo_byte, unsigned hi_byte) {
  if constexpr (KV == KvScheme::fp8) {
    return h2_bits(fp8x2_to_half2(__byte_perm(x, 0u, lo_byte | (hi_byte << 4))));
  } else {
    const uint32_t biased =
        __byte_perm(x ^ 0x80808080u, 0x6464u, lo_byte | (4u << 4) | (hi_byte << 8) | (5u << 12));
    return h2_bits(__hsub2(bits_h2(biased), __float2half2_rn(1152.f)));
  }
}

// Sequence blockIdx.z of a batch: its slices of qkv, of the caches (the scheme's bytes of
// rope_positions rows each), of the partials, the counters and the output.
template <int HD, KvScheme KV>
__device__ __forceinline__ void select_sequence(AttentionArgs& a) {
  const int64_t z = blockIdx.z;
  const int64_t q_dim = int64_t{a.heads} * HD, kv_dim = int64_t{a.kv_heads} * HD;
  const int64_t cache = static_cast<int64_t>(kvq::sequence_bytes(KV, a.rope_positions, a.kv_heads, HD));
  a.qkv += z * (q_dim + 2 * kv_dim);
  a.k_cache = reinterpret_cast<__half*>(reinterpret_cast<unsigned char*>(a.k_cache) + z * cache);
  a.v_cache = reinterpret_cast<__half*>(reinterpret_cast<unsigned char*>(a.v_cache) + z * cache);
  a.part_o += z * a.heads * a.max_splits * HD;
  a.part_ml += z * a.heads * a.max_splits * 2;
  a.counters += z * a.kv_heads;
  a.out += z * q_dim;
}

// The output dim of accumulator element e of 8-column tile nt for the lane of quad column c
// (rows g for e < 2, g + 8 after): the mma's own for fp16; for codes, tile nt = 2 b + parity
// holds the parity's dims of 16-dim block b, its column n standing for dim 16 b + 2 n + parity.
template <bool CODES>
__device__ __forceinline__ int out_dim(int nt, int e, int c) {
  const int n = 2 * c + (e & 1);
  if constexpr (CODES)
    return 16 * (nt / 2) + 2 * n + (nt & 1);
  else
    return 8 * nt + n;
}

// The lab's timeline of a launch: tests/bench/attention_trace.cu compiles this file with
// DB_ATTENTION_MMA_TRACE, and thread 0 of each block records the global timer at its phases
// (and its SM, and warp 0's tiles) in g_attention_trace, 8 words a block. Nothing otherwise.
#ifdef DB_ATTENTION_MMA_TRACE
__device__ unsigned long long* g_attention_trace;
__device__ __forceinline__ void trace(int slot, unsigned long long value) {
  if (threadIdx.x != 0 || g_attention_trace == nullptr) return;
  const uint64_t b = (uint64_t{blockIdx.z} * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  g_attention_trace[8 * b + slot] = value;
}
__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#define DB_TRACE(slot, value) trace(slot, value)
#else
#define DB_TRACE(slot, value) ((void)0)
#endif

template <int HD, KvScheme KV, int W>
__global__ void __launch_bounds__(W* kWarp, kMinBlocks<W>) attention_mma_kernel(AttentionArgs a) {
  using R = Ring<HD, KV, W>;
  constexpr int kThreads = W * kWarp;
  constexpr bool kCodes = R::kCodes;
  constexpr int E = HD / kWarp;  // elements a lane of the prologue's warps
  constexpr int KS = HD / 16;    // k-steps of Q K^T
  constexpr int NT = HD / 8;     // 8-column tiles of the output
  static_assert(HD % 32 == 0 && HD <= 128, "head size: a multiple of 32 up to 128");
  extern __shared__ __align__(16) unsigned char ring[];
  __shared__ __align__(16) __half q_s[kRows][HD + 8];         // padded: the fragment loads' 8 rows in 8 banks
  __shared__ __align__(16) unsigned char new_row[2][HD * 2];  // the new K and V as the cache holds them
  __shared__ float new_scale[2];
  __shared__ bool last;
  DB_TRACE(0, now());
#ifdef DB_ATTENTION_MMA_TRACE
  {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    DB_TRACE(7, sm);
  }
#endif

  if (blockIdx.z > 0) select_sequence<HD, KV>(a);
  // pos and the cached rows below it are written by earlier steps only (pdl.cuh): read before
  // the wait, so that the first tiles load under the QKV GEMV's tail.
  const int pos = __ldcg(a.pos);
  const int64_t keys = int64_t{pos} + 1;
  const int active = attention_mma_active_splits(keys, static_cast<int>(gridDim.y), W);
  const int split = blockIdx.y;
  if (split >= active) return;
  const int64_t start = attention_mma_split_start(keys, active, split);
  const int64_t end = attention_mma_split_start(keys, active, split + 1);
  const bool owns_pos = end == keys;
  const int G = a.heads / a.kv_heads, kvh = blockIdx.x;
  const int64_t kv_dim = int64_t{a.kv_heads} * HD, q_dim = int64_t{a.heads} * HD;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, c = lane % 4;

  const unsigned char* kc = reinterpret_cast<const unsigned char*>(a.k_cache);
  const unsigned char* vc = reinterpret_cast<const unsigned char*>(a.v_cache);
  // The 8-bit schemes' scales: [rope_positions, kv_heads] floats after the codes.
  const float* k_scales = reinterpret_cast<const float*>(kc + a.rope_positions * kv_dim);
  const float* v_scales = reinterpret_cast<const float*>(vc + a.rope_positions * kv_dim);

  // 1. The warp's first tiles, in flight before the wait. A lane copies the 16-byte pieces
  //    cr, cr + kLanesRow, ... of rows r0, r0 + kRowsRound, ... of a tile (Copies): every
  //    offset but the tile's first row is a compile-time constant or one add a row group, and
  //    a round of the warp still reads whole 128-byte lines. Rows at and past `lim` are zero
  //    (end, or pos, whose row is patched in from the step's own K and V).
  using C = Copies<HD, KV>;
  const int tiles = static_cast<int>((end - start + kTile - 1) / kTile);
  const int mine = tiles > warp ? (tiles - warp + W - 1) / W : 0;
  unsigned char* wring = ring + warp * R::kStages * R::kStageBytes;
  const auto tile_key0 = [&](int i) { return start + int64_t{warp + i * W} * kTile; };
  const int64_t lim = owns_pos ? pos : end;
  const int64_t row_stride = kv_dim * R::kElem;  // bytes from one position's row to the next
  const int cr = lane % C::kLanesRow, r0 = lane / C::kLanesRow;
  const int64_t lane_off = (int64_t{kvh} * HD) * R::kElem + int64_t{r0} * row_stride + 16 * cr;
  const unsigned char* kl = kc + lane_off;  // the lane's first piece of position 0
  const unsigned char* vl = vc + lane_off;
  const int smem_lane = r0 * R::kRowBytes + 16 * cr;
  // The 8-bit schemes' scales: lanes 0..15 the tile's K scales, 16..31 its V scales.
  const float* scale_lane = (lane < kTile ? k_scales : v_scales) + int64_t{lane % kTile} * a.kv_heads + kvh;
  const auto issue = [&](int i) {
    if (i < mine) {
      const int64_t key0 = tile_key0(i);
      const int rows = static_cast<int>(std::min<int64_t>(lim - key0, kTile));  // rows to read
      unsigned char* st = wring + (i % R::kStages) * R::kStageBytes;
      const int64_t tile_off = key0 * row_stride;
#pragma unroll
      for (int g = 0; g < C::kRounds; ++g) {
        const bool ok = r0 + g * C::kRowsRound < rows;
        const int64_t off = ok ? tile_off + g * C::kRowsRound * row_stride : 0;
        unsigned char* dst = st + smem_lane + g * C::kRowsRound * R::kRowBytes;
#pragma unroll
        for (int m = 0; m < C::kPiecesLane; ++m) {
          if (C::kRagged && cr + m * C::kLanesRow >= R::kPieces) continue;
          cp_async16_zfill(dst + 16 * C::kLanesRow * m, kl + off + 16 * C::kLanesRow * m, ok);
          cp_async16_zfill(dst + kTile * R::kRowBytes + 16 * C::kLanesRow * m,
                           vl + off + 16 * C::kLanesRow * m, ok);
        }
      }
      if constexpr (kCodes) {
        const bool ok = lane % kTile < rows;
        cp_async4_zfill(st + 2 * kTile * R::kRowBytes + 4 * lane, scale_lane + (ok ? key0 * a.kv_heads : 0),
                        ok);
      }
    }
    cp_async_commit();  // an empty group past the warp's tiles keeps the wait counts uniform
  };
  issue(0);
  pdl_wait();  // pdl.cuh: qkv and the counters
  DB_TRACE(1, now());

  // 2. The queries and, in the block holding pos, the new K and V. Items: queries 0..G-1, the
  //    new K (G), the new V (G + 1); warp w takes items w, w + W, ..., every operand loaded up
  //    front so that the block pays one memory round trip here.
  {
    constexpr int kMaxItems = (kRows + 2 + W - 1) / W;
    const int items = G + (owns_pos ? 2 : 0);
    const float* cosp = a.rope + int64_t{pos} * (HD / 2);
    const float* sinp = a.rope + (a.rope_positions + pos) * (HD / 2);
    const float qscale = rsqrtf(static_cast<float>(HD)) * kLog2e;  // scores in base 2
    float cosv[E], sinv[E], qn[E], kn[E];
    lane_rope_operands<HD>(cosp, sinp, a.q_norm, a.k_norm, lane, cosv, sinv, qn, kn);
    float v[kMaxItems][E];
#pragma unroll
    for (int it = 0; it < kMaxItems; ++it) {
      const int item = warp + it * W;
      const int64_t off = item < G ? (kvh * G + item) * int64_t{HD} : q_dim + (item - G) * kv_dim + kvh * HD;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int64_t i = off + lane * E + e;
        v[it][e] = item < items ? a.qkv[i] + (a.qkv_bias ? __half2float(a.qkv_bias[i]) : 0.f) : 0.f;
      }
    }
    // The ring's other tiles, behind these operands' loads rather than ahead of them.
#pragma unroll
    for (int i = 1; i < R::kStages; ++i) issue(i);
#pragma unroll
    for (int it = 0; it < kMaxItems; ++it) {
      const int item = warp + it * W;
      if (item >= items) break;
      if (item <= G) {  // a query or the new K: norm and RoPE
        const bool is_k = item == G;
        float nw[E];
#pragma unroll
        for (int e = 0; e < E; ++e) nw[e] = is_k ? kn[e] : qn[e];
        norm_rope_warp<HD>(v[it], nw, is_k ? a.k_norm != nullptr : a.q_norm != nullptr, a.eps, cosv, sinv,
                           lane);
      }
      if (item < G) {
#pragma unroll
        for (int e = 0; e < E; ++e) q_s[item][lane * E + e] = __float2half_rn(v[it][e] * qscale);
        continue;
      }
      // The new K (kv 0) or V (kv 1), stored as the scheme stores it: in the cache at pos and
      // in new_row for this block's own tile.
      const int kv = item - G;
      unsigned char* cache = reinterpret_cast<unsigned char*>(kv == 0 ? a.k_cache : a.v_cache);
      const int64_t row = int64_t{pos} * kv_dim + kvh * HD + lane * E;
      if constexpr (kCodes) {
        float amax = 0.f;
#pragma unroll
        for (int e = 0; e < E; ++e) amax = fmaxf(amax, fabsf(v[it][e]));
        const float scale = kvq::scale_of(warp_max(amax), KV);
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const uint8_t q = kvq::quantize(v[it][e], scale, KV);
          cache[row + e] = q;
          new_row[kv][lane * E + e] = q;
        }
        if (lane == 0) {
          reinterpret_cast<float*>(cache + a.rope_positions * kv_dim)[int64_t{pos} * a.kv_heads + kvh] =
              scale;
          new_scale[kv] = scale;
        }
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const __half h = __float2half_rn(v[it][e]);
          reinterpret_cast<__half*>(cache)[row + e] = h;
          reinterpret_cast<__half*>(new_row[kv])[lane * E + e] = h;
        }
      }
    }
    for (int e = threadIdx.x; e < (kRows - G) * HD; e += kThreads)
      q_s[G + e / HD][e % HD] = __float2half_rn(0.f);
  }
  __syncthreads();  // q_s and new_row are visible to every warp
  DB_TRACE(2, now());
  DB_TRACE(6, mine);

  // The A fragments of Q (rows g and g + 8, the mma's k order; for codes the k index 2c,
  // 2c + 1, 2c + 8, 2c + 9 stands for dims 4c..4c+3 of the k-step, as the K codes arrive).
  uint32_t qf[KS][4];
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    const int c0 = kCodes ? 16 * kk + 4 * c : 16 * kk + 2 * c;
    const int c1 = kCodes ? c0 + 2 : c0 + 8;
    qf[kk][0] = *reinterpret_cast<const uint32_t*>(&q_s[g][c0]);
    qf[kk][1] = *reinterpret_cast<const uint32_t*>(&q_s[g + 8][c0]);
    qf[kk][2] = *reinterpret_cast<const uint32_t*>(&q_s[g][c1]);
    qf[kk][3] = *reinterpret_cast<const uint32_t*>(&q_s[g + 8][c1]);
  }

  // 3. The warp's tiles. Rows g (accumulator elements 0, 1) and g + 8 (2, 3); a row's 16
  //    scores of a tile lie in the 4 lanes of a quad.
  float o[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // running max (base 2) and sum
  float v_unit = 0.f, v_inv = 0.f;  // codes: the V scale o is counted in (the largest met), its inverse
  // The ldmatrix row and byte column of this lane's address: 8-key half (lane >> 3) & 1, and
  // for the codes' K and V and the fp16 V the column half lane >> 4; the fp16 K's x4 takes
  // two 8-key halves of one k-step instead.
  const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8;
  for (int i = 0; i < mine; ++i) {
    cp_async_wait<R::kStages - 1>();  // this warp's copies of tile i have landed
    __syncwarp();                     // ... and every lane's are visible to the warp
    unsigned char* st = wring + (i % R::kStages) * R::kStageBytes;
    const unsigned char* kt = st;
    const unsigned char* vt = st + kTile * R::kRowBytes;
    float* scales = reinterpret_cast<float*>(st + 2 * kTile * R::kRowBytes);  // codes: K's, then V's
    const int64_t key0 = tile_key0(i);
    if (owns_pos && pos >= key0 && pos < key0 + kTile) {  // the new K and V into their row
      const int r = static_cast<int>(pos - key0);
      for (int e = lane; e < 2 * R::kPieces; e += kWarp) {
        const int kv = e / R::kPieces, p = e % R::kPieces;
        *reinterpret_cast<uint4*>(st + (kv * kTile + r) * R::kRowBytes + 16 * p) =
            *reinterpret_cast<const uint4*>(&new_row[kv][16 * p]);
      }
      if constexpr (kCodes)
        if (lane < 2) scales[lane * kTile + r] = new_scale[lane];
      __syncwarp();
    }

    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    if constexpr (!kCodes) {
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        uint32_t b[4];
        ldmatrix_x4(
            b, kt + ((lane & 7) + ((lane >> 4) << 3)) * R::kRowBytes + 2 * (16 * kk + ((lane >> 3) & 1) * 8));
        mma16816(s[0], qf[kk], b[0], b[1]);
        mma16816(s[1], qf[kk], b[2], b[3]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < HD / 32; ++j) {  // k-steps 2j and 2j + 1
        uint32_t b[4];                     // keys 0-7 | 8-15 of k-step 2j, then of 2j + 1
        ldmatrix_x4(b, kt + lrow * R::kRowBytes + 32 * j + (lane >> 4) * 16);
#pragma unroll
        for (int q = 0; q < 4; ++q)
          mma16816(s[q & 1], qf[2 * j + q / 2], codes_to_half2<KV>(b[q], 0, 1),
                   codes_to_half2<KV>(b[q], 2, 3));
      }
      const float2 k0 = *reinterpret_cast<const float2*>(scales + 2 * c);
      const float2 k1 = *reinterpret_cast<const float2*>(scales + 8 + 2 * c);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        s[0][2 * r] *= k0.x;
        s[0][2 * r + 1] *= k0.y;
        s[1][2 * r] *= k1.x;
        s[1][2 * r + 1] *= k1.y;
      }
    }
    if (key0 + kTile > end) {  // the block's last tile: positions past its range
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (key0 + 8 * n + 2 * c + (e & 1) >= end) s[n][e] = -INFINITY;
    }
    // The codes' V scales: this lane's keys' (2c, 2c + 1, 8 + 2c, 9 + 2c) as fractions of the
    // largest the warp has met (v_unit), in fp16 (normal numbers for scales within 2^14 of
    // it); the output accumulators are held in units of v_unit, rescaled when it grows.
    __half2 vs0 = __float2half2_rn(1.f), vs1 = vs0;
    float o_units = 1.f;  // the factor the accumulators take for a new unit
    if constexpr (kCodes) {
      const float2 v0 = *reinterpret_cast<const float2*>(scales + kTile + 2 * c);
      const float2 v1 = *reinterpret_cast<const float2*>(scales + kTile + 8 + 2 * c);
      float top = fmaxf(fmaxf(v0.x, v0.y), fmaxf(v1.x, v1.y));
      top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
      top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));  // the tile's largest; > 0 (a key in range)
      if (top > v_unit) {                                      // the same in every lane
        o_units = v_unit / top;  // 0 at the first tile, whose accumulators are 0
        v_unit = top;
        v_inv = 1.f / top;
      }
      vs0 = __floats2half2_rn(v0.x * v_inv, v0.y * v_inv);
      vs1 = __floats2half2_rn(v1.x * v_inv, v1.y * v_inv);
    }
    // Online softmax. The tile's first position is in range, so every row's max is finite.
    // The accumulators are rescaled only when a row's max or the unit moved in some lane
    // (rarely, past a block's first tiles): the factor is 1 otherwise.
    float corr[2];
    bool moved = o_units != 1.f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx);
      moved |= m_new > m[r];
      corr[r] = exp2_ftz(m[r] - m_new);  // 0 at the first tile (m = -inf)
      m[r] = m_new;
      l[r] *= corr[r];
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        s[n][2 * r] = exp2_ftz(s[n][2 * r] - m_new);
        s[n][2 * r + 1] = exp2_ftz(s[n][2 * r + 1] - m_new);
        l[r] += s[n][2 * r] + s[n][2 * r + 1];
      }
    }
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float o_corr = corr[r] * o_units;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          o[n][2 * r] *= o_corr;
          o[n][2 * r + 1] *= o_corr;
        }
      }
    }
    const uint32_t p[4] = {pack_half2(s[0][0], s[0][1]), pack_half2(s[0][2], s[0][3]),
                           pack_half2(s[1][0], s[1][1]), pack_half2(s[1][2], s[1][3])};
    if constexpr (!kCodes) {
#pragma unroll
      for (int dp = 0; dp < HD / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vt + lrow * R::kRowBytes + 2 * (16 * dp + (lane >> 4) * 8));
        mma16816(o[2 * dp], p, b[0], b[1]);
        mma16816(o[2 * dp + 1], p, b[2], b[3]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < HD / 32; ++j) {  // 16-dim blocks 2j and 2j + 1
        uint32_t b[4];                     // keys 0-7 | 8-15 of block 2j, then of block 2j + 1
        ldmatrix_x4_trans(b, vt + lrow * R::kRowBytes + 32 * j + (lane >> 4) * 16);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int blk = 2 * j + h;
          const uint32_t lo = b[2 * h], hi = b[2 * h + 1];
          const uint32_t even0 = h2_bits(__hmul2(bits_h2(codes_to_half2<KV>(lo, 0, 2)), vs0));
          const uint32_t even1 = h2_bits(__hmul2(bits_h2(codes_to_half2<KV>(hi, 0, 2)), vs1));
          const uint32_t odd0 = h2_bits(__hmul2(bits_h2(codes_to_half2<KV>(lo, 1, 3)), vs0));
          const uint32_t odd1 = h2_bits(__hmul2(bits_h2(codes_to_half2<KV>(hi, 1, 3)), vs1));
          mma16816(o[2 * blk], p, even0, even1);
          mma16816(o[2 * blk + 1], p, odd0, odd1);
        }
      }
    }
    __syncwarp();  // every lane is done with the stage before it is refilled
    issue(i + R::kStages);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  cp_async_wait<0>();  // only empty groups are left; the ring is reused below
  // The O GEMV may launch now (pdl.cuh): its early weight loads would only have competed with
  // the KV stream.
  pdl_trigger();
  __syncthreads();
  DB_TRACE(3, now());

  // 4. The warps' partials merged: ob [warp][row][HD], mlb [warp][row][2] in the ring.
  float* ob = reinterpret_cast<float*>(ring);
  float* mlb = ob + W * kRows * HD;
  const float unit = kCodes ? v_unit : 1.f;  // what the accumulators count in
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    if (row >= G) continue;
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      ob[(warp * kRows + row) * HD + out_dim<kCodes>(n, 2 * r, c)] = o[n][2 * r] * unit;
      ob[(warp * kRows + row) * HD + out_dim<kCodes>(n, 2 * r + 1, c)] = o[n][2 * r + 1] * unit;
    }
    if (c == 0) {
      mlb[(warp * kRows + row) * 2] = m[r];
      mlb[(warp * kRows + row) * 2 + 1] = l[r];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * HD; idx += kThreads) {
    const int row = idx / HD, i = idx % HD;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w) M = fmaxf(M, mlb[(w * kRows + row) * 2]);  // warp 0 has a tile
    float L = 0.f, O = 0.f;
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const float f = exp2f(mlb[(w * kRows + row) * 2] - M);  // 0 for a warp without tiles
      L += mlb[(w * kRows + row) * 2 + 1] * f;
      O += ob[(w * kRows + row) * HD + i] * f;
    }
    const int64_t h = int64_t{kvh} * G + row;
    if (active == 1) {
      a.out[h * HD + i] = __float2half_rn(O / L);
    } else {
      a.part_o[(h * a.max_splits + split) * HD + i] = O;
      if (i == 0) {
        a.part_ml[(h * a.max_splits + split) * 2] = M * kLn2;  // natural-log units, as attention.cu's
        a.part_ml[(h * a.max_splits + split) * 2 + 1] = L;
      }
    }
  }
  if (active == 1) return;

  // The last block of the kv head to finish merges every block's partial.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&a.counters[kvh], 1u) == static_cast<unsigned>(active - 1);
  __syncthreads();
  DB_TRACE(4, now());
  if (!last) return;
  __threadfence();
  // One pass over the partials by log-sum-exp, online: the output's float4 quads (Q a head),
  // J threads a quad taking every J-th partial, the loads of kMergeBatch partials' (max, sum)
  // and quads in flight together (a round trip a batch, not a partial: the merge is latency
  // bound); the J threads' (max, sum, quad) merged through shared memory.
  constexpr int Q = HD / 4;
  const int quads = G * Q;
  const int J = quads >= kThreads ? 1 : kThreads / quads;
  float4* red_o = reinterpret_cast<float4*>(ring);               // [J][quads]
  float2* red_ml = reinterpret_cast<float2*>(red_o + kThreads);  // [J][quads]
  for (int base = 0; base < quads; base += kThreads) {
    const int idx = base + (J > 1 ? threadIdx.x % quads : threadIdx.x), j = J > 1 ? threadIdx.x / quads : 0;
    const int row = idx / Q, q = idx % Q;
    const bool mine = idx < quads && j < J;
    const int64_t h = int64_t{kvh} * G + row;
    float M = -INFINITY, L = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (mine) {
      const float2* ml = reinterpret_cast<const float2*>(a.part_ml) + h * a.max_splits;
      const float4* po = reinterpret_cast<const float4*>(a.part_o + h * a.max_splits * HD) + q;
      for (int s0 = j; s0 < active; s0 += kMergeBatch * J) {
        float2 p[kMergeBatch];
        float4 v[kMergeBatch];
#pragma unroll
        for (int k = 0; k < kMergeBatch; ++k) {  // every load of the batch issued before any is used
          const int sp = s0 + k * J;
          p[k] = sp < active ? __ldcg(ml + sp) : make_float2(0.f, 0.f);
          v[k] = sp < active ? __ldcg(po + int64_t{sp} * Q) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int k = 0; k < kMergeBatch; ++k)  // every block's max is finite: its warp 0 had a tile
          if (s0 + k * J < active) merge_partial(M, L, acc, p[k], v[k]);
      }
    }
    if (J > 1) {
      if (mine) {
        red_o[j * quads + idx] = acc;
        red_ml[j * quads + idx] = make_float2(M, L);
      }
      __syncthreads();
      if (threadIdx.x >= quads) break;
      for (int jj = 1; jj < J && jj < active; ++jj)
        merge_partial(M, L, acc, red_ml[jj * quads + idx], red_o[jj * quads + idx]);
    }
    if (idx < quads) {
      const float inv = 1.f / L;
      __half2* out = reinterpret_cast<__half2*>(a.out + h * HD + 4 * q);
      out[0] = __floats2half2_rn(acc.x * inv, acc.y * inv);
      out[1] = __floats2half2_rn(acc.z * inv, acc.w * inv);
    }
  }
  if (threadIdx.x == 0) a.counters[kvh] = 0;  // ready for the next layer
  DB_TRACE(5, now());
}

// The shared memory a block of the kernel for (HD, KV, W) uses: its ring and its static arrays.
template <int HD, KvScheme KV, int W>
int64_t block_bytes() {
  static const int64_t bytes = [] {
    cudaFuncAttributes fa = {};
    CUDA_CHECK(cudaFuncGetAttributes(&fa, attention_mma_kernel<HD, KV, W>));
    return int64_t{Ring<HD, KV, W>::kBytes} + static_cast<int64_t>(fa.sharedSizeBytes);
  }();
  return bytes;
}

// The shared memory a block may have on this GPU.
inline int64_t optin_bytes() {
  static const int64_t bytes = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  return bytes;
}

// The blocks an SM the kernel for (HD, KV, W) reaches (the plan's `resident`), its shared
// memory allowed once a process; 0 where a block's shared memory does not fit.
template <int HD, KvScheme KV, int W>
int occupancy() {
  static const int blocks = [] {
    if (block_bytes<HD, KV, W>() > optin_bytes()) return 0;
    const auto kernel = attention_mma_kernel<HD, KV, W>;
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Ring<HD, KV, W>::kBytes));
    int n = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, W * kWarp, Ring<HD, KV, W>::kBytes));
    return n;
  }();
  return blocks;
}

// The warps a block for (HD, KV): `warps` 4 or 12 forces them, 0 takes the plan's choice for
// this GPU. Fails where the block does not fit.
template <int HD, KvScheme KV>
int block_warps(int warps) {
  if (warps != 0 && warps != 4 && warps != 12)
    fail("attention_mma: {} warps a block (0: this GPU's choice, 4 or 12)", warps);
  if (warps == 0) {
    static const int chosen = attention_mma_choose_warps(optin_bytes(), block_bytes<HD, KV, 4>(),
                                                         block_bytes<HD, KV, 12>(), occupancy<HD, KV, 12>());
    warps = chosen;  // 0 where neither fits: refused below
  }
  if (warps == 12) {
    if (occupancy<HD, KV, 12>() < 1)
      fail(
          "attention_mma: a block of 12 warps needs {} bytes of shared memory (head_dim {}, {} cache); this "
          "GPU allows a block {}, or its SM holds none",
          block_bytes<HD, KV, 12>(), HD, to_string(KV), optin_bytes());
    return 12;
  }
  if (occupancy<HD, KV, 4>() < 1)
    fail("attention_mma: a block of 4 warps needs {} bytes of shared memory; this GPU allows a block {}",
         block_bytes<HD, KV, 4>(), optin_bytes());
  return 4;
}

// What a launch of the kernel is, or would be: its warps a block and its blocks a kv head.
struct Launch {
  int warps, splits;
};

template <int HD, KvScheme KV, int W>
Launch run(const AttentionArgs& a, cudaStream_t s, int batch, int splits, bool launch_it) {
  const int resident = occupancy<HD, KV, W>();  // also allows the kernel its shared memory
  const int n = splits > 0 ? std::min({splits, a.max_splits, kAttentionMmaMaxSplits})
                           : attention_mma_grid_splits(resident, sm_count(), a.kv_heads, batch, a.max_splits);
  if (launch_it)
    launch(attention_mma_kernel<HD, KV, W>, dim3(a.kv_heads, n, batch), W * kWarp, Ring<HD, KV, W>::kBytes, s,
           a);
  return {W, n};
}

template <int HD, KvScheme KV>
Launch run_warps(const AttentionArgs& a, cudaStream_t s, int batch, int splits, int warps, bool launch_it) {
  if (block_warps<HD, KV>(warps) == 12) return run<HD, KV, 12>(a, s, batch, splits, launch_it);
  return run<HD, KV, 4>(a, s, batch, splits, launch_it);
}

template <KvScheme KV>
Launch run_hd(const AttentionArgs& a, cudaStream_t s, int batch, int splits, int warps, bool launch_it) {
  switch (a.head_dim) {
    case 32:
      return run_warps<32, KV>(a, s, batch, splits, warps, launch_it);
    case 64:
      return run_warps<64, KV>(a, s, batch, splits, warps, launch_it);
    case 96:
      return run_warps<96, KV>(a, s, batch, splits, warps, launch_it);
    case 128:
      return run_warps<128, KV>(a, s, batch, splits, warps, launch_it);
  }
  fail("attention_mma: head_dim {} is not supported (32, 64, 96 or 128)", a.head_dim);
}

// The one dispatch from the run's shapes, scheme and warps to the kernel; `launch_it` false
// only computes the launch.
Launch dispatch(const AttentionArgs& a, cudaStream_t s, int batch, KvScheme kv, int splits, int warps,
                bool launch_it) {
  if (!attention_mma_takes(a.head_dim, a.heads, a.kv_heads))
    fail(
        "attention_mma: head_dim {} with {} query heads over {} kv heads is not supported (head_dim 32, 64, "
        "96 "
        "or 128; up to {} query heads a kv head)",
        a.head_dim, a.heads, a.kv_heads, kAttentionMmaMaxGroup);
  if (batch < 1 || batch > 65535) fail("attention_mma: a batch of {} sequences (1 to 65535)", batch);
  if (a.max_splits < 1) fail("attention_mma: no room for partials (max_splits {})", a.max_splits);
  switch (kv) {
    case KvScheme::fp16:
      return run_hd<KvScheme::fp16>(a, s, batch, splits, warps, launch_it);
    case KvScheme::fp8:
      return run_hd<KvScheme::fp8>(a, s, batch, splits, warps, launch_it);
    case KvScheme::int8:
      return run_hd<KvScheme::int8>(a, s, batch, splits, warps, launch_it);
  }
  fail("attention_mma: unknown KV cache scheme");
}

}  // namespace

void attention_mma(const AttentionArgs& a, cudaStream_t s, int batch, KvScheme kv, int splits, int warps) {
  dispatch(a, s, batch, kv, splits, warps, true);
}

int attention_mma_splits(const AttentionArgs& a, int batch, KvScheme kv, int warps) {
  return dispatch(a, nullptr, batch, kv, 0, warps, false).splits;
}

int attention_mma_warps(const AttentionArgs& a, KvScheme kv) {
  return dispatch(a, nullptr, 1, kv, 0, 0, false).warps;
}

}  // namespace db::cuda
