// Whether a run's figure can be trusted: the warnings a result earns (noisy, throttled,
// clocks fell) and which of them rule a comparison's verdict out (docs/method.md "Noise and
// warnings").
#pragma once

#include <string>
#include <vector>

#include "decodebench/result.h"

namespace db {

// Above this noise a run is flagged noisy (timing.warnings): it is as large as compare's
// default threshold, so the run cannot support a verdict at that threshold.
inline constexpr double kNoisyRun = 0.03;

// A tenth of the steps at least this many times the median flags a run noisy too: a heavy
// tail that the median hides.
inline constexpr double kNoisyTail = 1.5;

// An SM or memory clock this much lower at the end of a run than at its start: the clocks fell.
inline constexpr double kClockFall = 0.01;

// The warnings a result earns (timing.warnings): noisy, throttled (an NVML throttle reason
// other than idle or application clocks at the start or the end), clocks fell. Each is one
// line of text beginning with its kind ("noisy: ...", "throttled: ...", "clocks fell: ...").
std::vector<std::string> run_warnings(const Result& r);

// What of a run's warnings compare must account for (docs/method.md "Noise and warnings").
// A noisy run, a throttle reason other than idle, application clocks or the software power
// cap (thermal, hardware slowdown, power brake, ...) or a fallen memory clock rule a verdict
// out. The power cap acts on the GPU through its clocks, so it counts as the SM clock's fall.
struct RunStability {
  std::string ruled_out;     // the first warning that rules a verdict out; "" when none
  double sm_clock_fall = 0;  // 1 - end / start of the SM clock when it fell; 0 otherwise
};
RunStability run_stability(const Result& r);

}  // namespace db
