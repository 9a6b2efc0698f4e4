// GPTQ and AWQ checkpoints in their published packing (tests/data/int4, written by
// scripts/make_int4_checkpoints.py from known integers): the loader's canonical int4
// matrices hold those integers, zeros and scales bit for bit; the CPU reference on them
// decodes as it does on the same model's dequantized fp16 checkpoint; what is not
// supported is refused in one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

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
  return std::string(DB_TEST_DATA) + "/int4/" + name;
}

struct Model {
  const char* dir;
  const char* format;  // WeightSource::format()
  uint64_t seed;
  int group;
  bool sym;
};
const Model kModels[] = {
    {"gptq-v1-sym", "gptq", 1, 64, true},
    {"gptq-v1-asym", "gptq", 2, 32, false},
    {"gptq-v2-asym", "gptq_v2", 2, 32, false},
    {"awq", "awq", 2, 32, false},
};

void PrintTo(const Model& m, std::ostream* os) {
  *os << m.dir;
}

class Int4Checkpoint : public ::testing::TestWithParam<Model> {};

// The file's quantization becomes the run's, and every block linear converts to the known
// integers, zeros and scales: nibble by nibble, bit for bit.
TEST_P(Int4Checkpoint, LoadsTheKnownIntegersZerosAndScalesBitForBit) {
  const Model& p = GetParam();
  const ModelConfig c = config_of(data(p.dir));
  EXPECT_EQ(c.quant.scheme, Scheme::int4);
  EXPECT_EQ(c.quant.group_size, p.group);
  EXPECT_EQ(c.quant.zero_point, !p.sym);  // symmetric GPTQ: the canonical form without zeros (8)
  EXPECT_EQ(c.quant.lm_head, Scheme::fp16);
  const WeightSource ws(c, data(p.dir), 0);
  EXPECT_EQ(ws.format(), p.format);
  int64_t checked = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (Linear lin : kLinears) {
      const Origin o = ws.linear(l, lin);
      const QuantMatrix m = ws.host_matrix(o, Scheme::int4);
      const std::string name = o.name.substr(0, o.name.size() - 7);  // without ".weight"
      ASSERT_EQ(m.group_size, p.group);
      ASSERT_EQ(m.zero_point, !p.sym);
      const int64_t groups = m.cols / p.group;
      ASSERT_EQ(m.qweight.size(), static_cast<size_t>(m.rows * m.cols / 2)) << name;
      ASSERT_EQ(m.scales.size(), static_cast<size_t>(m.rows * groups)) << name;
      ASSERT_EQ(m.zeros.size(), p.sym ? 0u : static_cast<size_t>(m.rows * groups)) << name;
      for (int64_t r = 0; r < m.rows; ++r) {
        for (int64_t g = 0; g < groups; ++g) {
          const uint64_t i = static_cast<uint64_t>(r * groups + g);
          const auto scale = static_cast<uint16_t>(
              f32_to_f16(std::ldexp(static_cast<float>(64 + (rand_at(p.seed, name + ".s", i) & 63)), -14)));
          ASSERT_EQ(m.scales[i], scale) << name << " row " << r << " group " << g;
          if (!p.sym) ASSERT_EQ(m.zeros[i], rand_at(p.seed, name + ".z", i) & 15) << name << " row " << r;
        }
        for (int64_t k = 0; k < m.cols; ++k) {
          const auto q =
              static_cast<uint8_t>(rand_at(p.seed, name + ".q", static_cast<uint64_t>(r * m.cols + k)) & 15);
          ASSERT_EQ(quant::unpack_int4(m.qweight[(r * m.cols + k) / 2], static_cast<int>(k)), q)
              << name << " [" << r << ", " << k << "]";
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 2 * (128 * 128 * 2 + 64 * 128 * 2 + 256 * 128 * 3));
}

// The reference: the same model's weights dequantized, (q - zero) * scale, in an fp16
// checkpoint run in fp16. Every such weight is exact in fp16 (a scale has 7 significant bits,
// |q - zero| 4), so both runs multiply the same float values in the same order: the logits
// are equal, not merely close, and so are the greedy tokens.
TEST_P(Int4Checkpoint, CpuDecodeEqualsTheDequantizedCheckpointInFp16) {
  const Model& p = GetParam();
  const std::string ref_dir = data(p.sym ? "dequant-sym" : "dequant-asym");
  const ModelConfig c = config_of(data(p.dir));
  const ModelConfig rc = config_of(ref_dir);
  ASSERT_EQ(rc.quant.scheme, Scheme::fp16);
  const WeightSource ws(c, data(p.dir), 0), ref(rc, ref_dir, 0);
  EXPECT_EQ(ref.format(), "hf");
  db_test::expect_same_cpu_decode(ws, ref, p.dir);
}

// Against transformers (scripts/make_goldens.py --int4) on the dequantized weights: the int4
// file, teacher-forced with transformers' sequence, gives its float32 logits within 1e-4 of
// the largest (only the summation order differs), and its argmax is transformers' next
// token wherever transformers' own top-2 gap is wider than that.
TEST_P(Int4Checkpoint, CpuDecodeGivesTransformersTokensOnTheDequantizedWeights) {
  const Model& p = GetParam();
  const std::string golden = data(p.sym ? "dequant-sym" : "dequant-asym") + "/golden.safetensors";
  ASSERT_TRUE(std::filesystem::exists(golden))
      << golden << ": run `python3 scripts/make_goldens.py tests/data/int4 --int4`";
  const WeightSource ws(config_of(data(p.dir)), data(p.dir), 0);
  db_test::expect_transformers_logits(ws, golden, p.dir);
}

INSTANTIATE_TEST_SUITE_P(Formats, Int4Checkpoint, ::testing::ValuesIn(kModels),
                         db_test::dir_test_name<Model>);

// A copy of a checkpoint with its config.json edited, or one tensor's bytes replaced.
class Int4Refusal : public db_test::TempDirTest {
 protected:
  std::string copy_with_config(const std::string& from, const std::function<void(nlohmann::json&)>& edit) {
    const std::string to = path("ckpt");
    std::filesystem::create_directories(to);
    std::filesystem::copy_file(data(from) + "/model.safetensors", to + "/model.safetensors");
    std::ifstream in(data(from) + "/config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    edit(j);
    std::ofstream(to + "/config.json") << j.dump(2);
    return to;
  }
};

TEST_F(Int4Refusal, ActOrderConfigIsRefusedInOneLineNamingTheFile) {
  const std::string d = copy_with_config(
      "gptq-v1-asym", [](nlohmann::json& j) { j["quantization_config"]["desc_act"] = true; });
  const std::string e = error_of([&] { config_of(d); });
  expect_one_line(e, "desc_act true (act-order GPTQ) is not supported");
  expect_one_line(e, d);
}

// desc_act false but a g_idx that is not i / group_size: act-order all the same.
TEST_F(Int4Refusal, PermutedGIdxIsRefusedInOneLineNamingTheFile) {
  const std::string d = path("ckpt");
  std::filesystem::create_directories(d);
  std::filesystem::copy_file(data("gptq-v1-asym") + "/config.json", d + "/config.json");
  {
    const SafetensorsFile in(data("gptq-v1-asym") + "/model.safetensors");
    const std::string target = "model.layers.1.mlp.down_proj.g_idx";
    std::vector<int32_t> g_idx(in.get(target).nbytes / 4);
    std::memcpy(g_idx.data(), in.get(target).data, in.get(target).nbytes);
    std::swap(g_idx[0], g_idx[100]);  // input 0 in group 3, input 100 in group 0
    SafetensorsWriter w(d + "/model.safetensors");
    for (const std::string& n : in.names()) {
      const TensorInfo& t = in.get(n);
      w.add(n, t.dtype, t.shape, n == target ? static_cast<const void*>(g_idx.data()) : t.data);
    }
    w.finish();
  }
  const ModelConfig c = config_of(d);
  const std::string e = error_of([&] { WeightSource ws(c, d, 0); });
  expect_one_line(e, "model.layers.1.mlp.down_proj.g_idx maps input 0 to group 3, not 0: act-order");
  expect_one_line(e, d);
}

// A qweight whose shape is not the config's (an extra row here; a hostile one could claim
// any size its bytes back) is refused by name before anything is read or allocated.
TEST_F(Int4Refusal, AQweightOfAnotherShapeIsRefusedInOneLine) {
  const std::string d = path("ckpt");
  std::filesystem::create_directories(d);
  std::filesystem::copy_file(data("gptq-v1-asym") + "/config.json", d + "/config.json");
  const std::string target = "model.layers.0.self_attn.q_proj.qweight";
  const std::vector<int32_t> bigger(17 * 128, 0);
  {
    const SafetensorsFile in(data("gptq-v1-asym") + "/model.safetensors");
    SafetensorsWriter w(d + "/model.safetensors");
    for (const std::string& n : in.names()) {
      const TensorInfo& t = in.get(n);
      if (n == target)
        w.add(n, DType::i32, {17, 128}, bigger.data());
      else
        w.add(n, t.dtype, t.shape, t.data);
    }
    w.finish();
  }
  const ModelConfig c = config_of(d);
  expect_one_line(error_of([&] { WeightSource ws(c, d, 0); }),
                  "tensor " + target + " has shape [17, 128], expected [16, 128]");
}

TEST_F(Int4Refusal, AwqVersionsOtherThanGemmAreRefused) {
  for (const char* v : {"gemv", "exllama", "marlin", "gemv_fast"}) {
    const std::string d =
        copy_with_config("awq", [v](nlohmann::json& j) { j["quantization_config"]["version"] = v; });
    expect_one_line(error_of([&] { config_of(d); }),
                    fmt::format("quantization_config.version '{}' is not supported", v));
    std::filesystem::remove_all(d);
  }
}

// modules_to_not_convert: entries outside the blocks' linears load as before; one that names
// a linear (HF's substring rule) is refused, naming the entry and a module it covers.
TEST_F(Int4Refusal, UnquantizedLinearsAreRefusedOtherModulesAreNot) {
  for (const char* skip : {"null", "[]", "[\"lm_head\"]", "[\"visual\", \"lm_head\"]"}) {
    const std::string d = copy_with_config("awq", [skip](nlohmann::json& j) {
      j["quantization_config"]["modules_to_not_convert"] = nlohmann::json::parse(skip);
    });
    EXPECT_NO_THROW(config_of(d)) << skip;
    std::filesystem::remove_all(d);
  }
  const std::pair<const char*, const char*> refused[] = {
      {"mlp.down_proj", "model.layers.0.mlp.down_proj"},
      {"layers.1.self_attn", "model.layers.1.self_attn.q_proj"},
  };
  for (const auto& [entry, module] : refused) {
    const std::string d = copy_with_config("gptq-v1-asym", [entry = entry](nlohmann::json& j) {
      j["quantization_config"]["modules_to_not_convert"] = {entry};
    });
    expect_one_line(
        error_of([&] { config_of(d); }),
        fmt::format("modules_to_not_convert leaves '{}' unquantized ({} among them)", entry, module));
    std::filesystem::remove_all(d);
  }
  const std::string d = copy_with_config(
      "awq", [](nlohmann::json& j) { j["quantization_config"]["modules_to_not_convert"] = "mlp"; });
  expect_one_line(error_of([&] { config_of(d); }), "modules_to_not_convert must be an array or null");
  std::filesystem::remove_all(d);
}

// The matching is HF's substring rule, checked against every module name itself: every
// substring of a module name of a few layers (and those with a digit changed, or a leading
// zero added) is found, for each layer count, exactly when a name among the first `layers`
// layers contains it, and the module named is the first of them.
TEST(ModulesToNotConvert, MatchesWhatASubstringSearchOfEveryModuleNameMatches) {
  std::vector<std::string> modules;  // in order: layer 0's seven, layer 1's, ...
  for (int64_t l = 0; l < 112; ++l)
    for (Linear lin : kLinears) modules.push_back(fmt::format("model.layers.{}.{}", l, hf_module_name(lin)));
  const auto search = [&](const std::string& text, int64_t layers) -> std::string {
    if (text.empty()) return {};
    for (size_t i = 0; i < static_cast<size_t>(layers) * kLinears.size(); ++i)
      if (modules[i].find(text) != std::string::npos) return modules[i];
    return {};
  };
  std::set<std::string> texts = {"",
                                 "lm_head",
                                 "visual",
                                 "0",
                                 "00",
                                 "05",
                                 "007",
                                 "1.",
                                 ".1",
                                 "s.1",
                                 "s.01",
                                 "s.10.",
                                 "99999999999999999999999",
                                 "layers.1023.mlp.up",
                                 "proj",
                                 "_proj.",
                                 "model.layers"};
  for (const int64_t l : {0, 1, 9, 10, 11, 20, 100, 101, 110}) {
    for (Linear lin : kLinears) {
      const std::string module = fmt::format("model.layers.{}.{}", l, hf_module_name(lin));
      for (size_t a = 0; a < module.size(); ++a)
        for (size_t b = a + 1; b <= module.size(); ++b) {
          std::string t = module.substr(a, b - a);
          texts.insert(t);
          for (char& ch : t)
            if (ch >= '0' && ch <= '9') ch = ch == '9' ? '0' : static_cast<char>(ch + 1);
          texts.insert(t);
          texts.insert("0" + module.substr(a, b - a));
        }
    }
  }
  for (const int64_t layers : {1, 2, 10, 11, 12, 100, 101, 102, 111, 112})
    for (const std::string& t : texts)
      ASSERT_EQ(block_linear_containing(t, layers), search(t, layers))
          << "'" << t << "' in " << layers << " layers";
}

TEST_F(Int4Refusal, OtherBitsAndMethodsAreRefused) {
  std::string d =
      copy_with_config("gptq-v1-asym", [](nlohmann::json& j) { j["quantization_config"]["bits"] = 8; });
  expect_one_line(error_of([&] { config_of(d); }), "quantization_config.bits 8 is not supported");
  std::filesystem::remove_all(d);
  d = copy_with_config("gptq-v1-asym",
                       [](nlohmann::json& j) { j["quantization_config"]["quant_method"] = "bitsandbytes"; });
  expect_one_line(error_of([&] { config_of(d); }), "quant_method 'bitsandbytes' is not supported");
}

// A symmetric GPTQ file's zeros must all be 8 (7 as v1 stores them): a file that says sym
// true but holds another zero would run wrong in the canonical form without zeros.
TEST_F(Int4Refusal, SymmetricGptqWithAZeroOtherThanEightIsRefused) {
  const std::string d =
      copy_with_config("gptq-v1-asym", [](nlohmann::json& j) { j["quantization_config"]["sym"] = true; });
  const ModelConfig c = config_of(d);
  EXPECT_FALSE(c.quant.zero_point);
  expect_one_line(error_of([&] { WeightSource ws(c, d, 0); }), "but the config says sym true");
}

TEST(Int4Overrides, QuantOrGroupSizeThatContradictTheFileIsRefused) {
  QuantOverrides s;
  s.scheme = Scheme::int8;
  expect_one_line(error_of([&] { config_of(data("gptq-v1-asym"), s); }),
                  "holds GPTQ int4 weights (quantization_config): --quant int8 contradicts it");
  QuantOverrides g;
  g.group_size = 64;
  expect_one_line(
      error_of([&] { config_of(data("awq"), g); }),
      "holds AWQ int4 weights (quantization_config) with group size 32: --group-size 64 contradicts it");
  QuantOverrides same;  // the file's own values are accepted
  same.scheme = Scheme::int4;
  same.group_size = 32;
  EXPECT_EQ(config_of(data("awq"), same).quant.group_size, 32);
}

// One group per row (group_size -1): the canonical group is the largest common divisor of
// the inputs, and every canonical group of a row takes the row's one scale and zero. The file
// is gptq-v1-asym cut to its first group: qzeros and scales keep their first row, g_idx is 0.
TEST_F(Int4Refusal, GroupSizeMinusOneGivesEveryGroupOfARowItsScaleAndZero) {
  const std::string d = copy_with_config(
      "gptq-v1-asym", [](nlohmann::json& j) { j["quantization_config"]["group_size"] = -1; });
  {
    const SafetensorsFile in(data("gptq-v1-asym") + "/model.safetensors");
    std::filesystem::remove(d + "/model.safetensors");
    SafetensorsWriter w(d + "/model.safetensors");
    const std::vector<int32_t> zero_idx(256, 0);
    for (const std::string& n : in.names()) {
      const TensorInfo& t = in.get(n);
      const auto ends = [&n](const char* suffix) {
        return n.size() > std::strlen(suffix) &&
               n.compare(n.size() - std::strlen(suffix), std::string::npos, suffix) == 0;
      };
      if (ends(".qzeros") || ends(".scales"))
        w.add(n, t.dtype, {1, t.shape[1]}, t.data);  // the first group's row
      else if (ends(".g_idx"))
        w.add(n, t.dtype, t.shape, zero_idx.data());
      else
        w.add(n, t.dtype, t.shape, t.data);
    }
    w.finish();
  }
  const ModelConfig c = config_of(d);
  EXPECT_EQ(c.quant.group_size, 128);  // gcd(hidden 128, intermediate 256, q_dim 128)
  const WeightSource ws(c, d, 0);
  for (Linear lin : {Linear::q, Linear::down}) {
    const Origin o = ws.linear(1, lin);
    const QuantMatrix m = ws.host_matrix(o, Scheme::int4);
    const std::string name = o.name.substr(0, o.name.size() - 7);
    const int64_t file_groups = m.cols / 32, groups = m.cols / 128;  // as written, and canonical
    for (int64_t r = 0; r < m.rows; ++r)
      for (int64_t g = 0; g < groups; ++g) {
        const uint64_t first = static_cast<uint64_t>(r * file_groups);  // the row's group 0 in the script
        ASSERT_EQ(m.scales[r * groups + g],
                  f32_to_f16(std::ldexp(static_cast<float>(64 + (rand_at(2, name + ".s", first) & 63)), -14)))
            << name << " row " << r << " group " << g;
        ASSERT_EQ(m.zeros[r * groups + g], rand_at(2, name + ".z", first) & 15) << name << " row " << r;
      }
    for (int64_t k = 0; k < m.cols; ++k)
      ASSERT_EQ(quant::unpack_int4(m.qweight[k / 2], static_cast<int>(k)), rand_at(2, name + ".q", k) & 15)
          << name;
  }
}

// Packed tensors without a quantization_config (a preset as --model): said, not misread.
TEST(Int4Overrides, PackedTensorsWithoutQuantizationConfigAreRefusedWithAHint) {
  const std::string weights = data("gptq-v1-asym");
  const ModelConfig c = config_for_weights(load_model_config("tiny"), {Scheme::int4, 32}, weights);
  expect_one_line(
      error_of([&] { WeightSource ws(c, weights, 0); }),
      "hold packed int4 tensors (model.layers.0.self_attn.q_proj.qweight) but config tiny has no GPTQ "
      "or AWQ quantization_config");
}

// The CLI: the result records the source format; a contradicting --quant is one line, exit 2
// or 1 as the CLI's other config errors.
TEST(Int4Cli, ResultRecordsTheSourceFormatAndContradictionsAreOneLine) {
  for (const Model& p : kModels) {
    std::string err;
    const std::vector<Result> r = db_test::cli_results(data(p.dir), std::string("int4_") + p.dir, &err);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].config.weights_format, p.format);
    EXPECT_EQ(r[0].config.scheme, "int4");
    EXPECT_EQ(r[0].config.group_size, p.group);
    EXPECT_EQ(r[0].config.zero_point, !p.sym);
  }
  db_test::expect_cli_refuses_quant(data("gptq-v1-sym"), "int8");
}

}  // namespace

namespace {

// The committed files are what the script writes: run it again and compare byte for byte.
class Int4Script : public db_test::TempDirTest {};

TEST_F(Int4Script, RegeneratesTheCommittedFilesByteForByte) {
  db_test::expect_script_regenerates("make_int4_checkpoints.py", data(""), path("out"), 12);
}

}  // namespace
