// Byte accounting: what one decode step must read or write at least, as a pure function of
// config x scheme x kernel traffic x adapter x position. The floor time of a step is
// per_token.total / measured read bandwidth.
#pragma once

#include <cstdint>
#include <vector>

#include "decodebench/config.h"
#include "decodebench/model.h"

namespace db {

enum class AdapterMode { merged, external };

struct AdapterShape {
  int64_t rank = 0;             // 0: no adapter
  std::vector<Linear> targets;  // adapted linears in every layer
  AdapterMode mode = AdapterMode::merged;
};

// Bytes a kernel moves beyond the minimum for the weights it multiplies, per weight
// element: dequant-cublas writes an fp16 copy and reads it back (2 + 2 bytes).
struct KernelTraffic {
  double extra_bytes_per_weight = 0.0;
};

struct PerTokenBytes {
  uint64_t linear_weights = 0;  // packed transformer-block linear weights
  uint64_t scales = 0;          // their fp16 scales
  uint64_t zeros = 0;           // their int4 zero points (u8)
  uint64_t lm_head = 0;         // output projection, scales included
  uint64_t embedding_row = 0;   // one fp16 row of the embedding table
  uint64_t norms = 0;           // fp16 RMSNorm weights (and qwen3 q/k norms)
  uint64_t biases = 0;          // fp16 q/k/v biases (qwen2)
  uint64_t adapter = 0;         // LoRA A and B, external mode only
  uint64_t kv_read = 0;         // fp16 K and V for positions 0..pos
  uint64_t kv_write = 0;        // fp16 K and V of the new token
  uint64_t total = 0;
  uint64_t kernel_extra = 0;  // moved by the chosen kernel beyond `total` (not in total)
};

struct StoredBytes {
  uint64_t linear = 0;     // block linears with scales and zeros
  uint64_t lm_head = 0;    // 0 when tied to an fp16 embedding
  uint64_t embedding = 0;  // fp16 table
  uint64_t norms = 0;
  uint64_t biases = 0;   // qwen2's q/k/v biases
  uint64_t adapter = 0;  // external adapter A and B
  uint64_t total = 0;
};

struct ByteAccount {
  int64_t position_first = 0;
  int64_t position_last = 0;
  PerTokenBytes per_token;  // mean over positions first..last (KV read grows with position)
  StoredBytes stored;
};

// Bytes of one quantized matrix [rows, cols] in `scheme` (weights, scales, zeros).
struct MatrixBytes {
  uint64_t weights = 0, scales = 0, zeros = 0;
  uint64_t total() const { return weights + scales + zeros; }
};
MatrixBytes matrix_bytes(int64_t rows, int64_t cols, Scheme scheme, int group_size, bool zero_point);

ByteAccount account_bytes(const ModelConfig& c, const AdapterShape& adapter, const KernelTraffic& kernel,
                          int64_t position_first, int64_t position_last);

}  // namespace db
