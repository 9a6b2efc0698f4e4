// The float32 reference decode step (docs/design.md "The decode step"), on the CPU. Clarity
// first: it dequantizes the same canonical weights every backend uses, keeps activations
// and the KV cache in float32, and is what every GPU kernel and the transformers goldens
// are checked against. A LoRA adapter comes with the WeightSource: merged, it is already in
// the weights host_matrix returns; external, each adapted linear adds scale * B (A x).
// A model of batch B decodes B sequences in lockstep: one set of weights (each row
// dequantized once per step and used for every sequence), a KV cache and activations per
// sequence. Every sequence's arithmetic is a batch-1 model's, in the same order, so its
// logits are the same bits as that sequence's alone.
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
  static Plan plan(const ModelConfig& c, int64_t max_positions, int64_t batch = 1);

  // Materializes the weights (quantized as the config says) and, for each of `batch`
  // sequences, a KV cache of `max_positions` positions, after checking plan() against
  // host_memory() (host_memory.h): a model that does not fit fails with one line naming both.
  // The source's adapter, when it has one in external mode, is applied beside the weights in
  // every step (it must outlive the model). threads <= 0: default_threads().
  CpuModel(const WeightSource& source, int64_t max_positions, int threads = 0, int64_t batch = 1);

  // Batch 1: runs one decode step for `token` at position `pos` (positions must be fed in
  // order from 0, or re-fed from any earlier position: the cache at >= pos is overwritten).
  // Returns the logits [vocab].
  const std::vector<float>& step(int32_t token, int64_t pos);
  // One step of every sequence at position `pos`: sequence s decodes tokens[s] [batch].
  // Its logits are then logits(s) [vocab].
  void step_batch(const std::vector<int32_t>& tokens, int64_t pos);
  std::vector<float> logits(int64_t s) const;

  // Lowest index of the maximum (ties go to the lower id, as on the device).
  static int32_t argmax(const std::vector<float>& logits);

  const ModelConfig& config() const { return c_; }
  int threads() const { return threads_; }
  int64_t batch() const { return batch_; }
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
  // y_s = W x_s for every sequence s, x_s at x + s * w.cols and y_s at y + s * w.rows: each row
  // is dequantized once and dotted with every x_s.
  void matvec(const QuantMatrix& w, const float* x, float* y) const;
  // As matvec (+ scale * B (A x_s) when `l` carries an external adapter in this layer).
  void linear(const Layer& L, Linear l, const QuantMatrix& w, const float* x, float* y);
  void rmsnorm(const float* x, const float* w, int64_t n, float* out) const;
  void rope(float* v, int64_t heads, int64_t pos) const;
  // Sequence s's attention at layer l over positions 0..pos, from its q_ into its att_.
  void attention(int64_t l, int64_t s, int64_t pos);

  ModelConfig c_;
  const WeightSource& source_;
  const Adapter* external_ = nullptr;  // the source's adapter in external mode
  Origin embedding_;
  std::vector<Layer> layers_;
  std::vector<float> final_norm_;
  QuantMatrix lm_head_;
  int64_t max_positions_;
  int threads_;
  int64_t batch_;
  std::vector<float> rope_;               // rope_table(c_, max_positions_)
  std::vector<float> k_cache_, v_cache_;  // [batch, layers, max_positions, kv_dim]
  // scratch, each vector [batch, its size]: x_ [batch, hidden], q_ [batch, q_dim], ...
  std::vector<float> x_, h_, q_, k_, v_, att_, o_, g_, u_;
  std::vector<float> scores_;           // [max_positions], one sequence at a time
  std::vector<float> logits_;           // [batch, vocab]
  std::vector<float> lora_t_, lora_u_;  // A x [rank], B (A x) [largest out_features]
};

}  // namespace db
