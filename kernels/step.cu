// The small kernels of a decode step (see step.cuh).
#include <algorithm>

#include "common.cuh"
#include "gemv.cuh"
#include "pdl.cuh"
#include "step.cuh"

namespace db::cuda {
namespace {

__global__ void embed_kernel(const __half* table, int64_t hidden, StepState st, float* resid,
                             unsigned long long* sumsq, __half* resid_h) {
  // Wait first, then let the next kernel launch: so every kernel of this step starts after
  // the previous step has completed, and may read what only earlier steps write (the
  // position, the KV cache below it) before its own pdl_wait (attention does, pdl.cuh).
  pdl_wait();     // the token (the last finish_step) and resid (read by the last step's kernels)
  pdl_trigger();  // pdl.cuh: the next kernel may launch now
  __shared__ float red[kWarp];
  const int64_t row = *st.token;
  float ss = 0.f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < hidden;
       i += int64_t{gridDim.x} * blockDim.x) {
    const __half t = table[row * hidden + i];
    const float v = __half2float(t);
    resid[i] = v;
    if (resid_h) resid_h[i] = t;
    ss += v * v;
  }
  if (!sumsq) return;  // uniform across the block
  ss = block_sum(ss, red);
  if (threadIdx.x == 0) add_sumsq(sumsq, ss);
}

__global__ void finish_step_kernel(StepState st) {
  pdl_trigger();
  pdl_wait();  // the argmax key and the statistics are the lm_head GEMV's until it finishes
  for (int i = threadIdx.x; i < st.norm_stats_count; i += blockDim.x) st.norm_stats[i] = 0;
  if (threadIdx.x != 0) return;
  const int32_t t = static_cast<int32_t>(argmax_index(*st.argmax_key));
  const int32_t p = *st.pos;
  st.tokens_out[p - *st.first_pos] = t;
  *st.token = t;
  *st.pos = p + 1;
  *st.argmax_key = 0;
}

__global__ void rmsnorm_kernel(const float* resid, const __half* w, float eps, int64_t n, __half* out) {
  pdl_trigger();
  pdl_wait();  // resid
  __shared__ float red[kWarp];
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += resid[i] * resid[i];
  ss = block_sum(ss, red);
  const float inv = rsqrtf(ss / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    out[i] = __float2half_rn(resid[i] * inv * __half2float(w[i]));
}

__global__ void silu_mul_kernel(const float* gu, int64_t inter, __half* act) {
  pdl_trigger();
  pdl_wait();  // gate_up
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < inter;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gu[2 * i], u = gu[2 * i + 1];
    act[i] = __float2half_rn(g / (1.f + expf(-g)) * u);
  }
}

// The grid's x blocks over one row of n logits: each warp's largest key into *key.
__device__ __forceinline__ void argmax_into(const float* row, int64_t n, unsigned long long* key) {
  unsigned long long best = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    best = max(best, argmax_key(row[i], static_cast<uint32_t>(i)));
  for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
  if (threadIdx.x % kWarp == 0) atomicMax(key, best);
}

__global__ void argmax_kernel(const float* logits, int64_t n, unsigned long long* key) {
  pdl_trigger();
  pdl_wait();  // logits, and the key finish_step zeroed
  argmax_into(logits, n, key);
}

// Row blockIdx.y of logits [batch, n]: a plain launch, no PDL (the batched step's kernels).
__global__ void argmax_rows_kernel(const float* logits, int64_t n, unsigned long long* keys) {
  argmax_into(logits + blockIdx.y * n, n, &keys[blockIdx.y]);
}

__global__ void finish_step_batch_kernel(BatchState st) {
  const int32_t p = *st.pos;
  const int64_t at = p - *st.first_pos;
  for (int64_t b = threadIdx.x; b < st.batch; b += blockDim.x) {
    const int32_t t = static_cast<int32_t>(argmax_index(st.keys[b]));
    st.tokens_out[b * st.positions + at] = t;
    st.tokens[b] = t;
    st.keys[b] = 0;
  }
  __syncthreads();  // every thread has read pos
  if (threadIdx.x == 0) *st.pos = p + 1;
}

}  // namespace

void embed(const __half* table, int64_t hidden, const StepState& st, float* resid, unsigned long long* sumsq,
           cudaStream_t s, __half* resid_h) {
  launch(embed_kernel, static_cast<unsigned>((hidden + 255) / 256), 256, 0, s, table, hidden, st, resid,
         sumsq, resid_h);
}

void finish_step(const StepState& st, cudaStream_t s) {
  launch(finish_step_kernel, 1, 256, 0, s, st);
}

void rmsnorm(const float* resid, const __half* w, float eps, int64_t n, __half* out, cudaStream_t s) {
  launch(rmsnorm_kernel, 1, 1024, 0, s, resid, w, eps, n, out);
}

void silu_mul_interleaved(const float* gate_up, int64_t inter, __half* act, cudaStream_t s) {
  launch(silu_mul_kernel, static_cast<unsigned>((inter + 255) / 256), 256, 0, s, gate_up, inter, act);
}

void argmax(const float* logits, int64_t n, unsigned long long* key, cudaStream_t s) {
  launch(argmax_kernel, 264, 256, 0, s, logits, n, key);
}

void argmax_rows(const float* logits, int64_t batch, int64_t n, unsigned long long* keys, cudaStream_t s) {
  // A few blocks a row: enough blocks in all to cover the SMs at small batches.
  const unsigned per_row = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(64, 264 / batch)));
  argmax_rows_kernel<<<dim3(per_row, static_cast<unsigned>(batch)), 256, 0, s>>>(logits, n, keys);
  CUDA_CHECK_LAUNCH();
}

void finish_step_batch(const BatchState& st, cudaStream_t s) {
  finish_step_batch_kernel<<<1, 256, 0, s>>>(st);
  CUDA_CHECK_LAUNCH();
}

}  // namespace db::cuda
