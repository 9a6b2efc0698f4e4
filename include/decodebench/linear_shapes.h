// What each linear kernel can take: the shape predicates the linear plan decides with
// (decodebench/linear_plan.h) and the kernels' launchers check with (kernels/gemv.cu,
// kernels/skinny.cu), one definition each. Pure host code without CUDA, so a CPU test asserts
// them; weights_per_chunk is constexpr for the kernels' device code too.
#pragma once

#include <cstdint>
#include <string>

#include "decodebench/config.h"

namespace db {

// A weight matrix's shape and quantization, without memory: [rows, cols] of `scheme`; int4 in
// groups of `group_size` columns, with or without zero points.
struct MatrixShape {
  Scheme scheme = Scheme::fp16;
  int64_t rows = 0, cols = 0;
  int group_size = 0;  // int4 only
  bool zero_point = false;
  int64_t weights() const { return rows * cols; }
};

// How a matrix lies in device memory: the canonical layout (what files hold; the naive GEMV,
// dequant-cublas and int8's rows, columns and skinny kernels read it), int4's fast GEMV's
// repacked nibble order, the tensor-core dot's fragment layout (decodebench/int4_frag.h), the
// batched step's tiles GEMV's tiles, int4 (kernels/int4_tiles_layout.h), int8
// (kernels/int8_tiles_layout.h) and fp16 (kernels/fp16_tiles_layout.h), and, for int4 and int8,
// the Hopper mixed-input GEMM's (kernels/mixed_wgmma_layout.h: rows padded to 128, a thread's
// load its wgmma A fragments, the scales and zero constants in 512-byte entries a 128-row tile
// and group). The nibble and fragment layouts keep the scales and zero points packed per 8 rows
// (kernels/int4_meta.h); the int4 tiles keep a word a row and group, its scale and zero
// constant, per tile of 16 rows; the int8 tiles keep the canonical row scales; fp16 has none.
enum class MatrixLayout {
  canonical,
  int4_nibbles,
  int4_fragments,
  int4_tiles,
  int8_tiles,
  fp16_tiles,
  mixed_wgmma
};
// "canonical", "int4-nibbles", "int4-fragments", "int4-tiles", "int8-tiles", "fp16-tiles",
// "mixed-wgmma"
const char* to_string(MatrixLayout l);

// Weights in one 16-byte chunk, the unit every fast kernel loads: fp16 8, int8 and fp8 16, int4 32.
constexpr int weights_per_chunk(Scheme s) {
  return s == Scheme::fp16 ? 8 : (s == Scheme::int4 ? 32 : 16);
}

// Whether the fast GEMV (the rows kernel) takes the matrix in `layout`: an input dimension of
// whole chunks; int4 in the nibble order or the fragment layout, with a power-of-two group of
// at least 32 columns (a group is whole chunks, located by a shift). When not, `why` says so
// in words a result can carry.
bool fast_gemv_takes(const MatrixShape& m, MatrixLayout layout, const char** why);

// Whether the fast kernels (the rows GEMV and the skinny GEMM) run `scheme` on a device of
// compute capability `capability` (10 major + minor): fp8 only from sm_89 on, where the
// fp8x2 -> half2 conversion is one instruction (cvt.rn.f16x2.e4m3x2); below, the plan runs
// fp8 on the naive GEMV, whose conversion is CUDA's software one. When not, `why` says so.
constexpr int kFp8Capability = 89;
bool fast_kernels_run(Scheme scheme, int capability, const char** why);

// Whether the skinny GEMM of the batched step takes the matrix in `layout`: as the fast GEMV,
// but int4 only in the nibble order (its A operands are the nibble order's chunks).
bool skinny_gemm_takes(const MatrixShape& m, MatrixLayout layout, const char** why);

// The columns GEMV of the batched step (kernels/gemv_columns.cuh): the rows kernel with an
// accumulator a sequence, for up to kGemvColumnsMaxBatch sequences. As the rows kernel, a block
// covers whole rows with at most kGemvColumnsMaxThreads threads of up to 8 chunks each; every
// group of rows reads the x of all sequences again from L1, so all of it, B x cols fp16, must
// stay there: at most kGemvColumnsInputBytes (of the 224 KB of L1 beside the 32 KB
// shared-memory configuration the launches ask for).
constexpr int64_t kGemvColumnsMaxBatch = 8;
constexpr int kGemvColumnsMaxThreads = 512;
constexpr int64_t kGemvColumnsInputBytes = 128 * 1024;

// Whether the columns GEMV takes the matrix in `layout` at `batch` sequences: as the fast GEMV,
// but not the int4 fragment layout; 2 to kGemvColumnsMaxBatch sequences whose inputs fit
// kGemvColumnsInputBytes. When not, `why` says so.
bool gemv_columns_takes(const MatrixShape& m, MatrixLayout layout, int64_t batch, const char** why);

// The largest batch at which the linear plan runs a scheme's fast-kernel linears through the
// columns GEMV; above it, the skinny GEMM (int8, int4, fp8) or cuBLAS (fp16). On the H200 an
// 8b-int4 layer takes 55.9 us at 2 sequences through it against the skinny GEMM's 64.4, and
// 75.6 against 64.5 at 3 (results/lab/batch.md §22): 2 for every scheme.
constexpr int64_t kGemvColumnsCrossoverFp16 = 2;
constexpr int64_t kGemvColumnsCrossoverInt8 = 2;
constexpr int64_t kGemvColumnsCrossoverInt4 = 2;
constexpr int64_t kGemvColumnsCrossoverFp8 = 2;
constexpr int64_t gemv_columns_crossover(Scheme s) {
  return s == Scheme::fp16   ? kGemvColumnsCrossoverFp16
         : s == Scheme::int8 ? kGemvColumnsCrossoverInt8
         : s == Scheme::int4 ? kGemvColumnsCrossoverInt4
                             : kGemvColumnsCrossoverFp8;
}

// The tiles GEMV of the batched step (kernels/gemv_tiles.cuh): int4, int8 and fp16 on the
// tensor cores, the weights in their tiles layout as the mma's A operand, up to 8 sequences a
// mma as its N (9 to 16 a second mma on the same weights). The plan runs it, and lays the matrices it
// takes out in their scheme's tiles layout, from tiles_gemv_min_batch to kTilesGemvMaxBatch;
// batch 1 keeps the rows GEMV and its layout. The range is the kernel's own (two mmas at most);
// on the H200 it beats the columns GEMV and the skinny GEMM in 8b-int4's step at 2, 4, 8 and 16
// sequences and in 8b-int8's at 2, 8 and 16 (results/lab/batch.md §29, §31).
constexpr int64_t kTilesGemvMaxBatch = 16;
// The fewest sequences the plan runs a matrix on the tiles GEMV at: 2, but 3 for fp16 block
// matrices (qkv, o, gate/up, down), which the columns GEMV streams faster at 2: fp16 has no
// dequantization for the tensor cores to save, and on an H100 the 8b-fp16 step at 2 took 5.31
// ms with the columns GEMV's blocks against 5.49 on the tiles, 1b-fp16's 1.03 against 1.14. An
// fp16 lm_head keeps the tiles from 2 (8b's as fast either way, 1b's tied one 6% of the
// 1b-int4 step faster; docs/kernels.md#batch).
constexpr int64_t kTilesGemvMinBatchFp16Blocks = 3;
constexpr int64_t tiles_gemv_min_batch(Scheme s, bool lm_head) {
  return s == Scheme::fp16 && !lm_head ? kTilesGemvMinBatchFp16Blocks : 2;
}

// Whether the tiles layout holds the matrix: int4 in groups of a power of two of at least 128
// columns (the kernel's step of two 64-column tiles reads one scale a row), the columns whole
// groups; any rows (the last tile is padded). When not, `why` says so.
bool int4_tiles_hold(const MatrixShape& m, const char** why);
// Whether the int8 tiles layout holds the matrix: int8 with whole steps of 64 columns (two
// 32-column tiles) a row; any rows. When not, `why` says so.
bool int8_tiles_hold(const MatrixShape& m, const char** why);
// Whether the fp16 tiles layout holds the matrix: fp16 with whole steps of 32 columns (two
// 16-column tiles) a row; any rows. When not, `why` says so.
bool fp16_tiles_hold(const MatrixShape& m, const char** why);
// The tiles layout of a scheme (int4_tiles, int8_tiles, fp16_tiles), canonical for fp8; and
// whether that layout holds the matrix.
MatrixLayout tiles_layout(Scheme s);
bool tiles_hold(const MatrixShape& m, const char** why);
// Whether the tiles GEMV takes the matrix in `layout` at `batch` sequences: one its scheme's
// tiles layout holds, in that layout, 1 to kTilesGemvMaxBatch sequences. When not, `why` says
// so.
bool tiles_gemv_takes(const MatrixShape& m, MatrixLayout layout, int64_t batch, const char** why);
// Whether the plan may choose the scheme's tiles layout and the tiles GEMV: yes unless the
// environment says DECODEBENCH_TILES=off (every scheme) or DECODEBENCH_INT4_TILES=off /
// DECODEBENCH_INT8_TILES=off / DECODEBENCH_FP16_TILES=off (that scheme), which keep the paths
// before it (the columns GEMV, the skinny GEMM, cuBLAS) for a side-by-side measurement. Read at
// every call; any other value than "on", "off" or empty is a db::Error.
bool tiles_enabled(Scheme s);
bool int4_tiles_enabled();  // tiles_enabled(Scheme::int4)

// The mixed-input GEMM on wgmma (kernels/mixed_gemm.cuh): whether it takes the matrix (int4 or
// int8, cols a multiple of 64 (the layout's k-chunk, kernels/mixed_wgmma_layout.h, whose
// supports() is this), int4 groups a multiple of 64 columns dividing cols or a whole row). When
// not, `why` says so.
bool mixed_gemm_takes(const MatrixShape& m, const char** why);

// The batches at which the plan runs the fast kernels' int4 and int8 linears through the
// mixed-input GEMM and lays them out in its layout, where the build has its sm_90a code and the
// GPU is compute capability 9.0: past the tiles GEMV, 17 to 128 sequences. On the H200 an 8b
// layer there took 107-162 us against 134-141 on cuBLAS fp16 and 357-375 for the fp16 copy +
// cuBLAS that int4 and int8 ran above the skinny GEMM (results/lab/batch.md §34). Above 128 the
// fp16 copy + cuBLAS is faster in the step: 8b-int4 at 256 sequences 12.88 ms against 13.45 on
// the mixed GEMM.
constexpr int64_t kMixedGemmMinBatch = kTilesGemvMaxBatch + 1;
constexpr int64_t kMixedGemmMaxBatch = 128;
// Whether the plan may choose the mixed-input GEMM: yes unless the environment says
// DECODEBENCH_MIXED_GEMM=off, which keeps the paths before it (the skinny GEMM to 64 sequences,
// the fp16 copy + cuBLAS above) for a side-by-side measurement. Read at every call; any other
// value than "on", "off" or empty is a db::Error.
bool mixed_gemm_enabled();

// Sequences one skinny GEMM launch takes; more run as several launches, each reading the
// weights again.
constexpr int64_t kSkinnyMaxBatch = 64;

// The skinny GEMM's shape (kernels/skinny.cuh): row tiles of 16 a block (1, 2 or 4), 16-byte
// chunks a lane a step (1, 2 or 4) and the blocks an SM its column split aims at (1 to 8);
// 0: the default for the scheme and batch.
struct SkinnyShape {
  int row_tiles = 0, chunks = 0, blocks_per_sm = 0;
};
// "m4u1b2": 4 row tiles a block, 1 chunk a lane a step, 2 blocks an SM (the form
// config.kernel_shapes records).
std::string skinny_shape_label(const SkinnyShape& s);

// The load-time choice of a skinny GEMM shape for one kind of matrix (Engine::tune_skinny_shapes):
// the fastest timed shape, kept only when 3% faster than the default.
struct SkinnyTiming {
  SkinnyShape shape, default_shape;  // resolved: every field set
  double us = 0, default_us = 0;     // a matrix's time at each
};

// A tiles GEMV launch shape (kernels/gemv_tiles.cuh): `row_tiles` tiles of 16 rows a warp (and
// a block), `warps` warps a block, which split the row's steps between them, and `ahead` steps
// of weights a warp keeps in flight beyond the one it multiplies. 0 rows and warps: the
// default's.
struct TilesShape {
  int row_tiles = 0, warps = 0;
  int ahead = 1;
};
// "rt1w8", "rt1w8a2": row tiles, warps and, past 1, the steps ahead (config.kernel_shapes).
std::string tiles_shape_label(const TilesShape& s);

// The load-time choice of a tiles GEMV shape for one kind of matrix (Engine::tune_batched_shapes):
// the fastest instantiated shape, kept only when 3% faster than the modelled default
// (tiles_shape).
struct TilesTiming {
  TilesShape shape, default_shape;
  double us = 0, default_us = 0;  // a matrix's time at each
};

// Where the int4 fragment layout is worth it: matrices it can hold (int4_frag::eligible) of
// at least kInt4FragmentWeights weights. On the H200 the tensor-core dot made 70b's gate/up
// (57344 x 8192) and down (8192 x 28672) 4.9% and 3.1% faster in the GEMV bench and 70b-int4's
// step 3.2% faster, but 8b's qkv, o and down (25-59 M weights) and every 1b matrix slower: a
// short matrix pays the B registers' staging and the mma chains' latency on too few groups a
// block. 8b's gate/up (117 M) is in between: as fast as the nibble kernel in the bench, its step
// 0.7% slower with it, so it keeps the nibble layout (docs/kernels.md#int4-on-the-tensor-cores).
constexpr int64_t kInt4FragmentWeights = 200'000'000;
bool prefers_int4_fragments(int64_t rows, int64_t cols, int group_size);

}  // namespace db
