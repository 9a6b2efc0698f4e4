// Tensor shapes and HF names derived from a config (see include/decodebench/model.h).
#include "decodebench/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

namespace db {

const char* short_name(Linear l) {
  switch (l) {
    case Linear::q:
      return "q";
    case Linear::k:
      return "k";
    case Linear::v:
      return "v";
    case Linear::o:
      return "o";
    case Linear::gate:
      return "gate";
    case Linear::up:
      return "up";
    case Linear::down:
      return "down";
  }
  return "?";
}

const char* hf_module_name(Linear l) {
  switch (l) {
    case Linear::q:
      return "self_attn.q_proj";
    case Linear::k:
      return "self_attn.k_proj";
    case Linear::v:
      return "self_attn.v_proj";
    case Linear::o:
      return "self_attn.o_proj";
    case Linear::gate:
      return "mlp.gate_proj";
    case Linear::up:
      return "mlp.up_proj";
    case Linear::down:
      return "mlp.down_proj";
  }
  return "?";
}

MatShape linear_shape(const ModelConfig& c, Linear l) {
  switch (l) {
    case Linear::q:
      return {c.q_dim(), c.hidden_size};
    case Linear::k:
    case Linear::v:
      return {c.kv_dim(), c.hidden_size};
    case Linear::o:
      return {c.hidden_size, c.q_dim()};
    case Linear::gate:
    case Linear::up:
      return {c.intermediate_size, c.hidden_size};
    case Linear::down:
      return {c.hidden_size, c.intermediate_size};
  }
  return {};
}

std::string linear_name(int64_t layer, Linear l) {
  return fmt::format("model.layers.{}.{}.weight", layer, hf_module_name(l));
}

std::string layer_norm_name(int64_t layer, bool post_attn) {
  return fmt::format("model.layers.{}.{}.weight", layer,
                     post_attn ? "post_attention_layernorm" : "input_layernorm");
}

std::string bias_name(int64_t layer, Linear l) {
  return fmt::format("model.layers.{}.{}.bias", layer, hf_module_name(l));
}

int64_t qkv_bias_size(const ModelConfig& c) {
  return checked_add(c.q_dim(), checked_mul(2, c.kv_dim(), "kv bias size"), "qkv bias size");
}

std::string qk_norm_name(int64_t layer, bool k) {
  return fmt::format("model.layers.{}.self_attn.{}.weight", layer, k ? "k_norm" : "q_norm");
}

namespace {

bool is_digit(char ch) {
  return ch >= '0' && ch <= '9';
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

bool starts_with(std::string_view s, std::string_view head) {
  return s.substr(0, head.size()) == head;
}

}  // namespace

std::string block_linear_containing(std::string_view text, int64_t layers) {
  // A module name is kPrefix + the layer's decimal digits D + "." + hf_module_name(l).
  constexpr std::string_view kPrefix = "model.layers.";
  const auto module = [](int64_t layer, Linear l) {
    return fmt::format("model.layers.{}.{}", layer, hf_module_name(l));
  };
  const auto tail = [](Linear l) { return "." + std::string(hf_module_name(l)); };
  if (text.empty() || layers <= 0) return {};
  const size_t d0 = std::find_if(text.begin(), text.end(), is_digit) - text.begin();
  if (d0 == text.size()) {  // no digit: within the prefix or within one linear's tail
    if (kPrefix.find(text) != std::string_view::npos) return module(0, kLinears[0]);
    for (Linear l : kLinears)
      if (tail(l).find(text) != std::string::npos) return module(0, l);
    return {};
  }
  const size_t d1 = std::find_if_not(text.begin() + d0, text.end(), is_digit) - text.begin();
  if (std::find_if(text.begin() + d1, text.end(), is_digit) != text.end()) return {};  // two digit runs
  const std::string_view before = text.substr(0, d0), digits = text.substr(d0, d1 - d0),
                         after = text.substr(d1);
  // The digits lie in D: text before them ends the prefix (D starts with them), text after
  // them starts a tail (D ends with them).
  if (!before.empty() && !ends_with(kPrefix, before)) return {};
  std::optional<Linear> linear;
  for (Linear l : kLinears)
    if (!linear && (after.empty() || starts_with(tail(l), after))) linear = l;
  if (!linear) return {};
  // The least layer whose D holds the digits where they must be: the digits themselves when
  // they are a number as written (no leading 0), else (they may only end D) with a 1 before.
  const bool canonical = digits.size() == 1 || digits[0] != '0';
  if (digits.size() > 18) return {};  // above any layer count
  int64_t layer = 0;
  for (char ch : digits) layer = layer * 10 + (ch - '0');
  if (!canonical) {
    if (!before.empty()) return {};  // D would start with a 0
    int64_t p = 1;
    for (size_t i = 0; i < digits.size(); ++i) p *= 10;
    layer += p;
  }
  if (layer >= layers) return {};
  return module(layer, *linear);
}

// validate() bounds every size so that this cannot overflow; the checked arithmetic says so
// for a config that has not been validated.
int64_t parameter_count(const ModelConfig& c) {
  constexpr const char* what = "parameter count";
  int64_t per_layer = checked_mul(2, c.hidden_size, what);  // input + post-attention RMSNorm
  if (c.arch == Arch::qwen3)
    per_layer = checked_add(per_layer, checked_mul(2, c.head_dim, what), what);           // q_norm, k_norm
  if (c.arch == Arch::qwen2) per_layer = checked_add(per_layer, qkv_bias_size(c), what);  // q/k/v biases
  for (Linear l : kLinears) per_layer = checked_add(per_layer, linear_shape(c, l).elements(), what);
  const int64_t embedding = checked_mul(c.vocab_size, c.hidden_size, what);
  const int64_t lm_head = c.tie_word_embeddings ? 0 : embedding;
  int64_t n = checked_add(embedding, checked_mul(c.num_hidden_layers, per_layer, what), what);
  n = checked_add(n, c.hidden_size, what);  // final norm
  return checked_add(n, lm_head, what);
}

}  // namespace db
