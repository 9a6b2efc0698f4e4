// The tokens and logits of decode steps (Trace), and the CPU reference's over a prompt then
// greedy steps: what the CPU tests compare two models by, and what the GPU tests hold the
// engine to. Host code only, so both suites build it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "decodebench/cpu_reference.h"
#include "decodebench/decoder.h"
#include "decodebench/safetensors.h"

namespace db_test {

struct Trace {
  std::vector<int32_t> tokens;             // each recorded step's argmax
  std::vector<std::vector<float>> logits;  // each recorded step's
};

// The prompt the backends feed before the timed steps: prompt_token(0 .. n-1).
inline std::vector<int32_t> backend_prompt(int64_t n, int64_t vocab) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(db::prompt_token(i, vocab));
  return p;
}

// `steps` steps of the CPU reference from position 0: the prompt's tokens first (teacher
// forcing), then greedy, each step's input the argmax of the step before. Records every step's
// logits and argmax from position `record_from` on, prompt positions included.
inline Trace cpu_trace(const db::WeightSource& ws, const std::vector<int32_t>& prompt, int64_t steps,
                       int64_t record_from = 0, int threads = 0) {
  if (prompt.empty()) throw std::invalid_argument("cpu_trace: an empty prompt has no first token");
  db::CpuModel m(ws, steps, threads);
  Trace t;
  int32_t token = prompt[0];
  for (int64_t pos = 0; pos < steps; ++pos) {
    if (pos < static_cast<int64_t>(prompt.size())) token = prompt[static_cast<size_t>(pos)];
    const std::vector<float>& logits = m.step(token, pos);
    token = db::CpuModel::argmax(logits);
    if (pos < record_from) continue;
    t.logits.push_back(logits);
    t.tokens.push_back(token);
  }
  return t;
}

// The largest difference between two logit vectors relative to the largest of `ref`.
inline double max_rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
  double d = 0, m = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    d = std::max(d, double(std::fabs(got[i] - ref[i])));
    m = std::max(m, double(std::fabs(ref[i])));
  }
  return d / m;
}

// A transformers golden (scripts/make_goldens.py): the prompt and the greedy tokens after it,
// and float32 logits at every position but the last.
struct Golden {
  std::vector<int32_t> tokens;  // prompt + generated
  std::vector<float> logits;    // [tokens - 1, vocab]
  int64_t prompt = 0, vocab = 0;
  const float* at(int64_t pos) const { return &logits[static_cast<size_t>(pos * vocab)]; }
};

inline Golden read_golden(const std::string& file) {
  const db::SafetensorsFile f(file);
  const db::TensorInfo& t = f.get("tokens");
  const db::TensorInfo& l = f.get("logits");
  Golden g;
  g.tokens.resize(static_cast<size_t>(t.elements()));
  std::memcpy(g.tokens.data(), t.data, t.nbytes);
  g.logits.resize(static_cast<size_t>(l.elements()));
  std::memcpy(g.logits.data(), l.data, l.nbytes);
  g.prompt = std::stoll(f.metadata().at("prompt_length"));
  g.vocab = l.shape.at(1);
  return g;
}

}  // namespace db_test
