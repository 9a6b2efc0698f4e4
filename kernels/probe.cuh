// Measurements the roofline needs, taken in the same process as the run.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "decodebench/backend.h"

namespace db::cuda {

// Streaming-read bandwidth in GB/s over `bytes` of device memory (best of several passes).
double measure_read_GBps(size_t bytes);

// Dense GEMM throughput on the current device, for the compute floor: cublasGemmEx with fp16
// A and B, fp32 C and CUBLAS_COMPUTE_32F (the math of the engine's GEMMs), M = N = K = 8192,
// halved until the three matrices fit in a quarter of the free memory; the fastest of several
// passes. Measured once per device and process: later calls return the first result.
ComputePeak measure_gemm_peak();

// The cost of one kernel launch in microseconds: as a node of a replayed CUDA graph, or
// launched eagerly from the host, back to back.
double measure_launch_us(bool graph);

}  // namespace db::cuda
