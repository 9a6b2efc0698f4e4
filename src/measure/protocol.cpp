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

Measurement measure_decode(Decoder& d, const Protocol& p, const WeightSource& weights, bool is_reference,
                           Progress* progress) {
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const auto show = [&](const std::string& phase, double eta_s = -1) {
    if (progress) progress->phase(phase, eta_s);
  };
  const int64_t vocab = weights.config().vocab_size;
  Measurement out;
  StepClock& clock = d.clock();
  out.clock = clock.name();

  if (p.context > 0) show(fmt::format("prefill to position {}", p.context));
  auto t0 = Clock::now();
  d.prefill(p.context);
  out.prefill_s = seconds_since(t0);

  show(fmt::format("warm-up ({} steps)", p.warmup));
  t0 = Clock::now();
  const int32_t first = prompt_token(p.context, vocab);
  d.restart(p.context, first);
  for (int64_t i = 0; i < p.warmup; ++i) d.step();
  d.synchronize();
  const double step_s = p.warmup > 0 ? seconds_since(t0) / static_cast<double>(p.warmup) : -1;

  // Every repetition restarts at --context from the same token; its steps are issued back to
  // back (the host waits only with --sync-per-token) with a clock mark between them. With
  // --max-noise, repetitions go on past --repeat until the noise target or --max-time.
  const bool adaptive = p.max_noise > 0;
  const auto estimate = [&](int64_t reps_left) {
    if (adaptive) return p.max_time_s;
    return step_s >= 0 ? step_s * static_cast<double>(p.tokens * reps_left) : -1.0;
  };
  show(fmt::format("timed ({} repetitions of {} steps)", p.repeat, p.tokens), estimate(p.repeat));
  const auto timed0 = Clock::now();
  for (int64_t r = 0;; ++r) {
    if (r >= p.repeat) {
      if (!adaptive) break;
      if (repetition_noise(out.repetition_medians_ms) <= p.max_noise) {
        out.stop = kStopNoise;
        break;
      }
      if (seconds_since(timed0) >= p.max_time_s) {
        out.stop = kStopTime;
        break;
      }
    }
    const auto rep0 = Clock::now();
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
    out.repetition_medians_ms.push_back(compute_stats(ms).median);
    const std::vector<int32_t> tokens = d.tokens(p.tokens);
    if (p.sync_per_token && !tokens.empty() && read != tokens.back())
      fail("the token read back per step ({}) differs from the recorded one ({})", read, tokens.back());
    // The same tokens every time, or the step is not a function of its inputs.
    if (r == 0)
      out.tokens = tokens;
    else if (tokens != out.tokens)
      fail("repetition {} generated different tokens than repetition 0: the decode step is not deterministic",
           r);
    if (progress) {
      const double rep_s = seconds_since(rep0);
      const double left = adaptive ? std::max(0.0, p.max_time_s - seconds_since(timed0))
                                   : rep_s * static_cast<double>(p.repeat - r - 1);
      progress->detail(fmt::format("repetition {} done", r + 1), left);
    }
  }

  if (p.check && is_reference) {
    out.logits_max_rel_err = 0.0;
    out.reference = "the cpu backend is the float32 reference itself";
  } else if (p.check) {
    show("--check against the CPU reference");
    const int64_t steps = std::min<int64_t>(p.tokens, 4);
    out.logits_max_rel_err = check_logits(d, p, weights, steps);
    out.reference = fmt::format(
        "cpu float32 reference on the same quantized weights, {} steps from position {}", steps, p.context);
  }
  return out;
}

}  // namespace db
