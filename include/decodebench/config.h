// Model configuration: the architecture (HF field names) plus the quantization scheme.
// Sources: a preset embedded in the binary (configs/*.json, e.g. "8b-int4"), a decodebench
// config file, or an HF config.json (or the model directory holding one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "decodebench/checked.h"

namespace db {

// qwen2: llama plus biases on q_proj, k_proj and v_proj; qwen3: llama plus per-head q/k RMSNorm.
enum class Arch { llama, qwen2, qwen3 };
enum class Scheme { fp16, int8, int4, fp8 };  // fp8: E4M3 (quant.h)
// How the KV cache stores K and V (--kv-cache): fp16 as computed, or fp8 (E4M3) / int8 codes
// with one float scale per token and kv head (decodebench/kv_quant.h).
enum class KvScheme { fp16, fp8, int8 };

const char* to_string(Arch a);
const char* to_string(Scheme s);
const char* to_string(KvScheme s);
// Throws db::Error naming the accepted values.
Arch parse_arch(std::string_view s);
Scheme parse_scheme(std::string_view s);
KvScheme parse_kv_scheme(std::string_view s);

// Bits a weight of this scheme occupies (16, 8, 4, 8).
int scheme_bits(Scheme s);

struct RopeScaling {
  bool llama3 = false;  // "rope_type": "llama3"; otherwise no scaling
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct QuantConfig {
  Scheme scheme = Scheme::fp16;   // transformer-block linear layers
  int group_size = 128;           // int4 only
  bool zero_point = true;         // int4 only: asymmetric with a zero point
  Scheme lm_head = Scheme::fp16;  // the output projection has its own scheme
};

// An HF config.json's quantization_config, for an int4 checkpoint published by GPTQ or AWQ
// tools (docs/weights.md#gptq-and-awq-checkpoints). `format` empty: none.
struct HfInt4 {
  std::string format;  // "gptq" (zeros stored minus 1), "gptq_v2" or "awq" (GEMM packing)
  int group_size = 0;  // the file's group size; -1: one group per row
  bool sym = false;    // gptq: every zero is 8
};

// An HF config.json's quantization_config for an FP8 (E4M3) checkpoint with per-tensor or
// per-channel weight scales (docs/weights.md#fp8-checkpoints). `format` empty: none.
struct HfFp8 {
  std::string format;    // "fp8" (weight_scale_inv or weight_scale) or "compressed-tensors" (weight_scale)
  std::string strategy;  // compressed-tensors: "channel" or "tensor" when every group says it; else ""
};

struct ModelConfig {
  std::string name;    // preset name or the path it was read from
  std::string source;  // "preset" | "file" | "hf"
  // Set when the int4 group size is not the config's own: why (apply_overrides, fit_group_size).
  std::string group_size_note;
  Arch arch = Arch::llama;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 0;
  QuantConfig quant;
  HfInt4 hf_int4;  // an HF config.json's GPTQ/AWQ quantization_config; the run converts its weights
  HfFp8 hf_fp8;    // an HF config.json's FP8 quantization_config; the run reads its codes and scales
  KvScheme kv_cache = KvScheme::fp16;  // --kv-cache: a run's choice, not the config file's

  int64_t q_dim() const {
    return checked_mul(num_attention_heads, head_dim, "num_attention_heads * head_dim");
  }
  int64_t kv_dim() const {
    return checked_mul(num_key_value_heads, head_dim, "num_key_value_heads * head_dim");
  }
};

// Resolves a preset name ("8b-int4"), a config file path, an HF config.json path or an HF
// model directory. Every missing or inconsistent field is a db::Error naming the field and
// the file (or preset).
ModelConfig load_model_config(const std::string& name_or_path);

// Parses a JSON text (preset, decodebench config or HF config.json); `origin` names it in
// errors. Presets may say {"extends": "8b", ...}; `resolve_extends` looks the base up.
ModelConfig parse_model_config(const std::string& json_text, const std::string& origin);

// What a run asks of its config's quantization, each field unset where the config's own
// stands: --quant, --group-size, --lm-head, and --kv-cache (a config file has no KV cache
// scheme of its own: unset, it is fp16).
struct QuantOverrides {
  std::optional<Scheme> scheme;
  std::optional<int> group_size;
  std::optional<Scheme> lm_head;
  std::optional<KvScheme> kv_cache;
};

// The quantization a decodebench weights file records in its __metadata__ ("format":
// "decodebench"), as decodebench_file_quant (weights.h) reads it. Absent keys stay empty; a
// file of another format gives decodebench = false and nothing else.
struct FileQuant {
  std::string file;  // the file it was read from, for messages
  bool decodebench = false;
  std::optional<Scheme> scheme;    // "quant"
  std::optional<int> group_size;   // "group_size"
  std::optional<bool> zero_point;  // "zero_point": "true" or "false"
  std::optional<Scheme> lm_head;   // "lm_head"
};

// Applies `asked` to a loaded config and validates the result. An HF config.json says nothing
// about quantization, so an HF config takes what `recorded` (its weights file's) says where
// `asked` leaves a field unset; a GPTQ/AWQ quantization_config fixes the block linears' scheme
// and group size, and a --quant or --group-size that contradicts it is refused (an FP8 one fixes
// the scheme, and a --quant that contradicts it is refused); a config's own
// int4 group size that does not divide an int4 matrix's input gives way to one that does
// (group_size_note). Errors name the config and what was applied to it.
ModelConfig apply_overrides(ModelConfig c, const QuantOverrides& asked = {}, const FileQuant& recorded = {});

// Checks every field for consistency (positive sizes, heads divisible by kv heads,
// group size dividing the input dimensions of every int4 matrix, ...) and bounds every size
// (kConfigLimits): a hostile config cannot make a product of sizes overflow or ask for
// terabytes.
void validate(const ModelConfig& c, const std::string& origin);
// Its first part: every size positive and within kConfigLimits. The parsers call it as soon
// as the sizes are read, before anything counts or iterates over them.
void validate_sizes(const ModelConfig& c, const std::string& origin);

// The largest value validate() accepts for each size, each above every real model's (Llama
// 3.1 405B: hidden 16384, 126 layers, 128 heads, intermediate 53248; Gemma: vocab 262144,
// head_dim 256; Llama 4 Scout: 10M positions).
inline constexpr int64_t kMaxPositions = int64_t{1} << 24;
struct ConfigLimit {
  const char* field;
  int64_t limit;
};
inline constexpr ConfigLimit kConfigLimits[] = {
    {"hidden_size", 65536},
    {"num_hidden_layers", 1024},
    {"num_attention_heads", 1024},
    {"num_key_value_heads", 1024},
    {"head_dim", 1024},
    {"intermediate_size", 262144},
    {"vocab_size", 1048576},
    {"max_position_embeddings", kMaxPositions},
};
inline constexpr int64_t kMaxGroupSize = int64_t{1} << 20;
// The most configs one "extends" chain may hold (the config itself included): real ones hold
// two or three.
inline constexpr size_t kMaxExtendsDepth = 64;

// The HF `architectures` names accepted for `a` ("LlamaForCausalLM", ...).
std::vector<std::string> hf_architectures(Arch a);

// Preset names in display order (tiny, tiny-qwen2, 1b, 4b, 8b, 70b, qwen2-0.5b, qwen2-1.5b,
// qwen2-7b; each with -fp16/-int8/-int4/-fp8).
std::vector<std::string> preset_names();
// The embedded JSON text of a preset, or empty when there is no such preset.
std::string preset_text(std::string_view name);

// Total parameters of the model (embedding, linears, norms, qwen2's q/k/v biases, lm_head
// when untied).
int64_t parameter_count(const ModelConfig& c);

}  // namespace db
