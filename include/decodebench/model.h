// The shapes and HF names of a model's tensors, derived from its config.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "decodebench/checked.h"
#include "decodebench/config.h"

namespace db {

// The seven linear layers of a transformer block (LoRA target names in comments).
enum class Linear { q, k, v, o, gate, up, down };
constexpr std::array<Linear, 7> kLinears = {Linear::q,    Linear::k,  Linear::v,   Linear::o,
                                            Linear::gate, Linear::up, Linear::down};

const char* short_name(Linear l);      // "q", "k", "v", "o", "gate", "up", "down"
const char* hf_module_name(Linear l);  // "self_attn.q_proj", ..., "mlp.down_proj"

struct MatShape {
  int64_t rows = 0;  // output features
  int64_t cols = 0;  // input features
  int64_t elements() const { return checked_mul(rows, cols, "matrix elements"); }
};

MatShape linear_shape(const ModelConfig& c, Linear l);

// HF tensor names.
std::string linear_name(int64_t layer, Linear l);            // model.layers.N.self_attn.q_proj.weight
std::string layer_norm_name(int64_t layer, bool post_attn);  // input_layernorm / post_attention_layernorm
std::string qk_norm_name(int64_t layer, bool k);             // model.layers.N.self_attn.q_norm.weight (qwen3)
// qwen2's q_proj, k_proj and v_proj biases: model.layers.N.self_attn.q_proj.bias ([q_dim],
// [kv_dim], [kv_dim]). Backends hold them as one [q_dim + 2 kv_dim] vector in the fused QKV
// output's order: q, then k, then v.
std::string bias_name(int64_t layer, Linear l);
constexpr Linear kBiasedLinears[] = {Linear::q, Linear::k, Linear::v};
int64_t qkv_bias_size(const ModelConfig& c);  // q_dim + 2 kv_dim

// The first block linear module ("model.layers.3.mlp.up_proj", no ".weight"), by layer from 0
// to layers - 1 and then in kLinears order, whose name contains `text`; empty when none does
// (or `text` is empty). HF leaves a module unquantized when its name contains an entry of
// modules_to_not_convert. Linear in text's length and independent of `layers`: only the
// layer number in a module name holds digits, so where `text` can sit is fixed by its own.
std::string block_linear_containing(std::string_view text, int64_t layers);
inline const char* kEmbedName = "model.embed_tokens.weight";
inline const char* kFinalNormName = "model.norm.weight";
inline const char* kLmHeadName = "lm_head.weight";

}  // namespace db
