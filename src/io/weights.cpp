// Weight origins and their host materialization (see include/decodebench/weights.h).
#include "decodebench/weights.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "decodebench/adapter.h"
#include "decodebench/error.h"
#include "decodebench/half.h"
#include "decodebench/input.h"
#include "decodebench/parallel.h"
#include "decodebench/quant.h"

namespace db {

// ---------------------------------------------------------------------------- QuantMatrix

float QuantMatrix::at(int64_t r, int64_t c) const {
  switch (scheme) {
    case Scheme::fp16: {
      uint16_t h;
      std::memcpy(&h, qweight.data() + 2 * (r * cols + c), 2);
      return f16_to_f32(h);
    }
    case Scheme::int8:
      return quant::dequantize_int8(static_cast<int8_t>(qweight[r * cols + c]), f16_to_f32(scales[r]));
    case Scheme::int4: {
      const int64_t g = r * (cols / group_size) + c / group_size;
      const int zero = zero_point ? zeros[g] : quant::kInt4SymmetricZero;
      const uint8_t q = quant::unpack_int4(qweight[(r * cols + c) / 2], static_cast<int>(c));
      return quant::dequantize_int4(q, f16_to_f32(scales[g]), zero);
    }
    case Scheme::fp8:
      return quant::dequantize_fp8(qweight[r * cols + c], row_scale(r));
  }
  return 0.f;
}

float QuantMatrix::row_scale(int64_t r) const {
  float s;
  std::memcpy(&s, scales.data() + 2 * r, sizeof s);
  return s;
}

void QuantMatrix::set_row_scale(int64_t r, float s) {
  std::memcpy(scales.data() + 2 * r, &s, sizeof s);
}

// at() for a whole row, with each scale converted once per row or group: the same calls per
// element, so the same bits (the CPU reference's matvec spends its time here).
void QuantMatrix::row(int64_t r, float* out) const {
  switch (scheme) {
    case Scheme::fp16:
      for (int64_t c = 0; c < cols; ++c) {
        uint16_t h;
        std::memcpy(&h, qweight.data() + 2 * (r * cols + c), 2);
        out[c] = f16_to_f32(h);
      }
      return;
    case Scheme::int8: {
      const float s = f16_to_f32(scales[r]);
      const uint8_t* q = qweight.data() + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = quant::dequantize_int8(static_cast<int8_t>(q[c]), s);
      return;
    }
    case Scheme::fp8: {
      const float s = row_scale(r);
      const uint8_t* q = qweight.data() + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = quant::dequantize_fp8(q[c], s);
      return;
    }
    case Scheme::int4: {
      const int64_t groups = cols / group_size;
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t at_g = r * groups + g;
        const float s = f16_to_f32(scales[at_g]);
        const int zero = zero_point ? zeros[at_g] : quant::kInt4SymmetricZero;
        for (int64_t c = g * group_size; c < (g + 1) * group_size; ++c)
          out[c] = quant::dequantize_int4(
              quant::unpack_int4(qweight[(r * cols + c) / 2], static_cast<int>(c)), s, zero);
      }
      return;
    }
  }
}

namespace {

// fp8 scales as a file holds them (F32): each finite and not negative, or the run is refused
// (a NaN scale would make every weight of its row NaN).
void check_fp8_scales(const TensorInfo& t, const std::string& path) {
  for (uint64_t i = 0; i < t.nbytes / 4; ++i) {
    float s;
    std::memcpy(&s, t.data + 4 * i, 4);
    if (!(s >= 0.f && s <= std::numeric_limits<float>::max()))
      fail("weights {}: tensor {} holds the scale {} at index {}; a scale must be finite and not negative",
           path, t.name, s, i);
  }
}

// The canonical int4 matrix that a producer (the quantizer, the GPTQ/AWQ conversion) fills:
// qweight [rows, cols/2] zeroed, two values a byte; scales [rows, cols/group]; zeros
// [rows, cols/group] with a zero point, else empty.
QuantMatrix empty_int4(int64_t rows, int64_t cols, int group_size, bool zero_point) {
  if (group_size <= 0 || cols % group_size != 0 || group_size % 2 != 0)
    fail("int4 group size {} does not divide the input dimension {}", group_size, cols);
  QuantMatrix m;
  m.scheme = Scheme::int4;
  m.rows = rows;
  m.cols = cols;
  m.group_size = group_size;
  m.zero_point = zero_point;
  const int64_t groups = cols / group_size;
  m.qweight.assign(static_cast<size_t>(rows * cols / 2), 0);
  m.scales.resize(static_cast<size_t>(rows * groups));
  if (zero_point) m.zeros.resize(static_cast<size_t>(rows * groups));
  return m;
}

}  // namespace

QuantMatrix quantize_matrix(const float* w, int64_t rows, int64_t cols, Scheme scheme, int group_size,
                            bool zero_point, int threads) {
  QuantMatrix m;
  m.scheme = scheme;
  m.rows = rows;
  m.cols = cols;
  switch (scheme) {
    case Scheme::fp16: {
      m.qweight.resize(static_cast<size_t>(rows * cols) * 2);
      parallel_rows(rows, threads, [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0 * cols; i < r1 * cols; ++i) {
          const uint16_t h = f32_to_f16(w[i]);
          std::memcpy(m.qweight.data() + 2 * i, &h, 2);
        }
      });
      break;
    }
    case Scheme::int8: {
      m.qweight.resize(static_cast<size_t>(rows * cols));
      m.scales.resize(static_cast<size_t>(rows));
      parallel_rows(rows, threads, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* row = w + r * cols;
          float amax = 0.f;
          for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
          m.scales[r] = quant::int8_scale(amax);
          const float s = f16_to_f32(m.scales[r]);
          for (int64_t c = 0; c < cols; ++c)
            m.qweight[r * cols + c] = static_cast<uint8_t>(quant::quantize_int8(row[c], s));
        }
      });
      break;
    }
    case Scheme::fp8: {
      m.qweight.resize(static_cast<size_t>(rows * cols));
      m.scales.resize(static_cast<size_t>(rows) * 2);  // a float a row
      parallel_rows(rows, threads, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* row = w + r * cols;
          float amax = 0.f;
          for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
          const float s = quant::fp8_scale(amax);
          m.set_row_scale(r, s);
          for (int64_t c = 0; c < cols; ++c) m.qweight[r * cols + c] = quant::quantize_fp8(row[c], s);
        }
      });
      break;
    }
    case Scheme::int4: {
      m = empty_int4(rows, cols, group_size, zero_point);
      const int64_t groups = cols / group_size;
      parallel_rows(rows, threads, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          for (int64_t g = 0; g < groups; ++g) {
            const float* x = w + r * cols + g * group_size;
            float lo = x[0], hi = x[0];
            for (int i = 1; i < group_size; ++i) {
              lo = std::min(lo, x[i]);
              hi = std::max(hi, x[i]);
            }
            const quant::Int4Params p = quant::int4_params(lo, hi, zero_point);
            m.scales[r * groups + g] = p.scale;
            if (zero_point) m.zeros[r * groups + g] = p.zero;
            const float s = f16_to_f32(p.scale);
            for (int i = 0; i < group_size; i += 2) {
              const uint8_t a = quant::quantize_int4(x[i], s, p.zero);
              const uint8_t b = quant::quantize_int4(x[i + 1], s, p.zero);
              m.qweight[(r * cols + g * group_size + i) / 2] = quant::pack_int4(a, b);
            }
          }
        }
      });
      break;
    }
  }
  return m;
}

void dense_row(const TensorInfo& t, int64_t row, int64_t cols, float* out) {
  const uint8_t* p = t.data + static_cast<size_t>(row * cols) * dtype_size(t.dtype);
  for (int64_t c = 0; c < cols; ++c) {
    switch (t.dtype) {
      case DType::f32:
        std::memcpy(&out[c], p + 4 * c, 4);
        break;
      case DType::f16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * c, 2);
        out[c] = f16_to_f32(h);
        break;
      }
      case DType::bf16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * c, 2);
        out[c] = bf16_to_f32(h);
        break;
      }
      default:
        fail("tensor {}: dtype {} is not a float type", t.name, to_string(t.dtype));
    }
  }
}

float synthetic_value(uint64_t seed, const Origin& o, int64_t index) {
  return f16_to_f32(f32_to_f16(synth::value(seed, o.tensor_id, static_cast<uint64_t>(index), o.dist)));
}

// ---------------------------------------------------------------------------- GPTQ and AWQ

const char* to_string(Packing p) {
  switch (p) {
    case Packing::canonical:
      return "decodebench";
    case Packing::gptq:
      return "gptq";
    case Packing::gptq_v2:
      return "gptq_v2";
    case Packing::awq:
      return "awq";
    case Packing::fp8:
      return "fp8";
    case Packing::compressed_tensors:
      return "compressed-tensors";
  }
  return "?";
}

namespace {

// AWQ's GEMM packing puts output column 8w + [0, 2, 4, 6, 1, 3, 5, 7][k] in nibble k of word w:
// the nibble of column 8w + j is kAwqNibble[j].
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

uint32_t word_at(const TensorInfo& t, int64_t index) {
  uint32_t w;
  std::memcpy(&w, t.data + 4 * index, 4);
  return w;
}

uint16_t half_at(const TensorInfo& t, int64_t index) {
  uint16_t h;
  std::memcpy(&h, t.data + 2 * index, 2);
  return h;
}

// The zero point of output row r in the file's group fg, as the reference code reads it.
int packed_zero(const Origin& o, int64_t r, int64_t fg) {
  const int64_t rows = o.shape[0];
  const uint32_t w = word_at(*o.zeros, fg * (rows / 8) + r / 8);
  const int nibble = o.packing == Packing::awq ? kAwqNibble[r % 8] : static_cast<int>(r % 8);
  const int z = static_cast<int>((w >> (4 * nibble)) & 0xf);
  return o.packing == Packing::gptq ? ((z + 1) & 0xf) : z;  // GPTQ v1 stores zero - 1
}

// The integer weight of output row r, input column c.
uint8_t packed_weight(const Origin& o, int64_t r, int64_t c) {
  const int64_t rows = o.shape[0];
  if (o.packing == Packing::awq) {
    const uint32_t w = word_at(*o.qweight, c * (rows / 8) + r / 8);
    return static_cast<uint8_t>((w >> (4 * kAwqNibble[r % 8])) & 0xf);
  }
  const uint32_t w = word_at(*o.qweight, (c / 8) * rows + r);
  return static_cast<uint8_t>((w >> (4 * (c % 8))) & 0xf);
}

}  // namespace

QuantMatrix convert_packed_int4(const Origin& o, int group_size, bool zero_point, int64_t r0, int64_t r1) {
  const int64_t rows = o.shape.at(0), cols = o.shape.at(1);
  if (r1 < 0) r1 = rows;
  if (r0 < 0 || r0 > r1 || r1 > rows)
    fail("tensor {}: rows [{}, {}) are not rows of [{}, {}]", o.name, r0, r1, rows, cols);
  if (o.kind != OriginKind::quantized || o.packing == Packing::canonical || !o.qweight || !o.zeros ||
      !o.scales)
    fail("tensor {}: not a GPTQ or AWQ linear", o.name);
  if (group_size <= 0 || group_size % 2 != 0 || o.file_group % group_size != 0 || cols % o.file_group != 0)
    fail("tensor {}: int4 group size {} does not divide the file's group size {} of {} columns", o.name,
         group_size, o.file_group, cols);
  QuantMatrix m = empty_int4(r1 - r0, cols, group_size, zero_point);
  const int64_t groups = cols / group_size;
  parallel_rows(r1 - r0, 0, [&](int64_t b0, int64_t b1) {
    for (int64_t i = b0; i < b1; ++i) {
      const int64_t r = r0 + i;  // the file's row; i is the block's
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t fg = g * group_size / o.file_group;
        m.scales[i * groups + g] = half_at(*o.scales, fg * rows + r);
        if (zero_point) m.zeros[i * groups + g] = static_cast<uint8_t>(packed_zero(o, r, fg));
      }
      for (int64_t c = 0; c < cols; c += 2)
        m.qweight[(i * cols + c) / 2] = quant::pack_int4(packed_weight(o, r, c), packed_weight(o, r, c + 1));
    }
  });
  return m;
}

// ---------------------------------------------------------------------------- WeightSource

namespace {

// "model.layers.0.self_attn.q_proj.weight" -> "model.layers.0.self_attn.q_proj"
std::string module_of(const std::string& weight_name) {
  const std::string suffix = ".weight";
  return weight_name.substr(0, weight_name.size() - suffix.size());
}

bool is_float(DType d) {
  return d == DType::f32 || d == DType::f16 || d == DType::bf16;
}

[[noreturn]] void bad_metadata(const Checkpoint& file, const char* key, const std::string& value,
                               const std::string& want) {
  fail("weights file {}: __metadata__ {} is '{}', expected {}", file.path(), key, printable(value), want);
}

}  // namespace

WeightSource::WeightSource(const ModelConfig& config, const std::string& path, uint64_t seed,
                           const Adapter* adapter)
    : config_(config), path_(path), seed_(seed), adapter_(adapter) {
  if (adapter_) {  // loaded for another config? (load_adapter validates against the one it is given)
    bool fits = static_cast<int64_t>(adapter_->layers.size()) == config_.num_hidden_layers;
    for (int64_t l = 0; fits && l < config_.num_hidden_layers; ++l) {
      for (Linear lin : adapter_->targets) {
        const LoraPair* p = adapter_->find(l, lin);
        const MatShape s = linear_shape(config_, lin);
        fits = fits && p && static_cast<int64_t>(p->a.size()) == adapter_->rank * s.cols &&
               static_cast<int64_t>(p->b.size()) == s.rows * adapter_->rank;
      }
    }
    if (!fits) fail("adapter {} was not loaded for the shapes of model {}", adapter_->source, config_.name);
  }
  if (path.empty()) return;
  checkpoint_ = std::make_unique<Checkpoint>(path);
  const FileQuant q = decodebench_file_quant(*checkpoint_);
  decodebench_format_ = q.decodebench;
  if (decodebench_format_) {
    // A decodebench file holds one scheme; re-quantizing quantized weights would compound error.
    if (!q.scheme) fail("weights file {}: __metadata__ has format=decodebench but no quant", path);
    if (*q.scheme != config_.quant.scheme)
      fail(
          "weights file {} holds {} weights but the run asks for {} (pass --quant {} or an fp16/bf16 "
          "checkpoint)",
          path, to_string(*q.scheme), to_string(config_.quant.scheme), to_string(*q.scheme));
    if (*q.scheme == Scheme::int4) {
      if (!q.group_size || *q.group_size != config_.quant.group_size)
        fail("weights file {} has int4 group size {} but the run asks for {}", path,
             q.group_size ? std::to_string(*q.group_size) : "(none)", config_.quant.group_size);
      if (!q.zero_point || *q.zero_point != config_.quant.zero_point)
        fail("weights file {}: zero_point {} does not match the config's {}", path,
             q.zero_point ? (*q.zero_point ? "true" : "false") : "(none)", config_.quant.zero_point);
    }
    if (q.lm_head && *q.lm_head != config_.quant.lm_head)
      fail("weights file {} holds a {} lm_head but the run asks for {} (pass --lm-head {})", path,
           to_string(*q.lm_head), to_string(config_.quant.lm_head), to_string(*q.lm_head));
  }
  const std::string& int4 = config_.hf_int4.format;
  const std::string& fp8 = config_.hf_fp8.format;
  if (!decodebench_format_ && !fp8.empty()) {
    packing_ = fp8 == "fp8" ? Packing::fp8 : Packing::compressed_tensors;
    if (config_.quant.scheme != Scheme::fp8)
      fail(
          "weights {} hold {} FP8 weights but the run asks for {} (they are read as they are, not "
          "re-quantized)",
          path, fp8, to_string(config_.quant.scheme));
  } else if (!decodebench_format_ && !int4.empty()) {
    packing_ = int4 == "awq" ? Packing::awq : int4 == "gptq_v2" ? Packing::gptq_v2 : Packing::gptq;
    if (config_.quant.scheme != Scheme::int4)
      fail("weights {} hold {} int4 weights but the run asks for {} (they are converted, not re-quantized)",
           path, int4, to_string(config_.quant.scheme));
  } else if (!decodebench_format_) {
    const std::string q = module_of(linear_name(0, Linear::q));
    const TensorInfo* w = checkpoint_->find(q + ".weight");
    if (!w && checkpoint_->find(q + ".qweight"))
      fail(
          "weights {} hold packed int4 tensors ({}.qweight) but config {} has no GPTQ or AWQ "
          "quantization_config (pass the checkpoint's own config.json as --model)",
          path, q, config_.name);
    if (w && w->dtype == DType::f8_e4m3)
      fail(
          "weights {} hold FP8 tensors ({}.weight is F8_E4M3) but config {} has no FP8 quantization_config "
          "(pass the checkpoint's own config.json as --model)",
          path, q, config_.name);
  }
  // Fail at load time: resolve every tensor once now, and note the ones the model reads.
  std::set<std::string> used;
  const auto use = [&used](const Origin& o) {
    for (const TensorInfo* t : {o.dense, o.qweight, o.scales, o.zeros, o.g_idx})
      if (t) used.insert(t->name);
  };
  use(embedding());
  use(lm_head());
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    for (Linear lin : kLinears) use(linear(l, lin));
    use(vector(layer_norm_name(l, false), config_.hidden_size));
    use(vector(layer_norm_name(l, true), config_.hidden_size));
    if (config_.arch == Arch::qwen3) {
      use(vector(qk_norm_name(l, false), config_.head_dim));
      use(vector(qk_norm_name(l, true), config_.head_dim));
    }
    if (config_.arch == Arch::qwen2)
      for (Linear lin : kBiasedLinears) use(bias(l, lin));
  }
  use(vector(kFinalNormName, config_.hidden_size));
  // A static-activation FP8 checkpoint's input scales: read past, as the activations stay fp16.
  if (packing_ == Packing::fp8 || packing_ == Packing::compressed_tensors)
    for (int64_t l = 0; l < config_.num_hidden_layers; ++l)
      for (Linear lin : kLinears) used.insert(module_of(linear_name(l, lin)) + ".input_scale");
  // Tensors the model does not read (an older checkpoint's rotary_emb.inv_freq, say) are
  // accepted, as transformers accepts them, but said: they may be a sign of the wrong config.
  std::vector<std::string> unused;
  for (const std::string& name : checkpoint_->names())
    if (!used.count(name)) unused.push_back(name);
  if (!unused.empty())
    warn("weights {}: {} tensor{} that model {} does not use, ignored (the first: {})", path, unused.size(),
         unused.size() == 1 ? "" : "s", config_.name, printable(unused.front()));
}

FileQuant decodebench_file_quant(const Checkpoint& file) {
  FileQuant q;
  const auto& meta = file.metadata();
  const auto find = [&](const char* key) -> const std::string* {
    const auto it = meta.find(key);
    return it == meta.end() ? nullptr : &it->second;
  };
  q.file = file.path();
  const std::string* format = find("format");
  if (!format || *format != "decodebench") return q;
  q.decodebench = true;
  const auto scheme = [&](const char* key) -> std::optional<Scheme> {
    const std::string* v = find(key);
    if (!v) return std::nullopt;
    for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8})
      if (*v == to_string(s)) return s;
    bad_metadata(file, key, *v, "fp16, int8, int4 or fp8");
  };
  q.scheme = scheme("quant");
  q.lm_head = scheme("lm_head");
  if (const std::string* v = find("group_size")) {
    int g = 0;
    const auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), g);
    if (ec != std::errc() || ptr != v->data() + v->size() || g <= 0 || g > kMaxGroupSize)
      bad_metadata(file, "group_size", *v, fmt::format("an integer in [1, {}]", kMaxGroupSize));
    q.group_size = g;
  }
  if (const std::string* v = find("zero_point")) {
    if (*v != "true" && *v != "false") bad_metadata(file, "zero_point", *v, "true or false");
    q.zero_point = *v == "true";
  }
  return q;
}

ModelConfig config_for_weights(ModelConfig c, const QuantOverrides& asked, const std::string& weights) {
  if (weights.empty() || c.source != "hf") return apply_overrides(std::move(c), asked);
  return apply_overrides(std::move(c), asked, decodebench_file_quant(Checkpoint(weights)));
}

WeightSource::~WeightSource() = default;

std::string WeightSource::describe() const {
  if (synthetic()) return fmt::format("synthetic (seed {})", seed_);
  if (packing_ != Packing::canonical) return fmt::format("{} ({} checkpoint)", path_, to_string(packing_));
  return fmt::format("{} ({})", path_, decodebench_format_ ? "decodebench" : "checkpoint");
}

std::string WeightSource::format() const {
  if (synthetic()) return "synthetic";
  if (decodebench_format_) return "decodebench";
  return packing_ == Packing::canonical ? "hf" : to_string(packing_);
}

namespace {

// What every matrix's Origin starts with: its name, the synthetic generator's id and
// distribution for it, and its shape.
Origin matrix_head(const std::string& name, int64_t rows, int64_t cols) {
  Origin o;
  o.name = name;
  o.tensor_id = synth::tensor_id(name);
  o.dist = synth::Dist::matrix;
  o.shape = {rows, cols};
  return o;
}

// ... and a checkpoint's quantized matrix's, in its file's packing.
Origin quantized_head(const std::string& name, int64_t rows, int64_t cols, Packing packing) {
  Origin o = matrix_head(name, rows, cols);
  o.kind = OriginKind::quantized;
  o.packing = packing;
  return o;
}

}  // namespace

Origin WeightSource::packed_origin(const std::string& name, int64_t rows, int64_t cols) const {
  Origin o = quantized_head(name, rows, cols, packing_);
  const std::string m = module_of(name);
  const int64_t fg = config_.hf_int4.group_size == -1 ? cols : config_.hf_int4.group_size;
  // The shapes come from the (bounded) config: a file's tensor must match them exactly, so a
  // hostile shape is refused before anything is read or allocated.
  if (rows % 8 != 0 || cols % 8 != 0 || fg <= 0 || cols % fg != 0 || fg % config_.quant.group_size != 0)
    fail("weights {}: {} [{} x {}] cannot hold {} int4 groups of {} (8 values per 32-bit word)", path_, m,
         rows, cols, to_string(packing_), fg);
  o.file_group = fg;
  if (packing_ == Packing::awq)
    o.qweight = &checkpoint_->get(m + ".qweight", DType::i32, {cols, rows / 8});
  else
    o.qweight = &checkpoint_->get(m + ".qweight", DType::i32, {cols / 8, rows});
  o.zeros = &checkpoint_->get(m + ".qzeros", DType::i32, {cols / fg, rows / 8});
  o.scales = &checkpoint_->get(m + ".scales", DType::f16, {cols / fg, rows});
  if (packing_ != Packing::awq && checkpoint_->find(m + ".g_idx")) {
    o.g_idx = &checkpoint_->get(m + ".g_idx", DType::i32, {cols});
    for (int64_t i = 0; i < cols; ++i) {
      int32_t v;
      std::memcpy(&v, o.g_idx->data + 4 * i, 4);
      if (v != i / fg)
        fail(
            "weights {}: tensor {} maps input {} to group {}, not {}: act-order (desc_act) GPTQ is not "
            "supported",
            path_, o.g_idx->name, i, v, i / fg);
    }
  }
  if (!config_.quant.zero_point)  // symmetric GPTQ: the canonical form has no zeros, and means 8
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < cols / fg; ++g)
        if (const int z = packed_zero(o, r, g); z != quant::kInt4SymmetricZero)
          fail(
              "weights {}: tensor {} holds the zero point {} (row {}, group {}) but the config says sym "
              "true, "
              "where every zero is 8",
              path_, o.zeros->name, z, r, g);
  return o;
}

Origin WeightSource::matrix_origin(const std::string& name, int64_t rows, int64_t cols, Scheme scheme) const {
  Origin o = matrix_head(name, rows, cols);
  if (synthetic()) return o;
  if (decodebench_format_ && scheme != Scheme::fp16) {
    const std::string m = module_of(name);
    o.kind = OriginKind::quantized;
    if (scheme == Scheme::int8) {
      o.qweight = &checkpoint_->get(m + ".qweight", DType::i8, {rows, cols});
      o.scales = &checkpoint_->get(m + ".scales", DType::f16, {rows});
    } else if (scheme == Scheme::fp8) {
      o.qweight = &checkpoint_->get(m + ".qweight", DType::f8_e4m3, {rows, cols});
      o.scales = &checkpoint_->get(m + ".scales", DType::f32, {rows});
      check_fp8_scales(*o.scales, path_);
    } else {
      const int g = config_.quant.group_size;
      if (cols % g != 0)
        fail("weights file {}: group size {} does not divide {} of {}", path_, g, cols, name);
      o.qweight = &checkpoint_->get(m + ".qweight", DType::u8, {rows, cols / 2});
      o.scales = &checkpoint_->get(m + ".scales", DType::f16, {rows, cols / g});
      if (config_.quant.zero_point) {
        o.zeros = &checkpoint_->get(m + ".zeros", DType::u8, {rows, cols / g});
        // Both backends take the zero points from here (the CUDA one copies them as they are),
        // and the kernels build their dequantization constants from 4-bit values.
        const uint8_t* z = o.zeros->data;
        const uint8_t* bad = std::find_if(z, z + o.zeros->nbytes, [](uint8_t v) { return v > 15; });
        if (bad != z + o.zeros->nbytes)
          fail("weights file {}: tensor {} holds the zero point {} at element {}; int4 zero points are 0..15",
               path_, o.zeros->name, *bad, bad - z);
      }
    }
    return o;
  }
  const TensorInfo& t = checkpoint_->get(name);
  if (!is_float(t.dtype))
    fail("weights file {}: tensor {} has dtype {}, expected F32, F16 or BF16{}", path_, name,
         to_string(t.dtype),
         t.dtype == DType::f8_e4m3
             ? " (FP8 is read in the block linears of a checkpoint whose config.json has an "
               "FP8 quantization_config)"
             : "");
  if (t.shape != std::vector<int64_t>{rows, cols})
    fail("weights file {}: tensor {} has shape {}, expected {}", path_, name, shape_string(t.shape),
         shape_string({rows, cols}));
  o.kind = OriginKind::dense;
  o.dense = &t;
  return o;
}

Origin WeightSource::linear(int64_t layer, Linear l) const {
  const MatShape s = linear_shape(config_, l);
  const std::string name = linear_name(layer, l);
  Origin o = packing_ == Packing::fp8 || packing_ == Packing::compressed_tensors
                 ? fp8_origin(name, s.rows, s.cols)
             : packing_ != Packing::canonical ? packed_origin(name, s.rows, s.cols)
                                              : matrix_origin(name, s.rows, s.cols, config_.quant.scheme);
  o.layer = layer;
  o.linear = l;
  return o;
}

Origin WeightSource::embedding() const {
  return matrix_origin(kEmbedName, config_.vocab_size, config_.hidden_size, Scheme::fp16);
}

Origin WeightSource::lm_head() const {
  if (config_.tie_word_embeddings) {
    Origin o = matrix_origin(kEmbedName, config_.vocab_size, config_.hidden_size, Scheme::fp16);
    if (config_.quant.lm_head != Scheme::fp16 && decodebench_format_)
      return matrix_origin(kLmHeadName, config_.vocab_size, config_.hidden_size, config_.quant.lm_head);
    return o;
  }
  return matrix_origin(kLmHeadName, config_.vocab_size, config_.hidden_size, config_.quant.lm_head);
}

Origin WeightSource::vector(const std::string& name, int64_t size) const {
  Origin o;
  o.name = name;
  o.tensor_id = synth::tensor_id(name);
  o.dist = synth::Dist::norm;
  o.shape = {size};
  if (synthetic()) return o;
  const TensorInfo& t = checkpoint_->get(name);
  if (!is_float(t.dtype))
    fail("weights file {}: tensor {} has dtype {}, expected F32, F16 or BF16", path_, name,
         to_string(t.dtype));
  if (t.shape != std::vector<int64_t>{size})
    fail("weights file {}: tensor {} has shape {}, expected {}", path_, name, shape_string(t.shape),
         shape_string({size}));
  o.kind = OriginKind::dense;
  o.dense = &t;
  return o;
}

Origin WeightSource::bias(int64_t layer, Linear l) const {
  if (l != Linear::q && l != Linear::k && l != Linear::v)
    fail("model {}: only q_proj, k_proj and v_proj have a bias, not {}", config_.name, hf_module_name(l));
  Origin o = vector(bias_name(layer, l), linear_shape(config_, l).rows);
  o.layer = layer;
  o.linear = l;
  return o;
}

namespace {

// Element i of an F32, BF16 or F16 tensor as a float: F32 as it is, BF16 and F16 widened
// (exactly).
float float_at(const TensorInfo& t, int64_t i) {
  switch (t.dtype) {
    case DType::f32: {
      float v;
      std::memcpy(&v, t.data + 4 * i, 4);
      return v;
    }
    case DType::bf16:
      return bf16_to_f32(half_at(t, i));
    case DType::f16:
      return f16_to_f32(half_at(t, i));
    default:
      fail("tensor {}: dtype {} is not a float type", t.name, to_string(t.dtype));
  }
}

}  // namespace

Origin WeightSource::fp8_origin(const std::string& name, int64_t rows, int64_t cols) const {
  Origin o = quantized_head(name, rows, cols, packing_);
  const std::string m = module_of(name);
  // The shapes come from the (bounded) config: the codes must be exactly [rows, cols], so a
  // hostile shape is refused before anything is read or allocated.
  o.qweight = &checkpoint_->get(name, DType::f8_e4m3, {rows, cols});
  // transformers' name is weight_scale_inv, AutoFP8's (and vLLM's for per-tensor scales)
  // weight_scale; both multiply the codes. compressed-tensors writes weight_scale.
  const TensorInfo* inv = packing_ == Packing::fp8 ? checkpoint_->find(m + ".weight_scale_inv") : nullptr;
  const TensorInfo* plain = checkpoint_->find(m + ".weight_scale");
  if (inv && plain)
    fail(
        "weights {}: {} has both weight_scale_inv and weight_scale (which one scales the codes is ambiguous)",
        path_, m);
  const TensorInfo& t =
      inv     ? *inv
      : plain ? *plain
              : checkpoint_->get(m + (packing_ == Packing::fp8 ? ".weight_scale_inv" : ".weight_scale"));
  if (!is_float(t.dtype))
    fail("weights file {}: tensor {} has dtype {}, expected F32, BF16 or F16 (an FP8 scale)", path_, t.name,
         to_string(t.dtype));
  const bool tensor = t.shape.empty() || t.shape == std::vector<int64_t>{1};
  const bool channel = t.shape == std::vector<int64_t>{rows} || t.shape == std::vector<int64_t>{rows, 1};
  if (!tensor && !channel)
    fail(
        "weights file {}: tensor {} has shape {}, expected [] or [1] (one scale for the tensor) or [{}] or "
        "[{}, 1] (one a row): block-wise and grouped FP8 scales are not supported",
        path_, t.name, shape_string(t.shape), rows, rows);
  const std::string& strategy = config_.hf_fp8.strategy;
  if ((strategy == "channel" && !channel) || (strategy == "tensor" && !tensor))
    fail("weights file {}: tensor {} has shape {}, but quantization_config says strategy {}", path_, t.name,
         shape_string(t.shape), strategy);
  o.tensor_scale = !channel;
  const int64_t n = o.tensor_scale ? 1 : rows;
  for (int64_t i = 0; i < n; ++i)
    if (const float v = float_at(t, i); !(v > 0.f && v <= std::numeric_limits<float>::max()))
      fail(
          "weights file {}: tensor {} holds the scale {} at index {}; an FP8 scale must be finite and "
          "positive",
          path_, t.name, v, i);
  o.scales = &t;
  return o;
}

QuantMatrix WeightSource::checkpoint_rows(const Origin& o, int64_t r0, int64_t r1) const {
  if (o.kind != OriginKind::quantized || o.packing == Packing::canonical)
    fail("tensor {}: not a GPTQ, AWQ or FP8 checkpoint's linear", o.name);
  if (o.packing != Packing::fp8 && o.packing != Packing::compressed_tensors)
    return convert_packed_int4(o, config_.quant.group_size, config_.quant.zero_point, r0, r1);
  const int64_t rows = o.shape.at(0), cols = o.shape.at(1);
  if (r1 < 0) r1 = rows;
  if (r0 < 0 || r0 > r1 || r1 > rows)
    fail("tensor {}: rows [{}, {}) are not rows of [{}, {}]", o.name, r0, r1, rows, cols);
  QuantMatrix m;
  m.scheme = Scheme::fp8;
  m.rows = r1 - r0;
  m.cols = cols;
  // The codes as they are: safetensors' F8_E4M3 is the E4M3 of quant.h, bit for bit. Its two
  // NaN codes (0x7f, 0xff) would make every output they touch NaN.
  const uint8_t* codes = o.qweight->data + r0 * cols;
  m.qweight.assign(codes, codes + m.rows * cols);
  const auto nan =
      std::find_if(m.qweight.begin(), m.qweight.end(), [](uint8_t q) { return (q & 0x7f) == 0x7f; });
  if (nan != m.qweight.end()) {
    const int64_t at = nan - m.qweight.begin();
    fail(
        "weights file {}: tensor {} holds the E4M3 code 0x{:02x} (NaN) at [{}, {}]; a weight must be a "
        "number",
        path_, o.qweight->name, *nan, r0 + at / cols, at % cols);
  }
  m.scales.resize(static_cast<size_t>(m.rows) * 2);
  for (int64_t i = 0; i < m.rows; ++i) m.set_row_scale(i, float_at(*o.scales, o.tensor_scale ? 0 : r0 + i));
  return m;
}

QuantMatrix WeightSource::host_matrix(const Origin& o, Scheme scheme) const {
  return host_rows(o, scheme, 0, o.shape.at(0));
}

QuantMatrix WeightSource::host_rows(const Origin& o, Scheme scheme, int64_t r0, int64_t r1) const {
  const int64_t rows = o.shape.at(0), cols = o.shape.at(1);
  if (r0 < 0 || r0 > r1 || r1 > rows)
    fail("tensor {}: rows [{}, {}) are not rows of [{}, {}]", o.name, r0, r1, rows, cols);
  const int64_t n = r1 - r0;
  const QuantConfig& q = config_.quant;
  const bool merge = adapter_ && adapter_->mode == AdapterMode::merged && o.layer >= 0 &&
                     adapter_->find(o.layer, o.linear) != nullptr;
  // A merged adapter on stored quantized weights: they are all this run has of W, so the
  // merge goes into their dequantized values, quantized again (a second rounding, as any tool
  // that merges into a quantized model does).
  const auto merged = [&](const QuantMatrix& m) {
    std::vector<float> w(static_cast<size_t>(n * cols));
    for (int64_t r = 0; r < n; ++r) m.row(r, w.data() + r * cols);
    merge_adapter(*adapter_, o.layer, o.linear, w.data(), rows, cols, r0, r1);
    return quantize_matrix(w.data(), n, cols, scheme, q.group_size, q.zero_point);
  };
  if (o.kind == OriginKind::quantized && o.packing != Packing::canonical) {
    const Scheme stored =
        o.packing == Packing::fp8 || o.packing == Packing::compressed_tensors ? Scheme::fp8 : Scheme::int4;
    if (scheme != stored)
      fail("tensor {}: a {} {} linear cannot be read as {}", o.name, to_string(o.packing), to_string(stored),
           to_string(scheme));
    QuantMatrix m = checkpoint_rows(o, r0, r1);
    return merge ? merged(m) : m;
  }
  if (o.kind == OriginKind::quantized) {
    // The file's tensors are row-major with whole rows: a block of rows is a byte range.
    const auto slice = [&](const TensorInfo& t, auto& out) {
      const uint64_t row_bytes = t.nbytes / static_cast<uint64_t>(rows);
      out.resize(static_cast<size_t>(row_bytes * static_cast<uint64_t>(n)) / sizeof(out[0]));
      std::memcpy(out.data(), t.data + row_bytes * static_cast<uint64_t>(r0),
                  row_bytes * static_cast<uint64_t>(n));
    };
    QuantMatrix m;
    m.scheme = scheme;
    m.rows = n;
    m.cols = cols;
    slice(*o.qweight, m.qweight);
    slice(*o.scales, m.scales);
    if (scheme == Scheme::int4) {
      m.group_size = q.group_size;
      m.zero_point = q.zero_point;
      if (o.zeros) slice(*o.zeros, m.zeros);
    }
    return merge ? merged(m) : m;
  }
  // Every weight is rounded to fp16 before it is quantized: the synthetic model and a
  // checkpoint written by gen-weights in fp16 quantize to the same bits.
  std::vector<float> w(static_cast<size_t>(n * cols));
  parallel_rows(n, 0, [&](int64_t b0, int64_t b1) {
    for (int64_t i = b0; i < b1; ++i) {
      const int64_t r = r0 + i;
      float* out = w.data() + i * cols;
      if (o.kind == OriginKind::synthetic) {
        for (int64_t c = 0; c < cols; ++c) out[c] = synthetic_value(seed_, o, r * cols + c);
      } else {
        dense_row(*o.dense, r, cols, out);
        for (int64_t c = 0; c < cols; ++c) out[c] = f16_to_f32(f32_to_f16(out[c]));
      }
    }
  });
  if (merge) merge_adapter(*adapter_, o.layer, o.linear, w.data(), rows, cols, r0, r1);
  return quantize_matrix(w.data(), n, cols, scheme, q.group_size, q.zero_point);
}

std::vector<float> WeightSource::host_vector(const Origin& o) const {
  const int64_t n = o.shape.at(0);
  std::vector<float> v(static_cast<size_t>(n));
  if (o.kind == OriginKind::synthetic) {
    for (int64_t i = 0; i < n; ++i) v[i] = synthetic_value(seed_, o, i);
  } else {
    dense_row(*o.dense, 0, n, v.data());
    for (float& x : v) x = f16_to_f32(f32_to_f16(x));  // stored as fp16 on every backend
  }
  return v;
}

void WeightSource::host_embedding_row(const Origin& o, int64_t token, float* out) const {
  const int64_t cols = o.shape.at(1);
  if (o.kind == OriginKind::synthetic) {
    for (int64_t c = 0; c < cols; ++c) out[c] = synthetic_value(seed_, o, token * cols + c);
    return;
  }
  dense_row(*o.dense, token, cols, out);
  for (int64_t c = 0; c < cols; ++c) out[c] = f16_to_f32(f32_to_f16(out[c]));
}

}  // namespace db
