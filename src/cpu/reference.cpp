// The float32 reference decode step (see include/decodebench/cpu_reference.h).
#include "decodebench/cpu_reference.h"

#include <algorithm>
#include <cmath>

#include "decodebench/accounting.h"
#include "decodebench/error.h"
#include "decodebench/host_memory.h"
#include "decodebench/kv_quant.h"
#include "decodebench/parallel.h"
#include "decodebench/rope.h"

namespace db {

int CpuModel::default_threads() {
  return std::min(4, hardware_threads());
}

CpuModel::Plan CpuModel::plan(const ModelConfig& c, int64_t max_positions, int64_t batch) {
  Plan p;
  const ByteAccount b = account_bytes(c, AdapterShape{}, KernelTraffic{}, 0, 0);
  // The lm_head is materialized in its scheme even where it is tied to the embedding.
  const QuantConfig& q = c.quant;
  p.weights = b.stored.linear +
              matrix_bytes(c.vocab_size, c.hidden_size, q.lm_head, q.group_size, q.zero_point).total();
  // The norms' weights, held as float: two per layer (and qwen3's q and k norms), the final one.
  const uint64_t norm_floats = static_cast<uint64_t>(c.num_hidden_layers) *
                                   (2 * static_cast<uint64_t>(c.hidden_size) +
                                    (c.arch == Arch::qwen3 ? 2 * static_cast<uint64_t>(c.head_dim) : 0)) +
                               static_cast<uint64_t>(c.hidden_size);
  p.weights += sizeof(float) * norm_floats;
  if (c.arch == Arch::qwen2)  // the q/k/v biases, held as float
    p.weights +=
        sizeof(float) * static_cast<uint64_t>(c.num_hidden_layers) * static_cast<uint64_t>(qkv_bias_size(c));
  const uint64_t sequences = static_cast<uint64_t>(std::max<int64_t>(batch, 1));
  // K and V held as float whatever c.kv_cache: the reference rounds each vector as the scheme
  // stores it and keeps the result in float, so this is the reference's own cost, not the
  // scheme's (the accounting's kv_read and kv_read_scales are the scheme's).
  p.kv_cache = 2 * sizeof(float) * static_cast<uint64_t>(c.num_hidden_layers) *
               static_cast<uint64_t>(max_positions) * static_cast<uint64_t>(c.kv_dim()) * sequences;
  const uint64_t per_sequence = 5 * static_cast<uint64_t>(c.hidden_size) +
                                2 * static_cast<uint64_t>(c.q_dim()) + 2 * static_cast<uint64_t>(c.kv_dim()) +
                                2 * static_cast<uint64_t>(c.intermediate_size) +
                                2 * static_cast<uint64_t>(c.vocab_size);
  const uint64_t shared = static_cast<uint64_t>(max_positions) * (1 + static_cast<uint64_t>(c.head_dim));
  p.scratch = sizeof(float) * (per_sequence * sequences + shared);
  return p;
}

CpuModel::CpuModel(const WeightSource& source, int64_t max_positions, int threads, int64_t batch)
    : c_(source.config()), source_(source), max_positions_(max_positions), batch_(batch) {
  if (max_positions <= 0) fail("cpu reference: need at least one position");
  if (batch <= 0) fail("cpu reference: need at least one sequence, got a batch of {}", batch);
  const Plan need = plan(c_, max_positions, batch);
  require_host_memory({"the CPU reference of " + c_.name,
                       {{"weights", need.weights, ""},
                        {"KV cache", need.kv_cache,
                         fmt::format(" for {} positions{}", max_positions,
                                     batch > 1 ? fmt::format(" x {} sequences", batch) : "")},
                        {"scratch", need.scratch, ""}}});
  threads_ = threads > 0 ? threads : default_threads();
  const Scheme s = c_.quant.scheme;
  if (const Adapter* a = source.adapter(); a && a->mode == AdapterMode::external) external_ = a;
  embedding_ = source.embedding();
  layers_.resize(static_cast<size_t>(c_.num_hidden_layers));
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    Layer& L = layers_[l];
    L.attn_norm = source.host_vector(source.vector(layer_norm_name(l, false), c_.hidden_size));
    L.mlp_norm = source.host_vector(source.vector(layer_norm_name(l, true), c_.hidden_size));
    if (c_.arch == Arch::qwen3) {
      L.q_norm = source.host_vector(source.vector(qk_norm_name(l, false), c_.head_dim));
      L.k_norm = source.host_vector(source.vector(qk_norm_name(l, true), c_.head_dim));
    }
    if (c_.arch == Arch::qwen2) {
      for (Linear lin : kBiasedLinears) {
        const std::vector<float> b = source.host_vector(source.bias(l, lin));
        L.qkv_bias.insert(L.qkv_bias.end(), b.begin(), b.end());
      }
    }
    L.wq = source.host_matrix(source.linear(l, Linear::q), s);
    L.wk = source.host_matrix(source.linear(l, Linear::k), s);
    L.wv = source.host_matrix(source.linear(l, Linear::v), s);
    L.wo = source.host_matrix(source.linear(l, Linear::o), s);
    L.gate = source.host_matrix(source.linear(l, Linear::gate), s);
    L.up = source.host_matrix(source.linear(l, Linear::up), s);
    L.down = source.host_matrix(source.linear(l, Linear::down), s);
    if (external_)
      for (Linear lin : kLinears) L.lora[static_cast<size_t>(lin)] = external_->find(l, lin);
  }
  final_norm_ = source.host_vector(source.vector(kFinalNormName, c_.hidden_size));
  lm_head_ = source.host_matrix(source.lm_head(), c_.quant.lm_head);
  rope_ = rope_table(c_, max_positions_);
  const auto B = static_cast<size_t>(batch_);
  const size_t kv = static_cast<size_t>(c_.num_hidden_layers * max_positions_ * c_.kv_dim()) * B;
  k_cache_.assign(kv, 0.f);
  v_cache_.assign(kv, 0.f);
  const auto H = static_cast<size_t>(c_.hidden_size);
  x_.resize(B * H);
  h_.resize(B * H);
  q_.resize(B * static_cast<size_t>(c_.q_dim()));
  k_.resize(B * static_cast<size_t>(c_.kv_dim()));
  v_.resize(B * static_cast<size_t>(c_.kv_dim()));
  att_.resize(B * static_cast<size_t>(c_.q_dim()));
  o_.resize(B * H);
  g_.resize(B * static_cast<size_t>(c_.intermediate_size));
  u_.resize(B * static_cast<size_t>(c_.intermediate_size));
  scores_.resize(static_cast<size_t>(max_positions_));
  logits_.resize(B * static_cast<size_t>(c_.vocab_size));
  if (external_) {
    lora_t_.resize(static_cast<size_t>(external_->rank));
    lora_u_.resize(static_cast<size_t>(std::max({c_.q_dim(), c_.hidden_size, c_.intermediate_size})));
  }
}

uint64_t CpuModel::weight_bytes() const {
  auto m = [](const QuantMatrix& q) { return q.qweight.size() + 2 * q.scales.size() + q.zeros.size(); };
  uint64_t b = m(lm_head_) + 4 * final_norm_.size();
  for (const Layer& L : layers_)
    b += m(L.wq) + m(L.wk) + m(L.wv) + m(L.wo) + m(L.gate) + m(L.up) + m(L.down) + 4 * L.qkv_bias.size() +
         4 * (L.attn_norm.size() + L.mlp_norm.size() + L.q_norm.size() + L.k_norm.size());
  if (external_) b += external_->host_bytes();
  return b;
}

uint64_t CpuModel::kv_cache_bytes() const {
  return 4 * (k_cache_.size() + v_cache_.size());
}

void CpuModel::matvec(const QuantMatrix& w, const float* x, float* y) const {
  parallel_rows(w.rows, threads_, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int64_t r = begin; r < end; ++r) {
      w.row(r, row.data());
      for (int64_t s = 0; s < batch_; ++s) {
        const float* xs = x + s * w.cols;
        float acc = 0.f;
        for (int64_t c = 0; c < w.cols; ++c) acc += row[c] * xs[c];
        y[s * w.rows + r] = acc;
      }
    }
  });
}

void CpuModel::linear(const Layer& L, Linear l, const QuantMatrix& w, const float* x, float* y) {
  matvec(w, x, y);
  const LoraPair* p = L.lora[static_cast<size_t>(l)];
  if (!p) return;
  // The low-rank path of external mode, per sequence: t = A x [rank], then y += scale * B t.
  const int64_t r = external_->rank, in = w.cols, out = w.rows;
  const float s = external_->scale_f();
  for (int64_t seq = 0; seq < batch_; ++seq) {
    const float* xs = x + seq * in;
    float* ys = y + seq * out;
    for (int64_t k = 0; k < r; ++k) {
      const float* ak = p->a.data() + k * in;
      float acc = 0.f;
      for (int64_t i = 0; i < in; ++i) acc += ak[i] * xs[i];
      lora_t_[k] = acc;
    }
    for (int64_t o = 0; o < out; ++o) {
      const float* bo = p->b.data() + o * r;
      float acc = 0.f;
      for (int64_t k = 0; k < r; ++k) acc += bo[k] * lora_t_[k];
      lora_u_[o] = acc;
    }
    for (int64_t o = 0; o < out; ++o) ys[o] += s * lora_u_[o];
  }
}

void CpuModel::rmsnorm(const float* x, const float* w, int64_t n, float* out) const {
  float ss = 0.f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.f / std::sqrt(ss / static_cast<float>(n) + static_cast<float>(c_.rms_norm_eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}

void CpuModel::rope(float* v, int64_t heads, int64_t pos) const {
  const int64_t half = c_.head_dim / 2;
  const float* cosp = rope_.data() + pos * half;
  const float* sinp = rope_.data() + (max_positions_ + pos) * half;
  for (int64_t h = 0; h < heads; ++h) {
    float* p = v + h * c_.head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float a = p[i], b = p[i + half];
      p[i] = a * cosp[i] - b * sinp[i];
      p[i + half] = b * cosp[i] + a * sinp[i];
    }
  }
}

const std::vector<float>& CpuModel::step(int32_t token, int64_t pos) {
  if (batch_ != 1) fail("cpu reference: step() of one token on a model of {} sequences", batch_);
  step_batch({token}, pos);
  return logits_;  // [vocab] at batch 1
}

std::vector<float> CpuModel::logits(int64_t s) const {
  if (s < 0 || s >= batch_) fail("cpu reference: sequence {} of a batch of {}", s, batch_);
  const auto begin = logits_.begin() + s * c_.vocab_size;
  return {begin, begin + c_.vocab_size};
}

void CpuModel::attention(int64_t l, int64_t s, int64_t pos) {
  const int64_t hd = c_.head_dim, kvd = c_.kv_dim();
  const int64_t heads = c_.num_attention_heads, group = heads / c_.num_key_value_heads;
  const float* kc = k_cache_.data() + (s * c_.num_hidden_layers + l) * max_positions_ * kvd;
  const float* vc = v_cache_.data() + (s * c_.num_hidden_layers + l) * max_positions_ * kvd;
  // Attention of one query over positions 0..pos; query head h reads kv head h / group.
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  for (int64_t h = 0; h < heads; ++h) {
    const float* qh = &q_[s * c_.q_dim() + h * hd];
    const int64_t kvh = h / group;
    float mx = -INFINITY;
    for (int64_t t = 0; t <= pos; ++t) {
      const float* kt = kc + t * kvd + kvh * hd;
      float sc = 0.f;
      for (int64_t i = 0; i < hd; ++i) sc += qh[i] * kt[i];
      scores_[t] = sc * scale;
      mx = std::max(mx, scores_[t]);
    }
    float sum = 0.f;
    for (int64_t t = 0; t <= pos; ++t) {
      scores_[t] = std::exp(scores_[t] - mx);
      sum += scores_[t];
    }
    float* out = &att_[s * c_.q_dim() + h * hd];
    std::fill(out, out + hd, 0.f);
    for (int64_t t = 0; t <= pos; ++t) {
      const float p = scores_[t] / sum;
      const float* vt = vc + t * kvd + kvh * hd;
      for (int64_t i = 0; i < hd; ++i) out[i] += p * vt[i];
    }
  }
}

void CpuModel::step_batch(const std::vector<int32_t>& tokens, int64_t pos) {
  if (static_cast<int64_t>(tokens.size()) != batch_)
    fail("cpu reference: {} tokens for a batch of {}", tokens.size(), batch_);
  for (int32_t token : tokens)
    if (token < 0 || token >= c_.vocab_size) fail("cpu reference: token {} outside the vocabulary", token);
  if (pos < 0 || pos >= max_positions_) fail("cpu reference: position {} outside the cache", pos);
  const int64_t H = c_.hidden_size, hd = c_.head_dim, kvd = c_.kv_dim(), qd = c_.q_dim();
  const int64_t I = c_.intermediate_size, heads = c_.num_attention_heads;
  for (int64_t s = 0; s < batch_; ++s) source_.host_embedding_row(embedding_, tokens[s], &x_[s * H]);

  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    const Layer& L = layers_[l];
    for (int64_t s = 0; s < batch_; ++s) rmsnorm(&x_[s * H], L.attn_norm.data(), H, &h_[s * H]);
    linear(L, Linear::q, L.wq, h_.data(), q_.data());
    linear(L, Linear::k, L.wk, h_.data(), k_.data());
    linear(L, Linear::v, L.wv, h_.data(), v_.data());
    for (int64_t s = 0; s < batch_; ++s) {
      float* q = &q_[s * qd];
      float* k = &k_[s * kvd];
      float* v = &v_[s * kvd];
      if (!L.qkv_bias.empty()) {  // qwen2: before the RoPE, as transformers adds it inside q/k/v_proj
        const float* b = L.qkv_bias.data();
        for (int64_t i = 0; i < qd; ++i) q[i] += b[i];
        for (int64_t i = 0; i < kvd; ++i) k[i] += b[qd + i];
        for (int64_t i = 0; i < kvd; ++i) v[i] += b[qd + kvd + i];
      }
      if (c_.arch == Arch::qwen3) {
        for (int64_t h = 0; h < heads; ++h) rmsnorm(&q[h * hd], L.q_norm.data(), hd, &q[h * hd]);
        for (int64_t h = 0; h < c_.num_key_value_heads; ++h)
          rmsnorm(&k[h * hd], L.k_norm.data(), hd, &k[h * hd]);
      }
      rope(q, heads, pos);
      rope(k, c_.num_key_value_heads, pos);
      for (int64_t h = 0; h < c_.num_key_value_heads; ++h) {  // as --kv-cache stores them
        kvq::round_trip(&k[h * hd], hd, c_.kv_cache);
        kvq::round_trip(&v[h * hd], hd, c_.kv_cache);
      }
      const int64_t cache = (s * c_.num_hidden_layers + l) * max_positions_ * kvd;
      std::copy(k, k + kvd, k_cache_.data() + cache + pos * kvd);
      std::copy(v, v + kvd, v_cache_.data() + cache + pos * kvd);
      attention(l, s, pos);
    }
    linear(L, Linear::o, L.wo, att_.data(), o_.data());
    for (int64_t i = 0; i < batch_ * H; ++i) x_[i] += o_[i];

    for (int64_t s = 0; s < batch_; ++s) rmsnorm(&x_[s * H], L.mlp_norm.data(), H, &h_[s * H]);
    linear(L, Linear::gate, L.gate, h_.data(), g_.data());
    linear(L, Linear::up, L.up, h_.data(), u_.data());
    for (int64_t i = 0; i < batch_ * I; ++i) g_[i] = g_[i] / (1.f + std::exp(-g_[i])) * u_[i];
    linear(L, Linear::down, L.down, g_.data(), o_.data());
    for (int64_t i = 0; i < batch_ * H; ++i) x_[i] += o_[i];
  }
  for (int64_t s = 0; s < batch_; ++s) rmsnorm(&x_[s * H], final_norm_.data(), H, &h_[s * H]);
  matvec(lm_head_, h_.data(), logits_.data());
}

int32_t CpuModel::argmax(const std::vector<float>& logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

}  // namespace db
