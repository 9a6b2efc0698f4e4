// The GPU tests' host-side helpers (parallel_fill.h): every index visited once, and random
// values that depend on the seed, not on the threads that drew them.
#include "parallel_fill.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

using dbtest::kNormalBlock;
using dbtest::normal_values;
using dbtest::parallel_blocks;
using dbtest::parallel_for;

TEST(ParallelFill, EveryIndexIsVisitedOnceWhateverTheBlocksAndThreads) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{65537}})
    for (int64_t block : {int64_t{1}, int64_t{3}, int64_t{64}, int64_t{100000}})
      for (int threads : {1, 2, 5, 16}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        parallel_blocks(n, block, threads, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)]++;
        });
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1)
              << "n " << n << " block " << block << " threads " << threads << " index " << i;
      }
  std::vector<std::atomic<int>> seen(12345);
  parallel_for(12345, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)]++;
  });
  for (const auto& s : seen) ASSERT_EQ(s.load(), 1);
}

TEST(ParallelFill, NormalValuesDependOnTheSeedAloneAndHaveTheirMoments) {
  const int64_t n = 3 * kNormalBlock + 1234;  // a short last block
  const std::vector<float> one = normal_values(n, 0.5f, 2.f, 42, 1);
  for (int threads : {2, 3, 16}) {
    const std::vector<float> many = normal_values(n, 0.5f, 2.f, 42, threads);
    ASSERT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0) << threads << " threads";
  }
  EXPECT_NE(normal_values(n, 0.5f, 2.f, 43, 1), one) << "another seed, the same values";
  double sum = 0, sq = 0;
  for (float v : one) {
    sum += v;
    sq += double(v) * v;
  }
  const double mean = sum / n, var = sq / n - mean * mean;
  // ~2x10^5 draws: the mean's standard error is 2 / sqrt(n) ~ 0.0045, the variance's ~0.013 of 4.
  EXPECT_NEAR(mean, 0.5, 0.03);
  EXPECT_NEAR(var, 4.0, 0.15);
  // The blocks are not copies of one another.
  EXPECT_NE(std::memcmp(one.data(), one.data() + kNormalBlock, 64 * sizeof(float)), 0);
}
