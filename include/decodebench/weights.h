// Where a model's tensors come from, and their canonical quantized form on the host.
//
// A WeightSource is opened once per run. It validates every tensor the model needs (name,
// dtype, shape) before anything is computed, then describes each one as an Origin:
//   synthetic  - generated from (seed, tensor id) by include/decodebench/synth.h
//   dense      - an f32/f16/bf16 tensor in a checkpoint, quantized on load
//   quantized  - decodebench's own .qweight/.scales/.zeros tensors, used as they are, or a
//                GPTQ/AWQ checkpoint's .qweight/.qzeros/.scales (packing), converted on load to
//                the canonical int4 layout with the same integers, zeros and scales, or an FP8
//                checkpoint's .weight codes and their scales, a float a row on load
// Backends turn origins into weights where they need them: the CPU reference with the
// host functions below, the CUDA backend with device kernels that run the same arithmetic.
// A source may carry a LoRA adapter (adapter.h): host_matrix merges it into the linears it
// targets when its mode is merged; in external mode it is carried for the backend to apply.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "decodebench/config.h"
#include "decodebench/model.h"
#include "decodebench/safetensors.h"
#include "decodebench/synth.h"

namespace db {

struct Adapter;

// A linear weight [rows, cols] in the canonical layout of docs/design.md.
struct QuantMatrix {
  Scheme scheme = Scheme::fp16;
  int64_t rows = 0, cols = 0;
  int group_size = 0;       // int4 only
  bool zero_point = false;  // int4 only
  // fp16: [rows, cols] uint16 bits (LE); int8: [rows, cols]; int4: [rows, cols/2]; fp8: [rows,
  // cols] E4M3 codes
  std::vector<uint8_t> qweight;
  // int8: [rows] fp16 bits; int4: [rows, cols/group] fp16 bits; fp8: [rows] floats, each as two
  // words (LE), the bytes a file's F32 tensor and the device's float array hold
  std::vector<uint16_t> scales;
  std::vector<uint8_t> zeros;  // int4 with zero point: [rows, cols/group]

  float at(int64_t r, int64_t c) const;   // dequantized element
  void row(int64_t r, float* out) const;  // dequantized row of `cols` floats
  float row_scale(int64_t r) const;       // fp8: row r's scale
  void set_row_scale(int64_t r, float s);
};

// Quantizes a float matrix with the canonical arithmetic (include/decodebench/quant.h),
// rows spread over `threads` (0: every hardware thread; the bits do not depend on it).
// A group size that does not divide `cols` is a db::Error.
QuantMatrix quantize_matrix(const float* w, int64_t rows, int64_t cols, Scheme scheme, int group_size,
                            bool zero_point, int threads = 0);

// Reads one row of a dense tensor (f32/f16/bf16) as floats.
void dense_row(const TensorInfo& t, int64_t row, int64_t cols, float* out);

enum class OriginKind { synthetic, dense, quantized };

// How a quantized origin's tensors are packed (docs/weights.md#gptq-and-awq-checkpoints,
// docs/weights.md#fp8-checkpoints); anything but canonical is converted on load.
enum class Packing {
  canonical,  // decodebench's own layout
  gptq,       // qweight I32 [in/8, out], qzeros I32 [in/g, out/8] holding zero - 1, scales F16 [in/g, out]
  gptq_v2,    // as gptq, the zeros stored as they are
  awq,        // qweight I32 [in, out/8], qzeros I32 [in/g, out/8], both in AWQ's nibble order
  fp8,        // weight F8_E4M3 [out, in]; weight_scale_inv (or weight_scale) F32/BF16/F16: [] or [1]
              // for the tensor, [out] or [out, 1] a row
  compressed_tensors,  // as fp8, the scale named weight_scale
};
const char* to_string(Packing p);  // "decodebench", "gptq", ..., "fp8", "compressed-tensors"

struct Origin {
  OriginKind kind = OriginKind::synthetic;
  std::string name;        // HF tensor name
  uint64_t tensor_id = 0;  // synth::tensor_id(name)
  synth::Dist dist = synth::Dist::matrix;
  std::vector<int64_t> shape;
  const TensorInfo* dense = nullptr;                                         // kind == dense
  const TensorInfo *qweight = nullptr, *scales = nullptr, *zeros = nullptr;  // kind == quantized
  Packing packing = Packing::canonical;  // kind == quantized; gptq/awq: zeros is qzeros
  const TensorInfo* g_idx = nullptr;     // gptq, where the file has one (checked: i / file_group)
  int64_t file_group = 0;                // gptq, awq: the file's group size (cols for -1)
  bool tensor_scale = false;             // fp8, compressed_tensors: one scale for every row
  int64_t layer = -1;                    // a transformer-block linear: its layer (else -1) ...
  Linear linear = Linear::q;             // ... and which one (LoRA targets)
};

class WeightSource {
 public:
  // `path` empty: synthetic weights from `seed`. Otherwise a safetensors file, an HF
  // directory or index, or a decodebench file. Throws db::Error naming the first tensor
  // that is missing or has the wrong dtype or shape. `adapter` (loaded for this config by
  // load_adapter) must outlive the source.
  WeightSource(const ModelConfig& config, const std::string& path, uint64_t seed,
               const Adapter* adapter = nullptr);
  ~WeightSource();
  WeightSource(const WeightSource&) = delete;
  WeightSource& operator=(const WeightSource&) = delete;

  const ModelConfig& config() const { return config_; }
  bool synthetic() const { return !checkpoint_; }
  uint64_t seed() const { return seed_; }
  const std::string& path() const { return path_; }
  std::string describe() const;  // "synthetic (seed 0)" or the path with its format
  // Where the values come from: "synthetic", "hf" (an f32/f16/bf16 checkpoint), "decodebench",
  // or the quantized checkpoint's packing: "gptq", "gptq_v2", "awq", "fp8", "compressed-tensors".
  std::string format() const;
  const Adapter* adapter() const { return adapter_; }  // nullptr: none

  Origin linear(int64_t layer, Linear l) const;  // in config.quant.scheme
  Origin lm_head() const;                        // in config.quant.lm_head (tied: the embedding)
  Origin embedding() const;                      // fp16 [vocab, hidden]
  Origin vector(const std::string& name, int64_t size) const;  // norm weights
  // qwen2: the bias of q_proj, k_proj or v_proj in `layer` (bias_name), an fp16 vector of
  // that linear's rows; synthetic ones draw as norm weights do.
  Origin bias(int64_t layer, Linear l) const;

  // Host materialization (the CPU reference, tests, file writers). With a merged adapter,
  // a targeted linear is W + scale * B A (adapter.h merge_adapter) before it is quantized;
  // a linear that a decodebench file holds quantized is dequantized, merged and quantized
  // again, its scales and zeros recomputed from the merged values.
  QuantMatrix host_matrix(const Origin& o, Scheme scheme) const;
  // Rows [r0, r1) of host_matrix(o, scheme), the same bits (every scheme quantizes a row on
  // its own), in the memory of those rows: the file writers stream a matrix a block at a time.
  QuantMatrix host_rows(const Origin& o, Scheme scheme, int64_t r0, int64_t r1) const;
  std::vector<float> host_vector(const Origin& o) const;                      // 1-D, as float
  void host_embedding_row(const Origin& o, int64_t token, float* out) const;  // fp16-rounded values
  // A published checkpoint's linear (an origin whose packing is not canonical), rows [r0, r1)
  // (r1 -1: to the last row), in the canonical layout of the run's scheme, never merged with an
  // adapter: GPTQ/AWQ as convert_packed_int4; FP8 codes as they are, each row's scale as a float
  // (the tensor's one scale for every row where it has one). A NaN code is a db::Error naming
  // the file, the tensor and the element.
  QuantMatrix checkpoint_rows(const Origin& o, int64_t r0 = 0, int64_t r1 = -1) const;

 private:
  Origin matrix_origin(const std::string& name, int64_t rows, int64_t cols, Scheme scheme) const;
  Origin packed_origin(const std::string& name, int64_t rows, int64_t cols) const;  // GPTQ/AWQ
  Origin fp8_origin(const std::string& name, int64_t rows, int64_t cols) const;     // FP8 checkpoints
  ModelConfig config_;
  std::string path_;
  uint64_t seed_ = 0;
  std::unique_ptr<Checkpoint> checkpoint_;
  bool decodebench_format_ = false;
  Packing packing_ = Packing::canonical;  // a GPTQ/AWQ/FP8 checkpoint's block linears
  const Adapter* adapter_ = nullptr;
};

// The quantization a decodebench file records in its __metadata__ (config.h FileQuant),
// each key parsed strictly: a value that is not what its key needs ("group_size": "abc") is a
// db::Error naming the file and the key.
FileQuant decodebench_file_quant(const Checkpoint& file);

// The config a run of `weights` (a weights file or directory; empty: synthetic) runs:
// apply_overrides, with the quantization the file records when the config is an HF one, which
// says none (`--model hf-dir --weights model-int4.safetensors` needs no --quant int4). A preset
// or decodebench config names its own scheme, and a file that disagrees is refused at load.
ModelConfig config_for_weights(ModelConfig c, const QuantOverrides& asked, const std::string& weights);

// A GPTQ or AWQ linear (an origin whose packing is not canonical) in the canonical int4
// layout: the file's integers, zeros (GPTQ v1's plus 1) and scales, bit for bit; each
// canonical group of `group_size` columns takes the scale and zero of the file's group that
// holds it. Without a zero point every zero must be 8 (checked when the origin is made).
// Rows [r0, r1) only (r1 -1: to the last row) make a matrix of those rows.
QuantMatrix convert_packed_int4(const Origin& o, int group_size, bool zero_point, int64_t r0 = 0,
                                int64_t r1 = -1);

// Synthetic values of a tensor element, rounded as stored: matrices and the embedding are
// fp16-rounded before quantization, norms too.
float synthetic_value(uint64_t seed, const Origin& o, int64_t index);

}  // namespace db
