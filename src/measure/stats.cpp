// TPOT statistics of a run's samples.
#include <algorithm>
#include <cmath>

#include "decodebench/measure.h"

namespace db {
namespace {

double percentile(const std::vector<double>& sorted, double p) {
  // numpy.percentile(method="linear"): rank h = (n-1)p between the closest ranks.
  const double h = static_cast<double>(sorted.size() - 1) * p;
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
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

}  // namespace db
