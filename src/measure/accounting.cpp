// Byte accounting (see include/decodebench/accounting.h). Everything here is integer
// arithmetic on the config, so the unit tests can check it against hand-computed values.
#include "decodebench/accounting.h"

#include <algorithm>

#include "decodebench/error.h"
#include "decodebench/kv_quant.h"

namespace db {
namespace {

constexpr uint64_t kF16 = 2;  // fp16 bytes: embedding, norms, scales, adapters
constexpr uint64_t kF32 = 4;  // fp8's scales

uint64_t u(int64_t v) {
  return static_cast<uint64_t>(v);
}

uint64_t norm_bytes(const ModelConfig& c) {
  uint64_t n = u(2 * c.num_hidden_layers + 1) * u(c.hidden_size);              // two per layer + final
  if (c.arch == Arch::qwen3) n += u(2 * c.num_hidden_layers) * u(c.head_dim);  // q_norm, k_norm
  return n * kF16;
}

// qwen2's q_proj, k_proj and v_proj biases: attention reads all of them every step.
uint64_t bias_bytes(const ModelConfig& c) {
  return c.arch == Arch::qwen2 ? u(c.num_hidden_layers) * u(qkv_bias_size(c)) * kF16 : 0;
}

uint64_t adapter_bytes_per_layer(const ModelConfig& c, const AdapterShape& a) {
  uint64_t b = 0;
  for (Linear l : a.targets) {
    const MatShape s = linear_shape(c, l);
    b += u(a.rank) * u(s.rows + s.cols) * kF16;  // A [r, in] + B [out, r]
  }
  return b;
}

}  // namespace

MatrixBytes matrix_bytes(int64_t rows, int64_t cols, Scheme scheme, int group_size, bool zero_point) {
  MatrixBytes m;
  const uint64_t elements = u(rows) * u(cols);
  switch (scheme) {
    case Scheme::fp16:
      m.weights = elements * kF16;
      break;
    case Scheme::int8:
      m.weights = elements;
      m.scales = u(rows) * kF16;  // per output row
      break;
    case Scheme::fp8:
      m.weights = elements;
      m.scales = u(rows) * kF32;  // per output row, float
      break;
    case Scheme::int4: {
      if (group_size <= 0 || cols % group_size != 0)
        fail("int4 group size {} does not divide the input dimension {}", group_size, cols);
      const uint64_t groups = u(rows) * u(cols / group_size);
      m.weights = elements / 2;
      m.scales = groups * kF16;
      m.zeros = zero_point ? groups : 0;  // u8 per group
      break;
    }
  }
  return m;
}

uint64_t activation_bytes_per_sequence(const ModelConfig& c) {
  // Per layer: QKV reads H and writes q_dim + 2 kv_dim; O reads q_dim and writes H; gate/up
  // reads H and writes I (SiLU(gate) * up, which the multiply's epilogue can form); down reads
  // I and writes H. The lm_head reads H; its logits need not reach memory (the argmax can
  // run in its epilogue).
  const uint64_t per_layer =
      4 * u(c.hidden_size) + 2 * u(c.q_dim()) + 2 * u(c.kv_dim()) + 2 * u(c.intermediate_size);
  return (u(c.num_hidden_layers) * per_layer + u(c.hidden_size)) * kF16;
}

ByteAccount account_bytes(const ModelConfig& c, const AdapterShape& adapter, const KernelTraffic& kernel,
                          int64_t position_first, int64_t position_last, int64_t batch) {
  if (position_first < 0 || position_last < position_first)
    fail("byte accounting: bad position range {}..{}", position_first, position_last);
  if (batch < 1) fail("byte accounting: batch {} is not at least 1", batch);
  const uint64_t sequences = u(batch);
  ByteAccount a;
  a.position_first = position_first;
  a.position_last = position_last;
  PerTokenBytes& t = a.per_token;
  const QuantConfig& q = c.quant;

  uint64_t block_elements = 0;
  for (Linear l : kLinears) {
    const MatShape s = linear_shape(c, l);
    const MatrixBytes m = matrix_bytes(s.rows, s.cols, q.scheme, q.group_size, q.zero_point);
    t.linear_weights += m.weights;
    t.scales += m.scales;
    t.zeros += m.zeros;
    block_elements += u(s.elements());
  }
  const uint64_t layers = u(c.num_hidden_layers);
  t.linear_weights *= layers;
  t.scales *= layers;
  t.zeros *= layers;
  block_elements *= layers;

  const MatrixBytes head = matrix_bytes(c.vocab_size, c.hidden_size, q.lm_head, q.group_size, q.zero_point);
  t.lm_head = head.total();
  t.embedding_row = u(c.hidden_size) * kF16 * sequences;
  t.norms = norm_bytes(c);
  t.biases = bias_bytes(c);
  const bool external = adapter.rank > 0 && adapter.mode == AdapterMode::external;
  t.adapter = external ? adapter_bytes_per_layer(c, adapter) * layers : 0;

  // K and V in the cache's scheme, for every layer and kv head of every sequence: positions
  // 0..pos are read, pos is written, each position's elements and (fp8, int8) scales. The
  // mean of (pos + 1) over first..last is (first + last) / 2 + 1; keep it exact by working
  // with the sum first + last + 2 and halving at the end.
  const uint64_t kv_per_position =
      2 * layers * kvq::data_bytes(c.kv_cache, 1, c.num_key_value_heads, c.head_dim);
  const uint64_t scales_per_position = 2 * layers * kvq::scales_bytes(c.kv_cache, 1, c.num_key_value_heads);
  const uint64_t positions_x2 = u(position_first + position_last + 2);
  t.kv_read = kv_per_position * positions_x2 / 2 * sequences;
  t.kv_write = kv_per_position * sequences;
  t.kv_read_scales = scales_per_position * positions_x2 / 2 * sequences;
  t.kv_write_scales = scales_per_position * sequences;
  // Batch 1's few activation vectors stay in cache between the kernels and are not counted
  // (as ever); B sequences' grow with B and are.
  t.activations = batch > 1 ? activation_bytes_per_sequence(c) * sequences : 0;

  t.total = t.linear_weights + t.scales + t.zeros + t.lm_head + t.embedding_row + t.norms + t.biases +
            t.adapter + t.kv_read + t.kv_write + t.kv_read_scales + t.kv_write_scales + t.activations;
  // --kernel selects the block linears' kernel, and the lm_head's when it has the same
  // scheme (otherwise the lm_head runs its own scheme's default kernel, which moves nothing extra).
  const uint64_t head_elements = q.lm_head == q.scheme ? u(c.vocab_size) * u(c.hidden_size) : 0;
  t.kernel_extra = static_cast<uint64_t>(kernel.extra_bytes_per_weight *
                                         static_cast<double>(block_elements + head_elements));

  StoredBytes& s = a.stored;
  s.linear = t.linear_weights + t.scales + t.zeros;
  s.embedding = u(c.vocab_size) * u(c.hidden_size) * kF16;
  // A tied fp16 lm_head multiplies by the embedding table itself; any other combination
  // keeps its own (quantized) copy.
  s.lm_head = (c.tie_word_embeddings && q.lm_head == Scheme::fp16) ? 0 : head.total();
  s.norms = t.norms;
  s.biases = t.biases;
  s.adapter = t.adapter;
  s.total = s.linear + s.embedding + s.lm_head + s.norms + s.biases + s.adapter;
  return a;
}

StepFlops account_flops(const ModelConfig& c, const AdapterShape& adapter, int64_t position_first,
                        int64_t position_last, int64_t batch) {
  if (position_first < 0 || position_last < position_first)
    fail("FLOP accounting: bad position range {}..{}", position_first, position_last);
  if (batch < 1) fail("FLOP accounting: batch {} is not at least 1", batch);
  const uint64_t sequences = u(batch), layers = u(c.num_hidden_layers);
  StepFlops f;
  uint64_t elements = 0;
  for (Linear l : kLinears) elements += u(linear_shape(c, l).elements());
  f.linear = 2 * elements * layers * sequences;
  f.lm_head = 2 * u(c.vocab_size) * u(c.hidden_size) * sequences;
  // Each query head dots its q with K of positions 0..pos and sums V of them weighted: 2
  // multiply-adds per element of q_dim and position. The mean of (pos + 1) is
  // (first + last + 2) / 2, so 4 x q_dim x (pos + 1) is 2 x q_dim x (first + last + 2) exactly.
  f.attention = 2 * u(c.q_dim()) * u(position_first + position_last + 2) * layers * sequences;
  if (adapter.rank > 0 && adapter.mode == AdapterMode::external)
    for (Linear l : adapter.targets) {
      const MatShape s = linear_shape(c, l);
      f.adapter += 2 * u(adapter.rank) * u(s.rows + s.cols) * layers * sequences;
    }
  f.total = f.linear + f.lm_head + f.attention + f.adapter;
  return f;
}

}  // namespace db
