// How the rows kernels (the batch-1 GEMV, kernels/gemv.cu, and its few-column variant,
// kernels/gemv_columns.cu) size a launch: threads a block for whole rows, the resident blocks
// an SM, and one wave of equal blocks over the row groups.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "common.cuh"
#include "gemv.cuh"
#include "pdl.cuh"

namespace db::cuda {

// Resident blocks per SM for a kernel at a shared-memory size, raising the kernel's dynamic
// shared-memory limit when x needs more than the default 48 KB (70B's down_proj: 56 KB).
inline int blocks_per_sm(const void* kernel, size_t smem, int threads) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, size_t, int>, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(kernel, smem, threads);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  // The limit is the kernel's, not the launch's: raise it to the largest size asked for, never
  // lower it (a later, smaller shape must not make an earlier, larger one fail to launch).
  static std::map<const void*, size_t> raised;
  if (smem > 48 * 1024 && smem > raised[kernel]) {
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    raised[kernel] = smem;
  }
  int n = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
  if (n < 1)
    fail("gemv: a block of {} threads with {} bytes of shared memory does not fit on this GPU", threads,
         smem);
  cache[key] = n;
  return n;
}

// Threads a block at `kpt` 16-byte chunks a thread of each row: whole warps that cover a row.
inline int threads_for(const DeviceMatrix& m, int kpt) {
  const int64_t per_thread = (m.cols / weights_per_chunk(m.scheme) + kpt - 1) / kpt;
  return static_cast<int>(std::max<int64_t>(kWarp, (per_thread + kWarp - 1) / kWarp * kWarp));
}

// One wave of equal blocks: as many groups per block as the resident slots require, then as
// few blocks as carry them (a block with one group more than the others is the tail).
inline int64_t balanced_grid(int64_t rows, int rows_per_group, int occupancy) {
  const int64_t groups = (rows + rows_per_group - 1) / rows_per_group;
  const int64_t slots = int64_t{sm_count()} * occupancy;
  const int64_t per_block = (groups + slots - 1) / slots;
  return std::max<int64_t>(1, (groups + per_block - 1) / per_block);
}

}  // namespace db::cuda
