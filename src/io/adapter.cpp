// LoRA adapters: the synthetic generator, the PEFT directory reader and the merge
// arithmetic (see include/decodebench/adapter.h).
#include "decodebench/adapter.h"

#include <re2/re2.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "decodebench/checked.h"
#include "decodebench/error.h"
#include "decodebench/half.h"
#include "decodebench/host_memory.h"
#include "decodebench/input.h"
#include "decodebench/safetensors.h"
#include "decodebench/synth.h"
#include "decodebench/weights.h"

namespace db {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kSyntheticPrefix = "synthetic:";
constexpr const char* kConfigName = "adapter_config.json";
constexpr const char* kWeightsName = "adapter_model.safetensors";

size_t index_of(Linear l) {
  return static_cast<size_t>(l);
}

// "q_proj", ..., "down_proj": the last component of hf_module_name.
std::string proj_name(Linear l) {
  const std::string m = hf_module_name(l);
  return m.substr(m.find('.') + 1);
}

std::string proj_names() {
  std::string s;
  for (Linear l : kLinears) s += (s.empty() ? "" : ", ") + proj_name(l);
  return s;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

float fp16_round(float v) {
  return f16_to_f32(f32_to_f16(v));
}

void finish(Adapter& a) {
  a.scale =
      a.rslora ? a.alpha / std::sqrt(static_cast<double>(a.rank)) : a.alpha / static_cast<double>(a.rank);
}

// A JSON value in one line, shortened, for "got ..." in messages.
std::string brief(const json& v) {
  return printable(v.dump(-1, ' ', false, json::error_handler_t::replace), 80);
}

// Checked before A and B are allocated: the rank against the adapted matrices (a product
// of sizes from input must not overflow, nor ask for more memory than there is).
void check_size(const Adapter& a, const ModelConfig& c, const std::string& label) {
  int64_t per_layer = 0;  // floats of A and B in one layer
  for (Linear l : a.targets) {
    const MatShape s = linear_shape(c, l);
    const int64_t smaller = std::min(s.rows, s.cols);
    if (a.rank > smaller)
      fail(
          "{}: rank {} is above min(out_features, in_features) = {} of {} [{}, {}]: B A cannot have a higher "
          "rank, so decodebench refuses an adapter larger than the matrix it adapts",
          label, a.rank, smaller, proj_name(l), s.rows, s.cols);
    per_layer = checked_add(per_layer, checked_mul(a.rank, s.rows + s.cols, "adapter size"), "adapter size");
  }
  const int64_t bytes = checked_mul(checked_mul(per_layer, c.num_hidden_layers, "adapter size"),
                                    static_cast<int64_t>(sizeof(float)), "adapter size");
  require_host_memory({label,
                       {{"A and B", static_cast<uint64_t>(bytes),
                         fmt::format(" (rank {}, {} linears x {} layers, float)", a.rank, a.targets.size(),
                                     c.num_hidden_layers)}}});
}

// ---------------------------------------------------------------------------- synthetic

Adapter synthetic_adapter(const std::string& spec, const ModelConfig& c, uint64_t seed, AdapterMode mode) {
  const SyntheticAdapterSpec parsed = parse_synthetic_adapter(spec);
  Adapter a;
  a.source = spec;
  a.mode = mode;
  a.rank = parsed.rank;
  a.alpha = parsed.alpha.value_or(static_cast<double>(parsed.rank));
  a.rslora = parsed.rslora;
  a.targets = parsed.targets;
  finish(a);
  check_size(a, c, "--adapter " + printable(spec));

  a.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    for (Linear l : a.targets) {
      const MatShape s = linear_shape(c, l);
      LoraPair& p = a.layers[layer][index_of(l)];
      auto fill = [&](std::vector<float>& v, int64_t n, bool b) {
        const uint64_t id = synth::tensor_id(lora_tensor_name(layer, l, b));
        v.resize(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i)
          v[i] = fp16_round(synth::value(seed, id, static_cast<uint64_t>(i), synth::Dist::matrix));
      };
      fill(p.a, a.rank * s.cols, false);
      fill(p.b, s.rows * a.rank, true);
    }
  }
  return a;
}

// ---------------------------------------------------------------------------- PEFT directory

const char* json_type(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

// Reads adapter_config.json; every field decodebench reads or refuses is checked here.
class PeftConfig {
 public:
  explicit PeftConfig(const fs::path& path) : label_("adapter config " + path.string()) {
    j_ = parse_json_document(read_input_file(path.string(), "adapter config", kMaxConfigFileBytes), label_);
    if (!j_.is_object()) fail("{}: expected a JSON object, got {}", label_, json_type(j_));
  }

  const std::string& label() const { return label_; }

  // nullptr when absent or null (PEFT writes null for unset options).
  const json* get(const char* key) const {
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  int64_t positive_int(const char* key, int64_t limit) const {
    const json* v = get(key);
    if (!v) fail("{}: missing \"{}\"", label_, key);
    // nlohmann holds a non-negative integer as unsigned, a negative one as signed.
    const bool ok = v->is_number_unsigned() && v->get<uint64_t>() >= 1 &&
                    v->get<uint64_t>() <= static_cast<uint64_t>(limit);
    if (!ok)
      fail("{}: \"{}\" must be a positive integer, got {} (at most {})", label_, key, brief(*v), limit);
    return static_cast<int64_t>(v->get<uint64_t>());
  }

  double number(const char* key, double fallback, double limit) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_number()) fail("{}: \"{}\" must be a number, got {}", label_, key, json_type(*v));
    if (!(std::fabs(v->get<double>()) <= limit))
      fail("{}: \"{}\" must be a number within +-{:g}, got {}", label_, key, limit, brief(*v));
    return v->get<double>();
  }

  bool boolean(const char* key) const {
    const json* v = get(key);
    if (!v) return false;
    if (!v->is_boolean()) fail("{}: \"{}\" must be true or false, got {}", label_, key, json_type(*v));
    return v->get<bool>();
  }

  // An option that would change the adapted function or add weights: it must be absent,
  // null, false, or empty.
  void refuse(const char* key, const char* why) const {
    const json* v = get(key);
    if (!v) return;
    const bool unset =
        (v->is_boolean() && !v->get<bool>()) || ((v->is_array() || v->is_object()) && v->empty());
    if (!unset)
      fail("{}: \"{}\" is {}, which decodebench does not support ({})", label_, key, brief(*v), why);
  }

 private:
  std::string label_;
  json j_;
};

// target_modules -> the adapted linears (the same in every layer).
std::vector<Linear> peft_targets(const PeftConfig& cfg, const ModelConfig& c) {
  const json* t = cfg.get("target_modules");
  if (!t) fail("{}: missing \"target_modules\"", cfg.label());
  std::vector<bool> on(kLinears.size(), false);
  if (t->is_array()) {
    // PEFT adapts a module whose name equals an entry or ends with "." + entry.
    for (const json& e : *t) {
      if (!e.is_string()) fail("{}: target_modules entries must be strings, got {}", cfg.label(), brief(e));
      const std::string name = e.get<std::string>();
      size_t i = 0;
      while (i < kLinears.size() && name != proj_name(kLinears[i]) && name != hf_module_name(kLinears[i]))
        ++i;
      if (i == kLinears.size())
        fail("{}: target_modules entry \"{}\" is not a linear of a {} block (decodebench adapts {})",
             cfg.label(), printable(name), to_string(c.arch), proj_names());
      on[i] = true;
    }
  } else if (t->is_string() && t->get<std::string>() == "all-linear") {
    on.assign(kLinears.size(), true);  // PEFT: every linear but the output layer
  } else if (t->is_string()) {
    // PEFT matches the regular expression against the full module name (re.fullmatch). It
    // must select a linear in every layer or in none: one target set for the whole model.
    // RE2 matches in time linear in the name and compiles without recursion on the stack:
    // std::regex overflowed the stack on a long pattern and backtracked for minutes on
    // "(.*)*(.*)*x". RE2 has no backreferences or lookaround; such a pattern is refused.
    const std::string pattern = t->get<std::string>();
    const std::string shown = printable(pattern, 80);
    if (pattern.size() > kMaxTargetPatternBytes)
      fail("{}: target_modules is a regular expression of {} bytes, above the limit of {}", cfg.label(),
           pattern.size(), kMaxTargetPatternBytes);
    RE2::Options options;
    options.set_log_errors(false);  // errors are this function's one line, not RE2's log
    const RE2 re(pattern, options);
    if (!re.ok())
      fail("{}: target_modules \"{}\" is not a regular expression decodebench can read (RE2 syntax): {}",
           cfg.label(), shown, printable(re.error(), 120));
    for (const char* other : {"model.embed_tokens", "lm_head"})
      if (RE2::FullMatch(other, re))
        fail("{}: target_modules \"{}\" matches {}, which decodebench does not adapt (it adapts {})",
             cfg.label(), shown, other, proj_names());
    for (size_t i = 0; i < kLinears.size(); ++i) {
      int64_t matched = 0;
      for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer)
        matched +=
            RE2::FullMatch(fmt::format("model.layers.{}.{}", layer, hf_module_name(kLinears[i])), re) ? 1 : 0;
      if (matched != 0 && matched != c.num_hidden_layers)
        fail(
            "{}: target_modules \"{}\" matches {} in {} of {} layers; decodebench adapts the same linears in "
            "every layer",
            cfg.label(), shown, proj_name(kLinears[i]), matched, c.num_hidden_layers);
      on[i] = matched != 0;
    }
  } else {
    fail("{}: \"target_modules\" must be a list of module names or a string, got {}", cfg.label(),
         json_type(*t));
  }
  std::vector<Linear> targets;
  for (size_t i = 0; i < kLinears.size(); ++i)
    if (on[i]) targets.push_back(kLinears[i]);
  if (targets.empty()) fail("{}: target_modules {} selects no linear of the model", cfg.label(), brief(*t));
  return targets;
}

// Reads one lora_A / lora_B tensor as fp16-rounded floats, checking dtype and shape.
std::vector<float> lora_tensor(const SafetensorsFile& f, const std::string& name, int64_t rows, int64_t cols,
                               const char* what) {  // rows x cols bounded by check_size
  const TensorInfo* t = f.find(name);
  if (!t)
    fail("adapter file {}: no tensor named {} ({} [{}, {}] expected)", f.path(), name, what, rows, cols);
  if (t->dtype != DType::f32 && t->dtype != DType::f16 && t->dtype != DType::bf16)
    fail("adapter file {}: tensor {} has dtype {}, expected F32, F16 or BF16", f.path(), name,
         to_string(t->dtype));
  if (t->shape != std::vector<int64_t>{rows, cols})
    fail("adapter file {}: tensor {} has shape {}, expected {} ({}; r from adapter_config.json)", f.path(),
         name, shape_string(t->shape), shape_string({rows, cols}), what);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) dense_row(*t, r, cols, v.data() + r * cols);
  for (float& x : v) x = fp16_round(x);
  return v;
}

Adapter peft_adapter(const std::string& spec, const ModelConfig& c, AdapterMode mode) {
  std::error_code ec;
  fs::path dir = spec;
  if (!fs::is_directory(dir, ec)) {
    if (dir.filename() != kConfigName || !fs::is_regular_file(dir, ec))
      fail("--adapter {}: expected a PEFT adapter directory ({} + {}) or synthetic:rank=R[,targets=...]",
           spec, kConfigName, kWeightsName);
    dir = dir.parent_path();
  }
  const fs::path config_path = dir / kConfigName, weights_path = dir / kWeightsName;
  if (!fs::exists(config_path, ec)) fail("adapter {}: no {} in the directory", spec, kConfigName);
  if (!fs::exists(weights_path, ec)) {
    if (fs::exists(dir / "adapter_model.bin", ec))
      fail(
          "adapter {}: has adapter_model.bin (a pickle) but no {}; decodebench reads safetensors only "
          "(save with save_pretrained(..., safe_serialization=True))",
          spec, kWeightsName);
    fail("adapter {}: no {} in the directory", spec, kWeightsName);
  }

  const PeftConfig cfg(config_path);
  if (const json* type = cfg.get("peft_type");
      type && (!type->is_string() || type->get<std::string>() != "LORA"))
    fail("{}: peft_type is {}, expected \"LORA\"", cfg.label(), brief(*type));
  if (const json* bias = cfg.get("bias"); bias && (!bias->is_string() || bias->get<std::string>() != "none"))
    fail("{}: \"bias\" is {}, but decodebench supports only \"none\" (the adapter would carry bias tensors)",
         cfg.label(), brief(*bias));
  cfg.refuse("use_dora", "DoRA rescales each column of W by a learned magnitude");
  cfg.refuse("lora_bias", "it adds a bias to lora_B");
  cfg.refuse("use_qalora", "QA-LoRA pools the input before lora_A");
  cfg.refuse("modules_to_save", "the adapter would replace whole modules");
  cfg.refuse("layers_to_transform", "decodebench adapts every layer");
  cfg.refuse("layer_replication", "it changes the layer stack");
  cfg.refuse("rank_pattern", "decodebench uses one rank for every module");
  cfg.refuse("alpha_pattern", "decodebench uses one alpha for every module");
  cfg.refuse("exclude_modules", "decodebench adapts the same linears in every layer");
  cfg.refuse("target_parameters", "decodebench adapts modules, not parameters");
  cfg.refuse("trainable_token_indices", "it trains embedding rows");

  Adapter a;
  a.source = spec;
  a.mode = mode;
  a.rank = cfg.positive_int("r", kMaxAdapterRank);
  a.alpha = cfg.number("lora_alpha", 8.0, kMaxAdapterAlpha);  // PEFT's default
  a.rslora = cfg.boolean("use_rslora");
  (void)cfg.boolean("fan_in_fan_out");  // type-checked; ignored as PEFT ignores it for nn.Linear
  a.targets = peft_targets(cfg, c);
  finish(a);
  check_size(a, c, cfg.label());

  const SafetensorsFile f(weights_path.string());
  std::set<std::string> expected;
  a.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    for (Linear l : a.targets) {
      const MatShape s = linear_shape(c, l);
      LoraPair& p = a.layers[layer][index_of(l)];
      const std::string an = lora_tensor_name(layer, l, false), bn = lora_tensor_name(layer, l, true);
      p.a = lora_tensor(f, an, a.rank, s.cols, "lora_A is [r, in_features]");
      p.b = lora_tensor(f, bn, s.rows, a.rank, "lora_B is [out_features, r]");
      expected.insert(an);
      expected.insert(bn);
    }
  }
  for (const std::string& name : f.names())
    if (!expected.count(name))
      fail("adapter file {}: tensor {} is not the lora_A/lora_B of a target in {} (targets {}, {} layers)",
           f.path(), printable(name), kConfigName, join(a.target_names()), c.num_hidden_layers);
  return a;
}

}  // namespace

bool Adapter::adapts(Linear l) const {
  for (Linear t : targets)
    if (t == l) return true;
  return false;
}

const LoraPair* Adapter::find(int64_t layer, Linear l) const {
  if (layer < 0 || layer >= static_cast<int64_t>(layers.size())) return nullptr;
  const LoraPair& p = layers[layer][index_of(l)];
  return p.a.empty() ? nullptr : &p;
}

std::vector<std::string> Adapter::target_names() const {
  std::vector<std::string> names;
  for (Linear l : targets) names.emplace_back(short_name(l));
  return names;
}

uint64_t Adapter::host_bytes() const {
  uint64_t n = 0;
  for (const auto& layer : layers)
    for (const LoraPair& p : layer) n += p.a.size() + p.b.size();
  return n * sizeof(float);
}

std::string lora_tensor_name(int64_t layer, Linear l, bool b) {
  return fmt::format("base_model.model.model.layers.{}.{}.lora_{}.weight", layer, hf_module_name(l),
                     b ? 'B' : 'A');
}

bool is_synthetic_adapter(const std::string& spec) {
  return spec.rfind(kSyntheticPrefix, 0) == 0;
}

SyntheticAdapterSpec parse_synthetic_adapter(const std::string& spec) {
  const std::string shown = printable(spec);
  if (!is_synthetic_adapter(spec))
    usage_fail("--adapter {}: expected synthetic:rank=R[,alpha=A][,targets=q,k,...][,rslora=true|false]",
               shown);
  SyntheticAdapterSpec out;
  std::set<std::string> seen;
  std::vector<bool> target(kLinears.size(), false);
  const std::string rest = spec.substr(std::string(kSyntheticPrefix).size());
  std::string key;
  size_t start = 0;
  while (start <= rest.size()) {
    size_t end = rest.find(',', start);
    if (end == std::string::npos) end = rest.size();
    const std::string item = rest.substr(start, end - start);
    start = end + 1;
    std::string value = item;
    const size_t eq = item.find('=');
    if (eq != std::string::npos) {
      key = item.substr(0, eq);
      value = item.substr(eq + 1);
      if (!seen.insert(key).second) usage_fail("--adapter {}: {} is given twice", shown, printable(key));
    } else if (key != "targets") {
      usage_fail(
          "--adapter {}: '{}' is not key=value (expected synthetic:rank=R[,alpha=A][,targets=q,k,...]"
          "[,rslora=true|false])",
          shown, printable(item));
    }
    const char* const first = value.data();
    const char* const last = value.data() + value.size();
    if (key == "rank") {
      // from_chars, not strtoll: a value past the int64 range is an error, not LLONG_MAX.
      int64_t r = 0;
      const auto [ptr, ec] = std::from_chars(first, last, r);
      if (value.empty() || ec != std::errc() || ptr != last || r <= 0 || r > kMaxAdapterRank)
        usage_fail("--adapter {}: rank must be a positive integer, got '{}' (at most {})", shown,
                   printable(value), kMaxAdapterRank);
      out.rank = r;
    } else if (key == "alpha") {
      char* endp = nullptr;
      const double v = std::strtod(value.c_str(), &endp);
      if (value.empty() || endp != value.c_str() + value.size() || !(std::fabs(v) <= kMaxAdapterAlpha))
        usage_fail("--adapter {}: alpha must be a finite number, got '{}' (within +-{:g})", shown,
                   printable(value), kMaxAdapterAlpha);
      out.alpha = v;
    } else if (key == "rslora") {
      if (value != "true" && value != "false")
        usage_fail("--adapter {}: rslora must be true or false, got '{}'", shown, printable(value));
      out.rslora = value == "true";
    } else if (key == "targets") {
      size_t i = 0;
      while (i < kLinears.size() && value != short_name(kLinears[i])) ++i;
      if (i == kLinears.size())
        usage_fail("--adapter {}: target '{}' is not one of q, k, v, o, gate, up, down", shown,
                   printable(value));
      if (target[i]) usage_fail("--adapter {}: target {} is given twice", shown, value);
      target[i] = true;
    } else {
      usage_fail("--adapter {}: unknown key '{}' (expected rank, alpha, targets, rslora)", shown,
                 printable(key));
    }
  }
  if (out.rank == 0) usage_fail("--adapter {}: missing rank=R", shown);
  const bool any = seen.count("targets") > 0;
  for (size_t i = 0; i < kLinears.size(); ++i)
    if (!any || target[i]) out.targets.push_back(kLinears[i]);
  return out;
}

Adapter load_adapter(const std::string& spec, const ModelConfig& c, uint64_t seed, AdapterMode mode) {
  if (is_synthetic_adapter(spec)) return synthetic_adapter(spec, c, seed, mode);
  return peft_adapter(spec, c, mode);
}

void merge_adapter(const Adapter& a, int64_t layer, Linear l, float* w, int64_t rows, int64_t cols,
                   int64_t r0, int64_t r1) {
  const LoraPair* p = a.find(layer, l);
  if (!p) return;
  if (static_cast<int64_t>(p->a.size()) != a.rank * cols ||
      static_cast<int64_t>(p->b.size()) != rows * a.rank)
    fail("adapter {}: layer {} {} does not fit a [{}, {}] weight", a.source, layer, short_name(l), rows,
         cols);
  if (r1 < 0) r1 = rows;
  if (r0 < 0 || r0 > r1 || r1 > rows)
    fail("adapter {}: rows [{}, {}) are not rows of a [{}, {}] weight", a.source, r0, r1, rows, cols);
  const float s = a.scale_f();
  std::vector<float> d(static_cast<size_t>(cols));
  for (int64_t o = r0; o < r1; ++o) {
    std::fill(d.begin(), d.end(), 0.f);
    for (int64_t k = 0; k < a.rank; ++k) {  // k outermost per row: the same fmaf order per element
      const float b = p->b[o * a.rank + k];
      const float* ak = p->a.data() + k * cols;
      for (int64_t i = 0; i < cols; ++i) d[i] = std::fmaf(b, ak[i], d[i]);
    }
    float* wo = w + (o - r0) * cols;
    for (int64_t i = 0; i < cols; ++i) wo[i] = std::fmaf(s, d[i], wo[i]);
  }
}

}  // namespace db
