// FP8 (E4M3) checkpoints as published (tests/data/fp8, written by
// scripts/make_fp8_checkpoints.py from known integers): transformers' and AutoFP8's
// quant_method fp8 and compressed-tensors float8, with per-channel and per-tensor scales. The
// loader's fp8 matrices hold those codes and scales bit for bit, every dequantized weight is
// the dequantized F16 checkpoint's, the CPU reference decodes both alike, and what is not
// supported is refused in one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "checkpoint_test_util.h"
#include "cli_helpers.h"
#include "decodebench/error.h"
#include "decodebench/half.h"
#include "decodebench/model.h"
#include "decodebench/quant.h"
#include "decodebench/result.h"
#include "decodebench/safetensors.h"
#include "decodebench/weights.h"
#include "reference_trace.h"
#include "temp_dir.h"

using namespace db;
using db_test::config_of;
using db_test::error_of;
using db_test::expect_one_line;
using db_test::rand_at;

namespace {

std::string data(const std::string& name) {
  return std::string(DB_TEST_DATA) + "/fp8/" + name;
}

struct Model {
  const char* dir;
  const char* format;  // WeightSource::format()
  uint64_t seed;
  bool tensor_scale;    // one scale a tensor, not one a row
  const char* dequant;  // the F16 checkpoint of the same weights
};
const Model kModels[] = {
    {"fp8-channel", "fp8", 3, false, "dequant"},
    {"ct-channel", "compressed-tensors", 3, false, "dequant"},
    {"fp8-tensor", "fp8", 4, true, "dequant-tensor"},
};

void PrintTo(const Model& m, std::ostream* os) {
  *os << m.dir;
}

// The code and scale the script draws for module `name` (no ".weight") at [r, c].
uint8_t code_at(uint64_t seed, const std::string& name, int64_t r, int64_t c, int64_t cols) {
  const uint64_t x = rand_at(seed, name + ".q", static_cast<uint64_t>(r * cols + c));
  return static_cast<uint8_t>((x % 0x68) | (((x >> 32) & 1) ? 0x80 : 0));
}
float scale_at(uint64_t seed, const std::string& name, int64_t i) {
  return std::ldexp(static_cast<float>(8 + (rand_at(seed, name + ".s", static_cast<uint64_t>(i)) & 7)), -14);
}

class Fp8Checkpoint : public ::testing::TestWithParam<Model> {};

// The file's quantization becomes the run's, and every block linear holds the known codes as
// they are and each row the known scale (the tensor's one scale in every row where it has one).
TEST_P(Fp8Checkpoint, LoadsTheKnownCodesAndScalesBitForBit) {
  const Model& p = GetParam();
  const ModelConfig c = config_of(data(p.dir));
  EXPECT_EQ(c.quant.scheme, Scheme::fp8);
  EXPECT_EQ(c.quant.lm_head, Scheme::fp16);
  const WeightSource ws(c, data(p.dir), 0);
  EXPECT_EQ(ws.format(), p.format);
  int64_t checked = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (Linear lin : kLinears) {
      const Origin o = ws.linear(l, lin);
      EXPECT_EQ(o.tensor_scale, p.tensor_scale) << o.name;
      const QuantMatrix m = ws.host_matrix(o, Scheme::fp8);
      const std::string name = o.name.substr(0, o.name.size() - 7);  // without ".weight"
      ASSERT_EQ(m.qweight.size(), static_cast<size_t>(m.rows * m.cols)) << name;
      ASSERT_EQ(m.scales.size(), static_cast<size_t>(2 * m.rows)) << name;
      for (int64_t r = 0; r < m.rows; ++r) {
        ASSERT_EQ(float_bits(m.row_scale(r)), float_bits(scale_at(p.seed, name, p.tensor_scale ? 0 : r)))
            << name << " row " << r;
        for (int64_t k = 0; k < m.cols; ++k) {
          ASSERT_EQ(m.qweight[r * m.cols + k], code_at(p.seed, name, r, k, m.cols))
              << name << " [" << r << ", " << k << "]";
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 2 * (128 * 128 * 2 + 64 * 128 * 2 + 256 * 128 * 3));
}

// code * scale is exact in fp16 for every weight the script writes (an integer of at most 8
// bits times 2^-23 or more, below 0.06), so each dequantized fp8 weight is the dequant
// checkpoint's F16 value itself, in every bit.
TEST_P(Fp8Checkpoint, EveryDequantizedWeightIsTheF16CheckpointsBitForBit) {
  const Model& p = GetParam();
  const ModelConfig c = config_of(data(p.dir));
  const ModelConfig rc = config_of(data(p.dequant));
  ASSERT_EQ(rc.quant.scheme, Scheme::fp16);
  const WeightSource ws(c, data(p.dir), 0), ref(rc, data(p.dequant), 0);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (Linear lin : kLinears) {
      const QuantMatrix a = ws.host_matrix(ws.linear(l, lin), Scheme::fp8);
      const QuantMatrix b = ref.host_matrix(ref.linear(l, lin), Scheme::fp16);
      std::vector<float> ra(static_cast<size_t>(a.cols)), rb(ra.size());
      for (int64_t r = 0; r < a.rows; ++r) {
        a.row(r, ra.data());
        b.row(r, rb.data());
        for (size_t k = 0; k < ra.size(); ++k)
          ASSERT_EQ(float_bits(ra[k]), float_bits(rb[k]))
              << linear_name(l, lin) << " [" << r << ", " << k << "]";
      }
    }
  }
}

// The reference: the dequantized F16 checkpoint run in fp16. Both runs multiply the same float
// weights (above) by the same activations in the same order, so the logits are equal, not
// merely close, and so are the greedy tokens.
TEST_P(Fp8Checkpoint, CpuDecodeEqualsTheDequantizedCheckpointInFp16) {
  const Model& p = GetParam();
  const WeightSource ws(config_of(data(p.dir)), data(p.dir), 0);
  const WeightSource ref(config_of(data(p.dequant)), data(p.dequant), 0);
  EXPECT_EQ(ref.format(), "hf");
  db_test::expect_same_cpu_decode(ws, ref, p.dir);
}

// Against transformers (scripts/make_goldens.py --fp8) on the dequantized weights: the fp8
// file, teacher-forced with transformers' sequence, gives its float32 logits within 1e-4 of the
// largest (only the summation order differs), and its argmax is transformers' next token
// wherever transformers' own top-2 gap is wider than that.
TEST_P(Fp8Checkpoint, CpuDecodeGivesTransformersTokensOnTheDequantizedWeights) {
  const Model& p = GetParam();
  const std::string golden = data(p.dequant) + "/golden.safetensors";
  if (!std::filesystem::exists(golden))
    GTEST_SKIP() << golden
                 << " does not exist yet: run `python3 scripts/make_goldens.py tests/data/fp8 --fp8` "
                 << "where torch and transformers are installed";
  const WeightSource ws(config_of(data(p.dir)), data(p.dir), 0);
  db_test::expect_transformers_logits(ws, golden, p.dir);
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8Checkpoint, ::testing::ValuesIn(kModels), db_test::dir_test_name<Model>);

// A copy of a checkpoint with its config.json edited and some tensors replaced: `tensor`
// returns the replacement (dtype, shape, bytes) of a tensor, or nothing to keep it; `extra`
// tensors are added.
struct NewTensor {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
using TensorEdit = std::function<std::optional<NewTensor>(const TensorInfo&)>;

template <class T>
std::vector<uint8_t> bytes_of(std::initializer_list<T> values) {
  std::vector<uint8_t> b(values.size() * sizeof(T));
  std::memcpy(b.data(), values.begin(), b.size());
  return b;
}

class Fp8Refusal : public db_test::TempDirTest {
 protected:
  std::string copy(const std::string& from, const std::function<void(nlohmann::json&)>& edit,
                   const TensorEdit& tensor = nullptr, const std::map<std::string, NewTensor>& extra = {}) {
    const std::string to = path("ckpt" + std::to_string(++copies_));
    std::filesystem::create_directories(to);
    std::ifstream in(data(from) + "/config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    if (edit) edit(j);
    std::ofstream(to + "/config.json") << j.dump(2);
    const SafetensorsFile file(data(from) + "/model.safetensors");
    std::vector<NewTensor> keep;  // alive until finish()
    keep.reserve(file.names().size() + extra.size());
    SafetensorsWriter w(to + "/model.safetensors");
    for (const std::string& n : file.names()) {
      const TensorInfo& t = file.get(n);
      std::optional<NewTensor> r = tensor ? tensor(t) : std::nullopt;
      if (!r) {
        w.add(n, t.dtype, t.shape, t.data);
        continue;
      }
      keep.push_back(std::move(*r));
      w.add(n, keep.back().dtype, keep.back().shape, keep.back().bytes.data());
    }
    for (const auto& [n, t] : extra) w.add(n, t.dtype, t.shape, t.bytes.data());
    w.finish();
    return to;
  }
  // The error of loading `dir` (config and weights).
  static std::string load_error(const std::string& dir) {
    return error_of([&] { WeightSource ws(config_of(dir), dir, 0); });
  }
  static std::string config_error(const std::string& dir) {
    return error_of([&] { config_of(dir); });
  }

 private:
  int copies_ = 0;
};

const char* kScaleInv = "model.layers.1.mlp.down_proj.weight_scale_inv";  // fp8-channel: F32 [128, 1]

TEST_F(Fp8Refusal, BlockWiseAndOtherUnsupportedFp8ConfigsAreRefusedNamingTheField) {
  expect_one_line(config_error(copy("fp8-channel",
                                    [](nlohmann::json& j) {
                                      j["quantization_config"]["weight_block_size"] = {128, 128};
                                    })),
                  "quantization_config.weight_block_size [128,128] (block-wise scales) is not supported");
  expect_one_line(config_error(copy("fp8-channel",
                                    [](nlohmann::json& j) {
                                      j["quantization_config"]["activation_scheme"] = "per-token";
                                    })),
                  "quantization_config.activation_scheme 'per-token' is not supported");
  for (const char* key : {"modules_to_not_convert", "ignored_layers"})
    expect_one_line(config_error(copy("fp8-tensor",
                                      [key](nlohmann::json& j) {
                                        j["quantization_config"][key] = {"lm_head", "mlp.down_proj"};
                                      })),
                    fmt::format("quantization_config.{} leaves 'mlp.down_proj' unquantized "
                                "(model.layers.0.mlp.down_proj among them)",
                                key));
  // The config's own file is named.
  const std::string d = copy("fp8-channel", [](nlohmann::json& j) {
    j["quantization_config"]["weight_block_size"] = {128, 128};
  });
  expect_one_line(config_error(d), d);
}

TEST_F(Fp8Refusal, CompressedTensorsConfigsOtherThanFloat8ChannelOrTensorAreRefused) {
  const auto weights = [](const char* key, nlohmann::json v) {
    return [key, v](nlohmann::json& j) {
      j["quantization_config"]["config_groups"]["group_0"]["weights"][key] = v;
    };
  };
  const std::pair<std::function<void(nlohmann::json&)>, std::string> cases[] = {
      {weights("strategy", "block"), "group_0.weights.strategy 'block' is not supported"},
      {weights("strategy", "group"), "group_0.weights.strategy 'group' is not supported"},
      {weights("num_bits", 4), "group_0.weights are 4-bit float"},
      {weights("type", "int"), "group_0.weights are 8-bit int"},
      {weights("block_structure", {128, 128}), "weights.block_structure [128,128] (block-wise scales)"},
      {weights("group_size", 128), "weights.group_size 128 (grouped scales) is not supported"},
      {weights("symmetric", false), "weights.symmetric false (a zero point) is not supported"},
      {weights("dynamic", true), "weights.dynamic true (scales computed at run time) is not supported"},
      {[](nlohmann::json& j) { j["quantization_config"]["format"] = "pack-quantized"; },
       "quantization_config.format 'pack-quantized' is not supported"},
      {[](nlohmann::json& j) {
         j["quantization_config"]["config_groups"]["group_0"]["format"] = "int-quantized";
       },
       "group_0.format 'int-quantized' is not supported"},
      {[](nlohmann::json& j) {
         j["quantization_config"]["ignore"] = {"lm_head", "re:.*down_proj$"};
       },
       "quantization_config.ignore leaves model.layers.0.mlp.down_proj unquantized"},
      {[](nlohmann::json& j) { j["quantization_config"]["ignore"] = {"model.layers.1.self_attn.v_proj"}; },
       "quantization_config.ignore leaves model.layers.1.self_attn.v_proj unquantized"},
      {[](nlohmann::json& j) {
         j["quantization_config"]["config_groups"]["group_0"]["targets"] = {"re:.*self_attn\\..*"};
       },
       "config_groups target no group at model.layers.0.mlp.gate_proj"},
      {[](nlohmann::json& j) { j["quantization_config"]["ignore"] = {"re:("}; },
       "quantization_config.ignore entry 're:(' is not a regular expression decodebench can read"},
      {[](nlohmann::json& j) { j["quantization_config"]["config_groups"] = nlohmann::json::object(); },
       "config_groups must be a non-empty object"},
  };
  for (const auto& [edit, phrase] : cases) expect_one_line(config_error(copy("ct-channel", edit)), phrase);
}

// What compressed-tensors accepts as published: the class name, full names and "re:" patterns
// matched from the start of a name (Python's re.match), in two groups that share the linears.
TEST_F(Fp8Refusal, CompressedTensorsTargetsAndIgnoreMatchAsPublished) {
  const std::string d = copy("ct-channel", [](nlohmann::json& j) {
    nlohmann::json& groups = j["quantization_config"]["config_groups"];
    groups["group_1"] = groups["group_0"];
    groups["group_0"]["targets"] = {"re:.*self_attn"};  // from the start: .* covers the prefix
    groups["group_1"]["targets"] = {"re:model.layers.\\d+.mlp.(gate|up)_proj$",
                                    "model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj"};
    j["quantization_config"]["ignore"] = {"lm_head", "re:lm_head", "re:visual\\..*", "Embedding",
                                          "(.*)*(.*)*x"};
  });
  const ModelConfig c = config_of(d);
  EXPECT_EQ(c.quant.scheme, Scheme::fp8);
  EXPECT_EQ(c.hf_fp8.strategy, "channel");
  EXPECT_NO_THROW(WeightSource(c, d, 0));
  // "re:self_attn" matches no name from its start: the attention linears are untargeted.
  const std::string e = copy("ct-channel", [](nlohmann::json& j) {
    j["quantization_config"]["config_groups"]["group_0"]["targets"] = {"re:self_attn", "re:.*mlp"};
  });
  expect_one_line(config_error(e), "target no group at model.layers.0.self_attn.q_proj");
}

TEST_F(Fp8Refusal, HostileModuleListsAreBounded) {
  nlohmann::json many = nlohmann::json::array();
  for (int i = 0; i < 65; ++i) many.push_back(fmt::format("re:visual{}", i));
  expect_one_line(
      config_error(copy("ct-channel", [&](nlohmann::json& j) { j["quantization_config"]["ignore"] = many; })),
      "quantization_config.ignore holds more than 64 regular expressions or one above 4096 bytes");
  const std::string longest = "re:" + std::string(4097, 'a');
  expect_one_line(
      config_error(
          copy("ct-channel", [&](nlohmann::json& j) { j["quantization_config"]["ignore"] = {longest}; })),
      "holds more than 64 regular expressions or one above 4096 bytes");
  expect_one_line(
      config_error(copy("ct-channel", [](nlohmann::json& j) { j["quantization_config"]["ignore"] = {7}; })),
      "quantization_config.ignore holds 7 (an integer), not a module name");
  expect_one_line(config_error(copy("ct-channel",
                                    [](nlohmann::json& j) {
                                      j["quantization_config"]["config_groups"]["group_0"]["targets"] =
                                          "Linear";
                                    })),
                  "targets must be an array of module names");
}

// Scales: each finite and positive, of a float dtype, one for the tensor or one a row.
TEST_F(Fp8Refusal, BadScalesAreRefusedNamingTheTensor) {
  const auto with_scale = [&](float v) {
    return copy("fp8-channel", nullptr, [v](const TensorInfo& t) -> std::optional<NewTensor> {
      if (t.name != kScaleInv) return std::nullopt;
      NewTensor n{t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
      std::memcpy(n.bytes.data() + 4 * 5, &v, 4);  // row 5
      return n;
    });
  };
  for (const float v :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -0.5f, 0.f, -0.f}) {
    const std::string e = load_error(with_scale(v));
    expect_one_line(e, std::string("tensor ") + kScaleInv + " holds the scale");
    expect_one_line(e, "at index 5; an FP8 scale must be finite and positive");
  }
  const auto replace = [&](const char* dir, const std::string& name, NewTensor with) {
    return copy(dir, nullptr, [name, with](const TensorInfo& t) -> std::optional<NewTensor> {
      if (t.name != name) return std::nullopt;
      return with;
    });
  };
  expect_one_line(
      load_error(replace("fp8-channel", kScaleInv, {DType::i32, {128, 1}, std::vector<uint8_t>(512, 1)})),
      std::string("tensor ") + kScaleInv + " has dtype I32, expected F32, BF16 or F16");
  expect_one_line(
      load_error(replace("fp8-channel", kScaleInv, {DType::f32, {64, 2}, std::vector<uint8_t>(512, 0)})),
      "has shape [64, 2], expected [] or [1] (one scale for the tensor) or [128] or [128, 1] (one a row): "
      "block-wise and grouped FP8 scales are not supported");
  expect_one_line(load_error(replace("fp8-channel", kScaleInv, {DType::f32, {1, 1}, bytes_of<float>({1.f})})),
                  "has shape [1, 1], expected [] or [1]");
  // compressed-tensors' strategy says which: a per-tensor scale in a channel config is refused.
  expect_one_line(load_error(replace("ct-channel", "model.layers.0.self_attn.k_proj.weight_scale",
                                     {DType::f16, {1}, bytes_of<uint16_t>({0x3c00})})),
                  "has shape [1], but quantization_config says strategy channel");
  // transformers' and AutoFP8's names both hold a scale: a linear with both is ambiguous.
  const std::string both =
      copy("fp8-tensor", nullptr, nullptr,
           {{"model.layers.0.mlp.up_proj.weight_scale", {DType::f32, {}, bytes_of<float>({1.f})}}});
  expect_one_line(load_error(both), "model.layers.0.mlp.up_proj has both weight_scale_inv and weight_scale");
  {  // renamed: AutoFP8's weight_scale is read as transformers' weight_scale_inv is
    const std::string d = path("renamed");
    std::filesystem::create_directories(d);
    std::filesystem::copy_file(data("fp8-tensor") + "/config.json", d + "/config.json");
    const SafetensorsFile in(data("fp8-tensor") + "/model.safetensors");
    SafetensorsWriter w(d + "/model.safetensors");
    for (const std::string& n : in.names()) {
      const TensorInfo& t = in.get(n);
      std::string name = n;
      if (const size_t at = name.find(".weight_scale_inv"); at != std::string::npos)
        name = name.substr(0, at) + ".weight_scale";
      w.add(name, t.dtype, t.shape, t.data);
    }
    w.finish();
    const ModelConfig c = config_of(d), rc = config_of(data("fp8-tensor"));
    const WeightSource a(c, d, 0), b(rc, data("fp8-tensor"), 0);
    const QuantMatrix ma = a.host_matrix(a.linear(1, Linear::gate), Scheme::fp8);
    const QuantMatrix mb = b.host_matrix(b.linear(1, Linear::gate), Scheme::fp8);
    EXPECT_EQ(ma.qweight, mb.qweight);
    EXPECT_EQ(ma.scales, mb.scales);
  }
  {  // neither: the name transformers writes is asked for
    const std::string d = path("missing");
    std::filesystem::create_directories(d);
    std::filesystem::copy_file(data("fp8-tensor") + "/config.json", d + "/config.json");
    const SafetensorsFile in(data("fp8-tensor") + "/model.safetensors");
    SafetensorsWriter w(d + "/model.safetensors");
    for (const std::string& n : in.names())
      if (n != "model.layers.1.self_attn.o_proj.weight_scale_inv")
        w.add(n, in.get(n).dtype, in.get(n).shape, in.get(n).data);
    w.finish();
    expect_one_line(load_error(d), "no tensor named model.layers.1.self_attn.o_proj.weight_scale_inv");
  }
}

// The codes: F8_E4M3 of the config's shape, and numbers: E4M3's two NaN codes are refused
// where the linear is read, naming the element.
TEST_F(Fp8Refusal, BadCodesAreRefusedNamingTheTensor) {
  const std::string target = "model.layers.1.self_attn.q_proj.weight";
  for (const uint8_t nan : {uint8_t{0x7f}, uint8_t{0xff}}) {
    const std::string d = copy("ct-channel", nullptr, [&](const TensorInfo& t) -> std::optional<NewTensor> {
      if (t.name != target) return std::nullopt;
      NewTensor n{t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
      n.bytes[3 * 128 + 77] = nan;
      return n;
    });
    const WeightSource ws(config_of(d), d, 0);
    expect_one_line(error_of([&] { ws.host_matrix(ws.linear(1, Linear::q), Scheme::fp8); }),
                    fmt::format("tensor {} holds the E4M3 code 0x{:02x} (NaN) at [3, 77]", target, nan));
    // A block of rows without it reads; the block that holds it is refused alike.
    EXPECT_NO_THROW(ws.checkpoint_rows(ws.linear(1, Linear::q), 0, 3));
    expect_one_line(error_of([&] { ws.checkpoint_rows(ws.linear(1, Linear::q), 2, 4); }), "(NaN) at [3, 77]");
  }
  // The E4M3 values nearest NaN are numbers: +-448 (0x7e, 0xfe) load.
  const std::string d = copy("ct-channel", nullptr, [&](const TensorInfo& t) -> std::optional<NewTensor> {
    if (t.name != target) return std::nullopt;
    NewTensor n{t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
    n.bytes[0] = 0x7e;
    n.bytes[1] = 0xfe;
    return n;
  });
  const WeightSource ws(config_of(d), d, 0);
  const QuantMatrix m = ws.host_matrix(ws.linear(1, Linear::q), Scheme::fp8);
  EXPECT_EQ(m.at(0, 0), 448.f * m.row_scale(0));
  EXPECT_EQ(m.at(0, 1), -448.f * m.row_scale(0));
  const auto replace = [&](NewTensor with) {
    return copy("fp8-channel", nullptr, [&](const TensorInfo& t) -> std::optional<NewTensor> {
      if (t.name != target) return std::nullopt;
      return with;
    });
  };
  expect_one_line(load_error(replace({DType::f16, {128, 128}, std::vector<uint8_t>(128 * 128 * 2, 0)})),
                  "tensor " + target + " has dtype F16, expected F8_E4M3");
  // A shape other than the config's is refused before anything is read or allocated.
  expect_one_line(load_error(replace({DType::f8_e4m3, {129, 128}, std::vector<uint8_t>(129 * 128, 0)})),
                  "tensor " + target + " has shape [129, 128], expected [128, 128]");
}

TEST(Fp8Overrides, QuantThatContradictsTheFileIsRefusedFp8IsAccepted) {
  for (const Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4}) {
    QuantOverrides q;
    q.scheme = s;
    expect_one_line(
        error_of([&] { config_of(data("ct-channel"), q); }),
        fmt::format("holds FP8 weights (quantization_config compressed-tensors): --quant {} contradicts it",
                    to_string(s)));
  }
  QuantOverrides same;
  same.scheme = Scheme::fp8;
  EXPECT_EQ(config_of(data("fp8-tensor"), same).quant.scheme, Scheme::fp8);
  QuantOverrides head;  // the lm_head is the file's F16 one, quantized on load in its own scheme
  head.lm_head = Scheme::int8;
  const ModelConfig c = config_of(data("fp8-channel"), head);
  const WeightSource ws(c, data("fp8-channel"), 0);
  EXPECT_EQ(ws.host_matrix(ws.lm_head(), Scheme::int8).scheme, Scheme::int8);
}

// FP8 tensors without an FP8 quantization_config (a preset as --model): said, not misread.
TEST(Fp8Overrides, Fp8TensorsWithoutQuantizationConfigAreRefusedWithAHint) {
  const ModelConfig c = config_for_weights(load_model_config("tiny"), {Scheme::fp8}, data("fp8-channel"));
  expect_one_line(
      error_of([&] { WeightSource ws(c, data("fp8-channel"), 0); }),
      "hold FP8 tensors (model.layers.0.self_attn.q_proj.weight is F8_E4M3) but config tiny has no FP8 "
      "quantization_config");
}

// The CLI: the result records the source format, a static checkpoint's input scales pass
// without a warning, and a contradicting --quant is one line.
TEST(Fp8Cli, ResultRecordsTheSourceFormatAndContradictionsAreOneLine) {
  for (const Model& p : kModels) {
    std::string err;
    const std::vector<Result> r = db_test::cli_results(data(p.dir), std::string("fp8_") + p.dir, &err);
    EXPECT_EQ(err.find("does not use"), std::string::npos) << err;
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].config.weights_format, p.format);
    EXPECT_EQ(r[0].config.scheme, "fp8");
  }
  db_test::expect_cli_refuses_quant(data("fp8-channel"), "int4");
}

// The committed files are what the script writes: run it again and compare byte for byte.
class Fp8Script : public db_test::TempDirTest {};

TEST_F(Fp8Script, RegeneratesTheCommittedFilesByteForByte) {
  db_test::expect_script_regenerates("make_fp8_checkpoints.py", data(""), path("out"), 10);
}

}  // namespace
