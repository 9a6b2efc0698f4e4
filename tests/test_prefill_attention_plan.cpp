// Which kernel the prefill's causal attention runs (kernels/prefill_attention_plan.h): Hopper's
// wgmma kernel exactly where it is built, the GPU is compute capability 9.0, the cache fp16 and
// the head 128 wide, unless DECODEBENCH_PREFILL_ATTENTION=mma keeps it off; the mma.sync
// kernel for its head sizes otherwise; the plain kernel for the rest.
#include <gtest/gtest.h>

#include "decodebench/error.h"
#include "prefill_attention_plan.h"

using namespace db;

namespace {

TEST(PrefillAttentionPlan, WgmmaOnlyOnComputeCapability90ForFp16AndHead128WhereBuilt) {
  EXPECT_EQ(choose_prefill_attention(128, KvScheme::fp16, 90, true, false), PrefillAttentionKernel::wgmma);
  // Not built (architectures without 90), or forced off: the mma.sync kernel.
  EXPECT_EQ(choose_prefill_attention(128, KvScheme::fp16, 90, false, false), PrefillAttentionKernel::mma);
  EXPECT_EQ(choose_prefill_attention(128, KvScheme::fp16, 90, true, true), PrefillAttentionKernel::mma);
  // sm_90a code runs on 9.0 alone: A100, L4, a later GPU take the mma.sync kernel.
  for (int cc : {80, 86, 89, 100, 120})
    EXPECT_EQ(choose_prefill_attention(128, KvScheme::fp16, cc, true, false), PrefillAttentionKernel::mma)
        << cc;
  // The 8-bit caches and other head sizes.
  for (KvScheme kv : {KvScheme::fp8, KvScheme::int8})
    EXPECT_EQ(choose_prefill_attention(128, kv, 90, true, false), PrefillAttentionKernel::mma)
        << to_string(kv);
  for (int hd : {32, 64, 80, 96})
    EXPECT_EQ(choose_prefill_attention(hd, KvScheme::fp16, 90, true, false), PrefillAttentionKernel::mma)
        << hd;
  for (int hd : {24, 160, 256})
    EXPECT_EQ(choose_prefill_attention(hd, KvScheme::fp16, 90, true, false), PrefillAttentionKernel::plain)
        << hd;
}

TEST(PrefillAttentionPlan, TheEnvironmentVariableTakesAutoOrMma) {
  EXPECT_FALSE(prefill_attention_force_mma(nullptr));
  EXPECT_FALSE(prefill_attention_force_mma(""));
  EXPECT_FALSE(prefill_attention_force_mma("auto"));
  EXPECT_TRUE(prefill_attention_force_mma("mma"));
  try {
    prefill_attention_force_mma("wgma");
    FAIL() << "a misspelt value is an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DECODEBENCH_PREFILL_ATTENTION=wgma: auto or mma"),
              std::string::npos)
        << e.what();
  }
}

TEST(PrefillAttentionPlan, NamesAsTheResultRecordsThem) {
  EXPECT_STREQ(to_string(PrefillAttentionKernel::wgmma), "wgmma");
  EXPECT_STREQ(to_string(PrefillAttentionKernel::mma), "mma");
  EXPECT_STREQ(to_string(PrefillAttentionKernel::plain), "plain");
}

}  // namespace
