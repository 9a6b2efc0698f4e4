// The measurement protocol (see include/decodebench/measure.h), the same for every backend.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "decodebench/cpu_reference.h"
#include "decodebench/error.h"
#include "decodebench/measure.h"
#include "decodebench/synth.h"

namespace db {

int32_t prompt_token(int64_t index, int64_t vocab) {
  return static_cast<int32_t>(synth::mix64(0x70726f6d7074ull ^ static_cast<uint64_t>(index)) %
                              static_cast<uint64_t>(vocab));
}

namespace {

// Replays the first steps after the prefill with the CPU float32 reference on the same
// weights, feeding both the decoder's tokens, and returns max |got - ref| / max |ref|.
double check_logits(Decoder& d, const Protocol& p, const WeightSource& weights, int64_t steps) {
  const int64_t vocab = weights.config().vocab_size;
  CpuModel cpu(weights, p.context + steps);
  for (int64_t i = 0; i < p.context; ++i) cpu.step(prompt_token(i, vocab), i);
  int32_t token = prompt_token(p.context, vocab);
  d.restart(p.context, token);
  double worst = 0;
  for (int64_t i = 0; i < steps; ++i) {
    d.step();
    const std::vector<float> got = d.logits();
    const std::vector<float>& ref = cpu.step(token, p.context + i);
    double diff = 0, mag = 0;
    for (size_t k = 0; k < ref.size(); ++k) {
      diff = std::max(diff, static_cast<double>(std::fabs(got[k] - ref[k])));
      mag = std::max(mag, static_cast<double>(std::fabs(ref[k])));
    }
    worst = std::max(worst, mag > 0 ? diff / mag : diff);
    token = d.read_token();
  }
  return worst;
}

}  // namespace

Measurement measure_decode(Decoder& d, const Protocol& p, const WeightSource& weights, bool is_reference) {
  const int64_t vocab = weights.config().vocab_size;
  Measurement out;
  StepClock& clock = d.clock();
  out.clock = clock.name();

  const auto t0 = std::chrono::steady_clock::now();
  d.prefill(p.context);
  out.prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const int32_t first = prompt_token(p.context, vocab);
  d.restart(p.context, first);
  for (int64_t i = 0; i < p.warmup; ++i) d.step();
  d.synchronize();

  // Every repetition restarts at --context from the same token; its steps are issued back to
  // back (the host waits only with --sync-per-token) with a clock mark between them.
  for (int64_t r = 0; r < p.repeat; ++r) {
    d.restart(p.context, first);
    int32_t read = 0;
    clock.start(p.tokens);
    for (int64_t i = 0; i < p.tokens; ++i) {
      d.step();
      clock.mark();
      if (p.sync_per_token) read = d.read_token();  // a serving loop reads each token
    }
    d.synchronize();
    const std::vector<double> ms = clock.stop();
    out.samples_ms.insert(out.samples_ms.end(), ms.begin(), ms.end());
    const std::vector<int32_t> tokens = d.tokens(p.tokens);
    if (p.sync_per_token && !tokens.empty() && read != tokens.back())
      fail("the token read back per step ({}) differs from the recorded one ({})", read, tokens.back());
    // The same tokens every time, or the step is not a function of its inputs.
    if (r == 0)
      out.tokens = tokens;
    else if (tokens != out.tokens)
      fail("repetition {} generated different tokens than repetition 0: the decode step is not deterministic",
           r);
  }

  if (p.check && is_reference) {
    out.logits_max_rel_err = 0.0;
    out.reference = "the cpu backend is the float32 reference itself";
  } else if (p.check) {
    const int64_t steps = std::min<int64_t>(p.tokens, 4);
    out.logits_max_rel_err = check_logits(d, p, weights, steps);
    out.reference = fmt::format(
        "cpu float32 reference on the same quantized weights, {} steps from position {}", steps, p.context);
  }
  return out;
}

}  // namespace db
