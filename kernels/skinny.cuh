// The skinny GEMM of a batched decode step (--batch B > 1): Y = X W^T for a weight matrix W
// [rows, cols] in the layout the fast GEMV reads and a few rows of activations X [B, cols],
// on the tensor cores. Each weight is loaded once for all B columns (up to kSkinnyMaxBatch a
// launch), dequantized in registers and fed to mma.m16n8k16 as the A operand; the sequences
// are the N dimension.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gemv.cuh"

namespace db::cuda {

// Whether the skinny GEMM takes this matrix (skinny_gemm_takes, decodebench/linear_shapes.h):
// fp16, int8, and int4 in the repacked nibble layout (not the fragment layout), input dimension
// a multiple of 16 bytes of weights. A launch takes up to kSkinnyMaxBatch columns (sequences);
// more run as several launches, each reading W again.
bool skinny_supports(const DeviceMatrix& w, const char** why);

// Device memory gemm_skinny needs beside its operands for a matrix of `rows` x `cols` at
// `batch` columns: the split-K partial sums and a counter per tile of rows. Zero it once
// (cudaMemset) before the first call; every call leaves its counters at zero again.
size_t skinny_workspace_bytes(int64_t rows, int64_t cols, int64_t batch);

// y[b * rows + r] = (accumulate ? y[b * rows + r] : 0) + sum_c W[r, c] x[b * cols + c] for
// b < batch, r < rows. Deterministic: the same inputs give the same bits on every call.
void gemm_skinny(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                 void* workspace, cudaStream_t s);

// The same at a given shape (SkinnyShape, decodebench/linear_shapes.h: the shape the linear plan
// holds, timed at load, or one the tests and decodebench_skinny_bench choose): gemm_skinny_tuned
// below. Only the shapes skinny_kernel_shapes() lists are instantiated: others fail with the
// reason.
// The kernels' batch groups: a launch of `batch` columns (at most kSkinnyMaxBatch) runs a
// kernel built for up to 8, 16, 32 or 64 of them; this is that number.
int skinny_max_batch(int64_t batch);
struct SkinnyKernelShape {
  int max_batch;  // the largest batch a launch of it takes (skinny_max_batch)
  int row_tiles, chunks;
};
std::vector<SkinnyKernelShape> skinny_kernel_shapes();

// The shape a launch of `batch` columns on a matrix of `scheme` runs with `t`: t's fields where
// set, the default's elsewhere.
SkinnyShape skinny_resolved(Scheme scheme, int64_t batch, SkinnyShape t);

// The fastest shape for `batch` columns on matrices of one shape and scheme (a layer's matrix
// across the layers), on this card: the default and every shape skinny_kernel_shapes() has
// for the batch, at 1, 2, 4 and 8 blocks an SM, each timed as a pass over all of `ms` (one
// warm-up pass, the median of three). The default is kept unless another shape is at least
// 3% faster, so that near-ties keep one choice. x [batch, max cols] is read (its values do not
// matter), y [batch, max rows] overwritten; workspace as gemm_skinny's, for every shape. The
// times are a matrix's: a pass's time / ms.size().
SkinnyTiming tune_skinny(const std::vector<const DeviceMatrix*>& ms, const __half* x, int64_t batch, float* y,
                         void* workspace, cudaStream_t s);
void gemm_skinny_tuned(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                       void* workspace, SkinnyShape t, cudaStream_t s);

}  // namespace db::cuda
