// The lab benches' timer: `warmup` untimed calls of launch(i), then `reps` timed between two
// CUDA events; microseconds a call.
#pragma once

#include <cuda_runtime.h>

#include "common.cuh"

namespace db::cuda {

template <class F>
double time_us(F&& launch, int reps, int warmup = 8) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) launch(i);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) launch(i);
  CUDA_CHECK(cudaEventRecord(b));
  CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  return ms * 1e3 / reps;
}

}  // namespace db::cuda
