// The measurement protocol (see include/decodebench/protocol.h), the same for every backend.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "decodebench/cpu_reference.h"
#include "decodebench/error.h"
#include "decodebench/protocol.h"
#include "decodebench/run_spec.h"
#include "decodebench/stats.h"

namespace db {
namespace {

// The first token of every sequence at `position`.
std::vector<int32_t> first_tokens(int64_t batch, int64_t position, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(batch));
  for (int64_t s = 0; s < batch; ++s) t[static_cast<size_t>(s)] = prompt_token(s, position, vocab);
  return t;
}

// Every sequence's tokens of the first n steps since the restart.
std::vector<std::vector<int32_t>> all_tokens(Decoder& d, int64_t n) {
  std::vector<std::vector<int32_t>> out;
  for (int64_t s = 0; s < d.batch(); ++s) out.push_back(d.tokens(s, n));
  return out;
}

// What a message or the check's description adds to name a sequence: `text` in a batch of
// several, nothing at batch 1, whose one sequence needs no name.
std::string sequence_text(int64_t batch, const std::string& text) {
  return batch > 1 ? text : "";
}

// max |got - ref| / max |ref| (max |got - ref| where ref is all zero).
double relative_error(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size())
    fail("--check: {} logits from the decoder, {} from the reference", got.size(), ref.size());
  double diff = 0, mag = 0;
  for (size_t k = 0; k < ref.size(); ++k) {
    diff = std::max(diff, static_cast<double>(std::fabs(got[k] - ref[k])));
    mag = std::max(mag, static_cast<double>(std::fabs(ref[k])));
  }
  return mag > 0 ? diff / mag : diff;
}

// Replays the first steps after the prefill with the CPU float32 reference on the same
// weights, feeding both the decoder's tokens, and returns max |got - ref| / max |ref| over
// the steps and every sequence against its own reference.
double check_logits(Decoder& d, const Protocol& p, const WeightSource& weights, int64_t steps) {
  const int64_t vocab = weights.config().vocab_size;
  const int64_t batch = d.batch();
  // One reference of `batch` sequences: its weights once, a KV cache per sequence.
  CpuModel cpu(weights, p.context + steps, 0, batch);
  for (int64_t i = 0; i < p.context; ++i) cpu.step_batch(first_tokens(batch, i, vocab), i);
  std::vector<int32_t> tokens = first_tokens(batch, p.context, vocab);
  d.restart(p.context, tokens);
  double worst = 0;
  for (int64_t i = 0; i < steps; ++i) {
    d.step();
    cpu.step_batch(tokens, p.context + i);
    for (int64_t s = 0; s < batch; ++s) worst = std::max(worst, relative_error(d.logits(s), cpu.logits(s)));
    tokens = d.read_tokens();
  }
  return worst;
}

}  // namespace

Measurement measure_decode(Decoder& d, const Protocol& p, const WeightSource& weights, bool is_reference,
                           Progress* progress, EnergySampler* energy) {
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
  const int64_t batch = d.batch();
  const std::vector<int32_t> first = first_tokens(batch, p.context, vocab);
  d.restart(p.context, first);
  for (int64_t i = 0; i < p.warmup; ++i) d.step();
  d.synchronize();
  const double step_s = p.warmup > 0 ? seconds_since(t0) / static_cast<double>(p.warmup) : -1;

  // Every repetition restarts at --context from the same tokens; its steps are issued back to
  // back (the host waits only with --sync-per-token) with a clock mark between them. With
  // --max-noise, repetitions go on past --repeat until the noise target or --max-time (or
  // the most repetitions and steps one run holds).
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
      if (r >= kMaxRepeat || (r + 1) * p.tokens > kMaxTimedSteps) {
        out.stop = kStopLimit;
        break;
      }
    }
    const auto rep0 = Clock::now();
    d.restart(p.context, first);
    std::vector<int32_t> reads;  // with --sync-per-token: every sequence's token, read after each step
    // The energy window opens on an idle device, the restart done, before the clock's first
    // mark, and closes after the synchronize that ends the repetition: the steps it counts
    // are the timed ones, and its reads fall outside the marks. An aligned window's waits for
    // the counter's updates fall outside them too: begin() returns as soon as it has seen the
    // start's update, and the clock's first mark and the first step follow at once.
    if (energy) {
      d.synchronize();
      energy->begin();
    }
    clock.start(p.tokens);
    for (int64_t i = 0; i < p.tokens; ++i) {
      d.step();
      clock.mark();
      if (p.sync_per_token) reads = d.read_tokens();  // a serving loop reads each token
    }
    d.synchronize();
    if (energy) out.energy.push_back(energy->end());
    const std::vector<double> ms = clock.stop();
    out.samples_ms.insert(out.samples_ms.end(), ms.begin(), ms.end());
    out.repetition_medians_ms.push_back(compute_stats(ms).median);
    const std::vector<std::vector<int32_t>> tokens = all_tokens(d, p.tokens);
    for (int64_t s = 0; s < batch && p.sync_per_token; ++s) {
      const std::vector<int32_t>& t = tokens[static_cast<size_t>(s)];
      if (!t.empty() && reads.at(static_cast<size_t>(s)) != t.back())
        fail("the token read back per step ({}) differs from the recorded one ({}){}", reads[s], t.back(),
             sequence_text(batch, fmt::format(" in sequence {}", s)));
    }
    // The same tokens every time, or the step is not a function of its inputs.
    if (r == 0) {
      out.sequence_tokens = tokens;
      out.tokens = tokens.front();
    } else {
      for (int64_t s = 0; s < batch; ++s)
        if (tokens[static_cast<size_t>(s)] != out.sequence_tokens[static_cast<size_t>(s)])
          fail(
              "repetition {} generated different tokens than repetition 0{}: the decode step is not "
              "deterministic",
              r, sequence_text(batch, fmt::format(" in sequence {} of {}", s, batch)));
    }
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
        "cpu float32 reference on the same quantized weights, {} steps from position {}{}", steps, p.context,
        sequence_text(batch, fmt::format(", each of the {} sequences against its own", batch)));
  }
  return out;
}

}  // namespace db
