// The quantized GEMM of a batched decode step at many sequences: Y = X W^T for an int8, fp8 or
// int4 weight matrix W [rows, cols] in the layout the fast GEMV reads (int4 in the repacked
// nibble order with the packed meta, kernels/int4_meta.h) and activations X [B, cols], on the
// tensor cores, without an fp16 copy of W. Tiles of 128 columns of W and X go through a
// multi-stage cp.async ring in shared memory; each warp dequantizes its rows of a W tile in
// registers and feeds them as the A operand of mma.m16n8k16 to every 8-sequence tile of X the
// block holds, so a weight is read from memory once per block of 128 sequences.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gemv.cuh"

namespace db::cuda {

// Whether the quantized GEMM takes this matrix (quant_gemm_takes, decodebench/linear_shapes.h):
// int8, fp8, and int4 in the repacked nibble layout with a power-of-two group of at least 32;
// input dimension a multiple of 16 bytes of weights.
bool quant_gemm_supports(const DeviceMatrix& w, const char** why);

// A launch's shape: warps of a block along the rows (4: 128 rows a block, 2: 64; the other
// warps share out the block's 16 tiles of 8 sequences), the blocks the input dimension is
// split over (each writing partial sums to the workspace; the last block of a tile adds them in
// split order), and the k-tiles of 128 columns in the shared-memory ring (2 to 4, at most what
// the device's shared memory holds). 0: the default: 4 row warps where three stages of theirs
// fit (else 2), the split that best fills the SMs in whole waves, as many stages as fit.
struct QuantGemmShape {
  int warps_m = 0;
  int splits = 0;
  int stages = 0;
};

// Device memory gemm_quant needs beside its operands at shape `t`: the split partial sums and a
// counter per tile. Zero it once (cudaMemset) before the first call; every call leaves its
// counters at zero again. The default shape's on this device where `t` is {}.
size_t quant_gemm_workspace_bytes(Scheme scheme, int64_t rows, int64_t cols, int64_t batch,
                                  QuantGemmShape t = {});

// The shape a launch of `batch` columns on a matrix of `scheme` and rows x cols runs with `t`
// on this device, every field set: t's fields where set (stages at most what fits), the
// default's elsewhere.
QuantGemmShape quant_gemm_resolved(Scheme scheme, int64_t rows, int64_t cols, int64_t batch,
                                   QuantGemmShape t = {});

// y[b * rows + r] = (accumulate ? y[b * rows + r] : 0) + sum_c W[r, c] x[b * cols + c] for
// b < batch, r < rows; any batch >= 1. Deterministic: the same inputs give the same bits on
// every call. Launched with PDL: the first weight tiles are loaded before it waits for the
// kernel before it.
void gemm_quant(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                void* workspace, cudaStream_t s, QuantGemmShape t = {});

}  // namespace db::cuda
