// TPOT statistics of a run's samples.
#include <algorithm>
#include <cmath>

#include "decodebench/stats.h"

namespace db {
namespace {

double percentile(const std::vector<double>& sorted, double p) {
  // numpy.percentile(method="linear"): rank h = (n-1)p between the closest ranks.
  const double h = static_cast<double>(sorted.size() - 1) * p;
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

double median_of_copy(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : percentile(v, 0.5);
}

}  // namespace

TpotStats compute_stats(const std::vector<double>& samples) {
  TpotStats s;
  if (samples.empty()) return s;
  std::vector<double> v = samples;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.n = static_cast<int64_t>(n);
  s.min = v.front();
  s.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(n);
  s.median = percentile(v, 0.5);
  s.p10 = percentile(v, 0.1);
  s.p90 = percentile(v, 0.9);
  s.p99 = percentile(v, 0.99);
  if (n >= 2) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.stdev = std::sqrt(ss / static_cast<double>(n - 1));
  }
  return s;
}

double repetition_noise(const std::vector<double>& m) {
  if (m.size() < 2) return 0;
  double sum = 0;
  for (double x : m) sum += x;
  const double mean = sum / static_cast<double>(m.size());
  double ss = 0;
  for (double x : m) ss += (x - mean) * (x - mean);
  return mean > 0 ? std::sqrt(ss / static_cast<double>(m.size() - 1)) / mean : 0;
}

std::vector<double> repetition_medians(const Result& r) {
  if (!r.timing.repetition_medians_ms.empty()) return r.timing.repetition_medians_ms;
  const std::vector<double>& s = r.timing.samples_ms;
  const size_t per = r.config.tokens > 0 ? static_cast<size_t>(r.config.tokens) : s.size();
  std::vector<double> m;
  for (size_t i = 0; per > 0 && i < s.size(); i += per)
    m.push_back(median_of_copy(std::vector<double>(s.begin() + i, s.begin() + std::min(s.size(), i + per))));
  return m;
}

}  // namespace db
