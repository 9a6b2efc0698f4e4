// `decodebench list [presets|archs|kernels]` and the version string. Presets are embedded
// in the binary, so this works from any directory.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "decodebench/accounting.h"
#include "decodebench/commands.h"
#include "decodebench/config.h"
#include "decodebench/error.h"
#include "decodebench/kernel_registry.h"
#include "decodebench/linear_plan.h"

namespace db {
namespace {

std::string human_count(int64_t n) {
  const double v = static_cast<double>(n);
  if (v >= 1e9) return fmt::format("{:.2f}B", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.1f}M", v / 1e6);
  return fmt::format("{:.1f}K", v / 1e3);
}

std::string human_bytes(uint64_t n) {
  const double v = static_cast<double>(n);
  if (v >= 1e9) return fmt::format("{:.2f} GB", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f} MB", v / 1e6);
  return fmt::format("{:.1f} KB", v / 1e3);
}

void list_presets() {
  fmt::print("{:<16} {:<6} {:>8} {:<6} {:>5} {:<7} {:>10}\n", "preset", "arch", "params", "scheme", "group",
             "lm_head", "stored");
  for (const std::string& name : preset_names()) {
    const ModelConfig c = load_model_config(name);
    // What the weights occupy on the device (embedding, quantized linears, norms, lm_head).
    const ByteAccount b = account_bytes(c, AdapterShape{}, KernelTraffic{}, 0, 0);
    const bool grouped = c.quant.scheme == Scheme::int4 || c.quant.lm_head == Scheme::int4;
    fmt::print("{:<16} {:<6} {:>8} {:<6} {:>5} {:<7} {:>10}\n", name, to_string(c.arch),
               human_count(parameter_count(c)), to_string(c.quant.scheme),
               grouped ? std::to_string(c.quant.group_size) : "-", to_string(c.quant.lm_head),
               human_bytes(b.stored.total));
  }
}

void list_archs() {
  struct Row {
    Arch arch;
    const char* summary;
  };
  const Row rows[] = {
      {Arch::llama, "Llama 2/3/3.1/3.2, Mistral, TinyLlama: GQA, RoPE (llama3 scaling), SiLU MLP"},
      {Arch::qwen2, "Qwen2, Qwen2.5: llama plus biases on q_proj, k_proj and v_proj"},
      {Arch::qwen3, "Qwen3: llama plus per-head q/k RMSNorm; head_dim independent of hidden_size"},
  };
  fmt::print("{:<6} {:<80} {}\n", "arch", "summary", "HF architectures");
  for (const Row& r : rows) {
    std::string hf;
    for (const std::string& n : hf_architectures(r.arch)) hf += (hf.empty() ? "" : ", ") + n;
    fmt::print("{:<6} {:<80} {}\n", to_string(r.arch), r.summary, hf);
  }
}

// A kernel's batched paths in the order a growing batch reaches them, each with the batch up
// to which it runs where that is bounded: "gemv-columns (to 2), cublas".
std::string batched_summary(const KernelInfo& k) {
  std::string v;
  for (BatchedPath p : batched_paths(k)) {
    v += v.empty() ? "" : ", ";
    v += to_string(p);
    if (p == BatchedPath::tiles_gemv) v += fmt::format(" (to {})", kTilesGemvMaxBatch);
    if (p == BatchedPath::gemv_columns) v += fmt::format(" (to {})", gemv_columns_crossover(k.scheme));
    if (p == BatchedPath::skinny_gemm) v += fmt::format(" (to {})", kSkinnyMaxBatch);
    if (p == BatchedPath::mixed_gemm)
      v += fmt::format(" ({} to {} on sm_90)", kMixedGemmMinBatch, kMixedGemmMaxBatch);
  }
  return v;
}

// Each kernel with its implementation, the weight layouts the linear plan gives its matrices
// and their paths at batch > 1 (decodebench/linear_plan.h).
void list_kernels() {
  fmt::print("{:<22} {:<6} {:<5} {:<15} {:<41} {:<80} {}\n", "kernel", "scheme", "auto", "implementation",
             "layouts", "batch > 1", "summary");
  for (const KernelInfo& k : kernel_registry()) {
    std::string layouts;
    for (MatrixLayout l : layouts_read(k))
      layouts += (layouts.empty() ? "" : ", ") + std::string(to_string(l));
    fmt::print("{:<22} {:<6} {:<5} {:<15} {:<41} {:<80} {}\n", k.name, to_string(k.scheme),
               k.is_default ? "yes" : "", to_string(k.impl), layouts, batched_summary(k), k.summary);
  }
}

}  // namespace

int cmd_list(const std::string& what) {
  if (what == "presets") {
    list_presets();
  } else if (what == "archs") {
    list_archs();
  } else if (what == "kernels") {
    list_kernels();
  } else if (what.empty()) {
    list_presets();
    fmt::print("\n");
    list_archs();
    fmt::print("\n");
    list_kernels();
  } else {
    usage_fail("list {}: expected presets, archs or kernels", what);
  }
  return 0;
}

}  // namespace db
