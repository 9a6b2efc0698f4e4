// Decode attention for one query token over the KV cache (GQA), with RoPE, the qwen3 q/k
// norms, the qwen2 q/k/v biases and the KV write of the new token fused in, split over the
// KV length (flash-decoding) with the splits merged by the last block to finish.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "decodebench/config.h"

namespace db::cuda {

// 128 bytes, no more: a larger kernel parameter makes nvcc copy it to local memory and read
// every field from there, which changes every attention kernel (hence eps and early_launch
// between the ints and the pointers, where the padding was).
struct AttentionArgs {
  const float* qkv = nullptr;      // [q_dim + 2 kv_dim]: the QKV GEMV output, before norm and RoPE
  const __half* q_norm = nullptr;  // [head_dim] (qwen3), or null
  const __half* k_norm = nullptr;
  const float* rope = nullptr;  // rope_table(): [positions, hd/2] cos, then [positions, hd/2] sin
  int64_t rope_positions = 0;
  // This layer's cache of `rope_positions` rows in the scheme attention() is given, laid out as
  // decodebench/kv_quant.h says: fp16 [positions, kv_dim] halves; fp8 and int8 [positions,
  // kv_dim] one-byte codes, then [positions, kv_heads] float scales, which the kernels of those
  // schemes reach through a byte pointer (kv_bytes). Typed as fp16's: with a void* or byte
  // pointer here (or a union), nvcc compiles the fp16 kernels to different code.
  __half* k_cache = nullptr;
  __half* v_cache = nullptr;
  const int32_t* pos = nullptr;  // device: the position of this token
  int heads = 0, kv_heads = 0, head_dim = 0;
  int max_splits = 0;  // splits of kAttentionChunk positions the grid holds
  float eps = 0.f;     // the q/k norms'
  // Let the next kernel (the O GEMV) launch as soon as this one has issued its cached K and V
  // loads, instead of after the queries are ready (attention.cu, step 2).
  bool early_launch = false;
  float* part_o = nullptr;           // [heads, max_splits, head_dim]
  float* part_ml = nullptr;          // [heads, max_splits, 2]: running max and sum
  unsigned int* counters = nullptr;  // [kv_heads], zero between launches
  __half* out = nullptr;             // [heads * head_dim]
  const __half* qkv_bias = nullptr;  // [q_dim + 2 kv_dim] (qwen2: q/k/v biases), or null; added to qkv
};

constexpr int kAttentionChunk = 128;  // positions per block: one per thread

int attention_splits(int64_t positions);
// Whether attention() takes the fast kernel (head_dim 32, 64, 96 or 128, at most 8 query
// heads per kv head); any other head_dim that is a multiple of 8 up to 256, and any group,
// takes a plain kernel and a merge kernel.
bool attention_fast_path(int head_dim, int heads, int kv_heads);
// `batch` sequences at once (--batch), one grid z index each, all at position *pos: every
// pointer of `a` but the model's (rope, q_norm, k_norm, qkv_bias) is sequence 0's, and
// sequence z's lies at a fixed stride from it: qkv + z (q_dim + 2 kv_dim), the caches
// + z kvq::sequence_bytes(kv, rope_positions, kv_heads, head_dim) bytes (each sequence's cache
// holds rope_positions rows), part_o + z heads max_splits head_dim, part_ml + z heads
// max_splits 2, counters + z kv_heads, out + z q_dim. No field of its own: one more int would
// take AttentionArgs past 128 bytes. Batch 1 runs the kernels it always has.
// `kv`: the cache's scheme, a template switch of every kernel that reads or writes the cache
// (a launch argument for the same reason). fp8 and int8 quantize the new token's K and V
// vectors where they are written (kv_quant.h) and read every position back as codes times
// scale; fp16 runs the kernels it always has.
void attention(const AttentionArgs& a, cudaStream_t s, int batch, KvScheme kv);

}  // namespace db::cuda
