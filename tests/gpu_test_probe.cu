// The compute probe (measure_gemm_peak, kernels/probe.cu): a finite positive throughput from
// a cublasGemmEx, measured once per process (every later call and every scheme's
// compute_peak returns the same value), and a cuda run records it as
// device.peak_compute_TFLOPS with the compute floor it gives. Nothing here is timed against
// a figure: only that a measurement exists and is reused.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "decodebench/backend.h"
#include "decodebench/result.h"
#include "gpu_common.cuh"
#include "probe.cuh"
#include "temp_dir.h"

using namespace db;

namespace {

TEST(ComputeProbe, GemmPeakIsFinitePositiveAndNamesCublasGemmEx) {
  REQUIRE_GPU();
  CUDA_CHECK(cudaSetDevice(0));
  const ComputePeak p = cuda::measure_gemm_peak();
  EXPECT_TRUE(std::isfinite(p.TFLOPS)) << p.TFLOPS;
  EXPECT_GT(p.TFLOPS, 0);
  EXPECT_NE(p.probe.find("cublasGemmEx"), std::string::npos) << p.probe;
  EXPECT_NE(p.probe.find("fp32 accumulate"), std::string::npos) << p.probe;
}

// Both fills compute their product (the probe checks C[0] against the host's sum and fails
// otherwise); the run's probe is the random one. Both figures are printed for the lab notes.
TEST(ComputeProbe, RandomAndConstantOperandsBothComputeTheirProduct) {
  REQUIRE_GPU();
  CUDA_CHECK(cudaSetDevice(0));
  const ComputePeak random = cuda::measure_gemm_peak_filled(cuda::ProbeFill::random);
  const ComputePeak constant = cuda::measure_gemm_peak_filled(cuda::ProbeFill::constant);
  EXPECT_GT(random.TFLOPS, 0);
  EXPECT_GT(constant.TFLOPS, 0);
  EXPECT_NE(random.probe.find("random operands"), std::string::npos) << random.probe;
  EXPECT_NE(constant.probe.find("constant operands"), std::string::npos) << constant.probe;
  EXPECT_NE(cuda::measure_gemm_peak().probe.find("random operands"), std::string::npos);
  std::printf("compute probe: random %.1f TFLOP/s (%s), constant %.1f TFLOP/s\n", random.TFLOPS,
              random.probe.c_str(), constant.TFLOPS);
}

TEST(ComputeProbe, MeasuredOncePerProcessAndTheSameForEveryScheme) {
  REQUIRE_GPU();
  CUDA_CHECK(cudaSetDevice(0));
  const ComputePeak first = cuda::measure_gemm_peak();
  const ComputePeak again = cuda::measure_gemm_peak();
  EXPECT_EQ(again.TFLOPS, first.TFLOPS);
  EXPECT_EQ(again.probe, first.probe);
  const std::unique_ptr<Backend> backend = make_cuda_backend(0);
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4}) {
    const ComputePeak p = backend->compute_peak(s);
    EXPECT_EQ(p.TFLOPS, first.TFLOPS) << to_string(s);
    EXPECT_EQ(p.probe, first.probe) << to_string(s);
  }
}

class ComputeProbeRun : public db_test::TempDirTest {};

TEST_F(ComputeProbeRun, CudaRunRecordsThePeakAndTheComputeFloor) {
  REQUIRE_GPU();
  const std::string out = path("run.json");
  const db_test::Outcome o =
      db_test::run({"--model", "1b-int4", "--tokens", "4", "--repeat", "1", "--backend", "cuda", "-o", out});
  ASSERT_EQ(o.code, 0) << o.err;
  const std::vector<Result> r = read_results(out);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(std::isfinite(r[0].device.peak_compute_TFLOPS));
  EXPECT_GT(r[0].device.peak_compute_TFLOPS, 0);
  EXPECT_NE(r[0].device.compute_probe.find("cublasGemmEx"), std::string::npos) << r[0].device.compute_probe;
  EXPECT_GT(r[0].roofline.compute_floor_tpot_ms, 0);
}

}  // namespace
