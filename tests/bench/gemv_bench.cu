// GEMV variants timed side by side on the real layer shapes (dev tool, not a test):
//   build-gpu/decodebench_gemv_bench
// Prints GB/s of weight bytes for the fast kernel of each scheme and the two-row warp kernel
// it replaced where it did (correctness is the gpu tests' job).
#include <cstdio>
#include <random>
#include <vector>

#include "common.cuh"
#include "decodebench/half.h"
#include "decodebench/weights.h"
#include "gemv.cuh"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;

namespace {

struct Timer {
  cudaEvent_t a, b;
  Timer() { cudaEventCreate(&a); cudaEventCreate(&b); }
  template <class F>
  double us(F&& f, int reps = 50) {
    f();
    cudaDeviceSynchronize();
    cudaEventRecord(a);
    for (int i = 0; i < reps; ++i) f();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return ms * 1e3 / reps;
  }
};

}  // namespace

int main() {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 0.02f);
  Timer t;
  for (const auto& shape : shapes) {
    const int64_t rows = shape.first, cols = shape.second;
    std::vector<float> w(rows * cols);
    for (float& v : w) v = nd(rng);
    std::vector<uint16_t> xh(cols);
    for (auto& h : xh) h = f32_to_f16(nd(rng) * 50);
    uint16_t* dx;
    float *dy, *dy2;
    CUDA_CHECK(cudaMalloc(&dx, cols * 2));
    CUDA_CHECK(cudaMalloc(&dy, rows * 4));
    CUDA_CHECK(cudaMalloc(&dy2, rows * 4));
    CUDA_CHECK(cudaMemcpy(dx, xh.data(), cols * 2, cudaMemcpyHostToDevice));
    for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4}) {
      const QuantMatrix q = quantize_matrix(w.data(), rows, cols, s, 128, true);
      uint8_t *qw, *zz = nullptr;
      uint16_t* sc = nullptr;
      CUDA_CHECK(cudaMalloc(&qw, q.qweight.size()));
      CUDA_CHECK(cudaMemcpy(qw, q.qweight.data(), q.qweight.size(), cudaMemcpyHostToDevice));
      if (!q.scales.empty()) {
        CUDA_CHECK(cudaMalloc(&sc, q.scales.size() * 2));
        CUDA_CHECK(cudaMemcpy(sc, q.scales.data(), q.scales.size() * 2, cudaMemcpyHostToDevice));
      }
      if (!q.zeros.empty()) {
        CUDA_CHECK(cudaMalloc(&zz, q.zeros.size()));
        CUDA_CHECK(cudaMemcpy(zz, q.zeros.data(), q.zeros.size(), cudaMemcpyHostToDevice));
      }
      DeviceMatrix m;
      m.scheme = s;
      m.rows = rows;
      m.cols = cols;
      m.group_size = s == Scheme::int4 ? 128 : 0;
      m.zero_point = s == Scheme::int4;
      m.qweight = qw;
      m.scales = reinterpret_cast<__half*>(sc);
      m.zeros = zz;
      const double bytes = q.qweight.size() + q.scales.size() * 2 + q.zeros.size();
      GemvInput in;
      in.x = reinterpret_cast<const __half*>(dx);
      GemvOutput out;
      out.y = dy;
      if (s == Scheme::int4) repack_int4(m, nullptr);
      for (GemvVariant v : {GemvVariant::fast, GemvVariant::warp}) {
        const double us = t.us([&] { gemv(m, in, out, v, nullptr); });
        std::printf("%-5s %6ldx%-6ld %-5s %7.1f us %7.0f GB/s\n", to_string(s), (long)rows, (long)cols,
                    v == GemvVariant::fast ? "fast" : "warp", us, bytes / us / 1e3);
      }
      cudaFree(qw);
      cudaFree(sc);
      cudaFree(zz);
    }
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dy2);
  }
  return 0;
}
