// The batched step's mixed-input GEMM (kernels/mixed_gemm.cu) against a double-precision CPU
// reference: int4 with and without zero points at groups of 64, 128 and a whole row (groups of
// 32 it does not take: mixed_gemm_takes), and int8, on shapes whose rows are not a multiple of
// the 128-row tile and the real 8b shapes, at the batches the plan sends it (17 to 128) and
// beyond, store and accumulate; the same bits on a second call.
// And the mixed-wgmma layout that repack_mixed makes at load: its fp16 copy
// (dequantize_any_to_f16, a block of rows from inside a tile) has the canonical layout's bits.
// The GEMM's cases skip visibly without a compute capability 9.0 GPU or without the build's
// sm_90a code; the layout's run on any GPU.
#include <string>
#include <vector>

#include "decodebench/quant.h"
#include "gpu_common.cuh"
#include "gpu_linear_reference.cuh"
#include "mixed_gemm.cuh"
#include "parallel_fill.h"
#include "prefill.cuh"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;
using namespace dbtest;

namespace {

struct Case {
  Scheme scheme;
  int64_t rows, cols, batch;
  int group = 128;  // int4; cols: a group a row
  bool zero_point = true;
  bool accumulate = false;
};

std::string name(const Case& c) {
  return fmt::format(
      "{}_{}x{}_b{}{}{}{}", to_string(c.scheme), c.rows, c.cols, c.batch,
      c.scheme == Scheme::int4 ? (c.group == c.cols ? "_grow" : fmt::format("_g{}", c.group)) : "",
      c.scheme == Scheme::int4 && !c.zero_point ? "_sym" : "", c.accumulate ? "_acc" : "");
}

// A canonical matrix on the device repacked into the mixed-wgmma layout, as a load does.
struct MixedQuant {
  DeviceQuant canonical;
  DeviceBuffer<uint8_t> w, meta;
  DeviceMatrix m;
  static MatrixBytes bytes(const QuantMatrix& q) {
    DeviceMatrix d = DeviceQuant::shape_of(q);
    d.mixed_wgmma = true;
    return device_matrix_bytes(d);
  }
  explicit MixedQuant(const QuantMatrix& q)
      : canonical(q), w(bytes(q).weights), meta(bytes(q).scales), m(canonical.m) {
    repack_mixed(m, w.p, meta.p, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
  }
};

// wgmma multiplies fp16 operands exactly and adds in fp32; the weights are fp16((q - z) s) (int8:
// fp16(q s)), 2^-11 of each product at most from the value the reference multiplies. So |y - ref|
// is bounded by 2^-11 sum |w x| plus the fp32 additions' rounding (cols 2^-24 sum |w x|, far
// less).
constexpr double kTolerance = 1.0 / 2048;

class MixedGemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(MixedGemmTest, EverySequenceMatchesTheCpuReference) {
  REQUIRE_ARCH_CODE(90, mixed_gemm_built(), "the mixed-input GEMM");
  const Case c = GetParam();
  const LinearInputs<QuantMatrix> in =
      quantized_inputs(c.rows, c.cols, c.batch, static_cast<unsigned>(c.rows * 31 + c.cols * 7 + c.batch),
                       c.scheme, c.group, c.zero_point);
  MixedQuant mq(in.w);
  const char* why = nullptr;
  ASSERT_TRUE(mixed_gemm_supports(mq.m, &why)) << name(c) << ": " << why;
  DeviceBuffer<uint8_t> ws(mixed_gemm_workspace_bytes(c.rows, c.cols, c.batch));
  CUDA_CHECK(cudaMemset(ws.p, 0, ws.n));
  expect_reference_and_same_bits(
      in, c.accumulate,
      [&](const __half* x, float* y) { gemm_mixed(mq.m, x, c.batch, y, c.accumulate, ws.p, nullptr); },
      [](double mag, double) { return kTolerance * mag + 1e-5; }, name(c), " (the split order is fixed)");
}

std::vector<Case> cases() {
  std::vector<Case> v;
  struct Scheme_ {
    Scheme s;
    int group;  // 0: a whole row
    bool zp;
  };
  const Scheme_ schemes[] = {{Scheme::int4, 64, true}, {Scheme::int4, 128, true}, {Scheme::int4, 128, false},
                             {Scheme::int4, 0, true},  {Scheme::int4, 64, false}, {Scheme::int8, 0, false}};
  // The plan's range (17 to 128: each end, the skinny GEMM's end at 64 and 65, one N tile of 32)
  // and past it (the kernel itself takes any batch: 2, 129, 300 past one 256-sequence tile).
  for (const Scheme_& s : schemes)
    for (int64_t b : {2, 16, 17, 32, 64, 65, 128, 129, 300})
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{200, 384}, {4100, 1024}}) {
        const int g = s.s == Scheme::int4 ? (s.group == 0 ? static_cast<int>(cols) : s.group) : 128;
        v.push_back({s.s, rows, cols, b, g, s.zp});
      }
  // The 8b shapes (qkv, o, gate/up, down) at the batches the plan sends here.
  for (Scheme s : {Scheme::int4, Scheme::int8})
    for (int64_t b : {17, 64, 65, 128})
      for (auto [rows, cols] :
           {std::pair<int64_t, int64_t>{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}})
        v.push_back({s, rows, cols, b});
  // Accumulating into y (the o and down projections' residual), with and without K splits.
  for (Scheme s : {Scheme::int4, Scheme::int8})
    for (int64_t b : {17, 65, 128}) {
      v.push_back({s, 200, 384, b, 128, true, true});
      v.push_back({s, 4096, 14336, b, 128, true, true});
    }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, MixedGemmTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return name(info.param); });

// A matrix the kernel does not take, or one in another layout, is refused with the reason.
TEST(MixedGemm, RefusesWhatItDoesNotTake) {
  REQUIRE_GPU();
  const char* why = nullptr;
  DeviceMatrix m;
  m.scheme = Scheme::int4;
  m.rows = 200;
  m.cols = 384;
  m.group_size = 128;
  EXPECT_FALSE(mixed_gemm_supports(m, &why));  // canonical
  EXPECT_NE(std::string(why).find("mixed-wgmma"), std::string::npos) << why;
  m.mixed_wgmma = true;
  EXPECT_TRUE(mixed_gemm_supports(m, &why)) << why;
  m.group_size = 32;
  EXPECT_FALSE(mixed_gemm_supports(m, &why));
  m.scheme = Scheme::fp8;
  EXPECT_FALSE(mixed_gemm_supports(m, &why));
  if (!mixed_gemm_built()) EXPECT_THROW(gemm_mixed(m, nullptr, 1, nullptr, false, nullptr, nullptr), Error);
}

// The layout at load: repack_mixed's matrix, copied to fp16 (whole, and a block of rows that
// starts inside a 128-row tile, as the prefill's copies in blocks do), gives the canonical
// layout's copy bit for bit, every scheme and a ragged last tile; matrix_rows cuts whole tiles.
TEST(MixedGemm, TheLayoutsFp16CopyIsTheCanonicalOnes) {
  REQUIRE_GPU();
  struct L {
    Scheme s;
    int64_t rows, cols;
    int group;
    bool zp;
  };
  for (const L& l : {L{Scheme::int4, 200, 384, 128, true}, L{Scheme::int4, 200, 384, 64, false},
                     L{Scheme::int4, 300, 256, 256, true}, L{Scheme::int8, 200, 384, 128, false},
                     L{Scheme::int8, 129, 1024, 128, false}}) {
    const std::string n = fmt::format("{} {}x{} g{}", to_string(l.s), l.rows, l.cols, l.group);
    const std::vector<float> wv = normal_values(l.rows * l.cols, 0.f, 0.02f, 17);
    const QuantMatrix q = quantize_matrix(wv.data(), l.rows, l.cols, l.s, l.group, l.zp);
    MixedQuant mq(q);
    ASSERT_EQ(layout_of(mq.m), MatrixLayout::mixed_wgmma) << n;
    DeviceBuffer<uint16_t> want(l.rows * l.cols), got(l.rows * l.cols);
    dequantize_to_f16(mq.canonical.m, reinterpret_cast<__half*>(want.p), nullptr);
    dequantize_any_to_f16(mq.m, reinterpret_cast<__half*>(got.p), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> a = want.download();
    EXPECT_EQ(got.download(), a) << n;
    const int64_t r0 = 40, r1 = l.rows - 3;  // inside the first tile, short of the last row
    DeviceBuffer<uint16_t> block((r1 - r0) * l.cols);
    dequantize_rows_to_f16(mq.m, r0, r1, reinterpret_cast<__half*>(block.p), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(block.download(), std::vector<uint16_t>(a.begin() + r0 * l.cols, a.begin() + r1 * l.cols)) << n;
    if (l.rows > 128) {
      const DeviceMatrix tail = matrix_rows(mq.m, 128, l.rows);
      DeviceBuffer<uint16_t> t((l.rows - 128) * l.cols);
      dequantize_any_to_f16(tail, reinterpret_cast<__half*>(t.p), nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      EXPECT_EQ(t.download(), std::vector<uint16_t>(a.begin() + 128 * l.cols, a.end())) << n;
    }
    EXPECT_THROW(matrix_rows(mq.m, 8, l.rows), Error) << n;
  }
}

}  // namespace
