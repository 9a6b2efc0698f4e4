// The model's weights on one GPU (DeviceWeights), in the layout the linear plan gives each
// matrix, shareable between the engines of several runs.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "decodebench/linear_plan.h"
#include "decodebench/weights.h"
#include "gemv.cuh"
#include "lora.cuh"

namespace db::cuda {

// Every weight of a model on one GPU, in one layout: the embedding, each layer's norms and
// fused linears (a merged LoRA adapter merged in), the final norm, the lm_head, and an external
// adapter's A and B. Nothing in it depends on positions, the graph switch or the kernel beyond
// its layout, so the engines of several runs (the sweep) share one through a shared_ptr.
// Immutable once built: engines only read it.
class DeviceWeights {
 public:
  struct Layer {
    __half* attn_norm = nullptr;  // [hidden]
    __half* mlp_norm = nullptr;   // [hidden]
    __half* q_norm = nullptr;     // [head_dim], qwen3
    __half* k_norm = nullptr;
    __half* qkv_bias = nullptr;  // [q_dim + 2 kv_dim]: q, k, v biases (qwen2), in qkv's row order
    DeviceMatrix qkv;            // [q_dim + 2 kv_dim, hidden]: q rows, then k, then v
    DeviceMatrix o;              // [hidden, q_dim]
    DeviceMatrix gate_up;        // [2 intermediate, hidden]: rows interleaved gate_0, up_0, gate_1, ...
    DeviceMatrix down;           // [hidden, intermediate]
  };
  // What the weights occupy in `layout`, and what loading them takes on top while it runs (the
  // stager's device buffer, a merge's temporary matrix and A, B, the canonical copy of a matrix
  // on its way into the tiles or mixed-wgmma layout), freed when the constructor returns.
  struct Plan {
    uint64_t weights_bytes = 0;
    uint64_t load_bytes = 0;
  };
  static Plan plan(const WeightSource& ws, const WeightLayout& layout);

  // Checks free memory against plan(), then allocates and fills everything on the current
  // device: synthetic weights generated there, a file's tensors uploaded through a pinned
  // stager and quantized, a merged adapter merged, each matrix in the layout `layout` gives its
  // kind (LinearPlan::weight_layout): repacked in place, or, for the tiles layout, filled into
  // a canonical staging copy and repacked from it.
  DeviceWeights(const WeightSource& ws, const WeightLayout& layout);
  ~DeviceWeights();
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  const ModelConfig& config() const { return c_; }
  const WeightLayout& layout() const { return layout_; }
  int device() const { return device_; }
  uint64_t bytes() const { return bytes_; }  // device memory held (plan().weights_bytes)
  double load_seconds() const { return load_s_; }
  const std::vector<Layer>& layers() const { return layers_; }
  // fp16 [vocab, hidden]: canonical, or in the fp16 tiles layout where it is the lm_head (tied)
  // and the layout puts the lm_head there.
  const DeviceMatrix& embedding() const { return embedding_; }
  const DeviceMatrix& lm_head() const { return lm_head_; }  // the embedding itself when tied
  const __half* final_norm() const { return final_norm_; }
  // An external adapter: its rank (0 without one) and, per layer and LoraSite, the group of A
  // and B (targets 0: nothing adapted there). Their x, t and delta are null: each engine
  // points them at scratch of its own.
  int64_t lora_rank() const { return lora_rank_; }
  const std::vector<std::array<LoraGroup, 4>>& lora_groups() const { return lora_groups_; }

 private:
  ModelConfig c_;
  WeightLayout layout_;
  int device_ = 0;
  uint64_t bytes_ = 0;
  double load_s_ = 0;
  std::vector<void*> allocations_;  // freed by the destructor
  std::vector<Layer> layers_;
  DeviceMatrix embedding_, lm_head_;
  __half* final_norm_ = nullptr;
  int64_t lora_rank_ = 0;
  std::vector<std::array<LoraGroup, 4>> lora_groups_;

  void fill(const WeightSource& ws);  // allocates and loads everything
  void release();                     // frees every allocation
};

// Fails with message() and the device's free and total memory when `need` bytes are more than
// is free.
void check_free_memory(uint64_t need, const std::function<std::string()>& message);
std::string gb(uint64_t bytes);  // "12.34 GB"

}  // namespace db::cuda
