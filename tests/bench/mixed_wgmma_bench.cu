// A Hopper mixed-input GEMM, int4 or int8 weights x fp16 activations on wgmma with the weights as
// the register operand (Machete's design), checked and timed beside cuBLAS (lab tool, sm_90a):
//   build-gpu/decodebench_mixed_wgmma_bench [--check-only] [--splits S] [--ntile N] [rows cols]...
// y[b * rows + r] (+)= sum_c W[r, c] x[b * cols + c] for every sequence b < batch, W quantized
// (int4: w = (q - z) s, a scale and zero point a row and group of 64 k columns or a whole row;
// int8: w = q s, a scale a row), x fp16, y fp32: the batched decode step's linear, the signature
// of the product's gemm_skinny.
//
// The kernel is the product's (kernels/mixed_gemm.cu, gemm_mixed_with: the design is described
// there; the layout in kernels/mixed_wgmma_layout.h), the matrices packed by the product's
// repack_mixed from the canonical layout, as a load does; this bench adds the lab's knobs
// (--splits, --ntile), the exact checks and the timing beside cuBLAS and the fp16 copy path.
//
// Checks (before any timing; exit 1 on a failure; a barrier that waits 2 s traps): integer-valued weights and x (power-of-two
// scales, x in [-2, 2]: every fp32 partial sum is an exact integer or half-integer) against the
// CPU with tolerance 0: int4 with and without a zero point at groups of 64, 128 and a whole row,
// and int8, at batches 1, 7, 8, 9, 64, 65, 256, 300 on 200 x 384 (rows ragged in the last CTA
// tile); the same with one split forced, with every chunk its own split, and accumulating into
// y. Random data (fp16 scales, x in [-1, 1]) against a double-precision CPU dot of the same
// fp16-rounded dequantized weights within cols 2^-22 sum |w x| (fp32 accumulation, ~4x room), on
// 4100 x 1024 at 1, 9, 65, 300 for every scheme, and on the 8b shapes (every 13th row) at 16 and
// 256 for int4 (group 128, zero point) and int8.
// Timing: one 8b layer's four matrices (qkv 6144 x 4096, o 4096 x 4096, gate/up 28672 x 4096,
// down 4096 x 14336, or the shapes given) at 8-512 sequences, int4 (group 128, zero point) and
// int8, beside cuBLAS on fp16 weights of the same shape and the product's dequantize_to_f16 +
// cublasGemmEx path (gemm_rows), every launch on another copy of its matrix (the copies exceed
// L2). One JSON line a (kernel, scheme, batch): microseconds a layer and each matrix's, TFLOP/s,
// GB/s of the weight bytes the kernel reads (its layout's weights and meta; cuBLAS fp16: the
// fp16 weights; dequant+cuBLAS: the canonical quantized bytes).
//
// Exit status: 0 when every check passes, 1 on a failure or an error, 2 without an sm_90 GPU.
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
#include <thread>
#include <vector>

#include "bench_timing.cuh"
#include "common.cuh"
#include "decodebench/half.h"
#include "mixed_gemm.cuh"
#include "mixed_wgmma_layout.h"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;
using mixed::Kind;

namespace {

// ---- host

#define CUBLAS_CHECK(expr)                                                                               \
  do {                                                                                                   \
    const cublasStatus_t db_st_ = (expr);                                                                \
    if (db_st_ != CUBLAS_STATUS_SUCCESS)                                                                 \
      ::db::fail("cuBLAS error {} in {} at {}:{}", static_cast<int>(db_st_), #expr, __FILE__, __LINE__); \
  } while (0)

const char* kind_name(Kind k) {
  return k == Kind::int4 ? "int4" : "int8";
}

// A matrix in the mixed layout on the GPU.
// ---- host data: canonical matrices, their packing and the CPU reference

uint64_t mix64(uint64_t z) {  // splitmix64's finaliser: a value an index, in any thread order
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

template <class F>
void parallel_for(int64_t n, F&& f) {
  const int workers = static_cast<int>(std::max(1u, std::min(32u, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      for (int64_t i = n * w / workers; i < n * (w + 1) / workers; ++i) f(i);
    });
  for (auto& th : pool) th.join();
}

// A quantized matrix in the canonical format (include/decodebench/quant.h's layouts).
struct HostMatrix {
  Kind kind = Kind::int4;
  int64_t rows = 0, cols = 0;
  int group_size = 0;  // int4 columns a group (0: a row); int8 0
  bool zero_point = false;
  std::vector<uint8_t> q4;       // int4 [rows, cols / 2], even column low
  std::vector<int8_t> q8;        // int8 [rows, cols]
  std::vector<uint16_t> scales;  // fp16 bits [rows, groups]
  std::vector<uint8_t> zeros;    // int4 with a zero point [rows, groups]
  int64_t groups() const { return kind == Kind::int8 ? 1 : mixed::group_count(cols, group_size); }
  // The dequantized weight as fp16 bits: fp16((q - z) s), dequantize_to_f16's value.
  float weight(int64_t r, int64_t c) const {
    const int64_t g = r * groups() + c / (cols / groups());
    const float s = f16_to_f32(scales[g]);
    if (kind == Kind::int8) return f16_to_f32(f32_to_f16(static_cast<float>(q8[r * cols + c]) * s));
    const int q = (q4[r * (cols / 2) + c / 2] >> (4 * (c % 2))) & 15;
    const int z = zero_point ? zeros[g] : 8;
    return f16_to_f32(f32_to_f16(static_cast<float>(q - z) * s));
  }
};

// integers: codes anywhere in their range, scales 1/2, 1 or 2 (every product and sum exact);
// otherwise fp16 scales around 2^-9 (int4) or 2^-13 (int8), weights of ~0.01 like a model's.
HostMatrix random_matrix(Kind k, int64_t rows, int64_t cols, int group_size, bool zero_point, bool integers,
                         uint64_t seed) {
  HostMatrix m;
  m.kind = k;
  m.rows = rows;
  m.cols = cols;
  m.group_size = k == Kind::int8 ? 0 : group_size;
  m.zero_point = k == Kind::int4 && zero_point;
  const int64_t groups = m.groups();
  if (k == Kind::int4) {
    m.q4.resize(rows * cols / 2);
    parallel_for(rows * cols / 2, [&](int64_t i) { m.q4[i] = static_cast<uint8_t>(mix64(seed * 7919 + i)); });
  } else {
    m.q8.resize(rows * cols);
    parallel_for(rows * cols,
                 [&](int64_t i) { m.q8[i] = static_cast<int8_t>(static_cast<int>(mix64(seed * 7919 + i) % 255) - 127); });
  }
  m.scales.resize(rows * groups);
  m.zeros.resize(rows * groups);
  for (int64_t i = 0; i < rows * groups; ++i) {
    const uint64_t h = mix64(seed * 104729 + i + (uint64_t{1} << 40));
    const float s = integers ? std::ldexp(1.f, static_cast<int>(h % 3) - 1)
                             : std::ldexp(1.f + static_cast<float>(h % 1024) / 1024.f, k == Kind::int4 ? -9 : -13);
    m.scales[i] = f32_to_f16(s);
    m.zeros[i] = static_cast<uint8_t>((h >> 20) % 16);
  }
  return m;
}

Scheme scheme_of(Kind k) {
  return k == Kind::int4 ? Scheme::int4 : Scheme::int8;
}

// A matrix of this shape in the mixed-wgmma layout, without memory (group_size 0: a row).
DeviceMatrix mixed_matrix(Kind k, int64_t rows, int64_t cols, int group_size, bool zero_point) {
  MatrixShape s;
  s.scheme = scheme_of(k);
  s.rows = rows;
  s.cols = cols;
  s.group_size = k == Kind::int4 ? (group_size == 0 ? static_cast<int>(cols) : group_size) : 0;
  s.zero_point = k == Kind::int4 && zero_point;
  const char* why = nullptr;
  if (!mixed_gemm_takes(s, &why)) fail("mixed_gemm: {} {}x{} group {}: {}", kind_name(k), rows, cols, group_size, why);
  return device_matrix(s, MatrixLayout::mixed_wgmma);
}

void free_matrix(DeviceMatrix& m) {
  CUDA_CHECK(cudaFree(m.qweight));
  CUDA_CHECK(cudaFree(m.scales));
  if (m.zeros) CUDA_CHECK(cudaFree(m.zeros));
  m.qweight = nullptr;
  m.scales = nullptr;
  m.zeros = nullptr;
}

// Uploads `h` in the canonical layout and repacks it on the device with the product's
// repack_mixed (kernels/weights.cu), the path a load takes.
DeviceMatrix upload_mixed(const HostMatrix& h) {
  const DeviceMatrix target = mixed_matrix(h.kind, h.rows, h.cols, h.group_size, h.zero_point);
  DeviceMatrix m = device_matrix(shape_of(target), MatrixLayout::canonical);
  const size_t wbytes = h.kind == Kind::int4 ? h.q4.size() : h.q8.size();
  CUDA_CHECK(cudaMalloc(&m.qweight, wbytes));
  CUDA_CHECK(cudaMemcpy(m.qweight, h.kind == Kind::int4 ? static_cast<const void*>(h.q4.data()) : h.q8.data(),
                        wbytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMalloc(&m.scales, h.scales.size() * 2));
  CUDA_CHECK(cudaMemcpy(m.scales, h.scales.data(), h.scales.size() * 2, cudaMemcpyHostToDevice));
  if (m.zero_point) {
    CUDA_CHECK(cudaMalloc(&m.zeros, h.zeros.size()));
    CUDA_CHECK(cudaMemcpy(m.zeros, h.zeros.data(), h.zeros.size(), cudaMemcpyHostToDevice));
  }
  DeviceMatrix canonical = m;
  const MatrixBytes b = device_matrix_bytes(target);
  void *w = nullptr, *meta = nullptr;
  CUDA_CHECK(cudaMalloc(&w, b.weights));
  CUDA_CHECK(cudaMalloc(&meta, b.scales));
  repack_mixed(m, w, meta, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  free_matrix(canonical);
  return m;
}

struct Workspace {
  void* p = nullptr;
  int64_t bytes = 0;
  void ensure(int64_t need) {
    if (need <= bytes) return;
    if (p) CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaMalloc(&p, need));
    CUDA_CHECK(cudaMemset(p, 0, need));  // the counters start at zero
    bytes = need;
  }
  ~Workspace() {
    if (p) cudaFree(p);
  }
};

struct CheckCase {
  const char* name;
  Kind kind;
  int64_t rows, cols;
  int group_size;
  bool zero_point, integers;
  std::vector<int> batches;
  int row_step = 1;   // check every row_step-th row
  int splits = 0;     // > 0: forced
  bool accumulate = false;
  int n_tile = 0;     // > 0: a smaller N tile than the batch's, forced
};

// Runs the kernel on one case at each batch against the CPU; returns the outputs past their bound.
int64_t check_case(const CheckCase& cc, Workspace& ws, uint64_t seed) {
  const HostMatrix h = random_matrix(cc.kind, cc.rows, cc.cols, cc.group_size, cc.zero_point, cc.integers, seed);
  DeviceMatrix m = upload_mixed(h);
  const int max_b = *std::max_element(cc.batches.begin(), cc.batches.end());
  std::vector<__half> xh(int64_t{max_b} * cc.cols);
  std::vector<float> xf(xh.size());
  for (size_t i = 0; i < xh.size(); ++i) {
    const uint64_t r = mix64(seed * 31 + i + (uint64_t{3} << 50));
    const float v = cc.integers ? static_cast<float>(static_cast<int>(r % 5) - 2)
                                : static_cast<float>(static_cast<int>(r % 2001) - 1000) / 1000.f;
    xh[i] = __float2half_rn(v);
    xf[i] = __half2float(xh[i]);
  }
  // The reference: every row_step-th row, every sequence up to max_b, in double.
  const int64_t checked = (cc.rows + cc.row_step - 1) / cc.row_step;
  std::vector<double> ref(checked * max_b), mag(checked * max_b);
  parallel_for(checked, [&](int64_t i) {
    const int64_t r = i * cc.row_step;
    std::vector<float> wr(cc.cols);
    for (int64_t c = 0; c < cc.cols; ++c) wr[c] = h.weight(r, c);
    for (int b = 0; b < max_b; ++b) {
      double s = 0, a = 0;
      const float* x = &xf[int64_t{b} * cc.cols];
      for (int64_t c = 0; c < cc.cols; ++c) {
        const double p = static_cast<double>(wr[c]) * x[c];
        s += p;
        a += std::fabs(p);
      }
      ref[i * max_b + b] = s;
      mag[i * max_b + b] = a;
    }
  });
  __half* x = nullptr;
  float* y = nullptr;
  CUDA_CHECK(cudaMalloc(&x, xh.size() * sizeof(__half)));
  CUDA_CHECK(cudaMalloc(&y, int64_t{max_b} * cc.rows * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(x, xh.data(), xh.size() * sizeof(__half), cudaMemcpyHostToDevice));
  int64_t bad_total = 0;
  for (int b : cc.batches) {
    const MixedGemmOptions o{cc.splits, cc.n_tile};
    const mixed::Plan plan = mixed_gemm_plan(m, b, o);
    ws.ensure(mixed::workspace_bytes(plan));
    // accumulate: y starts at small integers the kernel must add to; otherwise NaN, so that an
    // output the kernel never writes fails.
    std::vector<float> y0(int64_t{b} * cc.rows);
    for (size_t i = 0; i < y0.size(); ++i)
      y0[i] = cc.accumulate ? static_cast<float>(static_cast<int>(mix64(i + seed) % 7) - 3) : NAN;
    CUDA_CHECK(cudaMemcpy(y, y0.data(), y0.size() * sizeof(float), cudaMemcpyHostToDevice));
    gemm_mixed_with(m, x, b, y, cc.accumulate, ws.p, ws.bytes, o, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> got(y0.size());
    CUDA_CHECK(cudaMemcpy(got.data(), y, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    int64_t bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < checked; ++i)
      for (int s = 0; s < b; ++s) {
        const int64_t r = i * cc.row_step;
        const double want = ref[i * max_b + s] + (cc.accumulate ? y0[int64_t{s} * cc.rows + r] : 0.0);
        const double tol = cc.integers ? 0.0 : cc.cols * std::ldexp(mag[i * max_b + s], -22) + 1e-30;
        const double err = std::fabs(static_cast<double>(got[int64_t{s} * cc.rows + r]) - want);
        if (tol > 0) worst = std::max(worst, err / tol);
        if (!(err <= tol)) {
          if (bad++ < 3)
            fmt::print(stderr, "check {} B={}: row {} sequence {}: {} against {} (tolerance {:.3g})\n", cc.name, b,
                       r, s, got[int64_t{s} * cc.rows + r], want, tol);
        }
      }
    bad_total += bad;
    fmt::print(
        "{{\"bench\": \"mixed_wgmma\", \"check\": \"{}\", \"scheme\": \"{}\", \"group\": {}, \"zero_point\": {}, "
        "\"rows\": {}, \"cols\": {}, \"batch\": {}, \"n_tile\": {}, \"splits\": {}, \"accumulate\": {}, \"data\": "
        "\"{}\", \"rows_checked\": {}, \"tolerance\": \"{}\", \"max_err_over_tol\": {:.4f}, \"bad\": {}, "
        "\"result\": \"{}\"}}\n",
        cc.name, kind_name(cc.kind), cc.group_size, m.zero_point, cc.rows, cc.cols, b, plan.n_tile, plan.splits,
        cc.accumulate, cc.integers ? "integers" : "reals", checked, cc.integers ? "exact" : "cols 2^-22 sum|wx|",
        worst, bad, bad == 0 ? "PASS" : "FAIL");
    std::fflush(stdout);
  }
  CUDA_CHECK(cudaFree(x));
  CUDA_CHECK(cudaFree(y));
  free_matrix(m);
  return bad_total;
}

int64_t run_checks(const std::vector<std::pair<int64_t, int64_t>>& big_shapes) {
  Workspace ws;
  const std::vector<int> all = {1, 7, 8, 9, 64, 65, 256, 300};
  std::vector<CheckCase> cases = {
      {"int4 g128 zp", Kind::int4, 200, 384, 128, true, true, all},
      {"int4 g64 symmetric", Kind::int4, 200, 384, 64, false, true, all},
      {"int4 row zp", Kind::int4, 200, 384, 0, true, true, all},
      {"int8", Kind::int8, 200, 384, 0, false, true, all},
      {"int4 g128 zp, one split", Kind::int4, 200, 384, 128, true, true, {9, 65, 300}, 1, 1},
      {"int4 g128 zp, a split a chunk", Kind::int4, 200, 384, 128, true, true, {9, 65, 300}, 1, 6},
      {"int4 g128 zp, accumulate", Kind::int4, 200, 384, 128, true, true, {9, 300}, 1, 0, true},
      {"int8, one split, accumulate", Kind::int8, 200, 384, 0, false, true, {65}, 1, 1, true},
      {"int4 g128 zp, N tile 64", Kind::int4, 200, 384, 128, true, true, {65, 256, 300}, 1, 0, false, 64},
      {"int4 g128 zp 4100", Kind::int4, 4100, 1024, 128, true, false, {1, 9, 65, 300}},
      {"int4 g64 symmetric 4100", Kind::int4, 4100, 1024, 64, false, false, {1, 9, 65, 300}},
      {"int4 row zp 4100", Kind::int4, 4100, 1024, 0, true, false, {1, 9, 65, 300}},
      {"int8 4100", Kind::int8, 4100, 1024, 0, false, false, {1, 9, 65, 300}},
  };
  for (auto [r, c] : big_shapes) {
    cases.push_back({"int4 g128 zp 8b", Kind::int4, r, c, 128, true, false, {16, 256}, 13});
    cases.push_back({"int8 8b", Kind::int8, r, c, 0, false, false, {16, 256}, 13});
  }
  int64_t bad = 0;
  uint64_t seed = 1;
  for (const CheckCase& cc : cases) bad += check_case(cc, ws, seed++);
  return bad;
}

// ---- timing

constexpr size_t kRotateBytes = size_t{512} << 20;  // >> the H200's 50 MB L2

void* alloc_filled(size_t bytes, int value) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
  CUDA_CHECK(cudaMemset(p, value, bytes));
  return p;
}

size_t copies_for(size_t bytes) {
  return kRotateBytes / bytes + 2;
}

struct Line {
  const char* kernel;
  std::string scheme;
  int64_t batch;
  std::vector<double> us;
  uint64_t bytes;
  double flop;
  std::string plans;
};

void print_line(const Line& l, const char* gpu) {
  double total = 0;
  std::string each;
  for (double u : l.us) {
    total += u;
    each += fmt::format("{}{:.2f}", each.empty() ? "" : ", ", u);
  }
  fmt::print(
      "{{\"bench\": \"mixed_wgmma\", \"gpu\": \"{}\", \"kernel\": \"{}\", \"scheme\": \"{}\", \"batch\": {}, "
      "\"us_layer\": {:.2f}, \"us_matrices\": [{}], \"tflops\": {:.1f}, \"weight_gbps\": {:.0f}{}}}\n",
      gpu, l.kernel, l.scheme, l.batch, total, each, l.flop / (total * 1e-6) / 1e12, l.bytes / total / 1e3,
      l.plans.empty() ? "" : ", \"plans\": [" + l.plans + "]");
  std::fflush(stdout);
}

void run_timing(const std::vector<std::pair<int64_t, int64_t>>& shapes, int splits_override, int n_tile_override,
                const char* gpu) {
  const std::vector<int64_t> batches = {8, 16, 32, 64, 128, 256, 512};
  const int64_t max_b = batches.back();
  int64_t max_rows = 0, max_cols = 0, max_elems = 0;
  double layer_flop = 0;
  for (auto [r, c] : shapes) {
    max_rows = std::max(max_rows, r);
    max_cols = std::max(max_cols, c);
    max_elems = std::max(max_elems, r * c);
    layer_flop += 2.0 * r * c;
  }
  __half* x = static_cast<__half*>(alloc_filled(2ull * max_b * max_cols, 0x3c));  // ~1.0
  float* y = static_cast<float*>(alloc_filled(4ull * max_b * max_rows, 0));
  cublasHandle_t h;
  CUBLAS_CHECK(cublasCreate(&h));
  auto gemm = [&](const __half* w, int64_t rows, int64_t cols, int64_t b) {  // gemm_rows's call
    const float one = 1.f, zero = 0.f;
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(b),
                              static_cast<int>(cols), &one, w, CUDA_R_16F, static_cast<int>(cols), x, CUDA_R_16F,
                              static_cast<int>(cols), &zero, y, CUDA_R_32F, static_cast<int>(rows),
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };

  {  // cuBLAS on fp16 weights
    std::vector<std::vector<__half*>> copies(shapes.size());
    uint64_t bytes = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const size_t one = 2ull * shapes[i].first * shapes[i].second;
      for (size_t k = 0; k < copies_for(one); ++k) copies[i].push_back(static_cast<__half*>(alloc_filled(one, 0x11)));
      bytes += one;
    }
    for (int64_t b : batches) {
      Line l{"cublas_fp16", "fp16", b, {}, bytes, layer_flop * b, ""};
      for (size_t i = 0; i < shapes.size(); ++i)
        l.us.push_back(time_us([&](int k) { gemm(copies[i][k % copies[i].size()], shapes[i].first, shapes[i].second, b); },
                               40, 4));
      print_line(l, gpu);
    }
    for (auto& v : copies)
      for (__half* p : v) CUDA_CHECK(cudaFree(p));
  }

  __half* scratch = static_cast<__half*>(alloc_filled(2ull * max_elems, 0));
  Workspace ws;
  for (Kind k : {Kind::int4, Kind::int8}) {
    const std::string scheme = k == Kind::int4 ? "int4_g128_zp" : "int8";
    {  // the product's path: dequantize_to_f16 into one fp16 scratch, then cublasGemmEx
      std::vector<std::vector<DeviceMatrix>> copies(shapes.size());
      uint64_t bytes = 0;
      for (size_t i = 0; i < shapes.size(); ++i) {
        DeviceMatrix d;
        d.scheme = k == Kind::int4 ? Scheme::int4 : Scheme::int8;
        d.rows = shapes[i].first;
        d.cols = shapes[i].second;
        d.group_size = k == Kind::int4 ? 128 : 0;
        d.zero_point = k == Kind::int4;
        const MatrixBytes mb = device_matrix_bytes(d);
        for (size_t c = 0; c < copies_for(mb.total()); ++c) {
          DeviceMatrix m = d;
          m.qweight = alloc_filled(mb.weights, 0x21);
          m.scales = static_cast<__half*>(alloc_filled(mb.scales, 0x11));
          if (mb.zeros) m.zeros = static_cast<uint8_t*>(alloc_filled(mb.zeros, 0x08));
          copies[i].push_back(m);
        }
        bytes += mb.total();
      }
      for (int64_t b : batches) {
        Line l{"dequant_cublas", scheme, b, {}, bytes, layer_flop * b, ""};
        for (size_t i = 0; i < shapes.size(); ++i)
          l.us.push_back(time_us(
              [&](int c) {
                const DeviceMatrix& m = copies[i][c % copies[i].size()];
                dequantize_to_f16(m, scratch, nullptr);
                gemm(scratch, m.rows, m.cols, b);
              },
              20, 3));
        print_line(l, gpu);
      }
      for (auto& v : copies)
        for (DeviceMatrix& m : v) {
          CUDA_CHECK(cudaFree(m.qweight));
          CUDA_CHECK(cudaFree(m.scales));
          if (m.zeros) CUDA_CHECK(cudaFree(m.zeros));
        }
    }
    {  // the mixed-input GEMM; values are irrelevant to its time (finite fp16 throughout)
      std::vector<std::vector<DeviceMatrix>> copies(shapes.size());
      uint64_t bytes = 0;
      for (size_t i = 0; i < shapes.size(); ++i) {
        const DeviceMatrix one =
            mixed_matrix(k, shapes[i].first, shapes[i].second, k == Kind::int4 ? 128 : 0, k == Kind::int4);
        const MatrixBytes mb = device_matrix_bytes(one);
        for (size_t c = 0; c < copies_for(mb.total()); ++c) {
          DeviceMatrix m = one;
          m.qweight = alloc_filled(mb.weights, 0x21);
          m.scales = static_cast<__half*>(alloc_filled(mb.scales, 0x11));
          copies[i].push_back(m);
        }
        bytes += mb.total();
      }
      for (int64_t b : batches) {
        Line l{"mixed_wgmma", scheme, b, {}, bytes, layer_flop * b, ""};
        for (size_t i = 0; i < shapes.size(); ++i) {
          const MixedGemmOptions o{splits_override, n_tile_override};
          const mixed::Plan plan = mixed_gemm_plan(copies[i][0], b, o);
          ws.ensure(mixed::workspace_bytes(plan));
          l.us.push_back(time_us(
              [&](int c) {
                gemm_mixed_with(copies[i][c % copies[i].size()], x, b, y, false, ws.p, ws.bytes, o, nullptr);
              },
              40, 4));
          l.plans += fmt::format("{}\"n{}x{}s{}g{}\"", l.plans.empty() ? "" : ", ", plan.n_tile, plan.seq_tiles,
                                 plan.splits, plan.grid);
        }
        print_line(l, gpu);
      }
      for (auto& v : copies)
        for (DeviceMatrix& m : v) free_matrix(m);
    }
  }
  CUDA_CHECK(cudaFree(scratch));
  CUDA_CHECK(cudaFree(x));
  CUDA_CHECK(cudaFree(y));
  CUBLAS_CHECK(cublasDestroy(h));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::pair<int64_t, int64_t>> shapes = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  bool check_only = false;
  int splits = 0, n_tile = 0;
  std::vector<int64_t> given;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--check-only") == 0) {
      check_only = true;
    } else if (std::strcmp(argv[i], "--splits") == 0 && i + 1 < argc) {
      splits = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--ntile") == 0 && i + 1 < argc) {
      n_tile = std::atoi(argv[++i]);
    } else if (argv[i][0] != '-') {
      given.push_back(std::atoll(argv[i]));
    } else {
      std::fprintf(stderr, "usage: %s [--check-only] [--splits S] [--ntile N] [rows cols]...\n", argv[0]);
      return 2;
    }
  }
  if (!given.empty()) {
    if (given.size() % 2) {
      std::fprintf(stderr, "mixed_wgmma_bench: shapes come as rows cols pairs\n");
      return 2;
    }
    shapes.clear();
    for (size_t i = 0; i < given.size(); i += 2) shapes.push_back({given[i], given[i + 1]});
  }
  try {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::fprintf(stderr, "mixed_wgmma_bench: no CUDA device\n");
      return 2;
    }
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9 || prop.minor != 0) {
      std::fprintf(stderr, "mixed_wgmma_bench: needs an sm_90 GPU (H100/H200); device 0 is %s (sm_%d%d)\n",
                   prop.name, prop.major, prop.minor);
      return 2;
    }
    const int64_t bad = run_checks(shapes);
    fmt::print("{{\"bench\": \"mixed_wgmma\", \"checks\": \"{}\", \"bad\": {}}}\n", bad == 0 ? "PASS" : "FAIL", bad);
    std::fflush(stdout);
    if (bad != 0) return 1;
    if (check_only) return 0;
    run_timing(shapes, splits, n_tile, prop.name);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixed_wgmma_bench: %s\n", e.what());
    return 1;
  }
}
