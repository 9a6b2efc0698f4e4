// Measurements the roofline needs, taken in the same process as the run.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "decodebench/backend.h"

namespace db::cuda {

// Streaming-read bandwidth in GB/s over `bytes` of device memory (best of several passes).
double measure_read_GBps(size_t bytes);

// What the compute probe's operands hold: every element the same (0x2020), or uniform random
// values in [-1, 1). Random operands switch more bits a multiply, draw more power and, under
// the card's power cap, may run slower: what a run's GEMMs meet.
enum class ProbeFill { constant, random };

// Dense GEMM throughput on the current device, for the compute floor: cublasGemmEx with fp16
// A and B, fp32 C and CUBLAS_COMPUTE_32F (the math of the engine's GEMMs), M = N = K = 8192,
// halved until the three matrices fit in a quarter of the free memory; random operands; the
// fastest of several passes. Measured once per device and process: later calls return the
// first result.
ComputePeak measure_gemm_peak();
// The same probe on operands filled as `fill` says, measured anew on every call.
ComputePeak measure_gemm_peak_filled(ProbeFill fill);

// The cost of one kernel launch in microseconds: as a node of a replayed CUDA graph, or
// launched eagerly from the host, back to back.
double measure_launch_us(bool graph);

}  // namespace db::cuda
