// The measurement protocol (src/measure/protocol.cpp) on a scripted decoder: what it runs, in
// which order, and when it stops adding repetitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "decodebench/config.h"
#include "decodebench/error.h"
#include "decodebench/protocol.h"
#include "decodebench/run_spec.h"
#include "decodebench/stats.h"
#include "decodebench/weights.h"

namespace {

// Each repetition's step times come from a script: repetition r takes `reps[r]` for every
// step (the last entry repeats when the script runs out).
class ScriptedClock final : public db::StepClock {
 public:
  explicit ScriptedClock(std::vector<double> reps) : reps_(std::move(reps)) {}
  const char* name() const override { return "scripted"; }
  void start(int64_t) override { marks_ = 0; }
  void mark() override { ++marks_; }
  std::vector<double> stop() override {
    const double ms = reps_[std::min(rep_++, reps_.size() - 1)];
    return std::vector<double>(marks_, ms);
  }
  size_t repetitions() const { return rep_; }

 private:
  std::vector<double> reps_;
  size_t rep_ = 0;
  size_t marks_ = 0;
};

class ScriptedDecoder final : public db::Decoder {
 public:
  explicit ScriptedDecoder(std::vector<double> reps) : clock_(std::move(reps)) {}
  int64_t batch() const override { return 1; }
  void prefill(int64_t n) override { prefilled += n; }
  void restart(int64_t position, const std::vector<int32_t>& tokens) override {
    restarts.push_back({position, tokens});
    generated_.clear();
  }
  // From the `diverge_after`-th synchronize on, the steps generate other tokens.
  void step() override {
    const bool diverged = diverge_after > 0 && syncs_ >= diverge_after;
    generated_.push_back(static_cast<int32_t>(generated_.size()) + (diverged ? 1 : 0));
  }
  void synchronize() override { ++syncs_; }
  std::vector<int32_t> read_tokens() override { return {generated_.empty() ? 0 : generated_.back()}; }
  std::vector<int32_t> tokens(int64_t, int64_t n) override {
    return {generated_.begin(), generated_.begin() + n};
  }
  std::vector<float> logits(int64_t) override { return {}; }
  db::StepClock& clock() override { return clock_; }
  db::DecoderFacts facts() override { return {}; }

  int64_t prefilled = 0;
  std::vector<std::pair<int64_t, std::vector<int32_t>>> restarts;
  int diverge_after = 0;  // 0: never
  ScriptedClock clock_;

 private:
  std::vector<int32_t> generated_;
  int syncs_ = 0;
};

// A decoder of `batch` sequences that logs each call the protocol makes, without the sequence
// a per-sequence read names. Sequence s's tokens are 1, 2, ... from the restart on.
class CallLog final : public db::Decoder {
 public:
  CallLog(int64_t batch, int64_t vocab) : batch_(batch), vocab_(vocab), clock_({1.0}) {}
  int64_t batch() const override { return batch_; }
  void prefill(int64_t n) override { log.push_back("prefill " + std::to_string(n)); }
  void restart(int64_t position, const std::vector<int32_t>& tokens) override {
    log.push_back("restart " + std::to_string(position) + " x" + std::to_string(tokens.size()));
    steps_ = 0;
  }
  void step() override {
    log.push_back("step");
    ++steps_;
  }
  void synchronize() override { log.push_back("sync"); }
  std::vector<int32_t> read_tokens() override {
    log.push_back("read_tokens");
    return std::vector<int32_t>(static_cast<size_t>(batch_), steps_);
  }
  std::vector<int32_t> tokens(int64_t, int64_t n) override {
    log.push_back("tokens");
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(i + 1);
    return t;
  }
  std::vector<float> logits(int64_t) override {
    log.push_back("logits");
    return std::vector<float>(static_cast<size_t>(vocab_), 0.f);
  }
  db::StepClock& clock() override { return clock_; }
  db::DecoderFacts facts() override { return {}; }

  std::vector<std::string> log;

 private:
  int64_t batch_, vocab_;
  int32_t steps_ = 0;
  ScriptedClock clock_;
};

class Measure : public ::testing::Test {
 protected:
  db::ModelConfig cfg = db::load_model_config("tiny-fp16");
  db::WeightSource weights{cfg, "", 0, nullptr};
};

TEST_F(Measure, PrefillsWarmsUpThenRunsRepeatRepetitionsEachFromTheSamePositionAndToken) {
  ScriptedDecoder d({1.0, 1.1, 1.2});
  db::Protocol p;
  p.context = 7;
  p.tokens = 4;
  p.warmup = 2;
  p.repeat = 3;
  const db::Measurement m = db::measure_decode(d, p, weights, false);
  EXPECT_EQ(d.prefilled, 7);
  ASSERT_EQ(d.restarts.size(), 4u);  // the warm-up, then each repetition
  for (const auto& [pos, tokens] : d.restarts) {
    EXPECT_EQ(pos, 7);
    EXPECT_EQ(tokens, std::vector<int32_t>{db::prompt_token(7, cfg.vocab_size)});
  }
  EXPECT_EQ(m.samples_ms.size(), 12u);
  EXPECT_EQ(m.repetition_medians_ms, (std::vector<double>{1.0, 1.1, 1.2}));
  EXPECT_EQ(m.stop, db::kStopRepeat);
  EXPECT_EQ(m.tokens, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(m.clock, "scripted");
}

TEST_F(Measure, ARepetitionWithOtherTokensFailsTheRun) {
  ScriptedDecoder d({1.0});
  d.diverge_after = 2;  // the warm-up's sync, then repetition 0's: repetition 1 differs
  db::Protocol p;
  p.tokens = 3;
  p.repeat = 3;
  EXPECT_THROW(db::measure_decode(d, p, weights, false), db::Error);
}

TEST_F(Measure, MaxNoiseAddsRepetitionsUntilTheNoiseTargetIsMet) {
  // One outlier among the first three: noise 0.27; each further repetition at 1.0 lowers it.
  ScriptedDecoder d({1.0, 1.5, 1.0, 1.0});
  db::Protocol p;
  p.tokens = 2;
  p.repeat = 3;
  p.max_noise = 0.2;
  p.max_time_s = 3600;
  const db::Measurement m = db::measure_decode(d, p, weights, false);
  EXPECT_EQ(m.stop, db::kStopNoise);
  const size_t n = m.repetition_medians_ms.size();
  EXPECT_LE(db::repetition_noise(m.repetition_medians_ms), 0.2);
  std::vector<double> one_fewer(m.repetition_medians_ms.begin(), m.repetition_medians_ms.end() - 1);
  EXPECT_GT(db::repetition_noise(one_fewer), 0.2) << "it stopped at the first repetition that met the target";
  EXPECT_GT(n, 3u);
}

TEST_F(Measure, MaxNoiseStopsAtTheTimeLimitWhenTheTargetIsOutOfReach) {
  ScriptedDecoder d({1.0, 2.0});  // then 2.0 for ever: never under 1%
  db::Protocol p;
  p.tokens = 2;
  p.repeat = 4;
  p.max_noise = 0.01;
  p.max_time_s = 0;  // spent as soon as --repeat repetitions are done
  const db::Measurement m = db::measure_decode(d, p, weights, false);
  EXPECT_EQ(m.stop, db::kStopTime);
  EXPECT_EQ(m.repetition_medians_ms.size(), 4u);
}

// However much time --max-time leaves, one run holds at most kMaxRepeat repetitions and
// kMaxTimedSteps timed steps (what a result file may hold).
TEST_F(Measure, MaxNoiseStopsAtTheRepetitionLimit) {
  std::vector<double> alternating;  // 1, 2, 1, 2, ...: the noise stays near 1/3
  for (int64_t r = 0; r <= db::kMaxRepeat; ++r) alternating.push_back(r % 2 ? 2.0 : 1.0);
  for (const int64_t tokens : {int64_t{1}, int64_t{2048}}) {
    ScriptedDecoder d(alternating);
    db::Protocol p;
    p.tokens = tokens;
    p.repeat = 2;
    p.max_noise = 0.01;
    p.max_time_s = 86400;
    const db::Measurement m = db::measure_decode(d, p, weights, false);
    EXPECT_EQ(m.stop, db::kStopLimit);
    const int64_t reps = std::min(db::kMaxRepeat, db::kMaxTimedSteps / tokens);
    EXPECT_EQ(m.repetition_medians_ms.size(), static_cast<size_t>(reps)) << tokens << " tokens";
    EXPECT_EQ(m.samples_ms.size(), static_cast<size_t>(reps * tokens));
  }
}

// Batch 1 is a batch of one: the protocol makes the calls at batch 1 that it makes at batch 3,
// in the same order, its per-sequence reads (each repetition's tokens, --check's logits) once
// a sequence. --sync-per-token and --check take every path there is.
TEST_F(Measure, ItCallsADecoderOfOneSequenceAsItCallsOneOfThree) {
  db::Protocol p;
  p.context = 2;
  p.tokens = 3;
  p.sync_per_token = true;
  p.check = true;
  CallLog one(1, cfg.vocab_size), three(3, cfg.vocab_size);
  db::measure_decode(one, p, weights, false);
  db::measure_decode(three, p, weights, false);
  std::vector<std::string> expected;
  for (const std::string& call : one.log) {
    if (call == "tokens" || call == "logits")
      expected.insert(expected.end(), 3, call);
    else
      expected.push_back(call.rfind("restart ", 0) == 0 ? call.substr(0, call.size() - 1) + "3" : call);
  }
  EXPECT_EQ(three.log, expected);
  // A read after each timed step (3 of each of 5 repetitions) and each step of --check (3).
  EXPECT_EQ(std::count(one.log.begin(), one.log.end(), "read_tokens"), 3 * 5 + 3);
}

}  // namespace
