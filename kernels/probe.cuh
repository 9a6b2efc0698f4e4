// Measurements the roofline needs, taken in the same process as the run.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace db::cuda {

// Streaming-read bandwidth in GB/s over `bytes` of device memory (best of several passes).
double measure_read_GBps(size_t bytes);

// The cost of one kernel launch in microseconds: as a node of a replayed CUDA graph, or
// launched eagerly from the host, back to back.
double measure_launch_us(bool graph);

}  // namespace db::cuda
