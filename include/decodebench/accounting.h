// Byte and FLOP accounting: what one decode step must read or write at least, and the
// arithmetic it must do, as pure functions of config x scheme x kernel traffic x adapter x
// position x batch. A step decodes one token of each of `batch` sequences in lockstep (at
// batch 1, one token). Its bandwidth floor is per_token.total / measured read bandwidth, its
// compute floor StepFlops::total / measured compute throughput.
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

// One decode step's bytes (the name is batch 1's, where a step is one token). Weights are
// read once a step whatever the batch; what each sequence has of its own is counted per
// sequence.
struct PerTokenBytes {
  uint64_t linear_weights = 0;  // packed transformer-block linear weights
  uint64_t scales = 0;          // their fp16 scales
  uint64_t zeros = 0;           // their int4 zero points (u8)
  uint64_t lm_head = 0;         // output projection, scales included
  uint64_t embedding_row = 0;   // one fp16 row of the embedding table per sequence
  uint64_t norms = 0;           // fp16 RMSNorm weights (and qwen3 q/k norms)
  uint64_t biases = 0;          // fp16 q/k/v biases (qwen2)
  uint64_t adapter = 0;         // LoRA A and B, external mode only
  // K and V in the KV cache's scheme (--kv-cache, kv_quant.h): their elements (2 bytes for
  // fp16, 1 for fp8 and int8) and their scales (a float per position, layer, kv head and K|V;
  // none for fp16)
  uint64_t kv_read = 0;          // the elements of positions 0..pos, per sequence
  uint64_t kv_write = 0;         // the elements of the new token, per sequence
  uint64_t total = 0;            // the sum of the fields above and below but kernel_extra
  uint64_t kernel_extra = 0;     // moved by the chosen kernel beyond `total` (not in total)
  uint64_t activations = 0;      // batch > 1: the matrix multiplies' fp16 inputs and outputs, per sequence
  uint64_t kv_read_scales = 0;   // the scales of positions 0..pos, per sequence
  uint64_t kv_write_scales = 0;  // the scales of the new token, per sequence
};

// One decode step's floating-point operations, a multiply-add counting 2: the matrix
// multiplies and attention's dot products (norms, RoPE and activations are not counted).
struct StepFlops {
  uint64_t linear = 0;     // block linears: 2 x elements x batch
  uint64_t lm_head = 0;    // 2 x vocab x hidden x batch
  uint64_t attention = 0;  // q.k and p.v: 4 x q_dim x (pos + 1) per layer and sequence
  uint64_t adapter = 0;    // external LoRA: 2 x rank x (rows + cols) per target, layer and sequence
  uint64_t total = 0;
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

// The bytes of one step at `batch` sequences (>= 1), the mean over positions first..last.
ByteAccount account_bytes(const ModelConfig& c, const AdapterShape& adapter, const KernelTraffic& kernel,
                          int64_t position_first, int64_t position_last, int64_t batch = 1);

// The FLOPs of one step at `batch` sequences, the mean over positions first..last.
StepFlops account_flops(const ModelConfig& c, const AdapterShape& adapter, int64_t position_first,
                        int64_t position_last, int64_t batch = 1);

// What one sequence's activations move in a step at batch > 1 (PerTokenBytes::activations
// per sequence): the fp16 input and output of every matrix multiply, each counted once.
uint64_t activation_bytes_per_sequence(const ModelConfig& c);

}  // namespace db
