// Device-side weight production: synthetic generation, quantization of dense checkpoint
// rows, the int4 repack for the fast kernel, and dequantization for dequant-cublas. All of
// it runs the arithmetic of include/decodebench/{quant,synth,half}.h, so a weight made on
// the device has the bits the CPU reference makes.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "decodebench/accounting.h"
#include "decodebench/safetensors.h"
#include "decodebench/synth.h"
#include "fp16_tiles_layout.h"
#include "gemv.cuh"
#include "int4_meta.h"
#include "int4_tiles_layout.h"
#include "int8_tiles_layout.h"
#include "mixed_wgmma_layout.h"

namespace db::cuda {

// Rows r of a source land in destination rows `offset + r * stride` (fused QKV uses
// stride 1 with an offset; the interleaved gate/up matrix uses stride 2).
struct RowMap {
  int64_t offset = 0;
  int64_t stride = 1;
};

struct SyntheticSource {
  uint64_t seed = 0;
  uint64_t tensor_id = 0;
  synth::Dist dist = synth::Dist::matrix;
};

struct DenseSource {  // rows [row0, row0 + rows) of a tensor staged on the device
  const void* data = nullptr;
  DType dtype = DType::f16;
  int64_t row0 = 0;
};

// Quantizes rows [row0, row0 + rows) of the source into `dst` (scheme, group and zero point
// taken from dst), fp16-rounding every value first.
void quantize_synthetic(const DeviceMatrix& dst, RowMap map, int64_t row0, int64_t rows, SyntheticSource src,
                        cudaStream_t s);
void quantize_dense(const DeviceMatrix& dst, RowMap map, int64_t rows, DenseSource src, cudaStream_t s);

// A vector or table stored as fp16 (embedding, norms).
void fill_synthetic_f16(__half* dst, int64_t n, SyntheticSource src, cudaStream_t s);
void convert_to_f16(__half* dst, const void* src, DType dtype, int64_t n, cudaStream_t s);

// A LoRA adapter merged into a weight (--adapter-mode merged; adapter.h merge_adapter). The
// value of element (r, c) is
//   d = 0; for k in 0..rank-1: d = fmaf(B[r, k], A[k, c], d)
//   fmaf(scale, d, base(r, c))
// with base(r, c) read from `base` in its canonical layout: fp16 for synthetic and dense
// origins (exactly their fp16-rounded values), a decodebench file's own int8/int4 weights
// (dequantized as QuantMatrix::at does). The same fmaf order as the host's merge_adapter, so
// the merged matrix quantizes to the bits of WeightSource::host_matrix.
struct MergeSource {
  DeviceMatrix base;          // [rows, cols], canonical layout (never repacked)
  const __half* a = nullptr;  // [rank, cols]
  const __half* b = nullptr;  // [rows, rank]
  int64_t rank = 0;
  float scale = 0.f;  // Adapter::scale_f()
};

// Quantizes the merged matrix (all base.rows rows) into `dst` with the canonical quantizer
// of dst's scheme, the code quantize_synthetic and quantize_dense run.
void quantize_merged(const DeviceMatrix& dst, RowMap map, const MergeSource& src, cudaStream_t s);

// The mixed-wgmma layout's kind of an int4 or int8 matrix.
inline mixed::Kind mixed_kind_of(const DeviceMatrix& m) {
  return m.scheme == Scheme::int4 ? mixed::Kind::int4 : mixed::Kind::int8;
}

// Bytes to allocate for m: its weights, and for int4 its scales and zero points for whole
// blocks of 8 rows (the packed layout's padding, kernels/int4_meta.h); in the tiles layout,
// its codes for whole tiles of 16 rows and its meta words (`scales`; no zeros); in the
// mixed-wgmma layout, the packed blocks of rows padded to 128 and the meta entries (in `scales`;
// no zeros), 116 MB an 8b-int4 layer (group 128) against its canonical 114 MB. The byte account
// (matrix_bytes) counts the canonical bytes, which are all a decode step must read.
inline MatrixBytes device_matrix_bytes(const DeviceMatrix& m) {
  if (m.mixed_wgmma) {
    MatrixBytes b;
    const int64_t groups = m.scheme == Scheme::int4 ? mixed::group_count(m.cols, m.group_size) : 1;
    b.weights = static_cast<uint64_t>(mixed::weight_bytes(mixed_kind_of(m), m.rows, m.cols));
    b.scales = static_cast<uint64_t>(mixed::meta_bytes(m.rows, groups));
    return b;
  }
  MatrixBytes b = matrix_bytes(m.rows, m.cols, m.scheme, m.group_size, m.zero_point);
  if (m.scheme == Scheme::int4 && m.int4_tiles) {
    b.weights = static_cast<uint64_t>(tiles::code_bytes(m.rows, m.cols));
    b.scales = static_cast<uint64_t>(tiles::meta_bytes(m.rows, m.cols, m.group_size));
    b.zeros = 0;
  } else if (m.scheme == Scheme::int8 && m.int8_tiles) {  // the codes for whole tiles, the row scales
    b.weights = static_cast<uint64_t>(tiles8::code_bytes(m.rows, m.cols));
  } else if (m.scheme == Scheme::fp16 && m.fp16_tiles) {  // the values for whole tiles
    b.weights = static_cast<uint64_t>(tiles16::weight_bytes(m.rows, m.cols));
  } else if (m.scheme == Scheme::int4) {
    const MatrixBytes padded =
        matrix_bytes(int4_meta::padded_rows(m.rows), m.cols, m.scheme, m.group_size, m.zero_point);
    b.scales = padded.scales;
    b.zeros = padded.zeros;
  }
  return b;
}

// Canonical int4 -> the fast kernel's nibble order and packed scales and zero points (in
// place; gemv.cuh DeviceMatrix), whose arrays hold device_matrix_bytes. With `fragments`, a
// matrix the tensor-core dot can take (int4_frag::eligible) gets its fragment layout instead
// of the nibble order (int4_frag).
void repack_int4(DeviceMatrix& m, cudaStream_t s, bool fragments = false);

// Canonical int4 `src` -> the tiles layout in `dst` (kernels/int4_tiles_layout.h), whose
// arrays hold device_matrix_bytes of a tiles matrix (dst.int4_tiles; the shape src's): every
// code through the layout's place(), the padded rows' codes zero, every row's meta word with
// its scale and zero constant (the symmetric zero point 8 without zero points). Not in place:
// the layouts differ in size. src must be a matrix the tiles layout holds (int4_tiles_hold).
void repack_int4_tiles(const DeviceMatrix& src, const DeviceMatrix& dst, cudaStream_t s);

// Canonical int8 `src` -> the int8 tiles layout in `dst` (kernels/int8_tiles_layout.h), whose
// arrays hold device_matrix_bytes of an int8 tiles matrix (dst.int8_tiles; the shape src's):
// every code through the layout's place(), biased by 128, the padded rows' codes 0 (byte 0x80);
// the row scales copied as they are. Not in place: the padded rows make it larger. src must be
// a matrix the layout holds (int8_tiles_hold).
void repack_int8_tiles(const DeviceMatrix& src, const DeviceMatrix& dst, cudaStream_t s);

// Canonical fp16 `src` -> the fp16 tiles layout in `dst` (kernels/fp16_tiles_layout.h), whose
// `qweight` holds device_matrix_bytes of an fp16 tiles matrix (dst.fp16_tiles; the shape src's):
// every value through the layout's place(), the padded rows zero. Not in place: the padded rows
// make it larger, and a lane's word takes two rows. src must be a matrix the layout holds
// (fp16_tiles_hold).
void repack_fp16_tiles(const DeviceMatrix& src, const DeviceMatrix& dst, cudaStream_t s);

// Canonical int4 or int8 (a shape mixed_gemm_takes) -> the mixed-input GEMM's layout
// (MatrixLayout::mixed_wgmma, kernels/mixed_wgmma_layout.h) in other arrays: `w` and `meta` of
// device_matrix_bytes(the mixed matrix)'s weights and scales. m's canonical arrays are read, not
// changed; m then points at the new ones.
void repack_mixed(DeviceMatrix& m, void* w, void* meta, cudaStream_t s);

// Any scheme -> fp16 [rows, cols] (dequant-cublas's first half).
void dequantize_to_f16(const DeviceMatrix& m, __half* out, cudaStream_t s);

// Rows [r0, r1) of m as a matrix of r1 - r0 rows in m's layout, its pointers offset into m's
// arrays (no copy): the weights, scales and zero points of those rows. In the int4 repacked
// layouts a block of 8 rows is stored together (the nibble order's packed meta, the fragments'
// words), so r0 is a multiple of 8 there, of 16 in the tiles layouts (a tile), and of 128 in
// the mixed-wgmma layout (a tile); r1 may end anywhere. Fails on a range the layout cannot cut.
DeviceMatrix matrix_rows(const DeviceMatrix& m, int64_t r0, int64_t r1);

}  // namespace db::cuda
