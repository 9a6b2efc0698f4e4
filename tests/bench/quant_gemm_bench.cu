// The batched step's quantized linears at many sequences (lab tool, not a test):
//   build-gpu/decodebench_quant_gemm_bench [--tune] [--int4|--int8] [rows cols]...
// For int8 and int4 (or the one named) and each batch B, each of one 8b layer's four matrices
// (qkv, o, gate/up, down; or the shapes given) through
//   quant_gemm   the quantized GEMM (kernels/quant_gemm.cu), at its default shape;
//   skinny       the skinny GEMM (kernels/skinny.cu), at B <= 64;
//   fp16_copy    the fp16 copy of the matrix (dequantize_any_to_f16) and cuBLAS on it, as the
//                step ran past 64 sequences without the quantized GEMM;
//   cublas_fp16  cuBLAS on fp16 weights of the same shape (what 8b-fp16 runs);
// with --tune, the quantized GEMM also at 2 and 4 row warps x 1, 2, 3, 4, 6 and 8 column
// splits x rings of 3 and 4 stages (shape "m4s2r4": 4 row warps, 2 splits, 4 stages). One JSON line a measurement: microseconds a call, TFLOP/s, and the weight bytes'
// GB/s. Weights, scales and x are random (the tensor cores draw more power on random
// operands than on constant ones); every launch reads a different copy of its matrix, the
// copies together several times the 60 MB L2, as 32 layers are. Correctness is the gpu tests'.
#include <cublas_v2.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_timing.cuh"
#include "common.cuh"
#include "gemv.cuh"
#include "prefill.cuh"
#include "quant_gemm.cuh"
#include "skinny.cuh"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;

namespace {

constexpr size_t kRotateBytes = size_t{512} << 20;  // >> the 60 MB L2 of an H200

__device__ uint32_t mix(uint64_t i, uint32_t seed) {
  uint64_t z = i * 0x9e3779b97f4a7c15ull + seed;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint32_t>(z ^ (z >> 31));
}

// Random bytes (int8 and fp8 codes, int4 nibbles, zero points masked to 4 bits by `mask`).
__global__ void fill_bytes(uint8_t* p, size_t n, uint32_t seed, uint8_t mask) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    p[i] = static_cast<uint8_t>(mix(i, seed)) & mask;
}

// Random fp16 values in [lo, hi).
__global__ void fill_halves(__half* p, size_t n, uint32_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    p[i] = __float2half(lo + (hi - lo) * (mix(i, seed) >> 8) * (1.f / 16777216.f));
}

uint32_t next_seed() {
  static uint32_t s = 1;
  return s++;
}

void* alloc(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
  return p;
}

__half* random_halves(size_t n, float lo, float hi) {
  __half* p = static_cast<__half*>(alloc(2 * n));
  fill_halves<<<1024, 256>>>(p, n, next_seed(), lo, hi);
  CUDA_CHECK_LAUNCH();
  return p;
}

struct Copies {
  std::vector<DeviceMatrix> m;
  uint64_t bytes = 0;  // of one copy, meta included
};

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
    if (s == Scheme::fp16) {
      m.qweight = random_halves(b.weights / 2, -0.05f, 0.05f);
    } else {
      m.qweight = alloc(b.weights);
      fill_bytes<<<1024, 256>>>(static_cast<uint8_t*>(m.qweight), b.weights, next_seed(), 0xff);
      CUDA_CHECK_LAUNCH();
    }
    if (b.scales) m.scales = random_halves(b.scales / 2, 0.001f, 0.01f);
    if (b.zeros) {
      m.zeros = static_cast<uint8_t*>(alloc(b.zeros));
      fill_bytes<<<1024, 256>>>(m.zeros, b.zeros, next_seed(), 0x0f);
      CUDA_CHECK_LAUNCH();
    }
    c.m.push_back(m);
  }
  return c;
}

void free_copies(Copies& c) {
  for (DeviceMatrix& m : c.m) {
    cudaFree(m.qweight);
    cudaFree(m.scales);
    cudaFree(m.zeros);
  }
  c.m.clear();
}

void report(Scheme s, int64_t rows, int64_t cols, int64_t b, const char* kernel, const std::string& shape,
            double us, uint64_t weight_bytes) {
  std::printf(
      "{\"scheme\": \"%s\", \"rows\": %lld, \"cols\": %lld, \"batch\": %lld, \"kernel\": \"%s\", \"shape\": "
      "\"%s\", \"us\": %.2f, \"tflops\": %.1f, \"weight_gbs\": %.0f}\n",
      to_string(s), static_cast<long long>(rows), static_cast<long long>(cols), static_cast<long long>(b), kernel,
      shape.c_str(), us, 2.0 * rows * cols * b / us / 1e6, weight_bytes / us / 1e3);
  std::fflush(stdout);
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
  for (auto [r, c] : shapes)
    if (r <= 0 || c <= 0 || c % 128 != 0) {
      std::fprintf(stderr, "quant_gemm_bench: shape %lld x %lld: rows > 0 and columns a multiple of 128\n",
                   static_cast<long long>(r), static_cast<long long>(c));
      return 2;
    }
  const std::vector<int64_t> batches = {16, 32, 64, 128, 256, 1024};
  const int64_t max_b = batches.back();
  int64_t max_cols = 0, max_rows = 0;
  for (auto [r, c] : shapes) max_cols = std::max(max_cols, c), max_rows = std::max(max_rows, r);
  const __half* x = random_halves(static_cast<size_t>(max_b * max_cols), -1.f, 1.f);
  float* y = static_cast<float*>(alloc(4ull * max_b * max_rows));
  __half* copy = static_cast<__half*>(alloc(2ull * max_rows * max_cols));  // the fp16 copy's scratch
  std::vector<QuantGemmShape> tuned;
  if (tune)
    for (int wm : {2, 4})
      for (int splits : {1, 2, 3, 4, 6, 8})
        for (int stages : {3, 4}) tuned.push_back({wm, splits, stages});
  size_t ws_bytes = 16;
  for (auto [r, c] : shapes)
    for (int64_t b : batches) {
      ws_bytes = std::max(ws_bytes, skinny_workspace_bytes(r, c, std::min<int64_t>(b, kSkinnyMaxBatch)));
      for (Scheme s : {Scheme::int8, Scheme::int4}) {
        ws_bytes = std::max(ws_bytes, quant_gemm_workspace_bytes(s, r, c, b));
        for (const QuantGemmShape& t : tuned) ws_bytes = std::max(ws_bytes, quant_gemm_workspace_bytes(s, r, c, b, t));
      }
    }
  void* ws = alloc(ws_bytes);
  CUDA_CHECK(cudaMemset(ws, 0, ws_bytes));
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) fail("cublasCreate");
  auto cublas = [&](const __half* w, int64_t rows, int64_t cols, int64_t b) {
    const float alpha = 1.f, beta = 0.f;
    if (cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(b), static_cast<int>(cols),
                     &alpha, w, CUDA_R_16F, static_cast<int>(cols), x, CUDA_R_16F, static_cast<int>(cols), &beta, y,
                     CUDA_R_32F, static_cast<int>(rows), CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
      fail("cublasGemmEx");
  };
  auto reps = [](int64_t rows, int64_t cols, int64_t b) {  // ~20 ms of calls at ~300 TFLOP/s
    return static_cast<int>(std::clamp<double>(20e-3 * 300e12 / (2.0 * rows * cols * b), 5, 200));
  };

  for (const auto& shape : shapes) {
    const int64_t rows = shape.first, cols = shape.second;
    Copies f16 = make_copies(Scheme::fp16, rows, cols);
    for (int64_t b : batches)
      report(Scheme::fp16, rows, cols, b, "cublas_fp16", "",
             time_us([&](int i) { cublas(static_cast<const __half*>(f16.m[i % f16.m.size()].qweight), rows, cols, b); },
                     reps(rows, cols, b)),
             f16.bytes);
    free_copies(f16);
    for (Scheme s : {Scheme::int8, Scheme::int4}) {
      if (only && std::strcmp(only, to_string(s)) != 0) continue;
      Copies q = make_copies(s, rows, cols);
      auto m = [&](int i) -> const DeviceMatrix& { return q.m[i % q.m.size()]; };
      for (int64_t b : batches) {
        const int n = reps(rows, cols, b);
        auto label = [&](const QuantGemmShape& t) {
          const QuantGemmShape r = quant_gemm_resolved(s, rows, cols, b, t);
          return fmt::format("m{}s{}r{}", r.warps_m, r.splits, r.stages);
        };
        report(s, rows, cols, b, "quant_gemm", label({}),
               time_us([&](int i) { gemm_quant(m(i), x, b, y, false, ws, nullptr); }, n), q.bytes);
        for (const QuantGemmShape& t : tuned)
          report(s, rows, cols, b, "quant_gemm", label(t),
                 time_us([&](int i) { gemm_quant(m(i), x, b, y, false, ws, nullptr, t); }, n), q.bytes);
        if (b <= kSkinnyMaxBatch)
          report(s, rows, cols, b, "skinny", "",
                 time_us([&](int i) { gemm_skinny(m(i), x, b, y, false, ws, nullptr); }, n), q.bytes);
        report(s, rows, cols, b, "fp16_copy", "", time_us([&](int i) {
                 dequantize_any_to_f16(m(i), copy, nullptr);
                 cublas(copy, rows, cols, b);
               },
                                                          n),
               q.bytes);
      }
      free_copies(q);
    }
  }
  cublasDestroy(h);
  return 0;
}
