// The float32 reference decode step (docs/design.md "The decode step"), on the CPU. Clarity
// first: it dequantizes the same canonical weights every backend uses, keeps activations
// and the KV cache in float32, and is what every GPU kernel and the transformers goldens
// are checked against. A LoRA adapter comes with the WeightSource: merged, it is already in
// the weights host_matrix returns; external, each adapted linear adds scale * B (A x).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "decodebench/adapter.h"
#include "decodebench/weights.h"

namespace db {

class CpuModel {
 public:
  // What a model of `c` at `max_positions` positions allocates: its materialized weights
  // (an adapter's A and B are the adapter's own), KV cache and scratch.
  struct Plan {
    uint64_t weights = 0, kv_cache = 0, scratch = 0;
    uint64_t total() const { return weights + kv_cache + scratch; }
  };
  static Plan plan(const ModelConfig& c, int64_t max_positions);

  // Materializes the weights (quantized as the config says) and a KV cache of
  // `max_positions` positions, after checking plan() against host_memory() (host_memory.h): a
  // model that does not fit fails with one line naming both. The source's adapter, when it has one in
  // external mode, is applied beside the weights in every step (it must outlive the model).
  CpuModel(const WeightSource& source, int64_t max_positions, int threads = 0);

  // Runs one decode step for `token` at position `pos` (positions must be fed in order
  // from 0, or re-fed from any earlier position: the cache at >= pos is overwritten).
  // Returns the logits [vocab].
  const std::vector<float>& step(int32_t token, int64_t pos);

  // Lowest index of the maximum (ties go to the lower id, as on the device).
  static int32_t argmax(const std::vector<float>& logits);

  const ModelConfig& config() const { return c_; }
  int threads() const { return threads_; }
  static int default_threads();   // the threads a model takes by default: up to 4
  uint64_t weight_bytes() const;  // host bytes of the materialized weights (and external A, B)
  uint64_t kv_cache_bytes() const;

 private:
  struct Layer {
    std::vector<float> attn_norm, mlp_norm;  // [hidden]
    std::vector<float> q_norm, k_norm;       // [head_dim], qwen3
    std::vector<float> qkv_bias;             // [q_dim + 2 kv_dim]: q, k, v biases (qwen2), or empty
    QuantMatrix wq, wk, wv, wo, gate, up, down;
    std::array<const LoraPair*, kLinears.size()> lora{};  // external adapter, by Linear; nullptr: none
  };
  void matvec(const QuantMatrix& w, const float* x, float* y) const;
  // y = W x (+ scale * B (A x) when `l` carries an external adapter in this layer).
  void linear(const Layer& L, Linear l, const QuantMatrix& w, const float* x, float* y);
  void rmsnorm(const float* x, const float* w, int64_t n, float* out) const;
  void rope(float* v, int64_t heads, int64_t pos) const;

  ModelConfig c_;
  const WeightSource& source_;
  const Adapter* external_ = nullptr;  // the source's adapter in external mode
  Origin embedding_;
  std::vector<Layer> layers_;
  std::vector<float> final_norm_;
  QuantMatrix lm_head_;
  int64_t max_positions_;
  int threads_;
  std::vector<float> rope_;               // rope_table(c_, max_positions_)
  std::vector<float> k_cache_, v_cache_;  // [layers, max_positions, kv_dim]
  // scratch
  std::vector<float> x_, h_, q_, k_, v_, att_, o_, g_, u_, scores_, logits_;
  std::vector<float> lora_t_, lora_u_;  // A x [rank], B (A x) [largest out_features]
};

}  // namespace db
