// The measurement protocol, written once for every backend: the untimed prefill to
// --context, the warm-up, the timed repetitions with a clock mark between steps, the check
// that every repetition generates the same tokens, and --check against the CPU float32
// reference. A backend supplies only a Decoder (decoder.h) and its environment (backend.h);
// the statistics of the samples are stats.h's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "decodebench/decoder.h"
#include "decodebench/energy.h"
#include "decodebench/progress.h"

namespace db {

class WeightSource;

// What to measure: the command line's --context, --tokens, --warmup, --repeat,
// --sync-per-token, --check, --max-noise and --max-time.
struct Protocol {
  int64_t context = 0;
  int64_t tokens = 128;
  int64_t warmup = 16;
  int64_t repeat = 5;
  bool sync_per_token = false;
  bool check = false;
  // Adaptive: > 0 adds repetitions after `repeat` until repetition_noise() of the medians is
  // at most max_noise (a fraction) or the timed repetitions have taken max_time_s, and never
  // past kMaxRepeat repetitions or kMaxTimedSteps steps (run_spec.h).
  double max_noise = 0;
  double max_time_s = 0;
};

// Why the timed repetitions stopped (timing.stop).
inline constexpr const char* kStopRepeat = "repeat";       // --repeat of them, as asked
inline constexpr const char* kStopNoise = "noise-target";  // --max-noise reached
inline constexpr const char* kStopTime = "time-limit";     // --max-time ran out first
// The most repetitions (kMaxRepeat) or timed steps (kMaxTimedSteps) one run holds, first.
inline constexpr const char* kStopLimit = "repetition-limit";

struct Measurement {
  std::vector<double> samples_ms;                     // repetitions x tokens step times, in order
  std::vector<double> repetition_medians_ms;          // each repetition's median
  std::vector<int32_t> tokens;                        // the first repetition's tokens of sequence 0
  std::vector<std::vector<int32_t>> sequence_tokens;  // [batch] the first repetition's, every sequence's
  std::string stop = kStopRepeat;
  double prefill_s = 0;
  std::string clock;
  std::optional<double> logits_max_rel_err;  // with --check
  std::string reference;                     // what the logits were compared with
  std::vector<EnergyWindow> energy;          // with a sampler: the counter around each repetition
};

// Runs the protocol on `d`, at d.batch() sequences. `weights` are the decoder's (for
// --check); `is_reference`: the decoder is the CPU float32 reference itself, so --check has
// nothing to compare; `progress`: null, or where the phases are shown; `energy`: null, or
// the sampler whose counter is read around each repetition: the decoder is synchronized
// before the first read and after the last step, outside the clock's marks.
// Throws db::Error when a repetition generates other tokens than the first in any sequence
// (the step is not a function of its inputs) or a token read per step disagrees with the
// recorded one.
Measurement measure_decode(Decoder& d, const Protocol& p, const WeightSource& weights, bool is_reference,
                           Progress* progress = nullptr, EnergySampler* energy = nullptr);

}  // namespace db
