// LoRA adapters on the CPU reference: the synthetic spec, PEFT directories and their
// validation, merged against external mode, the merge arithmetic in each scheme, and a run
// through the binary (result fields, byte accounting, the same fields from the CUDA backend).
#include <gtest/gtest.h>
#include "temp_dir.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "cli_helpers.h"
#include "decodebench/adapter.h"
#include "decodebench/backend.h"
#include "decodebench/cpu_reference.h"
#include "decodebench/error.h"
#include "decodebench/half.h"
#include "decodebench/result.h"
#include "decodebench/safetensors.h"

using namespace db;

namespace {

namespace fs = std::filesystem;

const std::string kTinyLlama = std::string(DB_TEST_DATA) + "/hf/tiny-llama";

ModelConfig tiny(Scheme s) {
  return apply_overrides(load_model_config("tiny"), {s});
}

// Logits of `steps` teacher-forced steps over the backends' prompt, one vector per step.
std::vector<std::vector<float>> logits(const WeightSource& ws, int64_t steps = 6) {
  CpuModel m(ws, steps, 1);
  std::vector<std::vector<float>> out;
  for (int64_t p = 0; p < steps; ++p) out.push_back(m.step(prompt_token(p, ws.config().vocab_size), p));
  return out;
}

// Worst over steps of ||a - b|| / ||b||.
double rms_rel(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double worst = 0;
  for (size_t s = 0; s < a.size(); ++s) {
    double d = 0, n = 0;
    for (size_t i = 0; i < a[s].size(); ++i) {
      d += double(a[s][i] - b[s][i]) * (a[s][i] - b[s][i]);
      n += double(b[s][i]) * b[s][i];
    }
    worst = std::max(worst, std::sqrt(d / n));
  }
  return worst;
}

// `f` throws a db::Error whose message contains every phrase.
void expect_error(const std::function<void()>& f, const std::vector<std::string>& phrases) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming: " << phrases.front();
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const std::string& p : phrases)
      EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
  }
}

// ---------------------------------------------------------------------------- synthetic spec

TEST(Adapter, SyntheticSpecDefaultsToAllTargetsAndScaleOne) {
  const ModelConfig c = tiny(Scheme::fp16);
  const Adapter a = load_adapter("synthetic:rank=4", c, 0, AdapterMode::external);
  EXPECT_EQ(a.rank, 4);
  EXPECT_EQ(a.alpha, 4.0);  // alpha defaults to the rank
  EXPECT_EQ(a.scale, 1.0);
  EXPECT_EQ(a.mode, AdapterMode::external);
  EXPECT_EQ(a.target_names(), (std::vector<std::string>{"q", "k", "v", "o", "gate", "up", "down"}));
  ASSERT_EQ(a.layers.size(), 2u);
  for (int64_t l = 0; l < 2; ++l) {
    for (Linear lin : kLinears) {
      const LoraPair* p = a.find(l, lin);
      ASSERT_NE(p, nullptr);
      const MatShape s = linear_shape(c, lin);
      EXPECT_EQ(int64_t(p->a.size()), 4 * s.cols);
      EXPECT_EQ(int64_t(p->b.size()), s.rows * 4);
      for (float v : p->b) ASSERT_NE(v, 0.f) << "B must not be zero (PEFT's init would make tests vacuous)";
      for (float v : p->a) ASSERT_EQ(v, f16_to_f32(f32_to_f16(v))) << "A values are fp16-rounded";
    }
  }
  // The values are a function of the seed.
  const Adapter same = load_adapter("synthetic:rank=4", c, 0, AdapterMode::merged);
  const Adapter other = load_adapter("synthetic:rank=4", c, 1, AdapterMode::merged);
  EXPECT_EQ(same.find(1, Linear::down)->b, a.find(1, Linear::down)->b);
  EXPECT_NE(other.find(1, Linear::down)->b, a.find(1, Linear::down)->b);
}

TEST(Adapter, SyntheticSpecReadsTargetsAlphaAndRslora) {
  const ModelConfig c = tiny(Scheme::fp16);
  const Adapter a = load_adapter("synthetic:rank=8,targets=v,q,alpha=16", c, 0, AdapterMode::merged);
  EXPECT_EQ(a.target_names(), (std::vector<std::string>{"q", "v"}));  // model order
  EXPECT_EQ(a.scale, 2.0);                                            // alpha / rank
  EXPECT_EQ(a.find(0, Linear::k), nullptr);
  EXPECT_NE(a.find(0, Linear::v), nullptr);
  const Adapter r = load_adapter("synthetic:rank=4,alpha=8,rslora=true", c, 0, AdapterMode::merged);
  EXPECT_EQ(r.scale, 4.0);  // alpha / sqrt(rank)
  const AdapterShape s = a.shape();
  EXPECT_EQ(s.rank, 8);
  EXPECT_EQ(s.targets, (std::vector<Linear>{Linear::q, Linear::v}));
  EXPECT_EQ(s.mode, AdapterMode::merged);
}

TEST(Adapter, BadSyntheticSpecsNameTheProblem) {
  const ModelConfig c = tiny(Scheme::fp16);
  auto load = [&](const std::string& spec) {
    return [&c, spec] { load_adapter(spec, c, 0, AdapterMode::merged); };
  };
  expect_error(load("synthetic:rank=0"), {"rank must be a positive integer, got '0'"});
  expect_error(load("synthetic:rank=-2"), {"rank must be a positive integer"});
  expect_error(load("synthetic:rank=4x"), {"rank must be a positive integer, got '4x'"});
  expect_error(load("synthetic:targets=q"), {"missing rank=R"});
  expect_error(load("synthetic:rank=4,foo=1"), {"unknown key 'foo'", "rank, alpha, targets, rslora"});
  expect_error(load("synthetic:rank=4,targets=q,embed"),
               {"target 'embed' is not one of q, k, v, o, gate, up, down"});
  expect_error(load("synthetic:rank=4,alpha=abc"), {"alpha must be a finite number, got 'abc'"});
  expect_error(load("synthetic:rank=4,alpha=nan"), {"alpha must be a finite number"});
  expect_error(load("synthetic:rank=4,rank=8"), {"rank is given twice"});
  expect_error(load("synthetic:rank=4,targets=q,q"), {"target q is given twice"});
  expect_error(load("synthetic:rank=4,8"), {"'8' is not key=value"});
  expect_error(load("synthetic:rank=4,rslora=yes"), {"rslora must be true or false"});
}

// ---------------------------------------------------------------------------- merged vs external

// Merged and external compute the same function: (W + s B A) x = W x + s B (A x). In the fp16
// scheme at float32 they differ by one rounding: merged stores fl16(W + s B A), each element
// within half an fp16 ulp, 2^-11 relative (fp16 has an 11-bit significand; the float sums of
// B A and B (A x) add ~1e-7, negligible). So each adapted matrix carries a relative
// Frobenius error e <= 2^-11 (measured below). As in test_golden.cpp, independent errors add
// in quadrature; here 7 perturbed matrices per layer give about e * sqrt(7 L) of the
// logits' RMS, and the test allows 3x that.
void expect_external_matches_merged(const ModelConfig& c, const std::string& weights, uint64_t seed) {
  const Adapter ext = load_adapter("synthetic:rank=8", c, seed, AdapterMode::external);
  const Adapter mer = load_adapter("synthetic:rank=8", c, seed, AdapterMode::merged);
  const WeightSource base(c, weights, seed), ws_ext(c, weights, seed, &ext), ws_mer(c, weights, seed, &mer);

  double e = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (Linear lin : kLinears) {
      const Origin o = base.linear(l, lin);
      const QuantMatrix w = base.host_matrix(o, Scheme::fp16), merged = ws_mer.host_matrix(o, Scheme::fp16);
      const LoraPair& p = *mer.find(l, lin);
      double d = 0, n = 0;
      for (int64_t r = 0; r < w.rows; ++r)
        for (int64_t k = 0; k < w.cols; ++k) {
          double ba = 0;
          for (int64_t j = 0; j < mer.rank; ++j) ba += double(p.b[r * mer.rank + j]) * p.a[j * w.cols + k];
          const double x = w.at(r, k) + mer.scale * ba;  // W + s B A in double
          d += std::pow(merged.at(r, k) - x, 2);
          n += x * x;
        }
      e = std::max(e, std::sqrt(d / n));
    }
  }
  EXPECT_LE(e, std::ldexp(1.0, -11)) << "the merged weight is W + s B A rounded once to fp16";
  EXPECT_GT(e, 0.0);

  const auto lb = logits(base), le = logits(ws_ext), lm = logits(ws_mer);
  const double bound = 3 * e * std::sqrt(7.0 * c.num_hidden_layers);
  EXPECT_LE(rms_rel(lm, le), bound) << "per-matrix rounding " << e;
  // The bound can tell an adapter from none: the adapter moves the logits far more.
  EXPECT_GT(rms_rel(le, lb), 10 * bound) << "the adapter barely changes the model";
}

TEST(Adapter, ExternalAndMergedAgreeWithinOneFp16RoundingOfTheMergedWeight) {
  {
    SCOPED_TRACE("tiny llama, synthetic weights");
    expect_external_matches_merged(tiny(Scheme::fp16), "", 3);
  }
  {
    SCOPED_TRACE("tiny qwen3 checkpoint (q_dim 256 != hidden 128)");
    const std::string dir = std::string(DB_TEST_DATA) + "/hf/tiny-qwen3";
    expect_external_matches_merged(apply_overrides(load_model_config(dir), {Scheme::fp16}), dir, 0);
  }
}

// A scale of zero (alpha=0) leaves every weight and every activation as they were: merged
// adds fmaf(0, d, w) = w, external adds 0 * B (A x) = 0. Bit for bit, in every scheme.
TEST(Adapter, ZeroScaleAdapterEqualsTheBaseModelExactly) {
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4}) {
    SCOPED_TRACE(to_string(s));
    const ModelConfig c = tiny(s);
    const Adapter ext = load_adapter("synthetic:rank=4,alpha=0", c, 5, AdapterMode::external);
    const Adapter mer = load_adapter("synthetic:rank=4,alpha=0", c, 5, AdapterMode::merged);
    EXPECT_EQ(ext.scale, 0.0);
    const WeightSource base(c, "", 5), ws_ext(c, "", 5, &ext), ws_mer(c, "", 5, &mer);
    const auto lb = logits(base, 4);
    EXPECT_EQ(logits(ws_ext, 4), lb);
    EXPECT_EQ(logits(ws_mer, 4), lb);
  }
}

// Merged means: W' = fl16(W) + s B A in float, then the model's canonical quantizer. The
// same bytes as quantizing, by hand, the merged float matrix.
TEST(Adapter, MergedWeightIsTheCanonicalQuantizationOfTheMergedFloatMatrix) {
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4}) {
    SCOPED_TRACE(to_string(s));
    const ModelConfig c = tiny(s);
    const Adapter mer = load_adapter("synthetic:rank=4,targets=k,down", c, 9, AdapterMode::merged);
    const WeightSource base(c, "", 9), ws(c, "", 9, &mer);
    for (Linear lin : {Linear::k, Linear::down, Linear::q}) {
      const Origin o = ws.linear(1, lin);
      const QuantMatrix f = base.host_matrix(o, Scheme::fp16);  // fl16(W), exact in float
      std::vector<float> w(static_cast<size_t>(f.rows * f.cols));
      for (int64_t r = 0; r < f.rows; ++r) f.row(r, w.data() + r * f.cols);
      merge_adapter(mer, 1, lin, w.data(), f.rows, f.cols);  // no-op for q (not a target)
      const QuantMatrix want =
          quantize_matrix(w.data(), f.rows, f.cols, s, c.quant.group_size, c.quant.zero_point);
      const QuantMatrix got = ws.host_matrix(o, s);
      EXPECT_EQ(got.qweight, want.qweight) << short_name(lin);
      EXPECT_EQ(got.scales, want.scales) << short_name(lin);
      EXPECT_EQ(got.zeros, want.zeros) << short_name(lin);
      EXPECT_EQ(got.qweight == base.host_matrix(o, s).qweight, lin == Linear::q) << short_name(lin);
    }
  }
}

// merge_adapter's arithmetic, element by element, against its documented formula.
TEST(Adapter, MergeIsWPlusScaleTimesBA) {
  const ModelConfig c = tiny(Scheme::fp16);
  const Adapter a = load_adapter("synthetic:rank=3,alpha=6,targets=v", c, 2, AdapterMode::merged);
  const MatShape s = linear_shape(c, Linear::v);  // [64, 128]
  std::vector<float> w(static_cast<size_t>(s.elements()), 0.25f);
  merge_adapter(a, 0, Linear::v, w.data(), s.rows, s.cols);
  const LoraPair& p = *a.find(0, Linear::v);
  for (int64_t o = 0; o < s.rows; o += 7)
    for (int64_t i = 0; i < s.cols; i += 5) {
      double ba = 0;
      for (int64_t k = 0; k < 3; ++k) ba += double(p.b[o * 3 + k]) * p.a[k * s.cols + i];
      EXPECT_NEAR(w[o * s.cols + i], 0.25 + 2.0 * ba, 1e-7) << o << "," << i;
    }
}

// A decodebench file already holds quantized weights: merged mode dequantizes them, merges,
// and quantizes again with the canonical quantizer (scales recomputed from W').
TEST(Adapter, MergedIntoAQuantizedFileRequantizesTheDequantizedMergedWeight) {
  for (const std::string scheme : {"int8", "int4"}) {
    SCOPED_TRACE(scheme);
    char tmpl[] = "/tmp/decodebench_adapter_q_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string file = std::string(tmpl) + "/w.safetensors";
    const db_test::Outcome g =
        db_test::run({"gen-weights", "--model", "tiny-" + scheme, "--seed", "4", "-o", file});
    ASSERT_EQ(g.code, 0) << g.err;
    const ModelConfig c = tiny(parse_scheme(scheme));
    const Adapter mer = load_adapter("synthetic:rank=4,targets=gate", c, 4, AdapterMode::merged);
    const WeightSource base(c, file, 4), ws(c, file, 4, &mer);
    const Origin o = ws.linear(0, Linear::gate);
    ASSERT_EQ(o.kind, OriginKind::quantized);
    const QuantMatrix q = base.host_matrix(o, c.quant.scheme);
    std::vector<float> w(static_cast<size_t>(q.rows * q.cols));
    for (int64_t r = 0; r < q.rows; ++r) q.row(r, w.data() + r * q.cols);
    merge_adapter(mer, 0, Linear::gate, w.data(), q.rows, q.cols);
    const QuantMatrix want =
        quantize_matrix(w.data(), q.rows, q.cols, c.quant.scheme, c.quant.group_size, c.quant.zero_point);
    const QuantMatrix got = ws.host_matrix(o, c.quant.scheme);
    EXPECT_EQ(got.qweight, want.qweight);
    EXPECT_EQ(got.scales, want.scales);
    EXPECT_EQ(got.zeros, want.zeros);
    EXPECT_NE(got.qweight, q.qweight);
    EXPECT_EQ(ws.host_matrix(ws.linear(0, Linear::up), c.quant.scheme).qweight,
              base.host_matrix(ws.linear(0, Linear::up), c.quant.scheme).qweight);  // not a target: as stored
    std::error_code ec;
    fs::remove_all(tmpl, ec);
  }
}

// ---------------------------------------------------------------------------- PEFT directories

class PeftDir : public db_test::TempDirTest {
 protected:
  // Writes `name`/adapter_config.json (with `config_json`) and adapter_model.safetensors
  // holding `tensors` (name -> shape, values, dtype).
  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> values;
    DType dtype = DType::f16;
  };
  std::string write(const std::string& name, const std::string& config_json,
                    const std::map<std::string, Tensor>& tensors) {
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    std::ofstream(d / "adapter_config.json") << config_json;
    std::vector<std::vector<uint8_t>> bytes;
    bytes.reserve(tensors.size());
    SafetensorsWriter w((d / "adapter_model.safetensors").string());
    for (const auto& [n, t] : tensors) {
      std::vector<uint8_t> b(t.values.size() * dtype_size(t.dtype));
      for (size_t i = 0; i < t.values.size(); ++i) {  // other dtypes: zero bytes
        if (t.dtype == DType::f32) {
          std::memcpy(&b[4 * i], &t.values[i], 4);
        } else if (t.dtype == DType::f16) {
          const uint16_t h = f32_to_f16(t.values[i]);
          std::memcpy(&b[2 * i], &h, 2);
        }
      }
      bytes.push_back(std::move(b));
      w.add(n, t.dtype, t.shape, bytes.back().data());
    }
    w.finish();
    return d.string();
  }

  // The tensors of `a` under PEFT's names.
  static std::map<std::string, Tensor> tensors_of(const Adapter& a, const ModelConfig& c) {
    std::map<std::string, Tensor> t;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      for (Linear lin : a.targets) {
        const MatShape s = linear_shape(c, lin);
        t[lora_tensor_name(l, lin, false)] = {{a.rank, s.cols}, a.find(l, lin)->a};
        t[lora_tensor_name(l, lin, true)] = {{s.rows, a.rank}, a.find(l, lin)->b};
      }
    return t;
  }

  static std::string config(const std::string& targets, const std::string& extra = "", int r = 4,
                            double alpha = 8) {
    return fmt::format(
        R"({{"peft_type": "LORA", "r": {}, "lora_alpha": {}, "target_modules": {}, "bias": "none",
      "fan_in_fan_out": false, "use_rslora": false, "use_dora": false, "modules_to_save": null,
      "layers_to_transform": null, "rank_pattern": {{}}, "alpha_pattern": {{}}, "lora_dropout": 0.05,
      "task_type": "CAUSAL_LM"{}}})",
        r, alpha, targets, extra.empty() ? "" : ", " + extra);
  }
};

// The synthetic adapter written out as PEFT would save it loads back as the same adapter:
// the same values, scale and targets, and so the same logits in both modes, bit for bit.
TEST_F(PeftDir, SavedSyntheticAdapterLoadsBackIdentically) {
  const ModelConfig c = tiny(Scheme::int8);
  const Adapter syn = load_adapter("synthetic:rank=4,alpha=8,targets=q,v,down", c, 7, AdapterMode::external);
  const std::string d = write("a", config(R"(["q_proj", "v_proj", "down_proj"])"), tensors_of(syn, c));
  for (AdapterMode mode : {AdapterMode::external, AdapterMode::merged}) {
    const Adapter peft = load_adapter(d, c, 0, mode);
    EXPECT_EQ(peft.rank, 4);
    EXPECT_EQ(peft.scale, 2.0);
    EXPECT_EQ(peft.target_names(), syn.target_names());
    for (int64_t l = 0; l < 2; ++l)
      for (Linear lin : syn.targets) {
        EXPECT_EQ(peft.find(l, lin)->a, syn.find(l, lin)->a);
        EXPECT_EQ(peft.find(l, lin)->b, syn.find(l, lin)->b);
      }
    Adapter syn_mode = syn;
    syn_mode.mode = mode;
    const WeightSource a(c, "", 7, &peft), b(c, "", 7, &syn_mode);
    EXPECT_EQ(logits(a, 4), logits(b, 4));
  }
  // adapter_config.json itself names the adapter too.
  EXPECT_EQ(load_adapter(d + "/adapter_config.json", c, 0, AdapterMode::merged).rank, 4);
}

TEST_F(PeftDir, TargetModulesMayBeAllLinearOrARegularExpression) {
  const ModelConfig c = tiny(Scheme::fp16);
  const Adapter all = load_adapter("synthetic:rank=2", c, 1, AdapterMode::merged);
  const std::string d1 =
      write("all", config(R"("all-linear")", R"("use_rslora": true)", 2, 4), tensors_of(all, c));
  const Adapter a1 = load_adapter(d1, c, 0, AdapterMode::merged);
  EXPECT_EQ(a1.targets.size(), 7u);
  EXPECT_DOUBLE_EQ(a1.scale, 4 / std::sqrt(2.0));  // the config's "use_rslora": true wins over false

  const Adapter qv = load_adapter("synthetic:rank=2,targets=q,v", c, 1, AdapterMode::merged);
  const std::string d2 =
      write("re", config(R"x("model\\.layers\\.\\d+\\.self_attn\\.(q|v)_proj")x", "", 2), tensors_of(qv, c));
  EXPECT_EQ(load_adapter(d2, c, 0, AdapterMode::merged).target_names(), (std::vector<std::string>{"q", "v"}));

  // fan_in_fan_out is ignored for nn.Linear targets, as PEFT does: the shapes are the same.
  const std::string d3 =
      write("fifo", config(R"(["q_proj", "v_proj"])", R"("fan_in_fan_out": true)", 2), tensors_of(qv, c));
  EXPECT_EQ(load_adapter(d3, c, 0, AdapterMode::merged).find(1, Linear::v)->b, qv.find(1, Linear::v)->b);
}

// An adapter built by hand (not by the synthetic generator) on the committed HF checkpoint,
// against a checkpoint into which the test merged W + s B A itself, in double. The same
// function, so within one fp16 rounding of the merged weights (see the bound above), in
// both modes.
TEST_F(PeftDir, HandMadeAdapterMatchesAHandMergedCheckpoint) {
  const ModelConfig c = apply_overrides(load_model_config(kTinyLlama), {Scheme::fp16});
  const int r = 2;
  const double alpha = 3, scale = alpha / r;
  auto a_value = [](int64_t l, int lin, int64_t k, int64_t i) {
    return static_cast<float>(0.2 * std::sin(0.7 * i + 1.3 * k + 0.1 * lin + l));
  };
  auto b_value = [](int64_t l, int lin, int64_t o, int64_t k) {
    return static_cast<float>(0.1 * std::cos(0.3 * o - 0.9 * k + 0.2 * lin - l));
  };
  std::map<std::string, Tensor> t;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (Linear lin : {Linear::q, Linear::o, Linear::up}) {
      const MatShape s = linear_shape(c, lin);
      Tensor ta{{r, s.cols}, {}, DType::f32}, tb{{s.rows, r}, {}, DType::f32};
      for (int64_t k = 0; k < r; ++k)
        for (int64_t i = 0; i < s.cols; ++i)
          ta.values.push_back(f16_to_f32(f32_to_f16(a_value(l, int(lin), k, i))));
      for (int64_t o = 0; o < s.rows; ++o)
        for (int64_t k = 0; k < r; ++k)
          tb.values.push_back(f16_to_f32(f32_to_f16(b_value(l, int(lin), o, k))));
      t[lora_tensor_name(l, lin, false)] = ta;
      t[lora_tensor_name(l, lin, true)] = tb;
    }
  const std::string d = write("hand", config(R"(["q_proj", "o_proj", "up_proj"])", "", r, alpha), t);

  // The merged checkpoint: every tensor of the original, the adapted ones as f32 W + s B A.
  const Checkpoint original(kTinyLlama);
  const std::string merged_file = path("merged.safetensors");
  std::vector<std::vector<float>> keep;
  keep.reserve(16);
  {
    SafetensorsWriter w(merged_file);
    for (const std::string& name : original.names()) {
      const TensorInfo& ti = original.get(name);
      bool adapted = false;
      for (int64_t l = 0; l < c.num_hidden_layers && !adapted; ++l)
        for (Linear lin : {Linear::q, Linear::o, Linear::up}) {
          if (name != linear_name(l, lin)) continue;
          adapted = true;
          const Tensor& ta = t.at(lora_tensor_name(l, lin, false));
          const Tensor& tb = t.at(lora_tensor_name(l, lin, true));
          const int64_t rows = ti.shape[0], cols = ti.shape[1];
          std::vector<float> m(static_cast<size_t>(rows * cols));
          for (int64_t o = 0; o < rows; ++o) {
            dense_row(ti, o, cols, m.data() + o * cols);
            for (int64_t i = 0; i < cols; ++i) {
              double ba = 0;
              for (int64_t k = 0; k < r; ++k) ba += double(tb.values[o * r + k]) * ta.values[k * cols + i];
              m[o * cols + i] = static_cast<float>(f16_to_f32(f32_to_f16(m[o * cols + i])) + scale * ba);
            }
          }
          keep.push_back(std::move(m));
          w.add(name, DType::f32, ti.shape, keep.back().data());
          break;
        }
      if (!adapted) w.add(name, ti.dtype, ti.shape, ti.data);
    }
    w.finish();
  }
  ASSERT_EQ(keep.size(), 6u);  // 3 targets x 2 layers

  const WeightSource hand(c, merged_file, 0);
  const auto want = logits(hand);
  const double bound = 3 * std::ldexp(1.0, -11) * std::sqrt(7.0 * c.num_hidden_layers);
  for (AdapterMode mode : {AdapterMode::external, AdapterMode::merged}) {
    const Adapter a = load_adapter(d, c, 0, mode);
    EXPECT_DOUBLE_EQ(a.scale, 1.5);
    const WeightSource ws(c, kTinyLlama, 0, &a);
    EXPECT_LE(rms_rel(logits(ws), want), bound) << (mode == AdapterMode::merged ? "merged" : "external");
  }
  const WeightSource base(c, kTinyLlama, 0);
  EXPECT_GT(rms_rel(logits(base), want), 10 * bound) << "the hand-made adapter barely changes the model";
}

TEST_F(PeftDir, BadAdaptersNameTheFileFieldOrTensor) {
  const ModelConfig c = tiny(Scheme::fp16);
  const Adapter qv = load_adapter("synthetic:rank=4,targets=q,v", c, 1, AdapterMode::merged);
  const auto good = tensors_of(qv, c);
  const std::string targets = R"(["q_proj", "v_proj"])";
  auto load = [&](const std::string& d) { return [&c, d] { load_adapter(d, c, 0, AdapterMode::merged); }; };

  // Tensors of rank 8 under a config that says r=4.
  const Adapter r8 = load_adapter("synthetic:rank=8,targets=q,v", c, 1, AdapterMode::merged);
  expect_error(load(write("rank", config(targets), tensors_of(r8, c))),
               {"adapter_model.safetensors", lora_tensor_name(0, Linear::q, false), "has shape [8, 128]",
                "expected [4, 128]"});

  auto missing = good;
  missing.erase(lora_tensor_name(1, Linear::v, true));
  expect_error(load(write("missing", config(targets), missing)),
               {"no tensor named " + lora_tensor_name(1, Linear::v, true)});

  auto extra = good;
  extra["base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight"] = {{4, 128},
                                                                             std::vector<float>(512, 0.01f)};
  expect_error(
      load(write("extra", config(targets), extra)),
      {"tensor base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight is not the lora_A/lora_B"});

  auto ints = good;
  ints[lora_tensor_name(0, Linear::v, false)].dtype = DType::i8;
  expect_error(load(write("dtype", config(targets), ints)),
               {lora_tensor_name(0, Linear::v, false), "has dtype I8, expected F32, F16 or BF16"});

  for (const std::string t : {"lm_head", "embed_tokens", "c_attn"})
    expect_error(
        load(write("t-" + t, config("[\"q_proj\", \"" + t + "\"]"), good)),
        {"adapter_config.json", "target_modules entry \"" + t + "\" is not a linear", "q_proj, k_proj"});
  expect_error(load(write("t-re", config(R"x(".*(q_proj|lm_head)")x"), good)), {"matches lm_head"});
  expect_error(load(write("t-re0", config(R"("model\\.layers\\.0\\..*q_proj")"), good)),
               {"matches q_proj in 1 of 2 layers"});

  expect_error(load(write("dora", config(targets, R"("use_dora": true)"), good)), {"\"use_dora\" is true"});
  expect_error(load(write("save", config(targets, R"("modules_to_save": ["lm_head"])"), good)),
               {"\"modules_to_save\" is [\"lm_head\"]"});
  expect_error(load(write("layers", config(targets, R"("layers_to_transform": [0])"), good)),
               {"\"layers_to_transform\" is [0]"});
  expect_error(load(write("rp", config(targets, R"("rank_pattern": {"q_proj": 8})"), good)),
               {"\"rank_pattern\""});
  expect_error(load(write("bias", config(targets, R"("bias": "all")"), good)), {"\"bias\" is \"all\""});
  expect_error(load(write("r0", config(targets, "", 0), good)), {"\"r\" must be a positive integer, got 0"});
  expect_error(load(write("json", "{\"r\": 4,", good)), {"adapter_config.json: invalid JSON"});

  fs::create_directories(dir_ / "bin");
  std::ofstream(dir_ / "bin" / "adapter_config.json") << config(targets);
  std::ofstream(dir_ / "bin" / "adapter_model.bin") << "pickle";
  expect_error(load(path("bin")), {"adapter_model.bin", "safetensors only"});
  expect_error(load(path("nowhere")), {"expected a PEFT adapter directory"});
}

// ---------------------------------------------------------------------------- through the binary

db_test::Outcome run(const std::vector<std::string>& args) {
  return db_test::run(args, DB_SOURCE_DIR);
}

TEST_F(PeftDir, RunReportsTheAdapterAndAccountsExternalBytes) {
  const std::vector<std::string> common = {"--model", "tiny-fp16", "--backend", "cpu",      "--tokens",
                                           "4",       "--warmup",  "1",         "--repeat", "1"};
  auto run_ok = [&](std::vector<std::string> extra, const std::string& name) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"-o", path(name)});
    const db_test::Outcome o = run(args);
    EXPECT_EQ(o.code, 0) << o.err;
    return o.code == 0 ? read_results(path(name)).at(0) : Result{};
  };
  const Result base = run_ok({}, "base.json");
  const Result ext = run_ok({"--adapter", "synthetic:rank=4", "--adapter-mode", "external"}, "ext.json");
  const Result mer = run_ok({"--adapter", "synthetic:rank=4,alpha=8,targets=q,v"}, "mer.json");

  EXPECT_EQ(base.config.adapter, "none");
  EXPECT_EQ(ext.config.adapter, "synthetic:rank=4");
  EXPECT_EQ(ext.config.adapter_mode, "external");
  EXPECT_EQ(ext.config.adapter_rank, 4);
  EXPECT_EQ(ext.config.adapter_targets, (std::vector<std::string>{"q", "k", "v", "o", "gate", "up", "down"}));
  EXPECT_EQ(ext.config.adapter_scale, 1.0);
  // tiny: hidden 128, q 128, kv 64, intermediate 256; A [4, in] + B [out, 4], fp16:
  //   q 4*(128+128)*2 = 2048, k and v 4*(128+64)*2 = 1536 each, o 2048,
  //   gate, up, down 4*(128+256)*2 = 3072 each  ->  16384 per layer, 2 layers.
  EXPECT_EQ(ext.bytes.per_token.adapter, 32768u);
  EXPECT_EQ(ext.bytes.per_token.total, base.bytes.per_token.total + 32768u);
  EXPECT_EQ(ext.bytes.stored.adapter, 32768u);

  EXPECT_EQ(mer.config.adapter_mode, "merged");
  EXPECT_EQ(mer.config.adapter_targets, (std::vector<std::string>{"q", "v"}));
  EXPECT_EQ(mer.config.adapter_scale, 2.0);
  EXPECT_EQ(mer.bytes.per_token.adapter, 0u);  // merged: the step reads the base model's bytes
  EXPECT_EQ(mer.bytes.per_token.total, base.bytes.per_token.total);
}

// The CUDA backend runs adapters in both modes (tests/gpu_test_lora.cu checks its numbers).
// Through the binary: on a GPU its result describes the adapter exactly as the CPU backend's
// does; without one the run fails in one line for that reason, not because of the adapter.
TEST_F(PeftDir, CudaBackendReportsTheAdapterAsTheCpuBackendDoes) {
  for (const std::string mode : {"merged", "external"}) {
    SCOPED_TRACE(mode);
    const std::string adapter = "synthetic:rank=4,alpha=8,targets=q,v,down";
    auto args = [&](const std::string& backend, const std::string& out) {
      return std::vector<std::string>{"--model",   "tiny-int8", "--adapter", adapter,  "--adapter-mode", mode,
                                      "--backend", backend,     "--tokens",  "3",      "--warmup",       "1",
                                      "--repeat",  "1",         "-o",        path(out)};
    };
    const db_test::Outcome cpu = run(args("cpu", mode + "-cpu.json"));
    ASSERT_EQ(cpu.code, 0) << cpu.err;
    const db_test::Outcome cuda = run(args("cuda", mode + "-cuda.json"));
    if (cuda.code != 0) {
      EXPECT_EQ(cuda.code, 1) << cuda.err;
      EXPECT_TRUE(cuda.err.find("no CUDA GPU found") != std::string::npos ||
                  cuda.err.find("built without a CUDA backend") != std::string::npos)
          << "the CUDA backend failed for another reason than a missing GPU: " << cuda.err;
      EXPECT_EQ(std::count(cuda.err.begin(), cuda.err.end(), '\n'), 1) << cuda.err;
      continue;
    }
    const Result c = read_results(path(mode + "-cpu.json")).at(0);
    const Result g = read_results(path(mode + "-cuda.json")).at(0);
    EXPECT_EQ(g.device.backend, "cuda");
    EXPECT_EQ(g.config.adapter, c.config.adapter);
    EXPECT_EQ(g.config.adapter_mode, mode);
    EXPECT_EQ(g.config.adapter_mode, c.config.adapter_mode);
    EXPECT_EQ(g.config.adapter_rank, c.config.adapter_rank);
    EXPECT_EQ(g.config.adapter_targets, c.config.adapter_targets);
    EXPECT_EQ(g.config.adapter_scale, c.config.adapter_scale);
    EXPECT_EQ(g.bytes.per_token.adapter, c.bytes.per_token.adapter);
    EXPECT_EQ(g.bytes.stored.adapter, c.bytes.stored.adapter);
    EXPECT_EQ(g.bytes.per_token.total, c.bytes.per_token.total);  // int8.gemv moves no extra bytes
  }
}

// A synthetic spec is command-line text: the command line's check reads it with the
// loader's parser, so a bad one is bad usage (exit 2) before the model is built.
TEST(AdapterRun, BadAdapterFailsInOneLine) {
  db_test::expect_one_line_error(run({"--model", "tiny-fp16", "--backend", "cpu", "--adapter",
                                      "synthetic:rank=4,alpha=abc", "--tokens", "2"}),
                                 2, "alpha must be a finite number, got 'abc'");
}

}  // namespace
