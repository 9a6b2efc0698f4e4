// What the engine tests share: the tiny preset in a scheme, and the tokens and logits of
// free-running greedy steps.
#pragma once

#include <cstdint>
#include <vector>

#include "decodebench/backend.h"
#include "decodebench/config.h"
#include "decodebench/run_spec.h"
#include "engine.cuh"
#include "reference_trace.h"

namespace dbtest {

using db_test::Trace;

// The tiny preset (or another: "tiny-qwen2") with its weights in scheme `s`.
inline db::ModelConfig tiny(db::Scheme s, const char* preset = "tiny") {
  db::RunSpec spec;
  spec.quant = s;
  return db::apply_overrides(db::load_model_config(preset), spec);
}

// `steps` greedy steps from `context` on the engine (the prefill eagerly, then by graph
// replay or eagerly), with the prompt tokens the backends use.
inline Trace run_engine(db::cuda::Engine& e, int64_t context, int64_t steps, bool graph) {
  const int64_t vocab = e.config().vocab_size;
  e.set_first_position(0);
  for (int64_t i = 0; i < context; ++i) {
    e.set_input(i, db::prompt_token(i, vocab));
    e.enqueue_step();
  }
  e.set_first_position(context);
  e.set_input(context, db::prompt_token(context, vocab));
  Trace t;
  for (int64_t i = 0; i < steps; ++i) {
    if (graph)
      e.launch_graph();
    else
      e.enqueue_step();
    t.logits.push_back(e.logits());
    t.tokens.push_back(e.next_token());
  }
  return t;
}

}  // namespace dbtest
