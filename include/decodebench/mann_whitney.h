// The test compare judges a change with: a two-sided Mann-Whitney U test of two sets of
// independent measurements, and the smallest p any outcome of their sizes can give.
#pragma once

#include <cstddef>
#include <vector>

namespace db {

// Two-sided Mann-Whitney U test of samples a against samples b. Without ties and with at most
// kExactMannWhitney samples in all, p is exact (the distribution of U over every ordering, as
// scipy.stats.mannwhitneyu with method="exact"); otherwise the normal approximation with the
// tie correction and a continuity correction of 0.5 (method="asymptotic"):
//   U = R_a - n_a(n_a+1)/2       (R_a: sum of a's mid-ranks in the pooled samples)
//   sigma^2 = n_a n_b / 12 * ((n+1) - sum(t^3 - t) / (n(n-1)))   (t: sizes of tied groups)
//   z = max(0, |U - n_a n_b / 2| - 0.5) / sigma,   p = erfc(z / sqrt(2))
// p is NaN when either sample is empty, 1 when every value is tied.
inline constexpr size_t kExactMannWhitney = 60;
struct MannWhitney {
  double u = 0;  // U of a: the number of (a_i, b_j) pairs with a_i > b_j, ties counting 1/2
  double z = 0;  // signed: > 0 when a tends to be larger than b
  double p = 0;  // two-sided
  bool exact = false;
};
MannWhitney mann_whitney(const std::vector<double>& a, const std::vector<double>& b);
inline double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b) {
  return mann_whitney(a, b).p;
}

// The smallest two-sided p that any outcome can give with n_a and n_b samples: 2 / C(n, n_a),
// when every a is above every b. At alpha 0.01 that needs 5 and 5 samples (p 0.0079), or 4
// and 6 (0.0095); 4 and 5 (0.016) can never be significant.
double min_attainable_p(size_t na, size_t nb);

}  // namespace db
