// Model configs: every preset loads with the real shapes, HF config.json files parse to the
// same shapes as the presets that copy them, and every bad config is refused with a message
// that names the field and the file.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "decodebench/config.h"
#include "decodebench/error.h"
#include "decodebench/model.h"
#include "decodebench/run_spec.h"

namespace fs = std::filesystem;
using db::Arch;
using db::Linear;
using db::ModelConfig;
using db::Scheme;

namespace {

const std::string kConfigs = std::string(DB_TEST_DATA) + "/configs";

// The message of the db::Error that `f` throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const db::Error& e) {
    return e.what();
  }
  return "";
}

// A scratch directory for bad configs, removed with the fixture.
class BadConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/decodebench_config_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `text` to dir/name and returns the error of loading it.
  std::string load_error(const std::string& name, const std::string& text) {
    path_ = (fs::path(dir_) / name).string();
    std::ofstream(path_) << text;
    return error_of([&] { db::load_model_config(path_); });
  }
  // A valid decodebench config with one field replaced (or, with value "", removed).
  static std::string base_with(const std::string& field, const std::string& value) {
    std::string fields[][2] = {
        {"architecture", "\"llama\""},
        {"hidden_size", "256"},
        {"num_hidden_layers", "2"},
        {"num_attention_heads", "4"},
        {"num_key_value_heads", "2"},
        {"head_dim", "64"},
        {"intermediate_size", "512"},
        {"vocab_size", "1000"},
        {"max_position_embeddings", "1024"},
        {"rope_theta", "10000.0"},
        {"rms_norm_eps", "1e-5"},
        {"quant", R"({"scheme": "int4", "group_size": 128})"},
    };
    std::string text = "{";
    bool found = false;
    for (auto& f : fields) {
      std::string v = f[1];
      if (f[0] == field) {
        found = true;
        v = value;
      }
      if (v.empty()) continue;
      text += (text.size() > 1 ? ", \"" : "\"") + f[0] + "\": " + v;
    }
    if (!found && !value.empty()) text += ", \"" + field + "\": " + value;
    return text + "}";
  }
  std::string dir_, path_;
};

}  // namespace

TEST(Presets, AllLoadAndValidateInDisplayOrder) {
  const std::vector<std::string> names = db::preset_names();
  ASSERT_GE(names.size(), 20u);
  ASSERT_GE(names.size(), 45u);
  const char* first[] = {
      "tiny",       "tiny-fp16",       "tiny-int8",       "tiny-int4",       "tiny-fp8",
      "tiny-qwen2", "tiny-qwen2-fp16", "tiny-qwen2-int8", "tiny-qwen2-int4", "tiny-qwen2-fp8",
      "1b",         "1b-fp16",         "1b-int8",         "1b-int4",         "1b-fp8",
      "4b",         "4b-fp16",         "4b-int8",         "4b-int4",         "4b-fp8",
      "8b",         "8b-fp16",         "8b-int8",         "8b-int4",         "8b-fp8",
      "70b",        "70b-fp16",        "70b-int8",        "70b-int4",        "70b-fp8",
      "qwen2-0.5b", "qwen2-0.5b-fp16", "qwen2-0.5b-int8", "qwen2-0.5b-int4", "qwen2-0.5b-fp8",
      "qwen2-1.5b", "qwen2-1.5b-fp16", "qwen2-1.5b-int8", "qwen2-1.5b-int4", "qwen2-1.5b-fp8",
      "qwen2-7b",   "qwen2-7b-fp16",   "qwen2-7b-int8",   "qwen2-7b-int4",   "qwen2-7b-fp8"};
  for (size_t i = 0; i < std::size(first); ++i) EXPECT_EQ(names[i], first[i]);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    ModelConfig c;
    ASSERT_NO_THROW(c = db::load_model_config(name));
    EXPECT_EQ(c.name, name);
    EXPECT_EQ(c.source, "preset");
    EXPECT_NO_THROW(db::validate(c, name));
    EXPECT_FALSE(db::preset_text(name).empty());
  }
  EXPECT_TRUE(db::preset_text("no-such-preset").empty());
}

TEST(Presets, SchemeVariantsCarryTheirScheme) {
  for (const char* base :
       {"tiny", "tiny-qwen2", "1b", "4b", "8b", "70b", "qwen2-0.5b", "qwen2-1.5b", "qwen2-7b"}) {
    const ModelConfig b = db::load_model_config(base);
    EXPECT_EQ(b.quant.scheme, Scheme::fp16) << base;
    for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4}) {
      const std::string name = std::string(base) + "-" + db::to_string(s);
      const ModelConfig c = db::load_model_config(name);
      EXPECT_EQ(c.quant.scheme, s) << name;
      EXPECT_EQ(c.quant.group_size, std::string(base).rfind("tiny", 0) == 0 ? 64 : 128) << name;
      EXPECT_TRUE(c.quant.zero_point) << name;
      EXPECT_EQ(c.quant.lm_head, Scheme::fp16) << name;
      // The variant changes the scheme only: the architecture is the base's.
      EXPECT_EQ(c.hidden_size, b.hidden_size) << name;
      EXPECT_EQ(c.num_hidden_layers, b.num_hidden_layers) << name;
      EXPECT_EQ(c.vocab_size, b.vocab_size) << name;
      EXPECT_EQ(c.tie_word_embeddings, b.tie_word_embeddings) << name;
      EXPECT_EQ(c.arch, b.arch) << name;
    }
  }
}

TEST(Presets, ShapesAreTheRealModels) {
  const ModelConfig tiny = db::load_model_config("tiny");
  EXPECT_EQ(tiny.arch, Arch::llama);
  EXPECT_EQ(tiny.hidden_size, 128);
  EXPECT_EQ(tiny.num_hidden_layers, 2);
  EXPECT_EQ(tiny.num_attention_heads, 4);
  EXPECT_EQ(tiny.num_key_value_heads, 2);
  EXPECT_EQ(tiny.head_dim, 32);
  EXPECT_EQ(tiny.intermediate_size, 256);
  EXPECT_EQ(tiny.vocab_size, 512);
  EXPECT_EQ(tiny.max_position_embeddings, 2048);
  EXPECT_FALSE(tiny.tie_word_embeddings);
  EXPECT_FALSE(tiny.rope_scaling.llama3);

  // Llama-3.1-8B: 32 query heads of 128 over hidden 4096, 8 KV heads.
  const ModelConfig c8 = db::load_model_config("8b-int4");
  EXPECT_EQ(c8.q_dim(), 4096);
  EXPECT_EQ(c8.kv_dim(), 1024);
  EXPECT_EQ(c8.intermediate_size, 14336);
  EXPECT_EQ(c8.vocab_size, 128256);
  EXPECT_DOUBLE_EQ(c8.rope_theta, 500000.0);
  EXPECT_TRUE(c8.rope_scaling.llama3);
  EXPECT_DOUBLE_EQ(c8.rope_scaling.factor, 8.0);
  EXPECT_EQ(c8.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_FALSE(c8.tie_word_embeddings);
  EXPECT_EQ(db::linear_shape(c8, Linear::q).rows, 4096);
  EXPECT_EQ(db::linear_shape(c8, Linear::k).rows, 1024);
  EXPECT_EQ(db::linear_shape(c8, Linear::k).cols, 4096);
  EXPECT_EQ(db::linear_shape(c8, Linear::down).rows, 4096);
  EXPECT_EQ(db::linear_shape(c8, Linear::down).cols, 14336);

  // Qwen3-4B: head_dim 128 although hidden / heads = 80, so q_dim (4096) != hidden (2560).
  const ModelConfig c4 = db::load_model_config("4b");
  EXPECT_EQ(c4.arch, Arch::qwen3);
  EXPECT_EQ(c4.head_dim, 128);
  EXPECT_EQ(c4.hidden_size, 2560);
  EXPECT_EQ(c4.q_dim(), 4096);
  EXPECT_EQ(db::linear_shape(c4, Linear::o).rows, 2560);
  EXPECT_EQ(db::linear_shape(c4, Linear::o).cols, 4096);
  EXPECT_TRUE(c4.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c4.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c4.rope_scaling.llama3);

  const ModelConfig c1 = db::load_model_config("1b");
  EXPECT_EQ(c1.head_dim, 64);
  EXPECT_TRUE(c1.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c1.rope_scaling.factor, 32.0);

  const ModelConfig c70 = db::load_model_config("70b-int8");
  EXPECT_EQ(c70.num_hidden_layers, 80);
  EXPECT_EQ(c70.q_dim(), 8192);
  EXPECT_EQ(c70.kv_dim(), 1024);
  EXPECT_EQ(c70.intermediate_size, 28672);
}

TEST(Presets, ParameterCountsFromTheShapes) {
  // Llama-3.1-8B, written out: embedding + lm_head (untied), per layer q,k,v,o + gate,up,down
  // + two RMSNorms, and the final norm.
  const int64_t embed = 128256LL * 4096;
  const int64_t per_layer = 4096LL * 4096 + 2 * 1024LL * 4096 + 4096LL * 4096 + 3 * 14336LL * 4096 + 2 * 4096;
  const int64_t expected8 = 2 * embed + 32 * per_layer + 4096;
  EXPECT_EQ(db::parameter_count(db::load_model_config("8b")), expected8);
  EXPECT_NEAR(static_cast<double>(expected8), 8.03e9, 0.01e9);

  // Llama-3.2-1B ties lm_head to the embedding: HF reports 1.24B.
  const int64_t per_layer1 = 2048LL * 2048 + 2 * 512LL * 2048 + 2048LL * 2048 + 3 * 8192LL * 2048 + 2 * 2048;
  EXPECT_EQ(db::parameter_count(db::load_model_config("1b")), 128256LL * 2048 + 16 * per_layer1 + 2048);

  // Qwen3-4B (tied) adds the per-head q_norm and k_norm weights (head_dim each) per layer.
  const int64_t per_layer4 =
      4096LL * 2560 + 2 * 1024LL * 2560 + 2560LL * 4096 + 3 * 9728LL * 2560 + 2 * 2560 + 2 * 128;
  EXPECT_EQ(db::parameter_count(db::load_model_config("4b")), 151936LL * 2560 + 36 * per_layer4 + 2560);

  // The scheme does not change the parameter count.
  EXPECT_EQ(db::parameter_count(db::load_model_config("8b-int4")), expected8);
}

TEST(ModelNames, HfTensorNames) {
  EXPECT_EQ(db::linear_name(3, Linear::up), "model.layers.3.mlp.up_proj.weight");
  EXPECT_EQ(db::linear_name(0, Linear::q), "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(db::linear_name(31, Linear::down), "model.layers.31.mlp.down_proj.weight");
  EXPECT_EQ(db::layer_norm_name(2, false), "model.layers.2.input_layernorm.weight");
  EXPECT_EQ(db::layer_norm_name(2, true), "model.layers.2.post_attention_layernorm.weight");
  EXPECT_EQ(db::qk_norm_name(5, false), "model.layers.5.self_attn.q_norm.weight");
  EXPECT_EQ(db::qk_norm_name(5, true), "model.layers.5.self_attn.k_norm.weight");
  const char* shorts[] = {"q", "k", "v", "o", "gate", "up", "down"};
  for (size_t i = 0; i < db::kLinears.size(); ++i) EXPECT_STREQ(db::short_name(db::kLinears[i]), shorts[i]);
}

TEST(EnumStrings, RoundTrip) {
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4})
    EXPECT_EQ(db::parse_scheme(db::to_string(s)), s);
  for (Arch a : {Arch::llama, Arch::qwen2, Arch::qwen3}) EXPECT_EQ(db::parse_arch(db::to_string(a)), a);
  EXPECT_EQ(db::scheme_bits(Scheme::fp16), 16);
  EXPECT_EQ(db::scheme_bits(Scheme::int8), 8);
  EXPECT_EQ(db::scheme_bits(Scheme::int4), 4);
  EXPECT_NE(error_of([] { db::parse_scheme("int3"); }).find("int3"), std::string::npos);
  EXPECT_NE(error_of([] { db::parse_arch("gemma"); }).find("gemma"), std::string::npos);
  EXPECT_STREQ(db::to_string(db::BackendKind::cpu), "cpu");
  EXPECT_STREQ(db::to_string(db::OutputFormat::jsonl), "jsonl");
}

TEST(HfConfig, Llama31MatchesThe8bPreset) {
  const ModelConfig hf = db::load_model_config(kConfigs + "/llama31_8b.json");
  const ModelConfig p = db::load_model_config("8b");
  EXPECT_EQ(hf.source, "hf");
  EXPECT_EQ(hf.arch, Arch::llama);
  EXPECT_EQ(hf.hidden_size, p.hidden_size);
  EXPECT_EQ(hf.num_hidden_layers, p.num_hidden_layers);
  EXPECT_EQ(hf.num_attention_heads, p.num_attention_heads);
  EXPECT_EQ(hf.num_key_value_heads, p.num_key_value_heads);
  EXPECT_EQ(hf.head_dim, 128);  // absent from the file: hidden / heads
  EXPECT_EQ(hf.intermediate_size, p.intermediate_size);
  EXPECT_EQ(hf.vocab_size, p.vocab_size);
  EXPECT_EQ(hf.max_position_embeddings, p.max_position_embeddings);
  EXPECT_DOUBLE_EQ(hf.rope_theta, p.rope_theta);
  EXPECT_TRUE(hf.rope_scaling.llama3);
  EXPECT_DOUBLE_EQ(hf.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(hf.rope_scaling.high_freq_factor, 4.0);
  EXPECT_DOUBLE_EQ(hf.rms_norm_eps, 1e-5);
  EXPECT_EQ(hf.tie_word_embeddings, false);
  EXPECT_EQ(hf.quant.scheme, Scheme::fp16);
  EXPECT_EQ(db::parameter_count(hf), db::parameter_count(p));
}

TEST(HfConfig, Llama32WithHeadDimAndTiedEmbeddings) {
  const ModelConfig hf = db::load_model_config(kConfigs + "/llama32_1b.json");
  EXPECT_EQ(hf.head_dim, 64);
  EXPECT_TRUE(hf.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(hf.rope_scaling.factor, 32.0);
  EXPECT_EQ(db::parameter_count(hf), db::parameter_count(db::load_model_config("1b")));
}

TEST(HfConfig, MistralDefaultsAndSlidingWindow) {
  const ModelConfig hf = db::load_model_config(kConfigs + "/mistral_7b_v01.json");
  EXPECT_EQ(hf.arch, Arch::llama);
  EXPECT_EQ(hf.head_dim, 128);
  EXPECT_EQ(hf.num_key_value_heads, 8);
  EXPECT_EQ(hf.vocab_size, 32000);
  EXPECT_FALSE(hf.rope_scaling.llama3);
  // Full attention equals the model's sliding-window attention only within the window.
  EXPECT_EQ(hf.max_position_embeddings, 4096);
}

TEST(HfConfig, Qwen3MatchesThe4bPreset) {
  const ModelConfig hf = db::load_model_config(kConfigs + "/qwen3_4b.json");
  const ModelConfig p = db::load_model_config("4b");
  EXPECT_EQ(hf.arch, Arch::qwen3);
  EXPECT_EQ(hf.head_dim, 128);
  EXPECT_EQ(hf.hidden_size, 2560);
  EXPECT_EQ(hf.q_dim(), p.q_dim());
  EXPECT_DOUBLE_EQ(hf.rope_theta, 1e6);  // an integer in the file
  EXPECT_TRUE(hf.tie_word_embeddings);
  EXPECT_EQ(hf.max_position_embeddings, 40960);
  EXPECT_EQ(db::parameter_count(hf), db::parameter_count(p));
}

// Published totals (the model cards' safetensors metadata): embedding, linears, norms, the
// q/k/v biases, and an lm_head only where it is not tied (7B).
TEST(Presets, Qwen2ParameterCountsAreThePublishedOnes) {
  EXPECT_EQ(db::parameter_count(db::load_model_config("qwen2-0.5b")), 494'032'768);
  EXPECT_EQ(db::parameter_count(db::load_model_config("qwen2-1.5b")), 1'543'714'304);
  EXPECT_EQ(db::parameter_count(db::load_model_config("qwen2-7b")), 7'615'616'512);
  EXPECT_EQ(db::parameter_count(db::load_model_config("qwen2-7b-int4")), 7'615'616'512);
  // The biases are what sets qwen2 apart from llama of the same shape: q_dim + 2 kv_dim a layer.
  ModelConfig llama = db::load_model_config("qwen2-0.5b");
  llama.arch = Arch::llama;
  EXPECT_EQ(db::parameter_count(db::load_model_config("qwen2-0.5b")) - db::parameter_count(llama),
            24 * (14 * 64 + 2 * 2 * 64));
}

TEST(HfConfig, Qwen25MatchesTheQwen2Preset) {
  // Sliding-window fields present but off (use_sliding_window false): accepted, full attention,
  // max_position_embeddings unchanged; head_dim derived from hidden_size / heads.
  const ModelConfig hf = db::load_model_config(kConfigs + "/qwen25_0_5b.json");
  const ModelConfig p = db::load_model_config("qwen2-0.5b");
  EXPECT_EQ(hf.arch, Arch::qwen2);
  EXPECT_EQ(hf.source, "hf");
  EXPECT_EQ(hf.head_dim, 64);
  EXPECT_EQ(hf.hidden_size, p.hidden_size);
  EXPECT_EQ(hf.num_hidden_layers, p.num_hidden_layers);
  EXPECT_EQ(hf.num_attention_heads, p.num_attention_heads);
  EXPECT_EQ(hf.num_key_value_heads, p.num_key_value_heads);
  EXPECT_EQ(hf.intermediate_size, p.intermediate_size);
  EXPECT_EQ(hf.vocab_size, p.vocab_size);
  EXPECT_EQ(hf.max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(hf.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(hf.rms_norm_eps, 1e-6);
  EXPECT_TRUE(hf.tie_word_embeddings);
  EXPECT_EQ(db::parameter_count(hf), 494'032'768);
}

TEST(HfConfig, Qwen2SlidingWindowOnIsRefusedInOneLine) {
  std::ifstream in(kConfigs + "/qwen25_0_5b.json");
  std::string text(std::istreambuf_iterator<char>(in), {});
  const std::string off = "\"use_sliding_window\": false";
  const size_t at = text.find(off);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, off.size(), "\"use_sliding_window\": true");
  const std::string e = error_of([&] { db::parse_model_config(text, "qwen-swa/config.json"); });
  EXPECT_NE(e.find("qwen-swa/config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("use_sliding_window true is not supported"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  // transformers 5 writes the layers' kinds: full attention in every layer is accepted.
  text.replace(text.find("\"use_sliding_window\": true"), 26,
               "\"use_sliding_window\": false, \"layer_types\": [\"full_attention\", \"full_attention\"]");
  EXPECT_EQ(db::parse_model_config(text, "qwen-full/config.json").arch, Arch::qwen2);
  const size_t second = text.rfind("\"full_attention\"");
  text.replace(second, 16, "\"sliding_attention\"");
  const std::string e2 = error_of([&] { db::parse_model_config(text, "qwen-swa/config.json"); });
  EXPECT_NE(e2.find("layer_types holds 'sliding_attention', not supported"), std::string::npos) << e2;
}

TEST(HfConfig, ModelDirectoryAndTransformers5RopeParameters) {
  // A directory resolves to its config.json; transformers 5 moves rope_theta and the
  // scaling into rope_parameters.
  const ModelConfig hf = db::load_model_config(kConfigs + "/tiny_llama_transformers5");
  EXPECT_EQ(hf.hidden_size, 128);
  EXPECT_DOUBLE_EQ(hf.rope_theta, 500000.0);
  EXPECT_TRUE(hf.rope_scaling.llama3);
  EXPECT_EQ(hf.rope_scaling.original_max_position_embeddings, 256);
}

TEST(HfConfig, UnsupportedArchitectureIsRefusedByName) {
  const std::string path = kConfigs + "/gemma2_2b.json";
  const std::string e = error_of([&] { db::load_model_config(path); });
  EXPECT_NE(e.find("architecture Gemma2ForCausalLM is not supported"), std::string::npos) << e;
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM"),
            std::string::npos)
      << e;
}

TEST(UserConfig, ExtendsAPresetAndARelativeFile) {
  const ModelConfig a = db::load_model_config(kConfigs + "/user_extends_preset.json");
  EXPECT_EQ(a.source, "file");
  EXPECT_EQ(a.hidden_size, 4096);
  EXPECT_EQ(a.num_hidden_layers, 4);
  EXPECT_EQ(a.quant.scheme, Scheme::int4);
  EXPECT_EQ(a.quant.group_size, 64);
  EXPECT_TRUE(a.quant.zero_point);  // merged from the base's quant object

  const ModelConfig b = db::load_model_config(kConfigs + "/user_extends_file.json");
  EXPECT_EQ(b.num_hidden_layers, 4);
  EXPECT_EQ(b.quant.scheme, Scheme::int4);
  EXPECT_EQ(b.quant.lm_head, Scheme::int8);

  // An HF config.json as the base, with a decodebench quant on top.
  const ModelConfig c = db::load_model_config(kConfigs + "/user_extends_hf.json");
  EXPECT_EQ(c.arch, Arch::qwen3);
  EXPECT_EQ(c.quant.scheme, Scheme::int8);
}

TEST(Overrides, ApplyThenValidate) {
  db::QuantOverrides s;
  s.scheme = Scheme::int4;
  s.group_size = 64;
  s.lm_head = Scheme::int8;
  const ModelConfig c = db::apply_overrides(db::load_model_config("8b"), s);
  EXPECT_EQ(c.quant.scheme, Scheme::int4);
  EXPECT_EQ(c.quant.group_size, 64);
  EXPECT_EQ(c.quant.lm_head, Scheme::int8);

  s.group_size = 100;
  const std::string e = error_of([&] { db::apply_overrides(db::load_model_config("8b"), s); });
  EXPECT_NE(e.find("group_size 100"), std::string::npos) << e;
  EXPECT_NE(e.find("hidden_size 4096"), std::string::npos) << e;
  EXPECT_NE(e.find("8b"), std::string::npos) << e;
}

// SmolLM2-135M's hidden size 576 holds no whole group of 128: --quant int4 takes the largest
// of 128, 64, 32 that divides every int4 input and says why; an explicit --group-size that
// does not divide is refused.
TEST(Overrides, Int4GroupSizeFitsTheMatrices) {
  const std::string smollm = std::string(DB_TEST_DATA) + "/configs/smollm2_135m.json";
  db::QuantOverrides s;
  s.scheme = Scheme::int4;
  const ModelConfig c = db::apply_overrides(db::load_model_config(smollm), s);
  EXPECT_EQ(c.quant.group_size, 64);
  EXPECT_EQ(c.group_size_note, "int4 group size 64 instead of 128: 128 does not divide hidden_size 576");

  ModelConfig odd = db::load_model_config(smollm);  // 9 heads x 32 = 288 = 9 x 32: only 32 fits
  odd.head_dim = 32;
  EXPECT_EQ(db::apply_overrides(odd, s).quant.group_size, 32);

  // A config whose group already divides keeps it, with no note.
  const ModelConfig eight = db::apply_overrides(db::load_model_config("8b"), s);
  EXPECT_EQ(eight.quant.group_size, 128);
  EXPECT_EQ(eight.group_size_note, "");

  s.group_size = 128;
  const std::string e = error_of([&] { db::apply_overrides(db::load_model_config(smollm), s); });
  EXPECT_NE(e.find("group_size 128 does not divide hidden_size 576"), std::string::npos) << e;

  // None of 128, 64, 32 divides hidden 200: refused as before, naming the config's group.
  s.group_size.reset();
  ModelConfig none = db::load_model_config(smollm);
  none.hidden_size = 200;
  const std::string n = error_of([&] { db::apply_overrides(none, s); });
  EXPECT_NE(n.find("group_size 128 does not divide hidden_size 200"), std::string::npos) << n;
}

TEST(UnknownModel, NeitherPresetNorFile) {
  const std::string e = error_of([] { db::load_model_config("8b-int5"); });
  EXPECT_EQ(
      e,
      "unknown model '8b-int5': not a preset (see `decodebench list presets`) and no such file (did you mean "
      "8b-int8?)");
}

// Each kind of bad config: the message names the file and the field.
TEST_F(BadConfig, MissingField) {
  const std::string e = load_error("c.json", base_with("hidden_size", ""));
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("missing field hidden_size"), std::string::npos) << e;
}

TEST_F(BadConfig, NonPositiveSize) {
  std::string e = load_error("c.json", base_with("num_hidden_layers", "0"));
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("num_hidden_layers must be positive"), std::string::npos) << e;
  e = load_error("d.json", base_with("vocab_size", "-3"));
  EXPECT_NE(e.find("vocab_size must be positive, got -3"), std::string::npos) << e;
}

TEST_F(BadConfig, WrongJsonType) {
  std::string e = load_error("c.json", base_with("hidden_size", "\"256\""));
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("hidden_size must be an integer"), std::string::npos) << e;
  e = load_error("d.json", base_with("rope_theta", "true"));
  EXPECT_NE(e.find("rope_theta must be a number"), std::string::npos) << e;
  e = load_error("e.json", base_with("tie_word_embeddings", "1"));
  EXPECT_NE(e.find("tie_word_embeddings must be true or false"), std::string::npos) << e;
  e = load_error("f.json", base_with("quant", "\"int4\""));
  EXPECT_NE(e.find("quant must be an object"), std::string::npos) << e;
}

TEST_F(BadConfig, HeadsNotDivisibleByKvHeads) {
  const std::string e = load_error("c.json", base_with("num_key_value_heads", "3"));
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("num_attention_heads 4 is not a multiple of num_key_value_heads 3"), std::string::npos)
      << e;
}

TEST_F(BadConfig, OddHeadDim) {
  const std::string e = load_error("c.json", base_with("head_dim", "63"));
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("head_dim 63 must be even"), std::string::npos) << e;
}

TEST_F(BadConfig, HeadDimTimesHeadsMayDifferFromHidden) {
  // qwen3-style: 4 heads of 96 over hidden 256 is allowed (q_dim 384 is a multiple of 128).
  EXPECT_EQ(load_error("c.json", base_with("head_dim", "96")), "");
}

TEST_F(BadConfig, UnknownScheme) {
  const std::string e = load_error("c.json", base_with("quant", R"({"scheme": "int3"})"));
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("quant.scheme is 'int3'"), std::string::npos) << e;
}

TEST_F(BadConfig, GroupSizeNotPositive) {
  const std::string e = load_error("c.json", base_with("quant", R"({"scheme": "int4", "group_size": 0})"));
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("quant.group_size must be positive"), std::string::npos) << e;
}

TEST_F(BadConfig, GroupSizeMustDivideEveryInt4InputDimension) {
  // hidden_size 256 (q/k/v/gate/up and lm_head inputs)
  std::string e = load_error("h.json", base_with("quant", R"({"scheme": "int4", "group_size": 96})"));
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("group_size 96 does not divide hidden_size 256"), std::string::npos) << e;
  // intermediate_size 320 (down_proj input)
  e = load_error("i.json", base_with("intermediate_size", "320"));
  EXPECT_NE(e.find("group_size 128 does not divide intermediate_size 320"), std::string::npos) << e;
  // q_dim = 4 heads * 80 = 320 (o_proj input)
  e = load_error("q.json", base_with("head_dim", "80"));
  EXPECT_NE(e.find("group_size 128 does not divide q_dim"), std::string::npos) << e;
  EXPECT_NE(e.find("320"), std::string::npos) << e;
  // fp16 weights have no groups: the same sizes are fine.
  EXPECT_EQ(load_error("f.json", base_with("quant", R"({"scheme": "fp16", "group_size": 96})")), "");
}

TEST_F(BadConfig, JsonSyntaxErrorNamesTheFile) {
  const std::string e = load_error("broken.json", "{\"architecture\": \"llama\", \"hidden_size\": 256,, }");
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("invalid JSON"), std::string::npos) << e;
  EXPECT_NE(e.find("line 1"), std::string::npos) << e;
  EXPECT_EQ(e.find("json.exception"), std::string::npos) << e;  // the library's tag is noise
}

TEST_F(BadConfig, TopLevelNotAnObject) {
  const std::string e = load_error("c.json", "[1, 2]");
  EXPECT_NE(e.find("expected a JSON object"), std::string::npos) << e;
}

TEST_F(BadConfig, UnknownFieldIsATypo) {
  const std::string e = load_error("c.json", base_with("tie_word_embedding", "true"));
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("unknown field tie_word_embedding"), std::string::npos) << e;
}

TEST_F(BadConfig, UnsupportedRopeType) {
  const std::string e =
      load_error("c.json", base_with("rope_scaling", R"({"rope_type": "yarn", "factor": 4.0})"));
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("rope_scaling.rope_type 'yarn' is not supported"), std::string::npos) << e;
  // "type" is the older spelling of rope_type; llama3 needs all of its fields.
  const std::string e2 =
      load_error("d.json", base_with("rope_scaling", R"({"type": "llama3", "factor": 8.0})"));
  EXPECT_NE(e2.find("missing field rope_scaling.low_freq_factor"), std::string::npos) << e2;
}

TEST_F(BadConfig, MissingArchitecture) {
  const std::string e = load_error("c.json", base_with("architecture", ""));
  EXPECT_NE(e.find("missing field architecture"), std::string::npos) << e;
  const std::string e2 = load_error("d.json", base_with("architecture", "\"gemma\""));
  EXPECT_NE(e2.find("architecture 'gemma' is not supported"), std::string::npos) << e2;
}

TEST_F(BadConfig, HfMissingFieldAndBadArchitecturesType) {
  std::string e =
      load_error("config.json", R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2})");
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("missing field hidden_size"), std::string::npos) << e;
  e = load_error("config2.json", R"({"architectures": "LlamaForCausalLM", "hidden_size": 64})");
  EXPECT_NE(e.find("field architectures must be a non-empty array"), std::string::npos) << e;
  // hidden_size not a multiple of the heads with head_dim absent: nothing to derive it from.
  e = load_error("config3.json",
                 R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 100, "num_hidden_layers": 1,
                     "num_attention_heads": 3, "intermediate_size": 64, "vocab_size": 10,
                     "max_position_embeddings": 16})");
  EXPECT_NE(e.find("head_dim is absent"), std::string::npos) << e;
}

TEST_F(BadConfig, ExtendsUnknownPreset) {
  const std::string e = load_error("c.json", R"({"extends": "9b", "num_hidden_layers": 2})");
  EXPECT_NE(e.find(path_), std::string::npos) << e;
  EXPECT_NE(e.find("extends '9b'"), std::string::npos) << e;
  EXPECT_NE(e.find("not a preset"), std::string::npos) << e;
}

TEST_F(BadConfig, ExtendsCycle) {
  const std::string e = error_of([] { db::load_model_config(kConfigs + "/cycle_a.json"); });
  EXPECT_NE(e.find("extends cycle"), std::string::npos) << e;
  EXPECT_NE(e.find("cycle_a.json"), std::string::npos) << e;
  EXPECT_NE(e.find("cycle_b.json"), std::string::npos) << e;
}

TEST_F(BadConfig, DirectoryWithoutConfigJson) {
  const std::string e = error_of([&] { db::load_model_config(dir_); });
  EXPECT_NE(e.find(dir_), std::string::npos) << e;
  EXPECT_NE(e.find("no config.json"), std::string::npos) << e;
}
