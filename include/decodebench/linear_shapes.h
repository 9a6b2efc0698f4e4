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

// How a matrix lies in device memory: the canonical layout (what files hold; the naive GEMV and
// dequant-cublas read it), int4's two for the fast GEMV, the repacked nibble order and the
// tensor-core dot's fragment layout (decodebench/int4_frag.h), both with the scales and zero
// points packed per 8 rows (kernels/int4_meta.h), and, for int4 and int8, the Hopper mixed-input
// GEMM's (kernels/mixed_wgmma_layout.h: rows padded to 128, a thread's load its wgmma A
// fragments, the scales and zero constants in 512-byte entries a 128-row tile and group), which
// the batched step reads above kMixedGemmMinBatch sequences.
enum class MatrixLayout { canonical, int4_nibbles, int4_fragments, mixed_wgmma };
// "canonical", "int4-nibbles", "int4-fragments", "mixed-wgmma"
const char* to_string(MatrixLayout l);

// Weights in one 16-byte chunk, the unit every fast kernel loads: fp16 8, int8 and fp8 16, int4 32.
constexpr int weights_per_chunk(Scheme s) {
  return s == Scheme::fp16 ? 8 : (s == Scheme::int4 ? 32 : 16);
}

// Whether the fast GEMV (the rows kernel) takes the matrix in `layout`: an input dimension of
// whole chunks; int4 repacked, with a power-of-two group of at least 32 columns (a group is
// whole chunks, located by a shift). When not, `why` says so in words a result can carry.
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

// The mixed-input GEMM on wgmma (kernels/mixed_gemm.cuh): whether it takes the matrix (int4 or
// int8, cols a multiple of 64 (the layout's k-chunk, kernels/mixed_wgmma_layout.h, whose
// supports() is this), int4 groups a multiple of 64 columns dividing cols or a whole row). When
// not, `why` says so.
bool mixed_gemm_takes(const MatrixShape& m, const char** why);

// The smallest batch at which the linear plan runs int4 and int8 linears through the mixed-input
// GEMM (where the build has its sm_90a code and the GPU is compute capability 9.0): above the
// skinny GEMM's kSkinnyMaxBatch, where the fp16 copy + cuBLAS ran (8b-int4 at 256 sequences 13.6
// ms a step against fp16's 9.5 on the H200, results/lab/batch.md). Below it the plan keeps the
// columns GEMV and the skinny GEMM until the device measures the crossover.
constexpr int64_t kMixedGemmMinBatch = 65;

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
