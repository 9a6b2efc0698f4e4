// Shared pieces of the GPU tests: skipping without a device, device buffers, uploads.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "common.cuh"
#include "decodebench/weights.h"
#include "gemv.cuh"
#include "weights.cuh"

namespace dbtest {

inline bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

#define REQUIRE_GPU()                                                 \
  do {                                                                \
    if (!::dbtest::have_gpu()) GTEST_SKIP() << "no CUDA device here"; \
  } while (0)

// The current device's compute capability, 10 major + minor (90: sm_90).
inline int compute_capability() {
  int device = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return 10 * major + minor;
}

// Skips unless the build's arch-specific code for `what` (sm_90a: wgmma, TMA) runs here: on a
// GPU of exactly compute capability `capability` (such code runs on no other, newer ones
// included), in a build that compiled it (`built`).
#define REQUIRE_ARCH_CODE(capability, built, what)                                                           \
  do {                                                                                                       \
    REQUIRE_GPU();                                                                                           \
    const int have_ = ::dbtest::compute_capability();                                                        \
    if (have_ != (capability))                                                                               \
      GTEST_SKIP() << what << " is sm_" << (capability) << "a code: needs compute capability "               \
                   << (capability) / 10 << "." << (capability) % 10 << ", this GPU is " << have_ / 10 << "." \
                   << have_ % 10;                                                                            \
    if (!(built))                                                                                            \
      GTEST_SKIP() << "this build has no sm_" << (capability) << "a code for " << what                       \
                   << " (CMAKE_CUDA_ARCHITECTURES without " << (capability) << ")";                          \
  } while (0)

template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t count) : n(count) {
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size()) { upload(v); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  void upload(const std::vector<T>& v) {
    CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> v(n);
    CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  void poison() { CUDA_CHECK(cudaMemset(p, 0xff, n * sizeof(T))); }  // NaN for floats and halves
};

// A host QuantMatrix on the device, in the canonical layout, allocated as the engine does
// (device_matrix_bytes: int4's scales and zero points for whole blocks of 8 rows, which the
// repack needs).
struct DeviceQuant {
  db::cuda::DeviceMatrix m;  // first: the buffers below are sized from it
  DeviceBuffer<uint8_t> q;
  DeviceBuffer<uint16_t> s;
  DeviceBuffer<uint8_t> z;
  static db::cuda::DeviceMatrix shape_of(const db::QuantMatrix& h) {
    db::cuda::DeviceMatrix d;
    d.scheme = h.scheme;
    d.rows = h.rows;
    d.cols = h.cols;
    d.group_size = h.group_size;
    d.zero_point = h.zero_point;
    return d;
  }
  template <typename T>
  static std::vector<T> sized(std::vector<T> v, uint64_t bytes) {
    if (!v.empty()) v.resize(static_cast<size_t>(bytes / sizeof(T)));
    return v;
  }
  explicit DeviceQuant(const db::QuantMatrix& h)
      : m(shape_of(h)),
        q(h.qweight),
        s(sized(h.scales, db::cuda::device_matrix_bytes(m).scales)),
        z(sized(h.zeros, db::cuda::device_matrix_bytes(m).zeros)) {
    m.qweight = q.p;
    m.scales = reinterpret_cast<__half*>(s.p);
    m.zeros = h.zeros.empty() ? nullptr : z.p;
  }
};

}  // namespace dbtest
