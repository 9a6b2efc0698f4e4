// The regime rule: which of the conditions of the byte law a run is missing, or that the
// step's arithmetic, not its bytes, sets its floor (docs/method.md "Regimes"). And the floors
// it judges against, computed here and nowhere else (docs/method.md "Floor and efficiency").
#pragma once

#include <cstdint>

#include "decodebench/result.h"

namespace db {

// The regime rule (docs/method.md "Regimes"). Bandwidth-bound needs the efficiency at which
// two runs' TPOT ratio stays within 4/3 of their bytes' ratio; compute-bound the same
// efficiency of a floor set by FLOPs.
inline constexpr double kBandwidthBoundEfficiency = 0.75;

// The roofline of `r` from the rest of it: bytes.per_token, flops.total, the device's
// measured read bandwidth and compute throughput (device.peak_read_GBps and
// peak_compute_TFLOPS; 0: not measured, no floor of its own), timing.tpot_ms.median and the
// matrices that ran another kernel (config.kernel_fallbacks, named in the regime's reason),
// with the step's fixed cost: `launches_per_step` launches of `launch_overhead_us` each.
Roofline compute_roofline(const Result& r, int launches_per_step, double launch_overhead_us);

// Sets r.regime and r.regime_reason from r.efficiency, the median TPOT, the step's fixed
// launch cost and the bytes the kernel moves beyond the minimum. The floor is the compute
// floor when r.compute_floor_tpot_ms is above r.bandwidth_floor_tpot_ms: a run within the
// bar of it is compute-bound, not bandwidth-bound. The efficiency is judged at the two
// decimals every table and reason prints, so the label never contradicts them.
void classify_regime(Roofline& r, double median_ms, int launches_per_step, double launch_overhead_us,
                     uint64_t kernel_extra_bytes);

}  // namespace db
