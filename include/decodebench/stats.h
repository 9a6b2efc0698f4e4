// Statistics of a run's step times: the summary of its samples, and its noise, measured over
// its repetitions.
#pragma once

#include <vector>

#include "decodebench/result.h"

namespace db {

// Summary statistics of samples (linear-interpolated percentiles).
TpotStats compute_stats(const std::vector<double>& samples);

// A run's noise: the relative standard deviation (stdev / mean) of its repetition medians;
// 0 with fewer than two. Repetitions, not steps, are the unit: steps within one repetition
// are not independent, and what moves a run (clocks, placement, neighbours) moves whole
// repetitions.
double repetition_noise(const std::vector<double>& repetition_medians_ms);

// A run's independent measurements: its repetition medians (timing.repetition_medians_ms),
// or, for a result written before that field, the medians of its samples_ms taken
// config.tokens at a time.
std::vector<double> repetition_medians(const Result& r);

}  // namespace db
