// The load-time tuners' choice of a shape (kernels/shape_choice.h) with timers whose answers
// the test sets: the card slow for its first timings after a load, ties within 3%, and how
// often each shape is timed.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "shape_choice.h"

using db::cuda::choose_shape;

namespace {

// A card whose first `cold` timings come out `slowdown` times slow, each shape otherwise at
// its own time.
struct ColdCard {
  explicit ColdCard(std::map<std::string, double> times, int cold_timings = 0)
      : us(std::move(times)), cold(cold_timings) {}
  std::map<std::string, double> us;
  int cold;
  double slowdown = 3.0;
  int calls = 0;
  std::map<std::string, int> timed;
  double operator()(const std::string& shape) {
    ++timed[shape];
    return us.at(shape) * (calls++ < cold ? slowdown : 1.0);
  }
};

TEST(ShapeChoice, TheFastestShapeWinsThoughTheCardWasSlowWhenItWasFirstTimed) {
  // On a card slow for its first two timings, one round would choose `other` (4.5 us against
  // the default's 12 and `fast`'s 9); two rounds see each shape's own time.
  const std::vector<std::string> shapes{"default", "fast", "other"};
  ColdCard card{{{"default", 4.0}, {"fast", 3.0}, {"other", 4.5}}, 2};
  const auto c = choose_shape(shapes, card);
  EXPECT_EQ(shapes[c.index], "fast");
  EXPECT_DOUBLE_EQ(c.us, 3.0);
  EXPECT_DOUBLE_EQ(c.default_us, 4.0);
}

TEST(ShapeChoice, ASlowFirstTimingOfTheDefaultDoesNotHandTheChoiceToAnotherShape) {
  // One round: the default at 3 x 3.9 us, the other at its 8.8 us would win. Two rounds keep
  // the default's 3.9.
  const std::vector<std::string> shapes{"default", "other"};
  ColdCard card{{{"default", 3.9}, {"other", 8.8}}, 1};
  const auto c = choose_shape(shapes, card);
  EXPECT_EQ(c.index, 0u);
  EXPECT_DOUBLE_EQ(c.us, 3.9);
  EXPECT_DOUBLE_EQ(c.default_us, 3.9);
}

TEST(ShapeChoice, AShapeWithinThreePercentOfTheDefaultLeavesTheDefault) {
  const std::vector<std::string> shapes{"default", "close", "closer"};
  ColdCard card{{{"default", 10.0}, {"close", 9.75}, {"closer", 9.71}}};
  const auto c = choose_shape(shapes, card);
  EXPECT_EQ(c.index, 0u);
  EXPECT_DOUBLE_EQ(c.us, 10.0);
  card.us["closer"] = 9.69;  // 3.1% faster
  EXPECT_EQ(shapes[choose_shape(shapes, card).index], "closer");
}

TEST(ShapeChoice, EveryShapeIsTimedTwice) {
  const std::vector<std::string> shapes{"a", "b", "c", "d"};
  ColdCard card{{{"a", 1.0}, {"b", 2.0}, {"c", 3.0}, {"d", 4.0}}};
  choose_shape(shapes, card);
  for (const std::string& s : shapes) EXPECT_EQ(card.timed[s], 2) << s;
  EXPECT_EQ(card.calls, 8);
}

TEST(ShapeChoice, TheDefaultAloneIsChosen) {
  ColdCard card{{{"only", 5.0}}, 1};
  const auto c = choose_shape(std::vector<std::string>{"only"}, card);
  EXPECT_EQ(c.index, 0u);
  EXPECT_DOUBLE_EQ(c.us, 5.0);
}

}  // namespace

namespace {

TEST(ShapeChoice, TheTimingRecordsTheChosenShapeAndTheDefault) {
  struct Timing {
    std::string shape, default_shape;
    double us = 0, default_us = 0;
  };
  const std::vector<std::string> shapes{"default", "fast"};
  const auto t =
      db::cuda::timing_of<Timing>(shapes, choose_shape(shapes, ColdCard{{{"default", 4.0}, {"fast", 3.0}}}));
  EXPECT_EQ(t.shape, "fast");
  EXPECT_EQ(t.default_shape, "default");
  EXPECT_DOUBLE_EQ(t.us, 3.0);
  EXPECT_DOUBLE_EQ(t.default_us, 4.0);
}

}  // namespace
