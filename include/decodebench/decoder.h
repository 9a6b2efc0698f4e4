// What a backend supplies to the measurement: a Decoder (one decode step and the clock that
// times it) over one run's weights, and the token stream every decoder is fed. The protocol
// that drives it is written once, for every backend (protocol.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "decodebench/result.h"

namespace db {

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
  std::vector<std::string> batched_paths;     // batch > 1: the path a kind of matrix takes
  std::string prefill = "steps";              // how prefill() reaches the context (timing.prefill)
  std::string prefill_attention;  // the batched prefill's attention kernel (timing.prefill_attention)
};

// One run's decode loop on a backend, over batch() sequences in lockstep (--batch B; batch 1
// is a batch of one): each sequence has its own KV cache and prompt, all are at the same
// position, and one step decodes one token of each. Steps may run asynchronously (the CUDA
// backend enqueues them); each step's argmax is the sequence's next input, on the device.
class Decoder {
 public:
  virtual ~Decoder() = default;
  // The number of sequences B, fixed at construction (DecoderSpec::batch).
  virtual int64_t batch() const = 0;
  // Writes the KV cache of prompt_token(s, 0 .. n-1) for every sequence s at positions
  // 0 .. n-1, untimed, and waits for it: a step a token, or the prompt in batched chunks
  // (DecoderFacts::prefill).
  virtual void prefill(int64_t n) = 0;
  // The next step decodes tokens[s] [B] in sequence s at `position`; tokens() counts the
  // steps from here.
  virtual void restart(int64_t position, const std::vector<int32_t>& tokens) = 0;
  virtual void step() = 0;
  virtual void synchronize() = 0;
  // Waits for the steps so far and returns the last one's token of every sequence [B] (what a
  // serving loop reads).
  virtual std::vector<int32_t> read_tokens() = 0;
  // Waits, then sequence s's tokens of the first n steps since restart().
  virtual std::vector<int32_t> tokens(int64_t s, int64_t n) = 0;
  // Waits, then sequence s's logits of the last step [vocab].
  virtual std::vector<float> logits(int64_t s) = 0;
  virtual StepClock& clock() = 0;
  // After the run: its load time, memory and launch costs.
  virtual DecoderFacts facts() = 0;
};

}  // namespace db
