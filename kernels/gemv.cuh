// Batch=1 GEMV: y = W x for one weight matrix, in every scheme and variant decodebench
// offers, with the epilogues the decode step fuses into it.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "decodebench/config.h"
#include "decodebench/linear_shapes.h"

namespace db::cuda {

// A weight matrix on the device. `qweight` holds the canonical layout of docs/design.md, except
// that int4 matrices for the fast kernel are repacked (int4_repacked): inside every 32-bit
// word the nibbles of columns 0..7 are stored in the order 0,2,4,6,1,3,5,7 so that two
// masks and one shift unpack a word into four half2 pairs that line up with x, and the
// scales and zero points are in the packed meta layout of kernels/int4_meta.h (those of
// 8 rows adjacent, one vector load for a group of rows).
struct DeviceMatrix {
  Scheme scheme = Scheme::fp16;
  int64_t rows = 0, cols = 0;
  int group_size = 0;
  bool zero_point = false;
  bool int4_repacked = false;
  // int4_repacked, with the weights in the tensor-core dot's fragment layout
  // (include/decodebench/int4_frag.h) instead of the nibble order; the meta is packed as above.
  bool int4_frag = false;
  // int4_repacked, in the batched step's tiles layout (kernels/int4_tiles_layout.h) instead:
  // qweight holds the tiles (rows padded to whole tiles of 16), `scales` the meta words (a
  // scale and zero constant a row and group, tiles_meta), `zeros` nothing.
  bool int4_tiles = false;
  // int8 in the batched step's tiles layout (kernels/int8_tiles_layout.h): qweight holds the
  // tiles (rows padded to whole tiles of 16, codes biased by 128), `scales` the canonical [rows]
  // fp16 row scales. int4_repacked stays false: no int4 layout.
  bool int8_tiles = false;
  // fp16 in the batched step's tiles layout (kernels/fp16_tiles_layout.h): qweight holds the
  // tiles (rows padded to whole tiles of 16 with zeros); no scales.
  bool fp16_tiles = false;
  // int4 or int8 in the mixed-input GEMM's layout (MatrixLayout::mixed_wgmma,
  // kernels/mixed_wgmma_layout.h): qweight the packed blocks (rows padded to 128), `scales` the
  // meta entries (mixed_meta), `zeros` null.
  bool mixed_wgmma = false;
  // fp16: __half [rows, cols]; int8: int8 [rows, cols]; int4: u8 [rows, cols/2]; fp8: E4M3 codes
  // [rows, cols]
  void* qweight = nullptr;
  __half* scales = nullptr;  // int8: [rows]; int4: [rows, cols/group]; fp8: [rows] floats (fp8_scales)
  uint8_t* zeros = nullptr;  // int4 with zero point: [rows, cols/group]
};

// fp8's row scales: floats, in the memory `scales` points to.
__host__ __device__ inline const float* fp8_scales(const DeviceMatrix& m) {
  return reinterpret_cast<const float*>(m.scales);
}
__host__ __device__ inline float* fp8_scales(DeviceMatrix& m) {
  return reinterpret_cast<float*>(m.scales);
}

// The tiles layout's meta words, in the memory `scales` points to.
__host__ __device__ inline const uint32_t* tiles_meta(const DeviceMatrix& m) {
  return reinterpret_cast<const uint32_t*>(m.scales);
}
__host__ __device__ inline uint32_t* tiles_meta(DeviceMatrix& m) {
  return reinterpret_cast<uint32_t*>(m.scales);
}

// Whether the matrix is in a tiles layout (int4, int8 or fp16): rows padded to whole tiles of 16.
__host__ __device__ inline bool in_tiles(const DeviceMatrix& m) {
  return m.int4_tiles || m.int8_tiles || m.fp16_tiles;
}

// The mixed layout's meta entries (mixed_wgmma_layout.h meta_place), in the memory `scales`
// points to.
__host__ __device__ inline const uint8_t* mixed_meta(const DeviceMatrix& m) {
  return reinterpret_cast<const uint8_t*>(m.scales);
}

// The matrix's shape and layout as the linear plan names them (decodebench/linear_shapes.h).
inline MatrixShape shape_of(const DeviceMatrix& m) {
  return {m.scheme, m.rows, m.cols, m.group_size, m.zero_point};
}
inline MatrixLayout layout_of(const DeviceMatrix& m) {
  if (m.mixed_wgmma) return MatrixLayout::mixed_wgmma;
  if (m.int4_frag) return MatrixLayout::int4_fragments;
  if (m.int4_tiles) return MatrixLayout::int4_tiles;
  if (m.int8_tiles) return MatrixLayout::int8_tiles;
  if (m.fp16_tiles) return MatrixLayout::fp16_tiles;
  return m.int4_repacked ? MatrixLayout::int4_nibbles : MatrixLayout::canonical;
}
// A matrix of this shape and layout, without memory.
inline DeviceMatrix device_matrix(const MatrixShape& s, MatrixLayout layout) {
  DeviceMatrix m{s.scheme, s.rows, s.cols, s.group_size, s.zero_point};
  m.int4_repacked = layout == MatrixLayout::int4_nibbles || layout == MatrixLayout::int4_fragments ||
                    layout == MatrixLayout::int4_tiles;
  m.int4_frag = layout == MatrixLayout::int4_fragments;
  m.int4_tiles = layout == MatrixLayout::int4_tiles;
  m.int8_tiles = layout == MatrixLayout::int8_tiles;
  m.fp16_tiles = layout == MatrixLayout::fp16_tiles;
  m.mixed_wgmma = layout == MatrixLayout::mixed_wgmma;
  return m;
}

// fast: the rows kernel (x in registers, a balanced range of rows per block, the next group's
// weights prefetched into registers); naive: one weight at a time (the slow path).
enum class GemvVariant { fast, naive };

enum class Epilogue {
  store,     // y[r] = W x (float)
  residual,  // resid[r] += W x
  silu_mul,  // rows interleaved (gate_i, up_i): act[i] = silu(gate_i) * up_i (half)
  logits,    // y[r] = W x, and the argmax key keeps the largest (lowest index on ties)
};

// The input vector: either `x` (half) or the float residual stream `resid` normalized by
// RMSNorm with `norm_w` while it is staged into shared memory.
struct GemvInput {
  const __half* x = nullptr;
  const float* resid = nullptr;
  const __half* norm_w = nullptr;
  float eps = 0.f;
  // With `resid`: the norm statistics its producer left (common.cuh, kNormSlots slots), so
  // a block reads only its own slice of resid. Null: every block sums all of resid itself.
  const unsigned long long* sumsq = nullptr;
  // With `resid`: the residual stream's fp16 copy, which x is normalized from where set
  // (common.cuh, ResidPiece). The statistics still come from the float stream's writers.
  const __half* resid_h = nullptr;
};

struct GemvOutput {
  Epilogue epilogue = Epilogue::store;
  float* y = nullptr;
  float* resid = nullptr;
  __half* act = nullptr;
  unsigned long long* argmax_key = nullptr;
  // Optional [rows] floats added to each row's W x before the epilogue (a LoRA adapter's
  // external delta, scale * B (A x), computed before this GEMV).
  const float* addend = nullptr;
  // Residual epilogue: the squares of the updated resid are added here (common.cuh) for the
  // RMSNorm of the next GEMV. Null: nothing is recorded.
  unsigned long long* sumsq = nullptr;
  // Residual epilogue: the updated rows also go here, rounded to fp16 (GemvInput::resid_h).
  __half* resid_h = nullptr;
};

// Whether the variant supports this matrix, with the reason when not: the naive kernel takes
// any, the fast one what fast_gemv_takes says.
bool gemv_supports(const DeviceMatrix& w, GemvVariant v, const char** why);

// Launches the variant on w: the fast one at the shape rows_shape gives the matrix.
void gemv(const DeviceMatrix& w, const GemvInput& in, const GemvOutput& out, GemvVariant v,
          cudaStream_t stream);

// The fast kernel's launch shape: 16-byte chunks a thread in each row, rows a group, and the
// resident blocks an SM the grid is sized for (one wave of equal blocks).
struct RowsShape {
  int chunks = 0, rows = 0, blocks_per_sm = 0;
};
// The shape gemv() runs the matrix at: the scheme's default, more chunks a thread where rows
// are too long for one block, fewer rows a group where one block would be alone on its SM.
RowsShape rows_shape(const DeviceMatrix& w);
// The fast kernel at `shape` (gemv() at rows_shape; the tests and decodebench_gemv_bench at
// others): its chunks doubled while a row is too long for one block, its resident blocks an SM
// at most shape.blocks_per_sm (0: as many as fit). Only the instantiated shapes (Rows x Chunks
// <= 16) launch; others fail with the reason.
void gemv_rows(const DeviceMatrix& w, const GemvInput& in, const GemvOutput& out, RowsShape shape,
               cudaStream_t stream);

// The argmax key: an order-preserving encoding of the float in the high 32 bits and the
// complement of the index in the low 32, so one atomicMax keeps the largest logit and,
// among equal logits, the lowest index.
__host__ __device__ inline unsigned long long argmax_key(float v, uint32_t index) {
#if defined(__CUDA_ARCH__)
  uint32_t u = __float_as_uint(v);
#else
  uint32_t u;
  __builtin_memcpy(&u, &v, 4);
#endif
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(u) << 32) | (0xffffffffu - index);
}
__host__ __device__ inline uint32_t argmax_index(unsigned long long key) {
  return 0xffffffffu - static_cast<uint32_t>(key & 0xffffffffu);
}

}  // namespace db::cuda
