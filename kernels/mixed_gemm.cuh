// The mixed-input GEMM of a batched decode step on Hopper (kernels/mixed_gemm.cu): Y = X W^T for
// an int4 or int8 weight matrix W [rows, cols] in the mixed-wgmma layout
// (kernels/mixed_wgmma_layout.h, made at load by repack_mixed) and the activations X [B, cols],
// on wgmma with the weights dequantized in registers as the A operand and X through TMA as B
// (Machete's design). sm_90a code: built where the architectures include 90
// (CMakeLists.txt, DB_HOPPER), run on compute capability 9.0 alone. The linear plan sends int4
// and int8 linears here from kMixedGemmMinBatch to kMixedGemmMaxBatch sequences
// (BatchedPath::mixed_gemm).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gemv.cuh"
#include "mixed_wgmma_layout.h"

namespace db::cuda {

// Whether this build has the kernel's sm_90a code; without it gemm_mixed fails with the reason.
bool mixed_gemm_built();
// Sets the kernels' shared-memory allowance, once a process. The engine calls it at load, before
// it captures the step into a graph; gemm_mixed calls it too.
void mixed_gemm_setup();

// Whether gemm_mixed takes the matrix: int4 or int8 in the mixed-wgmma layout of a shape
// mixed_gemm_takes (decodebench/linear_shapes.h) accepts. When not, `why` says so.
bool mixed_gemm_supports(const DeviceMatrix& w, const char** why);

// Device memory gemm_mixed needs beside its operands for a matrix of `rows` x `cols` at `batch`
// sequences, int4 or int8, on this GPU (its SM count sets the K splits): a counter an output
// tile and the split units' fp32 partials. Zero it once (cudaMemset) before the first call;
// every call leaves its counters at zero again.
size_t mixed_gemm_workspace_bytes(int64_t rows, int64_t cols, int64_t batch);

// y[b * rows + r] = (accumulate ? y[b * rows + r] : 0) + sum_c W[r, c] x[b * cols + c] for
// b < batch, r < rows, W's weights the fp16 values dequantize_to_f16 makes, sums in fp32.
// Deterministic: the split units' partials are added in split order.
void gemm_mixed(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                void* workspace, cudaStream_t s);

// The lab's knobs (tests/bench/mixed_wgmma_bench.cu): splits > 0 forces the K splits, n_tile > 0
// a smaller N tile than the batch's (mixed::make_plan).
struct MixedGemmOptions {
  int splits = 0, n_tile = 0;
};
// The plan gemm_mixed runs for w at `batch` sequences on this GPU.
mixed::Plan mixed_gemm_plan(const DeviceMatrix& w, int64_t batch, MixedGemmOptions o = {});
// gemm_mixed with the knobs; `workspace_bytes` is checked against the plan's need.
void gemm_mixed_with(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                     void* workspace, int64_t workspace_bytes, MixedGemmOptions o, cudaStream_t s);

// The layout's kind of a matrix's scheme (int4 or int8; others fail).
mixed::Kind mixed_kind(Scheme s);

}  // namespace db::cuda
