// The batched prefill's kernels (see prefill.cuh); the causal attention's Hopper kernel is in
// prefill_wgmma.cu.
#include <cstdlib>

#include "common.cuh"
#include "decodebench/int4_frag.h"
#include "decodebench/quant.h"
#include "fp16_tiles_layout.h"
#include "int4_dot.cuh"
#include "int4_meta.h"
#include "int4_tiles_layout.h"
#include "int8_tiles_layout.h"
#include "kv_cache.cuh"
#include "mixed_wgmma_layout.h"
#include "pdl.cuh"
#include "prefill.cuh"
#include "weights.cuh"

namespace db::cuda {
namespace {

constexpr int kThreads = 256;

// Tiles: the table is in the fp16 tiles layout (a tied lm_head the batched step runs on the
// tiles GEMV): each value where fp16_tiles_layout.h's place() put it.
template <bool Tiles>
__global__ void embed_rows_kernel(const __half* table, int64_t hidden, const int32_t* tokens, float* resid) {
  const int64_t t = blockIdx.y, token = tokens[t];
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < hidden;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t at =
        Tiles ? tiles16::index_of(tiles16::place(token, i, hidden / tiles16::kTileCols)) : token * hidden + i;
    resid[t * hidden + i] = __half2float(table[at]);
  }
}

// One block per row. Launched with PDL (pdl.cuh): in the batched step it sits between the
// GEMMs, so its launch and the next GEMM's first weight loads hide under the kernel before.
// A row of up to kNormPerThread values a thread keeps them in registers from the sum to the
// scaling, and loads its norm weights (constant) before the wait: the chain after the wait is
// one round trip for the row, the block's sum, the stores. Longer rows loop, reading twice.
// Both add in the same order.
constexpr int kNormThreads = 1024, kNormPerThread = 8;

__global__ void __launch_bounds__(kNormThreads)
    rmsnorm_rows_kernel(const float* resid, const __half* w, float eps, int64_t n, __half* out) {
  pdl_trigger();
  __shared__ float red[kWarp];
  const float* x = resid + blockIdx.x * n;
  __half* y = out + blockIdx.x * n;
  if (n <= int64_t{kNormPerThread} * blockDim.x) {
    float wv[kNormPerThread], xv[kNormPerThread];
#pragma unroll
    for (int k = 0; k < kNormPerThread; ++k) {
      const int64_t i = threadIdx.x + int64_t{k} * blockDim.x;
      wv[k] = i < n ? __half2float(w[i]) : 0.f;
    }
    pdl_wait();
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < kNormPerThread; ++k) {
      const int64_t i = threadIdx.x + int64_t{k} * blockDim.x;
      xv[k] = i < n ? x[i] : 0.f;
      ss += xv[k] * xv[k];
    }
    ss = block_sum(ss, red);
    const float inv = rsqrtf(ss / static_cast<float>(n) + eps);
#pragma unroll
    for (int k = 0; k < kNormPerThread; ++k) {
      const int64_t i = threadIdx.x + int64_t{k} * blockDim.x;
      if (i < n) y[i] = __float2half_rn(xv[k] * inv * wv[k]);
    }
    return;
  }
  pdl_wait();
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += x[i] * x[i];
  ss = block_sum(ss, red);
  const float inv = rsqrtf(ss / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    y[i] = __float2half_rn(x[i] * inv * __half2float(w[i]));
}

// One warp per head vector of a row: blockIdx.x is the row, warp w of the block's four takes
// vectors w, w + 4, ... of the row's heads + 2 kv_heads (q heads, then k, then v). The
// vector goes through shared memory so that RoPE's partner i +- hd/2 is any lane's.
constexpr int kQkvWarps = 4;
constexpr int kMaxHeadDim = 256;

// KV fp8, int8: a K or V vector of the row, lane l holding elements l, l + 32, ... (n of
// them), quantized as kv_quant.h says (amax over the warp, the scale, the codes) into the
// cache's row `pos`, kv head `kvh`.
template <KvScheme KV>
__device__ __forceinline__ void store_quantized(const float (&x)[kMaxHeadDim / kWarp], int n, __half* cache,
                                                int64_t positions, int kv_dim, int kv_heads, int64_t pos,
                                                int kvh, int hd, int lane) {
  float amax = 0.f;
  for (int k = 0; k < n; ++k) amax = fmaxf(amax, fabsf(x[k]));
  const float s = kvq::scale_of(warp_max(amax), KV);
  uint8_t* codes = kv_bytes(cache) + pos * kv_dim + int64_t{kvh} * hd;
  for (int k = 0; k < n; ++k) codes[lane + kWarp * k] = kv_quantize<KV>(x[k], s);
  if (lane == 0) kv_scales(cache, positions, kv_dim)[pos * kv_heads + kvh] = s;
}

template <KvScheme KV>
__global__ void __launch_bounds__(kQkvWarps* kWarp) prefill_qkv_kernel(PrefillQkvArgs a) {
  __shared__ float vec[kQkvWarps][kMaxHeadDim];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int hd = a.head_dim, half_hd = hd / 2;
  const int64_t t = blockIdx.x, pos = a.p0 + t;
  const int q_dim = a.heads * hd, kv_dim = a.kv_heads * hd, width = q_dim + 2 * kv_dim;
  const float* row = a.qkv + t * width;
  const float* cosp = a.rope + pos * half_hd;
  const float* sinp = a.rope + (a.rope_positions + pos) * half_hd;
  const float scale = rsqrtf(static_cast<float>(hd));
  float* v = vec[warp];
  for (int item = warp; item < a.heads + 2 * a.kv_heads; item += kQkvWarps) {
    const int base = item * hd;  // the vector's first column in the row (q, k, v heads in order)
    for (int i = lane; i < hd; i += kWarp) {
      float x = row[base + i];
      if (a.qkv_bias) x += __half2float(a.qkv_bias[base + i]);
      v[i] = x;
    }
    __syncwarp();
    if (item >= a.heads + a.kv_heads) {  // v: the bias only
      if constexpr (KV == KvScheme::fp16) {
        const int64_t dst = pos * kv_dim + (base - q_dim - kv_dim);
        for (int i = lane; i < hd; i += kWarp) a.v_cache[dst + i] = __float2half_rn(v[i]);
      } else {
        float x[kMaxHeadDim / kWarp];
        int n = 0;
        for (int i = lane; i < hd; i += kWarp, ++n) x[n] = v[i];
        store_quantized<KV>(x, n, a.v_cache, a.cache_positions, kv_dim, a.kv_heads, pos,
                            item - a.heads - a.kv_heads, hd, lane);
      }
      __syncwarp();
      continue;
    }
    const bool is_q = item < a.heads;
    const __half* norm_w = is_q ? a.q_norm : a.k_norm;
    float inv = 1.f;
    if (norm_w) {
      float ss = 0.f;
      for (int i = lane; i < hd; i += kWarp) ss += v[i] * v[i];
      inv = rsqrtf(warp_sum(ss) / hd + a.eps);
    }
    float out[kMaxHeadDim / kWarp];
    int n = 0;
    for (int i = lane; i < hd; i += kWarp, ++n) {
      const int j = i < half_hd ? i : i - half_hd, partner = i < half_hd ? i + half_hd : i - half_hd;
      const float x = norm_w ? v[i] * inv * __half2float(norm_w[i]) : v[i];
      const float y = norm_w ? v[partner] * inv * __half2float(norm_w[partner]) : v[partner];
      out[n] = i < half_hd ? x * cosp[j] - y * sinp[j] : x * cosp[j] + y * sinp[j];
    }
    __syncwarp();  // every lane has read v before the next item overwrites it
    n = 0;
    if (is_q) {
      __half* dst = a.q + t * q_dim + base;
      for (int i = lane; i < hd; i += kWarp, ++n) dst[i] = __float2half_rn(out[n] * scale);
    } else if constexpr (KV == KvScheme::fp16) {
      __half* dst = a.k_cache + pos * kv_dim + (base - q_dim);
      for (int i = lane; i < hd; i += kWarp, ++n) dst[i] = __float2half_rn(out[n]);
    } else {
      store_quantized<KV>(out, (hd - lane + kWarp - 1) / kWarp, a.k_cache, a.cache_positions, kv_dim,
                          a.kv_heads, pos, item - a.heads, hd, lane);
    }
  }
}

// --- causal attention on the tensor cores (mma.sync m16n8k16, fp16 in, fp32 accumulate),
// flash-attention style: a block holds 64 queries of one head (16 per warp) and walks the
// keys 0 .. its last query's position in tiles of 64, double-buffered in shared memory
// (cp.async), with an online softmax, so the scores never leave registers.
constexpr int kFlashWarps = 4;
constexpr int kBM = 16 * kFlashWarps;  // queries of a block
constexpr int kBN = 64;                // keys of a tile
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __half* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const __half* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  return h2_bits(__floats2half2_rn(lo, hi));
}

// Shared memory of the kernel for head size HD: K and V tiles, two of each, with rows padded
// by 16 bytes so that the 8 rows an ldmatrix phase reads start in 8 different bank groups.
template <int HD>
constexpr int flash_stride() {
  return HD + 8;
}
template <int HD>
constexpr size_t flash_smem() {
  return size_t{4} * kBN * flash_stride<HD>() * sizeof(__half);
}

// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), lane = 4 g + c: A holds rows g
// and g + 8, columns 2c, 2c + 1 and 2c + 8, 2c + 9; B columns g, rows 2c, 2c + 1 and + 8; the
// accumulator rows g and g + 8, columns 2c, 2c + 1. S = Q K^T takes K rows (keys) as B
// columns, read by ldmatrix; P V takes the score accumulators, rounded to fp16, as the A
// operand directly (the accumulator of two adjacent 8-key tiles is the A fragment of their
// 16 keys), and V through ldmatrix.trans.
// KV fp8, int8: the tiles are filled by ordinary loads instead of cp.async, 16 codes and the
// row's scale a thread at a time, dequantized (codes times scale, rounded to fp16) into the
// same fp16 tiles.
template <int HD, KvScheme KV>
__global__ void __launch_bounds__(kFlashWarps* kWarp) flash_prefill_kernel(PrefillAttentionArgs a) {
  constexpr int kStride = flash_stride<HD>();
  constexpr int KS = HD / 16;  // k-steps of Q K^T
  constexpr int NT = HD / 8;   // 8-column tiles of the output
  static_assert(HD % 16 == 0 && HD <= 128, "head size");
  extern __shared__ __align__(16) unsigned char smem[];
  __half* k_s = reinterpret_cast<__half*>(smem);  // [2][kBN][kStride]
  __half* v_s = k_s + 2 * kBN * kStride;          // [2][kBN][kStride]

  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, c = lane % 4;
  const int qblock = gridDim.x - 1 - blockIdx.x;  // the blocks with the most keys start first
  const int h = blockIdx.y, kvh = h / (a.heads / a.kv_heads);
  const int64_t q_dim = int64_t{a.heads} * HD, kv_dim = int64_t{a.kv_heads} * HD;
  const int64_t row0 = int64_t{qblock} * kBM + warp * 16;  // the warp's first query row
  const int64_t block_last = min(a.rows, int64_t{qblock + 1} * kBM) - 1;
  const int64_t keys = a.p0 + block_last + 1;  // positions the block attends to
  const int tiles = static_cast<int>((keys + kBN - 1) / kBN);
  const int64_t warp_first_pos = a.p0 + row0;
  const int64_t warp_last_pos = a.p0 + min(row0 + 15, a.rows - 1);
  const int64_t pos0 = a.p0 + row0 + g, pos1 = pos0 + 8;  // this lane's two query rows

  // The queries stay in registers for the whole walk (rows past the chunk are zeros).
  uint32_t qf[KS][4];
  {
    const int64_t r0 = row0 + g, r1 = r0 + 8;
    const __half* q0 = a.q + r0 * q_dim + h * HD;
    const __half* q1 = a.q + r1 * q_dim + h * HD;
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      const int col = 16 * kk + 2 * c;
      qf[kk][0] = r0 < a.rows ? *reinterpret_cast<const uint32_t*>(q0 + col) : 0u;
      qf[kk][1] = r1 < a.rows ? *reinterpret_cast<const uint32_t*>(q1 + col) : 0u;
      qf[kk][2] = r0 < a.rows ? *reinterpret_cast<const uint32_t*>(q0 + col + 8) : 0u;
      qf[kk][3] = r1 < a.rows ? *reinterpret_cast<const uint32_t*>(q1 + col + 8) : 0u;
    }
  }

  auto load_tile = [&](int tile, int buf) {
    constexpr int kPieces = HD / 8;  // 16-byte pieces of a row
    __half* kd = k_s + buf * kBN * kStride;
    __half* vd = v_s + buf * kBN * kStride;
    if constexpr (KV != KvScheme::fp16) {
      constexpr int kLoads = HD / 16;  // 16-byte loads of a row's codes
      const float* k_scales = kv_scales(a.k_cache, a.cache_positions, kv_dim);
      const float* v_scales = kv_scales(a.v_cache, a.cache_positions, kv_dim);
      const auto dequantize = [](uint4 codes, float scale, __half* dst) {
        float x[16];
        kv_codes16<KV>(codes, x);
        uint32_t h[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) h[j] = pack_half2(x[2 * j] * scale, x[2 * j + 1] * scale);
        reinterpret_cast<uint4*>(dst)[0] = make_uint4(h[0], h[1], h[2], h[3]);
        reinterpret_cast<uint4*>(dst)[1] = make_uint4(h[4], h[5], h[6], h[7]);
      };
      for (int e = threadIdx.x; e < kBN * kLoads; e += kFlashWarps * kWarp) {
        const int r = e / kLoads, p = e % kLoads;
        const int64_t key = int64_t{tile} * kBN + r;
        if (key < keys) {
          const int64_t src = key * kv_dim + kvh * HD + 16 * p, si = key * a.kv_heads + kvh;
          const uint4 kq = *reinterpret_cast<const uint4*>(kv_bytes(a.k_cache) + src);
          const uint4 vq = *reinterpret_cast<const uint4*>(kv_bytes(a.v_cache) + src);
          dequantize(kq, k_scales[si], kd + r * kStride + 16 * p);
          dequantize(vq, v_scales[si], vd + r * kStride + 16 * p);
        } else {
          const uint4 z = make_uint4(0, 0, 0, 0);
          reinterpret_cast<uint4*>(kd + r * kStride + 16 * p)[0] = z;
          reinterpret_cast<uint4*>(kd + r * kStride + 16 * p)[1] = z;
          reinterpret_cast<uint4*>(vd + r * kStride + 16 * p)[0] = z;
          reinterpret_cast<uint4*>(vd + r * kStride + 16 * p)[1] = z;
        }
      }
    } else {
      for (int e = threadIdx.x; e < kBN * kPieces; e += kFlashWarps * kWarp) {
        const int r = e / kPieces, p = e % kPieces;
        const int64_t key = int64_t{tile} * kBN + r;
        if (key < keys) {
          const int64_t src = key * kv_dim + kvh * HD + 8 * p;
          cp_async16(kd + r * kStride + 8 * p, a.k_cache + src);
          cp_async16(vd + r * kStride + 8 * p, a.v_cache + src);
        } else {  // zeros, not whatever the cache holds there: 0 x NaN would reach the output
          *reinterpret_cast<uint4*>(kd + r * kStride + 8 * p) = make_uint4(0, 0, 0, 0);
          *reinterpret_cast<uint4*>(vd + r * kStride + 8 * p) = make_uint4(0, 0, 0, 0);
        }
      }
    }
    cp_async_commit();  // fp8, int8: an empty group, so that the waits below count alike
  };

  float o[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // running max (log2 units) and sum

  load_tile(0, 0);
  for (int j = 0; j < tiles; ++j) {
    if (j + 1 < tiles) {
      load_tile(j + 1, (j + 1) & 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int64_t key0 = int64_t{j} * kBN;
    if (key0 <= warp_last_pos) {  // else every key of the tile is after the warp's queries
      const __half* kt = k_s + (j & 1) * kBN * kStride;
      const __half* vt = v_s + (j & 1) * kBN * kStride;
      float s[kBN / 8][4];
#pragma unroll
      for (int n = 0; n < kBN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
        for (int np = 0; np < kBN / 16; ++np) {
          uint32_t b[4];
          ldmatrix_x4(b, kt + (16 * np + (lane & 7) + ((lane >> 4) << 3)) * kStride + 16 * kk +
                             ((lane >> 3) & 1) * 8);
          mma16816(s[2 * np], qf[kk], b[0], b[1]);
          mma16816(s[2 * np + 1], qf[kk], b[2], b[3]);
        }
      }
      if (key0 + kBN - 1 > warp_first_pos) {  // the causal edge crosses the tile
#pragma unroll
        for (int n = 0; n < kBN / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t key = key0 + 8 * n + 2 * c + (e & 1);
            if (key > (e < 2 ? pos0 : pos1)) s[n][e] = -INFINITY;
          }
      }
      // Online softmax in base 2 (the queries carry 1/sqrt(hd) already): rows g (e 0, 1) and
      // g + 8 (e 2, 3); a row's 64 scores lie in the 4 lanes of a quad.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < kBN / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[r], mx * kLog2e);  // finite: key 0 is in every row's first tile
        const float corr = exp2f(m[r] - m_new);
        m[r] = m_new;
        l[r] *= corr;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          o[n][2 * r] *= corr;
          o[n][2 * r + 1] *= corr;
        }
#pragma unroll
        for (int n = 0; n < kBN / 8; ++n) {
          s[n][2 * r] = exp2f(s[n][2 * r] * kLog2e - m_new);
          s[n][2 * r + 1] = exp2f(s[n][2 * r + 1] * kLog2e - m_new);
          l[r] += s[n][2 * r] + s[n][2 * r + 1];
        }
      }
#pragma unroll
      for (int ks = 0; ks < kBN / 16; ++ks) {
        const uint32_t p[4] = {pack_half2(s[2 * ks][0], s[2 * ks][1]), pack_half2(s[2 * ks][2], s[2 * ks][3]),
                               pack_half2(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                               pack_half2(s[2 * ks + 1][2], s[2 * ks + 1][3])};
#pragma unroll
        for (int dp = 0; dp < NT / 2; ++dp) {
          uint32_t b[4];
          ldmatrix_x4_trans(
              b, vt + (16 * ks + (lane & 7) + ((lane >> 3) & 1) * 8) * kStride + 16 * dp + (lane >> 4) * 8);
          mma16816(o[2 * dp], p, b[0], b[1]);
          mma16816(o[2 * dp + 1], p, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // the tile's buffer is refilled by the next iteration's load
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  const int64_t r0 = row0 + g, r1 = r0 + 8;
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const int col = h * HD + 8 * n + 2 * c;
    if (r0 < a.rows)
      *reinterpret_cast<uint32_t*>(a.out + r0 * q_dim + col) = pack_half2(o[n][0] / l[0], o[n][1] / l[0]);
    if (r1 < a.rows)
      *reinterpret_cast<uint32_t*>(a.out + r1 * q_dim + col) = pack_half2(o[n][2] / l[1], o[n][3] / l[1]);
  }
}

// Any head size (a multiple of 8 up to 256): one warp per query and head, a key at a time,
// fp32 throughout. For the shapes the tensor-core kernel does not take (small models). KV
// fp8, int8: a key's dot product times its K scale, its V values times its V scale.
template <KvScheme KV>
__global__ void plain_prefill_attention_kernel(PrefillAttentionArgs a) {
  constexpr int E = kMaxHeadDim / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t item = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kWarp;
  if (item >= a.rows * a.heads) return;
  const int64_t t = item / a.heads;
  const int h = static_cast<int>(item % a.heads), kvh = h / (a.heads / a.kv_heads), hd = a.head_dim;
  const int64_t q_dim = int64_t{a.heads} * hd, kv_dim = int64_t{a.kv_heads} * hd, pos = a.p0 + t;
  float q[E], o[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int i = lane + kWarp * e;
    q[e] = i < hd ? __half2float(a.q[t * q_dim + h * hd + i]) : 0.f;
    o[e] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int64_t key = 0; key <= pos; ++key) {
    if constexpr (KV == KvScheme::fp16) {
      const __half* k = a.k_cache + key * kv_dim + kvh * hd;
      float dot = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int i = lane + kWarp * e;
        if (i < hd) dot += q[e] * __half2float(k[i]);
      }
      dot = warp_sum(dot);
      const float m_new = fmaxf(m, dot), corr = expf(m - m_new), p = expf(dot - m_new);
      m = m_new;
      l = l * corr + p;
      const __half* v = a.v_cache + key * kv_dim + kvh * hd;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int i = lane + kWarp * e;
        o[e] = o[e] * corr + (i < hd ? p * __half2float(v[i]) : 0.f);
      }
    } else {
      const uint8_t* k = kv_bytes(a.k_cache) + key * kv_dim + kvh * hd;
      const int64_t si = key * a.kv_heads + kvh;
      float dot = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int i = lane + kWarp * e;
        if (i < hd) dot += q[e] * kv_value<KV>(k[i]);
      }
      dot = warp_sum(dot) * kv_scales(a.k_cache, a.cache_positions, kv_dim)[si];
      const float m_new = fmaxf(m, dot), corr = expf(m - m_new), p = expf(dot - m_new);
      m = m_new;
      l = l * corr + p;
      const uint8_t* v = kv_bytes(a.v_cache) + key * kv_dim + kvh * hd;
      const float pv = p * kv_scales(a.v_cache, a.cache_positions, kv_dim)[si];
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int i = lane + kWarp * e;
        o[e] = o[e] * corr + (i < hd ? pv * kv_value<KV>(v[i]) : 0.f);
      }
    }
  }
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int i = lane + kWarp * e;
    if (i < hd) a.out[t * q_dim + h * hd + i] = __float2half_rn(o[e] / l);
  }
}

// fp16 copy of a matrix in the int4 fragment layout: eight columns a thread (one 16-byte
// store), rows over blockIdx.y; each nibble is found where the repack put it
// (int4_frag::locate), each scale and zero point in the packed meta layout (int4_meta.h).
__global__ void dequantize_fragments_kernel(DeviceMatrix m, __half* out) {
  const int64_t pieces = m.cols / 8, groups = m.cols / m.group_size;
  const uint32_t* words = static_cast<const uint32_t*>(m.qweight);
  for (int64_t r = blockIdx.y; r < m.rows; r += gridDim.y) {
    for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < pieces;
         p += int64_t{gridDim.x} * blockDim.x) {
      const int64_t c0 = p * 8;
      const int64_t gi = int4_meta::packed_index(groups, r, c0 / m.group_size);
      const float scale = __half2float(m.scales[gi]);
      const int zero = m.zero_point ? m.zeros[gi] : quant::kInt4SymmetricZero;
      uint32_t h[4];
      for (int j = 0; j < 8; j += 2) {
        float v[2];
        for (int k = 0; k < 2; ++k) {
          const int64_t col = c0 + j + k;
          const int64_t block_row = r / int4_frag::kRows * int4_frag::kRows;
          const int64_t span = col / int4_frag::kSpanCols;
          const int4_frag::Place pl = int4_frag::locate(static_cast<int>(r - block_row),
                                                        static_cast<int>(col % int4_frag::kSpanCols));
          const uint32_t word =
              words[((block_row + pl.i) * m.cols / 2 + span * (int4_frag::kSpanCols / 2)) / 4 + pl.lane * 4 +
                    pl.u];
          v[k] = quant::dequantize_int4(static_cast<uint8_t>((word >> (4 * pl.n)) & 0xfu), scale, zero);
        }
        h[j / 2] = pack_half2(v[0], v[1]);
      }
      *reinterpret_cast<uint4*>(out + r * m.cols + c0) = make_uint4(h[0], h[1], h[2], h[3]);
    }
  }
}

// fp16 copy of rows [r0, r1) of a matrix in the int4 tiles layout (int4_tiles_layout.h), into
// rows 0 .. r1 - r0 of `out`: eight columns a thread (one 16-byte store), rows over
// blockIdx.y. A piece of 8 columns is two words of one lane of a tile, 8 bytes loaded at once;
// each code is found in them where place() put it, its scale and zero point in its row's meta
// word; the value as the canonical kernels make it (quant.h). Any r0: the prefill's blocks of
// rows start at multiples of 8.
__global__ void dequantize_tiles_kernel(DeviceMatrix m, int64_t r0, int64_t r1, __half* out) {
  const int64_t pieces = m.cols / 8, groups = m.cols / m.group_size, col_tiles = m.cols / tiles::kTileCols;
  const uint8_t* codes = static_cast<const uint8_t*>(m.qweight);
  for (int64_t r = r0 + blockIdx.y; r < r1; r += gridDim.y) {
    for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < pieces;
         p += int64_t{gridDim.x} * blockDim.x) {
      const int64_t c0 = p * 8;
      const uint32_t meta = tiles_meta(m)[tiles::meta_index(r, c0 / m.group_size, groups)];
      const int row_in_tile = static_cast<int>(r % tiles::kTileRows);
      const float scale = __half2float(__ushort_as_half(tiles::scale_bits_of(meta)));
      const int zero = tiles::zero_of(meta, row_in_tile);
      // Columns c0 .. c0 + 7 are words 2k and 2k + 1 of their lane (int4_tiles_layout.h).
      const uint2 w = *reinterpret_cast<const uint2*>(codes + tiles::byte_of(tiles::place(r, c0, col_tiles)));
      uint32_t h[4];
#pragma unroll
      for (int j = 0; j < 8; j += 2) {
        float v[2];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const tiles::Place pl = tiles::place(r, c0 + j + k, col_tiles);
          const uint32_t word = pl.word % 2 == 0 ? w.x : w.y;
          v[k] = quant::dequantize_int4(static_cast<uint8_t>((word >> (4 * pl.nibble)) & 0xfu), scale, zero);
        }
        h[j / 2] = pack_half2(v[0], v[1]);
      }
      *reinterpret_cast<uint4*>(out + (r - r0) * m.cols + c0) = make_uint4(h[0], h[1], h[2], h[3]);
    }
  }
}

// fp16 copy of rows [r0, r1) of a matrix in the int8 tiles layout (int8_tiles_layout.h), as
// dequantize_tiles_kernel's of int4: a piece of 8 columns is one lane's 16 bytes of a tile,
// loaded at once, each code found in them where place() put it (less the bias), times its row
// scale as the canonical kernels make it (quant.h).
__global__ void dequantize_int8_tiles_kernel(DeviceMatrix m, int64_t r0, int64_t r1, __half* out) {
  const int64_t pieces = m.cols / 8, col_tiles = m.cols / tiles8::kTileCols;
  const uint8_t* codes = static_cast<const uint8_t*>(m.qweight);
  for (int64_t r = r0 + blockIdx.y; r < r1; r += gridDim.y) {
    const float scale = __half2float(m.scales[r]);
    for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < pieces;
         p += int64_t{gridDim.x} * blockDim.x) {
      const int64_t c0 = p * 8;
      const tiles8::Place at = tiles8::place(r, c0, col_tiles);
      const uint4 w = *reinterpret_cast<const uint4*>(codes + at.tile * tiles8::kTileBytes + at.lane * 16);
      const uint32_t words[4] = {w.x, w.y, w.z, w.w};
      uint32_t h[4];
#pragma unroll
      for (int j = 0; j < 8; j += 2) {
        float v[2];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const tiles8::Place pl = tiles8::place(r, c0 + j + k, col_tiles);
          const int q = static_cast<int>((words[pl.word] >> (8 * pl.byte)) & 0xffu) - tiles8::kCodeBias;
          v[k] = quant::dequantize_int8(static_cast<int8_t>(q), scale);
        }
        h[j / 2] = pack_half2(v[0], v[1]);
      }
      *reinterpret_cast<uint4*>(out + (r - r0) * m.cols + c0) = make_uint4(h[0], h[1], h[2], h[3]);
    }
  }
}

// fp16 copy of rows [r0, r1) of a matrix in the fp16 tiles layout (fp16_tiles_layout.h): a
// piece of 8 columns of a row is 4 columns in each of its step's two tiles, two words of the
// lane (g, c) in each (words 0, 2 for row g, 1, 3 for row g + 8): two 16-byte loads.
__global__ void dequantize_fp16_tiles_kernel(DeviceMatrix m, int64_t r0, int64_t r1, __half* out) {
  const int64_t pieces = m.cols / 8, col_tiles = m.cols / tiles16::kTileCols;
  const uint8_t* w = static_cast<const uint8_t*>(m.qweight);
  for (int64_t r = r0 + blockIdx.y; r < r1; r += gridDim.y) {
    const int hi = static_cast<int>(r % tiles16::kTileRows) / 8;
    for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < pieces;
         p += int64_t{gridDim.x} * blockDim.x) {
      const int64_t c0 = p * 8;  // columns 8 c .. 8 c + 7 of a step: lane column c of both tiles
      const tiles16::Place at = tiles16::place(r, c0, col_tiles);  // tile 0's; tile 1 follows it
      const uint4 t0 = *reinterpret_cast<const uint4*>(w + at.tile * tiles16::kTileBytes + at.lane * 16);
      const uint4 t1 =
          *reinterpret_cast<const uint4*>(w + (at.tile + 1) * tiles16::kTileBytes + at.lane * 16);
      const uint4 v = hi ? make_uint4(t0.y, t0.w, t1.y, t1.w) : make_uint4(t0.x, t0.z, t1.x, t1.z);
      *reinterpret_cast<uint4*>(out + (r - r0) * m.cols + c0) = v;
    }
  }
}

// fp16 copy of rows [r0, r0 + rows) of a matrix in the mixed-wgmma layout (mixed_wgmma_layout.h):
// eight columns a thread (one 16-byte store), rows over blockIdx.y; each code found where the
// repack put it (mixed::place), its scale and zero point in the row's meta entry (the zero
// recovered from its constant: int4 1024 + z or -(64 + z), int8 a code's offset of 128).
__global__ void dequantize_mixed_kernel(DeviceMatrix m, int64_t r0, int64_t rows, __half* out) {
  const mixed::Kind k = m.scheme == Scheme::int4 ? mixed::Kind::int4 : mixed::Kind::int8;
  const int64_t pieces = m.cols / 8;
  const int64_t groups = k == mixed::Kind::int4 ? mixed::group_count(m.cols, m.group_size) : 1;
  const int64_t group_cols = m.cols / groups;
  const uint8_t* w = static_cast<const uint8_t*>(m.qweight);
  const uint8_t* meta = mixed_meta(m);
  for (int64_t i = blockIdx.y; i < rows; i += gridDim.y) {
    const int64_t r = r0 + i;
    for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < pieces;
         p += int64_t{gridDim.x} * blockDim.x) {
      const int64_t c0 = p * 8;
      const mixed::MetaPlace mp = mixed::meta_place(r, c0 / group_cols, groups);
      const uint16_t* e = reinterpret_cast<const uint16_t*>(meta + mp.byte);
      const float scale = f16_to_f32(e[mp.hi]), zc = f16_to_f32(e[2 + mp.hi]);
      const int zero = k == mixed::Kind::int8 ? 0
                       : mp.hi                ? static_cast<int>(-zc) - 64
                                              : static_cast<int>(zc) - 1024;
      uint32_t h[4];
      for (int j = 0; j < 8; j += 2) {
        float v[2];
        for (int c = 0; c < 2; ++c) {
          const mixed::Place pl = mixed::place(k, r, c0 + j + c, m.cols);
          const uint8_t byte = w[pl.byte];
          v[c] =
              k == mixed::Kind::int4
                  ? quant::dequantize_int4(static_cast<uint8_t>((byte >> (4 * pl.high)) & 0xfu), scale, zero)
                  : quant::dequantize_int8(static_cast<int8_t>(static_cast<int>(byte) - 128), scale);
        }
        h[j / 2] = pack_half2(v[0], v[1]);
      }
      *reinterpret_cast<uint4*>(out + i * m.cols + c0) = make_uint4(h[0], h[1], h[2], h[3]);
    }
  }
}

// The fp16 copies of the layouts the fast kernels read, int4 in the nibble order and int8 and
// fp8 (canonical): a thread converts a piece of 8 columns (one 16-byte store) in each of
// kCopyPieces pieces kCopyThreads apart in a row, rows over blockIdx.y, so that each load
// and store of a warp covers contiguous bytes and a thread has all its loads in flight
// before the first conversion. The codes become fp16 pairs as in the GEMVs (the int4 nibble
// masks, int8's byte permute, fp8's cvt), exactly; int4's q - zero and int8's q times the
// fp16 scale is one rounding of the exact product by hmul2, the rounding the canonical
// kernels (dequantize_to_f16) apply to it in fp32 (5 or 8 bits times 11 fit fp32's 24), and
// fp8's product is formed in fp32 as theirs: the same bits, at a few instructions a weight.
// The instructions a weight, not the bytes, bound such a copy: on the H200 these take 8b-int4's
// step at 128 sequences from 16.1 to 10.5 ms against an element-wise kernel's ~15 a weight
// (results/lab/batch.md §24). The codes, read once, are loaded evict-first (ld.global.cs).
constexpr int kCopyThreads = 128, kCopyPieces = 4;

__global__ void dequantize_nibbles_kernel(DeviceMatrix m, int group_shift, __half* out) {
  const int64_t pieces = m.cols / 8, groups = m.cols >> group_shift;
  const uint32_t* words = static_cast<const uint32_t*>(m.qweight);  // a piece is a word
  const int64_t p0 = int64_t{blockIdx.x} * kCopyThreads * kCopyPieces + threadIdx.x;
  for (int64_t r = blockIdx.y; r < m.rows; r += gridDim.y) {
    uint32_t q[kCopyPieces];
#pragma unroll
    for (int u = 0; u < kCopyPieces; ++u) {
      const int64_t p = p0 + u * kCopyThreads;
      q[u] = p < pieces ? __ldcs(words + r * pieces + p) : 0u;
    }
    const int64_t meta = int4_meta::packed_index(groups, r, 0);  // group g of row r: + 8 g
#pragma unroll
    for (int u = 0; u < kCopyPieces; ++u) {
      const int64_t p = p0 + u * kCopyThreads;
      if (p >= pieces) continue;
      const int64_t gi = meta + ((p * 8) >> group_shift) * int4_meta::kBlockRows;
      const __half2 scale = __half2half2(m.scales[gi]);
      // 1024 + zero and -(64 + zero) in both halves (int4_pairs; zero < 16).
      const uint32_t zero = m.zero_point ? m.zeros[gi] : quant::kInt4SymmetricZero;
      const __half2 lo_sub = bits_h2(0x64006400u | zero | (zero << 16));
      const __half2 hi_add = bits_h2(0xd400d400u | (zero << 4) | (zero << 20));
      __half2 v[4];
      int4_pairs(q[u], lo_sub, hi_add, v);
      reinterpret_cast<uint4*>(out + r * m.cols)[p] =
          make_uint4(h2_bits(__hmul2(v[0], scale)), h2_bits(__hmul2(v[1], scale)),
                     h2_bits(__hmul2(v[2], scale)), h2_bits(__hmul2(v[3], scale)));
    }
  }
}

// int8 and fp8, a scale a row: 8 codes a piece.
template <Scheme S>
__global__ void dequantize_bytes_kernel(DeviceMatrix m, __half* out) {
  static_assert(S == Scheme::int8 || S == Scheme::fp8, "int8 or fp8 codes");
  const int64_t pieces = m.cols / 8;
  const uint2* codes = static_cast<const uint2*>(m.qweight);
  const int64_t p0 = int64_t{blockIdx.x} * kCopyThreads * kCopyPieces + threadIdx.x;
  for (int64_t r = blockIdx.y; r < m.rows; r += gridDim.y) {
    uint2 q[kCopyPieces];
#pragma unroll
    for (int u = 0; u < kCopyPieces; ++u) {
      const int64_t p = p0 + u * kCopyThreads;
      q[u] = p < pieces ? __ldcs(codes + r * pieces + p) : make_uint2(0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < kCopyPieces; ++u) {
      const int64_t p = p0 + u * kCopyThreads;
      if (p >= pieces) continue;
      uint32_t h[4];
      if constexpr (S == Scheme::int8) {
        const __half2 scale = __half2half2(m.scales[r]);
        const uint32_t a = q[u].x ^ 0x80808080u, b = q[u].y ^ 0x80808080u;
        h[0] = h2_bits(__hmul2(int8x2_to_half2(a, 0x4140u), scale));
        h[1] = h2_bits(__hmul2(int8x2_to_half2(a, 0x4342u), scale));
        h[2] = h2_bits(__hmul2(int8x2_to_half2(b, 0x4140u), scale));
        h[3] = h2_bits(__hmul2(int8x2_to_half2(b, 0x4342u), scale));
      } else {  // the code's value (exact in fp16 and float) times the float scale, as quant.h
        const float scale = fp8_scales(m)[r];
        const uint32_t w[4] = {q[u].x, q[u].x >> 16, q[u].y, q[u].y >> 16};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 f = __half22float2(fp8x2_to_half2(w[j]));
          h[j] = pack_half2(f.x * scale, f.y * scale);
        }
      }
      reinterpret_cast<uint4*>(out + r * m.cols)[p] = make_uint4(h[0], h[1], h[2], h[3]);
    }
  }
}

__global__ void lora_expand_rows_kernel(LoraGroup g, const float* tmp, float* y, int64_t ldy, int64_t fused) {
  const int64_t t = blockIdx.y, row = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (row >= fused) return;
  for (int i = 0; i < g.segments; ++i) {
    const LoraSegment& seg = g.seg[i];
    const int64_t d = row - seg.offset;
    if (!seg.b || d < 0 || d % seg.stride != 0 || d / seg.stride >= seg.rows) continue;
    const __half* b = seg.b + d / seg.stride * g.rank;
    const float* x = tmp + t * int64_t{g.targets} * g.rank + seg.slot * g.rank;
    float acc = 0.f;
    for (int k = 0; k < g.rank; ++k) acc += __half2float(b[k]) * x[k];
    y[t * ldy + row] += g.scale * acc;
  }
}

}  // namespace

void lora_expand_rows(const LoraGroup& g, const float* tmp, int64_t rows, float* y, int64_t ldy,
                      cudaStream_t s) {
  int64_t fused = 0;
  for (int i = 0; i < g.segments; ++i)
    fused = std::max(fused, g.seg[i].offset + (g.seg[i].rows - 1) * g.seg[i].stride + 1);
  const dim3 grid(static_cast<unsigned>((fused + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
  lora_expand_rows_kernel<<<grid, kThreads, 0, s>>>(g, tmp, y, ldy, fused);
  CUDA_CHECK_LAUNCH();
}

void embed_rows(const DeviceMatrix& table, const int32_t* tokens, int64_t rows, float* resid,
                cudaStream_t s) {
  if (table.scheme != Scheme::fp16 || (layout_of(table) != MatrixLayout::canonical && !table.fp16_tiles))
    fail("embed_rows: the embedding is fp16, canonical or in the fp16 tiles layout");
  const int64_t hidden = table.cols;
  const __half* w = static_cast<const __half*>(table.qweight);
  const dim3 grid(static_cast<unsigned>((hidden + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
  if (table.fp16_tiles)
    embed_rows_kernel<true><<<grid, kThreads, 0, s>>>(w, hidden, tokens, resid);
  else
    embed_rows_kernel<false><<<grid, kThreads, 0, s>>>(w, hidden, tokens, resid);
  CUDA_CHECK_LAUNCH();
}

void rmsnorm_rows(const float* resid, const __half* w, float eps, int64_t rows, int64_t n, __half* out,
                  cudaStream_t s) {
  launch(rmsnorm_rows_kernel, dim3(static_cast<unsigned>(rows)), dim3(kNormThreads), 0, s, resid, w, eps, n,
         out);
}

void prefill_qkv(const PrefillQkvArgs& a, cudaStream_t s) {
  if (a.head_dim > kMaxHeadDim || a.head_dim % 2 != 0)
    fail("prefill: head_dim {} is not supported", a.head_dim);
  const auto kernel = a.kv == KvScheme::fp8    ? prefill_qkv_kernel<KvScheme::fp8>
                      : a.kv == KvScheme::int8 ? prefill_qkv_kernel<KvScheme::int8>
                                               : prefill_qkv_kernel<KvScheme::fp16>;
  kernel<<<static_cast<unsigned>(a.rows), kQkvWarps * kWarp, 0, s>>>(a);
  CUDA_CHECK_LAUNCH();
}

namespace {
template <int HD, KvScheme KV>
void launch_flash(const PrefillAttentionArgs& a, cudaStream_t s) {
  constexpr size_t smem = flash_smem<HD>();
  static bool configured = false;  // per device would be exact; decodebench runs on one
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(flash_prefill_kernel<HD, KV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    configured = true;
  }
  const dim3 grid(static_cast<unsigned>((a.rows + kBM - 1) / kBM), static_cast<unsigned>(a.heads));
  flash_prefill_kernel<HD, KV><<<grid, kFlashWarps * kWarp, smem, s>>>(a);
  CUDA_CHECK_LAUNCH();
}

template <KvScheme KV>
void launch_prefill_attention(const PrefillAttentionArgs& a, cudaStream_t s) {
  switch (a.head_dim) {
    case 32:
      return launch_flash<32, KV>(a, s);
    case 64:
      return launch_flash<64, KV>(a, s);
    case 80:
      return launch_flash<80, KV>(a, s);
    case 96:
      return launch_flash<96, KV>(a, s);
    case 128:
      return launch_flash<128, KV>(a, s);
    default:
      break;
  }
  if (a.head_dim > kMaxHeadDim) fail("prefill: head_dim {} is not supported", a.head_dim);
  const int64_t warps = a.rows * a.heads;
  const int per_block = 4;
  plain_prefill_attention_kernel<KV>
      <<<static_cast<unsigned>((warps + per_block - 1) / per_block), per_block * kWarp, 0, s>>>(a);
  CUDA_CHECK_LAUNCH();
}
}  // namespace

void prefill_attention_mma(const PrefillAttentionArgs& a, cudaStream_t s) {
  if (a.rows <= 0) return;
  switch (a.kv) {
    case KvScheme::fp16:
      return launch_prefill_attention<KvScheme::fp16>(a, s);
    case KvScheme::fp8:
      return launch_prefill_attention<KvScheme::fp8>(a, s);
    case KvScheme::int8:
      return launch_prefill_attention<KvScheme::int8>(a, s);
  }
  fail("prefill: an unknown KV cache scheme");
}

namespace {
// Rows [r0, r1) of a tiles matrix, which keeps whole tiles of 16 rows: read in place, as no
// matrix_rows cut of them starts at a multiple of 8 that is not one of 16.
void dequantize_tiles_rows(const DeviceMatrix& m, int64_t r0, int64_t r1, __half* out, cudaStream_t s) {
  if (r0 < 0 || r1 > m.rows || r0 >= r1)
    fail("dequantize_rows_to_f16: rows [{}, {}) of a matrix of {} rows", r0, r1, m.rows);
  const int64_t pieces = m.cols / 8;
  const dim3 grid(static_cast<unsigned>((pieces + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(r1 - r0, 65535)));
  if (m.int8_tiles)
    dequantize_int8_tiles_kernel<<<grid, kThreads, 0, s>>>(m, r0, r1, out);
  else if (m.fp16_tiles)
    dequantize_fp16_tiles_kernel<<<grid, kThreads, 0, s>>>(m, r0, r1, out);
  else
    dequantize_tiles_kernel<<<grid, kThreads, 0, s>>>(m, r0, r1, out);
  CUDA_CHECK_LAUNCH();
}
}  // namespace

bool prefill_attention_wgmma_built() {
#if DB_HOPPER
  return true;
#else
  return false;
#endif
}

#if !DB_HOPPER
void prefill_attention_wgmma(const PrefillAttentionArgs&, cudaStream_t, WgmmaPipeline) {
  fail("prefill_attention_wgmma: this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES without 90)");
}
bool prefill_wgmma_pipeline_built(WgmmaPipeline) {
  return false;
}
#endif

PrefillAttentionKernel prefill_attention_plan(const PrefillAttentionArgs& a) {
  static const bool force_mma = prefill_attention_force_mma(std::getenv("DECODEBENCH_PREFILL_ATTENTION"));
  int device = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return choose_prefill_attention(a.head_dim, a.kv, 10 * major + minor, prefill_attention_wgmma_built(),
                                  force_mma);
}

PrefillAttentionKernel prefill_attention(const PrefillAttentionArgs& a, cudaStream_t s) {
  const PrefillAttentionKernel k = prefill_attention_plan(a);
  if (k == PrefillAttentionKernel::wgmma)
    prefill_attention_wgmma(a, s);
  else
    prefill_attention_mma(a, s);
  return k;
}

static void dequantize_mixed_rows(const DeviceMatrix& m, int64_t r0, int64_t r1, __half* out,
                                  cudaStream_t s) {
  if (r0 < 0 || r1 > m.rows || r0 >= r1)
    fail("dequantize_rows_to_f16: rows [{}, {}) of a matrix of {} rows", r0, r1, m.rows);
  const int64_t pieces = m.cols / 8;
  const dim3 grid(static_cast<unsigned>((pieces + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(r1 - r0, 65535)));
  dequantize_mixed_kernel<<<grid, kThreads, 0, s>>>(m, r0, r1 - r0, out);
  CUDA_CHECK_LAUNCH();
}

void dequantize_any_to_f16(const DeviceMatrix& m, __half* out, cudaStream_t s) {
  if (m.mixed_wgmma) return dequantize_mixed_rows(m, 0, m.rows, out, s);
  const int64_t pieces = m.cols / 8;
  const unsigned rows = static_cast<unsigned>(std::min<int64_t>(m.rows, 65535));
  const dim3 copy_grid(
      static_cast<unsigned>((pieces + kCopyThreads * kCopyPieces - 1) / (kCopyThreads * kCopyPieces)), rows);
  if (in_tiles(m)) {
    return dequantize_tiles_rows(m, 0, m.rows, out, s);
  } else if (m.int4_frag) {
    const dim3 grid(static_cast<unsigned>((pieces + kThreads - 1) / kThreads), rows);
    dequantize_fragments_kernel<<<grid, kThreads, 0, s>>>(m, out);
  } else if (m.int4_repacked) {
    // The nibble order: whole words a row, groups of a power of two of them (fast_gemv_takes).
    const int g = m.group_size;
    if (m.cols % 8 != 0 || g < 8 || (g & (g - 1)) != 0)
      fail(
          "dequantize_any_to_f16: int4 in the nibble order needs a power-of-two group of at least 8 "
          "columns and whole words a row ([{} x {}], group {})",
          m.rows, m.cols, g);
    int shift = 0;
    while ((1 << shift) < g) ++shift;
    dequantize_nibbles_kernel<<<copy_grid, kCopyThreads, 0, s>>>(m, shift, out);
  } else if (m.scheme == Scheme::int8 && m.cols % 8 == 0) {
    dequantize_bytes_kernel<Scheme::int8><<<copy_grid, kCopyThreads, 0, s>>>(m, out);
  } else if (m.scheme == Scheme::fp8 && m.cols % 8 == 0) {
    dequantize_bytes_kernel<Scheme::fp8><<<copy_grid, kCopyThreads, 0, s>>>(m, out);
  } else {
    return dequantize_to_f16(m, out, s);
  }
  CUDA_CHECK_LAUNCH();
}

void dequantize_rows_to_f16(const DeviceMatrix& m, int64_t r0, int64_t r1, __half* out, cudaStream_t s) {
  if (in_tiles(m)) return dequantize_tiles_rows(m, r0, r1, out, s);
  // The mixed layout's rows by index, so that a block may start inside a 128-row tile.
  if (m.mixed_wgmma) return dequantize_mixed_rows(m, r0, r1, out, s);
  dequantize_any_to_f16(matrix_rows(m, r0, r1), out, s);
}

}  // namespace db::cuda
