// LoRA adapters (docs/design.md, --adapter): a synthetic adapter generated from the run's seed,
// or a PEFT adapter directory (adapter_config.json + adapter_model.safetensors), validated
// against the model when it is loaded, before any weight is materialized.
//
// An adapted linear computes y = W x + scale * B (A x), with A [rank, in] and B [out, rank].
// The two ways to run it (--adapter-mode):
//   merged    W' = W + scale * B A, computed in float from the fp16-rounded base weights and
//             quantized with the canonical quantizer of the model's scheme (merge_adapter
//             below, called by WeightSource::host_matrix; on the CUDA backend quantize_merged in
//             kernels/weights.cuh, bit-identical). A decode step then reads exactly
//             the bytes of the base model. A decodebench file whose weights are already
//             quantized is dequantized, merged and quantized again (scales recomputed from W').
//   external  W as usual, A and B kept beside it and applied in every step (the CPU
//             reference: cpu_reference.cpp; the CUDA backend: fp16 A and B, the shrink and
//             expand kernels of kernels/lora.cuh). A step also reads A and B: AdapterShape
//             makes the byte accounting count them.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "decodebench/accounting.h"
#include "decodebench/config.h"
#include "decodebench/model.h"

namespace db {

// One adapted linear of one layer. Values are stored as float but are fp16-rounded, as
// every base weight is (weights.h): a file in f32, f16 or bf16 and the synthetic generator
// all give values that a device can hold as fp16 without changing them.
struct LoraPair {
  std::vector<float> a;  // [rank, in]
  std::vector<float> b;  // [out, rank]
};

struct Adapter {
  int64_t rank = 0;
  double alpha = 0;
  double scale = 0;  // alpha / rank, or alpha / sqrt(rank) with rslora (as PEFT)
  bool rslora = false;
  std::vector<Linear> targets;  // adapted in every layer, in kLinears order
  AdapterMode mode = AdapterMode::merged;
  std::string source;  // the --adapter text: a directory or "synthetic:..."
  std::vector<std::array<LoraPair, kLinears.size()>>
      layers;  // [num_hidden_layers][Linear]; empty: not a target

  bool adapts(Linear l) const;
  // nullptr when `l` is not a target.
  const LoraPair* find(int64_t layer, Linear l) const;
  // The scale as the float every kernel multiplies by.
  float scale_f() const { return static_cast<float>(scale); }
  std::vector<std::string> target_names() const;  // short names: "q", "k", ..., "down"
  AdapterShape shape() const { return AdapterShape{rank, targets, mode}; }
  uint64_t host_bytes() const;  // float A and B of every layer
};

// Bounds on what an adapter may say (docs/input-safety.md). A rank is also refused above the
// smaller dimension of any linear it adapts: B A cannot have a higher rank than that, so such
// an adapter only costs memory.
inline constexpr int64_t kMaxAdapterRank = 65536;
inline constexpr double kMaxAdapterAlpha = 1e6;         // |alpha|: scale stays a finite float
inline constexpr size_t kMaxTargetPatternBytes = 4096;  // a target_modules regular expression

// "synthetic:rank=R[,alpha=A][,targets=q,k,v,o,gate,up,down][,rslora=true|false]", parsed:
// comma-separated key=value items, where an item without '=' continues the list of the key
// before it (targets=q,k,v). The command line's check and load_adapter share it.
struct SyntheticAdapterSpec {
  int64_t rank = 0;
  std::optional<double> alpha;  // default: the rank
  bool rslora = false;
  std::vector<Linear> targets;  // in kLinears order; all seven when the spec names none
};
bool is_synthetic_adapter(const std::string& spec);
// Throws db::UsageError naming the item at fault ("rank must be an integer in [1, 65536]").
SyntheticAdapterSpec parse_synthetic_adapter(const std::string& spec);

// `spec` is either
//   synthetic:rank=R[,alpha=A][,targets=q,k,v,o,gate,up,down][,rslora=true|false]
//     targets default to all seven linears, alpha to R (scale 1 without rslora; PEFT's own
//     default is lora_alpha=8 whatever the rank, so its scale would change with R).
//     A and B come from synth::value(seed, tensor_id(lora_tensor_name(...)), i,
//     Dist::matrix), fp16-rounded. Both are non-zero: PEFT initializes B to zero, which
//     would make every adapted model equal the base one.
//   a PEFT directory (or its adapter_config.json): r, lora_alpha (default 8, as PEFT),
//     target_modules (a list of q_proj ... down_proj, "all-linear", or a regular expression
//     matched against "model.layers.N.self_attn.q_proj" as PEFT does), use_rslora.
//     fan_in_fan_out is accepted and ignored, as PEFT does for nn.Linear targets (every
//     Llama/Qwen3 linear): lora_A and lora_B are stored [r, in] and [out, r] either way.
//     Options that change the adapted function or add weights this adapter does not hold
//     (bias other than "none", lora_bias, use_dora, modules_to_save, layers_to_transform,
//     rank_pattern, alpha_pattern, layer_replication, ...) are refused.
//     adapter_model.safetensors must hold, for every layer and target, exactly
//     lora_tensor_name(layer, l, false) [r, in] and lora_tensor_name(layer, l, true)
//     [out, r] in F32, F16 or BF16, and nothing else.
// Any problem is one db::Error naming the file, field or tensor, expected next to actual.
// Before A and B are allocated, their host bytes are compared with host_memory(): too much
// is refused with both figures.
Adapter load_adapter(const std::string& spec, const ModelConfig& c, uint64_t seed, AdapterMode mode);

// "base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight" (lora_B when `b`): the
// names PEFT saves for a LlamaForCausalLM / Qwen3ForCausalLM.
std::string lora_tensor_name(int64_t layer, Linear l, bool b);

// The merged-mode arithmetic, in place on w [rows, cols] (the fp16-rounded base weight, or
// the dequantized one of a quantized file). Every producer of a merged weight (the host
// here, quantize_merged of kernels/weights.cuh on the device) computes, for each element,
//   d = 0; for k in 0..rank-1: d = fmaf(B[o,k], A[k,i], d)
//   w[o,i] = fmaf(scale_f, d, w[o,i])
// with explicit fmaf (never contracted differently by a compiler), so that all agree bit
// for bit. Does nothing when (layer, l) is not a target.
// `w` may hold rows [r0, r1) of the [rows, cols] weight only (r1 -1: to the last row): each
// row's arithmetic is the same either way.
void merge_adapter(const Adapter& a, int64_t layer, Linear l, float* w, int64_t rows, int64_t cols,
                   int64_t r0 = 0, int64_t r1 = -1);

}  // namespace db
