// The tensor-core decode attention's plan (kernels/attention_mma_plan.h): which shapes it
// takes, when the engine runs it, the warps a block, and how a kv head's positions are divided
// among blocks.
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
  EXPECT_TRUE(attention_mma_chosen(8192, 128, 32, 8));  // 8b at 8192: faster on every cache scheme
  EXPECT_FALSE(attention_mma_chosen(4096, 128, 32, 8));
  EXPECT_FALSE(attention_mma_chosen(131072, 256, 8, 2));  // a shape it does not take: attention()
}

TEST(AttentionMmaPlan, TwelveWarpsWhereTheirSharedMemoryFitsAndAnSmHoldsOne) {
  // 8b's head (128) on an fp16 cache: a 12-warp block's ring is 12 x 2 stages x 8704 bytes,
  // a 4-warp block's 4 x 2 x 8704, each with ~4.9 KB of static arrays.
  constexpr int64_t bytes4 = 69632 + 4873, bytes12 = 208896 + 4873;
  constexpr int64_t h200 = 232448, a100 = 166912, ada = 101376;  // opt-in bytes a block
  EXPECT_EQ(attention_mma_choose_warps(h200, bytes4, bytes12, 1), 12);
  EXPECT_EQ(attention_mma_choose_warps(h200, bytes4, bytes12, 0), 4);  // the SM holds none: registers
  EXPECT_EQ(attention_mma_choose_warps(a100, bytes4, bytes12, 0), 4);
  EXPECT_EQ(attention_mma_choose_warps(a100, bytes4, bytes12, 1), 4);  // a stray occupancy does not override
  EXPECT_EQ(attention_mma_choose_warps(ada, bytes4, bytes12, 0), 4);
  EXPECT_EQ(attention_mma_choose_warps(bytes12, bytes4, bytes12, 1), 12);  // exactly the opt-in
  EXPECT_EQ(attention_mma_choose_warps(bytes12 - 1, bytes4, bytes12, 1), 4);
  EXPECT_EQ(attention_mma_choose_warps(bytes4 - 1, bytes4, bytes12, 0), 0);  // neither fits
}

TEST(AttentionMmaPlan, ABlockTakesATileAWarpAtLeast) {
  EXPECT_EQ(attention_mma_min_keys(4), 64);
  EXPECT_EQ(attention_mma_min_keys(12), 192);
  // 100 keys: one 4-warp block (64 keys a block), one 12-warp block.
  EXPECT_EQ(attention_mma_active_splits(100, 49, 4), 1);
  EXPECT_EQ(attention_mma_active_splits(128, 49, 4), 2);
  EXPECT_EQ(attention_mma_active_splits(100, 16, 12), 1);
  EXPECT_EQ(attention_mma_active_splits(383, 16, 12), 1);
  EXPECT_EQ(attention_mma_active_splits(384, 16, 12), 2);
  EXPECT_EQ(attention_mma_active_splits(32768, 16, 12), 16);  // 8b at 32768 on the H200: the whole grid
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
  // 12-warp blocks, one an SM: 16 a kv head for 8b, a third of the 4-warp blocks' 49.
  EXPECT_EQ(attention_mma_grid_splits(1, 132, 8, 1, 1024), 16);
  EXPECT_EQ(attention_mma_grid_splits(3, 132, 8, 1, 1024), 49);
}

// The property the kernel relies on: the active blocks' ranges tile [0, keys) exactly, in
// order, each non-empty, at least a tile a warp long unless there is a single block, and
// within one position of each other (the blocks finish together).
TEST(AttentionMmaPlan, ActiveRangesTileThePositionsEvenly) {
  for (int warps : {4, 12})
    for (int grid : {1, 2, 11, 16, 33, 264, kAttentionMmaMaxSplits}) {
      const int min_keys = attention_mma_min_keys(warps);
      for (int64_t keys :
           {int64_t{1}, int64_t{2}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{100}, int64_t{127},
            int64_t{128}, int64_t{129}, int64_t{191}, int64_t{192}, int64_t{193}, int64_t{385}, int64_t{4096},
            int64_t{5000}, int64_t{32769}, int64_t{70000}, int64_t{131000}, int64_t{1} << 20}) {
        const int active = attention_mma_active_splits(keys, grid, warps);
        ASSERT_GE(active, 1);
        ASSERT_LE(active, grid);
        EXPECT_EQ(active, std::max<int64_t>(1, std::min<int64_t>(grid, keys / min_keys)))
            << keys << " keys, grid " << grid << ", " << warps << " warps";
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
        if (active > 1)
          EXPECT_GE(shortest, min_keys) << keys << " keys, grid " << grid << ", " << warps << " warps";
        EXPECT_LE(longest - shortest, 1) << keys << " keys, grid " << grid << ", " << warps << " warps";
      }
    }
}

}  // namespace
