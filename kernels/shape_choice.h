// The load-time tuners' choice of a kernel shape (tune_skinny, tune_tiles): host code, so that
// the CPU tests check it with a timer of their own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

namespace db::cuda {

struct ShapeChoice {
  size_t index;       // into the shapes
  double us;          // its time, us a matrix
  double default_us;  // shapes[0]'s
};

// Times every shape of `shapes` (shapes[0] the default; time_us(shape) times one) in two
// rounds, each keeping the faster of its two times, and chooses the fastest where it is 3%
// faster than the default, the default otherwise. One round is not enough: after a model's load
// the card can run its first tens of milliseconds of work up to three times slow, and one round
// then chooses by the order the shapes were timed in (docs/kernels.md#batch, `gemm_skinny`).
template <class Shape, class TimeUs>
ShapeChoice choose_shape(const std::vector<Shape>& shapes, TimeUs&& time_us) {
  std::vector<double> us(shapes.size(), std::numeric_limits<double>::infinity());
  for (int round = 0; round < 2; ++round)
    for (size_t i = 0; i < shapes.size(); ++i)
      us[i] = std::min(us[i], static_cast<double>(time_us(shapes[i])));
  size_t best = 0;
  for (size_t i = 1; i < shapes.size(); ++i)
    if (us[i] < us[best]) best = i;
  if (us[best] > 0.97 * us[0]) best = 0;
  return {best, us[best], us[0]};
}

// The choice as a tuner records it (SkinnyTiming, TilesTiming): the chosen and the default shape
// and a matrix's time at each.
template <class Timing, class Shape>
Timing timing_of(const std::vector<Shape>& shapes, const ShapeChoice& c) {
  Timing t;
  t.shape = shapes[c.index];
  t.default_shape = shapes[0];
  t.us = c.us;
  t.default_us = c.default_us;
  return t;
}

}  // namespace db::cuda
