// The Mann-Whitney U test against hand-computed values: exact without ties, the normal
// approximation with ties or large samples, and degenerate samples.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "compare_fixtures.h"
#include "decodebench/mann_whitney.h"

namespace {

using db_test::normal_samples;

}  // namespace

// a = {1,2,3}, b = {4,5,6}: no a beats any b, U = 0. Without ties the p-value is exact: of
// the C(6,3) = 20 orderings one has U = 0 and one U = 9, so p = 2/20 = 0.1
// (scipy.stats.mannwhitneyu, method="exact"). z = (0 - 4.5) / sqrt(9 * 7 / 12) = -1.9639610.
TEST(MannWhitney, NoTiesIsExact) {
  const db::MannWhitney r = db::mann_whitney({1, 2, 3}, {4, 5, 6});
  EXPECT_TRUE(r.exact);
  EXPECT_DOUBLE_EQ(r.u, 0);
  EXPECT_NEAR(r.z, -1.9639610121239315, 1e-12);
  EXPECT_NEAR(r.p, 0.1, 1e-12);
  // Swapped: U' = n_a n_b - U, the same p, z of the other sign.
  const db::MannWhitney s = db::mann_whitney({4, 5, 6}, {1, 2, 3});
  EXPECT_DOUBLE_EQ(s.u, 9);
  EXPECT_NEAR(s.z, 1.9639610121239315, 1e-12);
  EXPECT_DOUBLE_EQ(s.p, r.p);
  EXPECT_DOUBLE_EQ(db::mann_whitney_p({1, 2, 3}, {4, 5, 6}), r.p);
}

// Complete separation is the most significant outcome: p = 2 / C(n_a + n_b, n_a).
TEST(MannWhitney, TheSmallestPossiblePIsTwoOverTheOrderings) {
  const db::MannWhitney r = db::mann_whitney({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10});
  EXPECT_NEAR(r.p, 2.0 / 252, 1e-12);
  EXPECT_NEAR(db::min_attainable_p(5, 5), 2.0 / 252, 1e-15);  // < 0.01: 5 and 5 can be significant
  EXPECT_NEAR(db::min_attainable_p(4, 6), 2.0 / 210, 1e-15);  // < 0.01
  EXPECT_NEAR(db::min_attainable_p(4, 5), 2.0 / 126, 1e-15);  // > 0.01: never
  EXPECT_DOUBLE_EQ(db::min_attainable_p(1, 1), 1);
  EXPECT_DOUBLE_EQ(db::min_attainable_p(0, 5), 1);
}

// a = {1,2,2,3}, b = {2,3,4,4}. Pooled: 1 | 2 2 2 | 3 3 | 4 4, mid-ranks 1 | 3 | 5.5 | 7.5.
// R_a = 1 + 3 + 3 + 5.5 = 12.5, U = 12.5 - 4*5/2 = 2.5; tied groups 3, 2, 2:
// sum(t^3 - t) = 24 + 6 + 6 = 36; sigma^2 = 16/12 * (9 - 36/56) = 11.142857;
// z = -(8 - 2.5 - 0.5)/3.3380918 = -1.4978617, p = 0.1341692.
TEST(MannWhitney, TiesUseMidRanksAndTheTieCorrection) {
  const db::MannWhitney r = db::mann_whitney({1, 2, 2, 3}, {2, 3, 4, 4});
  EXPECT_DOUBLE_EQ(r.u, 2.5);
  EXPECT_NEAR(r.z, -1.4978617237881953, 1e-12);
  EXPECT_NEAR(r.p, 0.13416918012812581, 1e-12);
}

// a = {1,3,5,7}, b = {2,4,6,8,10}: pairs with a_i > b_j: 0 + 1 + 2 + 3 = 6; mu = 10. Of the
// C(9,4) = 126 orderings, 26 have U <= 6 (counted by enumeration): p = 2 * 26/126.
// z = (6 - 10) / sqrt(20 * 10 / 12) = -0.9797959.
TEST(MannWhitney, UnequalSizes) {
  const db::MannWhitney r = db::mann_whitney({7, 1, 5, 3}, {10, 2, 8, 4, 6});  // order does not matter
  EXPECT_DOUBLE_EQ(r.u, 6);
  EXPECT_NEAR(r.z, -0.9797958971132712, 1e-12);
  EXPECT_NEAR(r.p, 52.0 / 126, 1e-12);
}

TEST(MannWhitney, DegenerateSamples) {
  // Every value tied: no evidence, p = 1.
  const db::MannWhitney tied = db::mann_whitney({2, 2, 2}, {2, 2});
  EXPECT_DOUBLE_EQ(tied.p, 1);
  EXPECT_DOUBLE_EQ(tied.z, 0);
  // A side without samples: no test.
  EXPECT_TRUE(std::isnan(db::mann_whitney_p({}, {1, 2})));
  EXPECT_TRUE(std::isnan(db::mann_whitney_p({1, 2}, {})));
  // NaN samples cannot be ranked: left out.
  EXPECT_DOUBLE_EQ(db::mann_whitney_p({1, 2, std::nan(""), 3}, {4, 5, 6}),
                   db::mann_whitney_p({1, 2, 3}, {4, 5, 6}));
  // U at its mean: p = 1.
  EXPECT_DOUBLE_EQ(db::mann_whitney_p({1, 4}, {2, 3}), 1);
}

TEST(MannWhitney, SeparatedLargeSamplesAreSignificant) {
  const auto a = normal_samples(200, 1.0, 0.005, 1), b = normal_samples(200, 1.05, 0.005, 2);
  const db::MannWhitney r = db::mann_whitney(a, b);
  EXPECT_FALSE(r.exact);  // 400 samples: the normal approximation
  EXPECT_DOUBLE_EQ(r.u, 0);
  EXPECT_LT(r.p, 1e-60);
  EXPECT_LT(r.z, 0);
  // Same distribution: not significant at 0.01 (for these seeds).
  EXPECT_GT(db::mann_whitney_p(normal_samples(200, 1.0, 0.02, 3), normal_samples(200, 1.0, 0.02, 4)), 0.01);
}
