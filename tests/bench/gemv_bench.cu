// GEMV variants timed side by side on the real layer shapes (dev tool, not a test):
//   build-gpu/decodebench_gemv_bench
// Prints GB/s of weight bytes for every kernel of the registry path and for experimental
// variants, each checked against the fast kernel's output first.
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

// Experimental "sliced" int4 GEMV: a block of T threads handles R rows; thread t owns the
// 32-column chunks t, t+T, ...; it reads its x slice from shared memory once per chunk and
// reuses it for all R rows (no per-row x traffic), with every weight load of the block
// issued before any math. Rows are reduced across the block at the end.
template <int T, int R, int KMAX>
__global__ void __launch_bounds__(T) sliced_int4(DeviceMatrix m, const __half* x, float* y) {
  extern __shared__ uint4 xs[];
  const int C = static_cast<int>(m.cols / 32);
  const int pieces = static_cast<int>(m.cols / 8);
  for (int p = threadIdx.x; p < pieces; p += T) xs[swizzle_piece(p)] = reinterpret_cast<const uint4*>(x)[p];
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * R;
  const uint4* base = static_cast<const uint4*>(m.qweight);
  const int groups = static_cast<int>(m.cols / m.group_size);
  const int shift = __ffs(m.group_size / 32) - 1;
  uint4 w[KMAX][R];
  uint16_t sc[KMAX][R];
  uint8_t zp[KMAX][R];
#pragma unroll
  for (int k = 0; k < KMAX; ++k) {
    const int c = threadIdx.x + k * T;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t row = min(row0 + r, m.rows - 1);
      if (c < C) {
        w[k][r] = ld_stream(base + row * C + c);
        const int64_t g = row * groups + (c >> shift);
        sc[k][r] = __ldg(reinterpret_cast<const uint16_t*>(m.scales) + g);
        zp[k][r] = __ldg(m.zeros + g);
      }
    }
  }
  __syncthreads();
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  const __half2 sixteenth = bits_h2(0x2c002c00u);
#pragma unroll
  for (int k = 0; k < KMAX; ++k) {
    const int c = threadIdx.x + k * T;
    if (c >= C) break;
    uint4 xv[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) xv[j] = xs[swizzle_piece(4 * c + j)];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint32_t zero = zp[k][r];
      const __half2 lo_sub = bits_h2((0x6400u + zero) * 0x00010001u);
      const __half2 hi_add = bits_h2((0xd400u + (zero << 4)) * 0x00010001u);
      const uint32_t words[4] = {w[k][r].x, w[k][r].y, w[k][r].z, w[k][r].w};
      __half2 a0 = __float2half2_rn(0.f), a1 = a0;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t q = words[j];
        const __half2 v01 = __hsub2(bits_h2((q & 0x000f000fu) | 0x64006400u), lo_sub);
        const __half2 v23 = __hfma2(bits_h2((q & 0x00f000f0u) | 0x64006400u), sixteenth, hi_add);
        q >>= 8;
        const __half2 v45 = __hsub2(bits_h2((q & 0x000f000fu) | 0x64006400u), lo_sub);
        const __half2 v67 = __hfma2(bits_h2((q & 0x00f000f0u) | 0x64006400u), sixteenth, hi_add);
        a0 = __hfma2(v01, bits_h2(xv[j].x), a0);
        a1 = __hfma2(v23, bits_h2(xv[j].y), a1);
        a0 = __hfma2(v45, bits_h2(xv[j].z), a0);
        a1 = __hfma2(v67, bits_h2(xv[j].w), a1);
      }
      const float2 fa = __half22float2(a0), fb = __half22float2(a1);
      acc[r] += (fa.x + fa.y + fb.x + fb.y) * __half2float(__ushort_as_half(sc[k][r]));
    }
  }
  __shared__ float part[T / 32][R];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0) part[warp][r] = v;
  }
  __syncthreads();
  if (threadIdx.x < R && row0 + threadIdx.x < m.rows) {
    float v = 0.f;
    for (int i = 0; i < T / 32; ++i) v += part[i][threadIdx.x];
    y[row0 + threadIdx.x] = v;
  }
}

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
      const double fast = t.us([&] { gemv(m, in, out, GemvVariant::fast, nullptr); });
      std::printf("%-5s %6ldx%-6ld fast   %7.1f us %7.0f GB/s\n", to_string(s), (long)rows, (long)cols, fast,
                  bytes / fast / 1e3);
      if (s == Scheme::int4) {
        auto run_sliced = [&](auto kernel, int T, int R) {
          const int blocks = static_cast<int>((rows + R - 1) / R);
          const double us = t.us([&] { kernel<<<blocks, T, cols * 2>>>(m, in.x, dy2); });
          std::vector<float> a(rows), b(rows);
          cudaMemcpy(a.data(), dy, rows * 4, cudaMemcpyDeviceToHost);
          cudaMemcpy(b.data(), dy2, rows * 4, cudaMemcpyDeviceToHost);
          double err = 0, mag = 0;
          for (int64_t i = 0; i < rows; ++i) {
            err = std::max(err, (double)std::fabs(a[i] - b[i]));
            mag = std::max(mag, (double)std::fabs(a[i]));
          }
          std::printf("int4  %6ldx%-6ld sliced T%d R%d %7.1f us %7.0f GB/s  (max diff %.2e of %.2e)\n", (long)rows,
                      (long)cols, T, R, us, bytes / us / 1e3, err, mag);
        };
        if (cols <= 4096) {
          run_sliced(sliced_int4<128, 8, 1>, 128, 8);
          run_sliced(sliced_int4<128, 16, 1>, 128, 16);
          run_sliced(sliced_int4<64, 8, 2>, 64, 8);
        } else {
          run_sliced(sliced_int4<128, 4, 4>, 128, 4);
          run_sliced(sliced_int4<256, 4, 2>, 256, 4);
          run_sliced(sliced_int4<128, 2, 4>, 128, 2);
        }
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
