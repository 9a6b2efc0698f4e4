// One decode attention layer on the GPU for the lab's attention tools (attention_bench.cu,
// attention_trace.cu): a KV cache of `positions` rows in a scheme, filled with deterministic
// values, the step's qkv, RoPE table, partials and counters, AttentionArgs pointing at them
// for the step at the last position.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention.cuh"
#include "common.cuh"
#include "decodebench/kv_quant.h"

namespace db::cuda::lab {

struct Shape {
  const char* name;
  int heads, kv_heads, head_dim;
};

// Deterministic values: fp16 in [-1, 1), or 8-bit codes (finite E4M3 / int8) with scale 1/64.
__device__ __forceinline__ uint32_t hash(uint64_t i) {
  uint64_t z = i * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  return static_cast<uint32_t>(z ^ (z >> 31));
}

__global__ void fill_cache(unsigned char* c, int64_t positions, int64_t kv_dim, int kv_heads, int kv,
                           uint64_t seed) {
  const int64_t n = positions * kv_dim;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t h = hash(seed + i);
    if (kv == 0)
      reinterpret_cast<__half*>(c)[i] = __float2half_rn((h & 0xffff) / 32768.f - 1.f);
    else
      c[i] = static_cast<unsigned char>(h & 0x77);  // E4M3 without NaN; int8 0..119
  }
  if (kv != 0)
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < positions * kv_heads;
         i += int64_t{gridDim.x} * blockDim.x)
      reinterpret_cast<float*>(c + n)[i] = 1.f / 64;
}

__global__ void fill_floats(float* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    p[i] = (hash(seed + i) & 0xffff) / 32768.f - 1.f;
}

// rope_table's layout: [positions, hd/2] cos, then sin.
__global__ void fill_rope(float* r, int64_t positions, int hd) {
  const int h = hd / 2;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < positions * h;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float a = static_cast<float>(i / h) * powf(500000.f, -2.f * static_cast<float>(i % h) / hd);
    r[i] = cosf(a);
    r[positions * h + i] = sinf(a);
  }
}

inline void* alloc(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
  return p;
}

struct Layer {
  AttentionArgs a;
  std::vector<void*> owned;
  Layer(const Shape& sh, int64_t positions, KvScheme kv) {
    const int64_t kv_dim = int64_t{sh.kv_heads} * sh.head_dim, q_dim = int64_t{sh.heads} * sh.head_dim;
    const uint64_t cache = kvq::sequence_bytes(kv, positions, sh.kv_heads, sh.head_dim);
    auto take = [&](size_t bytes) {
      owned.push_back(alloc(bytes));
      return owned.back();
    };
    a.k_cache = static_cast<__half*>(take(cache));
    a.v_cache = static_cast<__half*>(take(cache));
    const int kind = kv == KvScheme::fp16 ? 0 : 1;
    fill_cache<<<1024, 256>>>(reinterpret_cast<unsigned char*>(a.k_cache), positions, kv_dim, sh.kv_heads,
                              kind, 1);
    fill_cache<<<1024, 256>>>(reinterpret_cast<unsigned char*>(a.v_cache), positions, kv_dim, sh.kv_heads,
                              kind, 2);
    CUDA_CHECK_LAUNCH();
    float* qkv = static_cast<float*>(take(4 * (q_dim + 2 * kv_dim)));
    fill_floats<<<64, 256>>>(qkv, q_dim + 2 * kv_dim, 3);
    float* rope = static_cast<float*>(take(4ull * positions * sh.head_dim));
    fill_rope<<<1024, 256>>>(rope, positions, sh.head_dim);
    CUDA_CHECK_LAUNCH();
    a.qkv = qkv;
    a.rope = rope;
    a.rope_positions = positions;
    a.heads = sh.heads;
    a.kv_heads = sh.kv_heads;
    a.head_dim = sh.head_dim;
    a.max_splits = attention_splits(positions);
    a.part_o = static_cast<float*>(take(4ull * sh.heads * a.max_splits * sh.head_dim));
    a.part_ml = static_cast<float*>(take(4ull * sh.heads * a.max_splits * 2));
    a.counters = static_cast<unsigned*>(take(4 * sh.kv_heads));
    CUDA_CHECK(cudaMemset(a.counters, 0, 4 * sh.kv_heads));
    a.out = static_cast<__half*>(take(2 * q_dim));
    int32_t* pos = static_cast<int32_t*>(take(4));
    const int32_t last = static_cast<int32_t>(positions - 1);
    CUDA_CHECK(cudaMemcpy(pos, &last, 4, cudaMemcpyHostToDevice));
    a.pos = pos;
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  Layer(Layer&&) = delete;
  ~Layer() {
    for (void* p : owned) cudaFree(p);
  }
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;
};

}  // namespace db::cuda::lab
