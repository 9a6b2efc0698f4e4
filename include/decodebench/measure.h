// The measurement protocol, written once for every backend: the untimed prefill to
// --context, the warm-up, the timed repetitions with a clock mark between steps, the check
// that every repetition generates the same tokens, --check against the CPU float32
// reference, and the statistics. A backend supplies only a Decoder (one decode step and the
// clock that times it) and its environment (backend.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "decodebench/result.h"

namespace db {

class WeightSource;

// The token stream every backend feeds: the prompt is a fixed pseudo-random sequence, the
// untimed prefill feeds prompt[0..context), and each timed repetition restarts at position
// `context` from prompt[context], so every repetition generates the same tokens.
int32_t prompt_token(int64_t index, int64_t vocab);

// Times the steps of one repetition: start() before the first step, mark() after each, and
// stop() (after the decoder has synchronized) returns the time of each step in ms.
class StepClock {
 public:
  virtual ~StepClock() = default;
  virtual const char* name() const = 0;  // "cuda-events" | "host" (timing.clock)
  virtual void start(int64_t steps) = 0;
  virtual void mark() = 0;
  virtual std::vector<double> stop() = 0;
};

// What a decoder's backend reports of it once it has run.
struct DecoderFacts {
  double load_s = 0;            // making its weights and buffers ready
  bool weights_reused = false;  // its weights were kept from the previous run of a sweep
  MemoryUse memory;
  int launches_per_step = 0;      // kernels in one decode step (0: not applicable)
  double launch_overhead_us = 0;  // measured cost of one launch in the mode used
  std::string cublas;             // cuBLAS version where the kernel calls it, else empty
};

// One run's decode loop on a backend. Steps may run asynchronously (the CUDA backend
// enqueues them); each step's argmax is the next step's input, on the device.
class Decoder {
 public:
  virtual ~Decoder() = default;
  // Feeds prompt_token(0 .. n-1) at positions 0 .. n-1, untimed, and waits for them.
  virtual void prefill(int64_t n) = 0;
  // The next step decodes `token` at `position`; tokens() counts the steps from here.
  virtual void restart(int64_t position, int32_t token) = 0;
  virtual void step() = 0;
  virtual void synchronize() = 0;
  // Waits for the steps so far and returns the last one's token (what a serving loop reads).
  virtual int32_t read_token() = 0;
  // Waits, then the tokens of the first n steps since restart().
  virtual std::vector<int32_t> tokens(int64_t n) = 0;
  // Waits, then the last step's logits [vocab].
  virtual std::vector<float> logits() = 0;
  virtual StepClock& clock() = 0;
  // After the run: its load time, memory and launch costs.
  virtual DecoderFacts facts() = 0;
};

// What to measure: the command line's --context, --tokens, --warmup, --repeat,
// --sync-per-token and --check.
struct Protocol {
  int64_t context = 0;
  int64_t tokens = 128;
  int64_t warmup = 16;
  int64_t repeat = 5;
  bool sync_per_token = false;
  bool check = false;
};

struct Measurement {
  std::vector<double> samples_ms;  // repeat x tokens step times, repetition by repetition
  std::vector<int32_t> tokens;     // the first repetition's tokens
  double prefill_s = 0;
  std::string clock;
  std::optional<double> logits_max_rel_err;  // with --check
  std::string reference;                     // what the logits were compared with
};

// Runs the protocol on `d`. `weights` are the decoder's (for --check); `is_reference`: the
// decoder is the CPU float32 reference itself, so --check has nothing to compare.
// Throws db::Error when a repetition generates other tokens than the first (the step is not
// a function of its inputs) or a token read per step disagrees with the recorded one.
Measurement measure_decode(Decoder& d, const Protocol& p, const WeightSource& weights, bool is_reference);

// Summary statistics of samples (linear-interpolated percentiles).
TpotStats compute_stats(const std::vector<double>& samples);

// The regime rule (docs/method.md "Regimes"). Bandwidth-bound needs the efficiency at which
// two runs' TPOT ratio stays within 4/3 of their bytes' ratio.
inline constexpr double kBandwidthBoundEfficiency = 0.75;

// Sets r.regime and r.regime_reason from r.efficiency, the median TPOT, the step's fixed
// launch cost and the bytes the kernel moves beyond the minimum. The efficiency is judged
// at the two decimals every table and reason prints, so the label never contradicts them.
void classify_regime(Roofline& r, double median_ms, int launches_per_step, double launch_overhead_us,
                     uint64_t kernel_extra_bytes);

}  // namespace db
