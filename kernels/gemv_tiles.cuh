// The tiles GEMV of a batched decode step (--batch B, 2 <= B <= kTilesGemvMaxBatch): Y = X W^T
// for an int4 weight matrix W [rows, cols] in the tiles layout (kernels/int4_tiles_layout.h), an
// int8 one in the int8 tiles layout (kernels/int8_tiles_layout.h) or an fp16 one in the fp16
// tiles layout (kernels/fp16_tiles_layout.h), and a few rows of activations X [B, cols], on the
// tensor cores. A lane's one 16-byte load is the A operands of four mma.m16n8k16 (int4: 16 rows x
// 64 columns a tile), two (int8: 16 x 32) or one (fp16: 16 x 16), and up to 8 sequences are the
// mma's N, so the dequantization and the mmas do not grow with the batch up to 8, only x's loads
// do (int4: 32 bytes a lane, a sequence and a tile); 9 to 16 sequences take a second mma a
// k-step on the same A. The linear plan runs it on the int4, int8 and fp16 matrices their tiles
// layout holds (decodebench/linear_shapes.h: tiles_hold, tiles_gemv_takes); batch 1 keeps the
// rows GEMV. The lab bench (tests/bench/tiles_gemv_bench.cu) checks and times its shapes.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "gemv.cuh"

namespace db::cuda {

// Whether the kernel takes this matrix at `batch` sequences (tiles_gemv_takes,
// decodebench/linear_shapes.h: int4 in the tiles layout, groups of a power of two of at least
// 128; int8 in the int8 tiles layout, whole steps of 64 columns; fp16 in the fp16 tiles layout,
// whole steps of 32 columns; 1 to 16 sequences), with the reason when not.
bool gemv_tiles_supports(const DeviceMatrix& w, int64_t batch, const char** why);

// y[b * rows + r] = (accumulate ? y[b * rows + r] : 0) + sum_c W[r, c] x[b * cols + c] for
// b < batch, r < rows. Deterministic: the same inputs give the same bits on every call.
// Launched with PDL (pdl.cuh): the first step's weights are loaded before the wait on the
// kernel before it, x and y after.
void gemv_tiles(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                cudaStream_t s);

// The shape (TilesShape, decodebench/linear_shapes.h) gemv_tiles() runs `batch` sequences on the matrix at
// (tiles_shape_us's fastest of the instantiated shapes, at the occupancy each instance's registers give).
TilesShape tiles_shape(const DeviceMatrix& w, int64_t batch);
// The kernel at `shape` (the tests and decodebench_tiles_gemv_bench choose others). Only the
// instantiated shapes (tiles_kernel_shapes) launch; others fail with the reason.
void gemv_tiles_shaped(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                       TilesShape shape, cudaStream_t s);
// The product's instantiated shapes, each for up to 8 and up to 16 sequences: (row tiles, warps)
// one step ahead and some two steps ahead; tiles_shape() chooses among those one step ahead,
// tune_tiles() among all of them.
std::vector<TilesShape> tiles_kernel_shapes();
// The lab's (DEV builds; empty otherwise): some shapes four steps ahead, for the bench and the
// gpu tests, never chosen.
std::vector<TilesShape> tiles_lab_shapes();
// Both: every shape that launches.
inline std::vector<TilesShape> tiles_launchable_shapes() {
  std::vector<TilesShape> v = tiles_kernel_shapes(), lab = tiles_lab_shapes();
  v.insert(v.end(), lab.begin(), lab.end());
  return v;
}
// The fastest instantiated shape for matrices `ms` (one kind's, of one shape) at `batch`,
// timed on the device (each shape once untimed, then the median of three passes over `ms`,
// x [batch, cols] and y [batch, rows] the caller's buffers, y overwritten); the default
// (tiles_shape) unless another is 3% faster.
TilesTiming tune_tiles(const std::vector<const DeviceMatrix*>& ms, const __half* x, int64_t batch, float* y,
                       cudaStream_t s);

// The model tiles_shape() decides with, host arithmetic without a GPU: the microseconds a
// matrix of `rows` x `cols` weights of `bits` (4, 8 or 16) takes at `shape` with `occupancy`
// resident blocks an SM on `sms` SMs. Blocks (shape.row_tiles row tiles each) are dealt out
// evenly; the SM with the most streams its blocks' weights `occupancy` at a time, each round at
// the read bandwidth that the bytes its resident warps keep in flight reach (a warp holds
// shape.ahead steps ahead: 1 KiB a row tile and step in every scheme, two 512-byte tiles;
// tiles_stream_gbps).
double tiles_shape_us(int64_t rows, int64_t cols, TilesShape shape, int occupancy, int sms, int bits = 4);
// The H200's read bandwidth with `kib` KiB of loads in flight an SM, interpolated between the
// flight bench's points (results/lab/persistent-step.md §1: 8, 16, 32 and 64 KiB stream 2195,
// 3369, 4290 and 4416 GB/s; proportional below 8 KiB, flat above 64).
double tiles_stream_gbps(double kib);

}  // namespace db::cuda
