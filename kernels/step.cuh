// The small kernels of a decode step: the embedding row, the token hand-off between steps,
// and the separate norm / activation / argmax kernels the cuBLAS paths need (the fast
// GEMVs fuse those).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace db::cuda {

// The step's state in device memory, so one captured graph replays for every token.
struct StepState {
  int32_t* token = nullptr;       // input token of this step
  int32_t* pos = nullptr;         // position of this step
  int32_t* first_pos = nullptr;   // position of the first generated token (--context)
  int32_t* tokens_out = nullptr;  // [positions]: generated token written at pos - first_pos
  unsigned long long* argmax_key = nullptr;
  unsigned long long* norm_stats =
      nullptr;  // [norm_stats_count] RMSNorm statistics (common.cuh), zeroed per step
  int norm_stats_count = 0;
};

// resid[i] = embedding[token, i], and into its fp16 copy `resid_h` when set; the squares go
// to `sumsq` (common.cuh) when it is set.
void embed(const __half* table, int64_t hidden, const StepState& st, float* resid, unsigned long long* sumsq,
           cudaStream_t s, __half* resid_h = nullptr);
// The argmax key becomes the next input token and is recorded; pos advances; key and norm
// statistics reset.
void finish_step(const StepState& st, cudaStream_t s);

// For the cuBLAS paths.
void rmsnorm(const float* resid, const __half* w, float eps, int64_t n, __half* out, cudaStream_t s);
void silu_mul_interleaved(const float* gate_up, int64_t inter, __half* act, cudaStream_t s);
void argmax(const float* logits, int64_t n, unsigned long long* key, cudaStream_t s);

// The batched step (--batch B > 1): plain launches, each starting after its predecessor has
// completed, like the prefill's kernels (prefill.cuh).
// keys[b] keeps row b's argmax key of logits [batch, n] (keys zero before).
void argmax_rows(const float* logits, int64_t batch, int64_t n, unsigned long long* keys, cudaStream_t s);
// The batch's state in device memory: each sequence's input token, one shared position.
struct BatchState {
  int32_t* tokens = nullptr;  // [batch] input token of each sequence
  int32_t* pos = nullptr;     // position of this step, every sequence's
  int32_t* first_pos = nullptr;
  int32_t* tokens_out = nullptr;  // [batch, positions]: sequence b's token at b * positions + pos - first_pos
  unsigned long long* keys = nullptr;  // [batch] argmax keys
  int64_t batch = 0;
  int64_t positions = 0;
};
// Each sequence's argmax becomes its next input token and is recorded; keys reset; pos
// advances once, after every sequence has read it.
void finish_step_batch(const BatchState& st, cudaStream_t s);

}  // namespace db::cuda
