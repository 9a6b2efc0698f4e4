// The batched step's linears timed at every batch (lab tool, not a test):
//   build-gpu/decodebench_skinny_bench [--tune] [--int4|--int8] [rows cols]...
// For each scheme and batch B, one 8b layer's four linears (qkv, o, gate/up, down; or the
// shapes given) through the tensor-core skinny GEMM, beside the rows GEMV at B = 1 and
// cuBLAS on fp16 weights at B; with --tune, every instantiated shape of the skinny kernel
// (rows tiles x chunks a step x blocks an SM); with --int4 or --int8, that scheme alone. Every launch reads a
// different copy of its matrix (the copies exceed L2 several times, as 32 layers do). Prints
// microseconds a layer, the weight bytes' GB/s and TFLOP/s. Correctness is the gpu tests' job.
#include <cublas_v2.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench_timing.cuh"
#include "common.cuh"
#include "gemv.cuh"
#include "skinny.cuh"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;

namespace {

constexpr size_t kRotateBytes = size_t{512} << 20;  // >> the 60 MB L2 of an H200

struct Copies {
  std::vector<DeviceMatrix> m;
  uint64_t bytes = 0;  // of one copy, meta included
};

void* alloc_filled(size_t bytes, int value) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
  CUDA_CHECK(cudaMemset(p, value, bytes));
  return p;
}

Copies make_copies(Scheme s, int64_t rows, int64_t cols) {
  DeviceMatrix d;
  d.scheme = s;
  d.rows = rows;
  d.cols = cols;
  d.group_size = s == Scheme::int4 ? 128 : 0;
  d.zero_point = s == Scheme::int4;
  d.int4_repacked = s == Scheme::int4;
  const MatrixBytes b = device_matrix_bytes(d);
  Copies c;
  c.bytes = b.total();
  const size_t n = kRotateBytes / c.bytes + 2;
  for (size_t i = 0; i < n; ++i) {
    DeviceMatrix m = d;
    m.qweight = alloc_filled(b.weights, 0x21);  // small finite values in every scheme
    if (b.scales) m.scales = static_cast<__half*>(alloc_filled(b.scales, 0x11));
    if (b.zeros) m.zeros = static_cast<uint8_t*>(alloc_filled(b.zeros, 0x08));
    c.m.push_back(m);
  }
  return c;
}


}  // namespace

int main(int argc, char** argv) {
  std::vector<std::pair<int64_t, int64_t>> shapes = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  int arg = 1;
  const bool tune = arg < argc && std::strcmp(argv[arg], "--tune") == 0;
  arg += tune;
  const char* only = nullptr;  // a scheme's name
  if (arg < argc && (std::strcmp(argv[arg], "--int4") == 0 || std::strcmp(argv[arg], "--int8") == 0))
    only = argv[arg++] + 2;
  if (arg + 1 < argc) {
    shapes.clear();
    for (int i = arg; i + 1 < argc; i += 2) shapes.push_back({std::atoll(argv[i]), std::atoll(argv[i + 1])});
  }
  const std::vector<int64_t> batches = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  const int64_t max_b = batches.back();
  int64_t max_cols = 0, max_rows = 0;
  for (auto [r, c] : shapes) max_cols = std::max(max_cols, c), max_rows = std::max(max_rows, r);
  __half* x = static_cast<__half*>(alloc_filled(2ull * max_b * max_cols, 0x3c));  // 1.0-ish
  float* y = static_cast<float*>(alloc_filled(4ull * max_b * max_rows, 0));
  size_t ws_bytes = 0;
  for (auto [r, c] : shapes)
    for (int64_t b : batches) ws_bytes = std::max(ws_bytes, skinny_workspace_bytes(r, c, b));
  void* ws = alloc_filled(ws_bytes, 0);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) fail("cublasCreate");

  std::printf("%-6s %5s %-8s %10s %9s %9s\n", "scheme", "B", "kernel", "us/layer", "GB/s", "TFLOP/s");
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4}) {
    if (only && std::strcmp(only, to_string(s)) != 0) continue;
    std::vector<Copies> copies;
    uint64_t layer_bytes = 0;
    double layer_flop = 0;
    for (auto [r, c] : shapes) {
      copies.push_back(make_copies(s, r, c));
      layer_bytes += copies.back().bytes;
      layer_flop += 2.0 * r * c;
    }
    auto report = [&](int64_t b, const char* kernel, double us) {
      std::printf("%-6s %5lld %-8s %10.2f %9.0f %9.1f\n", to_string(s), static_cast<long long>(b), kernel,
                  us, layer_bytes / us / 1e3, layer_flop * b / us / 1e6);
    };
    auto layer = [&](auto&& one) {
      return [&, one](int i) {
        for (size_t k = 0; k < copies.size(); ++k) one(copies[k].m[i % copies[k].m.size()]);
      };
    };
    GemvInput in;
    in.x = x;
    GemvOutput out;
    out.y = y;
    report(1, "gemv", time_us(layer([&](const DeviceMatrix& m) { gemv(m, in, out, GemvVariant::fast, nullptr); }), 40, 4));
    // Every instantiated shape at every batch it serves (skinny_kernel_shapes), then the
    // default's.
    for (int64_t b : batches) {
      if (tune)
        for (const SkinnyKernelShape& k : skinny_kernel_shapes()) {
          if (k.max_batch != skinny_max_batch(b)) continue;
          for (int bps : {1, 2, 4, 8}) {
            char label[32];
            std::snprintf(label, sizeof label, "m%du%db%d", k.row_tiles, k.chunks, bps);
            const SkinnyShape t{k.row_tiles, k.chunks, bps};
            report(b, label, time_us(layer([&](const DeviceMatrix& m) {
                                       gemm_skinny_tuned(m, x, b, y, false, ws, t, nullptr);
                                     }),
                                     20, 4));
          }
        }
      report(b, "skinny",
             time_us(layer([&](const DeviceMatrix& m) { gemm_skinny(m, x, b, y, false, ws, nullptr); }), 40, 4));
    }
    if (s == Scheme::fp16) {
      for (int64_t b : batches) {
        auto gemm = [&](const DeviceMatrix& m) {
          const float alpha = 1.f, beta = 0.f;
          cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m.rows), static_cast<int>(b),
                       static_cast<int>(m.cols), &alpha, m.qweight, CUDA_R_16F, static_cast<int>(m.cols), x,
                       CUDA_R_16F, static_cast<int>(m.cols), &beta, y, CUDA_R_32F, static_cast<int>(m.rows),
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        };
        report(b, "cublas", time_us(layer(gemm), 40, 4));
      }
    }
    for (Copies& c : copies)
      for (DeviceMatrix& m : c.m) {
        cudaFree(m.qweight);
        cudaFree(m.scales);
        cudaFree(m.zeros);
      }
  }
  cublasDestroy(h);
  return 0;
}
