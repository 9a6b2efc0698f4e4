// What the Hopper wgmma kernels (prefill_wgmma.cu, the lab's tests/bench/wgmma_bench.cu) share
// besides the layout arithmetic: the device side's TMA box load, mbarrier transaction count and
// wgmma group fences (sm_90a only, like mbarrier.cuh), and the host side's tensor maps of
// 128-byte-swizzled boxes of 64 fp16 columns through the runtime's driver entry point (no
// libcuda at link time).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common.cuh"
#include "mbarrier.cuh"

namespace db::hopper {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}

// One TMA box of `map` at (inner, outer) = (column, row) into `dst`, completing on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int inner, int outer,
                                            uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];" ::"r"(smem_u32(dst)),
      "l"(map), "r"(inner), "r"(outer), "r"(smem_u32(bar))
      : "memory");
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Tells the compiler the registers of `d` may change here: reads after a wgmma_wait stay after it.
template <int N>
__device__ __forceinline__ void fence_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
#endif

inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (!fn) {
    cudaDriverEntryPointQueryResult q{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&fn),
                                                12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !fn) fail("the driver has no cuTensorMapEncodeTiled");
  }
  return fn;
}

// `rows` rows of `cols` fp16 values, consecutive rows `row_elems` values apart (>= cols, a
// multiple of 8: TMA's 16-byte strides), as a tensor map of boxes of 64 columns x box_rows rows,
// 128-byte swizzled, zero-filled past its edges.
inline CUtensorMap sw128_map(const __half* p, int64_t rows, int64_t cols, int64_t row_elems, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_elems) * sizeof(__half)};
  const cuuint32_t box[2] = {64, cuuint32_t(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r =
      encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<__half*>(p), dims, strides, box,
                     elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    fail("cuTensorMapEncodeTiled: error {} for [{}, {}] with rows {} apart", static_cast<int>(r), rows, cols,
         row_elems);
  return map;
}

}  // namespace db::hopper
