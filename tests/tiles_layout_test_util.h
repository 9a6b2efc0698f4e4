// What the tiles layouts' CPU tests (int4, int8, fp16) share: the check that a lane's slice of x
// is its mma.m16n8k16 B fragments at the layout's permuted columns.
#pragma once

#include <gtest/gtest.h>

#include "int4_tiles_layout.h"

namespace dbtest {

// Lane (g, c) loads `lane_cols` halves of x's row g from column lane_cols * c; part s of its
// slice (a k-step, or one of fp16's two tiles of a step) uses halves 4 s .. 4 s + 3 as b0..b3:
// element i's "k" (b_element's row) stands for the column column_of_k(s, k) and its n is g.
template <class ColumnOfK>
void expect_x_slices_are_b_fragments(int parts, int lane_cols, ColumnOfK column_of_k) {
  for (int lane = 0; lane < 32; ++lane)
    for (int s = 0; s < parts; ++s)
      for (int i = 0; i < 4; ++i) {
        const db::tiles::RowK e = db::tiles::b_element(lane, i);
        EXPECT_EQ(e.k, lane / 4);
        EXPECT_EQ(column_of_k(s, e.row), lane_cols * (lane % 4) + 4 * s + i) << lane << " " << s << " " << i;
      }
}

}  // namespace dbtest
