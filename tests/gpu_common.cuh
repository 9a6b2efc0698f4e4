// Shared pieces of the GPU tests: skipping without a device, device buffers, uploads.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "common.cuh"
#include "gemv.cuh"
#include "decodebench/int4_meta.h"
#include "decodebench/weights.h"

namespace dbtest {

inline bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}

#define REQUIRE_GPU()                                                  \
  do {                                                                 \
    if (!::dbtest::have_gpu()) GTEST_SKIP() << "no CUDA device here";  \
  } while (0)

template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t count) : n(count) { CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T))); }
  explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size()) { upload(v); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  void upload(const std::vector<T>& v) { CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice)); }
  std::vector<T> download() const {
    std::vector<T> v(n);
    CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  void poison() { CUDA_CHECK(cudaMemset(p, 0xff, n * sizeof(T))); }  // NaN for floats and halves
};

// A host QuantMatrix on the device, in the canonical layout; int4's scales and zero points
// padded to whole blocks of 8 rows, as the repack needs (int4_meta::padded_rows).
struct DeviceQuant {
  DeviceBuffer<uint8_t> q;
  DeviceBuffer<uint16_t> s;
  DeviceBuffer<uint8_t> z;
  db::cuda::DeviceMatrix m;
  template <typename T>
  static std::vector<T> padded(const db::QuantMatrix& h, std::vector<T> v) {
    if (h.scheme == db::Scheme::int4 && !v.empty())
      v.resize(static_cast<size_t>(db::int4_meta::padded_rows(h.rows) * (h.cols / h.group_size)));
    return v;
  }
  explicit DeviceQuant(const db::QuantMatrix& h)
      : q(h.qweight), s(padded(h, h.scales)), z(padded(h, h.zeros)) {
    m.scheme = h.scheme;
    m.rows = h.rows;
    m.cols = h.cols;
    m.group_size = h.group_size;
    m.zero_point = h.zero_point;
    m.qweight = q.p;
    m.scales = reinterpret_cast<__half*>(s.p);
    m.zeros = h.zeros.empty() ? nullptr : z.p;
  }
};

}  // namespace dbtest
