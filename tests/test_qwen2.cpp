// Qwen2's q/k/v biases: synthetic ones, an HF checkpoint's read strictly, the weights file
// written by gen-weights, and the CPU reference adding them to q, k and v before RoPE.
#include <gtest/gtest.h>
#include "temp_dir.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "decodebench/cpu_reference.h"
#include "decodebench/error.h"
#include "decodebench/half.h"
#include "decodebench/safetensors.h"
#include "decodebench/weights.h"
#include "reference_trace.h"

using namespace db;

namespace {

ModelConfig tiny_qwen2(Scheme s = Scheme::fp16) {
  return apply_overrides(load_model_config("tiny-qwen2"), {s});
}

// The same shapes computed as llama: what qwen2 is without its biases.
ModelConfig as_llama(ModelConfig c) {
  c.arch = Arch::llama;
  return c;
}

// Logits of `steps` teacher-forced steps over the backends' prompt, one vector per step.
std::vector<std::vector<float>> logits(const WeightSource& ws, int64_t steps = 4) {
  return db_test::cpu_trace(ws, db_test::backend_prompt(steps, ws.config().vocab_size), steps,
                            /*record_from=*/0, /*threads=*/1)
      .logits;
}

// Largest |a - b| relative to the largest |b|.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, double(std::fabs(a[i] - b[i])));
    m = std::max(m, double(std::fabs(b[i])));
  }
  return d / m;
}

// The bias value a checkpoint holds at element i of layer l's `lin` bias.
using BiasFn = std::function<float(int64_t layer, Linear lin, int64_t i)>;

class Qwen2Checkpoint : public db_test::TempDirTest {
 protected:
  // An HF checkpoint of tiny-qwen2 (model.safetensors): the synthetic model's tensors in fp16
  // under their HF names, and q/k/v biases in f32 from `bias`. `skip` leaves one tensor out;
  // `bias_rows` overrides the length of every k_proj bias (a wrong shape).
  std::string write(const BiasFn& bias, const std::string& skip = "", int64_t bias_rows = -1) {
    const ModelConfig c = tiny_qwen2();
    const WeightSource src(c, "", 3);
    const std::string file = path("model.safetensors");
    SafetensorsWriter w(file);
    auto matrix = [&](const Origin& o) {
      if (o.name == skip) return;
      const QuantMatrix m = src.host_matrix(o, Scheme::fp16);
      w.add(o.name, DType::f16, o.shape,
            [m](uint8_t* out) { std::memcpy(out, m.qweight.data(), m.qweight.size()); });
    };
    auto vector = [&](const Origin& o) {
      if (o.name == skip) return;
      const std::vector<float> v = src.host_vector(o);
      w.add(o.name, DType::f16, o.shape, [v](uint8_t* out) {
        for (size_t i = 0; i < v.size(); ++i) {
          const uint16_t h = f32_to_f16(v[i]);
          std::memcpy(out + 2 * i, &h, 2);
        }
      });
    };
    matrix(src.embedding());
    matrix(src.lm_head());
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      for (Linear lin : kLinears) matrix(src.linear(l, lin));
      vector(src.vector(layer_norm_name(l, false), c.hidden_size));
      vector(src.vector(layer_norm_name(l, true), c.hidden_size));
      for (Linear lin : kBiasedLinears) {
        const std::string name = bias_name(l, lin);
        if (name == skip) continue;
        int64_t n = linear_shape(c, lin).rows;
        if (lin == Linear::k && bias_rows > 0) n = bias_rows;
        w.add(name, DType::f32, {n}, [=](uint8_t* out) {
          for (int64_t i = 0; i < n; ++i) {
            const float v = bias(l, lin, i);
            std::memcpy(out + 4 * i, &v, 4);
          }
        });
      }
    }
    vector(src.vector(kFinalNormName, c.hidden_size));
    w.finish();
    return file;
  }
};

// A bias on one of q, k, v (a different value per element), zero on the others.
BiasFn only(Linear which) {
  return [which](int64_t l, Linear lin, int64_t i) {
    return lin == which ? 0.25f + 0.01f * static_cast<float>((i * 7 + l * 3) % 23) : 0.f;
  };
}

TEST_F(Qwen2Checkpoint, ZeroBiasesGiveTheLlamaLogitsExactly) {
  const std::string file = write([](int64_t, Linear, int64_t) { return 0.f; });
  const WeightSource qwen(tiny_qwen2(), file, 0), llama(as_llama(tiny_qwen2()), file, 0);
  const auto q = logits(qwen), l = logits(llama);
  for (size_t i = 0; i < q.size(); ++i) EXPECT_EQ(q[i], l[i]) << "step " << i;
}

// At position 0 the softmax runs over one position, so q and k cannot change anything there.
// At later positions a k bias changes the scores only because it is added before RoPE: after
// it, q . b would be one constant over positions, which the softmax cancels.
TEST_F(Qwen2Checkpoint, KBiasActsOnlyThroughRopeAndQBiasNotAtPositionZero) {
  const std::string zero = write([](int64_t, Linear, int64_t) { return 0.f; });
  const auto base = logits(WeightSource(tiny_qwen2(), zero, 0));
  for (Linear lin : {Linear::q, Linear::k}) {
    SCOPED_TRACE(short_name(lin));
    const std::string file = write(only(lin));
    const auto got = logits(WeightSource(tiny_qwen2(), file, 0));
    EXPECT_LT(rel_diff(got[0], base[0]), 1e-6);
    for (size_t i = 1; i < got.size(); ++i) EXPECT_GT(rel_diff(got[i], base[i]), 1e-3) << "step " << i;
  }
}

// Softmax weights sum to one, so a v bias adds exactly b_v to every head's attention output,
// position 0 included.
TEST_F(Qwen2Checkpoint, VBiasMovesEveryPosition) {
  const std::string zero = write([](int64_t, Linear, int64_t) { return 0.f; });
  const auto base = logits(WeightSource(tiny_qwen2(), zero, 0));
  const auto got = logits(WeightSource(tiny_qwen2(), write(only(Linear::v)), 0));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_GT(rel_diff(got[i], base[i]), 1e-3) << "step " << i;
}

TEST_F(Qwen2Checkpoint, BiasesAreReadAsTheirTensorsHoldThem) {
  const BiasFn bias = [](int64_t l, Linear lin, int64_t i) {
    return 0.1f * static_cast<float>(l + 1) + (lin == Linear::v ? -0.003f : 0.002f) * static_cast<float>(i);
  };
  const WeightSource ws(tiny_qwen2(), write(bias), 0);
  for (int64_t l = 0; l < 2; ++l)
    for (Linear lin : kBiasedLinears) {
      const Origin o = ws.bias(l, lin);
      EXPECT_EQ(o.name, bias_name(l, lin));
      EXPECT_EQ(o.kind, OriginKind::dense);
      const std::vector<float> v = ws.host_vector(o);
      ASSERT_EQ(static_cast<int64_t>(v.size()), linear_shape(ws.config(), lin).rows);
      for (size_t i = 0; i < v.size(); ++i)  // stored fp16 on every backend
        ASSERT_EQ(v[i], f16_to_f32(f32_to_f16(bias(l, lin, static_cast<int64_t>(i))))) << o.name << " " << i;
    }
  EXPECT_THROW(ws.bias(0, Linear::o), Error);  // o_proj has none
}

TEST_F(Qwen2Checkpoint, MissingOrMisshapenBiasIsRefusedByName) {
  const BiasFn bias = only(Linear::k);
  const std::string missing = bias_name(1, Linear::k);
  std::string file = write(bias, missing);
  try {
    WeightSource ws(tiny_qwen2(), file, 0);
    FAIL() << "a checkpoint without " << missing << " loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  file = write(bias, "", 65);
  try {
    WeightSource ws(tiny_qwen2(), file, 0);
    FAIL() << "a k_proj bias of 65 elements loaded";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(bias_name(0, Linear::k)), std::string::npos) << m;
    EXPECT_NE(m.find("[65]"), std::string::npos) << m;
    EXPECT_NE(m.find("[64]"), std::string::npos) << m;
  }
}

TEST(Qwen2Synthetic, BiasesAreSeededNormLikeAndMoveTheLogits) {
  const WeightSource a(tiny_qwen2(), "", 9), b(tiny_qwen2(), "", 9), other(tiny_qwen2(), "", 10);
  std::set<float> seen;
  for (Linear lin : kBiasedLinears) {
    const Origin o = a.bias(1, lin);
    EXPECT_EQ(o.kind, OriginKind::synthetic);
    EXPECT_EQ(o.shape, std::vector<int64_t>{linear_shape(a.config(), lin).rows});
    const std::vector<float> v = a.host_vector(o);
    EXPECT_EQ(v, b.host_vector(b.bias(1, lin)));
    EXPECT_NE(v, other.host_vector(other.bias(1, lin)));
    for (float x : v) {
      EXPECT_GE(x, 0.9f);
      EXPECT_LE(x, 1.1f);
      seen.insert(x);
    }
  }
  EXPECT_GT(seen.size(), 100u);  // not one value repeated
  // The same synthetic matrices computed as llama: the biases are what differs.
  const auto q = logits(a), l = logits(WeightSource(as_llama(tiny_qwen2()), "", 9));
  for (size_t i = 0; i < q.size(); ++i) EXPECT_GT(rel_diff(q[i], l[i]), 1e-3) << "step " << i;
}

TEST(Qwen2Synthetic, CpuPlanCountsTheBiases) {
  const CpuModel::Plan q = CpuModel::plan(tiny_qwen2(), 100), l = CpuModel::plan(as_llama(tiny_qwen2()), 100);
  EXPECT_EQ(q.weights - l.weights, 4ull * 2 * (128 + 64 + 64));  // float, 2 layers of q_dim + 2 kv_dim
  const WeightSource ws(tiny_qwen2(), "", 0);
  const CpuModel m(ws, 100, 1);
  EXPECT_EQ(m.weight_bytes(), q.weights);
}

class Qwen2WeightsFile : public db_test::TempDirTest {};

// gen-weights writes the biases under their HF names; the file gives the synthetic model's
// logits exactly, in every scheme.
TEST_F(Qwen2WeightsFile, GenWeightsRoundTripsTheBiases) {
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4}) {
    SCOPED_TRACE(to_string(s));
    const std::string file = path(std::string("q-") + to_string(s) + ".safetensors");
    const db_test::Outcome o = db_test::run(
        {"gen-weights", "--model", "tiny-qwen2", "--quant", to_string(s), "--seed", "4", "-o", file});
    ASSERT_EQ(o.code, 0) << o.err;
    const Checkpoint ck(file);
    for (Linear lin : kBiasedLinears) {
      const TensorInfo* t = ck.find(bias_name(1, lin));
      ASSERT_NE(t, nullptr) << bias_name(1, lin);
      EXPECT_EQ(t->dtype, DType::f16);
    }
    const ModelConfig c = tiny_qwen2(s);
    const WeightSource synthetic(c, "", 4), loaded(c, file, 0);
    const auto a = logits(synthetic), b = logits(loaded);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i;
  }
}

TEST(Qwen2Run, CpuBackendRunsTinyQwen2) {
  const db_test::Outcome o = db_test::run(
      {"--model", "tiny-qwen2-int4", "--backend", "cpu", "--tokens", "4", "--warmup", "1", "--repeat", "1"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("qwen2"), std::string::npos) << o.out;
}

}  // namespace
