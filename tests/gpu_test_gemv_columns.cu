// The batched step's columns GEMV (kernels/gemv_columns.cu) against a double-precision CPU
// reference: every scheme at 2 to 8 sequences (instances of 2, 4 and 8, the rest of an instance
// masked) on shapes that are not multiples of any row group, rows of one chunk, threads past
// the last chunk, and the 8b shapes; store and accumulate, int4 groups of 32 to 128 with and
// without zero points; every instantiated shape; the same bits on a second call.
#include <algorithm>
#include <cmath>
#include <random>

#include "decodebench/half.h"
#include "decodebench/linear_shapes.h"
#include "gemv_columns.cuh"
#include "gpu_common.cuh"
#include "parallel_fill.h"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;
using dbtest::DeviceBuffer;
using dbtest::DeviceQuant;
using dbtest::normal_values;

namespace {

struct Case {
  Scheme scheme;
  int64_t rows, cols, batch;
  int group = 0;  // int4; 0: 128 where it divides the columns, else 32
  bool zero_point = true;
  bool accumulate = false;
};

int group_of(const Case& c) {
  return c.group ? c.group : (c.cols % 128 == 0 ? 128 : 32);
}

std::string name(const Case& c) {
  return fmt::format("{}_{}x{}_b{}{}{}{}", to_string(c.scheme), c.rows, c.cols, c.batch,
                     c.scheme == Scheme::int4 ? fmt::format("_g{}", group_of(c)) : "",
                     c.zero_point ? "" : "_sym", c.accumulate ? "_acc" : "");
}

// Each row and sequence is an fp16 partial sum a chunk (fp16: two) of fused multiply-adds, each
// rounding once by at most 2^-11 of the partial sum, itself at most sum |w x|: 8 of them a half
// for fp16, int8 and fp8, 16 for int4 (int8's and int4's q and q - zero are exact in fp16, as
// are E4M3 values times 2^-8). Those partial sums are added in fp32, at most one a piece of 8
// columns, each add rounding by 2^-24 of at most sum |w x|. fp8's products of its 2^-8 scaled
// values that fall below fp16's normal range round by at most 2^-25 of those units, 2^-17 of the
// row scale unscaled: `subnormal` a product.
struct Bound {
  double relative, subnormal;
};
Bound bound(Scheme s, int64_t cols) {
  const double products = s == Scheme::int4 ? 16 : 8;
  return {products / 2048.0 + static_cast<double>(cols / 8) / (1 << 24),
          s == Scheme::fp8 ? 1.0 / (1 << 17) : 0.0};
}

struct Inputs {
  QuantMatrix q;
  std::vector<uint16_t> x;  // [batch, cols] fp16 bits
  std::vector<float> y0;    // [batch, rows]: y before an accumulating call
};

Inputs make_inputs(const Case& c) {
  std::mt19937 rng(static_cast<unsigned>(c.rows * 31 + c.cols * 7 + c.batch));
  std::normal_distribution<float> xd(0.f, 1.f);
  const std::vector<float> w = normal_values(c.rows * c.cols, 0.f, 0.02f, rng());
  Inputs in;
  in.q = quantize_matrix(w.data(), c.rows, c.cols, c.scheme, group_of(c), c.zero_point);
  in.x.resize(static_cast<size_t>(c.batch * c.cols));
  for (auto& h : in.x) h = f32_to_f16(xd(rng));
  in.y0.resize(static_cast<size_t>(c.batch * c.rows));
  for (float& v : in.y0) v = xd(rng);
  return in;
}

// The matrix on the device in the layout the fast GEMV reads (int4 repacked into the nibble order).
void upload_fast_layout(DeviceQuant& dq) {
  if (dq.m.scheme == Scheme::int4) repack_int4(dq.m, nullptr, false);
}

// y of one call at `shape` on a poisoned (or, accumulating, y0-filled) output.
std::vector<float> run(const Case& c, const Inputs& in, const DeviceMatrix& m,
                       const DeviceBuffer<uint16_t>& x, DeviceBuffer<float>& y, ColumnsShape shape = {}) {
  if (c.accumulate)
    CUDA_CHECK(cudaMemcpy(y.p, in.y0.data(), 4 * in.y0.size(), cudaMemcpyHostToDevice));
  else
    y.poison();
  gemv_columns_shaped(m, reinterpret_cast<const __half*>(x.p), c.batch, y.p, c.accumulate, shape, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  return y.download();
}

// Every column of every row of the small shapes; of the large ones every stride-th row and
// the last 128, so that the reference stays at ~10^8 multiply-adds.
void expect_reference(const Case& c, const Inputs& in, const std::vector<float>& got,
                      const std::string& what) {
  const int64_t stride = std::max<int64_t>(1, c.rows * c.cols * c.batch / 100'000'000);
  const Bound b = bound(c.scheme, c.cols);
  std::vector<float> row(static_cast<size_t>(c.cols));
  for (int64_t r = 0; r < c.rows; ++r) {
    if (r % stride != 0 && r < c.rows - 128) continue;
    in.q.row(r, row.data());
    const double scale = c.scheme == Scheme::fp8 ? std::fabs(in.q.row_scale(r)) : 0.0;
    for (int64_t s = 0; s < c.batch; ++s) {
      double ref = c.accumulate ? in.y0[s * c.rows + r] : 0.0, mag = 0.0;
      for (int64_t k = 0; k < c.cols; ++k) {
        const double t = static_cast<double>(row[k]) * f16_to_f32(in.x[s * c.cols + k]);
        ref += t;
        mag += std::fabs(t);
      }
      const float v = got[s * c.rows + r];
      ASSERT_FALSE(std::isnan(v)) << what << " row " << r << " sequence " << s << " was not written";
      // The accumulating add rounds once more, by 2^-24 of the result.
      const double tol = b.relative * mag + b.subnormal * scale * c.cols + std::fabs(ref) / (1 << 23) + 1e-6;
      ASSERT_LE(std::fabs(v - ref), tol)
          << what << " row " << r << " sequence " << s << ": got " << v << ", reference " << ref;
    }
  }
}

class ColumnsTest : public ::testing::TestWithParam<Case> {};

TEST_P(ColumnsTest, EverySequenceMatchesTheCpuReferenceAndTheBitsRepeat) {
  REQUIRE_GPU();
  const Case c = GetParam();
  const Inputs in = make_inputs(c);
  DeviceQuant dq(in.q);
  upload_fast_layout(dq);
  const char* why = nullptr;
  ASSERT_TRUE(gemv_columns_supports(dq.m, c.batch, &why)) << name(c) << ": " << why;
  DeviceBuffer<uint16_t> x(in.x);
  DeviceBuffer<float> y(in.y0.size());
  const std::vector<float> got = run(c, in, dq.m, x, y);
  expect_reference(c, in, got, name(c));
  EXPECT_EQ(run(c, in, dq.m, x, y), got) << name(c) << ": a second call gave other bits";
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8}) {
    const int64_t chunk = weights_per_chunk(s);
    for (int64_t b : {2, 3, 4, 5, 8}) {
      // Rows not a multiple of any row group (1, 7, 33, 130); a row of one chunk; a row whose
      // last warp has threads past the last chunk (33 chunks); longer rows of several chunks a
      // thread (2048 and 16384 inputs, the latter only where its inputs fit L1).
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, chunk},
                                {7, chunk},
                                {33, 33 * chunk},
                                {130, 1088},
                                {130, 2048},
                                {1000, 4096}})
        v.push_back({s, rows, cols, b});
      if (b <= 4) v.push_back({s, 70, 16384, b});
    }
    // The 8b shapes: qkv, o, gate/up at 2 and 8 sequences, down at 2 and 4.
    for (int64_t b : {2, 8})
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{6144, 4096}, {4096, 4096}, {28672, 4096}})
        v.push_back({s, rows, cols, b});
    for (int64_t b : {2, 4}) v.push_back({s, 4096, 14336, b});
    for (int64_t b : {3, 8}) v.push_back({s, 130, 2048, b, 0, true, true});  // accumulate into y
  }
  // int4's other group sizes, asymmetric and symmetric (the symmetric zero point from a constant).
  for (int g : {32, 64, 128})
    for (bool zp : {true, false})
      for (int64_t b : {3, 8}) v.push_back({Scheme::int4, 130, 1024, b, g, zp});
  v.push_back({Scheme::int4, 4096, 4096, 5, 128, false});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, ColumnsTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return name(info.param); });

// Every instantiated shape (columns_kernel_shapes) at every batch it holds, on a matrix that is
// not a multiple of any of its row groups, against the reference, at as many blocks an SM as
// fit and at one.
TEST(Columns, EveryInstantiatedShapeMatchesTheCpuReference) {
  REQUIRE_GPU();
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8}) {
    for (const ColumnsShape& k : columns_kernel_shapes()) {
      for (int64_t batch = 2; batch <= k.columns; ++batch) {
        const Case c{s, 203, 1536, batch, 64, true, batch % 2 == 1};
        const Inputs in = make_inputs(c);
        DeviceQuant dq(in.q);
        upload_fast_layout(dq);
        DeviceBuffer<uint16_t> x(in.x);
        DeviceBuffer<float> y(in.y0.size());
        for (int bps : {0, 1}) {
          const std::string what = fmt::format("{} columns {} chunks {} rows {} blocks/SM {}", name(c),
                                               k.columns, k.chunks, k.rows, bps);
          const std::vector<float> got = run(c, in, dq.m, x, y, {k.columns, k.chunks, k.rows, bps});
          expect_reference(c, in, got, what);
        }
      }
    }
  }
}

// The shape gemv_columns runs: the narrowest instance that holds the batch, every field set, and
// an instantiated shape.
TEST(Columns, TheDefaultShapeIsTheNarrowestInstanceThatHoldsTheBatch) {
  REQUIRE_GPU();
  for (Scheme s : {Scheme::fp16, Scheme::int8, Scheme::int4, Scheme::fp8})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{6144, 4096}, {4096, 14336}, {130, 1088}}) {
      const QuantMatrix q = quantize_matrix(
          std::vector<float>(static_cast<size_t>(rows * cols), 0.01f).data(), rows, cols, s, 64, true);
      DeviceQuant dq(q);
      upload_fast_layout(dq);
      for (int64_t batch = 2; batch <= 8; ++batch) {
        const char* why = nullptr;
        if (!gemv_columns_supports(dq.m, batch, &why)) continue;  // 14336 inputs past 4 sequences
        const ColumnsShape sh = columns_shape(dq.m, batch);
        const std::string what = fmt::format("{} {}x{} batch {}", to_string(s), rows, cols, batch);
        EXPECT_EQ(sh.columns, batch <= 2 ? 2 : batch <= 4 ? 4 : 8) << what;
        EXPECT_GT(sh.blocks_per_sm, 0) << what;
        const std::vector<ColumnsShape> all = columns_kernel_shapes();
        EXPECT_TRUE(std::any_of(all.begin(), all.end(),
                                [&](const ColumnsShape& k) {
                                  return k.columns == sh.columns && k.chunks == sh.chunks &&
                                         k.rows == sh.rows;
                                }))
            << what << ": " << sh.chunks << " chunks x " << sh.rows << " rows";
      }
    }
}

// What the kernel does not take it refuses with the reason, before launching.
TEST(Columns, RefusesWhatItDoesNotTakeWithTheReason) {
  REQUIRE_GPU();
  DeviceMatrix m;
  m.scheme = Scheme::int4;
  m.rows = 8;
  m.cols = 1024;
  m.group_size = 128;
  m.int4_repacked = true;
  const char* why = nullptr;
  EXPECT_TRUE(gemv_columns_supports(m, 8, &why));
  EXPECT_FALSE(gemv_columns_supports(m, 1, &why));
  EXPECT_FALSE(gemv_columns_supports(m, 9, &why));
  m.int4_frag = true;
  EXPECT_FALSE(gemv_columns_supports(m, 2, &why));
  m.int4_frag = false;
  m.cols = 16384;  // 5 x 16384 fp16 inputs: 160 KiB
  EXPECT_FALSE(gemv_columns_supports(m, 5, &why));
  try {
    gemv_columns(m, nullptr, 5, nullptr, false, nullptr);
    ADD_FAILURE() << "a launch the kernel does not take";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 128 KiB"), std::string::npos) << e.what();
  }
}

}  // namespace
