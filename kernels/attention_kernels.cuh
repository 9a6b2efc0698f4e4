// The decode attention kernels of attention.cu (see attention.cuh) and their launchers, for the
// translation units that instantiate them: one a KV cache scheme at batch 1 (attention_fp16.cu,
// attention_fp8.cu, attention_int8.cu) and one a scheme at larger batches (attention_fp16_batch.cu
// and so on), so that a build compiles the ~300 kernel instances in six parallel parts. One block
// per (kv head, split of kAttentionChunk positions); the block's query heads share every K and V
// row it loads. Internal: only attention.cu and those six include it; the kernels' anonymous
// namespace gives each its own copy of what it uses.
#pragma once

#include "attention.cuh"
#include "common.cuh"
#include "kv_cache.cuh"
#include "norm_rope.cuh"
#include "pdl.cuh"

namespace db::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarp;
constexpr int kMaxGroup = 8;  // query heads per kv head (70B: 64 / 8)
static_assert(kAttentionChunk <= kThreads, "at most one position per thread");
static_assert(sizeof(AttentionArgs) <= 128,
              "the kernel parameter stays in the parameter space (attention.cuh)");

// Sequence blockIdx.z of a batch: its slices of qkv, of the caches (rope_positions rows
// each: the engine's cache holds as many positions as the rope table; kv_quant.h's
// sequence_bytes apart), of the partials, the counters and the output. The biases and norms
// are the model's, shared. The merge kernels, which read no cache, take KV fp16: their
// caches' pointers go unused.
template <KvScheme KV>
__device__ __forceinline__ void select_sequence(AttentionArgs& a) {
  const int64_t z = blockIdx.z;
  const int64_t q_dim = int64_t{a.heads} * a.head_dim, kv_dim = int64_t{a.kv_heads} * a.head_dim;
  a.qkv += z * (q_dim + 2 * kv_dim);
  if constexpr (KV == KvScheme::fp16) {
    a.k_cache += z * a.rope_positions * kv_dim;
    a.v_cache += z * a.rope_positions * kv_dim;
  } else {
    const int64_t bytes =
        static_cast<int64_t>(kvq::sequence_bytes(KV, a.rope_positions, a.kv_heads, a.head_dim));
    a.k_cache = reinterpret_cast<__half*>(kv_bytes(a.k_cache) + z * bytes);
    a.v_cache = reinterpret_cast<__half*>(kv_bytes(a.v_cache) + z * bytes);
  }
  a.part_o += z * a.heads * a.max_splits * a.head_dim;
  a.part_ml += z * a.heads * a.max_splits * 2;
  a.counters += z * a.kv_heads;
  a.out += z * q_dim;
}

// MAXG: the query heads per kv head rounded up to 2, 4 or 8. Every per-head loop runs MAXG
// times without a guard, the heads past G reading zero queries (their results are unused),
// so the heads' dot products interleave as independent chains. BIAS: qwen2's q/k/v biases,
// a template switch so that a model without them runs exactly the kernel it would otherwise.
// WIDE: a cache of more than kWideSplits splits; the blocks only write their partials, and
// attention_wide_merge_kernel merges them with many blocks (the last block of a kv head
// merging a thousand splits alone was most of a long-context step's attention time).
// SEQ: a batch (attention(a, s, batch) with batch > 1), sequence blockIdx.z; a template
// switch so that batch 1 runs exactly the kernel it would otherwise.
// KV: the cache's scheme. fp8 and int8 (kv_quant.h): a thread's K row is HD one-byte codes
// (HD / 16 loads of 16 bytes) and its position's K scale, which multiplies the row's dot
// products; the V rows go to shared memory as codes (cp.async, 16 bytes a piece), each
// position's V scale multiplies its softmax numerators, and P V turns two positions' codes
// into a half2 at a time. The block holding `pos` quantizes the new K and V, a warp each, and
// reads them back as every other position.
template <int HD, int MAXG, bool BIAS, bool WIDE, bool SEQ, KvScheme KV>
__global__ void __launch_bounds__(kThreads) attention_kernel(AttentionArgs a) {
  constexpr bool kQuant = KV != KvScheme::fp16;
  if constexpr (SEQ) select_sequence<KV>(a);
  constexpr int E = HD / kWarp;  // elements per lane
  // The position and the cached K and V rows (below pos) are only written by earlier steps,
  // and the step's first kernel waits for the previous step before it lets the next kernel
  // launch (step.cu): they are read before pdl_wait, so their loads overlap the QKV GEMV's
  // tail. Their writers completed before this kernel launched; pos is read through L2.
  const int pos = __ldcg(a.pos);
  const int split = blockIdx.y;
  const int start = split * kAttentionChunk;
  if (start > pos) return;
  const int n = min(pos + 1 - start, kAttentionChunk);
  const int splits = pos / kAttentionChunk + 1;
  const bool owns_pos = pos < start + n;
  const int G = a.heads / a.kv_heads;
  const int kvh = blockIdx.x;
  const int kv_dim = a.kv_heads * HD, q_dim = a.heads * HD;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const float* cosp = a.rope + static_cast<int64_t>(pos) * (HD / 2);
  const float* sinp = a.rope + (a.rope_positions + pos) * (HD / 2);

  __shared__ __align__(16) float q_s[MAXG][HD];
  __shared__ float k_new[HD];
  __shared__ float scores[MAXG][kAttentionChunk];
  __shared__ __align__(16) float probs[kAttentionChunk][MAXG];  // softmax numerators, by position
  __shared__ __align__(16) __half v_s[kAttentionChunk][HD];     // the split's V rows (HD 128: 32 KB)
  __shared__ float m_s[kMaxGroup], l_s[kMaxGroup];
  __shared__ bool last;
  // fp8, int8: the split's V codes in v_s's first half, [kAttentionChunk][HD] bytes, and each
  // position's V scale after them; the new K's codes and scale in k_new.
  uint8_t(*const v_q)[HD] = reinterpret_cast<uint8_t(*)[HD]>(&v_s[0][0]);
  float* const v_scale = reinterpret_cast<float*>(&v_s[0][0]) + kAttentionChunk * HD / 4;
  uint8_t* const k_new_q = reinterpret_cast<uint8_t*>(k_new);
  float* const k_new_scale = k_new + HD / 4;

  // 1. Issue the cached K and V loads first, before pdl_wait (they depend only on pos and
  //    earlier steps); their latency overlaps the QKV GEMV's tail and the query and new-key
  //    work below. Thread t owns position start + t and holds its whole K row: a score is
  //    one thread's dot product, no cross-lane reductions (a warp reduction per position and
  //    head made this kernel ~13 us per layer at 64 positions on H200). V goes to shared
  //    memory asynchronously (cp.async), so P V below reads V from shared memory: reading it
  //    from global memory inside the P V loop made that loop a chain of dependent round
  //    trips, ~10 us per layer at 128 positions.
  const int t = threadIdx.x;
  const bool cached = t < n && start + t != pos;
  const auto row_of = [&](int r) { return static_cast<int64_t>(start + r) * kv_dim + kvh * HD; };
  constexpr int kRowLoads = kQuant ? HD / 16 : HD / 8;  // 16-byte loads of a K or V row
  uint4 krow[kRowLoads];
  float k_scale = 0.f, v_scale_t = 0.f;  // fp8, int8: position start + t's
  if constexpr (!kQuant) {
    // K: the thread's own row, 16 bytes at a time; the loads of one row share two L1 lines,
    // so a row costs two L2 requests, not one per load.
    const uint4* src = reinterpret_cast<const uint4*>(a.k_cache + row_of(t));
#pragma unroll
    for (int p = 0; p < HD / 8; ++p) krow[p] = cached ? src[p] : make_uint4(0, 0, 0, 0);
    // V: coalesced, a warp copies whole rows (HD / 8 consecutive 16-byte pieces each), so
    // every request is a full line; a copy per thread and row sent a 16-byte request per
    // piece (8b-int8 2.372 -> 2.359 ms, 4b-int8 1.730 -> 1.670 ms).
    constexpr int kPieces = HD / 8;
    for (int i = t; i < n * kPieces; i += kThreads) {
      const int r = i / kPieces, p = i % kPieces;
      if (start + r != pos)
        cp_async16(&v_s[r][8 * p], reinterpret_cast<const uint4*>(a.v_cache + row_of(r)) + p);
    }
    cp_async_commit();
  } else {
    const uint8_t* k_cache = kv_bytes(a.k_cache);
    const uint8_t* v_cache = kv_bytes(a.v_cache);
    const int64_t scale_of_t = static_cast<int64_t>(start + t) * a.kv_heads + kvh;
    const uint4* src = reinterpret_cast<const uint4*>(k_cache + row_of(t));
#pragma unroll
    for (int p = 0; p < HD / 16; ++p) krow[p] = cached ? src[p] : make_uint4(0, 0, 0, 0);
    if (cached) {
      k_scale = kv_scales(a.k_cache, a.rope_positions, kv_dim)[scale_of_t];
      v_scale_t = kv_scales(a.v_cache, a.rope_positions, kv_dim)[scale_of_t];
    }
    constexpr int kPieces = HD / 16;
    for (int i = t; i < n * kPieces; i += kThreads) {
      const int r = i / kPieces, p = i % kPieces;
      if (start + r != pos)
        cp_async16(&v_q[r][16 * p], reinterpret_cast<const uint4*>(v_cache + row_of(r)) + p);
    }
    cp_async_commit();
  }
  // With early_launch the O GEMV's blocks may take the SM room the QKV GEMV leaves and issue
  // their weight loads under its tail. The cached K and V loads above are already queued, so
  // they do not wait behind those loads. The engine sets it for int4 O GEMVs only: 1b-int4
  // 0.542 -> 0.518 ms, 4b-int4 1.442 -> 1.430, 8b-int4 1.798 -> 1.792; int8 and fp16, whose O
  // GEMVs load two and four times the bytes, are slower with it (8b-int8 2.343 -> 2.361,
  // 8b-fp16 3.800 -> 3.828).
  if (a.early_launch) pdl_trigger();
  pdl_wait();  // pdl.cuh: qkv, the new K/V row and the counters: the kernels before write them

  // 2. Queries of this kv head's group (norm, rotate, pre-scale by 1/sqrt(hd)) and, in the
  //    block holding `pos`, the new K (norm, rotate) and V, written to the cache. One warp
  //    per vector, no block-wide barriers; every operand is loaded up front so the block
  //    pays one memory round trip here, not one per dependent step. fp8 and int8 take the
  //    new V as one more warp's vector (its quantization needs the vector's amax).
  constexpr int kNewVectors = kQuant ? 2 : 1;  // K, and V where it is quantized
  constexpr int kMaxItems = (MAXG + kNewVectors + kWarps - 1) / kWarps;
  const float scale = rsqrtf(static_cast<float>(HD));
  const int vectors = G + (owns_pos ? kNewVectors : 0);
  float cosv[E], sinv[E], qn[E], kn[E];
  float v[kMaxItems][E];
  lane_rope_operands<HD>(cosp, sinp, a.q_norm, a.k_norm, lane, cosv, sinv, qn, kn);
#pragma unroll
  for (int it = 0; it < kMaxItems; ++it) {
    const int item = warp + it * kWarps;
    const float* src = item == G ? a.qkv + q_dim + kvh * HD : a.qkv + (kvh * G + item) * HD;
    if constexpr (kQuant) {
      if (item == G + 1) src = a.qkv + q_dim + kv_dim + kvh * HD;  // V
    }
#pragma unroll
    for (int e = 0; e < E; ++e) v[it][e] = item < vectors ? src[lane * E + e] : 0.f;
    if constexpr (BIAS) {
      const __half* bias = a.qkv_bias + (src - a.qkv);
#pragma unroll
      for (int e = 0; e < E; ++e) v[it][e] += item < vectors ? __half2float(bias[lane * E + e]) : 0.f;
    }
  }
#pragma unroll
  for (int it = 0; it < kMaxItems; ++it) {
    const int item = warp + it * kWarps;
    if (item >= vectors) break;
    const bool is_k = item == G;
    if constexpr (kQuant) {
      if (item == G + 1) {  // V: codes to the cache and to the split's V rows, the scale beside
        const int64_t row = static_cast<int64_t>(pos) * kv_dim + kvh * HD;
        const float s = kv_store_warp<KV>(
            v[it], lane, kv_bytes(a.v_cache) + row, v_q[pos - start],
            kv_scales(a.v_cache, a.rope_positions, kv_dim) + int64_t{pos} * a.kv_heads + kvh);
        if (lane == 0) v_scale[pos - start] = s;
        continue;
      }
    }
    float nw[E];
#pragma unroll
    for (int e = 0; e < E; ++e) nw[e] = is_k ? kn[e] : qn[e];
    norm_rope_warp<HD>(v[it], nw, is_k ? a.k_norm != nullptr : a.q_norm != nullptr, a.eps, cosv, sinv, lane);
    if constexpr (kQuant) {
      if (is_k) {  // codes to the cache and to k_new for the score of pos, the scale beside
        const int64_t row = static_cast<int64_t>(pos) * kv_dim + kvh * HD;
        const float s = kv_store_warp<KV>(
            v[it], lane, kv_bytes(a.k_cache) + row, k_new_q,
            kv_scales(a.k_cache, a.rope_positions, kv_dim) + int64_t{pos} * a.kv_heads + kvh);
        if (lane == 0) *k_new_scale = s;
        continue;
      }
    }
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int i = lane * E + e;
      if (is_k) {
        k_new[i] = v[it][e];
        a.k_cache[static_cast<int64_t>(pos) * kv_dim + kvh * HD + i] = __float2half_rn(v[it][e]);
      } else {
        q_s[item][i] = v[it][e] * scale;
      }
    }
  }
  for (int e = threadIdx.x; e < (MAXG - G) * HD; e += kThreads) q_s[G + e / HD][e % HD] = 0.f;
  if constexpr (!kQuant) {
    if (owns_pos && threadIdx.x < HD) {
      float x = a.qkv[q_dim + kv_dim + kvh * HD + threadIdx.x];
      if constexpr (BIAS) x += __half2float(a.qkv_bias[q_dim + kv_dim + kvh * HD + threadIdx.x]);
      const __half v = __float2half_rn(x);
      a.v_cache[static_cast<int64_t>(pos) * kv_dim + kvh * HD + threadIdx.x] = v;
      v_s[pos - start][threadIdx.x] = v;
    }
  } else {
    if (cached) v_scale[t] = v_scale_t;
  }
  cp_async_wait_all();
  __syncthreads();  // q_s, k_new and every V row of the split are visible to the whole block
  // Without early_launch, the O GEMV may launch now (pdl.cuh) and issue its first weight
  // loads: only now, so that those loads do not queue in front of this block's K and V loads
  // (8b-fp16 3.886 -> 3.835 ms, 8b-int8 2.523 -> 2.493 ms against a trigger at the top,
  // with the K and V loads after the wait). With it, this second trigger changes nothing: a block's first
  // launch_dependents is the one that counts.
  pdl_trigger();

  // 3. Scores: thread t, position start + t, every query head of the group at once (MAXG
  //    independent accumulation chains: one head after another made each a serial chain of
  //    HD dependent multiply-adds, most of the kernel's time at 128 positions).
  if (t < n) {
    if constexpr (!kQuant) {
      if (start + t == pos) {
#pragma unroll
        for (int p = 0; p < HD / 8; ++p) {
          __align__(16) __half h[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) h[e] = __float2half_rn(k_new[8 * p + e]);
          krow[p] = *reinterpret_cast<const uint4*>(h);
        }
      }
    } else {
      if (start + t == pos) {
        const uint32_t* w = reinterpret_cast<const uint32_t*>(k_new_q);
#pragma unroll
        for (int p = 0; p < HD / 16; ++p)
          krow[p] = make_uint4(w[4 * p], w[4 * p + 1], w[4 * p + 2], w[4 * p + 3]);
        k_scale = *k_new_scale;
      }
    }
    float sc[MAXG];
#pragma unroll
    for (int g = 0; g < MAXG; ++g) sc[g] = 0.f;
    if constexpr (!kQuant) {
#pragma unroll
      for (int p = 0; p < HD / 8; ++p) {
        const __half2* k2 = reinterpret_cast<const __half2*>(&krow[p]);
        float k[8];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 kf = __half22float2(k2[e]);
          k[2 * e] = kf.x;
          k[2 * e + 1] = kf.y;
        }
#pragma unroll
        for (int g = 0; g < MAXG; ++g) {
          const float4 qa = *reinterpret_cast<const float4*>(&q_s[g][8 * p]);
          const float4 qb = *reinterpret_cast<const float4*>(&q_s[g][8 * p + 4]);
          sc[g] += qa.x * k[0] + qa.y * k[1] + qa.z * k[2] + qa.w * k[3] + qb.x * k[4] + qb.y * k[5] +
                   qb.z * k[6] + qb.w * k[7];
        }
      }
    } else {  // the codes' values, their dot products with the queries, then the row's scale
#pragma unroll
      for (int p = 0; p < HD / 16; ++p) {
        float k[16];
        kv_codes16<KV>(krow[p], k);
#pragma unroll
        for (int g = 0; g < MAXG; ++g) {
          const float4* q4 = reinterpret_cast<const float4*>(&q_s[g][16 * p]);
          float d = 0.f;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float4 qj = q4[j];
            d += qj.x * k[4 * j] + qj.y * k[4 * j + 1] + qj.z * k[4 * j + 2] + qj.w * k[4 * j + 3];
          }
          sc[g] += d;
        }
      }
#pragma unroll
      for (int g = 0; g < MAXG; ++g) sc[g] *= k_scale;
    }
#pragma unroll
    for (int g = 0; g < MAXG; ++g) scores[g][t] = sc[g];
  }
  __syncthreads();

  // 4. Softmax within the split: warp w handles query heads w, w + 4, ... (the padding heads
  //    past G get zero probabilities). fp8, int8: what P V multiplies is the numerator times
  //    the position's V scale; the sum is of the numerators.
  for (int g = warp; g < MAXG; g += kWarps) {
    if (g >= G) {
      for (int t = lane; t < n; t += kWarp) probs[t][g] = 0.f;
      continue;
    }
    float m = -INFINITY;
    for (int t = lane; t < n; t += kWarp) m = fmaxf(m, scores[g][t]);
    m = warp_max(m);
    float l = 0.f;
    for (int t = lane; t < n; t += kWarp) {
      const float p = expf(scores[g][t] - m);
      if constexpr (kQuant)
        probs[t][g] = p * v_scale[t];
      else
        probs[t][g] = p;
      l += p;
    }
    l = warp_sum(l);
    if (lane == 0) {
      m_s[g] = m;
      l_s[g] = l;
    }
  }
  __syncthreads();

  // 5. P V: thread i owns output element i for every query head of the group; the heads'
  //    probabilities of a position are one or two 16-byte shared-memory reads. fp8, int8:
  //    the codes of element i at two positions become one half2.
  const int i = threadIdx.x;
  float o[MAXG];
#pragma unroll
  for (int g = 0; g < MAXG; ++g) o[g] = 0.f;
  // o[g] += probs[t][g] v for the group's query heads.
  const auto accumulate = [&](int t, float v) {
    if constexpr (MAXG == 2) {
      const float2 pr = *reinterpret_cast<const float2*>(&probs[t][0]);
      o[0] += pr.x * v;
      o[1] += pr.y * v;
    } else {
#pragma unroll
      for (int g = 0; g < MAXG; g += 4) {
        const float4 pr = *reinterpret_cast<const float4*>(&probs[t][g]);
        o[g] += pr.x * v;
        o[g + 1] += pr.y * v;
        o[g + 2] += pr.z * v;
        o[g + 3] += pr.w * v;
      }
    }
  };
  if constexpr (!kQuant) {
    if (i < HD) {
#pragma unroll 8
      for (int t = 0; t < n; ++t) accumulate(t, __half2float(v_s[t][i]));
    }
  } else {
    if (i < HD) {
      int t = 0;
#pragma unroll 4
      for (; t + 1 < n; t += 2) {
        const float2 v = __half22float2(kv_codes2<KV>(v_q[t][i] | (uint32_t{v_q[t + 1][i]} << 8)));
        accumulate(t, v.x);
        accumulate(t + 1, v.y);
      }
      if (t < n) accumulate(t, kv_value<KV>(v_q[t][i]));
    }
  }

  if (splits == 1) {  // this block saw every position: no partials to merge
    if (i < HD)
      for (int g = 0; g < G; ++g) a.out[(kvh * G + g) * HD + i] = __float2half_rn(o[g] / l_s[g]);
    return;
  }
  // 6. Partials, then the last split block of this kv head merges them (log-sum-exp).
  for (int g = 0; g < G; ++g) {
    const int64_t h = kvh * G + g;
    if (i < HD) a.part_o[(h * a.max_splits + split) * HD + i] = o[g];
    if (i == 0) {
      a.part_ml[(h * a.max_splits + split) * 2] = m_s[g];
      a.part_ml[(h * a.max_splits + split) * 2 + 1] = l_s[g];
    }
  }
  if constexpr (WIDE) return;  // attention_wide_merge_kernel merges
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&a.counters[kvh], 1u) == static_cast<unsigned>(splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Merge weights: warp w takes query heads w, w + 4, ...; lane s reads split s's max and sum,
  // 32 splits a round, two rounds' loads issued together (one round trip up to 64 splits).
  for (int g = warp; g < G; g += kWarps) {
    const int64_t h = kvh * G + g;
    float M = -INFINITY, L = 0.f;
#pragma unroll 2
    for (int s0 = 0; s0 < splits; s0 += kWarp) {  // running merge over groups of 32 splits
      const int s = s0 + lane;
      const float m = s < splits ? __ldcg(&a.part_ml[(h * a.max_splits + s) * 2]) : -INFINITY;
      const float l = s < splits ? __ldcg(&a.part_ml[(h * a.max_splits + s) * 2 + 1]) : 0.f;
      const float M2 = fmaxf(M, warp_max(m));
      L = L * expf(M - M2) + warp_sum(s < splits ? l * expf(m - M2) : 0.f);
      M = M2;
    }
    if (lane == 0) {
      m_s[g] = M;
      l_s[g] = L;
    }
  }
  __syncthreads();
  // The outputs. Each split's weight exp(m - M) per head goes to shared memory once (in the V
  // rows' space, free by now). Then the block reads the splits' partial outputs as float4
  // quads: thread t takes quad t % Q of every head for splits t / Q, t / Q + J, ..., its
  // loads for 4 splits x MAXG heads in flight together, and the J partial sums of each
  // element are added through shared memory at the end: ~3 memory round trips for 8b at 4096
  // positions, where one thread per element, head by head, takes ~20 (8b-int4 at
  // --context 4096: 2.156 -> 1.994 ms).
  constexpr int Q = HD / 4;                                   // float4 quads of one head's output
  constexpr int J = kThreads / Q < 4 ? kThreads / Q : 4;      // splits summed side by side
  float4* red = reinterpret_cast<float4*>(&v_s[0][0]);        // [J][MAXG][Q]
  float* wgt = reinterpret_cast<float*>(red + J * MAXG * Q);  // [MAXG][kWgtSplits]
  constexpr int kWgtSplits = (static_cast<int>(sizeof(v_s) / sizeof(float)) - J * MAXG * HD) / MAXG;
  static_assert(kWgtSplits >= 64, "room for the weights of 64 splits at a time");
  const int q = threadIdx.x % Q, j = threadIdx.x / Q;
  float4 acc[MAXG];
#pragma unroll
  for (int g = 0; g < MAXG; ++g) acc[g] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s0 = 0; s0 < splits; s0 += kWgtSplits) {
    const int ns = min(splits - s0, kWgtSplits);
    for (int e = threadIdx.x; e < MAXG * ns; e += kThreads) {
      const int g = e / ns, s = e % ns;
      const int64_t h = kvh * G + g;
      wgt[g * kWgtSplits + s] =
          g < G ? expf(__ldcg(&a.part_ml[(h * a.max_splits + s0 + s) * 2]) - m_s[g]) : 0.f;
    }
    __syncthreads();
    if (j < J) {
#pragma unroll 4
      for (int s = j; s < ns; s += J) {
#pragma unroll
        for (int g = 0; g < MAXG; ++g) {  // heads past G: weight 0 against a real head's row
          const int64_t h = kvh * G + min(g, G - 1);
          const float w = wgt[g * kWgtSplits + s];
          const float4 o =
              __ldcg(reinterpret_cast<const float4*>(a.part_o + (h * a.max_splits + s0 + s) * HD) + q);
          acc[g].x += w * o.x;
          acc[g].y += w * o.y;
          acc[g].z += w * o.z;
          acc[g].w += w * o.w;
        }
      }
    }
    __syncthreads();  // wgt is rewritten by the next chunk of splits
  }
  if (j < J) {
#pragma unroll
    for (int g = 0; g < MAXG; ++g) red[(j * MAXG + g) * Q + q] = acc[g];
  }
  __syncthreads();
  if (i < HD) {
    const float* r = reinterpret_cast<const float*>(red);
#pragma unroll
    for (int g = 0; g < MAXG; ++g) {
      if (g >= G) break;
      float sum = 0.f;
#pragma unroll
      for (int jj = 0; jj < J; ++jj) sum += r[(jj * MAXG + g) * HD + i];
      a.out[(kvh * G + g) * HD + i] = __float2half_rn(sum / l_s[g]);
    }
  }
  if (threadIdx.x == 0) a.counters[kvh] = 0;  // ready for the next layer
}

// Every other head size (a multiple of 8 up to kMaxAnyHeadDim) and any number of query
// heads per kv head: one block per (query head, split), the queries' K and V rows read from
// global memory, the splits merged by a second kernel. A plain kernel where the fast one's
// layout (one position per thread holding a whole K row, lane l ^ 16 as RoPE's partner)
// does not fit; the head sizes of the models in the presets take the fast path.
constexpr int kMaxAnyHeadDim = 256;

__device__ __forceinline__ float block_max(float v, float* scratch /* [32] */) {
  v = warp_max(v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kWarps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// Norm (qwen3) and RoPE of one head vector in shared memory, in place; every thread of the
// block takes part. kMaxAnyHeadDim / kThreads elements a thread.
__device__ void norm_rope_block(float* x, const __half* norm_w, float eps, const float* cosp,
                                const float* sinp, int hd, float* scratch) {
  constexpr int kPer = kMaxAnyHeadDim / kThreads;
  if (norm_w) {
    float ss = 0.f;
    for (int i = threadIdx.x; i < hd; i += kThreads) ss += x[i] * x[i];
    const float inv = rsqrtf(block_sum(ss, scratch) / hd + eps);
    for (int i = threadIdx.x; i < hd; i += kThreads) x[i] = x[i] * inv * __half2float(norm_w[i]);
    __syncthreads();
  }
  const int half = hd / 2;
  float r[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < hd) {
      const int j = i < half ? i : i - half;
      r[k] = i < half ? x[i] * cosp[j] - x[i + half] * sinp[j] : x[i] * cosp[j] + x[i - half] * sinp[j];
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < hd) x[i] = r[k];
  }
  __syncthreads();
}

// KV fp8, int8: every block of a group quantizes the new K and V itself (the same codes: the
// same inputs and arithmetic), the group's first writes them; a K row is read 16 codes a load
// (8 where head_dim is not a multiple of 16, the row then 8-byte aligned), its dot product
// times the row's scale; each position's V scale multiplies its softmax numerator.
template <bool SEQ, KvScheme KV>
__global__ void __launch_bounds__(kThreads) attention_any_kernel(AttentionArgs a) {
  constexpr bool kQuant = KV != KvScheme::fp16;
  if constexpr (SEQ) select_sequence<KV>(a);
  const int pos = __ldcg(a.pos);
  const int split = blockIdx.y;
  const int start = split * kAttentionChunk;
  if (start > pos) return;
  const int n = min(pos + 1 - start, kAttentionChunk);
  const int splits = pos / kAttentionChunk + 1;
  const bool owns_pos = pos < start + n;
  const int hd = a.head_dim, h = blockIdx.x, G = a.heads / a.kv_heads, kvh = h / G;
  const int64_t kv_dim = static_cast<int64_t>(a.kv_heads) * hd, q_dim = static_cast<int64_t>(a.heads) * hd;
  const float* cosp = a.rope + static_cast<int64_t>(pos) * (hd / 2);
  const float* sinp = a.rope + (a.rope_positions + pos) * (hd / 2);
  const auto qkv = [&](int64_t i) { return a.qkv[i] + (a.qkv_bias ? __half2float(a.qkv_bias[i]) : 0.f); };

  __shared__ __align__(16) float q_s[kMaxAnyHeadDim];
  __shared__ __align__(16) float k_s[kMaxAnyHeadDim];  // the new token's K
  __shared__ float p_s[kAttentionChunk];
  __shared__ float scratch[kWarp];
  // fp8, int8: the new token's V; then the new K's and V's codes' values (in k_s, v_new) and
  // their scales.
  __shared__ float v_new[kQuant ? kMaxAnyHeadDim : 1];
  __shared__ float new_scale[2];
  pdl_wait();  // pdl.cuh: qkv and the caches' earlier rows

  for (int i = threadIdx.x; i < hd; i += kThreads) {
    q_s[i] = qkv(h * hd + i);
    if (owns_pos) k_s[i] = qkv(q_dim + kvh * hd + i);
    if constexpr (kQuant) {
      if (owns_pos) v_new[i] = qkv(q_dim + kv_dim + kvh * hd + i);
    }
  }
  __syncthreads();
  norm_rope_block(q_s, a.q_norm, a.eps, cosp, sinp, hd, scratch);
  if (owns_pos) {
    norm_rope_block(k_s, a.k_norm, a.eps, cosp, sinp, hd, scratch);
    if constexpr (!kQuant) {
      if (h % G == 0) {  // one query head of the group writes the new K and V rows
        for (int i = threadIdx.x; i < hd; i += kThreads) {
          a.k_cache[pos * kv_dim + kvh * hd + i] = __float2half_rn(k_s[i]);
          a.v_cache[pos * kv_dim + kvh * hd + i] = __float2half_rn(qkv(q_dim + kv_dim + kvh * hd + i));
        }
      }
    } else {
      float ka = 0.f, va = 0.f;
      for (int i = threadIdx.x; i < hd; i += kThreads) {
        ka = fmaxf(ka, fabsf(k_s[i]));
        va = fmaxf(va, fabsf(v_new[i]));
      }
      const float ks = kvq::scale_of(block_max(ka, scratch), KV);
      const float vs = kvq::scale_of(block_max(va, scratch), KV);
      const bool writes = h % G == 0;  // one query head of the group writes the new K and V rows
      uint8_t* k_codes = kv_bytes(a.k_cache) + pos * kv_dim + kvh * hd;
      uint8_t* v_codes = kv_bytes(a.v_cache) + pos * kv_dim + kvh * hd;
      for (int i = threadIdx.x; i < hd; i += kThreads) {
        const uint8_t kq = kv_quantize<KV>(k_s[i], ks), vq = kv_quantize<KV>(v_new[i], vs);
        if (writes) {
          k_codes[i] = kq;
          v_codes[i] = vq;
        }
        k_s[i] = kv_value<KV>(kq);
        v_new[i] = kv_value<KV>(vq);
      }
      if (threadIdx.x == 0) {
        if (writes) {
          kv_scales(a.k_cache, a.rope_positions, kv_dim)[int64_t{pos} * a.kv_heads + kvh] = ks;
          kv_scales(a.v_cache, a.rope_positions, kv_dim)[int64_t{pos} * a.kv_heads + kvh] = vs;
        }
        new_scale[0] = ks;
        new_scale[1] = vs;
      }
      __syncthreads();  // k_s, v_new and new_scale for every thread
    }
  }
  const float scale = rsqrtf(static_cast<float>(hd));

  // Scores: thread t, position start + t, 8 halves (16 bytes) of its K row at a time.
  float m = -INFINITY;
  const int t = threadIdx.x;
  float v_scale = 1.f;  // fp8, int8: position start + t's
  if (t < n) {
    const int p = start + t;
    float sc = 0.f;
    if constexpr (!kQuant) {
      if (p == pos) {
        for (int i = 0; i < hd; ++i) sc += q_s[i] * __half2float(__float2half_rn(k_s[i]));
      } else {
        const uint4* row = reinterpret_cast<const uint4*>(a.k_cache + p * kv_dim + kvh * hd);
        for (int c = 0; c < hd / 8; ++c) {
          const uint4 u = row[c];
          const __half2* k2 = reinterpret_cast<const __half2*>(&u);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 kf = __half22float2(k2[e]);
            sc += q_s[8 * c + 2 * e] * kf.x + q_s[8 * c + 2 * e + 1] * kf.y;
          }
        }
      }
    } else {
      if (p == pos) {
        for (int i = 0; i < hd; ++i) sc += q_s[i] * k_s[i];
        sc *= new_scale[0];
        v_scale = new_scale[1];
      } else {
        const uint8_t* row = kv_bytes(a.k_cache) + p * kv_dim + kvh * hd;
        if (hd % 16 == 0) {
          for (int c = 0; c < hd / 16; ++c) {
            float k[16];
            kv_codes16<KV>(reinterpret_cast<const uint4*>(row)[c], k);
#pragma unroll
            for (int e = 0; e < 16; ++e) sc += q_s[16 * c + e] * k[e];
          }
        } else {
          for (int c = 0; c < hd / 8; ++c) {
            const uint2 u = reinterpret_cast<const uint2*>(row)[c];
            __half2 k2[4];
            kv_codes4<KV>(u.x, k2[0], k2[1]);
            kv_codes4<KV>(u.y, k2[2], k2[3]);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const float2 kf = __half22float2(k2[e]);
              sc += q_s[8 * c + 2 * e] * kf.x + q_s[8 * c + 2 * e + 1] * kf.y;
            }
          }
        }
        const int64_t si = int64_t{p} * a.kv_heads + kvh;
        sc *= kv_scales(a.k_cache, a.rope_positions, kv_dim)[si];
        v_scale = kv_scales(a.v_cache, a.rope_positions, kv_dim)[si];
      }
    }
    m = sc * scale;
    p_s[t] = m;
  }
  m = block_max(m, scratch);
  float l = 0.f;
  if (t < n) {
    const float e = expf(p_s[t] - m);
    if constexpr (kQuant)
      p_s[t] = e * v_scale;
    else
      p_s[t] = e;
    l = e;
  }
  l = block_sum(l, scratch);  // its barriers make p_s visible to every thread

  // P V: thread i owns output elements i, i + kThreads.
  for (int i = threadIdx.x; i < hd; i += kThreads) {
    float o = 0.f;
    for (int r = 0; r < n; ++r) {
      const int p = start + r;
      float v;
      if constexpr (!kQuant)
        v = p == pos ? __half2float(__float2half_rn(qkv(q_dim + kv_dim + kvh * hd + i)))
                     : __half2float(a.v_cache[p * kv_dim + kvh * hd + i]);
      else
        v = p == pos ? v_new[i] : kv_value<KV>(kv_bytes(a.v_cache)[p * kv_dim + kvh * hd + i]);
      o += p_s[r] * v;
    }
    if (splits == 1)
      a.out[h * hd + i] = __float2half_rn(o / l);
    else
      a.part_o[(static_cast<int64_t>(h) * a.max_splits + split) * hd + i] = o;
  }
  if (splits > 1 && threadIdx.x == 0) {
    a.part_ml[(static_cast<int64_t>(h) * a.max_splits + split) * 2] = m;
    a.part_ml[(static_cast<int64_t>(h) * a.max_splits + split) * 2 + 1] = l;
  }
}

// The splits of attention_any_kernel merged (log-sum-exp): one block per query head.
template <bool SEQ>
__global__ void __launch_bounds__(kThreads) attention_any_merge_kernel(AttentionArgs a) {
  if constexpr (SEQ) select_sequence<KvScheme::fp16>(a);
  pdl_wait();
  const int splits = __ldcg(a.pos) / kAttentionChunk + 1;
  if (splits == 1) return;  // the attention kernel wrote the output
  const int64_t h = blockIdx.x;
  __shared__ float scratch[kWarp];
  float mx = -INFINITY;
  for (int s = threadIdx.x; s < splits; s += kThreads) mx = fmaxf(mx, a.part_ml[(h * a.max_splits + s) * 2]);
  const float M = block_max(mx, scratch);
  float sum = 0.f;
  for (int s = threadIdx.x; s < splits; s += kThreads)
    sum += a.part_ml[(h * a.max_splits + s) * 2 + 1] * expf(a.part_ml[(h * a.max_splits + s) * 2] - M);
  const float L = block_sum(sum, scratch);
  for (int i = threadIdx.x; i < a.head_dim; i += kThreads) {
    float o = 0.f;
    for (int s = 0; s < splits; ++s)
      o +=
          a.part_o[(h * a.max_splits + s) * a.head_dim + i] * expf(a.part_ml[(h * a.max_splits + s) * 2] - M);
    a.out[h * a.head_dim + i] = __float2half_rn(o / L);
  }
}

// The partials of many splits merged by log-sum-exp: one block per (query head, 32 output
// elements), its warps taking every kWideWarps-th split, so the loads of 16 splits are in
// flight at once in each of heads x HD / 32 blocks.
constexpr int kWideWarps = 16;

template <bool SEQ>
__global__ void __launch_bounds__(kWideWarps* kWarp) attention_wide_merge_kernel(AttentionArgs a) {
  if constexpr (SEQ) select_sequence<KvScheme::fp16>(a);
  pdl_wait();  // the partials
  const int splits = __ldcg(a.pos) / kAttentionChunk + 1;
  if (splits == 1) return;  // the attention kernel wrote the output
  __shared__ float scratch[kWarp];
  __shared__ float red[kWideWarps][kWarp];
  const int64_t h = blockIdx.x;
  const float* ml = a.part_ml + h * a.max_splits * 2;
  float mx = -INFINITY;
  for (int s = threadIdx.x; s < splits; s += blockDim.x) mx = fmaxf(mx, __ldcg(ml + 2 * s));
  const float M = block_max(mx, scratch);
  float sum = 0.f;
  for (int s = threadIdx.x; s < splits; s += blockDim.x)
    sum += __ldcg(ml + 2 * s + 1) * expf(__ldcg(ml + 2 * s) - M);
  const float L = block_sum(sum, scratch);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int i = blockIdx.y * kWarp + lane;  // the output element
  const float* po = a.part_o + h * a.max_splits * a.head_dim + i;
  float o = 0.f;
#pragma unroll 8
  for (int s = warp; s < splits; s += kWideWarps)
    o += __ldcg(po + int64_t{s} * a.head_dim) * expf(__ldcg(ml + 2 * s) - M);
  red[warp][lane] = o;
  __syncthreads();
  if (warp != 0) return;
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kWideWarps; ++w) total += red[w][lane];
  a.out[h * a.head_dim + i] = __float2half_rn(total / L);
}

// The launchers: grid.z is the batch, one sequence a z index (SEQ where batch > 1); KV the
// cache's scheme.
template <bool SEQ, KvScheme KV>
void launch_any(const AttentionArgs& a, cudaStream_t s, int batch) {
  if (a.head_dim % 8 != 0 || a.head_dim < 8 || a.head_dim > kMaxAnyHeadDim)
    fail("attention: head_dim {} is not supported (a multiple of 8 up to {})", a.head_dim, kMaxAnyHeadDim);
  launch(attention_any_kernel<SEQ, KV>, dim3(a.heads, a.max_splits, batch), kThreads, 0, s, a);
  launch(attention_any_merge_kernel<SEQ>, dim3(a.heads, 1, batch), kThreads, 0, s, a);
}

template <int MAXG, bool BIAS, bool WIDE, bool SEQ, KvScheme KV>
void launch_hd(const AttentionArgs& a, cudaStream_t s, int batch) {
  const dim3 grid(a.kv_heads, a.max_splits, batch);
  switch (a.head_dim) {
    case 32:
      return launch(attention_kernel<32, MAXG, BIAS, WIDE, SEQ, KV>, grid, kThreads, 0, s, a);
    case 64:
      return launch(attention_kernel<64, MAXG, BIAS, WIDE, SEQ, KV>, grid, kThreads, 0, s, a);
    case 96:
      return launch(attention_kernel<96, MAXG, BIAS, WIDE, SEQ, KV>, grid, kThreads, 0, s, a);
    case 128:
      return launch(attention_kernel<128, MAXG, BIAS, WIDE, SEQ, KV>, grid, kThreads, 0, s, a);
  }
  launch_any<SEQ, KV>(a, s, batch);
}

// A cache of more than kWideSplits splits (8192 positions) merges in a kernel of its own.
constexpr int kWideSplits = 64;

template <int MAXG, bool BIAS, bool SEQ, KvScheme KV>
void launch_split(const AttentionArgs& a, cudaStream_t s, int batch) {
  if (a.max_splits <= kWideSplits || !attention_fast_path(a.head_dim, a.heads, a.kv_heads))
    return launch_hd<MAXG, BIAS, false, SEQ, KV>(
        a, s, batch);  // the plain kernel merges in a kernel of its own already
  launch_hd<MAXG, BIAS, true, SEQ, KV>(a, s, batch);
  launch(attention_wide_merge_kernel<SEQ>, dim3(a.heads, a.head_dim / kWarp, batch), kWideWarps * kWarp, 0, s,
         a);
}

template <int MAXG, bool SEQ, KvScheme KV>
void launch_group(const AttentionArgs& a, cudaStream_t s, int batch) {
  if (a.qkv_bias) return launch_split<MAXG, true, SEQ, KV>(a, s, batch);
  launch_split<MAXG, false, SEQ, KV>(a, s, batch);
}

template <bool SEQ, KvScheme KV>
void launch_batch(const AttentionArgs& a, cudaStream_t s, int batch) {
  const int group = a.heads / a.kv_heads;
  if (group > kMaxGroup) return launch_any<SEQ, KV>(a, s, batch);
  if (group <= 2) return launch_group<2, SEQ, KV>(a, s, batch);
  if (group <= 4) return launch_group<4, SEQ, KV>(a, s, batch);
  launch_group<8, SEQ, KV>(a, s, batch);
}

}  // namespace

// attention() for one KV cache scheme at batch 1 (launch_batch<false, KV>) and at a batch of
// more than one sequence (launch_batch<true, KV>), each defined in its own translation unit.
void attention_launch_fp16(const AttentionArgs& a, cudaStream_t s);
void attention_launch_fp8(const AttentionArgs& a, cudaStream_t s);
void attention_launch_int8(const AttentionArgs& a, cudaStream_t s);
void attention_launch_fp16_batch(const AttentionArgs& a, cudaStream_t s, int batch);
void attention_launch_fp8_batch(const AttentionArgs& a, cudaStream_t s, int batch);
void attention_launch_int8_batch(const AttentionArgs& a, cudaStream_t s, int batch);

}  // namespace db::cuda
