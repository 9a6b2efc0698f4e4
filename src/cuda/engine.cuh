// The CUDA decode engine: weights (DeviceWeights, shareable between engines), KV cache and
// activations on one GPU, and the decode step enqueued either eagerly or as a captured CUDA
// graph (the same launches either way).
#pragma once

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "decodebench/kernel_registry.h"
#include "decodebench/linear_plan.h"
#include "decodebench/result.h"
#include "decodebench/weights.h"
#include "device_weights.cuh"
#include "gemv.cuh"
#include "lora.cuh"
#include "skinny.cuh"
#include "step.cuh"

namespace db::cuda {

struct AttentionArgs;  // attention.cuh

#define CUBLAS_CHECK(expr)                                                                                  \
  do {                                                                                                      \
    const cublasStatus_t db_st_ = (expr);                                                                   \
    if (db_st_ != CUBLAS_STATUS_SUCCESS)                                                                    \
      ::db::fail("cuBLAS error {} in {} at {}:{}", cublasGetStatusName(db_st_), #expr, __FILE__, __LINE__); \
  } while (0)

// The linear plan on the current device (decodebench/linear_plan.h): its compute capability,
// and the mixed-input GEMM where this build has it (mixed_gemm_built).
LinearPlan device_plan(const ModelConfig& c, const KernelInfo& kernel, int64_t batch, bool fallback);
// The weight layout the engines of `kernel` at `batch` sequences read on the current device:
// the linear plan's (decodebench/linear_plan.h; the batched step has layouts of its own, the
// tiles from 2 to kTilesGemvMaxBatch sequences and the mixed-wgmma layout on sm_90 from
// kMixedGemmMinBatch to kMixedGemmMaxBatch). Engines with equal layouts can share one
// DeviceWeights.
WeightLayout weight_layout(const ModelConfig& c, const KernelInfo& kernel, int64_t batch = 1);
// The current device's compute capability, 10 major + minor (90: sm_90), the plan's input.
int device_capability();

// The fused linears of a layer, in the order a step runs them (an external adapter's groups
// are indexed by it).
enum class LoraSite { qkv, o, gate_up, down };

// Weights for an engine of `kernel` at `positions` positions, loaded after checking that they
// and the engine fit in free memory together: a run that cannot fit fails with one line
// ("not enough GPU memory ... need X ..., Y free of Z") before minutes of loading, not after.
// `fallback` (--kernel auto): a matrix the kernel cannot take runs the plain GEMV (Engine).
std::shared_ptr<const DeviceWeights> load_device_weights(const WeightSource& ws, const KernelInfo& kernel,
                                                         int64_t positions, bool fallback = false,
                                                         int64_t batch = 1);

// One linear layer as the step runs it: its weights, and its kind, whose LinearChoice in the
// engine's plan says how.
struct LinearOp {
  DeviceMatrix m;
  MatrixKind kind = MatrixKind::qkv;
};

// One layer as the step runs it: the shared weights' pointers, each linear's kind (the plan says how it
// runs), and the engine's own KV cache.
struct DeviceLayer {
  const __half* attn_norm = nullptr;  // [hidden]
  const __half* mlp_norm = nullptr;   // [hidden]
  const __half* q_norm = nullptr;     // [head_dim], qwen3
  const __half* k_norm = nullptr;
  const __half* qkv_bias = nullptr;  // [q_dim + 2 kv_dim] (qwen2), added to qkv's output by attention
  LinearOp qkv;                      // [q_dim + 2 kv_dim, hidden]: q rows, then k, then v
  LinearOp o;                        // [hidden, q_dim]
  LinearOp gate_up;                  // [2 intermediate, hidden]: rows interleaved gate_0, up_0, gate_1, ...
  LinearOp down;                     // [hidden, intermediate]
  // [batch] caches of `positions` rows in the engine's KV scheme (decodebench/kv_quant.h):
  // sequence s's at s * kvq::sequence_bytes(...) bytes; fp16 rows of halves, fp8 and int8
  // codes then scales, reached as bytes (attention.cuh says why the type is fp16's).
  __half* k_cache = nullptr;
  __half* v_cache = nullptr;
};

// Row-major y[rows, out] (+)= x[rows, in] W^T for a row-major fp16 W [out, in], through
// cuBLAS (fp32 accumulation and output): the prefill's GEMMs and the batched step's. `ldy`:
// the floats from one row of y to the next (0: out), so that W's rows can be a block of a
// larger matrix's and y the matching columns of that matrix's output.
void gemm_rows(cublasHandle_t h, const __half* w, int64_t out, int64_t in, const __half* x, int64_t rows,
               float* y, bool accumulate, int64_t ldy = 0);
// The same for a quantized W (any layout dequantize_any_to_f16 reads), through its fp16 copy
// made `chunk_rows` rows of W at a time (a multiple of 8, or all of them): rows [r0, r0 +
// chunk_rows) dequantized into one half of `scratch` (dequantize_rows_to_f16), then their
// GEMM into y's columns r0.., then the next block into the other half; on the handle's
// stream, which is `s`. `scratch` holds fp16_chunk_elements. With `chunk_rows` = all the
// rows (the engine's default, kDequantChunkBytes) it is one copy of the matrix and one GEMM.
void gemm_rows_dequant(cublasHandle_t h, const DeviceMatrix& w, const __half* x, int64_t rows, float* y,
                       bool accumulate, __half* scratch, int64_t chunk_rows, cudaStream_t s);
// An external adapter's term for `rows` rows of x [rows, g.in]: the shrink of every row as one
// GEMM into t [rows, targets x rank], then each row's expand added to y [rows, out].
void lora_rows(cublasHandle_t h, const LoraGroup& g, const __half* x, int64_t rows, float* t, float* y,
               int64_t out, cudaStream_t s);

class Engine {
 public:
  // An engine over shared weights: checks that `kernel` reads their layout and can run their
  // shapes, then allocates (after checking free memory: the weights are resident already and
  // not counted again) the KV cache for `positions` positions, activations, scratch and step
  // state, and captures the graph.
  // `fallback` (--kernel auto): a matrix the fast GEMV cannot take runs the plain GEMV instead
  // of failing (fallbacks() says which).
  // `batch` (--batch): sequences decoded in lockstep, each with a KV cache of its own, all at
  // one position; a step decodes one token of each (enqueue_step_batch). Batch 1 is the
  // single-sequence step.
  // `kv` (--kv-cache): the KV cache's scheme; unset, the weights' config's. Weights shared
  // between runs carry the config of the run that loaded them, so a run passes its own.
  // `dequant_chunk_bytes`: the blocks of the batched step's fp16 copies
  // (LinearPlan::dequant_chunk_bytes); 0, the default (dequant_chunk_bytes()). Tests give
  // small ones to cut small matrices into many blocks.
  Engine(std::shared_ptr<const DeviceWeights> weights, const KernelInfo& kernel, int64_t positions,
         bool fallback = false, int64_t batch = 1, std::optional<KvScheme> kv = std::nullopt,
         int64_t dequant_chunk_bytes = 0);
  // The same with weights of its own (load_device_weights), freed with the engine.
  Engine(const WeightSource& weights, const KernelInfo& kernel, int64_t positions, bool fallback = false,
         int64_t batch = 1);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  cudaStream_t stream() const { return stream_; }
  // Sets the shared position and every sequence's input token ([batch]) of the next step.
  void set_inputs(int64_t pos, const std::vector<int32_t>& tokens);
  // First position whose generated token tokens() reports.
  void set_first_position(int64_t pos);
  // Writes the KV cache of positions 0 .. tokens.size() - 1 for `tokens` at once (the batched
  // prefill, src/cuda/engine_prefill.cu): chunks of `chunk` rows (0: kPrefillChunk, fewer when
  // free memory is short) through cuBLAS GEMMs and causal attention, instead of one decode step
  // a token. Leaves the step state alone: set_inputs() the next position and tokens after it.
  // `sequence`: whose KV cache it writes (batch > 1); the others' are left alone.
  void prefill(const std::vector<int32_t>& tokens, int64_t chunk = 0, int64_t sequence = 0);
  static constexpr int64_t kPrefillChunk = 4096;
  // The causal attention kernel the last prefill() ran (prefill_attention_plan.h's names:
  // "wgmma", "mma", "plain"); empty before one.
  const std::string& prefill_attention_kernel() const { return prefill_attention_kernel_; }
  // Device memory prefill() allocates for a chunk of `rows` (freed when it returns).
  uint64_t prefill_scratch_bytes(int64_t rows) const;
  // Eager: the kernels of one step (every sequence's), as the plan's step mode runs them.
  void enqueue_step();
  void capture_graph();  // captures enqueue_step() once
  void launch_graph();   // one replay
  void synchronize();
  std::vector<float> logits(int64_t s);               // sequence s's logits of the last step [vocab]
  std::vector<int32_t> tokens(int64_t s, int64_t n);  // sequence s's, generated since set_first_position
  std::vector<int32_t> next_tokens();                 // every sequence's next input (the last argmax) [batch]

  // The sequences decoded in lockstep (any batch size; batch 1 is a batch of one).
  static constexpr int64_t kMaxBatch = 4096;  // grid dimensions and scratch stay far from limits
  int64_t batch() const { return batch_; }

  // The default block of the batched step's fp16 copies: kDequantChunkBytes
  // (decodebench/linear_plan.h); in lab builds (-DDECODEBENCH_DEV=ON)
  // DECODEBENCH_DEQUANT_CHUNK_MB=N in the environment makes it N MiB, for timing other sizes.
  static int64_t dequant_chunk_bytes();

  // Device memory an engine takes beside its weights: KV cache (in c.kv_cache's scheme) and
  // scratch (weights_bytes 0). `lora_rank`: an external adapter's rank, 0 without one. `batch`
  // and `fallback`: as the constructor's (the KV cache and activations B-fold, and the batched
  // step's scratch).
  static MemoryUse plan(const ModelConfig& c, const KernelInfo& kernel, int64_t positions, int64_t lora_rank,
                        int64_t batch = 1, bool fallback = false);
  // Fails with the reason when `kernel` cannot run the weights of `c` (the attention's head
  // size; the linear plan's refusals: shapes, group size, scheme), before anything is loaded or
  // allocated.
  static void check_kernel(const ModelConfig& c, const KernelInfo& kernel, bool fallback = false);
  // The matrices that run the plain GEMV under `fallback`, one line each ("o_proj [2048 x 376]:
  // int8.naive, since ..."); empty when the kernel takes every one.
  static std::vector<std::string> fallbacks(const ModelConfig& c, const KernelInfo& kernel);

  int launches_per_step() const { return launches_per_step_; }
  // What runs each kind of matrix (decodebench/linear_plan.h), the load-time skinny GEMM
  // shapes included.
  const LinearPlan& linear_plan() const { return plan_; }
  // At batch > 1, the skinny GEMM's or the tiles GEMV's shape for each kind of matrix they run,
  // as chosen by timing at construction, one line each ("gate_up [28672 x 4096]: m4u1b1, 34.3
  // us (default m4u1b2 34.9 us)"); empty at batch 1 or when they run none
  // (LinearPlan::kernel_shapes).
  std::vector<std::string> skinny_shapes() const { return plan_.kernel_shapes(); }
  MemoryUse memory() const { return memory_; }  // weights (shared or not), KV cache, scratch
  // Seconds the constructor took: the engine's own setup (allocation, graph capture), plus
  // loading the weights when it loaded them itself.
  double load_seconds() const { return load_s_; }
  const ModelConfig& config() const { return c_; }  // kv_cache: the engine's KV scheme
  const DeviceWeights& weights() const { return *weights_; }
  // The layers' weights as the kernels read them (tests compare merged weights with the host's).
  const std::vector<DeviceLayer>& device_layers() const { return layers_; }

 private:
  struct Buffers;
  void release();  // frees the engine's own resources (the destructor, or a constructor that throws)
  // Elements of the prefill's fp16 scratch: the blocks of the largest copy it makes, of a
  // quantized matrix or of an fp16 one in the tiles layout.
  int64_t prefill_dequant_elements() const;
  // The device memory of an engine that carries out `plan` (Engine::plan).
  static MemoryUse memory_use(const LinearPlan& plan, const ModelConfig& c, int64_t positions,
                              int64_t lora_rank);
  void run_linear(const LinearOp& op, const GemvInput& in, const GemvOutput& out);
  // The kernel-per-op step at batch 1: a GEMV a linear, its RMSNorm and epilogue fused in.
  void enqueue_step_single();
  // The step at batch > 1 (src/cuda/engine_batch.cu): the prefill's row-wise kernels, a row
  // per sequence, each linear one GEMM over the batch.
  void enqueue_step_batch();
  // y[batch, rows] (+)= x[batch, cols] W^T for op, and an external adapter's term at `site`.
  void linear_rows(int64_t layer, LoraSite site, const LinearOp& op, const __half* x, float* y,
                   bool accumulate);
  // At batch > 1: each kind of matrix that runs the skinny GEMM or the tiles GEMV (a layer's
  // qkv, o, gate/up, down over the layers, and the lm_head) timed at every shape (skinny.cuh,
  // tune_skinny; gemv_tiles.cuh, tune_tiles) on the step's own buffers, the fastest written
  // into the plan. Once a process for a kind of matrix, device and batch group: the engines of
  // a process run the same shapes.
  void tune_batched_shapes();
  const float* rope() const;  // the device's rope_table(positions_)
  // The decode attention's arguments for layer `d` over the step's buffers, at the device
  // position `pos` (sequence 0's at batch > 1: attention() strides to the others); no early
  // launch.
  AttentionArgs attention_args(const DeviceLayer& d, const int32_t* pos) const;
  // The decode attention over `batch` sequences: the tensor-core kernel (attention_mma.cuh)
  // where attention_mma_chosen() says so for the cache's positions and the heads, else
  // attention() (attention.cuh).
  void enqueue_attention(const AttentionArgs& a, int batch);

  ModelConfig c_;
  int64_t positions_ = 0;
  int64_t batch_ = 1;
  bool attention_mma_ = false;                    // attention_mma_chosen(positions_, the heads)
  LinearPlan plan_;                               // what runs each kind of matrix, and the step mode
  std::shared_ptr<const DeviceWeights> weights_;  // kept alive as long as the engine reads them
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::vector<void*> allocations_;  // the engine's own: KV cache, activations, scratch
  std::vector<DeviceLayer> layers_;
  DeviceMatrix embedding_;  // the weights' fp16 [vocab, hidden]
  LinearOp lm_head_;
  const __half* final_norm_ = nullptr;
  std::unique_ptr<Buffers> buf_;
  StepState step_state_;
  BatchState batch_state_;  // batch > 1
  cudaGraphExec_t graph_ = nullptr;
  int launches_per_step_ = 0;
  MemoryUse memory_;
  std::string prefill_attention_kernel_;
  double load_s_ = 0;

  // A LoRA adapter in external mode (lora.cuh): the weights' A and B groups pointed at this
  // engine's scratch, and the shrink and expand launches that precede each adapted fused
  // linear. Null without one (or merged: a merged adapter is in the weights already).
  struct Lora;
  void setup_lora();
  // Enqueues the low-rank path of one site of a layer and returns its delta, the addend of
  // the site's GEMV; nullptr when nothing there is adapted. `x` is the GEMV's input vector;
  // the overload with the residual (and its fp16 copy, or null) and norm weight (q/k/v,
  // gate/up) normalizes it: in the shrink from the norm statistics `sumsq` when the GEMVs
  // keep them, else with an RMSNorm kernel first.
  const float* lora_delta(int64_t layer, LoraSite site, const __half* x);
  const float* lora_delta(int64_t layer, LoraSite site, const float* resid, const __half* resid_h,
                          const __half* norm_w, const unsigned long long* sumsq);
  std::unique_ptr<Lora> lora_;
};

// Device name, capability, memory, NVML state, and the measured read bandwidth.
DeviceInfo describe_device(int device, bool measure_bandwidth);

}  // namespace db::cuda
