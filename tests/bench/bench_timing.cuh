// The lab benches' timer: `warmup` untimed calls of launch(i), then `reps` timed between two
// CUDA events; microseconds a call.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

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

// The median over `reps` timed calls of run() on `stream`, each between two CUDA events, after
// three untimed ones; milliseconds a call (the chain benches' timer: one call is a whole chain).
template <class F>
double median_ms(cudaStream_t stream, int reps, F&& run) {
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> v;
  for (int r = 0; r < reps + 3; ++r) {
    CUDA_CHECK(cudaEventRecord(e0, stream));
    run();
    CUDA_CHECK(cudaEventRecord(e1, stream));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= 3) v.push_back(ms);
  }
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace db::cuda
