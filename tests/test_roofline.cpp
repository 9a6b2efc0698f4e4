// The roofline (src/measure/roofline.cpp): the floors a run's bytes and FLOPs set at the
// measured bandwidth and compute throughput, the achieved figures, and the regime rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "decodebench/result.h"
#include "decodebench/roofline.h"

namespace {

// The regime rule (docs/method.md "Regimes"), at its boundaries: a step with the floor at 1 ms.
db::Roofline regime_of(double median_ms, int launches, double launch_us, uint64_t kernel_extra = 0) {
  db::Roofline r;
  r.floor_tpot_ms = 1.0;
  r.efficiency = r.floor_tpot_ms / median_ms;
  db::classify_regime(r, median_ms, launches, launch_us, kernel_extra);
  return r;
}

TEST(Regime, BandwidthBoundFromTheBarAsPrinted) {
  const db::Roofline fast = regime_of(1.0 / 0.89, 300, 2.0);
  EXPECT_EQ(fast.regime, "bandwidth-bound");
  EXPECT_EQ(fast.regime_reason, "efficiency 0.89 >= 0.75: the step runs within 1/0.75 of its byte floor");
  // 0.7451 prints as 0.75, so it is labelled as what it prints; 0.7449 prints as 0.74.
  EXPECT_EQ(regime_of(1.0 / 0.7451, 0, 0).regime, "bandwidth-bound");
  EXPECT_EQ(regime_of(1.0 / 0.7449, 0, 0).regime, "kernel-bound");
}

TEST(Regime, BelowTheBarTheFixedCostDecidesBetweenOverheadAndKernel) {
  // 1.5 ms for a 1 ms floor (efficiency 0.67): 0.5 ms above the floor.
  const db::Roofline overhead = regime_of(1.5, 150, 2.0);  // 0.3 ms of launches: more than half
  EXPECT_EQ(overhead.regime, "overhead-bound");
  EXPECT_EQ(
      overhead.regime_reason,
      "efficiency 0.67 < 0.75 and 150 launches x 2.00 us = 0.300 ms of fixed cost explain >= half of the "
      "0.500 ms above the floor");
  const db::Roofline kernel = regime_of(1.5, 100, 2.0, 2'500'000'000);  // 0.2 ms: less than half
  EXPECT_EQ(kernel.regime, "kernel-bound");
  EXPECT_EQ(
      kernel.regime_reason,
      "efficiency 0.67 < 0.75 and fixed cost (0.200 ms) explains less than half of the 0.500 ms above the "
      "floor: the kernels themselves run below bandwidth (the kernel moves 2.50 GB beyond the minimum)");
}

// A batched step whose FLOPs take longer than its bytes: the floor is the compute floor, and
// a step near it is compute-bound.
db::Roofline regime_at(double median_ms, double bandwidth_floor, double compute_floor) {
  db::Roofline r;
  r.bandwidth_floor_tpot_ms = bandwidth_floor;
  r.compute_floor_tpot_ms = compute_floor;
  r.floor_tpot_ms = std::max(bandwidth_floor, compute_floor);
  r.efficiency = r.floor_tpot_ms / median_ms;
  db::classify_regime(r, median_ms, 0, 0, 0);
  return r;
}

TEST(Regime, ComputeBoundWhenTheComputeFloorIsTheFloorAndTheStepIsNearIt) {
  const db::Roofline c = regime_at(2.5, 1.0, 2.0);  // efficiency 0.80 of the compute floor
  EXPECT_EQ(c.regime, "compute-bound");
  EXPECT_EQ(c.regime_reason,
            "efficiency 0.80 >= 0.75 of the compute floor (2.000 ms, above the bandwidth floor of 1.000 ms): "
            "the step runs within 1/0.75 of its FLOPs at the measured throughput");
  // The same step with the compute floor below the bytes': bandwidth-bound; a tie goes to
  // the bytes, as at batch 1 where the compute floor is not measured (0).
  EXPECT_EQ(regime_at(2.5, 2.0, 1.0).regime, "bandwidth-bound");
  EXPECT_EQ(regime_at(2.5, 2.0, 2.0).regime, "bandwidth-bound");
  EXPECT_EQ(regime_at(2.5, 2.0, 0.0).regime, "bandwidth-bound");
  // Far from a compute floor: kernel-bound, and the reason names the compute throughput.
  const db::Roofline k = regime_at(4.0, 1.0, 2.0);
  EXPECT_EQ(k.regime, "kernel-bound");
  EXPECT_EQ(
      k.regime_reason,
      "efficiency 0.50 < 0.75 and fixed cost (0.000 ms) explains less than half of the 2.000 ms above the "
      "compute floor: the kernels themselves run below the measured compute throughput");
}

TEST(Regime, TheCpuBackendHasNoLaunchesSoItIsBandwidthOrKernelBound) {
  EXPECT_EQ(regime_of(1.0 / 0.80, 0, 0).regime, "bandwidth-bound");
  EXPECT_EQ(regime_of(1.0 / 0.60, 0, 0).regime, "kernel-bound");
}

// A step of `bytes` and `flops` a token on a device of `GBps` and `TFLOPS` (0: not measured),
// whose median step took `median_ms`.
db::Result run_of(uint64_t bytes, uint64_t flops, double GBps, double TFLOPS, double median_ms) {
  db::Result r;
  r.bytes.per_token.total = bytes;
  r.flops.total = flops;
  r.device.peak_read_GBps = GBps;
  r.device.peak_compute_TFLOPS = TFLOPS;
  r.timing.tpot_ms.median = median_ms;
  r.config.kernel = "int4.fast";
  return r;
}

TEST(Roofline, TheFloorIsTheLargerOfTheBytesAndTheFlopsAtTheMeasuredRates) {
  // 4 GB at 2000 GB/s: 2 ms; 1 TFLOP at 1000 TFLOPS: 1 ms; the step took 2.5 ms.
  const db::Roofline r =
      db::compute_roofline(run_of(4'000'000'000, 1'000'000'000'000, 2000, 1000, 2.5), 0, 0);
  EXPECT_DOUBLE_EQ(r.bandwidth_floor_tpot_ms, 2.0);
  EXPECT_DOUBLE_EQ(r.compute_floor_tpot_ms, 1.0);
  EXPECT_DOUBLE_EQ(r.floor_tpot_ms, 2.0);
  EXPECT_DOUBLE_EQ(r.efficiency, 2.0 / 2.5);
  EXPECT_DOUBLE_EQ(r.achieved_GBps, 4e9 / 2.5e-3 / 1e9);
  EXPECT_DOUBLE_EQ(r.achieved_TFLOPS, 1e12 / 2.5e-3 / 1e12);
  EXPECT_DOUBLE_EQ(r.arithmetic_intensity, 250.0);
  EXPECT_EQ(r.regime, "bandwidth-bound");

  // Four times the FLOPs: the compute floor (4 ms) is the floor, and a step of 5 ms is
  // within the bar of it.
  const db::Roofline c = db::compute_roofline(run_of(4'000'000'000, 4'000'000'000'000, 2000, 1000, 5), 0, 0);
  EXPECT_DOUBLE_EQ(c.floor_tpot_ms, c.compute_floor_tpot_ms);
  EXPECT_DOUBLE_EQ(c.compute_floor_tpot_ms, 4.0);
  EXPECT_EQ(c.regime, "compute-bound");
}

TEST(Roofline, AnUnmeasuredThroughputSetsNoFloorOfItsOwn) {
  const db::Roofline r = db::compute_roofline(run_of(4'000'000'000, 1'000'000'000'000, 2000, 0, 2.5), 0, 0);
  EXPECT_EQ(r.compute_floor_tpot_ms, 0);
  EXPECT_DOUBLE_EQ(r.floor_tpot_ms, r.bandwidth_floor_tpot_ms);
  // Without a median there is nothing achieved, and nothing is divided by zero.
  const db::Roofline none = db::compute_roofline(run_of(4'000'000'000, 1'000'000'000'000, 0, 0, 0), 0, 0);
  EXPECT_EQ(none.floor_tpot_ms, 0);
  EXPECT_EQ(none.efficiency, 0);
  EXPECT_EQ(none.achieved_GBps, 0);
  EXPECT_EQ(none.achieved_TFLOPS, 0);
}

TEST(Roofline, TheRegimeIsTheRulesOnTheComputedFloorWithTheStepsFixedCost) {
  // 1.5 ms for a 1 ms floor; 150 launches of 2 us (0.3 ms) explain more than half of the gap.
  db::Result run = run_of(2'000'000'000, 0, 2000, 0, 1.5);
  run.bytes.per_token.kernel_extra = 500'000'000;
  const db::Roofline r = db::compute_roofline(run, 150, 2.0);
  db::Roofline expected = r;
  db::classify_regime(expected, 1.5, 150, 2.0, 500'000'000);
  EXPECT_EQ(r.regime, "overhead-bound");
  EXPECT_EQ(r.regime, expected.regime);
  EXPECT_EQ(r.regime_reason, expected.regime_reason);
  // Fewer launches: kernel-bound, and the reason names the bytes beyond the minimum.
  const db::Roofline k = db::compute_roofline(run, 10, 2.0);
  EXPECT_EQ(k.regime, "kernel-bound");
  EXPECT_NE(k.regime_reason.find("the kernel moves 0.50 GB beyond the minimum"), std::string::npos)
      << k.regime_reason;
}

TEST(Roofline, TheReasonSaysHowManyMatricesRanAnotherKernel) {
  db::Result run = run_of(2'000'000'000, 0, 2000, 0, 1.1);
  const std::string plain = db::compute_roofline(run, 0, 0).regime_reason;
  run.config.kernel_fallbacks = {"o: ...", "down: ..."};
  EXPECT_EQ(db::compute_roofline(run, 0, 0).regime_reason,
            plain +
                "; 2 of the model's matrix shapes run the plain GEMV instead of int4.fast "
                "(config.kernel_fallbacks)");
}

}  // namespace
