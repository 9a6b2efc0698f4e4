// The KV cache's schemes on the CPU reference: --check's reference stores K and V as the run
// does, an fp8 or int8 cache moves the logits no further than its rounding allows, and the
// greedy tokens of the committed checkpoints at each scheme, measured against an fp16 cache's
// (printed; equality asserted only where the bound promises it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "decodebench/backend.h"
#include "decodebench/cpu_reference.h"
#include "decodebench/decoder.h"
#include "decodebench/kernel_registry.h"
#include "decodebench/protocol.h"
#include "kv_cache_bound.h"
#include "reference_trace.h"

using namespace db;

namespace {

ModelConfig with_cache(ModelConfig c, KvScheme s) {
  c.kv_cache = s;
  return c;
}

// --check replays the steps on a CPU reference built from the run's own WeightSource, whose
// config carries the cache's scheme: a decoder with an fp8 cache is compared with an fp8-cache
// reference (the same arithmetic: no difference at all), never with an fp16 one (which the
// same decoder's logits do differ from).
TEST(KvCacheCheck, TheReferenceStoresKAndVAsTheRunDoes) {
  const ModelConfig c = load_model_config("tiny-int4");
  const WeightSource fp8(with_cache(c, KvScheme::fp8), "", 0);
  const WeightSource fp16(with_cache(c, KvScheme::fp16), "", 0);
  Protocol p;
  p.context = 6;
  p.tokens = 4;
  p.warmup = 0;
  p.repeat = 1;
  p.check = true;
  DecoderSpec spec;
  spec.positions = p.context + p.tokens;
  const std::unique_ptr<Backend> backend = make_cpu_backend();
  const auto check_against = [&](const WeightSource& reference) {
    const std::unique_ptr<Decoder> d =
        backend->decoder(fp8, resolve_kernel("auto", c.quant.scheme), spec, nullptr);
    const Measurement m = measure_decode(*d, p, reference, false);
    EXPECT_TRUE(m.logits_max_rel_err.has_value());
    return m.logits_max_rel_err.value_or(-1);
  };
  EXPECT_EQ(check_against(fp8), 0.0);
  EXPECT_GT(check_against(fp16), 0.0);
}

double rms_rel(const std::vector<float>& got, const std::vector<float>& ref) {
  double d = 0, m = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    d += double(got[i] - ref[i]) * (got[i] - ref[i]);
    m += double(ref[i]) * ref[i];
  }
  return std::sqrt(d / m);
}

// The top logit's lead over the next, relative to the largest logit.
double top2_gap(const std::vector<float>& l) {
  std::vector<float> s = l;
  std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<float>());
  double m = 0;
  for (float x : l) m = std::max(m, double(std::fabs(x)));
  return (s[0] - s[1]) / m;
}

// Greedy steps from position 0: the prompt's tokens first, then each step's argmax.
std::vector<int32_t> greedy(const WeightSource& w, const std::vector<int32_t>& prompt, int64_t steps) {
  return db_test::cpu_trace(w, prompt, steps).tokens;
}

struct Move {
  double worst_rms = 0, worst_max = 0, mean_rms = 0;
  int64_t steps = 0, argmax_same = 0, promised = 0;
};

// The logits of a `scheme` cache against an fp16 cache's, step by step on the same inputs
// (teacher forcing), each position's move held to the bound of kv_cache_bound.h (3 e sqrt(2 L),
// e the scheme's relative rounding error of one stored vector); where the fp16 logits' top two
// are further apart than twice the bound allows either to move, the argmax must not change.
Move logits_move(const ModelConfig& c, const std::string& weights, KvScheme scheme,
                 const std::vector<int32_t>& inputs) {
  const WeightSource w16(with_cache(c, KvScheme::fp16), weights, 0), wq(with_cache(c, scheme), weights, 0);
  const int64_t steps = static_cast<int64_t>(inputs.size());
  CpuModel ref(w16, steps), got(wq, steps);
  const double bound = db_test::kv_logits_bound(c, scheme);
  Move mv;
  mv.steps = steps;
  for (int64_t p = 0; p < steps; ++p) {
    const std::vector<float>& a = ref.step(inputs[static_cast<size_t>(p)], p);
    const std::vector<float>& b = got.step(inputs[static_cast<size_t>(p)], p);
    const double r = rms_rel(b, a), m = db_test::max_rel_err(b, a);
    EXPECT_LE(r, bound) << to_string(scheme) << " position " << p;
    EXPECT_LE(m, bound) << to_string(scheme) << " position " << p;
    mv.worst_rms = std::max(mv.worst_rms, r);
    mv.worst_max = std::max(mv.worst_max, m);
    mv.mean_rms += r / static_cast<double>(steps);
    const bool same = CpuModel::argmax(a) == CpuModel::argmax(b);
    mv.argmax_same += same;
    if (top2_gap(a) > 2 * bound) {
      ++mv.promised;
      EXPECT_TRUE(same) << to_string(scheme) << " position " << p << ": the argmax moved past a lead of "
                        << top2_gap(a) << " of the largest logit";
    }
  }
  EXPECT_GT(mv.worst_rms, 0.0) << to_string(scheme) << ": the cache's rounding changed nothing";
  return mv;
}

void print(const std::string& model, KvScheme s, const ModelConfig& c, const Move& mv) {
  std::printf(
      "%s %s cache: logits against fp16's, %lld positions: RMS move max %.4f mean %.4f, largest %.4f "
      "(bound %.4f); argmax the same at %lld (promised at %lld)\n",
      model.c_str(), to_string(s), static_cast<long long>(mv.steps), mv.worst_rms, mv.mean_rms, mv.worst_max,
      db_test::kv_logits_bound(c, s), static_cast<long long>(mv.argmax_same),
      static_cast<long long>(mv.promised));
}

// A small preset's synthetic weights over 256 positions.
TEST(KvCacheAccuracy, PresetLogitsStayWithinTheBoundTheRoundingImplies) {
  for (const char* preset : {"tiny-int4", "tiny-qwen2-int8"}) {
    const ModelConfig c = load_model_config(preset);
    const std::vector<int32_t> inputs = db_test::backend_prompt(256, c.vocab_size);
    for (KvScheme s : {KvScheme::int8, KvScheme::fp8}) print(preset, s, c, logits_move(c, "", s, inputs));
  }
}

class KvCacheGolden : public ::testing::TestWithParam<const char*> {};

// The committed HF checkpoints (tests/data/hf): from each golden's prompt, the fp16 cache's
// greedy tokens to the checkpoint's max_position_embeddings (the golden's own are among them:
// test_golden.cpp holds the fp16 cache to transformers'). Each scheme's logits on those inputs
// are held to the bound; its own greedy tokens are measured against them and printed: on
// these random models near ties are common, and one changed token changes every later input.
TEST_P(KvCacheGolden, LogitsWithinTheBoundAndGreedyTokensMeasured) {
  const std::string dir = std::string(DB_TEST_DATA) + "/hf/" + GetParam();
  const db_test::Golden g = db_test::read_golden(dir + "/golden.safetensors");
  QuantOverrides fp16;
  fp16.scheme = Scheme::fp16;
  const ModelConfig c = apply_overrides(load_model_config(dir), fp16);
  const std::vector<int32_t> prompt(g.tokens.begin(), g.tokens.begin() + g.prompt);
  const int64_t steps = c.max_position_embeddings;
  const WeightSource w16(c, dir, 0);
  const std::vector<int32_t> ref = greedy(w16, prompt, steps);
  // The inputs of the fp16 cache's steps: the prompt, then each step's argmax.
  std::vector<int32_t> inputs = prompt;
  for (int64_t p = g.prompt - 1; p + 1 < steps; ++p) inputs.push_back(ref[static_cast<size_t>(p)]);
  for (size_t i = static_cast<size_t>(g.prompt); i < g.tokens.size(); ++i)
    ASSERT_EQ(inputs[i], g.tokens[i]) << "the fp16 cache's greedy tokens are the golden's";
  for (KvScheme s : {KvScheme::int8, KvScheme::fp8}) {
    print(GetParam(), s, c, logits_move(c, dir, s, inputs));
    const std::vector<int32_t> got = greedy(WeightSource(with_cache(c, s), dir, 0), prompt, steps);
    int64_t same = 0, first = -1, golden_same = 0;
    const int64_t generated = steps - g.prompt + 1;  // those of positions prompt .. steps
    for (int64_t i = 0; i < generated; ++i) {
      const size_t at = static_cast<size_t>(g.prompt - 1 + i);
      if (got[at] == ref[at])
        ++same;
      else if (first < 0)
        first = i;
      if (g.prompt + i < static_cast<int64_t>(g.tokens.size()) && got[at] == ref[at]) ++golden_same;
    }
    std::printf(
        "%s %s cache: greedy from the %lld-token prompt, %lld tokens: %lld the same as the fp16 cache's "
        "(%.1f%%), the first difference at token %lld; of the golden's %lld, %lld the same\n",
        GetParam(), to_string(s), static_cast<long long>(g.prompt), static_cast<long long>(generated),
        static_cast<long long>(same), 100.0 * static_cast<double>(same) / static_cast<double>(generated),
        static_cast<long long>(first < 0 ? generated : first),
        static_cast<long long>(g.tokens.size()) - static_cast<long long>(g.prompt),
        static_cast<long long>(golden_same));
  }
}

std::string param_name(const ::testing::TestParamInfo<const char*>& info) {
  std::string n = info.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

INSTANTIATE_TEST_SUITE_P(Hf, KvCacheGolden,
                         ::testing::Values("tiny-llama", "tiny-llama-bf16", "tiny-llama-sharded",
                                           "tiny-qwen2", "tiny-qwen3"),
                         param_name);

}  // namespace
