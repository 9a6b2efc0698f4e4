// gen-weights and quantize: both write a model in decodebench's canonical file format
// (docs/design.md "Weights"), tensor by tensor and each matrix a block of rows at a time, so
// host memory holds a block and one matrix's scales and zeros, never the model; the plan of
// that is checked against the host's memory before anything is made.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "decodebench/accounting.h"
#include "decodebench/commands.h"
#include "decodebench/error.h"
#include "decodebench/half.h"
#include "decodebench/host_memory.h"
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

// Rows a block holds while a matrix is streamed: 16 Mi floats (64 MiB) of the matrix, at
// least one row. Larger blocks save nothing (each is spread over every thread).
constexpr int64_t kBlockFloats = int64_t{1} << 24;

int64_t block_rows(int64_t cols) {
  return std::max<int64_t>(1, kBlockFloats / cols);
}

// One matrix in `scheme`: fp16 as "<name>" F16, int8/int4/fp8 as .qweight/.scales(/.zeros),
// streamed a block of rows at a time. A block is computed as the whole matrix would be
// (host_rows: every scheme quantizes a row on its own), so the bytes are the same; its
// weights go out at once, and its scales and zeros are kept, for the tensors that follow.
void add_matrix(SafetensorsWriter& w, const WeightSource& src, const Origin& o, const std::string& name,
                Scheme scheme) {
  const int64_t rows = o.shape[0], cols = o.shape[1];
  const int64_t step = block_rows(cols);
  struct Kept {
    std::vector<uint16_t> scales;
    std::vector<uint8_t> zeros;
  };
  auto kept = std::make_shared<Kept>();
  // Every block's qweight to the sink; with `keep`, its scales and zeros to `kept`.
  auto stream = [&src, o, scheme, rows, step, kept](const SafetensorsWriter::Sink& sink, bool keep) {
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
      const QuantMatrix m = src.host_rows(o, scheme, r0, std::min(rows, r0 + step));
      sink(m.qweight.data(), m.qweight.size());
      if (!keep) continue;
      if (r0 == 0) {  // room for every block's at once: growing by doubling could hold twice as much
        kept->scales.reserve(m.scales.size() / static_cast<size_t>(m.rows) * static_cast<size_t>(rows));
        kept->zeros.reserve(m.zeros.size() / static_cast<size_t>(m.rows) * static_cast<size_t>(rows));
      }
      kept->scales.insert(kept->scales.end(), m.scales.begin(), m.scales.end());
      kept->zeros.insert(kept->zeros.end(), m.zeros.begin(), m.zeros.end());
    }
  };
  // A kept tensor to the sink, then freed.
  auto flush = [](auto& v, const SafetensorsWriter::Sink& sink) {
    sink(v.data(), v.size() * sizeof(v[0]));
    std::decay_t<decltype(v)>().swap(v);
  };
  if (scheme == Scheme::fp16) {
    w.add_streamed(name, DType::f16, {rows, cols},
                   [=](const SafetensorsWriter::Sink& sink) { stream(sink, false); });
    return;
  }
  const std::string m = module_of(name);
  const QuantConfig& q = src.config().quant;
  const auto qweight = [=](const SafetensorsWriter::Sink& sink) { stream(sink, true); };
  const auto scales = [kept, flush](const SafetensorsWriter::Sink& sink) { flush(kept->scales, sink); };
  if (scheme == Scheme::int8) {
    w.add_streamed(m + ".qweight", DType::i8, {rows, cols}, qweight);
    w.add_streamed(m + ".scales", DType::f16, {rows}, scales);
    return;
  }
  if (scheme == Scheme::fp8) {
    w.add_streamed(m + ".qweight", DType::f8_e4m3, {rows, cols}, qweight);
    w.add_streamed(m + ".scales", DType::f32, {rows}, scales);
    return;
  }
  const int64_t groups = cols / q.group_size;
  w.add_streamed(m + ".qweight", DType::u8, {rows, cols / 2}, qweight);
  w.add_streamed(m + ".scales", DType::f16, {rows, groups}, scales);
  if (q.zero_point)
    w.add_streamed(m + ".zeros", DType::u8, {rows, groups},
                   [kept, flush](const SafetensorsWriter::Sink& sink) { flush(kept->zeros, sink); });
}

}  // namespace

// At most a block of float rows with its quantized form, and the scales and zeros kept of
// the matrix with the most of them.
HostPlan weights_file_plan(const ModelConfig& c, const std::string& what) {
  uint64_t block = 0, kept = 0;
  const auto matrix = [&](int64_t rows, int64_t cols, Scheme s) {
    const uint64_t r = static_cast<uint64_t>(std::min(rows, block_rows(cols)));
    const MatrixBytes b =
        matrix_bytes(static_cast<int64_t>(r), cols, s, c.quant.group_size, c.quant.zero_point);
    block = std::max(block, r * static_cast<uint64_t>(cols) * sizeof(float) + b.total());
    const MatrixBytes all = matrix_bytes(rows, cols, s, c.quant.group_size, c.quant.zero_point);
    kept = std::max(kept, all.scales + all.zeros);
  };
  matrix(c.vocab_size, c.hidden_size, Scheme::fp16);  // the embedding
  matrix(c.vocab_size, c.hidden_size, c.quant.lm_head);
  for (Linear l : kLinears) {
    const MatShape s = linear_shape(c, l);
    matrix(s.rows, s.cols, c.quant.scheme);
  }
  return {what, {{"a block of rows", block, ""}, {"scales and zeros of one matrix", kept, ""}}};
}

namespace {

void write_model(const WeightSource& src, const std::string& path, const std::string& origin_note,
                 const std::string& what) {
  const ModelConfig& c = src.config();
  require_host_memory(weights_file_plan(c, what));
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
  const ModelConfig c = apply_overrides(load_model_config(spec.model),
                                        {spec.quant, spec.group_size, std::nullopt, std::nullopt});
  const WeightSource src(c, "", spec.seed);
  write_model(src, spec.output, fmt::format("synthetic {} seed {}", spec.model, spec.seed),
              "gen-weights of " + c.name);
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
  const ModelConfig c = apply_overrides(load_model_config(config_path),
                                        {spec.scheme, spec.group_size, std::nullopt, std::nullopt});
  const WeightSource src(c, spec.input, 0);
  write_model(src, spec.output, fmt::format("quantized from {}", spec.input), "quantize of " + spec.input);
  std::cout << fmt::format("wrote {} ({} from {}, {:.2f} GB)\n", spec.output, to_string(c.quant.scheme),
                           spec.input, std::filesystem::file_size(spec.output) / 1e9);
  return 0;
}

}  // namespace db
