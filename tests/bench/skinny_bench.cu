// The batched step's linears timed at every batch (lab tool, not a test):
//   build-gpu/decodebench_skinny_bench [--tune] [--fp16|--int8|--int4|--fp8] [rows cols]...
// For each scheme and batch B, one 8b layer's four linears (qkv, o, gate/up, down; or the
// shapes given) through the tensor-core skinny GEMM and, at B = 2 to 8, the columns GEMV,
// beside the rows GEMV at B = 1 and cuBLAS on fp16 weights at B; with --tune, every
// instantiated shape of the skinny kernel (rows tiles x chunks a step x blocks an SM) and of the
// columns GEMV (sequences x chunks a thread x rows a group x blocks an SM); with a scheme, that
// scheme alone. Every launch reads a different copy of its matrix (the copies exceed L2 several
// times, as 32 layers do: the weights come from HBM). Prints microseconds a layer, the weight
// bytes' GB/s and TFLOP/s, and for the rows and columns GEMVs each matrix's microseconds; a
// matrix the columns GEMV does not take at B (its inputs past L1's share) runs the path the
// linear plan gives it there, the skinny GEMM or cuBLAS, and is marked `*`. Correctness is the
// gpu tests' job.
#include <cublas_v2.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench_timing.cuh"
#include "common.cuh"
#include "decodebench/linear_shapes.h"
#include "gemv.cuh"
#include "gemv_columns.cuh"
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
  for (const char* o : {"--fp16", "--int8", "--int4", "--fp8"})
    if (arg < argc && std::strcmp(argv[arg], o) == 0) only = argv[arg++] + 2;
  if (arg + 1 < argc) {
    shapes.clear();
    for (int i = arg; i + 1 < argc; i += 2) shapes.push_back({std::atoll(argv[i]), std::atoll(argv[i + 1])});
  }
  const std::vector<int64_t> batches = {1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256};
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

  std::printf("%-6s %5s %-12s %10s %9s %9s   %s\n", "scheme", "B", "kernel", "us/layer", "GB/s", "TFLOP/s",
              "us a matrix, in the order of the shapes");
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8}) {
    if (only && std::strcmp(only, to_string(s)) != 0) continue;
    std::vector<Copies> copies;
    uint64_t layer_bytes = 0;
    double layer_flop = 0;
    for (auto [r, c] : shapes) {
      copies.push_back(make_copies(s, r, c));
      layer_bytes += copies.back().bytes;
      layer_flop += 2.0 * r * c;
    }
    auto report = [&](int64_t b, const char* kernel, double us, const std::string& per_matrix = "") {
      std::printf("%-6s %5lld %-12s %10.2f %9.0f %9.1f   %s\n", to_string(s), static_cast<long long>(b), kernel, us,
                  layer_bytes / us / 1e3, layer_flop * b / us / 1e6, per_matrix.c_str());
    };
    auto layer = [&](auto&& one) {
      return [&, one](int i) {
        for (size_t k = 0; k < copies.size(); ++k) one(copies[k].m[i % copies[k].m.size()]);
      };
    };
    // Each matrix timed alone (its copies rotating), and the layer as their sum; `one(m)` may
    // decline a matrix (false), which then runs `other(m)` and is marked.
    auto per_matrix = [&](int64_t b, const char* kernel, auto&& one, auto&& other) {
      double total = 0;
      std::string each;
      for (Copies& c : copies) {
        bool own = true;
        const double us = time_us(
            [&](int i) {
              const DeviceMatrix& m = c.m[i % c.m.size()];
              own = one(m);
              if (!own) other(m);
            },
            40, 4);
        total += us;
        char cell[32];
        std::snprintf(cell, sizeof cell, "%8.2f%s", us, own ? " " : "*");
        each += cell;
      }
      report(b, kernel, total, each);
    };
    auto cublas = [&](const DeviceMatrix& m, int64_t b) {
      const float alpha = 1.f, beta = 0.f;
      cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m.rows), static_cast<int>(b),
                   static_cast<int>(m.cols), &alpha, m.qweight, CUDA_R_16F, static_cast<int>(m.cols), x, CUDA_R_16F,
                   static_cast<int>(m.cols), &beta, y, CUDA_R_32F, static_cast<int>(m.rows), CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT);
    };
    GemvInput in;
    in.x = x;
    GemvOutput out;
    out.y = y;
    per_matrix(
        1, "gemv",
        [&](const DeviceMatrix& m) {
          gemv(m, in, out, GemvVariant::fast, nullptr);
          return true;
        },
        [](const DeviceMatrix&) {});
    for (int64_t b : batches) {
      // Every instantiated skinny shape at every batch it serves (skinny_kernel_shapes), then the
      // default's.
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
      if (b < 2 || b > kGemvColumnsMaxBatch) continue;
      // The columns GEMV; where it does not take a matrix, the plan's path above it.
      auto above = [&](const DeviceMatrix& m) {
        if (s == Scheme::fp16)
          cublas(m, b);
        else
          gemm_skinny(m, x, b, y, false, ws, nullptr);
      };
      per_matrix(
          b, "columns",
          [&](const DeviceMatrix& m) {
            const char* why = nullptr;
            if (!gemv_columns_supports(m, b, &why)) return false;
            gemv_columns(m, x, b, y, false, nullptr);
            return true;
          },
          above);
      if (!tune) continue;
      // Every instantiated columns shape that holds the batch, at as many blocks an SM as fit
      // and at 1 to 4; a shape a matrix cannot run (its chunks doubled for a long row past the
      // instantiated ones) is skipped.
      for (const ColumnsShape& k : columns_kernel_shapes()) {
        if (k.columns < b) continue;
        for (int bps : {0, 1, 2, 3, 4}) {
          char label[32];
          std::snprintf(label, sizeof label, "c%dk%dr%db%d", k.columns, k.chunks, k.rows, bps);
          try {
            per_matrix(
                b, label,
                [&](const DeviceMatrix& m) {
                  const char* why = nullptr;
                  if (!gemv_columns_supports(m, b, &why)) return false;
                  gemv_columns_shaped(m, x, b, y, false, {k.columns, k.chunks, k.rows, bps}, nullptr);
                  return true;
                },
                above);
          } catch (const db::Error& e) {
            std::printf("%-6s %5lld %-12s skipped: %s\n", to_string(s), static_cast<long long>(b), label, e.what());
          }
        }
      }
    }
    if (s == Scheme::fp16)
      for (int64_t b : batches) report(b, "cublas", time_us(layer([&](const DeviceMatrix& m) { cublas(m, b); }), 40, 4));
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
