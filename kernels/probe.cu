// The bandwidth and launch-cost probes (see probe.cuh).
#include <algorithm>

#include "common.cuh"
#include "probe.cuh"

namespace db::cuda {
namespace {

__global__ void read_kernel(const uint4* p, size_t n, unsigned* sink) {
  uint32_t acc = 0;
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {  // four 16-byte loads in flight per thread
    const uint4 a = ld_stream(p + i), b = ld_stream(p + i + stride), c = ld_stream(p + i + 2 * stride),
                d = ld_stream(p + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = ld_stream(p + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads; practically never taken
}

__global__ void empty_kernel() {}

struct Events {
  cudaEvent_t a, b;
  Events() {
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
  }
  ~Events() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  float ms() const {
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    return t;
  }
};

}  // namespace

double measure_read_GBps(size_t bytes) {
  bytes &= ~size_t{15};
  void* buf = nullptr;
  unsigned* sink = nullptr;
  CUDA_CHECK(cudaMalloc(&buf, bytes));
  CUDA_CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  CUDA_CHECK(cudaMemset(buf, 0x5a, bytes));
  int dev = 0, sms = 0, per_sm = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, read_kernel, 512, 0));
  const int grid = sms * std::max(per_sm, 1);
  Events ev;
  double best_ms = 1e30;
  for (int pass = 0; pass < 12; ++pass) {
    CUDA_CHECK(cudaEventRecord(ev.a));
    read_kernel<<<grid, 512>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaEventRecord(ev.b));
    CUDA_CHECK(cudaEventSynchronize(ev.b));
    if (pass >= 2) best_ms = std::min(best_ms, static_cast<double>(ev.ms()));
  }
  CUDA_CHECK(cudaFree(buf));
  CUDA_CHECK(cudaFree(sink));
  return static_cast<double>(bytes) / (best_ms * 1e-3) / 1e9;
}

double measure_launch_us(bool graph) {
  constexpr int kLaunches = 200;
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Events ev;
  double us = 0;
  if (graph) {
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kLaunches; ++i) empty_kernel<<<1, 32, 0, s>>>();
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    double best = 1e30;
    for (int r = 0; r < 8; ++r) {
      CUDA_CHECK(cudaEventRecord(ev.a, s));
      CUDA_CHECK(cudaGraphLaunch(exec, s));
      CUDA_CHECK(cudaEventRecord(ev.b, s));
      CUDA_CHECK(cudaEventSynchronize(ev.b));
      if (r >= 2) best = std::min(best, static_cast<double>(ev.ms()));
    }
    us = best * 1e3 / kLaunches;
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(g));
  } else {
    double best = 1e30;
    for (int r = 0; r < 5; ++r) {
      CUDA_CHECK(cudaEventRecord(ev.a, s));
      for (int i = 0; i < kLaunches; ++i) empty_kernel<<<1, 32, 0, s>>>();
      CUDA_CHECK_LAUNCH();
      CUDA_CHECK(cudaEventRecord(ev.b, s));
      CUDA_CHECK(cudaEventSynchronize(ev.b));
      if (r >= 1) best = std::min(best, static_cast<double>(ev.ms()));
    }
    us = best * 1e3 / kLaunches;
  }
  CUDA_CHECK(cudaStreamDestroy(s));
  return us;
}

}  // namespace db::cuda
