// Programmatic Dependent Launch (Hopper, sm_90+): a kernel launched with `launch` below may
// start while the kernel before it in the stream (or captured graph) is still finishing, so
// its launch latency and block ramp-up hide behind the predecessor's tail instead of adding
// to every one of the step's many short kernels.
//
// The contract, in every kernel launched this way:
//   pdl_trigger()  first: lets the next kernel's blocks be scheduled once all of ours run
//                  (attention triggers later, once its own K/V loads have landed, or before
//                  its wait where the O GEMV is int4: AttentionArgs::early_launch);
//   pdl_wait()     before the first global load or store of anything another kernel writes
//                  or reads (activations, residual stream, KV cache, step state, counters,
//                  statistics slots). It returns once the previous grid has completed and
//                  its writes are visible. A kernel that skips it races its predecessor.
// Because each kernel waits for the one before it, the chain is transitive: after pdl_wait()
// every earlier kernel of the stream has finished. Kernels launched without the attribute
// (the <<<>>> ones) still wait for their predecessor to complete, as always.
// Every launch here also carries its preferred L1 / shared-memory split (launch_carveout
// below, kernels/carveout.h), on every GPU.
// One exception, by design: the step's first kernel (embed) waits before it triggers, so no
// kernel of a decode step starts before the previous step has completed. What only earlier
// steps write (the position, the KV cache rows below it) may then be read before pdl_wait:
// their writers completed before the reading kernel launched. Attention issues its cached
// K/V loads that way, under the QKV GEMV's tail.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "carveout.h"
#include "common.cuh"

namespace db::cuda {

// Both are no-ops below sm_90 (no such instructions) and, at run time, in a kernel that was
// launched without the PDL attribute.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// A device attribute of the current device, queried once per process (per call site's
// static): the benchmark runs on one device.
inline int device_attribute(cudaDeviceAttr a) {
  int dev = 0, v = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&v, a, dev));
  return v;
}

// Whether the current device has PDL (compute capability 9.0 or newer).
inline bool pdl_supported() {
  static const bool ok = device_attribute(cudaDevAttrComputeCapabilityMajor) >= 9;
  return ok;
}

inline int sm_count() {
  static const int n = device_attribute(cudaDevAttrMultiProcessorCount);
  return n;
}

namespace detail {

// The preferred L1 / shared-memory split of a launch (kernels/carveout.h): the shared
// memory of the blocks one SM will hold, no less than kMinCarveoutPercent. Computed once per
// kernel and launch shape (a graph captures it; an eager step looks it up).
inline int launch_carveout(const void* kernel, dim3 grid, dim3 block, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, unsigned, unsigned, size_t>, int> cache;
  const unsigned blocks = grid.x * grid.y * grid.z, threads = block.x * block.y * block.z;
  const auto key = std::make_tuple(kernel, blocks, threads, smem);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  static const int max_sm = device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
  static const int reserved = device_attribute(cudaDevAttrReservedSharedMemoryPerBlock);
  int occupancy = 0;
  cudaFuncAttributes fa = {};
  CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
  CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occupancy, kernel, static_cast<int>(threads), smem));
  const int64_t resident = resident_blocks(blocks, sm_count(), occupancy);
  const int pct =
      carveout_percent(resident, static_cast<int64_t>(fa.sharedSizeBytes + smem) + reserved, max_sm);
  cache.emplace(key, pct);
  return pct;
}

// The launch configuration: the carveout above, and the PDL attribute where the device has
// it. `attr` is the storage the configuration points into: it must outlive the launch call.
inline cudaLaunchConfig_t pdl_config(const void* kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                     cudaLaunchAttribute (&attr)[2]) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  attr[0].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
  attr[0].val.sharedMemCarveout = static_cast<unsigned>(launch_carveout(kernel, grid, block, smem));
  cfg.numAttrs = 1;
  if (pdl_supported()) {
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.numAttrs = 2;
  }
  return cfg;
}

// A failed launch also sets the last error; clear it, as CUDA_CHECK_LAUNCH does, so that a
// caller who catches the failure does not see it again at the next launch.
inline cudaError_t launch_result(cudaError_t e) {
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e;
}

}  // namespace detail

// kernel<<<grid, block, smem, s>>>(args...) with PDL: the arguments are converted to the
// kernel's parameter types as in a <<<>>> launch. Checked, so no CUDA_CHECK_LAUNCH after it.
template <typename... KArgs, typename... Args>
void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
  cudaLaunchAttribute attr[2] = {};
  const cudaLaunchConfig_t cfg =
      detail::pdl_config(reinterpret_cast<const void*>(kernel), grid, block, smem, s, attr);
  CUDA_CHECK(detail::launch_result(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...)));
}

// The same for a kernel held as a plain function pointer: `args` points at one pointer per
// kernel parameter, each to a value of exactly that parameter's type (cudaLaunchKernel's
// convention; nothing is converted).
inline void launch_raw(const void* kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s, void** args) {
  cudaLaunchAttribute attr[2] = {};
  const cudaLaunchConfig_t cfg = detail::pdl_config(kernel, grid, block, smem, s, attr);
  CUDA_CHECK(detail::launch_result(cudaLaunchKernelExC(&cfg, kernel, args)));
}

}  // namespace db::cuda
