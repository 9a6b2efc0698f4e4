// The tiles GEMV (kernels/gemv_tiles.cu) on its own, every instantiated shape (lab tool, not a
// test):
//   build-gpu/decodebench_tiles_gemv_bench [--int8 | --fp16] [--check-only] [rows cols]...
//
// int4 by default; --int8 the same on int8 weights (int8_tiles_layout.h, repack_int8_tiles),
// beside the rows GEMV on the canonical int8 layout; --fp16 on fp16 weights
// (fp16_tiles_layout.h, repack_fp16_tiles), beside the rows GEMV on the canonical fp16 layout at
// 1 sequence and cuBLAS (the batched step's path for fp16 without the tiles) at each batch, and
// then the same for the 8b lm_head (128256 x 4096) on its own ("set": "lm_head").
//
// The product's kernel and repack, as the batched step runs them at 2 to 16 sequences
// (gemv_tiles.cuh says why the design); here also at 1, beside the rows GEMV. Each matrix is
// made canonical on the device and repacked into the tiles layout by repack_int4_tiles.
//
// Checked against a double-precision CPU dot of the same codes on small and 8b shapes at
// 1-16 sequences, every shape, within the fp32 accumulations' bound (tiles_bound below, the
// gpu tests' own), then timed on one 8b layer's four matrices (qkv 6144 x 4096, o 4096 x 4096,
// gate/up 28672 x 4096, down 4096 x 14336; or the shapes given) at each batch, beside the rows
// GEMV at batch 1 on the engine's int4 layout, every launch on another copy of the weights (the
// copies exceed L2). Prints a line a (kernel, shape, batch): microseconds a layer and each
// matrix's, and GB/s of the bytes read (the tiles' meta is 4 bytes a row and group, the
// engine's 3); the default shape gemv_tiles() picks at each batch is the "default" line's.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_timing.cuh"
#include "common.cuh"
#include "decodebench/quant.h"
#include "fp16_tiles_layout.h"
#include "gemv.cuh"
#include "gemv_tiles.cuh"
#include "int4_tiles_layout.h"
#include "int8_tiles_layout.h"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;
using namespace db::tiles;

namespace {

constexpr size_t kRotateBytes = size_t{512} << 20;  // >> the H200's L2
constexpr int kGroup = kStepCols;                   // the bench's groups: 128 columns

// The bound on |got - exact| of one output, relative to sum |s (q - z) x|: every term passes
// through at most 128 additions in its step's mma chain (16 a mma, 8 k-steps, counted as if
// one by one), the scale's fma, the row's steps and the warps' sums, each rounding by at most
// 2^-23 of its operands (the tensor cores' fp32 adds truncate, so a whole ulp).
double tiles_bound(int64_t cols, int warps) {
  return std::ldexp(static_cast<double>(kStepCols + 1 + cols / kStepCols + warps), -23);
}
// int8: the mmas accumulate straight into the row's sums, so a term passes through 16
// additions in its mma, one a later mma of its warp (4 a step of 64 columns), the warps' sums
// and the row scale's product.
double tiles8_bound(int64_t cols, int warps) {
  const int64_t steps = cols / tiles8::kStepCols;
  return std::ldexp(static_cast<double>(16 + 4 * ((steps + warps - 1) / warps) + warps + 1), -23);
}
// fp16: the same without the scale, 2 mmas a step of 32 columns.
double tiles16_bound(int64_t cols, int warps) {
  const int64_t steps = cols / tiles16::kStepCols;
  return std::ldexp(static_cast<double>(16 + 2 * ((steps + warps - 1) / warps) + warps), -23);
}
double bound_of(Scheme s, int64_t cols, int warps) {
  return s == Scheme::int8 ? tiles8_bound(cols, warps) : s == Scheme::fp16 ? tiles16_bound(cols, warps)
                                                                           : tiles_bound(cols, warps);
}

uint16_t f16_bits(float v) {
  const __half h = __float2half_rn(v);
  return __half_as_ushort(h);
}

template <class T>
T* uploaded(const std::vector<T>& v, size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
  CUDA_CHECK(cudaMemset(p, 0, bytes));
  CUDA_CHECK(cudaMemcpy(p, v.data(), std::min(bytes, v.size() * sizeof(T)), cudaMemcpyHostToDevice));
  return static_cast<T*>(p);
}

// Codes q (0..15), zero points z (0..15) and scales s a row and group: the canonical matrix on
// the device (quant.h's packing), repacked into the tiles layout by the product's repack.
DeviceMatrix upload(const std::vector<uint8_t>& q, const std::vector<uint8_t>& z, const std::vector<float>& s,
                    int64_t rows, int64_t cols) {
  const MatrixShape shape{Scheme::int4, rows, cols, kGroup, true};
  DeviceMatrix c = device_matrix(shape, MatrixLayout::canonical);
  const MatrixBytes cb = device_matrix_bytes(c);
  std::vector<uint8_t> packed(static_cast<size_t>(rows * cols / 2));
  for (int64_t i = 0; i < rows * cols; i += 2) packed[i / 2] = quant::pack_int4(q[i], q[i + 1]);
  std::vector<uint16_t> scales(s.size());
  for (size_t i = 0; i < s.size(); ++i) scales[i] = f16_bits(s[i]);
  c.qweight = uploaded(packed, cb.weights);
  c.scales = reinterpret_cast<__half*>(uploaded(scales, cb.scales));
  c.zeros = uploaded(z, cb.zeros);
  DeviceMatrix t = device_matrix(shape, MatrixLayout::int4_tiles);
  const MatrixBytes tb = device_matrix_bytes(t);
  CUDA_CHECK(cudaMalloc(&t.qweight, tb.weights));
  CUDA_CHECK(cudaMalloc(&t.scales, tb.scales));
  repack_int4_tiles(c, t, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  cudaFree(c.qweight);
  cudaFree(c.scales);
  cudaFree(c.zeros);
  return t;
}

// Codes q (-128..127) and a scale s a row: the canonical int8 matrix on the device, repacked
// into the int8 tiles layout by the product's repack.
DeviceMatrix upload8(const std::vector<int8_t>& q, const std::vector<float>& s, int64_t rows, int64_t cols) {
  const MatrixShape shape{Scheme::int8, rows, cols, 0, false};
  DeviceMatrix c = device_matrix(shape, MatrixLayout::canonical);
  std::vector<uint16_t> scales(s.size());
  for (size_t i = 0; i < s.size(); ++i) scales[i] = f16_bits(s[i]);
  c.qweight = uploaded(q, q.size());
  c.scales = reinterpret_cast<__half*>(uploaded(scales, scales.size() * 2));
  DeviceMatrix t = device_matrix(shape, MatrixLayout::int8_tiles);
  const MatrixBytes tb = device_matrix_bytes(t);
  CUDA_CHECK(cudaMalloc(&t.qweight, tb.weights));
  CUDA_CHECK(cudaMalloc(&t.scales, tb.scales));
  repack_int8_tiles(c, t, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  cudaFree(c.qweight);
  cudaFree(c.scales);
  return t;
}

// fp16 values w (fp16 bits): the canonical fp16 matrix on the device, repacked into the fp16
// tiles layout by the product's repack.
DeviceMatrix upload16(const std::vector<uint16_t>& w, int64_t rows, int64_t cols) {
  const MatrixShape shape{Scheme::fp16, rows, cols, 0, false};
  DeviceMatrix c = device_matrix(shape, MatrixLayout::canonical);
  c.qweight = uploaded(w, w.size() * 2);
  DeviceMatrix t = device_matrix(shape, MatrixLayout::fp16_tiles);
  CUDA_CHECK(cudaMalloc(&t.qweight, device_matrix_bytes(t).weights));
  repack_fp16_tiles(c, t, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  cudaFree(c.qweight);
  return t;
}

// Another copy of `t` on the GPU (the timing's copies).
DeviceMatrix clone(const DeviceMatrix& t) {
  DeviceMatrix c = t;
  const MatrixBytes b = device_matrix_bytes(t);
  CUDA_CHECK(cudaMalloc(&c.qweight, b.weights));
  CUDA_CHECK(cudaMemcpy(c.qweight, t.qweight, b.weights, cudaMemcpyDeviceToDevice));
  if (b.scales) {
    CUDA_CHECK(cudaMalloc(&c.scales, b.scales));
    CUDA_CHECK(cudaMemcpy(c.scales, t.scales, b.scales, cudaMemcpyDeviceToDevice));
  }
  return c;
}

void release(DeviceMatrix& t) {
  cudaFree(t.qweight);
  cudaFree(t.scales);
}

std::string label(const TilesShape& sh) {
  return tiles_shape_label(sh);
}

// Every shape at 1, 2, 3, 8, 9 and 16 sequences, and the default shape at each, against the
// CPU's double-precision dot; returns the number of outputs past their bound.
int64_t check(int64_t rows, int64_t cols, std::mt19937& rng, Scheme scheme) {
  const bool int8 = scheme == Scheme::int8, fp16 = scheme == Scheme::fp16;
  // int8: a scale a row; fp16: none (the value is the code times a "scale" of 1, below).
  const int64_t groups = scheme == Scheme::int4 ? cols / kGroup : 1, group = cols / groups;
  std::vector<uint8_t> q(rows * cols), z(rows * groups, 0);
  std::vector<float> s(rows * groups);
  for (uint8_t& v : q) v = static_cast<uint8_t>(rng() % (int8 || fp16 ? 256 : 16));
  if (scheme == Scheme::int4)
    for (uint8_t& v : z) v = static_cast<uint8_t>(rng() % 16);
  for (float& v : s) v = __half2float(__float2half_rn(std::ldexp(1.f + (rng() % 1024) / 1024.f, -10)));
  std::vector<int8_t> q8(q.begin(), q.end());  // int8: the same bytes as signed codes
  // fp16: the signed codes times a row's scale, rounded to fp16 (the values themselves).
  std::vector<uint16_t> w16(fp16 ? rows * cols : 0);
  std::vector<double> wd(w16.size());
  for (size_t i = 0; i < w16.size(); ++i) {
    w16[i] = f16_bits(s[i / cols] * q8[i]);
    wd[i] = __half2float(__ushort_as_half(w16[i]));
  }
  DeviceMatrix t = int8 ? upload8(q8, s, rows, cols) : fp16 ? upload16(w16, rows, cols) : upload(q, z, s, rows, cols);
  const int max_b = 16;
  std::vector<__half> xh(max_b * cols);
  std::vector<double> xd(max_b * cols);
  for (size_t i = 0; i < xh.size(); ++i) {
    xh[i] = __float2half_rn((static_cast<int>(rng() % 2001) - 1000) / 1000.f);
    xd[i] = __half2float(xh[i]);
  }
  __half* x = nullptr;
  float* y = nullptr;
  CUDA_CHECK(cudaMalloc(&x, xh.size() * 2));
  CUDA_CHECK(cudaMalloc(&y, 4ull * max_b * rows));
  CUDA_CHECK(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
  std::vector<double> ref(max_b * rows), mag(max_b * rows);
  for (int n = 0; n < max_b; ++n)
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0, m = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const double code = int8 ? double(q8[r * cols + k]) : double(q[r * cols + k]) - z[r * groups + k / group];
        const double v = (fp16 ? wd[r * cols + k] : s[r * groups + k / group] * code) * xd[n * cols + k];
        sum += v;
        m += std::fabs(v);
      }
      ref[n * rows + r] = sum;
      mag[n * rows + r] = m;
    }
  int64_t bad = 0;
  for (int b : {1, 2, 3, 8, 9, 16}) {
    std::vector<TilesShape> shapes = tiles_launchable_shapes();
    shapes.push_back(tiles_shape(t, b));
    for (const TilesShape& sh : shapes) {
      CUDA_CHECK(cudaMemset(y, 0xff, 4ull * max_b * rows));  // NaN: an output never written fails
      gemv_tiles_shaped(t, x, b, y, false, sh, nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<float> got(b * rows);
      CUDA_CHECK(cudaMemcpy(got.data(), y, got.size() * 4, cudaMemcpyDeviceToHost));
      double worst = 0;
      int64_t here = 0;
      for (int n = 0; n < b; ++n)
        for (int64_t r = 0; r < rows; ++r) {
          const double bound = bound_of(scheme, cols, sh.warps) * mag[n * rows + r] + 1e-30;
          const double err = std::fabs(got[n * rows + r] - ref[n * rows + r]);
          worst = std::max(worst, err / bound);
          if (!(err <= bound)) {
            if (here++ < 3)
              fmt::print(stderr, "check {}x{} B={} {}: row {} seq {}: {} against {} (bound {:.3g})\n", rows, cols,
                         b, label(sh), r, n, got[n * rows + r], ref[n * rows + r], bound);
          }
        }
      bad += here;
      fmt::print("{{\"check\": \"{}x{}\", \"batch\": {}, \"shape\": \"{}\", \"bad\": {}, \"worst_of_bound\": {:.3f}}}\n",
                 rows, cols, b, label(sh), here, worst);
    }
  }
  release(t);
  cudaFree(x);
  cudaFree(y);
  return bad;
}

// The engine's int4 matrix (groups of 128 with zero points, its repacked layout) filled with
// small finite values, for the rows GEMV's time at batch 1.
// int8 and fp16: their canonical layout (int8 a scale a row), which cuBLAS reads too (fp16).
DeviceMatrix engine_copy(int64_t rows, int64_t cols, Scheme scheme) {
  const bool int4 = scheme == Scheme::int4;
  DeviceMatrix d;
  d.scheme = scheme;
  d.rows = rows;
  d.cols = cols;
  d.group_size = int4 ? kGroup : 0;
  d.zero_point = int4;
  d.int4_repacked = int4;
  const MatrixBytes b = device_matrix_bytes(d);
  auto filled = [](size_t bytes, int value) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
    CUDA_CHECK(cudaMemset(p, value, bytes));
    return p;
  };
  d.qweight = filled(b.weights, 0x21);
  if (b.scales) d.scales = static_cast<__half*>(filled(b.scales, 0x11));
  if (b.zeros) d.zeros = static_cast<uint8_t*>(filled(b.zeros, 0x08));
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::pair<int64_t, int64_t>> shapes = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  int arg = 1;
  Scheme scheme = Scheme::int4;
  if (arg < argc && std::strcmp(argv[arg], "--int8") == 0) scheme = Scheme::int8, ++arg;
  if (arg < argc && std::strcmp(argv[arg], "--fp16") == 0) scheme = Scheme::fp16, ++arg;
  const bool fp16 = scheme == Scheme::fp16;
  const bool check_only = arg < argc && std::strcmp(argv[arg], "--check-only") == 0;
  arg += check_only;
  bool given = false;
  if (arg + 1 < argc) {
    shapes.clear();
    given = true;
    for (int i = arg; i + 1 < argc; i += 2) shapes.push_back({std::atoll(argv[i]), std::atoll(argv[i + 1])});
  }
  try {
    std::mt19937 rng(2026);
    int64_t bad = check(48, 256, rng, scheme) + check(200, 384, rng, scheme) + check(4096, 4096, rng, scheme);
    fmt::print("{{\"checks\": \"{}\"}}\n", bad == 0 ? "PASS" : "FAIL");
    if (bad != 0) return 1;
    if (check_only) return 0;

    cublasHandle_t cublas = nullptr;
    if (fp16 && cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) fail("cublasCreate");
    // One set of matrices timed together: a layer's four, or (fp16) the lm_head.
    auto time_set = [&](const char* set, const std::vector<std::pair<int64_t, int64_t>>& mats) {
      int64_t max_rows = 0, max_cols = 0;
      for (auto [r, c] : mats) max_rows = std::max(max_rows, r), max_cols = std::max(max_cols, c);
      __half* x = nullptr;
      float* y = nullptr;
      CUDA_CHECK(cudaMalloc(&x, 2ull * 16 * max_cols));
      CUDA_CHECK(cudaMemset(x, 0x3c, 2ull * 16 * max_cols));  // ~1.0
      CUDA_CHECK(cudaMalloc(&y, 4ull * 16 * max_rows));
      // Copies of each matrix in both layouts, together past L2; values are irrelevant to time.
      std::vector<std::vector<DeviceMatrix>> tiles(mats.size());
      std::vector<std::vector<DeviceMatrix>> engine(mats.size());
      uint64_t tiles_layer = 0, engine_layer = 0;
      for (size_t i = 0; i < mats.size(); ++i) {
        const auto [rows, cols] = mats[i];
        const int64_t groups = scheme == Scheme::int4 ? cols / kGroup : 1;
        std::vector<float> s(rows * groups, 1.f / 512);
        DeviceMatrix one;
        if (scheme == Scheme::int8) {
          one = upload8(std::vector<int8_t>(rows * cols, 5), s, rows, cols);
        } else if (fp16) {
          one = upload16(std::vector<uint16_t>(rows * cols, f16_bits(5.f / 512)), rows, cols);
        } else {
          std::vector<uint8_t> q(rows * cols, 5), z(rows * groups, 8);
          one = upload(q, z, s, rows, cols);
        }
        const uint64_t bytes = device_matrix_bytes(one).total();
        const size_t n = kRotateBytes / bytes + 2;
        tiles[i].push_back(one);
        for (size_t k = 1; k < n; ++k) tiles[i].push_back(clone(one));
        for (size_t k = 0; k < n; ++k) engine[i].push_back(engine_copy(rows, cols, scheme));
        tiles_layer += bytes;
        engine_layer += device_matrix_bytes(engine[i][0]).total();
      }
      auto line = [&](const char* kernel, int batch, const std::string& shape, uint64_t bytes,
                      const std::vector<double>& us) {
        double total = 0;
        std::string each;
        for (double u : us) {
          total += u;
          each += fmt::format("{}{:.2f}", each.empty() ? "" : ", ", u);
        }
        fmt::print(
            "{{\"kernel\": \"{}\", \"batch\": {}, \"shape\": \"{}\", \"us_layer\": {:.2f}, \"gbps\": {:.0f}, "
            "\"us_matrices\": [{}], \"scheme\": \"{}\", \"set\": \"{}\"}}\n",
            kernel, batch, shape, total, bytes / total / 1e3, each, to_string(scheme), set);
        std::fflush(stdout);
      };
      {  // the rows GEMV at batch 1
        GemvInput in;
        in.x = x;
        GemvOutput out;
        out.y = y;
        std::vector<double> us;
        for (size_t i = 0; i < mats.size(); ++i)
          us.push_back(time_us(
              [&](int k) { gemv(engine[i][k % engine[i].size()], in, out, GemvVariant::fast, nullptr); }, 40, 4));
        line("rows_gemv", 1, "engine", engine_layer, us);
      }
      for (int b : {1, 2, 3, 4, 8, 9, 16}) {
        if (fp16 && b > 1) {  // cuBLAS on the canonical copies, as the step without the tiles (gemm_rows)
          std::vector<double> us;
          for (size_t i = 0; i < mats.size(); ++i)
            us.push_back(time_us(
                [&](int k) {
                  const DeviceMatrix& m = engine[i][k % engine[i].size()];
                  const float alpha = 1.f, beta = 0.f;
                  if (cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m.rows), b,
                                   static_cast<int>(m.cols), &alpha, m.qweight, CUDA_R_16F,
                                   static_cast<int>(m.cols), x, CUDA_R_16F, static_cast<int>(m.cols), &beta, y,
                                   CUDA_R_32F, static_cast<int>(m.rows), CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
                    fail("cublasGemmEx");
                },
                40, 4));
          line("cublas", b, "canonical", engine_layer, us);
        }
        for (const TilesShape& sh : tiles_launchable_shapes()) {
          std::vector<double> us;
          for (size_t i = 0; i < mats.size(); ++i)
            us.push_back(time_us(
                [&](int k) { gemv_tiles_shaped(tiles[i][k % tiles[i].size()], x, b, y, false, sh, nullptr); },
                40, 4));
          line("tiles", b, label(sh), tiles_layer, us);
        }
        // gemv_tiles() as the step runs it: each matrix at its default shape (named in order).
        std::vector<double> us;
        std::string defaults;
        for (size_t i = 0; i < mats.size(); ++i) {
          us.push_back(time_us(
              [&](int k) { gemv_tiles(tiles[i][k % tiles[i].size()], x, b, y, false, nullptr); }, 40, 4));
          defaults += (defaults.empty() ? "" : ",") + label(tiles_shape(tiles[i][0], b));
        }
        line("tiles_default", b, defaults, tiles_layer, us);
      }
      for (auto& v : tiles)
        for (DeviceMatrix& m : v) release(m);
      for (auto& v : engine)
        for (DeviceMatrix& m : v) {
          release(m);
          cudaFree(m.zeros);
        }
      cudaFree(x);
      cudaFree(y);
    };
    time_set("layer", shapes);
    if (fp16 && !given) time_set("lm_head", {{128256, 4096}});  // 8b's, 1.05 GB
    if (cublas) cublasDestroy(cublas);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tiles_gemv_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
