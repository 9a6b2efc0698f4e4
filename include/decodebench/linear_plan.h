// The linear plan: for each kind of matrix of a decode step (a layer's qkv, o, gate/up and down,
// the same in every layer, and the lm_head), which implementation runs it, the layout its
// weights lie in, the path it takes at batch > 1, and any fallback with its reason; and which
// step runs them. Decided once, on the host, from the model, the kernel, the batch and the
// device's compute capability; the CUDA engine only carries it out (src/cuda/engine.cu) and
// `decodebench list kernels` and the result's config.kernel_fallbacks read it. Free of CUDA:
// tests/test_linear_plan.cpp asserts it for every preset on a CPU-only build.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "decodebench/config.h"
#include "decodebench/kernel_registry.h"
#include "decodebench/linear_shapes.h"

namespace db {

// The kinds of matrix a step multiplies, in the order it runs them; a layer's fused linears
// are alike in every layer.
enum class MatrixKind { qkv, o, gate_up, down, lm_head };
constexpr int kMatrixKinds = 5;
constexpr std::array<MatrixKind, kMatrixKinds> kAllMatrixKinds = {
    MatrixKind::qkv, MatrixKind::o, MatrixKind::gate_up, MatrixKind::down, MatrixKind::lm_head};
// "qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head" (config.kernel_fallbacks' lines).
const char* to_string(MatrixKind k);

// How a linear runs at batch > 1, where one launch multiplies every sequence's row.
enum class BatchedPath {
  none,               // batch 1: the implementation's own kernel
  tiles_gemv,         // int4's, int8's and fp16's fast-kernel linears their tiles layout holds,
                      // tiles_gemv_min_batch to kTilesGemvMaxBatch: kernels/gemv_tiles.cu on the tiles layout
  gemv_columns,       // the fast kernels' linears up to their scheme's crossover: kernels/gemv_columns.cu
  skinny_gemm,        // the fast kernels' int8, fp8 and int4 above it: kernels/skinny.cu on the GEMV's layout
  cublas,             // fp16 weights through cuBLAS (the fast kernel's fp16 above it, and fp16.cublas)
  mixed_gemm,         // the fast kernels' int4 and int8, kMixedGemmMinBatch to kMixedGemmMaxBatch
                      // sequences on sm_90 (where built): kernels/mixed_gemm.cu, wgmma with the
                      // weights dequantized in registers from the mixed-wgmma layout
  fp16_copy_cublas,   // a quantized matrix the skinny GEMM does not take: a block of rows at a
                      // time (fp16_chunk_rows) dequantized from its layout into fp16, then cuBLAS
                      // on those rows
  dequant_cublas,     // dequant-cublas: its fp16 copy from the canonical layout, then cuBLAS
  gemv_per_sequence,  // the naive kernel once a sequence: the slow path stays the slow path
};
const char* to_string(BatchedPath p);

// The batched step's fp16 copy of a matrix (BatchedPath::fp16_copy_cublas) is made in blocks
// of rows of at most this many bytes, each block's GEMM right after it. The default is the
// whole matrix, one block: on the H200 blocks small enough to stay in L2 (16 MiB) made 8b-int4
// at 128 sequences 16.7 ms against 10.5 for whole copies, cuBLAS running each block's GEMM on
// too few tiles to fill the GPU (results/lab/batch.md). Engines and lab builds may set smaller
// blocks (LinearPlan::dequant_chunk_bytes).
constexpr int64_t kDequantChunkBytes = std::numeric_limits<int64_t>::max();

// Rows of each block of a [rows, cols] matrix's fp16 copy at `chunk_bytes` a block: as many as
// its fp16 image holds, in whole tiles of 128 rows (cuBLAS's M tile) where it holds one, else in
// the 8-row blocks that the int4 layouts keep together (at least one); all of them when the
// matrix fits.
int64_t fp16_chunk_rows(int64_t rows, int64_t cols, int64_t chunk_bytes);
// Elements of the scratch those blocks take: the whole matrix when it is one block, else two
// blocks (the one being written, the one before it).
int64_t fp16_chunk_elements(int64_t rows, int64_t cols, int64_t chunk_bytes);

// The step that carries out a plan. Only one exists: one kernel (or a few) per operation, each
// launched after the one before, captured into one CUDA graph (docs/kernels.md#the-step).
enum class StepMode { kernel_per_op };
const char* to_string(StepMode m);  // "kernel-per-op"

// One kind of matrix as the step runs it.
struct LinearChoice {
  MatrixKind kind = MatrixKind::qkv;
  MatrixShape shape;  // the lm_head tied to the embedding: the fp16 embedding's
  LinearImpl impl = LinearImpl::gemv_fast;
  MatrixLayout layout = MatrixLayout::canonical;
  BatchedPath batched = BatchedPath::none;
  // Under --kernel auto, why the matrix runs the plain GEMV instead of the fast one:
  // "o_proj [2048 x 376]: int8.naive, since ...". Empty when it runs the kernel's own.
  std::string fallback;
  // A named kernel that cannot run the matrix: the error that refuses the run ("kernel
  // int8.gemv cannot run ..."). Empty when it can.
  std::string refusal;
  // batched == skinny_gemm: the shape timed at load, once the engine has timed it.
  std::optional<SkinnyTiming> skinny;
  // batched == tiles_gemv: the same for the tiles GEMV.
  std::optional<TilesTiming> tiles;
};

// How every matrix of the weights lies in device memory, by MatrixKind: what DeviceWeights
// fills, and what the engines sharing one set of weights must agree on.
struct WeightLayout {
  std::array<MatrixLayout, kMatrixKinds> matrices{};
  bool operator==(const WeightLayout& o) const { return matrices == o.matrices; }
  bool operator!=(const WeightLayout& o) const { return !(*this == o); }
  // "canonical", "int4-repacked", "int4-repacked (lm_head canonical)" or "canonical (lm_head
  // int4-repacked)": whether the blocks' and the lm_head's int4 matrices are repacked (keys
  // and messages); with a tiles layout anywhere, its name ("int4-tiles", "int8-tiles",
  // "fp16-tiles") where every matrix has it, or the blocks' layout with " (lm_head canonical)"
  // beside their tiles or " (lm_head fp16-tiles)" beside any one layout of theirs ("int8-tiles
  // (lm_head fp16-tiles)", "canonical (lm_head fp16-tiles)"), else each kind's layout
  // ("qkv_proj int4-tiles, o_proj int4-nibbles, ...").
  std::string name() const;
};

struct LinearPlan {
  std::array<LinearChoice, kMatrixKinds> linears;  // by MatrixKind
  StepMode step = StepMode::kernel_per_op;
  int64_t batch = 1;
  int capability = 0;  // the device's compute capability, 10 major + minor (90: sm_90)
  // The fp16 copies' blocks (fp16_chunk_rows): kDequantChunkBytes unless an engine sets another.
  int64_t dequant_chunk_bytes = kDequantChunkBytes;

  const LinearChoice& operator[](MatrixKind k) const { return linears[static_cast<int>(k)]; }
  LinearChoice& operator[](MatrixKind k) { return linears[static_cast<int>(k)]; }
  WeightLayout weight_layout() const;
  // The block linears all run a GEMV (fast or naive), which hand the RMSNorm statistics and
  // the residual stream's fp16 copy to each other (docs/kernels.md#rmsnorm-in-the-prologue);
  // false where they run cuBLAS, whose RMSNorm is a kernel of its own.
  bool gemv_blocks() const;
  // Attention lets the O GEMV launch right after issuing its loads, where that GEMV is int4's
  // fast one, whose loads are fewest (docs/kernels.md#pdl-and-early-weight-loads).
  bool attention_triggers_early() const;
  // The step calls cuBLAS: a cuBLAS kernel at batch 1, or a cuBLAS path at batch > 1.
  bool uses_cublas() const;
  // Elements of the fp16 scratch the step needs: the largest matrix dequant-cublas copies
  // whole, and the blocks of the batched step's fp16 copies (fp16_chunk_elements); 0: none.
  int64_t fp16_copy_elements() const;
  // Rows of each block of kind k's fp16 copy (fp16_chunk_rows at dequant_chunk_bytes).
  int64_t fp16_chunk_rows(MatrixKind k) const;
  // config.kernel_fallbacks: each fallback line, in step order.
  std::vector<std::string> fallbacks() const;
  // config.kernel_shapes: each timed skinny GEMM or tiles GEMV shape, one line a kind ("gate_up
  // [28672 x 4096]: m4u1b1, 34.3 us (default m4u1b2 34.9 us)", "down_proj [4096 x 14336]: rt1w8a2,
  // 12.2 us (default rt1w8 16.8 us)").
  std::vector<std::string> kernel_shapes() const;
  // config.batched_paths: at batch > 1, the path each kind of matrix takes, one line a kind in
  // step order ("gate_up [28672 x 4096]: skinny-gemm"); empty at batch 1.
  std::vector<std::string> batched_path_lines() const;
};

// The plan for `kernel` on the weights of `c`, at `batch` sequences on a device of compute
// capability `capability` (10 major + minor). `fallback` (--kernel auto): a matrix the fast
// GEMV cannot take runs the plain GEMV of its scheme instead, with the reason; without it,
// such a matrix keeps the kernel's implementation and carries the refusal (check_plan). The
// lm_head runs the kernel when it has the blocks' scheme, else the fast GEMV of its own.
// `mixed_gemm`: the build has the mixed-input GEMM (mixed_gemm_built); then on compute
// capability 9.0 from kMixedGemmMinBatch to kMixedGemmMaxBatch sequences the int4 and int8
// matrices it takes lie in its layout and run it, unless mixed_gemm_enabled says off.
LinearPlan plan_linears(const ModelConfig& c, const KernelInfo& kernel, int64_t batch, int capability,
                        bool fallback, bool mixed_gemm = false);
// Throws the plan's first refusal as a db::Error.
void check_plan(const LinearPlan& plan);

// The shape of a kind of matrix in the weights of `c` (the lm_head's own, tied or not), and
// the fp16 embedding's; whether the lm_head is the embedding itself.
MatrixShape matrix_shape(const ModelConfig& c, MatrixKind k);
MatrixShape embedding_shape(const ModelConfig& c);
bool lm_head_tied(const ModelConfig& c);

// The weight layouts a kernel's plans can put a matrix in (`decodebench list kernels`).
std::vector<MatrixLayout> layouts_read(const KernelInfo& kernel);
// The batched paths a kernel's plans can give a matrix of its scheme, in the order a growing
// batch reaches them (`decodebench list kernels`).
std::vector<BatchedPath> batched_paths(const KernelInfo& kernel);

}  // namespace db
