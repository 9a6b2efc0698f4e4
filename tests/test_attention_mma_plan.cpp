// The tensor-core decode attention's plan (kernels/attention_mma_plan.h): which shapes it
// takes, when the engine runs it, and how a kv head's positions are divided among blocks.
#include <gtest/gtest.h>

#include "attention_mma_plan.h"

using namespace db;

namespace {

TEST(AttentionMmaPlan, TakesHeadSizesUpTo128AndGroupsUpTo16) {
  EXPECT_TRUE(attention_mma_takes(128, 32, 8));  // llama 3 8b
  EXPECT_TRUE(attention_mma_takes(64, 32, 8));   // llama 3.2 1b
  EXPECT_TRUE(attention_mma_takes(128, 64, 8));  // 70b
  EXPECT_TRUE(attention_mma_takes(32, 4, 4));
  EXPECT_TRUE(attention_mma_takes(96, 4, 1));
  EXPECT_TRUE(attention_mma_takes(64, 16, 1));  // 16 query heads a kv head: the mma's 16 rows
  EXPECT_FALSE(attention_mma_takes(64, 17, 1));
  EXPECT_FALSE(attention_mma_takes(256, 8, 2));   // the registers of its accumulators
  EXPECT_FALSE(attention_mma_takes(80, 6, 2));    // not a multiple of 32
  EXPECT_FALSE(attention_mma_takes(128, 12, 8));  // heads not a multiple of kv heads
  EXPECT_FALSE(attention_mma_takes(128, 8, 0));
}

TEST(AttentionMmaPlan, TheEngineRunsItFromTheThresholdOn) {
  EXPECT_FALSE(attention_mma_chosen(kAttentionMmaMinPositions - 1, 128, 32, 8));
  EXPECT_TRUE(attention_mma_chosen(kAttentionMmaMinPositions, 128, 32, 8));
  EXPECT_FALSE(attention_mma_chosen(131072, 256, 8, 2));  // a shape it does not take: attention()
}

TEST(AttentionMmaPlan, GridIsOneWaveOverTheKvHeadsWithinThePartialsRoom) {
  // The H200: 132 SMs, two blocks an SM.
  EXPECT_EQ(attention_mma_grid_splits(2, 132, 8, 1, 257), 33);  // 8b at 32768: 8 x 33 = 264 blocks
  EXPECT_EQ(attention_mma_grid_splits(2, 132, 8, 1, 32), 32);   // the partials hold 32 (4096 positions)
  EXPECT_EQ(attention_mma_grid_splits(2, 132, 8, 3, 1024), 11);
  EXPECT_EQ(attention_mma_grid_splits(2, 132, 8, 64, 1024), 1);  // never fewer than one
  EXPECT_EQ(attention_mma_grid_splits(2, 132, 1, 1, 1024), 264);
  EXPECT_EQ(attention_mma_grid_splits(8, 132, 1, 1, 4096), kAttentionMmaMaxSplits);
  EXPECT_EQ(attention_mma_grid_splits(0, 132, 8, 1, 1024), 16);  // an occupancy query of 0 counts as 1
}

// The property the kernel relies on: the active blocks' ranges tile [0, keys) exactly, in
// order, each non-empty, at least kAttentionMmaMinKeys long unless there is a single block,
// and within one position of each other (the blocks finish together).
TEST(AttentionMmaPlan, ActiveRangesTileThePositionsEvenly) {
  for (int grid : {1, 2, 11, 33, 264, kAttentionMmaMaxSplits}) {
    for (int64_t keys : {int64_t{1}, int64_t{2}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{127},
                         int64_t{128}, int64_t{129}, int64_t{4096}, int64_t{5000}, int64_t{32769},
                         int64_t{70000}, int64_t{131000}, int64_t{1} << 20}) {
      const int active = attention_mma_active_splits(keys, grid);
      ASSERT_GE(active, 1);
      ASSERT_LE(active, grid);
      EXPECT_EQ(active, std::max<int64_t>(1, std::min<int64_t>(grid, keys / kAttentionMmaMinKeys)))
          << keys << " keys, grid " << grid;
      EXPECT_EQ(attention_mma_split_start(keys, active, 0), 0);
      EXPECT_EQ(attention_mma_split_start(keys, active, active), keys);
      int64_t shortest = keys, longest = 0;
      for (int s = 0; s < active; ++s) {
        const int64_t n =
            attention_mma_split_start(keys, active, s + 1) - attention_mma_split_start(keys, active, s);
        shortest = std::min(shortest, n);
        longest = std::max(longest, n);
      }
      EXPECT_GE(shortest, 1);
      if (active > 1) EXPECT_GE(shortest, kAttentionMmaMinKeys) << keys << " keys, grid " << grid;
      EXPECT_LE(longest - shortest, 1) << keys << " keys, grid " << grid;
    }
  }
}

}  // namespace
