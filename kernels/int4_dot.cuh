// The int4 dot products, on the CUDA cores and on the tensor cores, and the loads of a group's
// scales and zero points, shared by the rows kernel (gemv.cu), its few-column variant
// (gemv_columns.cu) and the persistent-chain prototype (tests/bench/chain_bench.cu), so that
// all of them time the same instructions per weight.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "common.cuh"
#include "decodebench/int4_frag.h"
#include "decodebench/quant.h"
#include "gemv.cuh"
#include "int4_meta.h"

namespace db::cuda {

// (a & mask) | bits in one instruction. Written as `(a & mask) | bits` in C++ it compiled to
// two LOP3s (one 32-bit immediate per instruction), a third of the int4 kernel's integer work.
template <uint32_t kMask, uint32_t kBits>
__device__ __forceinline__ uint32_t and_or(uint32_t a) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(a), "n"(kMask), "n"(kBits));  // 0xea: (a & b) | c
  return r;
}

// The four fp16 pairs q - zero of one repacked word: columns (0, 1), (2, 3), (4, 5), (6, 7)
// (the word holds columns 0..7 as nibbles 0,2,4,6,1,3,5,7). OR-ing a masked nibble into the
// mantissa of fp16 1024 (0x6400) gives 1024 + v exactly; the high nibble of a byte gives
// 1024 + 16v, fixed by one fma with 1/16. lo_sub is 1024 + zero and hi_add -(64 + zero) in
// both halves, so (q - zero) comes out exact.
__device__ __forceinline__ void int4_pairs(uint32_t q, __half2 lo_sub, __half2 hi_add, __half2 (&v)[4]) {
  const __half2 sixteenth = bits_h2(0x2c002c00u);  // 1/16
  v[0] = __hsub2(bits_h2(and_or<0x000f000fu, 0x64006400u>(q)), lo_sub);
  v[1] = __hfma2(bits_h2(and_or<0x00f000f0u, 0x64006400u>(q)), sixteenth, hi_add);
  q >>= 8;
  v[2] = __hsub2(bits_h2(and_or<0x000f000fu, 0x64006400u>(q)), lo_sub);
  v[3] = __hfma2(bits_h2(and_or<0x00f000f0u, 0x64006400u>(q)), sixteenth, hi_add);
}

// One 16-byte chunk (32 weights) of the repacked nibble layout against its 32 fp16 x values
// (xv[j]: columns 8j..8j+7), before the group scale, through int4_pairs. Byte `byte` of
// `zeros` is the chunk's zero point; a constant once the caller's loops are unrolled.
__device__ __forceinline__ float int4_dot_q(uint4 w, const uint4 (&xv)[4], uint32_t zeros, int byte) {
  // Both halves of each constant by one byte permute (zero < 16): 0x64zz is 1024 + zero,
  // 0xd4(16 zero) is -(64 + zero).
  const uint32_t sel = 0x4040u | (byte << 8) | byte;
  const __half2 lo_sub = bits_h2(__byte_perm(zeros, 0x64u, sel));
  const __half2 hi_add = bits_h2(__byte_perm(zeros << 4, 0xd4u, sel));  // zero < 16: no carry into the next
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
  __half2 acc0 = __float2half2_rn(0.f), acc1 = acc0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint4 x = xv[j];
    __half2 v[4];
    int4_pairs(words[j], lo_sub, hi_add, v);
    acc0 = __hfma2(v[0], bits_h2(x.x), acc0);
    acc1 = __hfma2(v[1], bits_h2(x.y), acc1);
    acc0 = __hfma2(v[2], bits_h2(x.z), acc0);
    acc1 = __hfma2(v[3], bits_h2(x.w), acc1);
  }
  // The two accumulators added in half2, as int8's dot does: one add and two conversions
  // where converting each takes four, and three fp32 adds.
  const float2 a = __half22float2(__hadd2(acc0, acc1));
  return a.x + a.y;
}

// int4: the scales of a group's Rows rows (Rows divides 8) as Rows / 2 half2 words and their zero
// points as bytes of (Rows + 3) / 4 words, one vector load each from the packed layout
// (kernels/int4_meta.h): two loads where the canonical layout took 2 Rows. A matrix whose
// rows are not a multiple of 8 has its last block padded, repeating its last row as the
// weights' loads do, so every group takes the same loads.
template <int Rows>
struct GroupMeta {
  uint32_t s[Rows / 2];
  uint32_t z[(Rows + 3) / 4];
};

// A symmetric matrix has no zero points. Its groups load theirs from these 8s (one cached
// line) instead, through the same instructions as a matrix with zero points: branching around
// the loads made symmetric 8b-int4 9% slower than asymmetric, which reads more bytes (1.832
// against 1.682 ms).
// Internal linkage (static, not an unnamed namespace: nvcc's stubs for a file's own unnamed
// namespace then fail to name its kernels): every kernel file that includes this header has its
// own copy.
static __device__ __align__(16) const uint8_t kSymmetricZeros[16] = {8, 8, 8, 8, 8, 8, 8, 8,
                                                                     8, 8, 8, 8, 8, 8, 8, 8};
static_assert(quant::kInt4SymmetricZero == 8, "kSymmetricZeros holds the symmetric zero point");

// The group parameters of rows row0 .. row0 + Rows - 1 (inside one block of 8) at group
// column gcol, from the packed layout; G is the groups a row.
template <int Rows>
__device__ __forceinline__ void load_group_meta(GroupMeta<Rows>& gm, const DeviceMatrix& m, int G,
                                                int64_t row0, int gcol) {
  static_assert(Rows == 2 || Rows == 4 || Rows == 8, "a group of rows lies inside one block of 8");
  const int64_t first = row0 / int4_meta::kBlockRows * int4_meta::kBlockRows;
  const int within = static_cast<int>(row0 - first);
  // int4_meta::packed_index of (first, gcol): the block's 8 rows are adjacent in each group.
  const int64_t e = int4_meta::packed_index(G, first, gcol);
  const uint16_t* sp = reinterpret_cast<const uint16_t*>(m.scales) + e;
  const uint8_t* zp = m.zero_point ? m.zeros + e : kSymmetricZeros;  // offsets below stay < 16
  if constexpr (Rows == 8) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(sp));
    gm.s[0] = v.x, gm.s[1] = v.y, gm.s[2] = v.z, gm.s[3] = v.w;
    const uint2 z = __ldg(reinterpret_cast<const uint2*>(zp));
    gm.z[0] = z.x, gm.z[1] = z.y;
  } else if constexpr (Rows == 4) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(sp + within));
    gm.s[0] = v.x, gm.s[1] = v.y;
    gm.z[0] = __ldg(reinterpret_cast<const uint32_t*>(zp + within));
  } else {
    gm.s[0] = __ldg(reinterpret_cast<const uint32_t*>(sp + within));
    gm.z[0] = __ldg(reinterpret_cast<const uint16_t*>(zp + within));
  }
}

// ------------------------------------------------------------------ the int4 dot on tensor cores
// For matrices in the fragment layout (include/decodebench/int4_frag.h: where every nibble goes and
// why). A lane's 16-byte chunk of "row" i of a group is the A operand of four
// mma.m16n8k16, unpacked by two masks and a shift per word into 1024 + v and 1024 + 16 v;
// x and x / 16 are the B operand, and the 1024s and zero points come out once per group of
// a row with the segment's sums of x. About a third of the instructions of the fp16 dot
// (int4_dot_q above) per weight.
namespace frag {

// A lane's x: B registers [k-step][0: x at k-slots 2c, 2c+1; 1: x / 16 at 2c+8, 2c+9], and
// its segment's offset and sum (int4_frag.h: O and S).
struct XFrag {
  uint32_t b[8][2];
  float offset, sum;
};

__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                    uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Bytes of one warp's staged x for one chunk set: 8 segments of 128 fp16, each padded by 16
// bytes so that the 8 lane quads, reading one segment each at the same offset, hit 8
// different groups of 4 banks.
constexpr int kSegStride = int4_frag::kSegmentCols * 2 + 16;
constexpr int kWarpStage = 8 * kSegStride;

// The B registers from the lane's x slice as the rows kernel loads it (its 32 contiguous
// columns of the span, `x`, coalesced and normalized by load_x_slice): the warp writes its
// span to `stage` and each lane reads its k-slots back. Then the segment's sums.
__device__ __forceinline__ void stage_b(XFrag& xf, const uint4 (&x)[4], unsigned char* stage, int lane) {
  uint4* dst = reinterpret_cast<uint4*>(stage + kSegStride * (lane / 4) + 64 * (lane % 4));
#pragma unroll
  for (int i = 0; i < 4; ++i) dst[i] = x[i];
  __syncwarp();
  const __half2 sixteenth = bits_h2(0x2c002c00u);
  const unsigned char* src = stage + kSegStride * (lane / 4) + 4 * (lane % 4);
  float lo = 0.f, hi = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      __half2 h = *reinterpret_cast<const __half2*>(src + 32 * j + 16 * r);
      if (r == 1) h = __hmul2(h, sixteenth);  // exact: a power of two
      xf.b[j][r] = h2_bits(h);
      const float2 f = __half22float2(h);
      (r == 0 ? lo : hi) += f.x + f.y;
    }
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) {
    lo += __shfl_xor_sync(0xffffffffu, lo, o);
    hi += __shfl_xor_sync(0xffffffffu, hi, o);
  }
  xf.offset = 1024.f * (lo + hi);
  xf.sum = lo + 16.f * hi;
}

// The Rows rows of a group against one chunk set: acc[r] += the lane's part of row r, which only
// the lane that holds D[g][g] of each pair (c == g / 2) has; the others add zero.
template <int Rows, int Chunks>
__device__ __forceinline__ void dot_rows(float (&acc)[Rows], const uint4 (&w)[Rows][Chunks], int k,
                                         const XFrag& xf, const GroupMeta<Rows>& gm, int lane, bool live) {
  const int g = lane / 4, c = lane % 4;
  const bool mine = live && c == g / 2;
  float d[Rows / 2][4];
#pragma unroll
  for (int p = 0; p < Rows / 2; ++p) d[p][0] = d[p][1] = d[p][2] = d[p][3] = 0.f;
    // The pairs' k-steps interleaved: Rows / 2 independent accumulation chains (one pair after
    // another made each mma wait for the one before it).
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int p = 0; p < Rows / 2; ++p) {
      const uint4 v = w[2 * p + j / 4][k];
      uint32_t q = j % 4 == 0 ? v.x : j % 4 == 1 ? v.y : j % 4 == 2 ? v.z : v.w;
      const uint32_t a0 = and_or<0x000f000fu, 0x64006400u>(q), a2 = and_or<0x00f000f0u, 0x64006400u>(q);
      q >>= 8;
      const uint32_t a1 = and_or<0x000f000fu, 0x64006400u>(q), a3 = and_or<0x00f000f0u, 0x64006400u>(q);
      mma(d[p], a0, a1, a2, a3, xf.b[j][0], xf.b[j][1]);
    }
  }
  for (int p = 0; p < Rows / 2; ++p) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 2 * p + h;
      const float dot = (g & 1 ? d[p][2 * h + 1] : d[p][2 * h]) - xf.offset;
      const float zero = static_cast<float>((gm.z[r / 4] >> (8 * (r % 4))) & 0xffu);
      const __half2 sc = bits_h2(gm.s[r / 2]);
      const float scale = r % 2 ? __high2float(sc) : __low2float(sc);
      acc[r] = fmaf(fmaf(-zero, xf.sum, dot), mine ? scale : 0.f, acc[r]);
    }
  }
}

}  // namespace frag

}  // namespace db::cuda
