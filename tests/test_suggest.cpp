// "did you mean": typos of a name get it suggested, other words get nothing.
#include <gtest/gtest.h>

#include "decodebench/error.h"

TEST(DidYouMean, SuggestsTheClosestNameForATypo) {
  const std::vector<std::string> options = {"--model", "--tokens", "--repeat", "--context", "--warmup"};
  EXPECT_EQ(db::did_you_mean("--modle", options), " (did you mean --model?)");  // swapped letters
  EXPECT_EQ(db::did_you_mean("--token", options), " (did you mean --tokens?)");
  EXPECT_EQ(db::did_you_mean("--contex", options), " (did you mean --context?)");
  const std::vector<std::string> presets = {"8b-int4", "8b-int8", "4b-int4", "1b-fp16"};
  EXPECT_EQ(db::did_you_mean("8b-in4", presets), " (did you mean 8b-int4?)");
}

TEST(DidYouMean, NothingForUnrelatedWordsOrExactNames) {
  const std::vector<std::string> options = {"--model", "--tokens"};
  EXPECT_EQ(db::did_you_mean("--frobnicate", options), "");
  EXPECT_EQ(db::did_you_mean("--model", options), "");
  EXPECT_EQ(db::did_you_mean("", options), "");
  EXPECT_EQ(db::did_you_mean("--model", {}), "");
}
