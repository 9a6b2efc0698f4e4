// The mixed-input GEMM's host side that every build has (kernels/mixed_gemm.cuh): what it takes,
// its plan and workspace on this GPU, and, where the build has no sm_90a code (DB_HOPPER unset),
// the entry points that say so.
#include <algorithm>

#include "common.cuh"
#include "decodebench/linear_shapes.h"
#include "mixed_gemm.cuh"

namespace db::cuda {

namespace {

int sm_count() {
  int device = 0, n = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return n;
}

}  // namespace

mixed::Kind mixed_kind(Scheme s) {
  if (s == Scheme::int4) return mixed::Kind::int4;
  if (s == Scheme::int8) return mixed::Kind::int8;
  fail("the mixed-input GEMM reads int4 and int8 weights, not {}", to_string(s));
}

bool mixed_gemm_supports(const DeviceMatrix& w, const char** why) {
  if (!mixed_gemm_takes(shape_of(w), why)) return false;
  if (!w.mixed_wgmma) {
    *why = "the mixed-input GEMM reads the mixed-wgmma layout (repack_mixed)";
    return false;
  }
  return true;
}

mixed::Plan mixed_gemm_plan(const DeviceMatrix& w, int64_t batch, MixedGemmOptions o) {
  return mixed::make_plan(mixed_kind(w.scheme), w.rows, w.cols, batch, sm_count(), o.splits, o.n_tile);
}

size_t mixed_gemm_workspace_bytes(int64_t rows, int64_t cols, int64_t batch) {
  const int sms = sm_count();
  int64_t n = 0;
  for (mixed::Kind k : {mixed::Kind::int4, mixed::Kind::int8})
    n = std::max(n, mixed::workspace_bytes(mixed::make_plan(k, rows, cols, batch, sms)));
  return static_cast<size_t>(n);
}

#if !DB_HOPPER
bool mixed_gemm_built() {
  return false;
}
void mixed_gemm_setup() {
  fail("gemm_mixed: this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES without 90)");
}
void gemm_mixed_with(const DeviceMatrix&, const __half*, int64_t, float*, bool, void*, int64_t,
                     MixedGemmOptions, cudaStream_t) {
  fail("gemm_mixed: this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES without 90)");
}
void gemm_mixed(const DeviceMatrix& w, const __half* x, int64_t batch, float* y, bool accumulate,
                void* workspace, cudaStream_t s) {
  gemm_mixed_with(w, x, batch, y, accumulate, workspace, 0, {}, s);
}
#endif

}  // namespace db::cuda
