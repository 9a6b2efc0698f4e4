// The CPU reference against transformers (scripts/make_goldens.py): tiny random Llama (GQA,
// llama3 rope scaling) and Qwen3 (q/k norm, tied embeddings) checkpoints loaded through
// --weights, with the logits transformers computed in float32.
#include <gtest/gtest.h>

#include <cmath>

#include "decodebench/cpu_reference.h"
#include "decodebench/run_spec.h"
#include "decodebench/safetensors.h"

using namespace db;

namespace {

struct Golden {
  std::vector<int32_t> tokens;  // prompt + generated
  std::vector<float> logits;    // [tokens - 1, vocab]
  int64_t prompt = 0, vocab = 0;
};

std::string dir(const char* model) { return std::string(DB_TEST_DATA) + "/hf/" + model; }

Golden load_golden(const char* model) {
  const SafetensorsFile f(dir(model) + "/golden.safetensors");
  const TensorInfo& t = f.get("tokens");
  const TensorInfo& l = f.get("logits");
  Golden g;
  g.tokens.resize(static_cast<size_t>(t.elements()));
  std::memcpy(g.tokens.data(), t.data, t.nbytes);
  g.logits.resize(static_cast<size_t>(l.elements()));
  std::memcpy(g.logits.data(), l.data, l.nbytes);
  g.prompt = std::stoll(f.metadata().at("prompt_length"));
  g.vocab = l.shape.at(1);
  return g;
}

ModelConfig config_of(const char* model, Scheme s) {
  RunSpec spec;
  spec.quant = s;
  if (s == Scheme::int4) spec.group_size = 32;
  return apply_overrides(load_model_config(dir(model)), spec);
}

double max_rel(const float* a, const float* b, int64_t n) {
  double d = 0, m = 0;
  for (int64_t i = 0; i < n; ++i) {
    d = std::max(d, double(std::fabs(a[i] - b[i])));
    m = std::max(m, double(std::fabs(b[i])));
  }
  return d / m;
}

double rms_rel(const float* a, const float* b, int64_t n) {
  double d = 0, m = 0;
  for (int64_t i = 0; i < n; ++i) {
    d += double(a[i] - b[i]) * (a[i] - b[i]);
    m += double(b[i]) * b[i];
  }
  return std::sqrt(d / m);
}

class GoldenTest : public ::testing::TestWithParam<const char*> {};

// Both sides compute in float32 on the same fp16-exact weights; only summation order
// differs, ~1e-6 relative. The bound is 1e-4.
TEST_P(GoldenTest, Fp16ReproducesTransformersLogitsAndTokens) {
  const Golden g = load_golden(GetParam());
  const ModelConfig c = config_of(GetParam(), Scheme::fp16);
  const WeightSource ws(c, dir(GetParam()), 0);
  const int64_t steps = static_cast<int64_t>(g.tokens.size()) - 1;
  CpuModel m(ws, steps);
  for (int64_t p = 0; p < steps; ++p) {  // teacher forcing: the golden sequence
    const std::vector<float>& l = m.step(g.tokens[p], p);
    ASSERT_LE(max_rel(l.data(), &g.logits[p * g.vocab], g.vocab), 1e-4) << GetParam() << " position " << p;
  }
  // Free-running greedy from the prompt gives transformers' tokens.
  CpuModel free(ws, steps);
  int32_t token = 0;
  for (int64_t p = 0; p < steps; ++p) {
    token = CpuModel::argmax(free.step(p < g.prompt ? g.tokens[p] : token, p));
    if (p >= g.prompt - 1) ASSERT_EQ(token, g.tokens[p + 1]) << GetParam() << " generated position " << p + 1;
  }
}

// Quantized runs: round-to-nearest perturbs each weight matrix by a relative (Frobenius)
// error e = ||W - Q(W)|| / ||W||, measured here on the model's own matrices. A logit is
// reached through 2 residual writes per layer plus the lm_head, so independent errors add
// in quadrature to about e * sqrt(2 L + 1) of the logits' RMS; the test allows 3x that.
TEST_P(GoldenTest, QuantizedLogitsStayWithinTheBoundTheirRoundingImplies) {
  const Golden g = load_golden(GetParam());
  for (Scheme s : {Scheme::int8, Scheme::int4}) {
    const ModelConfig c = config_of(GetParam(), s);
    const WeightSource ws(c, dir(GetParam()), 0);
    double e = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      for (Linear lin : kLinears) {
        const Origin o = ws.linear(l, lin);
        const QuantMatrix q = ws.host_matrix(o, s), f = ws.host_matrix(o, Scheme::fp16);
        double d = 0, n = 0;
        for (int64_t r = 0; r < q.rows; ++r)
          for (int64_t k = 0; k < q.cols; ++k) {
            d += std::pow(q.at(r, k) - f.at(r, k), 2);
            n += std::pow(f.at(r, k), 2);
          }
        e = std::max(e, std::sqrt(d / n));
      }
    }
    const double bound = 3 * e * std::sqrt(2.0 * c.num_hidden_layers + 1);
    const int64_t steps = static_cast<int64_t>(g.tokens.size()) - 1;
    CpuModel m(ws, steps);
    double worst = 0;
    for (int64_t p = 0; p < steps; ++p) {
      const std::vector<float>& l = m.step(g.tokens[p], p);
      worst = std::max(worst, rms_rel(l.data(), &g.logits[p * g.vocab], g.vocab));
    }
    EXPECT_LE(worst, bound) << GetParam() << " " << to_string(s) << ": per-matrix error " << e;
    EXPECT_GT(worst, 0.0);  // quantization did change something
  }
}

INSTANTIATE_TEST_SUITE_P(Hf, GoldenTest, ::testing::Values("tiny-llama", "tiny-qwen3"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
