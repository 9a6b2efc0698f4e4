// The KV cache's schemes: names, scales, the round trip's error bound, and the layout's sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "decodebench/config.h"
#include "decodebench/error.h"
#include "decodebench/kv_quant.h"

using namespace db;

TEST(KvScheme, NamesRoundTripAndUnknownIsRefused) {
  for (KvScheme s : {KvScheme::fp16, KvScheme::fp8, KvScheme::int8})
    EXPECT_EQ(parse_kv_scheme(to_string(s)), s);
  try {
    parse_kv_scheme("int4");
    FAIL() << "int4 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp16, fp8, int8"), std::string::npos) << e.what();
  }
}

TEST(KvQuant, Fp16StoresAsComputed) {
  std::vector<float> v = {1.5f, -3.25f, 0.1f};
  const std::vector<float> before = v;
  kvq::round_trip(v.data(), 3, KvScheme::fp16);
  EXPECT_EQ(v, before);
}

TEST(KvQuant, AllZeroVectorStaysZero) {
  for (KvScheme s : {KvScheme::fp8, KvScheme::int8}) {
    EXPECT_EQ(kvq::scale_of(0.f, s), 1.f);
    std::vector<float> v(64, 0.f);
    kvq::round_trip(v.data(), 64, s);
    for (float x : v) EXPECT_EQ(x, 0.f);
  }
}

// int8 keeps every value within half a step (scale / 2) of itself, and the largest exactly;
// E4M3 within half a unit of its 3-bit mantissa: |v' - v| <= 2^-4 |v| for normal codes, and
// 2^-10 scale (half the subnormal step) below them.
TEST(KvQuant, RoundTripWithinTheSchemesStep) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.f, 2.f);
  for (KvScheme s : {KvScheme::int8, KvScheme::fp8}) {
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<float> v(128);
      for (float& x : v) x = d(rng);
      float amax = 0.f;
      for (float x : v) amax = std::fmax(amax, std::fabs(x));
      const float scale = kvq::scale_of(amax, s);
      std::vector<float> r = v;
      kvq::round_trip(r.data(), 128, s);
      for (int i = 0; i < 128; ++i) {
        const float err = std::fabs(r[i] - v[i]);
        if (s == KvScheme::int8)
          ASSERT_LE(err, 0.5f * scale * (1 + 1e-6f)) << i;
        else
          ASSERT_LE(err, std::fmax(std::ldexp(std::fabs(v[i]), -4), std::ldexp(scale, -10)) * (1 + 1e-6f))
              << i;
        if (std::fabs(v[i]) == amax) ASSERT_NEAR(r[i], v[i], amax * 1e-6f) << "the largest value is exact";
      }
    }
  }
}

TEST(KvQuant, LayoutSizes) {
  // 8b: 8 kv heads of 128; 1000 positions.
  EXPECT_EQ(kvq::sequence_bytes(KvScheme::fp16, 1000, 8, 128), 2u * 1000 * 1024);
  EXPECT_EQ(kvq::data_bytes(KvScheme::fp8, 1000, 8, 128), 1000u * 1024);
  EXPECT_EQ(kvq::scales_bytes(KvScheme::int8, 1000, 8), 4u * 1000 * 8);
  EXPECT_EQ(kvq::sequence_bytes(KvScheme::int8, 1000, 8, 128), 1000u * 1024 + 4u * 1000 * 8);
  EXPECT_EQ(kvq::scales_bytes(KvScheme::fp16, 1000, 8), 0u);
}

// Each sequence's cache starts 16-byte aligned (the kernels load 16 bytes at a time): the
// codes and scales of 21 positions of 2 kv heads of 64 take 2688 + 168 bytes, padded to 2864;
// fp16's rows are a multiple of 16 bytes already, and so is every fp8 or int8 cache whose
// scales are.
TEST(KvQuant, SequencesStartSixteenByteAligned) {
  EXPECT_EQ(kvq::sequence_bytes(KvScheme::fp8, 21, 2, 64), 2864u);
  EXPECT_EQ(kvq::sequence_bytes(KvScheme::int8, 21, 2, 64), 2864u);
  EXPECT_EQ(kvq::sequence_bytes(KvScheme::fp16, 21, 2, 64), 2u * 21 * 128);
  for (KvScheme s : {KvScheme::fp16, KvScheme::fp8, KvScheme::int8})
    for (int64_t positions : {1, 2, 3, 5, 21, 4097})
      for (int64_t kv_heads : {1, 2, 3, 8})
        for (int64_t head_dim : {8, 24, 64, 80, 128, 256}) {
          const uint64_t b = kvq::sequence_bytes(s, positions, kv_heads, head_dim);
          const uint64_t used =
              kvq::data_bytes(s, positions, kv_heads, head_dim) + kvq::scales_bytes(s, positions, kv_heads);
          EXPECT_EQ(b % 16, 0u);
          EXPECT_GE(b, used);
          EXPECT_LT(b, used + 16);
        }
}
