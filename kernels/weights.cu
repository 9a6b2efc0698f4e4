// Device-side weight production (see weights.cuh).
#include "common.cuh"
#include "decodebench/half.h"
#include "decodebench/int4_frag.h"
#include "decodebench/quant.h"
#include "int4_meta.h"
#include "int4_tiles_layout.h"
#include "mixed_wgmma_layout.h"
#include "weights.cuh"

namespace db::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float rounded(float v) {
  return f16_to_f32(f32_to_f16(v));
}

struct SynthValue {
  SyntheticSource s;
  int64_t row0, cols;
  __device__ float operator()(int64_t r, int64_t c) const {
    return rounded(synth::value(s.seed, s.tensor_id, static_cast<uint64_t>((row0 + r) * cols + c), s.dist));
  }
};

struct DenseValue {
  DenseSource s;
  int64_t cols;
  __device__ float operator()(int64_t r, int64_t c) const {
    const int64_t i = r * cols + c;
    switch (s.dtype) {
      case DType::f32:
        return rounded(static_cast<const float*>(s.data)[i]);
      case DType::bf16:
        return rounded(bf16_to_f32(static_cast<const uint16_t*>(s.data)[i]));
      default:
        return f16_to_f32(static_cast<const uint16_t*>(s.data)[i]);
    }
  }
};

// fp16: one thread per element.
template <class V>
__global__ void quantize_fp16_kernel(DeviceMatrix d, RowMap map, int64_t rows, V value) {
  const int64_t n = rows * d.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / d.cols, c = i % d.cols;
    static_cast<uint16_t*>(d.qweight)[(map.offset + (r + value.row_base()) * map.stride) * d.cols + c] =
        f32_to_f16(value(r, c));
  }
}

// int8's and fp8's row scale and codes: the scale from the row's max |w|, each weight's code
// from it, and the scale as the matrix stores it (int8: fp16 bits; fp8: a float).
struct Int8Row {
  uint16_t bits;
  float s;
  __device__ explicit Int8Row(float amax) : bits(quant::int8_scale(amax)), s(f16_to_f32(bits)) {}
  __device__ void code(DeviceMatrix& d, int64_t r, int64_t c, float w) const {
    static_cast<int8_t*>(d.qweight)[r * d.cols + c] = quant::quantize_int8(w, s);
  }
  __device__ void scale(DeviceMatrix& d, int64_t r) const { reinterpret_cast<uint16_t*>(d.scales)[r] = bits; }
};
struct Fp8Row {
  float s;
  __device__ explicit Fp8Row(float amax) : s(quant::fp8_scale(amax)) {}
  __device__ void code(DeviceMatrix& d, int64_t r, int64_t c, float w) const {
    static_cast<uint8_t*>(d.qweight)[r * d.cols + c] = quant::quantize_fp8(w, s);
  }
  __device__ void scale(DeviceMatrix& d, int64_t r) const { fp8_scales(d)[r] = s; }
};

// int8 and fp8: one warp per row (max |w| over the row, then quantize).
template <class Row, class V>
__global__ void quantize_row_kernel(DeviceMatrix d, RowMap map, int64_t rows, V value) {
  const int lane = threadIdx.x % kWarp;
  for (int64_t r = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / kWarp; r < rows;
       r += int64_t{gridDim.x} * blockDim.x / kWarp) {
    float amax = 0.f;
    for (int64_t c = lane; c < d.cols; c += kWarp) amax = fmaxf(amax, fabsf(value(r, c)));
    const Row q(warp_max(amax));
    const int64_t dr = map.offset + (r + value.row_base()) * map.stride;
    for (int64_t c = lane; c < d.cols; c += kWarp) q.code(d, dr, c, value(r, c));
    if (lane == 0) q.scale(d, dr);
  }
}

// int4: one thread per group.
template <class V>
__global__ void quantize_int4_kernel(DeviceMatrix d, RowMap map, int64_t rows, V value) {
  const int64_t groups = d.cols / d.group_size;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * groups;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / groups, g = i % groups, c0 = g * d.group_size;
    float lo = value(r, c0), hi = lo;
    for (int k = 1; k < d.group_size; ++k) {
      const float v = value(r, c0 + k);
      lo = fminf(lo, v);
      hi = fmaxf(hi, v);
    }
    const quant::Int4Params p = quant::int4_params(lo, hi, d.zero_point);
    const float s = f16_to_f32(p.scale);
    const int64_t dr = map.offset + (r + value.row_base()) * map.stride;
    uint8_t* q = static_cast<uint8_t*>(d.qweight) + dr * d.cols / 2 + c0 / 2;
    for (int k = 0; k < d.group_size; k += 2)
      q[k / 2] = quant::pack_int4(quant::quantize_int4(value(r, c0 + k), s, p.zero),
                                  quant::quantize_int4(value(r, c0 + k + 1), s, p.zero));
    reinterpret_cast<uint16_t*>(d.scales)[dr * groups + g] = p.scale;
    if (d.zero_point) d.zeros[dr * groups + g] = p.zero;
  }
}

struct SynthRows : SynthValue {
  __device__ int64_t row_base() const { return row0; }
};
struct DenseRows : DenseValue {
  __device__ int64_t row_base() const { return s.row0; }
};

// W + scale * B A from a canonical base matrix (weights.cuh MergeSource). The quantizers call
// it twice per element (range, then value); both calls give the same bits.
struct MergedRows {
  MergeSource s;
  __device__ int64_t row_base() const { return 0; }
  __device__ float base(int64_t r, int64_t c) const {
    const DeviceMatrix& m = s.base;
    const uint16_t* scales = reinterpret_cast<const uint16_t*>(m.scales);
    switch (m.scheme) {
      case Scheme::fp16:
        return f16_to_f32(static_cast<const uint16_t*>(m.qweight)[r * m.cols + c]);
      case Scheme::int8: {
        const int8_t q = static_cast<const int8_t*>(m.qweight)[r * m.cols + c];
        return quant::dequantize_int8(q, f16_to_f32(scales[r]));
      }
      case Scheme::fp8:
        return quant::dequantize_fp8(static_cast<const uint8_t*>(m.qweight)[r * m.cols + c],
                                     fp8_scales(m)[r]);
      default: {
        const int64_t g = r * (m.cols / m.group_size) + c / m.group_size;
        const uint8_t q = quant::unpack_int4(static_cast<const uint8_t*>(m.qweight)[(r * m.cols + c) / 2],
                                             static_cast<int>(c));
        const int zero = m.zero_point ? m.zeros[g] : quant::kInt4SymmetricZero;
        return quant::dequantize_int4(q, f16_to_f32(scales[g]), zero);
      }
    }
  }
  __device__ float operator()(int64_t r, int64_t c) const {
    float d = 0.f;
    for (int64_t k = 0; k < s.rank; ++k)
      d = fmaf(__half2float(s.b[r * s.rank + k]), __half2float(s.a[k * s.base.cols + c]), d);
    return fmaf(s.scale, d, base(r, c));
  }
};

template <class V>
void quantize_rows(const DeviceMatrix& d, RowMap map, int64_t rows, V value, cudaStream_t s) {
  if (rows <= 0) return;
  const int grid = 4096;
  switch (d.scheme) {
    case Scheme::fp16:
      quantize_fp16_kernel<<<grid, kThreads, 0, s>>>(d, map, rows, value);
      break;
    case Scheme::int8:
      quantize_row_kernel<Int8Row><<<grid, kThreads, 0, s>>>(d, map, rows, value);
      break;
    case Scheme::int4:
      quantize_int4_kernel<<<grid, kThreads, 0, s>>>(d, map, rows, value);
      break;
    case Scheme::fp8:
      quantize_row_kernel<Fp8Row><<<grid, kThreads, 0, s>>>(d, map, rows, value);
      break;
  }
  CUDA_CHECK_LAUNCH();
}

__global__ void fill_synthetic_f16_kernel(__half* dst, int64_t n, SyntheticSource src) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    reinterpret_cast<uint16_t*>(dst)[i] =
        f32_to_f16(synth::value(src.seed, src.tensor_id, static_cast<uint64_t>(i), src.dist));
}

__global__ void convert_to_f16_kernel(__half* dst, const void* src, DType dtype, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint16_t h;
    switch (dtype) {
      case DType::f32:
        h = f32_to_f16(static_cast<const float*>(src)[i]);
        break;
      case DType::bf16:
        h = f32_to_f16(bf16_to_f32(static_cast<const uint16_t*>(src)[i]));
        break;
      default:
        h = static_cast<const uint16_t*>(src)[i];
        break;
    }
    reinterpret_cast<uint16_t*>(dst)[i] = h;
  }
}

// Nibbles of columns 0..7 in a word: canonical order 0,1,2,...,7 -> fast order 0,2,4,6,1,3,5,7.
__global__ void repack_int4_kernel(uint32_t* words, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t w = words[i];
    uint32_t out = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      out |= ((w >> (8 * k)) & 0xfu) << (4 * k);            // even columns 0,2,4,6 -> nibbles 0..3
      out |= ((w >> (8 * k + 4)) & 0xfu) << (4 * (k + 4));  // odd columns 1,3,5,7 -> nibbles 4..7
    }
    words[i] = out;
  }
}

// Canonical nibbles -> the tensor-core dot's fragment layout (include/decodebench/int4_frag.h), in
// place: one block of threads per block of 8 rows and span of 1024 columns, the 8 x 512
// bytes that the permutation keeps to themselves.
__global__ void repack_int4_frag_kernel(uint8_t* q, int64_t cols) {
  __shared__ uint8_t canon[int4_frag::kRows][int4_frag::kSpanCols / 2];
  const int64_t spans = cols / int4_frag::kSpanCols;
  const int64_t row0 = blockIdx.x / spans * int4_frag::kRows;
  const int64_t byte0 = blockIdx.x % spans * (int4_frag::kSpanCols / 2);
  for (int e = threadIdx.x; e < int4_frag::kRows * int4_frag::kSpanCols / 2; e += blockDim.x) {
    const int r = e / (int4_frag::kSpanCols / 2), b = e % (int4_frag::kSpanCols / 2);
    canon[r][b] = q[(row0 + r) * (cols / 2) + byte0 + b];
  }
  __syncthreads();
  // Word (i, lane, u): "row" i of the block, chunk `lane` of the span, word u of the chunk.
  for (int e = threadIdx.x; e < 8 * 32 * 4; e += blockDim.x) {
    const int i = e / 128, lane = e / 4 % 32, u = e % 4;
    uint32_t w = 0;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const int4_frag::Source src = int4_frag::source(i, lane, u, n);
      const uint32_t v = (canon[src.row][src.col / 2] >> (4 * (src.col & 1))) & 0xfu;
      w |= v << (4 * n);
    }
    reinterpret_cast<uint32_t*>(q + (row0 + i) * (cols / 2) + byte0)[lane * 4 + u] = w;
  }
}

// Canonical codes -> the tiles layout (int4_tiles_layout.h): one block per row tile and span
// of up to kTilesSpan column tiles. The span's canonical bytes (16 rows, the rows past the
// matrix zero) are read coalesced, each code ORed into its word in shared memory where
// place() puts it, and the span's tiles written out whole: 8 contiguous KiB a block.
constexpr int kTilesSpan = 16;

__global__ void repack_int4_tiles_kernel(const uint8_t* __restrict__ q, int64_t rows, int64_t cols,
                                         uint8_t* __restrict__ out) {
  __shared__ uint32_t words[kTilesSpan * tiles::kTileBytes / 4];
  const int64_t col_tiles = cols / tiles::kTileCols;
  const int64_t spans = (col_tiles + kTilesSpan - 1) / kTilesSpan;
  const int64_t rt = blockIdx.x / spans, ct0 = blockIdx.x % spans * kTilesSpan;
  const int n = static_cast<int>(col_tiles - ct0 < kTilesSpan ? col_tiles - ct0 : kTilesSpan);
  for (int i = threadIdx.x; i < n * tiles::kTileBytes / 4; i += blockDim.x) words[i] = 0;
  __syncthreads();
  const int span_bytes = n * tiles::kTileCols / 2;  // of a canonical row
  for (int e = threadIdx.x; e < tiles::kTileRows * span_bytes; e += blockDim.x) {
    const int64_t row = rt * tiles::kTileRows + e / span_bytes;
    const int64_t col = ct0 * tiles::kTileCols + 2 * (e % span_bytes);
    const uint32_t byte = row < rows ? q[row * (cols / 2) + col / 2] : 0u;  // padded rows: code 0
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // the even column in the low nibble (quant.h pack_int4)
      const tiles::Place p = tiles::place(row, col + h, col_tiles);
      const int64_t at = tiles::byte_of(p) - (rt * col_tiles + ct0) * tiles::kTileBytes;
      const uint32_t shift = 8 * (at % 4) + 4 * (p.nibble % 2);
      atomicOr(&words[at / 4], ((byte >> (4 * h)) & 0xfu) << shift);
    }
  }
  __syncthreads();
  uint32_t* dst = reinterpret_cast<uint32_t*>(out + (rt * col_tiles + ct0) * tiles::kTileBytes);
  for (int i = threadIdx.x; i < n * tiles::kTileBytes / 4; i += blockDim.x) dst[i] = words[i];
}

// Canonical scales and zero points -> the tiles layout's meta words, one thread a word (row
// and group); the padded rows' words say scale 0, zero point 0.
__global__ void tiles_meta_kernel(DeviceMatrix src, uint32_t* meta) {
  const int64_t groups = src.cols / src.group_size, padded = tiles::padded_rows(src.rows);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < padded * groups;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / groups, g = i % groups;
    uint16_t scale = 0;
    int zero = 0;
    if (row < src.rows) {
      scale = reinterpret_cast<const uint16_t*>(src.scales)[row * groups + g];
      zero = src.zero_point ? src.zeros[row * groups + g] : quant::kInt4SymmetricZero;
    }
    meta[tiles::meta_index(row, g, groups)] =
        tiles::meta_word(scale, static_cast<int>(row % tiles::kTileRows), zero);
  }
}

// Canonical [rows][G] group parameters -> the packed layout (kernels/int4_meta.h), in
// place: one block of threads per block of 8 rows, whose index range the permutation keeps.
// A short last block fills its missing rows with copies of its last one (the array holds
// int4_meta::padded_rows rows).
template <typename T>
__global__ void pack_meta_kernel(T* meta, int64_t rows, int groups) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* canon = reinterpret_cast<T*>(smem);
  const int64_t row0 = int64_t{blockIdx.x} * int4_meta::kBlockRows;
  const int n = static_cast<int>(int4_meta::block_rows(rows, row0));
  T* block = meta + row0 * groups;
  for (int i = threadIdx.x; i < n * groups; i += blockDim.x) canon[i] = block[i];
  __syncthreads();
  for (int i = threadIdx.x; i < int4_meta::kBlockRows * groups; i += blockDim.x) {
    const int r = i / groups, g = i % groups;
    block[int4_meta::packed_index(groups, r, g)] = canon[min(r, n - 1) * groups + g];
  }
}

template <typename T>
void pack_meta(T* meta, int64_t rows, int groups, cudaStream_t s) {
  const size_t smem = size_t{int4_meta::kBlockRows} * groups * sizeof(T);
  if (smem > 48 * 1024) fail("repack_int4: {} groups a row is too many for the packed meta layout", groups);
  const int64_t blocks = (rows + int4_meta::kBlockRows - 1) / int4_meta::kBlockRows;
  pack_meta_kernel<T><<<static_cast<unsigned>(blocks), kThreads, smem, s>>>(meta, rows, groups);
  CUDA_CHECK_LAUNCH();
}

// The element-wise form (any shape): a 64-bit division per element, so only the fallback.
__global__ void dequantize_kernel(DeviceMatrix m, __half* out) {
  const int64_t n = m.rows * m.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / m.cols, c = i % m.cols;
    float v;
    if (m.scheme == Scheme::int8) {
      v = quant::dequantize_int8(static_cast<const int8_t*>(m.qweight)[i], __half2float(m.scales[r]));
    } else if (m.scheme == Scheme::fp8) {
      v = quant::dequantize_fp8(static_cast<const uint8_t*>(m.qweight)[i], fp8_scales(m)[r]);
    } else {
      const int64_t g = r * (m.cols / m.group_size) + c / m.group_size;
      const uint8_t q =
          quant::unpack_int4(static_cast<const uint8_t*>(m.qweight)[i / 2], static_cast<int>(c));
      v = quant::dequantize_int4(q, __half2float(m.scales[g]),
                                 m.zero_point ? m.zeros[g] : quant::kInt4SymmetricZero);
    }
    out[i] = __float2half_rn(v);
  }
}

// Eight columns per thread (one 16-byte store), rows over blockIdx.y: no division, one scale
// (and zero point) per eight values. The same arithmetic per element as above. dequant-cublas
// is the "fast kernel not used" path; its cost should be the bytes it moves, not this kernel.
__global__ void dequantize8_kernel(DeviceMatrix m, __half* out) {
  const int64_t pieces = m.cols / 8;
  const int64_t groups = m.scheme == Scheme::int4 ? m.cols / m.group_size : 1;
  for (int64_t r = blockIdx.y; r < m.rows; r += gridDim.y) {
    for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < pieces;
         p += int64_t{gridDim.x} * blockDim.x) {
      const int64_t c = p * 8;
      float v[8];
      if (m.scheme == Scheme::int8) {
        const uint2 q = reinterpret_cast<const uint2*>(static_cast<const int8_t*>(m.qweight) + r * m.cols)[p];
        const float scale = __half2float(m.scales[r]);
        const uint32_t w[2] = {q.x, q.y};
#pragma unroll
        for (int j = 0; j < 8; ++j)
          v[j] = quant::dequantize_int8(static_cast<int8_t>((w[j / 4] >> (8 * (j % 4))) & 0xff), scale);
      } else if (m.scheme == Scheme::fp8) {
        const uint2 q =
            reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(m.qweight) + r * m.cols)[p];
        const float scale = fp8_scales(m)[r];
        const uint32_t w[2] = {q.x, q.y};
#pragma unroll
        for (int j = 0; j < 8; ++j)
          v[j] = quant::dequantize_fp8(static_cast<uint8_t>((w[j / 4] >> (8 * (j % 4))) & 0xff), scale);
      } else {
        const uint32_t q =
            reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(m.qweight) + r * m.cols / 2)[p];
        const int64_t g = r * groups + c / m.group_size;
        const float scale = __half2float(m.scales[g]);
        const int zero = m.zero_point ? m.zeros[g] : quant::kInt4SymmetricZero;
#pragma unroll
        for (int j = 0; j < 8; ++j)
          v[j] = quant::dequantize_int4(quant::unpack_int4(static_cast<uint8_t>(q >> (8 * (j / 2))), j),
                                        scale, zero);
      }
      uint32_t h[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) h[j] = h2_bits(__floats2half2_rn(v[2 * j], v[2 * j + 1]));
      reinterpret_cast<uint4*>(out + r * m.cols)[p] = make_uint4(h[0], h[1], h[2], h[3]);
    }
  }
}

// Canonical int8 codes -> the int8 tiles layout (int8_tiles_layout.h): a thread a word of the
// output, word 2 s + u of lane (g, c) of its tile, which holds columns 8 c + 4 s + 2 u and + 1 of
// rows g (bytes 0, 1) and g + 8 (bytes 2, 3): two 2-byte reads of the canonical rows, biased by
// 128 (rows past the matrix: code 0).
__global__ void repack_int8_tiles_kernel(const uint8_t* __restrict__ q, int64_t rows, int64_t cols,
                                         uint32_t* __restrict__ out, int64_t words) {
  constexpr int kTileWords = tiles8::kTileBytes / 4;
  const int64_t col_tiles = cols / tiles8::kTileCols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < words;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t tile = i / kTileWords, rt = tile / col_tiles, ct = tile % col_tiles;
    const int lane = static_cast<int>(i % kTileWords) / 4, word = static_cast<int>(i % 4);
    const int g = lane / 4, c = lane % 4, s = word / 2, u = word % 2;
    const int64_t col = ct * tiles8::kTileCols + 8 * c + 4 * s + 2 * u;
    const int64_t r_lo = rt * tiles8::kTileRows + g, r_hi = r_lo + 8;
    const uint32_t lo = r_lo < rows ? *reinterpret_cast<const uint16_t*>(q + r_lo * cols + col) : 0u;
    const uint32_t hi = r_hi < rows ? *reinterpret_cast<const uint16_t*>(q + r_hi * cols + col) : 0u;
    out[i] = (lo | hi << 16) ^ 0x80808080u;
  }
}

// Canonical fp16 -> the fp16 tiles layout (fp16_tiles_layout.h): a thread a lane's 16 bytes of
// a tile, words 0..3 the columns 8 c + 4 h, + 1 of row g, of row g + 8, then 8 c + 4 h + 2, + 3
// of both: two 8-byte reads of the canonical rows g and g + 8 (rows past the matrix: zero).
__global__ void repack_fp16_tiles_kernel(const __half* __restrict__ w, int64_t rows, int64_t cols,
                                         uint4* __restrict__ out, int64_t pieces) {
  const int64_t col_tiles = cols / tiles16::kTileCols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < pieces;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t tile = i / 32, rt = tile / col_tiles, ct = tile % col_tiles;
    const int lane = static_cast<int>(i % 32), g = lane / 4, c = lane % 4;
    const int64_t col = ct / 2 * tiles16::kStepCols + 8 * c + 4 * (ct % 2);  // 4 columns from here
    const int64_t r_lo = rt * tiles16::kTileRows + g, r_hi = r_lo + 8;
    const uint2 lo = r_lo < rows ? *reinterpret_cast<const uint2*>(w + r_lo * cols + col) : make_uint2(0, 0);
    const uint2 hi = r_hi < rows ? *reinterpret_cast<const uint2*>(w + r_hi * cols + col) : make_uint2(0, 0);
    out[i] = make_uint4(lo.x, hi.x, lo.y, hi.y);
  }
}

int grid_for(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65536));
}

// Canonical int4 or int8 -> the mixed-input GEMM's layout (mixed_wgmma_layout.h): a thread an
// output byte, the gather the layout header defines for host and device.
__global__ void repack_mixed_weights_kernel(DeviceMatrix m, uint8_t* w, int64_t n) {
  for (int64_t b = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; b < n;
       b += int64_t{gridDim.x} * blockDim.x)
    w[b] = m.scheme == Scheme::int4
               ? mixed::int4_packed_byte(static_cast<const uint8_t*>(m.qweight), m.rows, m.cols, b)
               : mixed::int8_packed_byte(static_cast<const int8_t*>(m.qweight), m.rows, m.cols, b);
}

// The meta entries: a thread a (padded row, group), its scale and zero constant as
// mixed::pack_meta writes them (padded rows scale 0, so that they contribute exact zeros).
__global__ void repack_mixed_meta_kernel(DeviceMatrix m, int64_t groups, uint8_t* meta, int64_t n) {
  const mixed::Kind k = m.scheme == Scheme::int4 ? mixed::Kind::int4 : mixed::Kind::int8;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / groups, gi = i % groups;
    const mixed::MetaPlace p = mixed::meta_place(r, gi, groups);
    const bool real = r < m.rows;
    const uint16_t scale = real ? reinterpret_cast<const uint16_t*>(m.scales)[r * groups + gi] : 0;
    const int zero = !real ? 0 : m.zeros ? m.zeros[r * groups + gi] : 8;
    uint16_t* e = reinterpret_cast<uint16_t*>(meta + p.byte);
    e[p.hi] = scale;
    e[2 + p.hi] = f32_to_f16(mixed::zero_constant(k, zero, p.hi));
  }
}

}  // namespace

void quantize_synthetic(const DeviceMatrix& dst, RowMap map, int64_t row0, int64_t rows, SyntheticSource src,
                        cudaStream_t s) {
  SynthRows v;
  v.s = src;
  v.row0 = row0;
  v.cols = dst.cols;
  quantize_rows(dst, map, rows, v, s);
}

void quantize_dense(const DeviceMatrix& dst, RowMap map, int64_t rows, DenseSource src, cudaStream_t s) {
  DenseRows v;
  v.s = src;
  v.cols = dst.cols;
  quantize_rows(dst, map, rows, v, s);
}

void quantize_merged(const DeviceMatrix& dst, RowMap map, const MergeSource& src, cudaStream_t s) {
  if (src.base.cols != dst.cols)
    fail("quantize_merged: base [{}, {}] into [{}, {}]", src.base.rows, src.base.cols, dst.rows, dst.cols);
  if (src.base.int4_repacked) fail("quantize_merged: expects the canonical int4 layout");
  MergedRows v;
  v.s = src;
  quantize_rows(dst, map, src.base.rows, v, s);
}

void fill_synthetic_f16(__half* dst, int64_t n, SyntheticSource src, cudaStream_t s) {
  fill_synthetic_f16_kernel<<<grid_for(n), kThreads, 0, s>>>(dst, n, src);
  CUDA_CHECK_LAUNCH();
}

void convert_to_f16(__half* dst, const void* src, DType dtype, int64_t n, cudaStream_t s) {
  convert_to_f16_kernel<<<grid_for(n), kThreads, 0, s>>>(dst, src, dtype, n);
  CUDA_CHECK_LAUNCH();
}

void repack_int4(DeviceMatrix& m, cudaStream_t s, bool fragments) {
  if (m.int4_repacked) return;
  if (fragments && int4_frag::eligible(m.rows, m.cols, m.group_size)) {
    const int64_t blocks = m.rows / int4_frag::kRows * (m.cols / int4_frag::kSpanCols);
    repack_int4_frag_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
        static_cast<uint8_t*>(m.qweight), m.cols);
    m.int4_frag = true;
  } else {
    const int64_t words = m.rows * m.cols / 8;
    repack_int4_kernel<<<grid_for(words), kThreads, 0, s>>>(static_cast<uint32_t*>(m.qweight), words);
  }
  CUDA_CHECK_LAUNCH();
  const int groups = static_cast<int>(m.cols / m.group_size);
  pack_meta(reinterpret_cast<uint16_t*>(m.scales), m.rows, groups, s);
  if (m.zero_point) pack_meta(m.zeros, m.rows, groups, s);
  m.int4_repacked = true;
}

void repack_int8_tiles(const DeviceMatrix& src, const DeviceMatrix& dst, cudaStream_t s) {
  const char* why = nullptr;
  if (!int8_tiles_hold(shape_of(src), &why)) fail("repack_int8_tiles [{}x{}]: {}", src.rows, src.cols, why);
  if (src.int8_tiles) fail("repack_int8_tiles: expects the canonical int8 layout");
  if (!dst.int8_tiles || dst.rows != src.rows || dst.cols != src.cols)
    fail("repack_int8_tiles: [{}x{}] into a tiles matrix of another shape ([{}x{}])", src.rows, src.cols,
         dst.rows, dst.cols);
  const int64_t words = tiles8::code_bytes(src.rows, src.cols) / 4;
  repack_int8_tiles_kernel<<<grid_for(words), kThreads, 0, s>>>(static_cast<const uint8_t*>(src.qweight),
                                                                src.rows, src.cols,
                                                                static_cast<uint32_t*>(dst.qweight), words);
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaMemcpyAsync(dst.scales, src.scales, src.rows * sizeof(__half), cudaMemcpyDeviceToDevice, s));
}

void repack_fp16_tiles(const DeviceMatrix& src, const DeviceMatrix& dst, cudaStream_t s) {
  const char* why = nullptr;
  if (!fp16_tiles_hold(shape_of(src), &why)) fail("repack_fp16_tiles [{}x{}]: {}", src.rows, src.cols, why);
  if (src.fp16_tiles) fail("repack_fp16_tiles: expects the canonical fp16 layout");
  if (!dst.fp16_tiles || dst.rows != src.rows || dst.cols != src.cols)
    fail("repack_fp16_tiles: [{}x{}] into a tiles matrix of another shape ([{}x{}])", src.rows, src.cols,
         dst.rows, dst.cols);
  const int64_t pieces = tiles16::weight_bytes(src.rows, src.cols) / 16;
  repack_fp16_tiles_kernel<<<grid_for(pieces), kThreads, 0, s>>>(
      static_cast<const __half*>(src.qweight), src.rows, src.cols, static_cast<uint4*>(dst.qweight), pieces);
  CUDA_CHECK_LAUNCH();
}

void repack_int4_tiles(const DeviceMatrix& src, const DeviceMatrix& dst, cudaStream_t s) {
  const char* why = nullptr;
  if (!int4_tiles_hold(shape_of(src), &why)) fail("repack_int4_tiles [{}x{}]: {}", src.rows, src.cols, why);
  if (src.int4_repacked) fail("repack_int4_tiles: expects the canonical int4 layout");
  if (!dst.int4_tiles || dst.rows != src.rows || dst.cols != src.cols || dst.group_size != src.group_size ||
      dst.zero_point != src.zero_point)
    fail("repack_int4_tiles: [{}x{}] into a tiles matrix of another shape ([{}x{}])", src.rows, src.cols,
         dst.rows, dst.cols);
  const int64_t col_tiles = src.cols / tiles::kTileCols;
  const int64_t blocks = tiles::row_tiles(src.rows) * ((col_tiles + kTilesSpan - 1) / kTilesSpan);
  repack_int4_tiles_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
      static_cast<const uint8_t*>(src.qweight), src.rows, src.cols, static_cast<uint8_t*>(dst.qweight));
  CUDA_CHECK_LAUNCH();
  const int64_t words = tiles::padded_rows(src.rows) * (src.cols / src.group_size);
  tiles_meta_kernel<<<grid_for(words), kThreads, 0, s>>>(src, reinterpret_cast<uint32_t*>(dst.scales));
  CUDA_CHECK_LAUNCH();
}

void dequantize_to_f16(const DeviceMatrix& m, __half* out, cudaStream_t s) {
  if (m.scheme == Scheme::fp16) fail("dequantize_to_f16: the matrix is already fp16");
  if (m.int4_repacked || in_tiles(m) || m.mixed_wgmma)
    fail("dequantize_to_f16: expects the canonical layout");
  // Whole 8-column pieces that never straddle an int4 group: the vector kernel.
  if (m.cols % 8 == 0 && (m.scheme != Scheme::int4 || m.group_size % 8 == 0)) {
    const int64_t pieces = m.cols / 8;
    const dim3 grid(static_cast<unsigned>((pieces + kThreads - 1) / kThreads),
                    static_cast<unsigned>(std::min<int64_t>(m.rows, 65535)));
    dequantize8_kernel<<<grid, kThreads, 0, s>>>(m, out);
  } else {
    dequantize_kernel<<<grid_for(m.rows * m.cols), kThreads, 0, s>>>(m, out);
  }
  CUDA_CHECK_LAUNCH();
}

void repack_mixed(DeviceMatrix& m, void* w, void* meta, cudaStream_t s) {
  const char* why = nullptr;
  if (!mixed_gemm_takes(shape_of(m), &why)) fail("repack_mixed: [{} x {}]: {}", m.rows, m.cols, why);
  if (layout_of(m) != MatrixLayout::canonical) fail("repack_mixed: expects the canonical layout");
  const mixed::Kind k = m.scheme == Scheme::int4 ? mixed::Kind::int4 : mixed::Kind::int8;
  const int64_t bytes = mixed::weight_bytes(k, m.rows, m.cols);
  repack_mixed_weights_kernel<<<grid_for(bytes), kThreads, 0, s>>>(m, static_cast<uint8_t*>(w), bytes);
  CUDA_CHECK_LAUNCH();
  const int64_t groups = m.scheme == Scheme::int4 ? m.cols / m.group_size : 1;
  const int64_t entries = mixed::padded_rows(m.rows) * groups;
  repack_mixed_meta_kernel<<<grid_for(entries), kThreads, 0, s>>>(m, groups, static_cast<uint8_t*>(meta),
                                                                  entries);
  CUDA_CHECK_LAUNCH();
  m.qweight = w;
  m.scales = static_cast<__half*>(meta);
  m.zeros = nullptr;
  m.mixed_wgmma = true;
}

DeviceMatrix matrix_rows(const DeviceMatrix& m, int64_t r0, int64_t r1) {
  if (r0 < 0 || r1 > m.rows || r0 >= r1)
    fail("matrix_rows: rows [{}, {}) of a matrix of {} rows", r0, r1, m.rows);
  if (in_tiles(m) && r0 % tiles::kTileRows != 0)
    fail("matrix_rows: the tiles layouts keep tiles of {} rows; row {} starts none", tiles::kTileRows, r0);
  if (m.int4_repacked && r0 % int4_meta::kBlockRows != 0)
    fail("matrix_rows: the repacked int4 layout keeps blocks of {} rows; row {} starts none",
         int4_meta::kBlockRows, r0);
  if (m.scheme == Scheme::int4 && m.cols % 2 != 0 && r0 > 0)
    fail("matrix_rows: int4 rows of {} columns share bytes", m.cols);
  DeviceMatrix b = m;
  b.rows = r1 - r0;
  if (m.mixed_wgmma) {  // whole 128-row tiles: a tile's blocks and meta entries are its own
    if (r0 % mixed::kCtaRows != 0)
      fail("matrix_rows: the mixed-wgmma layout keeps tiles of {} rows; row {} starts none", mixed::kCtaRows,
           r0);
    const mixed::Kind k = mixed_kind_of(m);
    const int64_t tiles = r0 / mixed::kCtaRows;
    const int64_t groups = m.scheme == Scheme::int4 ? mixed::group_count(m.cols, m.group_size) : 1;
    b.qweight =
        static_cast<uint8_t*>(m.qweight) + tiles * (m.cols / mixed::kChunk) * 2 * mixed::block_bytes(k);
    b.scales =
        reinterpret_cast<__half*>(reinterpret_cast<uint8_t*>(m.scales) + tiles * groups * mixed::kMetaBytes);
    return b;
  }
  switch (m.scheme) {
    case Scheme::fp16:  // the tiles layout's row tiles are 16 rows x cols values too
      b.qweight = static_cast<__half*>(m.qweight) + r0 * m.cols;
      break;
    case Scheme::int8:  // a scale a row; the tiles layout's row tiles are 16 rows x cols bytes too
      b.qweight = static_cast<int8_t*>(m.qweight) + r0 * m.cols;
      b.scales = m.scales + r0;
      break;
    case Scheme::fp8:  // a float scale a row
      b.qweight = static_cast<uint8_t*>(m.qweight) + r0 * m.cols;
      b.scales = reinterpret_cast<__half*>(fp8_scales(b) + r0);
      break;
    case Scheme::int4: {  // a scale (and zero point) a group; packed or not, row r's at r * groups
      const int64_t groups = m.cols / m.group_size;
      if (m.int4_tiles) {  // whole tiles: their codes and their meta words
        b.qweight = static_cast<uint8_t*>(m.qweight) + r0 * m.cols / 2;
        b.scales = m.scales + 2 * r0 * groups;  // a word (two halves) a row and group
        break;
      }
      b.qweight = static_cast<uint8_t*>(m.qweight) + r0 * m.cols / 2;
      b.scales = m.scales + r0 * groups;
      if (m.zeros) b.zeros = m.zeros + r0 * groups;
      break;
    }
  }
  return b;
}

}  // namespace db::cuda
