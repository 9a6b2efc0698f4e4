// The two-sided Mann-Whitney U test (mann_whitney.h): exact without ties for small samples,
// else the normal approximation with the tie and continuity corrections.
#include "decodebench/mann_whitney.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace db {

double min_attainable_p(size_t na, size_t nb) {
  if (na == 0 || nb == 0) return 1;
  double c = 1;  // C(na + nb, na), in floating point (it only has to beat 2 / alpha)
  for (size_t i = 1; i <= std::min(na, nb); ++i)
    c = c * static_cast<double>(na + nb - std::min(na, nb) + i) / i;
  return std::min(1.0, 2 / c);
}

namespace {

// P(U <= u) for sizes m and n without ties: the number of orderings of m a's and n b's with
// U(a) = k, for every k, by the recursion on the largest value (an a adds n to U, a b adds 0).
double exact_cdf(size_t m, size_t n, double u) {
  const size_t max_u = m * n;
  // f[i][k] for the current n: orderings of i a's and j b's with U = k.
  std::vector<std::vector<double>> f(m + 1, std::vector<double>(max_u + 1, 0.0));
  for (size_t i = 0; i <= m; ++i) f[i][0] = 1;  // j = 0: U = 0
  for (size_t j = 1; j <= n; ++j) {
    std::vector<std::vector<double>> g(m + 1, std::vector<double>(max_u + 1, 0.0));
    g[0][0] = 1;
    for (size_t i = 1; i <= m; ++i)
      for (size_t k = 0; k <= i * j; ++k) g[i][k] = f[i][k] + (k >= j ? g[i - 1][k - j] : 0.0);
    f = std::move(g);
  }
  double total = 0, below = 0;
  for (size_t k = 0; k <= max_u; ++k) {
    total += f[m][k];
    if (static_cast<double>(k) <= u + 1e-9) below += f[m][k];
  }
  return below / total;
}

}  // namespace

MannWhitney mann_whitney(const std::vector<double>& a, const std::vector<double>& b) {
  // Pool the samples (NaN values cannot be ranked: left out), sort, give each tied group
  // its mid-rank.
  std::vector<std::pair<double, bool>> pooled;  // (value, from a)
  pooled.reserve(a.size() + b.size());
  for (double v : a)
    if (!std::isnan(v)) pooled.emplace_back(v, true);
  const size_t na = pooled.size();
  for (double v : b)
    if (!std::isnan(v)) pooled.emplace_back(v, false);
  const size_t nb = pooled.size() - na;
  MannWhitney r;
  if (na == 0 || nb == 0) {
    r.u = r.z = r.p = std::nan("");
    return r;
  }
  std::sort(
      pooled.begin(), pooled.end(),
      [](const std::pair<double, bool>& x, const std::pair<double, bool>& y) { return x.first < y.first; });
  const double n = static_cast<double>(na + nb);
  double rank_sum_a = 0, ties = 0;  // ties: sum of t^3 - t over tied groups
  for (size_t i = 0; i < pooled.size();) {
    size_t j = i;
    while (j < pooled.size() && pooled[j].first == pooled[i].first) ++j;
    const double t = static_cast<double>(j - i);
    const double mid_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;  // ranks i+1..j
    for (size_t k = i; k < j; ++k)
      if (pooled[k].second) rank_sum_a += mid_rank;
    ties += t * t * t - t;
    i = j;
  }
  const double dna = static_cast<double>(na), dnb = static_cast<double>(nb);
  r.u = rank_sum_a - dna * (dna + 1) / 2;
  const double mu = dna * dnb / 2;
  if (ties == 0 && na + nb <= kExactMannWhitney) {
    // U is symmetric about mu: p = 2 P(U <= min(u, mn - u)).
    r.exact = true;
    const double lo = std::min(r.u, dna * dnb - r.u);
    r.p = std::min(1.0, 2 * exact_cdf(na, nb, lo));
    const double sd = std::sqrt(dna * dnb * (n + 1) / 12);
    r.z = (r.u - mu) / sd;
    return r;
  }
  const double var = dna * dnb / 12 * ((n + 1) - ties / (n * (n - 1)));
  if (!(var > 0)) {  // every value tied (or n = 2 with one tie): no evidence either way
    r.z = 0;
    r.p = 1;
    return r;
  }
  const double d = r.u - mu;
  const double mag = std::max(0.0, std::fabs(d) - 0.5) / std::sqrt(var);
  r.z = d < 0 ? -mag : mag;
  r.p = std::min(1.0, std::erfc(mag / std::sqrt(2.0)));
  return r;
}

}  // namespace db
