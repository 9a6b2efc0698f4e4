// What the engine tests share: the tiny preset in a scheme, and the tokens and logits of
// free-running greedy steps.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "decodebench/backend.h"
#include "decodebench/config.h"
#include "decodebench/cpu_reference.h"
#include "engine.cuh"
#include "reference_trace.h"

namespace dbtest {

using db_test::Trace;

// The tiny preset (or another: "tiny-qwen2") with its weights in scheme `s`.
inline db::ModelConfig tiny(db::Scheme s, const char* preset = "tiny") {
  return db::apply_overrides(db::load_model_config(preset), {s});
}

// `steps` greedy steps from `context` on the engine (the prefill eagerly, then by graph
// replay or eagerly), with the prompt tokens the backends use.
inline Trace run_engine(db::cuda::Engine& e, int64_t context, int64_t steps, bool graph) {
  const int64_t vocab = e.config().vocab_size;
  e.set_first_position(0);
  for (int64_t i = 0; i < context; ++i) {
    e.set_inputs(i, {db::prompt_token(i, vocab)});
    e.enqueue_step();
  }
  e.set_first_position(context);
  e.set_inputs(context, {db::prompt_token(context, vocab)});
  Trace t;
  for (int64_t i = 0; i < steps; ++i) {
    if (graph)
      e.launch_graph();
    else
      e.enqueue_step();
    t.logits.push_back(e.logits(0));
    t.tokens.push_back(e.next_tokens()[0]);
  }
  return t;
}

// The GPU keeps activations in fp16 between kernels and accumulates in fp16 inside 16-byte
// chunks (each rounding ~2^-11 relative); through 2 layers and the lm_head that stays under
// 1e-2 of the largest logit. dequant-cublas rounds every dequantized weight to fp16 once more
// (2^-12), inside the same bound.
constexpr double kLogitsBound = 1e-2;

// Token `got` where `ref`'s logits pick `want`: allowed only at a tie, where the two logits
// differ by less than the bound (the precision of the arithmetic).
inline void expect_tie(const std::vector<float>& ref, int32_t want, int32_t got, const std::string& what) {
  double mx = 0;
  for (float v : ref) mx = std::max(mx, double(std::fabs(v)));
  EXPECT_LE(ref[want] - ref[got], 2 * kLogitsBound * mx)
      << what << ": " << got << " instead of " << want << " outside a tie";
}

// The engine's teacher-forced logits against the reference's, step by step: within the bound,
// and the same argmax except at a tie (expect_tie).
inline void expect_reference_logits(const std::vector<std::vector<float>>& gpu, const Trace& cpu,
                                    const std::string& what) {
  for (size_t i = 0; i < cpu.logits.size(); ++i) {
    const std::vector<float>& ref = cpu.logits[i];
    ASSERT_LE(db_test::max_rel_err(gpu[i], ref), kLogitsBound) << what << " step " << i;
    const int32_t want = db::CpuModel::argmax(ref), got = db::CpuModel::argmax(gpu[i]);
    if (got != want) expect_tie(ref, want, got, fmt::format("{} step {}: argmax", what, i));
  }
}

}  // namespace dbtest
