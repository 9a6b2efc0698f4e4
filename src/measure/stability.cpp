// Whether a run's figure can be trusted: noise, throttling and falling clocks.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "decodebench/stability.h"

namespace db {
namespace {

// NVML's clock event reasons that are not throttling: the GPU idles, or runs at the
// application clocks it was given.
constexpr uint64_t kIdle = 0x1, kApplicationClocks = 0x2;
// The software power cap: the driver trims the clocks to hold the board at its power limit.
// Under a sustained memory-bound load the H200 reaches it in every 8b run while the memory
// clock holds and the SM clock moves a few percent; its effect is that SM clock.
constexpr uint64_t kPowerCap = 0x4;

std::string throttle_names(const ClockState& c) {
  std::string s;
  for (const std::string& n : c.throttle)
    if (n != "gpu_idle" && n != "applications_clocks_setting") s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? fmt::format("{:#x}", c.throttle_reasons & ~(kIdle | kApplicationClocks)) : s;
}

}  // namespace

std::vector<std::string> run_warnings(const Result& r) {
  std::vector<std::string> w;
  const Timing& t = r.timing;
  if (t.noise > kNoisyRun)
    w.push_back(
        fmt::format("noisy: the {} repetition medians spread {:.1f}% (relative stdev), more than {:.0f}%",
                    t.repetition_medians_ms.size(), 100 * t.noise, 100 * kNoisyRun));
  if (t.tpot_ms.median > 0 && t.tpot_ms.p90 >= kNoisyTail * t.tpot_ms.median)
    w.push_back(fmt::format("noisy: p90 {:.3f} ms is {:.1f}x the median {:.3f} ms (mean {:.3f} ms)",
                            t.tpot_ms.p90, t.tpot_ms.p90 / t.tpot_ms.median, t.tpot_ms.median,
                            t.tpot_ms.mean));
  const std::optional<ClockState>& start = r.device.start;
  const std::optional<ClockState>& end = r.device.end;
  for (const auto& [when, c] : {std::pair{"start", &start}, std::pair{"end", &end}}) {
    if (*c && ((*c)->throttle_reasons & ~(kIdle | kApplicationClocks)))
      w.push_back(fmt::format("throttled: {} at the run's {}", throttle_names(**c), when));
  }
  if (start && end) {
    const auto fell = [](int a, int b) { return a > 0 && b < a * (1 - kClockFall); };
    if (fell(start->sm_clock_mhz, end->sm_clock_mhz) || fell(start->mem_clock_mhz, end->mem_clock_mhz))
      w.push_back(fmt::format("clocks fell: SM {} -> {} MHz, memory {} -> {} MHz", start->sm_clock_mhz,
                              end->sm_clock_mhz, start->mem_clock_mhz, end->mem_clock_mhz));
  }
  return w;
}

RunStability run_stability(const Result& r) {
  RunStability s;
  const Timing& t = r.timing;
  const std::vector<std::string> w = run_warnings(r);
  const auto first = [&](const char* kind) {
    for (const std::string& line : w)
      if (line.rfind(kind, 0) == 0) return line;
    return std::string();
  };
  if (t.noise > kNoisyRun || (t.tpot_ms.median > 0 && t.tpot_ms.p90 >= kNoisyTail * t.tpot_ms.median))
    s.ruled_out = first("noisy: ");
  const std::optional<ClockState>& start = r.device.start;
  const std::optional<ClockState>& end = r.device.end;
  for (const std::optional<ClockState>* c : {&start, &end}) {
    if (s.ruled_out.empty() && *c && ((*c)->throttle_reasons & ~(kIdle | kApplicationClocks | kPowerCap)))
      s.ruled_out = first("throttled: ");
  }
  if (start && end) {
    if (s.ruled_out.empty() && start->mem_clock_mhz > 0 &&
        end->mem_clock_mhz < start->mem_clock_mhz * (1 - kClockFall))
      s.ruled_out = first("clocks fell: ");
    if (start->sm_clock_mhz > 0 && end->sm_clock_mhz < start->sm_clock_mhz)
      s.sm_clock_fall = 1.0 - static_cast<double>(end->sm_clock_mhz) / start->sm_clock_mhz;
  }
  return s;
}

}  // namespace db
