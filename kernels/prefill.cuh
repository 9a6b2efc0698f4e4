// The kernels of the batched prefill (src/cuda/engine_prefill.cu): a chunk of prompt tokens
// goes through each layer at once, its linears as cuBLAS GEMMs and these kernels between
// them: the embedding rows, RMSNorm by row, the chunk's q/k/v (bias, q/k norm, RoPE, the K
// and V rows written to the cache) and causal attention of the chunk's queries over the
// cache on the tensor cores.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "decodebench/config.h"
#include "gemv.cuh"
#include "lora.cuh"
#include "prefill_attention_plan.h"

namespace db::cuda {

// resid[t, :] = embedding[tokens[t], :] for t < rows: the fp16 table [vocab, hidden] in the
// canonical layout or, a tied lm_head's, in the fp16 tiles layout (table.fp16_tiles).
void embed_rows(const DeviceMatrix& table, const int32_t* tokens, int64_t rows, float* resid, cudaStream_t s);

// out[t, :] = fp16(resid[t, :] / rms(resid[t, :]) * w), as the decode step's RMSNorm.
void rmsnorm_rows(const float* resid, const __half* w, float eps, int64_t rows, int64_t n, __half* out,
                  cudaStream_t s);

struct PrefillQkvArgs {
  const float* qkv = nullptr;        // [rows, q_dim + 2 kv_dim]: the QKV GEMM's output
  const __half* qkv_bias = nullptr;  // [q_dim + 2 kv_dim] (qwen2), or null
  const __half* q_norm = nullptr;    // [head_dim] (qwen3), or null
  const __half* k_norm = nullptr;
  float eps = 0.f;
  const float* rope = nullptr;  // rope_table(): [positions, hd/2] cos, then [positions, hd/2] sin
  int64_t rope_positions = 0;
  int64_t p0 = 0;  // position of row 0
  int64_t rows = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  __half* q = nullptr;  // [rows, q_dim]: the queries after norm and RoPE, times 1/sqrt(head_dim)
  // One sequence's cache of `cache_positions` rows in scheme `kv`, laid out as
  // decodebench/kv_quant.h says (fp8, int8: codes, then scales, reached as bytes); rows p0 ..
  // p0 + rows - 1 are written, fp8's and int8's each (token, kv head) vector quantized with a
  // warp as the decode step does.
  __half* k_cache = nullptr;
  __half* v_cache = nullptr;
  int64_t cache_positions = 0;
  KvScheme kv = KvScheme::fp16;
};
// The decode attention's prologue (attention_kernels.cuh) for every row of the chunk at once.
void prefill_qkv(const PrefillQkvArgs& a, cudaStream_t s);

struct PrefillAttentionArgs {
  const __half* q = nullptr;  // [rows, q_dim], as prefill_qkv leaves it
  // The cache as PrefillQkvArgs's; fp8's and int8's positions are read back as codes times
  // scale, as the decode step reads them.
  const __half* k_cache = nullptr;
  const __half* v_cache = nullptr;
  int64_t p0 = 0;  // row t is the query at position p0 + t; it attends to positions 0 .. p0 + t
  int64_t rows = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  __half* out = nullptr;  // [rows, q_dim]
  int64_t cache_positions = 0;
  KvScheme kv = KvScheme::fp16;
};
// The causal attention of a chunk (O [rows, q_dim]) with the kernel the plan picks
// (prefill_attention_plan.h) on this GPU, this build and DECODEBENCH_PREFILL_ATTENTION: Hopper's
// wgmma kernel for an fp16 cache with 128-dim heads on compute capability 9.0 where the build
// has it, else prefill_attention_mma's. Returns the kernel it ran.
PrefillAttentionKernel prefill_attention(const PrefillAttentionArgs& a, cudaStream_t s);
// The kernel prefill_attention() runs for these arguments here.
PrefillAttentionKernel prefill_attention_plan(const PrefillAttentionArgs& a);
// The mma.sync kernel (head sizes 32, 64, 80, 96, 128, every cache scheme), or for other head
// sizes the plain one (one warp per query and head).
void prefill_attention_mma(const PrefillAttentionArgs& a, cudaStream_t s);
// Hopper's kernel (prefill_wgmma.cu: wgmma, TMA, a warp-specialised ring): an fp16 cache, head_dim
// 128, a compute capability 9.0 GPU. In builds without sm_90a code (CMAKE_CUDA_ARCHITECTURES
// without 90) it is not compiled: prefill_attention_wgmma_built() is false and calling it fails.
// Its pipelines: overlap, the one prefill_attention() runs (the next key tile's S = Q K^T in
// flight during this tile's softmax, three stages of K and V); serial, a lab variant built with
// -DDECODEBENCH_DEV=ON only (each wgmma batch waited for, two stages), for the bench's comparison.
enum class WgmmaPipeline { overlap, serial };
void prefill_attention_wgmma(const PrefillAttentionArgs& a, cudaStream_t s,
                             WgmmaPipeline pipeline = WgmmaPipeline::overlap);
bool prefill_attention_wgmma_built();
// Whether this build has the pipeline (serial: DEV builds).
bool prefill_wgmma_pipeline_built(WgmmaPipeline p);

// An external LoRA adapter on a chunk: y[t, fused row] += g.scale * B t_t for every row of
// an adapted linear of the group, where t_t = tmp[t, :] is row t of the shrink X A^T
// ([rows, targets * rank], a GEMM) and y is the base GEMM's float output (ldy per row).
void lora_expand_rows(const LoraGroup& g, const float* tmp, int64_t rows, float* y, int64_t ldy,
                      cudaStream_t s);

// fp16 copy [rows, cols] of a matrix in the layout its kernel reads: int4 in the repacked
// nibble order or the tensor-core fragment layout (with the packed meta) or the tiles layout
// (with its meta words), int4 and int8 in the mixed-wgmma layout, int8 and fp8, and the
// canonical layout of any scheme (dequantize_to_f16). Every layout gives the canonical kernels'
// bits.
void dequantize_any_to_f16(const DeviceMatrix& m, __half* out, cudaStream_t s);
// Rows [r0, r1) of it, [r1 - r0, cols] (matrix_rows: r0 a multiple of 8 in the repacked int4
// layouts; any r0 in the tiles and mixed-wgmma layouts, read in place): the batched step's and
// the prefill's fp16 copy, a block of rows at a time.
void dequantize_rows_to_f16(const DeviceMatrix& m, int64_t r0, int64_t r1, __half* out, cudaStream_t s);

}  // namespace db::cuda
