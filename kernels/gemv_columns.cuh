// The columns GEMV of a batched decode step (--batch B, 2 <= B <= kGemvColumnsMaxBatch):
// Y = X W^T for a weight matrix W [rows, cols] in the layout the fast GEMV reads and a few
// rows of activations X [B, cols], on the CUDA cores. It is the rows kernel (kernels/gemv.cu)
// with B accumulators a row: the same 16-byte weight loads, balanced row ranges and
// dequantization, each weight loaded and dequantized once and multiplied by every sequence's
// x. The linear plan runs it up to a crossover batch per scheme
// (decodebench/linear_shapes.h: gemv_columns_crossover); the skinny GEMM (int8, int4, fp8) or
// cuBLAS (fp16) above.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "gemv.cuh"

namespace db::cuda {

// Whether the kernel takes this matrix at `batch` sequences (gemv_columns_takes,
// decodebench/linear_shapes.h), with the reason when not.
bool gemv_columns_supports(const DeviceMatrix& w, int64_t batch, const char** why);

// y[b * rows + r] = (accumulate ? y[b * rows + r] : 0) + sum_c W[r, c] x[b * cols + c] for
// b < batch, r < rows. Deterministic: the same inputs give the same bits on every call.
void gemv_columns(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                  cudaStream_t s);

// A launch shape: the instance of `columns` sequences (2, 4 or 8; a batch below it leaves the
// rest masked), `chunks` 16-byte chunks a thread owns in each row, `rows` rows a group, and at
// most `blocks_per_sm` resident blocks an SM (0: as many as fit). 0 in `columns`, or in both
// `chunks` and `rows`: the default's.
struct ColumnsShape {
  int columns = 0, chunks = 0, rows = 0, blocks_per_sm = 0;
};
// The shape gemv_columns() runs `batch` sequences on the matrix at: every field set.
ColumnsShape columns_shape(const DeviceMatrix& w, int64_t batch);
// The kernel at `shape` (the tests and decodebench_skinny_bench choose others): its chunks doubled
// while a row is too long for one block. Only the instantiated shapes (columns_kernel_shapes)
// launch; others fail with the reason.
void gemv_columns_shaped(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                         ColumnsShape shape, cudaStream_t s);
// The instantiated (columns, chunks, rows), for every scheme.
std::vector<ColumnsShape> columns_kernel_shapes();

}  // namespace db::cuda
