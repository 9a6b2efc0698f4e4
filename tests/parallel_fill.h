// Host-side test work on every core. The GPU tests draw ~10^8 random weights for an 8b-sized
// matrix, and std::normal_distribution on one core (~20 ns a value) was most of such a test's
// time; the values here come in fixed blocks, each from a generator of its own, so they depend
// on the seed alone and not on how many threads drew them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

namespace dbtest {

// The threads host-side test work uses: the cores, at most 16.
inline int test_threads() {
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
}

// fn(begin, end) over [0, n) in blocks of `block` indices, the blocks dealt out to `threads`
// threads; returns when every block is done. fn must not throw.
template <class F>
void parallel_blocks(int64_t n, int64_t block, int threads, F&& fn) {
  const int64_t blocks = (n + block - 1) / block;
  const int64_t used = std::max<int64_t>(1, std::min<int64_t>(threads, blocks));
  const auto work = [&](int64_t t) {
    for (int64_t b = t; b < blocks; b += used) fn(b * block, std::min(n, (b + 1) * block));
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < used; ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& th : pool) th.join();
}

// fn(begin, end) over [0, n), one contiguous range a thread.
template <class F>
void parallel_for(int64_t n, F&& fn) {
  const int threads = test_threads();
  parallel_blocks(n, std::max<int64_t>(1, (n + threads - 1) / threads), threads, fn);
}

// n values drawn from N(mean, stddev): block b of kNormalBlock values from an mt19937 seeded with
// (seed, b), whatever `threads` is.
constexpr int64_t kNormalBlock = int64_t{1} << 16;
inline std::vector<float> normal_values(int64_t n, float mean, float stddev, uint64_t seed,
                                        int threads = test_threads()) {
  std::vector<float> v(static_cast<size_t>(n));
  parallel_blocks(n, kNormalBlock, threads, [&](int64_t begin, int64_t end) {
    const uint64_t b = static_cast<uint64_t>(begin / kNormalBlock);
    std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                      static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32)};
    std::mt19937 rng(seq);
    std::normal_distribution<float> d(mean, stddev);
    for (int64_t i = begin; i < end; ++i) v[static_cast<size_t>(i)] = d(rng);
  });
  return v;
}

}  // namespace dbtest
