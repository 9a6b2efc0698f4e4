// The int4 GEMV on the tensor cores for 1 to 16 sequences, weights in the tiles layout (lab
// tool, not a test):
//   build-gpu/decodebench_tiles_gemv_bench [--check-only] [rows cols]...
//
// Why: the batch-1 rows GEMV (kernels/gemv.cu) spends an FMA a weight on its one sequence, so
// a second sequence costs it another (the columns GEMV: 1.38x at 2 sequences, batch.md §22).
// Here a lane's one 16-byte load is the A operands of four mma.m16n8k16 (16 rows x 64
// columns a tile, tests/bench/int4_tiles_layout.h) and up to 8 sequences are the mma's N: the
// dequantization and the mma do not grow with the batch, only x's loads (32 bytes a lane, a
// sequence, a tile) do. 9-16 sequences take a second mma a k-step on the same A.
//
// The kernel: a block of W warps takes RT row tiles (16 RT rows) over all columns, warp w the
// groups of 128 columns w, w + W, ...; each group's loads (RT x 2 tiles x 16 bytes of weights,
// RT x 2 meta words, 2 x 32 bytes of x a sequence) are issued one group ahead. Per 16-byte
// word of weights: 4 LOP3 and a shift make the A fragments' (1024 + q, 1024 + 16 q) pairs,
// 2 HSUB2 and 2 HFMA2 take out 1024 + z and 64 + z, exactly (q - z in fp16). A group's 8
// k-steps accumulate into fp32 accumulators of their own, which the group's scale then adds to
// the row's sums (4 FFMA a lane); the warps' sums meet in shared memory in warp order.
//
// Checked against a double-precision CPU dot of the same codes on small and 8b shapes at
// 1-16 sequences (within 2^-20 of sum |s (q - z) x|, the fp32 accumulations' bound with room),
// then timed on one 8b layer's four matrices (qkv 6144 x 4096, o 4096 x 4096, gate/up 28672 x
// 4096, down 4096 x 14336; or the shapes given) at each batch, beside the rows GEMV at batch 1
// on the engine's int4 layout, every launch on another copy of the weights (the copies exceed
// L2). Prints a line a (kernel, shape, batch): microseconds a layer and each matrix's, and GB/s
// of the bytes read (the tiles' meta is 4 bytes a row and group, the engine's 2.5).
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_timing.cuh"
#include "common.cuh"
#include "gemv.cuh"
#include "int4_tiles_layout.h"
#include "weights.cuh"

using namespace db;
using namespace db::cuda;
using namespace db::tiles;

namespace {

constexpr size_t kRotateBytes = size_t{512} << 20;  // >> the H200's L2

// (a & mask) | 0x64006400: two nibbles under fp16's 1024.
__device__ __forceinline__ uint32_t nibbles_1024(uint32_t a, uint32_t mask) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(a), "r"(mask), "r"(0x64006400u));
  return r;
}

__device__ __forceinline__ uint32_t hsub2_bits(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("sub.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

__device__ __forceinline__ uint32_t hfma2_bits(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

// Word w of a lane's tile load as the A fragment of one mma: q - z of rows g (zlo: 1024 + z
// twice) and g + 8 (zhi: -(64 + z) twice), exactly (int4_tiles_layout.h's nibble order).
__device__ __forceinline__ void dequant(uint32_t w, uint32_t zlo, uint32_t zhi, uint32_t (&a)[4]) {
  constexpr uint32_t kSixteenth = 0x2c002c00u;  // 1/16 twice
  const uint32_t w8 = w >> 8;
  a[0] = hsub2_bits(nibbles_1024(w, 0x000f000fu), zlo);
  a[1] = hfma2_bits(nibbles_1024(w, 0x00f000f0u), kSixteenth, zhi);
  a[2] = hsub2_bits(nibbles_1024(w8, 0x000f000fu), zlo);
  a[3] = hfma2_bits(nibbles_1024(w8, 0x00f000f0u), kSixteenth, zhi);
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

struct TilesArgs {
  const uint8_t* w;     // the packed codes: row tiles x column tiles x 512 bytes
  const uint32_t* meta;  // row tiles x groups x 16 words
  const __half* x;       // [batch][cols]
  float* y;              // [batch][rows]
  int64_t rows, cols;
  int batch;
};

// One group's loads for a warp's RT row tiles and NT sequence tiles.
template <int RT, int NT>
struct GroupLoads {
  uint4 w[RT][2];
  uint32_t m_lo[RT], m_hi[RT];
  uint4 x[NT][2][2];  // [sequence tile][column tile][16-byte half of the lane's 32 bytes]
};

template <int RT, int NT>
__device__ __forceinline__ void load_group(const TilesArgs& a, int64_t rt0, int64_t row_tiles, int64_t gi,
                                           int lane, GroupLoads<RT, NT>& L) {
  const int g = lane / 4, c = lane % 4;
  const int64_t col_tiles = a.cols / kTileCols, groups = a.cols / kGroup;
#pragma unroll
  for (int t = 0; t < RT; ++t) {
    const int64_t rt = rt0 + t < row_tiles ? rt0 + t : rt0;  // a tile past the matrix reloads the first
#pragma unroll
    for (int h = 0; h < 2; ++h) L.w[t][h] = ld_stream(reinterpret_cast<const uint4*>(a.w + (rt * col_tiles + 2 * gi + h) * kTileBytes + lane * 16));
    const uint32_t* m = a.meta + (rt * groups + gi) * kTileRows;
    L.m_lo[t] = __ldg(m + g);
    L.m_hi[t] = __ldg(m + g + 8);
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int seq = nt * 8 + g;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int k = 0; k < 2; ++k)
        L.x[nt][h][k] = seq < a.batch
                            ? __ldg(reinterpret_cast<const uint4*>(a.x + int64_t{seq} * a.cols + gi * kGroup +
                                                                   h * kTileCols + 16 * c + 8 * k))
                            : make_uint4(0, 0, 0, 0);
  }
}

template <int RT, int NT, int W>
__global__ void __launch_bounds__(W * 32) tiles_gemv(TilesArgs a) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row_tiles = (a.rows + kTileRows - 1) / kTileRows, groups = a.cols / kGroup;
  const int64_t rt0 = int64_t{blockIdx.x} * RT;
  float tot[RT][NT][4] = {};
  GroupLoads<RT, NT> cur;
  if (warp < groups) load_group<RT, NT>(a, rt0, row_tiles, warp, lane, cur);
  for (int64_t gi = warp; gi < groups; gi += W) {
    GroupLoads<RT, NT> nxt;
    if (gi + W < groups) load_group<RT, NT>(a, rt0, row_tiles, gi + W, lane, nxt);
    float acc[RT][NT][4] = {};
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int t = 0; t < RT; ++t) {
          uint32_t frag[4];
          dequant(word(cur.w[t][h], s), cur.m_lo[t] >> 16 | (cur.m_lo[t] & 0xffff0000u),
                  cur.m_hi[t] >> 16 | (cur.m_hi[t] & 0xffff0000u), frag);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            mma16816(acc[t][nt], frag, word(cur.x[nt][h][s / 2], (2 * s) % 4), word(cur.x[nt][h][s / 2], (2 * s + 1) % 4));
        }
#pragma unroll
    for (int t = 0; t < RT; ++t) {
      const float s_lo = __half2float(__ushort_as_half(static_cast<unsigned short>(cur.m_lo[t] & 0xffffu)));
      const float s_hi = __half2float(__ushort_as_half(static_cast<unsigned short>(cur.m_hi[t] & 0xffffu)));
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        tot[t][nt][0] = fmaf(s_lo, acc[t][nt][0], tot[t][nt][0]);
        tot[t][nt][1] = fmaf(s_lo, acc[t][nt][1], tot[t][nt][1]);
        tot[t][nt][2] = fmaf(s_hi, acc[t][nt][2], tot[t][nt][2]);
        tot[t][nt][3] = fmaf(s_hi, acc[t][nt][3], tot[t][nt][3]);
      }
    }
    cur = nxt;
  }
  // The warps' sums in shared memory, added in warp order.
  __shared__ float red[W][RT][NT][32][4];
#pragma unroll
  for (int t = 0; t < RT; ++t)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[warp][t][nt][lane][i] = tot[t][nt][i];
  __syncthreads();
  for (int idx = threadIdx.x; idx < RT * kTileRows * 8 * NT; idx += W * 32) {
    const int t = idx / (kTileRows * 8 * NT), r = idx / (8 * NT) % kTileRows, n = idx % (8 * NT);
    const int64_t row = (rt0 + t) * kTileRows + r;
    if (n >= a.batch || row >= a.rows || rt0 + t >= row_tiles) continue;
    const int nt = n / 8, src_lane = 4 * (r % 8) + (n % 8) / 2, i = (r / 8) * 2 + n % 2;
    float sum = 0.f;
    for (int w = 0; w < W; ++w) sum += red[w][t][nt][src_lane][i];
    a.y[int64_t{n} * a.rows + row] = sum;
  }
}

// The instantiated shapes: row tiles a warp x warps a block, for up to 8 and up to 16 sequences.
struct Shape {
  int rt, w;
};
constexpr Shape kShapes[] = {{1, 4}, {2, 4}, {1, 8}, {2, 8}, {4, 4}};

template <int RT, int NT, int W>
void launch_one(const TilesArgs& a, cudaStream_t s) {
  const int64_t row_tiles = (a.rows + kTileRows - 1) / kTileRows;
  tiles_gemv<RT, NT, W><<<static_cast<unsigned>((row_tiles + RT - 1) / RT), W * 32, 0, s>>>(a);
}

template <int NT>
void launch_nt(const TilesArgs& a, Shape sh, cudaStream_t s) {
  if (sh.rt == 1 && sh.w == 4) return launch_one<1, NT, 4>(a, s);
  if (sh.rt == 2 && sh.w == 4) return launch_one<2, NT, 4>(a, s);
  if (sh.rt == 1 && sh.w == 8) return launch_one<1, NT, 8>(a, s);
  if (sh.rt == 2 && sh.w == 8) return launch_one<2, NT, 8>(a, s);
  if (sh.rt == 4 && sh.w == 4) return launch_one<4, NT, 4>(a, s);
  fail("tiles_gemv: no instance for {} row tiles x {} warps", sh.rt, sh.w);
}

void launch(const TilesArgs& a, Shape sh, cudaStream_t s = nullptr) {
  if (a.cols % kGroup != 0) fail("tiles_gemv: {} columns are not whole groups of {}", a.cols, kGroup);
  if (a.batch < 1 || a.batch > 16) fail("tiles_gemv: {} sequences (1 to 16)", a.batch);
  if (a.batch <= 8)
    launch_nt<1>(a, sh, s);
  else
    launch_nt<2>(a, sh, s);
  CUDA_CHECK_LAUNCH();
}

// A matrix in the tiles layout on the GPU, and the host's canonical copy it was packed from.
struct Tiles {
  int64_t rows = 0, cols = 0;
  uint8_t* w = nullptr;
  uint32_t* meta = nullptr;
  uint64_t bytes = 0;  // codes and meta
};

uint16_t f16_bits(float v) {
  const __half h = __float2half_rn(v);
  return __half_as_ushort(h);
}

// Codes q (0..15), zero points z (0..15) and scales s a row and group, packed with the meta
// words of int4_tiles_layout.h; rows padded to whole tiles with zero codes.
Tiles upload(const std::vector<uint8_t>& q, const std::vector<uint8_t>& z, const std::vector<float>& s, int64_t rows,
             int64_t cols) {
  const int64_t row_tiles = (rows + kTileRows - 1) / kTileRows, prow = row_tiles * kTileRows;
  const int64_t groups = cols / kGroup;
  std::vector<uint8_t> qp(prow * cols, 0), packed(prow * cols / 2, 0);
  std::copy(q.begin(), q.end(), qp.begin());
  pack(qp.data(), prow, cols, packed.data());
  std::vector<uint32_t> meta(row_tiles * groups * kTileRows, 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const float zc = r % kTileRows < 8 ? 1024.f + z[r * groups + g] : -(64.f + z[r * groups + g]);
      meta[((r / kTileRows) * groups + g) * kTileRows + r % kTileRows] =
          f16_bits(s[r * groups + g]) | uint32_t{f16_bits(zc)} << 16;
    }
  Tiles t;
  t.rows = rows;
  t.cols = cols;
  CUDA_CHECK(cudaMalloc(&t.w, packed.size()));
  CUDA_CHECK(cudaMalloc(&t.meta, meta.size() * 4));
  CUDA_CHECK(cudaMemcpy(t.w, packed.data(), packed.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(t.meta, meta.data(), meta.size() * 4, cudaMemcpyHostToDevice));
  t.bytes = packed.size() + meta.size() * 4;
  return t;
}

// Another copy of `t` on the GPU (the timing's copies: packing on the host is slow).
Tiles clone(const Tiles& t) {
  Tiles c = t;
  const uint64_t meta_bytes = ((t.rows + kTileRows - 1) / kTileRows) * (t.cols / kGroup) * kTileRows * 4;
  CUDA_CHECK(cudaMalloc(&c.w, t.bytes - meta_bytes));
  CUDA_CHECK(cudaMalloc(&c.meta, meta_bytes));
  CUDA_CHECK(cudaMemcpy(c.w, t.w, t.bytes - meta_bytes, cudaMemcpyDeviceToDevice));
  CUDA_CHECK(cudaMemcpy(c.meta, t.meta, meta_bytes, cudaMemcpyDeviceToDevice));
  return c;
}

void release(Tiles& t) {
  cudaFree(t.w);
  cudaFree(t.meta);
}

// Every shape at 1, 2, 3, 8, 9 and 16 sequences against the CPU's double-precision dot;
// returns the number of outputs past their bound.
int64_t check(int64_t rows, int64_t cols, std::mt19937& rng) {
  const int64_t groups = cols / kGroup;
  std::vector<uint8_t> q(rows * cols), z(rows * groups);
  std::vector<float> s(rows * groups);
  for (uint8_t& v : q) v = static_cast<uint8_t>(rng() % 16);
  for (uint8_t& v : z) v = static_cast<uint8_t>(rng() % 16);
  for (float& v : s) v = __half2float(__float2half_rn(std::ldexp(1.f + (rng() % 1024) / 1024.f, -10)));
  Tiles t = upload(q, z, s, rows, cols);
  const int max_b = 16;
  std::vector<__half> xh(max_b * cols);
  std::vector<double> xd(max_b * cols);
  for (size_t i = 0; i < xh.size(); ++i) {
    xh[i] = __float2half_rn((static_cast<int>(rng() % 2001) - 1000) / 1000.f);
    xd[i] = __half2float(xh[i]);
  }
  __half* x = nullptr;
  float* y = nullptr;
  CUDA_CHECK(cudaMalloc(&x, xh.size() * 2));
  CUDA_CHECK(cudaMalloc(&y, 4ull * max_b * rows));
  CUDA_CHECK(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice));
  std::vector<double> ref(max_b * rows), mag(max_b * rows);
  for (int n = 0; n < max_b; ++n)
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0, m = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const double v = s[r * groups + k / kGroup] * (double(q[r * cols + k]) - z[r * groups + k / kGroup]) *
                         xd[n * cols + k];
        sum += v;
        m += std::fabs(v);
      }
      ref[n * rows + r] = sum;
      mag[n * rows + r] = m;
    }
  int64_t bad = 0;
  for (int b : {1, 2, 3, 8, 9, 16})
    for (const Shape& sh : kShapes) {
      CUDA_CHECK(cudaMemset(y, 0xff, 4ull * max_b * rows));  // NaN: an output never written fails
      TilesArgs a{t.w, t.meta, x, y, rows, cols, b};
      launch(a, sh);
      std::vector<float> got(b * rows);
      CUDA_CHECK(cudaMemcpy(got.data(), y, got.size() * 4, cudaMemcpyDeviceToHost));
      double worst = 0;
      int64_t here = 0;
      for (int n = 0; n < b; ++n)
        for (int64_t r = 0; r < rows; ++r) {
          const double bound = std::ldexp(mag[n * rows + r], -20) + 1e-30;
          const double err = std::fabs(got[n * rows + r] - ref[n * rows + r]);
          worst = std::max(worst, err / bound);
          if (!(err <= bound)) {
            if (here++ < 3)
              fmt::print(stderr, "check {}x{} B={} rt{}w{}: row {} seq {}: {} against {} (bound {:.3g})\n", rows,
                         cols, b, sh.rt, sh.w, r, n, got[n * rows + r], ref[n * rows + r], bound);
          }
        }
      bad += here;
      fmt::print("{{\"check\": \"{}x{}\", \"batch\": {}, \"shape\": \"rt{}w{}\", \"bad\": {}, \"worst_of_bound\": {:.3f}}}\n",
                 rows, cols, b, sh.rt, sh.w, here, worst);
    }
  release(t);
  cudaFree(x);
  cudaFree(y);
  return bad;
}

// The engine's int4 matrix (groups of 128 with zero points, its repacked layout) filled with
// small finite values, for the rows GEMV's time at batch 1.
DeviceMatrix engine_copy(int64_t rows, int64_t cols) {
  DeviceMatrix d;
  d.scheme = Scheme::int4;
  d.rows = rows;
  d.cols = cols;
  d.group_size = kGroup;
  d.zero_point = true;
  d.int4_repacked = true;
  const MatrixBytes b = device_matrix_bytes(d);
  auto filled = [](size_t bytes, int value) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
    CUDA_CHECK(cudaMemset(p, value, bytes));
    return p;
  };
  d.qweight = filled(b.weights, 0x21);
  d.scales = static_cast<__half*>(filled(b.scales, 0x11));
  d.zeros = static_cast<uint8_t*>(filled(b.zeros, 0x08));
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::pair<int64_t, int64_t>> shapes = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  int arg = 1;
  const bool check_only = arg < argc && std::strcmp(argv[arg], "--check-only") == 0;
  arg += check_only;
  if (arg + 1 < argc) {
    shapes.clear();
    for (int i = arg; i + 1 < argc; i += 2) shapes.push_back({std::atoll(argv[i]), std::atoll(argv[i + 1])});
  }
  try {
    std::mt19937 rng(2026);
    int64_t bad = check(48, 256, rng) + check(200, 384, rng) + check(4096, 4096, rng);
    fmt::print("{{\"checks\": \"{}\"}}\n", bad == 0 ? "PASS" : "FAIL");
    if (bad != 0) return 1;
    if (check_only) return 0;

    int64_t max_rows = 0, max_cols = 0;
    for (auto [r, c] : shapes) max_rows = std::max(max_rows, r), max_cols = std::max(max_cols, c);
    __half* x = nullptr;
    float* y = nullptr;
    CUDA_CHECK(cudaMalloc(&x, 2ull * 16 * max_cols));
    CUDA_CHECK(cudaMemset(x, 0x3c, 2ull * 16 * max_cols));  // ~1.0
    CUDA_CHECK(cudaMalloc(&y, 4ull * 16 * max_rows));
    // Copies of each matrix in both layouts, together past L2; values are irrelevant to time.
    std::vector<std::vector<Tiles>> tiles(shapes.size());
    std::vector<std::vector<DeviceMatrix>> engine(shapes.size());
    uint64_t tiles_layer = 0, engine_layer = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto [rows, cols] = shapes[i];
      const int64_t groups = cols / kGroup;
      std::vector<uint8_t> q(rows * cols, 5), z(rows * groups, 8);
      std::vector<float> s(rows * groups, 1.f / 512);
      Tiles one = upload(q, z, s, rows, cols);
      const size_t n = kRotateBytes / one.bytes + 2;
      tiles[i].push_back(one);
      for (size_t k = 1; k < n; ++k) tiles[i].push_back(clone(one));
      for (size_t k = 0; k < n; ++k) engine[i].push_back(engine_copy(rows, cols));
      tiles_layer += one.bytes;
      engine_layer += device_matrix_bytes(engine[i][0]).total();
    }
    auto line = [&](const char* kernel, int batch, const std::string& shape, uint64_t bytes,
                    const std::vector<double>& us) {
      double total = 0;
      std::string each;
      for (double u : us) {
        total += u;
        each += fmt::format("{}{:.2f}", each.empty() ? "" : ", ", u);
      }
      fmt::print(
          "{{\"kernel\": \"{}\", \"batch\": {}, \"shape\": \"{}\", \"us_layer\": {:.2f}, \"gbps\": {:.0f}, "
          "\"us_matrices\": [{}]}}\n",
          kernel, batch, shape, total, bytes / total / 1e3, each);
      std::fflush(stdout);
    };
    {  // the rows GEMV at batch 1
      GemvInput in;
      in.x = x;
      GemvOutput out;
      out.y = y;
      std::vector<double> us;
      for (size_t i = 0; i < shapes.size(); ++i)
        us.push_back(time_us([&](int k) { gemv(engine[i][k % engine[i].size()], in, out, GemvVariant::fast, nullptr); },
                             40, 4));
      line("rows_gemv", 1, "engine", engine_layer, us);
    }
    for (int b : {1, 2, 3, 4, 8, 9, 16})
      for (const Shape& sh : kShapes) {
        std::vector<double> us;
        for (size_t i = 0; i < shapes.size(); ++i)
          us.push_back(time_us(
              [&](int k) {
                const Tiles& t = tiles[i][k % tiles[i].size()];
                launch(TilesArgs{t.w, t.meta, x, y, t.rows, t.cols, b}, sh);
              },
              40, 4));
        line("tiles", b, fmt::format("rt{}w{}", sh.rt, sh.w), tiles_layer, us);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tiles_gemv_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
