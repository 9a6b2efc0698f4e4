// The launch carveout (kernels/carveout.h) on the H200's figures: 132 SMs, a largest
// shared-memory configuration of 228 KB, 1 KB reserved per block.
#include <gtest/gtest.h>

#include "carveout.h"

using namespace db;

namespace {

constexpr int kSms = 132;
constexpr int64_t kMaxSm = 228 * 1024;
constexpr int64_t kReserved = 1024;

// The configurations the driver rounds a percentage up to on the H200 (KB).
int64_t config_kb(int pct) {
  const int64_t want = (kMaxSm * pct + 99) / 100;
  for (int64_t kb : {0, 8, 16, 32, 64, 100, 132, 164, 196, 228})
    if (kb * 1024 >= want) return kb;
  return -1;
}

TEST(Carveout, ResidentBlocksAreAWaveAtMostAndOneAtLeast) {
  EXPECT_EQ(resident_blocks(8, kSms, 4), 1);  // attention at a short context: 8 blocks
  EXPECT_EQ(resident_blocks(132, kSms, 4), 1);
  EXPECT_EQ(resident_blocks(133, kSms, 4), 2);
  EXPECT_EQ(resident_blocks(264, kSms, 4), 2);     // attention at 4096 + 128 positions: 8 x 33
  EXPECT_EQ(resident_blocks(100000, kSms, 4), 4);  // never more than fit
  EXPECT_EQ(resident_blocks(0, kSms, 4), 1);
  EXPECT_EQ(resident_blocks(10, kSms, 0), 1);  // a launch that cannot be resident still asks for one
}

TEST(Carveout, SmallKernelsGetTheFloorWhichIs32KBOnH200) {
  // A GEMV block: 640 bytes static; 8 blocks of 256 threads fill an SM's 2048 threads.
  const int pct = carveout_percent(8, 640 + kReserved, kMaxSm);
  EXPECT_EQ(pct, kMinCarveoutPercent);
  EXPECT_EQ(config_kb(pct), 32);
  EXPECT_EQ(carveout_percent(1, 0, kMaxSm), kMinCarveoutPercent);
}

TEST(Carveout, AttentionGetsWhatItsResidentBlocksNeed) {
  const int64_t block = 39489 + kReserved;  // attention's block, head dim 128
  const int one = carveout_percent(1, block, kMaxSm);
  EXPECT_EQ(one, 18);
  EXPECT_EQ(config_kb(one), 64);
  const int two = carveout_percent(2, block, kMaxSm);
  EXPECT_EQ(config_kb(two), 100);
  EXPECT_GE(config_kb(two) * 1024, 2 * block);
  EXPECT_EQ(carveout_percent(5, block, kMaxSm), 87);
}

TEST(Carveout, EveryNeedFitsTheConfigurationItRoundsTo) {
  for (int64_t blocks = 1; blocks <= 32; ++blocks)
    for (int64_t bytes = 0; bytes * blocks <= kMaxSm; bytes += 97) {
      const int pct = carveout_percent(blocks, bytes, kMaxSm);
      ASSERT_GE(pct, kMinCarveoutPercent);
      ASSERT_LE(pct, 100);
      ASSERT_GE(config_kb(pct) * 1024, blocks * bytes) << blocks << " blocks of " << bytes << " bytes";
    }
}

TEST(Carveout, MoreThanTheSmHoldsIsCappedAt100) {
  EXPECT_EQ(carveout_percent(8, 64 * 1024, kMaxSm), 100);
  EXPECT_EQ(carveout_percent(1, 1, 0), 100);
}

}  // namespace
