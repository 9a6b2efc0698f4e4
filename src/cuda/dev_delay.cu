// The injected slowdown of lab builds (see src/cuda/dev_delay.cuh).
#include "dev_delay.cuh"

#include <cstdlib>

#include "common.cuh"

namespace db::cuda {
namespace {

__global__ void dev_delay_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// DECODEBENCH_DEV_DELAY_US in SM clock cycles, read once a process; 0 without it.
long long dev_delay_cycles() {
  static const long long cycles = [] {
    const char* us = std::getenv("DECODEBENCH_DEV_DELAY_US");
    if (!us || !*us) return 0LL;
    int device = 0, khz = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
    return static_cast<long long>(std::atof(us) * khz / 1e3);
  }();
  return cycles;
}

}  // namespace

void enqueue_dev_delay(cudaStream_t s) {
  if (const long long cycles = dev_delay_cycles(); cycles > 0) {
    dev_delay_kernel<<<1, 1, 0, s>>>(cycles);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace db::cuda
