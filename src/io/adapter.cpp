// LoRA adapters: the synthetic generator, the PEFT directory reader and the merge
// arithmetic (see include/decodebench/adapter.h).
#include "decodebench/adapter.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "decodebench/error.h"
#include "decodebench/half.h"
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

// ---------------------------------------------------------------------------- synthetic

// The same grammar as the command line's check (cli.cpp): comma-separated key=value items,
// where an item without '=' continues the list of the key before it (targets=q,k,v).
Adapter synthetic_adapter(const std::string& spec, const ModelConfig& c, uint64_t seed, AdapterMode mode) {
  Adapter a;
  a.source = spec;
  a.mode = mode;
  bool have_alpha = false;
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
      if (!seen.insert(key).second) fail("--adapter {}: {} is given twice", spec, key);
    } else if (key != "targets") {
      fail(
          "--adapter {}: '{}' is not key=value (expected synthetic:rank=R[,alpha=A][,targets=q,k,...]"
          "[,rslora=true|false])",
          spec, item);
    }
    if (key == "rank") {
      char* endp = nullptr;
      const long long r = std::strtoll(value.c_str(), &endp, 10);
      if (value.empty() || *endp != '\0' || r <= 0)
        fail("--adapter {}: rank must be a positive integer, got '{}'", spec, value);
      a.rank = r;
    } else if (key == "alpha") {
      char* endp = nullptr;
      const double v = std::strtod(value.c_str(), &endp);
      if (value.empty() || *endp != '\0' || !std::isfinite(v))
        fail("--adapter {}: alpha must be a finite number, got '{}'", spec, value);
      a.alpha = v;
      have_alpha = true;
    } else if (key == "rslora") {
      if (value != "true" && value != "false")
        fail("--adapter {}: rslora must be true or false, got '{}'", spec, value);
      a.rslora = value == "true";
    } else if (key == "targets") {
      size_t i = 0;
      while (i < kLinears.size() && value != short_name(kLinears[i])) ++i;
      if (i == kLinears.size())
        fail("--adapter {}: target '{}' is not one of q, k, v, o, gate, up, down", spec, value);
      if (target[i]) fail("--adapter {}: target {} is given twice", spec, value);
      target[i] = true;
    } else {
      fail("--adapter {}: unknown key '{}' (expected rank, alpha, targets, rslora)", spec, key);
    }
  }
  if (a.rank == 0) fail("--adapter {}: missing rank=R", spec);
  if (!have_alpha) a.alpha = static_cast<double>(a.rank);
  const bool any = seen.count("targets") > 0;
  for (size_t i = 0; i < kLinears.size(); ++i)
    if (!any || target[i]) a.targets.push_back(kLinears[i]);
  finish(a);

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

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("adapter config {}: cannot open for reading", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

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
    try {
      j_ = json::parse(read_text(path));
    } catch (const json::parse_error& e) {
      std::string what = e.what();
      if (const size_t p = what.find("] "); what.rfind("[json.exception", 0) == 0 && p != std::string::npos)
        what = what.substr(p + 2);
      fail("{}: invalid JSON: {}", label_, what);
    }
    if (!j_.is_object()) fail("{}: expected a JSON object, got {}", label_, json_type(j_));
  }

  const std::string& label() const { return label_; }

  // nullptr when absent or null (PEFT writes null for unset options).
  const json* get(const char* key) const {
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  int64_t positive_int(const char* key) const {
    const json* v = get(key);
    if (!v) fail("{}: missing \"{}\"", label_, key);
    if (!v->is_number_integer() || v->get<int64_t>() <= 0)
      fail("{}: \"{}\" must be a positive integer, got {}", label_, key, v->dump());
    return v->get<int64_t>();
  }

  double number(const char* key, double fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_number()) fail("{}: \"{}\" must be a number, got {}", label_, key, json_type(*v));
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
      fail("{}: \"{}\" is {}, which decodebench does not support ({})", label_, key, v->dump(), why);
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
      if (!e.is_string()) fail("{}: target_modules entries must be strings, got {}", cfg.label(), e.dump());
      const std::string name = e.get<std::string>();
      size_t i = 0;
      while (i < kLinears.size() && name != proj_name(kLinears[i]) && name != hf_module_name(kLinears[i]))
        ++i;
      if (i == kLinears.size())
        fail("{}: target_modules entry \"{}\" is not a linear of a {} block (decodebench adapts {})",
             cfg.label(), name, to_string(c.arch), proj_names());
      on[i] = true;
    }
  } else if (t->is_string() && t->get<std::string>() == "all-linear") {
    on.assign(kLinears.size(), true);  // PEFT: every linear but the output layer
  } else if (t->is_string()) {
    // PEFT matches the regular expression against the full module name. It must select a
    // linear in every layer or in none: one target set for the whole model.
    const std::string pattern = t->get<std::string>();
    std::regex re;
    try {
      re = std::regex(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      fail("{}: target_modules \"{}\" is not a regular expression decodebench can read: {}", cfg.label(),
           pattern, e.what());
    }
    for (const char* other : {"model.embed_tokens", "lm_head"})
      if (std::regex_match(other, re))
        fail("{}: target_modules \"{}\" matches {}, which decodebench does not adapt (it adapts {})",
             cfg.label(), pattern, other, proj_names());
    for (size_t i = 0; i < kLinears.size(); ++i) {
      int64_t matched = 0;
      for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer)
        matched +=
            std::regex_match(fmt::format("model.layers.{}.{}", layer, hf_module_name(kLinears[i])), re);
      if (matched != 0 && matched != c.num_hidden_layers)
        fail(
            "{}: target_modules \"{}\" matches {} in {} of {} layers; decodebench adapts the same linears in "
            "every layer",
            cfg.label(), pattern, proj_name(kLinears[i]), matched, c.num_hidden_layers);
      on[i] = matched != 0;
    }
  } else {
    fail("{}: \"target_modules\" must be a list of module names or a string, got {}", cfg.label(),
         json_type(*t));
  }
  std::vector<Linear> targets;
  for (size_t i = 0; i < kLinears.size(); ++i)
    if (on[i]) targets.push_back(kLinears[i]);
  if (targets.empty()) fail("{}: target_modules {} selects no linear of the model", cfg.label(), t->dump());
  return targets;
}

// Reads one lora_A / lora_B tensor as fp16-rounded floats, checking dtype and shape.
std::vector<float> lora_tensor(const SafetensorsFile& f, const std::string& name, int64_t rows, int64_t cols,
                               const char* what) {
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
    fail("{}: peft_type is {}, expected \"LORA\"", cfg.label(), type->dump());
  if (const json* bias = cfg.get("bias"); bias && (!bias->is_string() || bias->get<std::string>() != "none"))
    fail("{}: \"bias\" is {}, but decodebench supports only \"none\" (the adapter would carry bias tensors)",
         cfg.label(), bias->dump());
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
  a.rank = cfg.positive_int("r");
  a.alpha = cfg.number("lora_alpha", 8.0);  // PEFT's default
  a.rslora = cfg.boolean("use_rslora");
  (void)cfg.boolean("fan_in_fan_out");  // type-checked; ignored as PEFT ignores it for nn.Linear
  a.targets = peft_targets(cfg, c);
  finish(a);

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
           f.path(), name, kConfigName, join(a.target_names()), c.num_hidden_layers);
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

Adapter load_adapter(const std::string& spec, const ModelConfig& c, uint64_t seed, AdapterMode mode) {
  if (spec.rfind(kSyntheticPrefix, 0) == 0) return synthetic_adapter(spec, c, seed, mode);
  return peft_adapter(spec, c, mode);
}

void merge_adapter(const Adapter& a, int64_t layer, Linear l, float* w, int64_t rows, int64_t cols) {
  const LoraPair* p = a.find(layer, l);
  if (!p) return;
  if (static_cast<int64_t>(p->a.size()) != a.rank * cols ||
      static_cast<int64_t>(p->b.size()) != rows * a.rank)
    fail("adapter {}: layer {} {} does not fit a [{}, {}] weight", a.source, layer, short_name(l), rows,
         cols);
  const float s = a.scale_f();
  std::vector<float> d(static_cast<size_t>(cols));
  for (int64_t o = 0; o < rows; ++o) {
    std::fill(d.begin(), d.end(), 0.f);
    for (int64_t k = 0; k < a.rank; ++k) {  // k outermost per row: the same fmaf order per element
      const float b = p->b[o * a.rank + k];
      const float* ak = p->a.data() + k * cols;
      for (int64_t i = 0; i < cols; ++i) d[i] = std::fmaf(b, ak[i], d[i]);
    }
    float* wo = w + o * cols;
    for (int64_t i = 0; i < cols; ++i) wo[i] = std::fmaf(s, d[i], wo[i]);
  }
}

}  // namespace db
