// Model configs: presets embedded from configs/*.json, decodebench config files (which may
// "extends" a preset or another file) and HF config.json files. Every error names the
// config it came from and the field at fault.
//
// The decodebench format is exactly the preset format: HF field names for the architecture
// plus "architecture" and "quant". It is strict (unknown fields are errors, so a typo in an
// optional field cannot be ignored silently); HF config.json files carry many fields that
// do not matter for decode, so only the ones read here are looked at.
#include "decodebench/config.h"

#include <re2/re2.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <utility>

#include "decodebench/error.h"
#include "decodebench/input.h"
#include "decodebench/model.h"

namespace db {

// Generated from configs/*.json by scripts/embed_configs.cmake: file stem -> JSON text.
const std::vector<std::pair<std::string_view, std::string_view>>& embedded_presets();

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The Llama/Qwen3 presets by size, then the Qwen2 family by size.
constexpr const char* kBasePresets[] = {"tiny", "tiny-qwen2", "1b",         "4b",      "8b",
                                        "70b",  "qwen2-0.5b", "qwen2-1.5b", "qwen2-7b"};
constexpr const char* kSchemeSuffixes[] = {"fp16", "int8", "int4", "fp8"};

struct HfArch {
  const char* hf_name;
  Arch arch;
};
constexpr HfArch kHfArchs[] = {
    {"LlamaForCausalLM", Arch::llama},
    {"MistralForCausalLM", Arch::llama},
    {"Qwen2ForCausalLM", Arch::qwen2},
    {"Qwen3ForCausalLM", Arch::qwen3},
};

constexpr Arch kArchs[] = {Arch::llama, Arch::qwen2, Arch::qwen3};

std::optional<Arch> find_arch(std::string_view name) {
  for (Arch a : kArchs)
    if (name == to_string(a)) return a;
  return std::nullopt;
}

std::string supported_arch_list() {
  std::string s;
  for (Arch a : kArchs) s += (s.empty() ? "" : ", ") + std::string(to_string(a));
  return s;
}

std::string supported_hf_list() {
  std::string s;
  for (const HfArch& a : kHfArchs) s += (s.empty() ? "" : ", ") + std::string(a.hf_name);
  return s;
}

// Where a JSON text came from: `label` is what errors print after "config ", `dir` resolves
// a relative "extends" (empty for presets), `key` identifies it for cycle detection.
struct Source {
  std::string label;
  std::string dir;
  std::string key;
};

Source preset_source(std::string_view name) {
  return {std::string(name) + " (preset)", "", "preset:" + std::string(name)};
}

Source file_source(const fs::path& path) {
  std::error_code ec;
  fs::path canonical = fs::weakly_canonical(path, ec);
  if (ec) canonical = fs::absolute(path);
  return {path.string(), path.parent_path().string(), "file:" + canonical.string()};
}

// A JSON value in one line, shortened: for "got ..." in messages.
std::string brief(const json& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

const char* type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

std::string read_config_file(const fs::path& path) {
  return read_input_file(path.string(), "config", kMaxConfigFileBytes);
}

json parse_json_object(const std::string& text, const std::string& label) {
  const json j = parse_json_document(text, "config " + label);
  if (!j.is_object()) fail("config {}: expected a JSON object at the top level, got {}", label, type_name(j));
  return j;
}

// Object fields of `over` replace or (for nested objects) merge into `base`; null replaces.
void deep_merge(json& base, const json& over) {
  for (auto it = over.begin(); it != over.end(); ++it) {
    if (it.key() == "extends") continue;
    if (it->is_object() && base.contains(it.key()) && base[it.key()].is_object())
      deep_merge(base[it.key()], *it);
    else
      base[it.key()] = *it;
  }
}

// "a.json -> b.json -> 8b (preset)": a chain of configs for a message, printable, with the
// middle of a long one elided.
std::string chain_text(const std::vector<Source>& chain, const std::string& next) {
  std::vector<std::string> labels;
  for (const Source& s : chain) labels.push_back(printable(s.label));
  labels.push_back(printable(next));
  constexpr size_t kHead = 3, kTail = 2;
  std::string text;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels.size() > kHead + kTail + 1 && i == kHead) {
      text += fmt::format(" -> ... ({} more)", labels.size() - kHead - kTail);
      i = labels.size() - kTail - 1;
      continue;
    }
    text += (i == 0 ? "" : " -> ") + labels[i];
  }
  return text;
}

// Follows "extends" from `top` to a config that extends nothing and returns the merge: each
// config's fields over its base's. Iterative, and at most kMaxExtendsDepth configs long, so
// a chain of any length costs neither stack nor time; a config met twice is a cycle.
json resolve_extends(json top, const Source& src) {
  std::vector<json> docs;
  std::vector<Source> chain;
  std::set<std::string> keys;
  docs.push_back(std::move(top));
  chain.push_back(src);
  keys.insert(src.key);
  while (docs.back().contains("extends")) {
    const json& ext = docs.back().at("extends");
    const Source& from = chain.back();
    if (!ext.is_string() || ext.get<std::string>().empty())
      fail("config {}: field extends must be a preset name or a file path (a string), got {}", from.label,
           brief(ext));
    const std::string target = ext.get<std::string>();
    Source base_src;
    fs::path path;  // a file's, empty for a preset
    if (!preset_text(target).empty()) {
      base_src = preset_source(target);
    } else {
      // A preset can only extend presets; a file may also extend a path relative to itself.
      path = target;
      if (path.is_relative() && !from.dir.empty()) path = fs::path(from.dir) / path;
      std::error_code ec;
      if (from.key.rfind("preset:", 0) == 0 || !fs::exists(path, ec))
        fail("config {}: extends '{}': not a preset (see `decodebench list presets`) and no such file{}{}",
             from.label, printable(target),
             from.key.rfind("preset:", 0) == 0 ? "" : " " + printable(path.string()),
             did_you_mean(target, preset_names()));
      base_src = file_source(path);
    }
    if (keys.count(base_src.key))
      fail("config {}: extends cycle: {}", chain.front().label, chain_text(chain, base_src.label));
    if (chain.size() >= kMaxExtendsDepth)
      fail("config {}: extends chain longer than {} configs (the limit): {}", chain.front().label,
           kMaxExtendsDepth, chain_text(chain, base_src.label));
    // A directory, FIFO or device is refused by read_config_file.
    const std::string base_text = path.empty() ? preset_text(target) : read_config_file(path);
    docs.push_back(parse_json_object(base_text, base_src.label));
    chain.push_back(std::move(base_src));
    keys.insert(chain.back().key);
  }
  json merged = std::move(docs.back());
  for (size_t i = docs.size() - 1; i-- > 0;) deep_merge(merged, docs[i]);
  merged.erase("extends");
  return merged;
}

// Typed field access with messages that name the field and the config.
class Fields {
 public:
  Fields(const json& obj, std::string label, std::string prefix = "")
      : obj_(obj), label_(std::move(label)), prefix_(std::move(prefix)) {}

  // Null counts as absent: HF writes "head_dim": null for "derive it".
  const json* find(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  const json& need(const char* key) const {
    const json* v = find(key);
    if (!v) fail("config {}: missing field {}{}", label_, prefix_, key);
    return *v;
  }

  int64_t integer(const char* key) const { return as_integer(key, need(key)); }
  int64_t integer(const char* key, int64_t fallback) const {
    const json* v = find(key);
    return v ? as_integer(key, *v) : fallback;
  }
  double number(const char* key) const { return as_number(key, need(key)); }
  double number(const char* key, double fallback) const {
    const json* v = find(key);
    return v ? as_number(key, *v) : fallback;
  }
  bool boolean(const char* key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) type_error(key, "true or false", *v);
    return v->get<bool>();
  }
  std::string string(const char* key) const { return as_string(key, need(key)); }
  std::string string(const char* key, const std::string& fallback) const {
    const json* v = find(key);
    return v ? as_string(key, *v) : fallback;
  }

  [[noreturn]] void type_error(const char* key, const char* expected, const json& v) const {
    fail("config {}: field {}{} must be {}, got {} ({})", label_, prefix_, key, expected, brief(v),
         type_name(v));
  }
  const std::string& label() const { return label_; }
  const std::string& prefix() const { return prefix_; }

 private:
  int64_t as_integer(const char* key, const json& v) const {
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        type_error(key, "an integer that fits in 64 bits", v);
      return static_cast<int64_t>(v.get<uint64_t>());
    }
    if (!v.is_number_integer()) type_error(key, "an integer", v);
    return v.get<int64_t>();
  }
  double as_number(const char* key, const json& v) const {
    if (!v.is_number()) type_error(key, "a number", v);
    return v.get<double>();
  }
  std::string as_string(const char* key, const json& v) const {
    if (!v.is_string()) type_error(key, "a string", v);
    return v.get<std::string>();
  }

  const json& obj_;
  std::string label_;
  std::string prefix_;
};

void reject_unknown_fields(const json& obj, const std::set<std::string>& known, const std::string& label,
                           const std::string& prefix) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (known.count(it.key())) continue;
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    fail("config {}: unknown field {}{} (known: {})", label, prefix, printable(it.key()), list);
  }
}

Scheme field_scheme(const Fields& f, const char* key, Scheme fallback) {
  const json* v = f.find(key);
  if (!v) return fallback;
  if (!v->is_string()) f.type_error(key, "one of \"fp16\", \"int8\", \"int4\", \"fp8\"", *v);
  const std::string s = v->get<std::string>();
  for (Scheme sc : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8})
    if (s == to_string(sc)) return sc;
  fail("config {}: field {}{} is '{}', not a scheme (supported: fp16, int8, int4, fp8)", f.label(),
       f.prefix(), key, printable(s));
}

QuantConfig parse_quant(const json& root, const std::string& label, bool strict) {
  QuantConfig q;
  auto it = root.find("quant");
  if (it == root.end() || it->is_null()) return q;
  if (!it->is_object())
    fail("config {}: field quant must be an object, got {} ({})", label, brief(*it), type_name(*it));
  if (strict) reject_unknown_fields(*it, {"scheme", "group_size", "zero_point", "lm_head"}, label, "quant.");
  const Fields f(*it, label, "quant.");
  q.scheme = field_scheme(f, "scheme", q.scheme);
  const int64_t g = f.integer("group_size", q.group_size);
  if (g <= 0) fail("config {}: quant.group_size must be positive, got {}", label, g);
  if (g > kMaxGroupSize)
    fail("config {}: quant.group_size {} is above the limit {}", label, g, kMaxGroupSize);
  q.group_size = static_cast<int>(g);
  q.zero_point = f.boolean("zero_point", q.zero_point);
  q.lm_head = field_scheme(f, "lm_head", q.lm_head);
  return q;
}

// `rope_scaling` (HF <= 4.x and decodebench) or the `rope_parameters` object of
// transformers 5, which also holds rope_theta. "default" means no scaling.
RopeScaling parse_rope(const json& v, const std::string& label, const char* field) {
  RopeScaling r;
  if (v.is_null()) return r;
  if (!v.is_object())
    fail("config {}: field {} must be an object or null, got {} ({})", label, field, brief(v), type_name(v));
  const std::string prefix = std::string(field) + ".";
  const Fields f(v, label, prefix);
  std::string type;
  if (f.find("rope_type"))
    type = f.string("rope_type");
  else if (f.find("type"))
    type = f.string("type");
  else
    fail("config {}: missing field {}.rope_type", label, field);
  if (type == "default") return r;
  if (type != "llama3")
    fail("config {}: {}.rope_type '{}' is not supported (supported: llama3, default)", label, field,
         printable(type));
  r.llama3 = true;
  r.factor = f.number("factor");
  r.low_freq_factor = f.number("low_freq_factor");
  r.high_freq_factor = f.number("high_freq_factor");
  r.original_max_position_embeddings = f.integer("original_max_position_embeddings");
  return r;
}

// Fields shared by both formats. HF defaults apply only to HF files (`hf`): decodebench
// configs spell out every size.
void parse_shape(ModelConfig& c, const json& root, const std::string& label, bool hf) {
  const Fields f(root, label);
  c.hidden_size = f.integer("hidden_size");
  c.num_hidden_layers = f.integer("num_hidden_layers");
  c.num_attention_heads = f.integer("num_attention_heads");
  c.intermediate_size = f.integer("intermediate_size");
  c.vocab_size = f.integer("vocab_size");
  c.max_position_embeddings = f.integer("max_position_embeddings");
  if (hf) {
    c.num_key_value_heads = f.integer("num_key_value_heads", c.num_attention_heads);
    if (f.find("head_dim")) {
      c.head_dim = f.integer("head_dim");
    } else {
      if (c.num_attention_heads <= 0)
        fail("config {}: num_attention_heads must be positive, got {}", label, c.num_attention_heads);
      if (c.hidden_size % c.num_attention_heads != 0)
        fail("config {}: head_dim is absent and hidden_size {} is not a multiple of num_attention_heads {}",
             label, c.hidden_size, c.num_attention_heads);
      c.head_dim = c.hidden_size / c.num_attention_heads;
    }
    // transformers' defaults for Llama, Mistral and Qwen3 alike.
    c.rope_theta = f.number("rope_theta", 10000.0);
    c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  } else {
    c.num_key_value_heads = f.integer("num_key_value_heads");
    c.head_dim = f.integer("head_dim");
    c.rope_theta = f.number("rope_theta");
    c.rms_norm_eps = f.number("rms_norm_eps");
  }
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  if (root.contains("rope_scaling")) c.rope_scaling = parse_rope(root["rope_scaling"], label, "rope_scaling");
  // Bounded before anything is derived from them (quantization_config's module names are
  // matched against every layer's).
  validate_sizes(c, label);
}

ModelConfig parse_decodebench(const json& root, const std::string& label) {
  ModelConfig c;
  const Fields f(root, label);
  if (!f.find("architecture") && root.contains("model_type"))
    fail("config {}: missing field architectures (this looks like an HF config.json: model_type {})", label,
         brief(root["model_type"]));
  const std::string arch = f.string("architecture");
  const std::optional<Arch> a = find_arch(arch);
  if (!a)
    fail("config {}: architecture '{}' is not supported (supported: {})", label, printable(arch),
         supported_arch_list());
  c.arch = *a;
  reject_unknown_fields(
      root,
      {"description", "architecture", "hidden_size", "num_hidden_layers", "num_attention_heads",
       "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "rope_theta", "rope_scaling",
       "rms_norm_eps", "tie_word_embeddings", "max_position_embeddings", "quant"},
      label, "");
  parse_shape(c, root, label, /*hf=*/false);
  c.quant = parse_quant(root, label, /*strict=*/true);
  return c;
}

// Modules a quantization_config leaves unquantized (`key`: modules_to_not_convert, or
// ignored_layers as AutoFP8 writes it): HF skips every module whose name contains an entry.
// Those outside the blocks' linears (lm_head, a vision tower) change nothing here; a linear
// among them would be an fp16 matrix in a quantized model, which decodebench does not run.
void check_not_converted(const Fields& f, const char* key, const std::string& label, int64_t layers) {
  const json* skip = f.find(key);
  if (!skip) return;
  if (!skip->is_array())
    fail("config {}: field quantization_config.{} must be an array or null, got {} ({})", label, key,
         brief(*skip), type_name(*skip));
  for (const json& m : *skip) {
    if (!m.is_string())
      fail("config {}: quantization_config.{} holds {} ({}), not a module name", label, key, brief(m),
           type_name(m));
    const std::string name = m.get<std::string>();
    if (const std::string module = block_linear_containing(name, layers); !module.empty())
      fail(
          "config {}: quantization_config.{} leaves '{}' unquantized ({} among them): decodebench runs "
          "every linear of a model in one scheme",
          label, key, printable(name), module);
  }
}

// compressed-tensors names the modules of a config group (`targets`) or left out (`ignore`)
// by entries that match a module when they are its class name ("Linear": every linear), its
// full name, or "re:" and a regular expression that matches from the start of the name
// (Python's re.match). RE2 matches in time linear in the name, without recursion.
class ModuleList {
 public:
  ModuleList(const json& v, const std::string& label, const std::string& field) {
    if (!v.is_array())
      fail("config {}: field {} must be an array of module names, got {} ({})", label, field, brief(v),
           type_name(v));
    for (const json& e : v) {
      if (!e.is_string())
        fail("config {}: {} holds {} ({}), not a module name", label, field, brief(e), type_name(e));
      const std::string& s = e.get_ref<const std::string&>();
      if (s == "Linear") {
        all_ = true;
      } else if (s.rfind("re:", 0) == 0) {
        if (s.size() - 3 > kMaxModulePatternBytes || patterns_.size() == kMaxModulePatterns)
          fail("config {}: {} holds more than {} regular expressions or one above {} bytes", label, field,
               kMaxModulePatterns, kMaxModulePatternBytes);
        RE2::Options options;
        options.set_log_errors(false);
        auto re = std::make_unique<RE2>(s.substr(3), options);
        if (!re->ok())
          fail("config {}: {} entry '{}' is not a regular expression decodebench can read (RE2 syntax): {}",
               label, field, printable(s, 80), printable(re->error(), 120));
        patterns_.push_back(std::move(re));
      } else {
        names_.insert(s);
      }
    }
  }
  bool matches(const std::string& module) const {
    if (all_ || names_.count(module)) return true;
    for (const auto& re : patterns_)
      if (re->Match(module, 0, module.size(), RE2::ANCHOR_START, nullptr, 0)) return true;
    return false;
  }

 private:
  static constexpr size_t kMaxModulePatterns = 64;
  static constexpr size_t kMaxModulePatternBytes = 4096;
  bool all_ = false;
  std::set<std::string> names_;
  std::vector<std::unique_ptr<RE2>> patterns_;
};

// The first block linear module (by layer, then kLinears order) for which `pick` holds; empty
// when none does.
template <class Pick>
std::string first_block_linear(int64_t layers, Pick pick) {
  for (int64_t l = 0; l < layers; ++l)
    for (Linear lin : kLinears)
      if (std::string m = fmt::format("model.layers.{}.{}", l, hf_module_name(lin)); pick(m)) return m;
  return {};
}

// An HF config.json's quantization_config for FP8 (E4M3) weights with per-tensor or
// per-channel scales: transformers' and vLLM's "fp8" (no weight_block_size), or a
// compressed-tensors float8 config ("float-quantized" or "naive-quantized", 8-bit float
// weights, channel or tensor strategy, symmetric). Activation quantization is read past:
// decodebench times the weights in FP8 and the activations in fp16. Anything else is refused
// naming the field.
HfFp8 parse_fp8_config(const Fields& f, const std::string& method, const std::string& label, int64_t layers) {
  HfFp8 q;
  q.format = method;
  if (method == "fp8") {
    if (const json* b = f.find("weight_block_size"))
      fail(
          "config {}: quantization_config.weight_block_size {} (block-wise scales) is not supported "
          "(decodebench reads FP8 scales per tensor or per output channel)",
          label, brief(*b));
    const std::string act = f.string("activation_scheme", "dynamic");
    if (act != "dynamic" && act != "static")
      fail("config {}: quantization_config.activation_scheme '{}' is not supported (dynamic or static)",
           label, printable(act));
    check_not_converted(f, "modules_to_not_convert", label, layers);
    check_not_converted(f, "ignored_layers", label, layers);
    return q;
  }
  const auto check_format = [&](const Fields& g, const std::string& field) {
    const std::string format = g.string("format", "float-quantized");
    if (format != "float-quantized" && format != "naive-quantized")
      fail(
          "config {}: {}format '{}' is not supported (decodebench reads compressed-tensors float8 weights: "
          "float-quantized or naive-quantized)",
          label, field, printable(format));
  };
  check_format(f, "quantization_config.");
  const json& groups = f.need("config_groups");
  if (!groups.is_object() || groups.empty())
    fail("config {}: field quantization_config.config_groups must be a non-empty object, got {}", label,
         brief(groups));
  std::vector<ModuleList> targets;
  std::set<std::string> strategies;
  for (auto it = groups.begin(); it != groups.end(); ++it) {
    const std::string at = fmt::format("quantization_config.config_groups.{}.", printable(it.key(), 40));
    if (!it.value().is_object())
      fail("config {}: field {} must be an object, got {}", label, at.substr(0, at.size() - 1),
           brief(it.value()));
    const Fields g(it.value(), label, at);
    if (g.find("format")) check_format(g, at);
    targets.emplace_back(g.need("targets"), label, at + "targets");
    const json& wv = g.need("weights");
    if (!wv.is_object()) g.type_error("weights", "an object", wv);
    const Fields w(wv, label, at + "weights.");
    const int64_t bits = w.integer("num_bits");
    const std::string type = w.string("type");
    if (bits != 8 || type != "float")
      fail(
          "config {}: {}weights are {}-bit {} (decodebench reads 8-bit float weights from a "
          "compressed-tensors "
          "checkpoint)",
          label, at, bits, printable(type));
    const std::string strategy = w.string("strategy");
    if (strategy != "channel" && strategy != "tensor")
      fail(
          "config {}: {}weights.strategy '{}' is not supported (decodebench reads FP8 scales per tensor or "
          "per "
          "output channel: channel or tensor)",
          label, at, printable(strategy));
    if (const json* b = w.find("block_structure"))
      fail("config {}: {}weights.block_structure {} (block-wise scales) is not supported", label, at,
           brief(*b));
    if (const json* gs = w.find("group_size"))
      fail("config {}: {}weights.group_size {} (grouped scales) is not supported", label, at, brief(*gs));
    if (!w.boolean("symmetric", true))
      fail("config {}: {}weights.symmetric false (a zero point) is not supported", label, at);
    if (w.boolean("dynamic", false))
      fail("config {}: {}weights.dynamic true (scales computed at run time) is not supported", label, at);
    strategies.insert(strategy);
  }
  if (strategies.size() == 1) q.strategy = *strategies.begin();
  const std::string untargeted = first_block_linear(layers, [&](const std::string& m) {
    return std::none_of(targets.begin(), targets.end(), [&](const ModuleList& t) { return t.matches(m); });
  });
  if (!untargeted.empty())
    fail(
        "config {}: quantization_config.config_groups target no group at {}: decodebench runs every linear "
        "of a model in one scheme",
        label, untargeted);
  if (const json* ignore = f.find("ignore")) {
    const ModuleList ignored(*ignore, label, "quantization_config.ignore");
    if (const std::string m =
            first_block_linear(layers, [&](const std::string& n) { return ignored.matches(n); });
        !m.empty())
      fail(
          "config {}: quantization_config.ignore leaves {} unquantized: decodebench runs every linear of a "
          "model in one scheme",
          label, m);
  }
  return q;
}

// An HF config.json's quantization_config: GPTQ (symmetric or not, desc_act false, checkpoint
// format gptq or gptq_v2) or AWQ (GEMM packing, zero point), 4 bits. Anything else would be
// read wrong or timed as a different computation, and is refused naming the field.
HfInt4 parse_int4_config(const Fields& f, const std::string& method, const std::string& label,
                         int64_t layers) {
  HfInt4 q;
  if (const int64_t bits = f.integer("bits", 4); bits != 4)
    fail("config {}: quantization_config.bits {} is not supported (decodebench reads 4-bit {} checkpoints)",
         label, bits, method);
  const int64_t g = f.integer("group_size", 128);
  if (g != -1 && (g <= 0 || g > kMaxGroupSize || g % 8 != 0))
    fail("config {}: quantization_config.group_size {} must be -1 or a positive multiple of 8 up to {}",
         label, g, kMaxGroupSize);
  q.group_size = static_cast<int>(g);
  if (method == "gptq") {
    if (f.boolean("desc_act", false))
      fail(
          "config {}: quantization_config.desc_act true (act-order GPTQ) is not supported: its groups follow "
          "a permutation of the input columns",
          label);
    if (f.boolean("lm_head", false))
      fail("config {}: quantization_config.lm_head true (a GPTQ-quantized lm_head) is not supported", label);
    q.sym = f.boolean("sym", true);
    const std::string format = f.string("checkpoint_format", "gptq");
    if (format != "gptq" && format != "gptq_v2")
      fail("config {}: quantization_config.checkpoint_format '{}' is not supported (gptq or gptq_v2)", label,
           printable(format));
    q.format = format;
  } else {
    std::string version = f.string("version", "gemm");
    std::transform(version.begin(), version.end(), version.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    if (version != "gemm")
      fail(
          "config {}: quantization_config.version '{}' is not supported (decodebench reads AWQ's gemm "
          "packing)",
          label, printable(f.string("version")));
    if (!f.boolean("zero_point", true))
      fail("config {}: quantization_config.zero_point false is not supported (AWQ gemm files hold zeros)",
           label);
    q.format = "awq";
  }
  check_not_converted(f, "modules_to_not_convert", label, layers);
  return q;
}

void parse_quantization_config(const json& v, const std::string& label, ModelConfig& c) {
  if (!v.is_object())
    fail("config {}: field quantization_config must be an object, got {} ({})", label, brief(v),
         type_name(v));
  const Fields f(v, label, "quantization_config.");
  const std::string method = f.string("quant_method");
  if (method == "fp8" || method == "compressed-tensors") {
    c.hf_fp8 = parse_fp8_config(f, method, label, c.num_hidden_layers);
    return;
  }
  if (method != "gptq" && method != "awq")
    fail(
        "config {}: quantization_config.quant_method '{}' is not supported (decodebench reads gptq and awq "
        "int4, fp8 and compressed-tensors float8 checkpoints)",
        label, printable(method));
  c.hf_int4 = parse_int4_config(f, method, label, c.num_hidden_layers);
}

ModelConfig parse_hf(const json& root, const std::string& label) {
  ModelConfig c;
  const json& archs = root.at("architectures");
  if (!archs.is_array() || archs.empty() || !archs[0].is_string())
    fail("config {}: field architectures must be a non-empty array of strings, got {}", label, brief(archs));
  const std::string name = archs[0].get<std::string>();
  const HfArch* found = nullptr;
  for (const HfArch& a : kHfArchs)
    if (name == a.hf_name) found = &a;
  if (!found)
    fail("config {}: architecture {} is not supported (supported: {})", label, printable(name),
         supported_hf_list());
  c.arch = found->arch;

  const Fields f(root, label);
  // What decodebench computes: SiLU MLP, no biases but Qwen2's on q/k/v (which its config
  // does not mention). Anything else would be benchmarked wrong.
  if (const std::string act = f.string("hidden_act", "silu"); act != "silu")
    fail("config {}: hidden_act '{}' is not supported (decodebench implements silu)", label, printable(act));
  for (const char* bias : {"attention_bias", "mlp_bias"})
    if (f.boolean(bias, false)) fail("config {}: {} true is not supported (no bias terms)", label, bias);

  parse_shape(c, root, label, /*hf=*/true);
  // transformers 5 writes rope_parameters (holding rope_theta) instead of rope_scaling.
  if (const json* rp = f.find("rope_parameters")) {
    c.rope_scaling = parse_rope(*rp, label, "rope_parameters");
    const Fields rf(*rp, label, "rope_parameters.");
    c.rope_theta = rf.number("rope_theta", c.rope_theta);
  }

  // Sliding-window attention: Mistral v0.1 attends to the last `sliding_window` positions.
  // decodebench always attends to every position, which equals the model only while the
  // sequence fits in the window: cap the usable positions there rather than time a
  // different computation at long contexts.
  if (name == "MistralForCausalLM" && f.find("sliding_window")) {
    const int64_t w = f.integer("sliding_window");
    if (w <= 0) fail("config {}: sliding_window must be positive or null, got {}", label, w);
    c.max_position_embeddings = std::min(c.max_position_embeddings, w);
  }
  // Qwen2 and Qwen3 carry sliding_window and max_window_layers always; they apply only with
  // use_sliding_window true (then to the layers from max_window_layers on).
  if (f.boolean("use_sliding_window", false))
    fail("config {}: use_sliding_window true is not supported (decodebench attends to every position)",
         label);
  // transformers 5 also spells the choice out per layer.
  if (const json* types = f.find("layer_types"); types && types->is_array())
    for (const json& t : *types)
      if (t.is_string() && t.get<std::string>() != "full_attention")
        fail("config {}: layer_types holds '{}', not supported (decodebench attends to every position)",
             label, printable(t.get<std::string>()));

  c.quant = parse_quant(root, label, /*strict=*/true);  // only present through a decodebench "extends"
  if (const json* qc = f.find("quantization_config")) parse_quantization_config(*qc, label, c);
  return c;
}

ModelConfig parse_with_source(const std::string& text, const Source& src) {
  const json root = resolve_extends(parse_json_object(text, src.label), src);
  const bool hf = root.contains("architectures");
  ModelConfig c = hf ? parse_hf(root, src.label) : parse_decodebench(root, src.label);
  c.source = hf ? "hf" : "file";
  validate(c, src.label);
  return c;
}

}  // namespace

const char* to_string(Arch a) {
  switch (a) {
    case Arch::llama:
      return "llama";
    case Arch::qwen2:
      return "qwen2";
    case Arch::qwen3:
      return "qwen3";
  }
  return "?";
}

const char* to_string(Scheme s) {
  switch (s) {
    case Scheme::fp16:
      return "fp16";
    case Scheme::int8:
      return "int8";
    case Scheme::int4:
      return "int4";
    case Scheme::fp8:
      return "fp8";
  }
  return "?";
}

const char* to_string(KvScheme s) {
  switch (s) {
    case KvScheme::fp16:
      return "fp16";
    case KvScheme::fp8:
      return "fp8";
    case KvScheme::int8:
      return "int8";
  }
  return "?";
}

KvScheme parse_kv_scheme(std::string_view s) {
  for (KvScheme k : {KvScheme::fp16, KvScheme::fp8, KvScheme::int8})
    if (s == to_string(k)) return k;
  fail("unknown KV cache scheme '{}' (supported: fp16, fp8, int8)", printable(s));
}

Arch parse_arch(std::string_view s) {
  if (const std::optional<Arch> a = find_arch(s)) return *a;
  fail("unknown architecture '{}' (supported: {})", printable(s), supported_arch_list());
}

Scheme parse_scheme(std::string_view s) {
  for (Scheme sc : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8})
    if (s == to_string(sc)) return sc;
  fail("unknown quantization scheme '{}' (supported: fp16, int8, int4, fp8)", s);
}

int scheme_bits(Scheme s) {
  switch (s) {
    case Scheme::fp16:
      return 16;
    case Scheme::int8:
      return 8;
    case Scheme::int4:
      return 4;
    case Scheme::fp8:
      return 8;
  }
  return 0;
}

std::vector<std::string> hf_architectures(Arch a) {
  std::vector<std::string> names;
  for (const HfArch& h : kHfArchs)
    if (h.arch == a) names.emplace_back(h.hf_name);
  return names;
}

std::string preset_text(std::string_view name) {
  for (const auto& [stem, text] : embedded_presets())
    if (stem == name) return std::string(text);
  return {};
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  std::set<std::string> seen;
  auto add = [&](const std::string& n) {
    if (!preset_text(n).empty() && seen.insert(n).second) names.push_back(n);
  };
  for (const char* base : kBasePresets) {
    add(base);
    for (const char* s : kSchemeSuffixes) add(std::string(base) + "-" + s);
  }
  std::vector<std::string> rest;  // presets added later that the order above does not know
  for (const auto& [stem, text] : embedded_presets())
    if (!seen.count(std::string(stem))) rest.emplace_back(stem);
  std::sort(rest.begin(), rest.end());
  names.insert(names.end(), rest.begin(), rest.end());
  return names;
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& origin) {
  Source src{origin, fs::path(origin).parent_path().string(), "file:" + origin};
  ModelConfig c = parse_with_source(json_text, src);
  c.name = origin;
  return c;
}

ModelConfig load_model_config(const std::string& name_or_path) {
  if (name_or_path.empty()) fail("unknown model '': the name is empty (see `decodebench list presets`)");
  if (std::string text = preset_text(name_or_path); !text.empty()) {
    ModelConfig c = parse_with_source(text, preset_source(name_or_path));
    c.name = name_or_path;
    c.source = "preset";
    return c;
  }
  fs::path path = name_or_path;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st))
    fail("unknown model '{}': not a preset (see `decodebench list presets`) and no such file{}",
         printable(name_or_path), did_you_mean(name_or_path, preset_names()));
  if (fs::is_directory(st)) {
    path /= "config.json";
    if (!fs::exists(path, ec)) fail("model directory {}: no config.json in it", name_or_path);
  }
  const Source src = file_source(path);
  ModelConfig c = parse_with_source(read_config_file(path), src);
  c.name = name_or_path;
  return c;
}

namespace {

// The input dimensions of the model's int4 matrices, named for messages.
std::vector<std::pair<std::string, int64_t>> int4_inputs(const ModelConfig& c) {
  std::vector<std::pair<std::string, int64_t>> dims;
  if (c.quant.scheme != Scheme::int4 && c.quant.lm_head != Scheme::int4) return dims;
  dims.emplace_back("hidden_size", c.hidden_size);
  if (c.quant.scheme == Scheme::int4) {
    dims.emplace_back("intermediate_size", c.intermediate_size);
    dims.emplace_back(
        fmt::format("q_dim (num_attention_heads*head_dim = {}*{})", c.num_attention_heads, c.head_dim),
        c.q_dim());
  }
  return dims;
}

}  // namespace

void validate_sizes(const ModelConfig& c, const std::string& origin) {
  // Each size is bounded so that products of sizes (parameter counts, byte counts) cannot
  // overflow 64 bits; the bounds are far above any real model.
  const int64_t sizes[] = {
      c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads,
      c.head_dim,    c.intermediate_size, c.vocab_size,          c.max_position_embeddings};
  static_assert(std::size(sizes) == std::size(kConfigLimits));
  for (size_t i = 0; i < std::size(sizes); ++i) {
    const auto [field, limit] = kConfigLimits[i];
    if (sizes[i] <= 0) fail("config {}: {} must be positive, got {}", origin, field, sizes[i]);
    if (sizes[i] > limit)
      fail("config {}: {} {} is above the limit {}, larger than any real model's (docs/input-safety.md)",
           origin, field, sizes[i], limit);
  }
}

void validate(const ModelConfig& c, const std::string& origin) {
  validate_sizes(c, origin);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail("config {}: num_attention_heads {} is not a multiple of num_key_value_heads {}", origin,
         c.num_attention_heads, c.num_key_value_heads);
  // head_dim * heads may differ from hidden_size (qwen3), but RoPE rotates pairs.
  if (c.head_dim % 2 != 0)
    fail("config {}: head_dim {} must be even (RoPE rotates pairs)", origin, c.head_dim);
  if (!(std::isfinite(c.rope_theta) && c.rope_theta > 1.0))
    fail("config {}: rope_theta must be a finite number greater than 1, got {}", origin, c.rope_theta);
  if (!(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0 && c.rms_norm_eps < 1))
    fail("config {}: rms_norm_eps must be in (0, 1), got {}", origin, c.rms_norm_eps);
  if (c.rope_scaling.llama3) {
    const RopeScaling& r = c.rope_scaling;
    if (!(std::isfinite(r.factor) && r.factor >= 1.0))
      fail("config {}: rope_scaling.factor must be at least 1, got {}", origin, r.factor);
    if (!(r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor &&
          std::isfinite(r.high_freq_factor)))
      fail("config {}: rope_scaling needs 0 < low_freq_factor < high_freq_factor, got {} and {}", origin,
           r.low_freq_factor, r.high_freq_factor);
    if (r.original_max_position_embeddings <= 0 || r.original_max_position_embeddings > kMaxPositions)
      fail("config {}: rope_scaling.original_max_position_embeddings must be in [1, {}], got {}", origin,
           kMaxPositions, r.original_max_position_embeddings);
  }
  const int64_t g = c.quant.group_size;
  if (g <= 0) fail("config {}: quant.group_size must be positive, got {}", origin, g);
  if (g > kMaxGroupSize)
    fail("config {}: quant.group_size {} is above the limit {}", origin, g, kMaxGroupSize);
  if (c.quant.scheme == Scheme::int4 || c.quant.lm_head == Scheme::int4) {
    if (g % 2 != 0)
      fail("config {}: quant.group_size {} must be even (int4 packs two values per byte)", origin, g);
    // Every int4 matrix's input dimension must hold whole groups.
    for (const auto& [dim, v] : int4_inputs(c))
      if (v % g != 0)
        fail("config {}: quant.group_size {} does not divide {} {} (an int4 matrix input dimension)", origin,
             g, dim, v);
  }
  // The whole model, as a double: catches products of plausible sizes that are not.
  const double params =
      static_cast<double>(c.vocab_size) * c.hidden_size * 2 +
      static_cast<double>(c.num_hidden_layers) *
          (4.0 * c.hidden_size * std::max(c.q_dim(), c.kv_dim()) + 3.0 * c.hidden_size * c.intermediate_size);
  if (params > 1e14) fail("config {}: the model is implausibly large ({:.3g} parameters)", origin, params);
}

// A decodebench weights file records its quantization (__metadata__). An HF config.json says
// nothing about quantization, so with one the run takes the file's (unless the command line
// says otherwise). A preset or decodebench config names its scheme, and a file that disagrees
// is an error later, at load. A file that is not decodebench's leaves the config as it is.
static bool quant_from_weights_file(ModelConfig& c, const QuantOverrides& asked, const FileQuant& q,
                                    std::string& overrides) {
  if (!q.decodebench || c.source != "hf") return false;
  if (!asked.scheme && q.scheme) c.quant.scheme = *q.scheme;
  if (!asked.group_size && q.group_size) c.quant.group_size = *q.group_size;
  if (q.zero_point) c.quant.zero_point = *q.zero_point;
  if (!asked.lm_head && q.lm_head) c.quant.lm_head = *q.lm_head;
  overrides += fmt::format(" the quantization of {}", q.file);
  return true;
}

// A config's own int4 group size that does not divide an int4 matrix's input (SmolLM2's
// hidden 576 or 960 against the default 128) gives way to the largest of 128, 64, 32 that
// divides them all; the run says so (ModelConfig::group_size_note). An explicit
// --group-size, or a decodebench weights file's, is never changed.
static void fit_group_size(ModelConfig& c) {
  const std::vector<std::pair<std::string, int64_t>> dims = int4_inputs(c);
  const auto divides = [&](int64_t g) {
    return std::all_of(dims.begin(), dims.end(), [g](const auto& d) { return d.second % g == 0; });
  };
  const int64_t g = c.quant.group_size;
  if (dims.empty() || g <= 0 || divides(g)) return;
  for (const int64_t fit : {128, 64, 32}) {
    if (!divides(fit)) continue;
    const auto bad = std::find_if(dims.begin(), dims.end(), [g](const auto& d) { return d.second % g != 0; });
    c.group_size_note = fmt::format("int4 group size {} instead of {}: {} does not divide {} {}", fit, g, g,
                                    bad->first, bad->second);
    c.quant.group_size = static_cast<int>(fit);
    return;
  }
}

// A GPTQ/AWQ config.json fixes the scheme of the block linears: int4 with the file's group
// size (one group per row: the largest even common divisor of the inputs, every group of a
// row with the row's scale and zero) and zero point (none for symmetric GPTQ: every zero is 8).
// Its weights are converted, never re-quantized, so a --quant or --group-size that
// contradicts it is refused.
static bool quant_from_hf_int4(ModelConfig& c, const QuantOverrides& asked, std::string& overrides) {
  if (c.hf_int4.format.empty()) return false;
  const std::string what = fmt::format("config {} holds {} int4 weights (quantization_config)", c.name,
                                       c.hf_int4.format == "awq" ? "AWQ" : "GPTQ");
  if (asked.scheme && *asked.scheme != Scheme::int4)
    fail("{}: --quant {} contradicts it (they are converted, not re-quantized)", what,
         to_string(*asked.scheme));
  c.quant.scheme = Scheme::int4;
  int group = c.hf_int4.group_size;
  if (group == -1) {
    int64_t d = 0;
    for (const auto& in : int4_inputs(c)) d = std::gcd(d, in.second);
    group = static_cast<int>(std::min<int64_t>(d, kMaxGroupSize));
  }
  if (asked.group_size && *asked.group_size != group)
    fail("{} with group size {}: --group-size {} contradicts it", what, group, *asked.group_size);
  c.quant.group_size = group;
  c.quant.zero_point = !(c.hf_int4.format != "awq" && c.hf_int4.sym);
  overrides += fmt::format(" the {} quantization_config", c.hf_int4.format);
  return true;
}

// An FP8 config.json fixes the scheme of the block linears: fp8, with the file's codes and
// scales read as they are, so a --quant that contradicts it is refused.
static bool quant_from_hf_fp8(ModelConfig& c, const QuantOverrides& asked, std::string& overrides) {
  if (c.hf_fp8.format.empty()) return false;
  if (asked.scheme && *asked.scheme != Scheme::fp8)
    fail(
        "config {} holds FP8 weights (quantization_config {}): --quant {} contradicts it (they are read as "
        "they are, not re-quantized)",
        c.name, c.hf_fp8.format, to_string(*asked.scheme));
  c.quant.scheme = Scheme::fp8;
  overrides += fmt::format(" the {} quantization_config", c.hf_fp8.format);
  return true;
}

ModelConfig apply_overrides(ModelConfig c, const QuantOverrides& asked, const FileQuant& recorded) {
  std::string overrides;
  const bool from_file =
      quant_from_weights_file(c, asked, recorded, overrides) || quant_from_hf_int4(c, asked, overrides);
  // The scheme only: an int4 lm_head's group size stays the config's (fitted below).
  if (!from_file) quant_from_hf_fp8(c, asked, overrides);
  if (asked.scheme) {
    c.quant.scheme = *asked.scheme;
    overrides += fmt::format(" --quant {}", to_string(*asked.scheme));
  }
  if (asked.group_size) {
    c.quant.group_size = *asked.group_size;
    overrides += fmt::format(" --group-size {}", *asked.group_size);
  }
  if (asked.lm_head) {
    c.quant.lm_head = *asked.lm_head;
    overrides += fmt::format(" --lm-head {}", to_string(*asked.lm_head));
  }
  // Not named in the origin: every config is valid with every KV cache scheme.
  if (asked.kv_cache) c.kv_cache = *asked.kv_cache;
  if (!asked.group_size && !from_file) fit_group_size(c);
  std::string origin = c.source == "preset" ? c.name + " (preset)" : c.name;
  if (!overrides.empty()) origin += " with" + overrides;
  validate(c, origin);
  return c;
}

}  // namespace db
