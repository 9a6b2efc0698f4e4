// The CUDA decode engine: weights, KV cache and activations on one GPU, and the decode
// step enqueued either eagerly or as a captured CUDA graph (the same launches either way).
#pragma once

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "decodebench/kernel_registry.h"
#include "decodebench/result.h"
#include "decodebench/weights.h"
#include "gemv.cuh"
#include "lora.cuh"
#include "step.cuh"

namespace db::cuda {

enum class LinearImpl { gemv_fast, gemv_naive, cublas, dequant_cublas };
LinearImpl linear_impl(const KernelInfo& k);

// One linear layer as the step runs it.
struct LinearOp {
  DeviceMatrix m;
  LinearImpl impl = LinearImpl::gemv_fast;
};

struct DeviceLayer {
  __half* attn_norm = nullptr;  // [hidden]
  __half* mlp_norm = nullptr;   // [hidden]
  __half* q_norm = nullptr;     // [head_dim], qwen3
  __half* k_norm = nullptr;
  LinearOp qkv;                 // [q_dim + 2 kv_dim, hidden]: q rows, then k, then v
  LinearOp o;                   // [hidden, q_dim]
  LinearOp gate_up;             // [2 intermediate, hidden]: rows interleaved gate_0, up_0, gate_1, ...
  LinearOp down;                // [hidden, intermediate]
  __half* k_cache = nullptr;    // [positions, kv_dim]
  __half* v_cache = nullptr;
};

class Engine {
 public:
  // Allocates (after checking free memory) and fills everything for `positions` positions.
  Engine(const WeightSource& weights, const KernelInfo& kernel, int64_t positions);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  cudaStream_t stream() const { return stream_; }
  // Sets the position and input token of the next step (stream-ordered copies).
  void set_input(int64_t pos, int32_t token);
  // First position whose generated token tokens() reports.
  void set_first_position(int64_t pos);
  void enqueue_step();        // eager: the kernels of one step
  void capture_graph();       // captures enqueue_step() once
  void launch_graph();        // one replay
  void synchronize();
  std::vector<float> logits();                 // the last step's logits
  std::vector<int32_t> tokens(int64_t n);      // generated since set_first_position
  int32_t next_token();                        // the next step's input (the last argmax)

  int launches_per_step() const { return launches_per_step_; }
  MemoryUse memory() const { return memory_; }
  double load_seconds() const { return load_s_; }
  const ModelConfig& config() const { return c_; }
  // The layers' weights as the kernels read them (tests compare merged weights with the host's).
  const std::vector<DeviceLayer>& device_layers() const { return layers_; }

 private:
  struct Buffers;
  void run_linear(const LinearOp& op, const GemvInput& in, const GemvOutput& out);

  ModelConfig c_;
  int64_t positions_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::vector<void*> allocations_;
  std::vector<DeviceLayer> layers_;
  DeviceMatrix embedding_;  // fp16 [vocab, hidden]
  LinearOp lm_head_;
  __half* final_norm_ = nullptr;
  std::unique_ptr<Buffers> buf_;
  StepState st_;
  cudaGraphExec_t graph_ = nullptr;
  int launches_per_step_ = 0;
  bool norm_stats_ = false;  // the GEMVs hand RMSNorm statistics to each other (step.cuh)
  MemoryUse memory_;
  double load_s_ = 0;

  // A LoRA adapter in external mode (lora.cuh): its A and B on the device and the shrink and
  // expand launches that precede each adapted fused linear. Null without one (or merged: a
  // merged adapter is in the weights already).
  enum class LoraSite { qkv, o, gate_up, down };  // the fused linears of a layer
  struct Lora;
  void setup_lora(const WeightSource& ws);
  // Enqueues the low-rank path of one site of a layer and returns its delta, the addend of
  // the site's GEMV; nullptr when nothing there is adapted. `x` is the GEMV's input vector;
  // the overload with the residual and norm weight (q/k/v, gate/up) normalizes it first.
  const float* lora_delta(int64_t layer, LoraSite site, const __half* x);
  const float* lora_delta(int64_t layer, LoraSite site, const float* resid, const __half* norm_w);
  std::unique_ptr<Lora> lora_;
};

// Device name, capability, memory, NVML state, and the measured read bandwidth.
DeviceInfo describe_device(int device, bool measure_bandwidth);

}  // namespace db::cuda
