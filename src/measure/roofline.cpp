// The regime rule: which of the three conditions of the byte law a run is missing.
#include <fmt/format.h>

#include <cmath>

#include "decodebench/measure.h"

namespace db {

// Bandwidth-bound when the step runs within 1/0.75 of its byte floor; otherwise
// overhead-bound when the measured fixed cost of the step's launches explains at least half
// of the time above the floor; else kernel-bound.
void classify_regime(Roofline& r, double median_ms, int launches_per_step, double launch_overhead_us,
                     uint64_t kernel_extra_bytes) {
  const double shown = std::round(r.efficiency * 100) / 100;  // as every table prints it
  const double gap = median_ms - r.floor_tpot_ms;
  const double fixed_ms = launches_per_step * launch_overhead_us / 1e3;
  constexpr double bar = kBandwidthBoundEfficiency;
  if (shown >= bar) {
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
        "floor: the kernels themselves run below bandwidth{}",
        shown, bar, fixed_ms, gap,
        kernel_extra_bytes
            ? fmt::format(" (the kernel moves {:.2f} GB beyond the minimum)", kernel_extra_bytes / 1e9)
            : "");
  }
}

}  // namespace db
