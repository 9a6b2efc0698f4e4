// LoRA adapters in external mode (include/decodebench/adapter.h): y = W x + scale * B (A x)
// in every adapted linear, as two small kernels before the base GEMV.
//
//   shrink  t = A x for the stacked A of every adapted linear that reads the same input
//           (q/k/v the attention-norm output, gate/up the mlp-norm output, o and down alone),
//           fp32 accumulation over the whole input dimension;
//   expand  delta = scale * B t, written in the row layout of the base GEMV's fused output
//           (QKV: q rows, then k, then v; gate/up interleaved gate_0, up_0, gate_1, ...), with
//           0 in the rows of linears that are not adapted.
// The base GEMV then adds delta to its rows before its epilogue (GemvOutput::addend), so the
// residual add and silu(gate) * up see the adapted values. A and B live on the device as fp16:
// their values are fp16-exact already (adapter.h).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace db::cuda {

// One linear inside a fused output matrix: its row r is the fused row offset + r * stride.
struct LoraSegment {
  int64_t offset = 0;
  int64_t stride = 1;
  int64_t rows = 0;
  const __half* b = nullptr;  // [rows, rank]; nullptr: not adapted, its delta rows are 0
  int slot = 0;               // which block of t its B reads: t[slot * rank, (slot + 1) * rank)
};

constexpr int kLoraMaxSegments = 3;  // q, k, v

// The adapted linears of one fused matrix, which share one input vector.
struct LoraGroup {
  const __half* x = nullptr;  // [in]
  // Or the residual stream, normalized by the shrink exactly as the GEMVs do it (x =
  // fp16(r * inv * norm_w), r from the fp16 copy `resid_h` where set, common.cuh) from the
  // statistics its producer left: no RMSNorm kernel of its own. Needs in % 8 == 0.
  const float* resid = nullptr;
  const __half* resid_h = nullptr;
  const __half* norm_w = nullptr;
  const unsigned long long* sumsq = nullptr;
  float eps = 0.f;
  int64_t in = 0;
  const __half* a = nullptr;  // [targets * rank, in]: the A of each adapted linear, by slot
  int targets = 0;            // 0: no linear of this matrix is adapted
  int rank = 0;
  float scale = 0.f;
  float* t = nullptr;                 // [targets * rank]
  LoraSegment seg[kLoraMaxSegments];  // every linear of the fused matrix, in row order
  int segments = 0;
  float* delta = nullptr;  // [sum of the segments' rows], the fused matrix's row layout
};

// t[r] = sum_i a[r, i] x[i] for r < rows (a [rows, in] row-major), fp32 accumulation.
void lora_shrink(const __half* a, int64_t rows, int64_t in, const __half* x, float* t, cudaStream_t s);
// g.delta[fused row of segment row r] = g.scale * sum_k B[r, k] t[slot * rank + k]; 0 where
// the segment is not adapted. Reads g.t as the shrink left it.
void lora_expand(const LoraGroup& g, cudaStream_t s);
// Both, in order: the whole low-rank path of one group.
void lora_apply(const LoraGroup& g, cudaStream_t s);

// y[i] += addend[i] (the cuBLAS paths' way to honour GemvOutput::addend on the residual).
void add_rows(float* y, const float* addend, int64_t n, cudaStream_t s);

}  // namespace db::cuda
