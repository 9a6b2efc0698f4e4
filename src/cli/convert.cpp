// gen-weights and quantize: both write a model in decodebench's canonical file format
// (docs/design.md "Weights"), one tensor at a time, so host memory holds one matrix at most.
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "decodebench/commands.h"
#include "decodebench/error.h"
#include "decodebench/half.h"
#include "decodebench/weights.h"

namespace db {
namespace {

std::string module_of(const std::string& weight_name) {
  return weight_name.substr(0, weight_name.size() - 7);
}

void add_vector(SafetensorsWriter& w, const WeightSource& src, const Origin& o) {
  w.add(o.name, DType::f16, o.shape, [&src, o](uint8_t* out) {
    const std::vector<float> v = src.host_vector(o);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = f32_to_f16(v[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
  });
}

// One matrix in `scheme`: fp16 as "<name>" F16, int8/int4 as .qweight/.scales(/.zeros).
// The quantized matrix is computed when its first tensor is streamed and dropped after
// its last, so memory holds one matrix.
void add_matrix(SafetensorsWriter& w, const WeightSource& src, const Origin& o, const std::string& name,
                Scheme scheme) {
  const int64_t rows = o.shape[0], cols = o.shape[1];
  auto cache = std::make_shared<std::optional<QuantMatrix>>();
  auto get = [&src, o, scheme, cache]() -> const QuantMatrix& {
    if (!*cache) *cache = src.host_matrix(o, scheme);
    return **cache;
  };
  auto copy = [](const auto& v, uint8_t* out) { std::memcpy(out, v.data(), v.size() * sizeof(v[0])); };
  if (scheme == Scheme::fp16) {
    w.add(name, DType::f16, {rows, cols}, [=](uint8_t* out) { copy(get().qweight, out), cache->reset(); });
    return;
  }
  const std::string m = module_of(name);
  const QuantConfig& q = src.config().quant;
  if (scheme == Scheme::int8) {
    w.add(m + ".qweight", DType::i8, {rows, cols}, [=](uint8_t* out) { copy(get().qweight, out); });
    w.add(m + ".scales", DType::f16, {rows}, [=](uint8_t* out) { copy(get().scales, out), cache->reset(); });
    return;
  }
  const int64_t groups = cols / q.group_size;
  w.add(m + ".qweight", DType::u8, {rows, cols / 2}, [=](uint8_t* out) { copy(get().qweight, out); });
  w.add(m + ".scales", DType::f16, {rows, groups}, [=](uint8_t* out) {
    copy(get().scales, out);
    if (!get().zero_point) cache->reset();
  });
  if (q.zero_point)
    w.add(m + ".zeros", DType::u8, {rows, groups},
          [=](uint8_t* out) { copy(get().zeros, out), cache->reset(); });
}

void write_model(const WeightSource& src, const std::string& path, const std::string& origin_note) {
  const ModelConfig& c = src.config();
  SafetensorsWriter w(path);
  w.set_metadata("format", "decodebench");
  w.set_metadata("quant", to_string(c.quant.scheme));
  w.set_metadata("group_size", std::to_string(c.quant.group_size));
  w.set_metadata("zero_point", c.quant.zero_point ? "true" : "false");
  w.set_metadata("lm_head", to_string(c.quant.lm_head));
  w.set_metadata("source", origin_note);

  add_matrix(w, src, src.embedding(), kEmbedName, Scheme::fp16);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    add_vector(w, src, src.vector(layer_norm_name(l, false), c.hidden_size));
    for (Linear lin : kLinears) add_matrix(w, src, src.linear(l, lin), linear_name(l, lin), c.quant.scheme);
    if (c.arch == Arch::qwen2)
      for (Linear lin : kBiasedLinears) add_vector(w, src, src.bias(l, lin));
    if (c.arch == Arch::qwen3) {
      add_vector(w, src, src.vector(qk_norm_name(l, false), c.head_dim));
      add_vector(w, src, src.vector(qk_norm_name(l, true), c.head_dim));
    }
    add_vector(w, src, src.vector(layer_norm_name(l, true), c.hidden_size));
  }
  add_vector(w, src, src.vector(kFinalNormName, c.hidden_size));
  // A tied fp16 lm_head is the embedding table; anything else is stored as lm_head.
  if (!(c.tie_word_embeddings && c.quant.lm_head == Scheme::fp16))
    add_matrix(w, src, src.lm_head(), kLmHeadName, c.quant.lm_head);
  w.finish();
}

}  // namespace

int cmd_gen_weights(const GenWeightsSpec& spec) {
  RunSpec overrides;
  overrides.quant = spec.quant;
  overrides.group_size = spec.group_size;
  const ModelConfig c = apply_overrides(load_model_config(spec.model), overrides);
  const WeightSource src(c, "", spec.seed);
  write_model(src, spec.output, fmt::format("synthetic {} seed {}", spec.model, spec.seed));
  std::cout << fmt::format("wrote {} ({} {}, seed {}, {:.2f} GB)\n", spec.output, c.name,
                           to_string(c.quant.scheme), spec.seed,
                           std::filesystem::file_size(spec.output) / 1e9);
  return 0;
}

int cmd_quantize(const QuantizeSpec& spec) {
  std::string config_path = spec.model;
  if (config_path.empty()) {
    const std::filesystem::path in(spec.input);
    config_path = (std::filesystem::is_directory(in) ? in : in.parent_path()) / "config.json";
  }
  RunSpec overrides;
  overrides.quant = spec.scheme;
  overrides.group_size = spec.group_size;
  const ModelConfig c = apply_overrides(load_model_config(config_path), overrides);
  const WeightSource src(c, spec.input, 0);
  write_model(src, spec.output, fmt::format("quantized from {}", spec.input));
  std::cout << fmt::format("wrote {} ({} from {}, {:.2f} GB)\n", spec.output, to_string(c.quant.scheme),
                           spec.input, std::filesystem::file_size(spec.output) / 1e9);
  return 0;
}

}  // namespace db
