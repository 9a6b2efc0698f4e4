// --batch B: B sequences decoded in lockstep. The CPU reference at B computes every sequence
// exactly as that sequence alone; the protocol runs, checks and records every sequence, and
// at batch 1 makes the calls it always made.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "decodebench/adapter.h"
#include "decodebench/backend.h"
#include "decodebench/config.h"
#include "decodebench/cpu_reference.h"
#include "decodebench/error.h"
#include "decodebench/kernel_registry.h"
#include "decodebench/protocol.h"
#include "decodebench/weights.h"
#include "run.h"

namespace {

using db::CpuModel;
using db::prompt_token;

const std::vector<int64_t> kBatches = {1, 2, 3, 8};

TEST(PromptToken, SequenceZeroIsTheBatchOneStreamAndTheOthersDiffer) {
  const int64_t vocab = 128256;
  for (int64_t i : {0, 1, 2, 127, 4096, 1 << 24})
    EXPECT_EQ(prompt_token(0, i, vocab), prompt_token(i, vocab));
  // Eight sequences, 32 positions: the streams are not copies of each other.
  std::set<std::vector<int32_t>> streams;
  for (int64_t s = 0; s < 8; ++s) {
    std::vector<int32_t> t;
    for (int64_t i = 0; i < 32; ++i) t.push_back(prompt_token(s, i, vocab));
    streams.insert(t);
  }
  EXPECT_EQ(streams.size(), 8u);
}

// Sequence s alone: a model of batch 1 fed sequence s's prompt up to `context`, then its own
// argmax for `steps` steps from prompt_token(s, context). Its tokens and each step's logits.
struct Alone {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};
Alone decode_alone(const db::WeightSource& ws, int64_t s, int64_t context, int64_t steps) {
  const int64_t vocab = ws.config().vocab_size;
  CpuModel m(ws, context + steps, 1);
  for (int64_t i = 0; i < context; ++i) m.step(prompt_token(s, i, vocab), i);
  Alone a;
  int32_t token = prompt_token(s, context, vocab);
  for (int64_t i = 0; i < steps; ++i) {
    a.logits.push_back(m.step(token, context + i));
    token = CpuModel::argmax(a.logits.back());
    a.tokens.push_back(token);
  }
  return a;
}

// The batched reference's logits are a batch-1 model's, bit for bit: the same arithmetic in
// the same order for every sequence, whatever the others are doing.
void expect_each_sequence_as_alone(const db::WeightSource& ws, int64_t batch) {
  const int64_t vocab = ws.config().vocab_size, context = 3, steps = 4;
  CpuModel m(ws, context + steps, 2, batch);
  ASSERT_EQ(m.batch(), batch);
  std::vector<int32_t> tokens(static_cast<size_t>(batch));
  for (int64_t i = 0; i < context; ++i) {
    for (int64_t s = 0; s < batch; ++s) tokens[s] = prompt_token(s, i, vocab);
    m.step_batch(tokens, i);
  }
  for (int64_t s = 0; s < batch; ++s) tokens[s] = prompt_token(s, context, vocab);
  std::vector<Alone> alone;
  for (int64_t s = 0; s < batch; ++s) alone.push_back(decode_alone(ws, s, context, steps));
  for (int64_t i = 0; i < steps; ++i) {
    m.step_batch(tokens, context + i);
    for (int64_t s = 0; s < batch; ++s) {
      EXPECT_EQ(m.logits(s), alone[s].logits[i]) << "batch " << batch << ", sequence " << s << ", step " << i;
      tokens[s] = CpuModel::argmax(m.logits(s));
    }
  }
}

TEST(BatchedReference, EverySequenceComputesAsItWouldAlone) {
  for (const char* model : {"tiny-int4", "tiny-fp16", "tiny-qwen2-int8"}) {
    const db::WeightSource ws(db::load_model_config(model), "", 3, nullptr);
    for (int64_t b : kBatches) {
      SCOPED_TRACE(model);
      expect_each_sequence_as_alone(ws, b);
    }
  }
}

TEST(BatchedReference, AnExternalAdapterAppliesToEverySequence) {
  const db::ModelConfig c = db::load_model_config("tiny-int8");
  const db::Adapter a = db::load_adapter("synthetic:rank=4", c, 5, db::AdapterMode::external);
  const db::WeightSource ws(c, "", 5, &a);
  for (int64_t b : {2, 3}) expect_each_sequence_as_alone(ws, b);
}

TEST(BatchedReference, PlansAKvCacheAndActivationsPerSequenceAndTheWeightsOnce) {
  const db::ModelConfig c = db::load_model_config("tiny-fp16");
  const CpuModel::Plan one = CpuModel::plan(c, 100), three = CpuModel::plan(c, 100, 3);
  EXPECT_EQ(three.weights, one.weights);
  EXPECT_EQ(three.kv_cache, 3 * one.kv_cache);
  EXPECT_GT(three.scratch, one.scratch);
  EXPECT_LT(three.scratch, 3 * one.scratch) << "the RoPE table and the scores are shared";
  const db::WeightSource ws(c, "", 0, nullptr);
  EXPECT_THROW(CpuModel(ws, 10, 1, 0), db::Error);
  CpuModel two(ws, 10, 1, 2);
  EXPECT_THROW(two.step(1, 0), db::Error) << "step() of one token needs a batch of 1";
  EXPECT_THROW(two.step_batch({1, 2, 3}, 0), db::Error) << "one token per sequence";
}

// The CPU backend's decoder at B, through the protocol: every sequence's tokens are that
// sequence's alone, sequence 0's are the batch-1 run's, and every repetition agrees.
class CpuBatch : public ::testing::Test {
 protected:
  db::ModelConfig cfg = db::load_model_config("tiny-int4");
  db::WeightSource weights{cfg, "", 0, nullptr};
  std::unique_ptr<db::Backend> backend = db::make_cpu_backend();

  db::Measurement measure(int64_t batch, const db::Protocol& p, bool is_reference = true) {
    db::DecoderSpec spec;
    spec.positions = p.context + std::max(p.tokens, p.warmup);
    spec.batch = batch;
    const std::unique_ptr<db::Decoder> d =
        backend->decoder(weights, db::resolve_kernel("auto", cfg.quant.scheme), spec, nullptr);
    EXPECT_EQ(d->batch(), batch);
    return db::measure_decode(*d, p, weights, is_reference);
  }
};

TEST_F(CpuBatch, EachSequenceDecodesWhatItDecodesAlone) {
  db::Protocol p;
  p.context = 5;
  p.tokens = 6;
  p.warmup = 2;
  p.repeat = 2;
  const db::Measurement one = measure(1, p);
  for (int64_t b : kBatches) {
    const db::Measurement m = measure(b, p);
    ASSERT_EQ(m.sequence_tokens.size(), static_cast<size_t>(b));
    for (int64_t s = 0; s < b; ++s)
      EXPECT_EQ(m.sequence_tokens[s], decode_alone(weights, s, p.context, p.tokens).tokens)
          << "batch " << b << ", sequence " << s;
    EXPECT_EQ(m.tokens, one.tokens) << "sequence 0 at batch " << b << " is the batch-1 run";
    EXPECT_EQ(m.samples_ms.size(), static_cast<size_t>(p.tokens * p.repeat)) << "one sample per step";
  }
  const db::Measurement eight = measure(8, p);
  const std::set<std::vector<int32_t>> distinct(eight.sequence_tokens.begin(), eight.sequence_tokens.end());
  EXPECT_GT(distinct.size(), 1u) << "the sequences have prompts of their own";
}

TEST_F(CpuBatch, SyncPerTokenReadsEverySequence) {
  db::Protocol p;
  p.tokens = 3;
  p.warmup = 0;
  p.repeat = 2;
  p.sync_per_token = true;
  const db::Measurement m = measure(3, p);
  EXPECT_EQ(m.sequence_tokens.size(), 3u);
}

// --check at B compares every sequence with its own reference; the CPU decoder against the
// CPU reference agrees exactly (the same arithmetic), so the error is 0.
TEST_F(CpuBatch, CheckComparesEverySequenceWithItsReference) {
  db::Protocol p;
  p.context = 2;
  p.tokens = 3;
  p.warmup = 1;
  p.repeat = 1;
  p.check = true;
  for (int64_t b : {1, 3}) {
    const db::Measurement m = measure(b, p, false);
    ASSERT_TRUE(m.logits_max_rel_err.has_value());
    EXPECT_EQ(*m.logits_max_rel_err, 0.0) << "batch " << b;
    EXPECT_EQ(m.reference.find("sequences") != std::string::npos, b > 1) << m.reference;
  }
}

// A decoder of B sequences scripted from the CPU one, perturbing one sequence's logits or
// tokens, to show that the protocol looks at every sequence.
class Perturbed final : public db::Decoder {
 public:
  Perturbed(std::unique_ptr<db::Decoder> d, int64_t sequence) : d_(std::move(d)), sequence_(sequence) {}
  int64_t batch() const override { return d_->batch(); }
  void prefill(int64_t n) override { d_->prefill(n); }
  void restart(int64_t position, const std::vector<int32_t>& tokens) override {
    restarts.push_back(tokens);
    d_->restart(position, tokens);
  }
  void step() override { d_->step(); }
  void synchronize() override {
    d_->synchronize();
    ++syncs_;
  }
  std::vector<int32_t> read_tokens() override { return d_->read_tokens(); }
  // From the second repetition on (the warm-up's and repetition 0's syncs), sequence_'s
  // tokens change.
  std::vector<int32_t> tokens(int64_t s, int64_t n) override {
    std::vector<int32_t> t = d_->tokens(s, n);
    if (diverge && s == sequence_ && syncs_ > 2 && !t.empty()) t[0] += 1;
    return t;
  }
  std::vector<float> logits(int64_t s) override {
    std::vector<float> l = d_->logits(s);
    if (s == sequence_ && !l.empty()) l[0] += 1.0f;
    return l;
  }
  db::StepClock& clock() override { return d_->clock(); }
  db::DecoderFacts facts() override { return d_->facts(); }
  bool diverge = false;
  std::vector<std::vector<int32_t>> restarts;

 private:
  std::unique_ptr<db::Decoder> d_;
  int64_t sequence_;
  int syncs_ = 0;
};

TEST_F(CpuBatch, TheProtocolChecksEverySequence) {
  db::DecoderSpec spec;
  spec.positions = 8;
  spec.batch = 3;
  const db::KernelInfo& kernel = db::resolve_kernel("auto", cfg.quant.scheme);
  db::Protocol p;
  p.context = 2;
  p.tokens = 3;
  p.warmup = 1;
  p.repeat = 2;
  {
    Perturbed d(backend->decoder(weights, kernel, spec, nullptr), 2);
    p.check = true;
    const db::Measurement m = db::measure_decode(d, p, weights, false);
    EXPECT_GT(*m.logits_max_rel_err, 0.0) << "sequence 2's logits were off";
    ASSERT_GE(d.restarts.size(), 1u);
    for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(d.restarts[0][s], prompt_token(s, 2, cfg.vocab_size));
  }
  {
    Perturbed d(backend->decoder(weights, kernel, spec, nullptr), 1);
    d.diverge = true;
    p.check = false;
    try {
      db::measure_decode(d, p, weights, true);
      ADD_FAILURE() << "a sequence whose tokens changed between repetitions passed";
    } catch (const db::Error& e) {
      EXPECT_NE(std::string(e.what()).find("in sequence 1 of 3"), std::string::npos) << e.what();
    }
  }
}

// A backend that decodes one sequence at a time (the defaults) refuses --batch 2 with one
// line that says so, before anything loads.
TEST(BatchSupport, ABackendOfBatchOneRefusesMore) {
  class One final : public db::Backend {
   public:
    db::Environment environment() override { return {}; }
    std::unique_ptr<db::Decoder> decoder(const db::WeightSource&, const db::KernelInfo&,
                                         const db::DecoderSpec&, db::BackendReuse*) override {
      return nullptr;
    }
    std::optional<db::ClockState> clock_state() override { return std::nullopt; }
  } one;
  EXPECT_NO_THROW(db::check_batch_supported(one, db::BackendKind::cuda, 1));
  try {
    db::check_batch_supported(one, db::BackendKind::cuda, 2);
    ADD_FAILURE() << "no error";
  } catch (const db::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("--batch 2: the cuda backend decodes at most 1 sequence per step", 0), 0u) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  EXPECT_EQ(one.compute_peak(db::Scheme::int4).TFLOPS, 0.0) << "the default measures nothing";
  EXPECT_NO_THROW(db::check_batch_supported(*db::make_cpu_backend(), db::BackendKind::cpu, db::kMaxBatch));
}

// The CPU backend measures its float32 throughput for the compute floor.
TEST(BatchSupport, TheCpuBackendMeasuresItsComputeThroughput) {
  const db::ComputePeak p = db::make_cpu_backend()->compute_peak(db::Scheme::int4);
  EXPECT_GT(p.TFLOPS, 0.0);
  EXPECT_LT(p.TFLOPS, 100.0) << "a host core does not reach 100 TFLOPS of float32";
  EXPECT_NE(p.probe.find("float32"), std::string::npos) << p.probe;
}

}  // namespace
