// The rows kernel's shapes timed side by side on real layer shapes (lab tool, not a test):
//   build-gpu/decodebench_gemv_bench [--tune]
// Conditions as in a decode step: every launch reads a different copy of the matrix (the
// copies together exceed L2 several times, so weights come from HBM as they do when 32
// layers follow each other), and the input is what the step feeds each shape: the residual
// stream with its RMSNorm statistics for the QKV, gate/up and lm_head shapes, an fp16
// vector for O and down. Prints GB/s of weight bytes (scales and zeros included) for the
// fast kernel of each scheme; with --tune, also for other shapes of the fast kernel (rows per
// group x chunks per thread x blocks per SM).
// Correctness is the gpu tests' job.
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_timing.cuh"
#include "common.cuh"
#include "decodebench/half.h"
#include "decodebench/linear_shapes.h"
#include "decodebench/weights.h"
#include "gemv.cuh"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;

namespace {

constexpr size_t kRotateBytes = size_t{512} << 20;  // >> the 60 MB L2 of an H200

struct Shape {
  const char* name;
  int64_t rows, cols;
  bool from_resid;
  bool fp16_only = false;  // the lm_head is fp16 unless --lm-head says otherwise
};


}  // namespace

int main(int argc, char** argv) {
  // --only NAME SCHEME: one shape and scheme, the fast kernel only (for a profiler).
  const bool tune = argc > 1 && std::strcmp(argv[1], "--tune") == 0;
  const bool only = argc > 3 && std::strcmp(argv[1], "--only") == 0;
  const std::vector<Shape> shapes = {{"8b qkv", 6144, 4096, true},       {"8b o", 4096, 4096, false},
                                     {"8b gate/up", 28672, 4096, true},  {"8b down", 4096, 14336, false},
                                     {"8b lm_head", 128256, 4096, true, true}, {"1b gate/up", 16384, 2048, true},
                                     {"70b qkv", 10240, 8192, true},     {"70b o", 8192, 8192, false},
                                     {"70b gate/up", 57344, 8192, true}, {"70b down", 8192, 28672, false}};
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 0.02f);
  for (const Shape& sh : shapes) {
    if (only && std::strcmp(sh.name, argv[2]) != 0) continue;
    const int64_t rows = sh.rows, cols = sh.cols;
    std::vector<float> w(rows * cols);
    for (float& v : w) v = nd(rng);
    // Input: an fp16 x, or a float residual stream, its norm weights and statistics.
    std::vector<uint16_t> xh(cols), nh(cols);
    std::vector<float> resid(cols);
    double ss = 0;
    for (int64_t i = 0; i < cols; ++i) {
      xh[i] = f32_to_f16(nd(rng) * 50);
      resid[i] = nd(rng) * 50;
      nh[i] = f32_to_f16(1.f + nd(rng));
      ss += static_cast<double>(resid[i]) * resid[i];
    }
    std::vector<unsigned long long> slots(kNormSlots, 0);
    slots[0] = static_cast<unsigned long long>(ss * kSumsqScale);
    void *dx, *dn, *dr, *dslots, *dy;
    CUDA_CHECK(cudaMalloc(&dx, cols * 2));
    CUDA_CHECK(cudaMalloc(&dn, cols * 2));
    CUDA_CHECK(cudaMalloc(&dr, cols * 4));
    CUDA_CHECK(cudaMalloc(&dslots, kNormSlots * 8));
    CUDA_CHECK(cudaMalloc(&dy, rows * 4));
    CUDA_CHECK(cudaMemcpy(dx, xh.data(), cols * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dn, nh.data(), cols * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dr, resid.data(), cols * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dslots, slots.data(), kNormSlots * 8, cudaMemcpyHostToDevice));
    GemvInput in;
    if (sh.from_resid) {
      in.resid = static_cast<const float*>(dr);
      in.norm_w = static_cast<const __half*>(dn);
      in.eps = 1e-5f;
      in.sumsq = static_cast<const unsigned long long*>(dslots);
    } else {
      in.x = static_cast<const __half*>(dx);
    }
    GemvOutput out;
    out.y = static_cast<float*>(dy);

    for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4}) {
      if (sh.fp16_only && s != Scheme::fp16) continue;
      if (only && std::strcmp(to_string(s), argv[3]) != 0) continue;
      const QuantMatrix q = quantize_matrix(w.data(), rows, cols, s, 128, true);
      const size_t bytes = q.qweight.size() + q.scales.size() * 2 + q.zeros.size();
      const int copies = static_cast<int>(std::max<size_t>(2, kRotateBytes / bytes));
      std::vector<DeviceMatrix> ms(copies);
      for (DeviceMatrix& m : ms) {
        m.scheme = s;
        m.rows = rows;
        m.cols = cols;
        m.group_size = s == Scheme::int4 ? 128 : 0;
        m.zero_point = s == Scheme::int4;
        CUDA_CHECK(cudaMalloc(&m.qweight, q.qweight.size()));
        CUDA_CHECK(cudaMemcpy(m.qweight, q.qweight.data(), q.qweight.size(), cudaMemcpyHostToDevice));
        const MatrixBytes alloc = device_matrix_bytes(m);  // int4: meta padded for the repack
        if (!q.scales.empty()) {
          CUDA_CHECK(cudaMalloc(&m.scales, alloc.scales));
          CUDA_CHECK(cudaMemcpy(m.scales, q.scales.data(), q.scales.size() * 2, cudaMemcpyHostToDevice));
        }
        if (!q.zeros.empty()) {
          CUDA_CHECK(cudaMalloc(&m.zeros, alloc.zeros));
          CUDA_CHECK(cudaMemcpy(m.zeros, q.zeros.data(), q.zeros.size(), cudaMemcpyHostToDevice));
        }
        if (s == Scheme::int4) repack_int4(m, nullptr, prefers_int4_fragments(m.rows, m.cols, m.group_size));
      }
      const int reps = std::max(copies, 64);
      auto report = [&](const std::string& label, double us) {
        std::printf("%-10s %-5s %6ldx%-6ld %-22s %8.2f us %6.0f GB/s\n", sh.name, to_string(s), (long)rows,
                    (long)cols, label.c_str(), us, bytes / us / 1e3);
      };
      if (only) {
        report("fast", time_us([&](int i) { gemv(ms[i % copies], in, out, GemvVariant::fast, nullptr); }, 16));
        continue;  // the copies leak: the process ends right after
      }
      report("fast", time_us([&](int i) { gemv(ms[i % copies], in, out, GemvVariant::fast, nullptr); }, reps));
      if (tune) {
        for (int r : {2, 4, 8})
          for (int k : {1, 2, 4})
            for (int occ : {0, 2}) {
              if (r * k > 16) continue;
              const RowsShape shape{k, r, occ};
              char label[64];
              std::snprintf(label, sizeof label, "rows R%d K%d occ%d", r, k, occ);
              try {
                report(label, time_us([&](int i) { gemv_rows(ms[i % copies], in, out, shape, nullptr); }, reps));
              } catch (const db::Error& e) {  // long rows raise the chunks per thread past R x K <= 16
                std::printf("%-10s %-5s %-22s skipped: %s\n", sh.name, to_string(s), label, e.what());
              }
            }
      }
      for (DeviceMatrix& m : ms) {
        cudaFree(m.qweight);
        cudaFree(m.scales);
        cudaFree(m.zeros);
      }
    }
    cudaFree(dx);
    cudaFree(dn);
    cudaFree(dr);
    cudaFree(dslots);
    cudaFree(dy);
  }
  return 0;
}
