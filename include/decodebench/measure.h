// The measurement protocol, written once for every backend: the untimed prefill to
// --context, the warm-up, the timed repetitions with a clock mark between steps, the check
// that every repetition generates the same tokens, --check against the CPU float32
// reference, and the statistics. A backend supplies only a Decoder (one decode step and the
// clock that times it) and its environment (backend.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "decodebench/energy.h"
#include "decodebench/result.h"

namespace db {

class WeightSource;

// The token stream every backend feeds: the prompt is a fixed pseudo-random sequence, the
// untimed prefill feeds prompt[0..context), and each timed repetition restarts at position
// `context` from prompt[context], so every repetition generates the same tokens.
int32_t prompt_token(int64_t index, int64_t vocab);

// The prompt of sequence `sequence` of a batch (--batch): each sequence has a stream of its
// own, and sequence 0's is prompt_token(index, vocab), so a batch's first sequence decodes
// exactly what batch 1 decodes. `index` < 2^32 (positions are far below: kMaxPositions).
int32_t prompt_token(int64_t sequence, int64_t index, int64_t vocab);

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
  int launches_per_step = 0;                  // kernels in one decode step (0: not applicable)
  double launch_overhead_us = 0;              // measured cost of one launch in the mode used
  std::string cublas;                         // cuBLAS version where the kernel calls it, else empty
  std::vector<std::string> kernel_fallbacks;  // matrices that run another kernel, with why
  std::vector<std::string> kernel_shapes;     // batch > 1: the skinny GEMM's shape a kind of matrix
  std::string prefill = "steps";              // how prefill() reaches the context (timing.prefill)
};

// One run's decode loop on a backend. Steps may run asynchronously (the CUDA backend
// enqueues them); each step's argmax is the next step's input, on the device.
//
// A decoder runs batch() sequences in lockstep (--batch B): each has its own KV cache and
// prompt, all are at the same position, and one step decodes one token of each. The
// methods of the first group serve every batch size: prefill() and step() act on all
// sequences. At batch 1 the protocol calls only those of the first group, as it always has;
// at B > 1 it calls the batch group in place of restart(), read_token(), tokens() and
// logits(). The batch group's defaults serve a decoder of batch 1 (sequence 0 only), so a
// backend that runs batch 1 only implements the first group.
class Decoder {
 public:
  virtual ~Decoder() = default;
  // Writes the KV cache of prompt_token(s, 0 .. n-1) for every sequence s at positions
  // 0 .. n-1, untimed, and waits for it: a step a token, or the prompt in batched chunks
  // (DecoderFacts::prefill).
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

  // ---- batch: B sequences in lockstep (the defaults are batch 1's)
  // The number of sequences B, fixed at construction (DecoderSpec::batch).
  virtual int64_t batch() const { return 1; }
  // As restart(), sequence s decoding tokens[s] [B] at `position`.
  virtual void restart_batch(int64_t position, const std::vector<int32_t>& tokens);
  // Waits for the steps so far and returns the last one's token of every sequence [B].
  virtual std::vector<int32_t> read_tokens();
  // Waits, then sequence s's tokens of the first n steps since restart_batch().
  virtual std::vector<int32_t> sequence_tokens(int64_t s, int64_t n);
  // Waits, then sequence s's logits of the last step [vocab].
  virtual std::vector<float> sequence_logits(int64_t s);
};

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

// Phases of a run on stderr, for runs long enough to need them: nothing for the first
// kQuietSeconds (mode automatic), then the current phase with its elapsed time and an
// estimate of what is left, rewritten in place on a terminal and one line per phase
// otherwise. A background thread prints, so a phase that blocks (loading 70b) shows too.
enum class ProgressMode { automatic, on, off };

class Progress {
 public:
  using Mode = ProgressMode;
  static constexpr double kQuietSeconds = 2.0;

  Progress(std::string label, Mode mode);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // A new phase ("load", "prefill", "warm-up", "timed"); eta_s < 0: unknown.
  void phase(const std::string& name, double eta_s = -1);
  // Within a phase: what is done ("repetition 3 of 5"), and the estimate of what is left.
  void detail(const std::string& what, double eta_s = -1);

 private:
  using Clock = std::chrono::steady_clock;
  void loop();
  void print_locked(bool phase_changed);

  std::string label_;
  Mode mode_;
  bool tty_;
  Clock::time_point start_, phase_start_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false, shown_ = false, line_open_ = false;
  std::string phase_, detail_, printed_phase_;
  double eta_s_ = -1;
  Clock::time_point eta_at_;
  std::thread thread_;
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

// Summary statistics of samples (linear-interpolated percentiles).
TpotStats compute_stats(const std::vector<double>& samples);

// A run's noise: the relative standard deviation (stdev / mean) of its repetition medians;
// 0 with fewer than two. Repetitions, not steps, are the unit: steps within one repetition
// are not independent, and what moves a run (clocks, placement, neighbours) moves whole
// repetitions.
double repetition_noise(const std::vector<double>& repetition_medians_ms);

// A run's independent measurements: its repetition medians (timing.repetition_medians_ms),
// or, for a result written before that field, the medians of its samples_ms taken
// config.tokens at a time.
std::vector<double> repetition_medians(const Result& r);

// Above this noise a run is flagged noisy (timing.warnings): it is as large as compare's
// default threshold, so the run cannot support a verdict at that threshold.
inline constexpr double kNoisyRun = 0.03;

// A tenth of the steps at least this many times the median flags a run noisy too: a heavy
// tail that the median hides.
inline constexpr double kNoisyTail = 1.5;

// An SM or memory clock this much lower at the end of a run than at its start: the clocks fell.
inline constexpr double kClockFall = 0.01;

// The warnings a result earns (timing.warnings): noisy, throttled (an NVML throttle reason
// other than idle or application clocks at the start or the end), clocks fell. Each is one
// line of text beginning with its kind ("noisy: ...", "throttled: ...", "clocks fell: ...").
std::vector<std::string> run_warnings(const Result& r);

// What of a run's warnings compare must account for (docs/method.md "Noise and warnings").
// A noisy run, a throttle reason other than idle, application clocks or the software power
// cap (thermal, hardware slowdown, power brake, ...) or a fallen memory clock rule a verdict
// out. The power cap acts on the GPU through its clocks, so it counts as the SM clock's fall.
struct RunStability {
  std::string ruled_out;     // the first warning that rules a verdict out; "" when none
  double sm_clock_fall = 0;  // 1 - end / start of the SM clock when it fell; 0 otherwise
};
RunStability run_stability(const Result& r);

}  // namespace db
