// The CUDA engine's activations, scratch and step state (Engine::Buffers), shared by the
// files that enqueue its steps (engine.cu, engine_batch.cu).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "engine.cuh"

namespace db::cuda {

struct Engine::Buffers {
  // At --batch B > 1 the activations hold a row per sequence: [B, ...] where [...] is their
  // shape at batch 1.
  float* resid = nullptr;                    // [hidden] the residual stream
  float* qkv = nullptr;                      // [q_dim + 2 kv_dim]
  __half* attn = nullptr;                    // [q_dim]
  __half* act = nullptr;                     // [intermediate]
  float* logits = nullptr;                   // [vocab]
  __half* xnorm = nullptr;                   // [max input dim] (cuBLAS paths; every linear's input at B > 1)
  float* gate_up = nullptr;                  // [2 intermediate] (cuBLAS paths, and B > 1)
  __half* dequant = nullptr;                 // an fp16 copy: a whole matrix, or 2 blocks of its rows
  float* rope = nullptr;                     // rope_table(positions)
  float* part_o = nullptr;                   // [B, heads, max_splits, head_dim]
  float* part_ml = nullptr;                  // [B, heads, max_splits, 2]
  unsigned* counters = nullptr;              // [B, kv_heads]
  __half* resid_h = nullptr;                 // [hidden]: resid's fp16 copy, where every writer keeps it
  int32_t* state = nullptr;                  // token [B], pos, first_pos
  int32_t* tokens_out = nullptr;             // [B, positions]
  unsigned long long* key = nullptr;         // [B]
  unsigned long long* norm_stats = nullptr;  // [2 L + 1][kNormSlots]: per RMSNorm, its input's sum of squares
  void* cublas_workspace = nullptr;
  void* skinny_workspace = nullptr;  // B > 1: gemm_skinny's, zeroed once (skinny.cuh)
  void* mixed_workspace = nullptr;   // B > 1: gemm_mixed's, zeroed once (mixed_gemm.cuh)
  float* lora_rows = nullptr;        // B > 1, an external adapter: [B, 3 rank], a shrink's rows
  int max_splits = 0;
};

}  // namespace db::cuda
