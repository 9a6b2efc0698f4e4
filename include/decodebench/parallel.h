// Row-parallel loops for the host code (weight production, the CPU reference): rows are
// independent, so the result is the same bits whatever the thread count.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace db {

// Every hardware thread (at least one).
inline int hardware_threads() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Splits [0, n) into `threads` contiguous chunks and calls f(begin, end) on each, the first
// on the calling thread; threads <= 0 means hardware_threads(). Small n runs inline. An
// exception thrown by any chunk is rethrown here once all of them have finished.
template <class F>
void parallel_rows(int64_t n, int threads, F&& f) {
  if (threads <= 0) threads = hardware_threads();
  if (threads <= 1 || n < 64) {
    f(int64_t{0}, n);
    return;
  }
  const int64_t chunk = (n + threads - 1) / threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  auto run = [&](int t) {
    const int64_t b = t * chunk, e = std::min(n, b + chunk);
    if (b >= e) return;
    try {
      f(b, e);
    } catch (...) {
      errors[static_cast<size_t>(t)] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(run, t);
  run(0);
  for (auto& th : pool) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace db
