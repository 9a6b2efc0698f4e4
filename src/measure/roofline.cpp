// The regime rule: which of the conditions of the byte law a run is missing, or that the
// step's arithmetic, not its bytes, sets its floor.
#include <fmt/format.h>

#include <cmath>

#include "decodebench/roofline.h"

namespace db {

// The floor is the larger of the bytes' at the measured bandwidth and the FLOPs' at the
// measured compute throughput (where the backend measures it).
Roofline compute_roofline(const Result& r, int launches_per_step, double launch_overhead_us) {
  Roofline roof;
  const double total = static_cast<double>(r.bytes.per_token.total);
  const double flops = static_cast<double>(r.flops.total);
  const double median_ms = r.timing.tpot_ms.median;
  if (r.device.peak_read_GBps > 0)
    roof.bandwidth_floor_tpot_ms = total / (r.device.peak_read_GBps * 1e9) * 1e3;
  if (r.device.peak_compute_TFLOPS > 0)
    roof.compute_floor_tpot_ms = flops / (r.device.peak_compute_TFLOPS * 1e12) * 1e3;
  roof.floor_tpot_ms = std::fmax(roof.bandwidth_floor_tpot_ms, roof.compute_floor_tpot_ms);
  roof.arithmetic_intensity = total > 0 ? flops / total : 0;
  if (median_ms > 0) {
    roof.achieved_GBps = total / (median_ms * 1e-3) / 1e9;
    roof.achieved_TFLOPS = flops / (median_ms * 1e-3) / 1e12;
    roof.efficiency = roof.floor_tpot_ms / median_ms;
  }
  classify_regime(roof, median_ms, launches_per_step, launch_overhead_us, r.bytes.per_token.kernel_extra);
  if (!r.config.kernel_fallbacks.empty())
    roof.regime_reason += fmt::format(
        "; {} of the model's matrix shapes run the plain GEMV instead of {} (config.kernel_fallbacks)",
        r.config.kernel_fallbacks.size(), r.config.kernel);
  return roof;
}

// Within 1/0.75 of the floor: bandwidth-bound when the floor is the bytes', compute-bound
// when it is the FLOPs' (the compute floor above the bandwidth floor); otherwise
// overhead-bound when the measured fixed cost of the step's launches explains at least half
// of the time above the floor; else kernel-bound.
void classify_regime(Roofline& r, double median_ms, int launches_per_step, double launch_overhead_us,
                     uint64_t kernel_extra_bytes) {
  const double shown = std::round(r.efficiency * 100) / 100;  // as every table prints it
  const double gap = median_ms - r.floor_tpot_ms;
  const double fixed_ms = launches_per_step * launch_overhead_us / 1e3;
  const bool compute_floor = r.compute_floor_tpot_ms > r.bandwidth_floor_tpot_ms;
  constexpr double bar = kBandwidthBoundEfficiency;
  if (shown >= bar && compute_floor) {
    r.regime = "compute-bound";
    r.regime_reason = fmt::format(
        "efficiency {:.2f} >= {:.2f} of the compute floor ({:.3f} ms, above the bandwidth floor of {:.3f} "
        "ms): "
        "the step runs within 1/{:.2f} of its FLOPs at the measured throughput",
        shown, bar, r.compute_floor_tpot_ms, r.bandwidth_floor_tpot_ms, bar);
  } else if (shown >= bar) {
    r.regime = "bandwidth-bound";
    r.regime_reason = fmt::format(
        "efficiency {:.2f} >= {:.2f}: the step runs within 1/{:.2f} of its byte floor", shown, bar, bar);
  } else if (fixed_ms >= 0.5 * gap) {
    r.regime = "overhead-bound";
    r.regime_reason = fmt::format(
        "efficiency {:.2f} < {:.2f} and {} launches x {:.2f} us = {:.3f} ms of fixed cost explain >= half of "
        "the "
        "{:.3f} ms above the floor",
        shown, bar, launches_per_step, launch_overhead_us, fixed_ms, gap);
  } else {
    r.regime = "kernel-bound";
    r.regime_reason = fmt::format(
        "efficiency {:.2f} < {:.2f} and fixed cost ({:.3f} ms) explains less than half of the {:.3f} ms "
        "above the "
        "{}floor: the kernels themselves run below {}{}",
        shown, bar, fixed_ms, gap, compute_floor ? "compute " : "",
        compute_floor ? "the measured compute throughput" : "bandwidth",
        kernel_extra_bytes
            ? fmt::format(" (the kernel moves {:.2f} GB beyond the minimum)", kernel_extra_bytes / 1e9)
            : "");
  }
}

}  // namespace db
