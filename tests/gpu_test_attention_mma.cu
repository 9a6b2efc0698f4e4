// The tensor-core decode attention (kernels/attention_mma.cu) against attention computed in
// double precision over the same cache: every output within the bound its arithmetic allows,
// for blocks of 4 and of 12 warps, head sizes 32, 64, 96 and 128, 1 to 16 query heads a kv head, 1 to
// 70000 positions (one block, several, the token at pos in the last; fewer keys than a tile
// a warp; fewer active blocks than the grid's), one sequence and three (grid z), and every KV
// cache scheme; the qwen2 biases and qwen3 norms on a subset. attention() (attention.cu) is
// held to its own bound on the same fp16 inputs, which checks the reference and the test's
// layout. The row at pos a kernel writes is the new K and V stored as the scheme says.
//
// The inputs make the bound sensitive: even query heads are needles, a query along one key
// (the new token, the first position, the last cached one, a block's edge, a random one) that
// takes nearly all the weight, so a key lost, doubled or misplaced moves the output by about
// a whole V row; odd heads are soft (scores of std ~2.5 over many keys), which tests the
// online softmax and the merges of many blocks' partials.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "attention.cuh"
#include "attention_mma.cuh"
#include "decodebench/half.h"
#include "decodebench/kv_quant.h"
#include "decodebench/quant.h"
#include "gpu_common.cuh"
#include "parallel_fill.h"

using namespace db;
using namespace db::cuda;
using dbtest::DeviceBuffer;

namespace {

constexpr int kKvHeads = 2;
constexpr int64_t kCachePositions = 70016;  // rows a sequence's cache holds, the rope table's length
constexpr float kNormEps = 1e-6f;
constexpr double kU = 1.0 / 2048;          // fp16's unit roundoff, 2^-11
constexpr double kE32 = 1.0 / 16777216;    // fp32's, 2^-24
constexpr double kSub16 = 1.0 / 33554432;  // half of fp16's smallest subnormal, 2^-25
constexpr double kNeedleGain = 6;          // needle query = 6 x the key: a score gap of ~6 sqrt(hd)
constexpr double kSoftStd = 2.5;           // soft query entries: scores of std ~2.5

enum class Extra { none, bias, norm };  // llama; qwen2's q/k/v biases; qwen3's q/k norms
enum class Kernel { mma, current };

// splitmix64: the caches hold ~10^8 values. Its state advances by a constant a draw, so a
// thread can start where the n-th draw would (skip).
struct Rng {
  static constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;
  uint64_t s;
  Rng skip(uint64_t n) const { return Rng{s + n * kGamma}; }
  uint64_t next() {
    uint64_t z = (s += kGamma);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double unit() { return (2 * uniform() - 1) * std::sqrt(3.0); }  // mean 0, variance 1
};

// One vector of hd values stored as the scheme stores it: fp16 halves, or codes and a scale
// (kv_quant.h); `stored` gets the values a kernel reads back.
void store_vector(const double* x, int hd, KvScheme kv, unsigned char* dst, float* scale, float* stored) {
  if (kv == KvScheme::fp16) {
    for (int i = 0; i < hd; ++i) {
      const uint16_t h = f32_to_f16(static_cast<float>(x[i]));
      std::memcpy(dst + 2 * i, &h, 2);
      stored[i] = f16_to_f32(h);
    }
    return;
  }
  float amax = 0.f;
  for (int i = 0; i < hd; ++i) amax = std::max(amax, std::fabs(static_cast<float>(x[i])));
  *scale = kvq::scale_of(amax, kv);
  for (int i = 0; i < hd; ++i) {
    dst[i] = kvq::quantize(static_cast<float>(x[i]), *scale, kv);
    stored[i] = kvq::dequantize(dst[i], *scale, kv);
  }
}

// How far a stored value of the step's new K or V may lie from x, the exact value: half a
// quantization step of the scheme at x, plus what the kernel's fp32 norm and RoPE (~hd + 16
// roundings of terms up to the vector's largest magnitude) move x before it is stored.
double store_tolerance(double x, double vec_amax, float scale, KvScheme kv, int hd) {
  const double slack = (hd + 16) * kE32 * (std::fabs(x) + vec_amax);
  const double y = std::fabs(x) + slack;
  if (kv == KvScheme::fp16) {
    const double half_ulp = y >= 1.0 / 16384 ? std::ldexp(1.0, std::ilogb(y) - 11) : kSub16;
    return half_ulp + slack;
  }
  if (kv == KvScheme::int8) return 0.5 * scale + 2 * slack;
  const double z = y / scale;  // E4M3: 3 mantissa bits, normal from 2^-6, subnormal step 2^-9
  const double half_ulp = z >= 1.0 / 64 ? std::ldexp(1.0, std::ilogb(z) - 4) : 1.0 / 1024;
  return half_ulp * scale + 2 * slack;
}

// HF's rotate_half by the angle of table row `pos` (inverse: the rotation back).
void rotate(std::vector<double>& v, const std::vector<float>& rope, int64_t positions, int64_t pos, int hd,
            bool inverse) {
  const int h = hd / 2;
  for (int i = 0; i < h; ++i) {
    const double c = rope[pos * h + i], s = (inverse ? -1 : 1) * double(rope[(positions + pos) * h + i]);
    const double a = v[i], b = v[i + h];
    v[i] = a * c - b * s;
    v[i + h] = b * c + a * s;
  }
}

// Everything one group size runs on: the host's copies and the device buffers.
struct Setup {
  int hd, G, batch;
  KvScheme kv;
  Extra extra;
  int heads() const { return kKvHeads * G; }
  int64_t q_dim() const { return int64_t{heads()} * hd; }
  int64_t kv_dim() const { return int64_t{kKvHeads} * hd; }
  int64_t qkv_len() const { return q_dim() + 2 * kv_dim(); }
  uint64_t seq_bytes() const { return kvq::sequence_bytes(kv, kCachePositions, kKvHeads, hd); }
};

struct HostCache {
  std::vector<unsigned char> k, v;  // the device image: `batch` sequences of seq_bytes
  std::vector<float> kd, vd;        // the values stored, [batch][positions][kv_dim]
};

// Every position of every sequence: entries of variance 1, stored by the scheme. The draws go
// in the order (sequence, position, kv head, K then V, element), a range of rows a thread, each
// thread's generator skipped to its first row's draws: the values of one generator in that order.
HostCache make_cache(const Setup& s, Rng& rng) {
  HostCache c;
  const int64_t rows = int64_t{s.batch} * kCachePositions;
  c.k.assign(s.batch * s.seq_bytes(), 0);
  c.v.assign(s.batch * s.seq_bytes(), 0);
  c.kd.resize(rows * s.kv_dim());
  c.vd.resize(rows * s.kv_dim());
  const int eb = kvq::element_bytes(s.kv);
  const int64_t draws_a_row = int64_t{kKvHeads} * 2 * s.hd;
  dbtest::parallel_for(rows, [&](int64_t r0, int64_t r1) {
    Rng local = rng.skip(static_cast<uint64_t>(r0 * draws_a_row));
    std::vector<double> x(s.hd);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t z = r / kCachePositions, p = r % kCachePositions;
      for (int h = 0; h < kKvHeads; ++h)
        for (int kv = 0; kv < 2; ++kv) {
          for (double& e : x) e = local.unit();
          unsigned char* img = (kv == 0 ? c.k : c.v).data() + z * s.seq_bytes();
          float* scale = reinterpret_cast<float*>(img + kCachePositions * s.kv_dim()) + p * kKvHeads + h;
          float* stored = (kv == 0 ? c.kd : c.vd).data() + (r * s.kv_dim() + h * s.hd);
          store_vector(x.data(), s.hd, s.kv, img + (p * s.kv_dim() + h * s.hd) * eb, scale, stored);
        }
    }
  });
  rng = rng.skip(static_cast<uint64_t>(rows * draws_a_row));
  return c;
}

std::vector<float> make_rope(int hd) {
  const int h = hd / 2;
  std::vector<float> t(2 * kCachePositions * h);
  for (int64_t p = 0; p < kCachePositions; ++p)
    for (int i = 0; i < h; ++i) {
      const double a = p * std::pow(500000.0, -2.0 * i / hd);
      t[p * h + i] = static_cast<float>(std::cos(a));
      t[(kCachePositions + p) * h + i] = static_cast<float>(std::sin(a));
    }
  return t;
}

// The model side of a group: biases and norm weights (the test's, not a checkpoint's).
struct Model {
  std::vector<uint16_t> bias;            // [qkv_len] fp16, Extra::bias
  std::vector<uint16_t> q_norm, k_norm;  // [hd] fp16, Extra::norm: 2.5..3 (a needle stays sharp)
};

Model make_model(const Setup& s, Rng& rng) {
  Model m;
  if (s.extra == Extra::bias)
    for (int64_t i = 0; i < s.qkv_len(); ++i)
      m.bias.push_back(f32_to_f16(static_cast<float>(0.3 * rng.unit())));
  if (s.extra == Extra::norm)
    for (int i = 0; i < s.hd; ++i) {
      m.q_norm.push_back(f32_to_f16(static_cast<float>(2.5 + 0.5 * rng.uniform())));
      m.k_norm.push_back(f32_to_f16(static_cast<float>(0.5 + 0.5 * rng.uniform())));
    }
  return m;
}

// A head vector of qkv as the kernels take it: the bias added, the norm applied, rotated.
std::vector<double> head_vector(const Setup& s, const Model& m, const std::vector<float>& rope,
                                const float* qkv, int64_t off, const std::vector<uint16_t>& norm,
                                bool rotated, int64_t pos) {
  std::vector<double> v(s.hd);
  for (int i = 0; i < s.hd; ++i) v[i] = qkv[off + i] + (m.bias.empty() ? 0.0 : f16_to_f32(m.bias[off + i]));
  if (!norm.empty()) {
    double ss = 0;
    for (double e : v) ss += e * e;
    const double inv = 1 / std::sqrt(ss / s.hd + kNormEps);
    for (int i = 0; i < s.hd; ++i) v[i] *= inv * f16_to_f32(norm[i]);
  }
  if (rotated) rotate(v, rope, kCachePositions, pos, s.hd, false);
  return v;
}

// The bound on |kernel - exact| for one output element, from the reference's figures for
// its head: a score error of at most d (natural-log units) moves each normalized weight by a
// factor within e^{+-2d}, and since the weights sum to 1 the output moves by at most
// (e^{2d} - 1) sum_j w_j |v_j - o| (tight for a needle and for a flat softmax alike).
//   mma: the queries rounded to fp16 (2^-11 of sum_i |q_i k_i| / sqrt(hd)) and the fp32
//        dot, the max subtraction and exp2 (2^-24 each); P rounded to fp16 for P V while the
//        sum l adds P unrounded (each p's rounding error times |v_j|, over l); the 8-bit
//        schemes' V codes times their scale's fraction of the largest the warp has met, both in fp16
//        (2^-10 of |v|, and 2^-25 of the largest scale for a fraction in fp16's subnormals,
//        times a code of up to 448); the fp32 accumulations (the tensor core's and the
//        merges', ~4 roundings a tile of a warp, 1 a warp of the block and 2 a block); the
//        fp16 output.
//   current: fp32 queries and probabilities: only the fp32 terms and the fp16 output.
struct HeadFigures {
  double a_max = 0, s_range = 0;  // max_j sum_i |q_i k_ji| / sqrt(hd); max - min score
};

struct Reference {
  std::vector<double> o, bound;  // [batch][heads][hd]
};

Reference reference(const Setup& s, const Model& m, const std::vector<float>& rope,
                    const std::vector<float>& qkv, const HostCache& c, int64_t pos, Kernel kernel,
                    int grid_splits, int warps) {
  Reference r;
  const int64_t out_len = int64_t{s.batch} * s.q_dim();
  r.o.assign(out_len, 0);
  r.bound.assign(out_len, 0);
  const int64_t n = pos + 1;
  const bool codes = s.kv != KvScheme::fp16;
  double gamma = 0;  // the fp32 accumulations, relative to sum_j w_j |v_j|
  if (kernel == Kernel::mma) {
    const int active = attention_mma_active_splits(n, grid_splits, warps);
    const int64_t sweep = attention_mma_min_keys(warps);         // the keys of a tile for each warp
    const int64_t tiles = (n / active + 1 + sweep - 1) / sweep;  // a warp's tiles in the longest block
    gamma = (4 * tiles + 64 + warps + 2 * active) * kE32 * 2 + 8 * kE32 * 4;
  } else {
    gamma = (128 + attention_splits(n) + 64) * kE32 * 2 + 8 * kE32 * 4;
  }
  const auto one_head = [&](int z, int h) {
    const int kvh = h / s.G;
    const float* q_in = qkv.data() + z * s.qkv_len();
    const std::vector<double> q = head_vector(s, m, rope, q_in, int64_t{h} * s.hd, m.q_norm, true, pos);
    const double inv_sqrt = 1 / std::sqrt(double(s.hd));
    std::vector<double> sc(n);
    HeadFigures f;
    double smax = -INFINITY, smin = INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      const float* k = c.kd.data() + (z * kCachePositions + j) * s.kv_dim() + kvh * s.hd;
      double dot = 0, mag = 0;
      for (int i = 0; i < s.hd; ++i) {
        dot += q[i] * k[i];
        mag += std::fabs(q[i] * k[i]);
      }
      sc[j] = dot * inv_sqrt;
      f.a_max = std::max(f.a_max, mag * inv_sqrt);
      smax = std::max(smax, sc[j]);
      smin = std::min(smin, sc[j]);
    }
    f.s_range = smax - smin;
    double l = 0;
    for (double& e : sc) l += (e = std::exp(e - smax));  // sc now holds p_j
    std::vector<double> o(s.hd, 0), abs(s.hd, 0), dev(s.hd, 0), perr(s.hd, 0);
    double vmax = 0;
    for (int64_t j = 0; j < n; ++j) {
      const float* v = c.vd.data() + (z * kCachePositions + j) * s.kv_dim() + kvh * s.hd;
      const double w = sc[j] / l;
      const double pe = sc[j] >= 1.0 / 16384 ? kU * sc[j] : std::min(sc[j], kSub16);  // fp16(p) - p
      for (int i = 0; i < s.hd; ++i) {
        o[i] += w * v[i];
        abs[i] += w * std::fabs(v[i]);
        perr[i] += pe * std::fabs(v[i]);
        vmax = std::max(vmax, double(std::fabs(v[i])));
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      const float* v = c.vd.data() + (z * kCachePositions + j) * s.kv_dim() + kvh * s.hd;
      const double w = sc[j] / l;
      for (int i = 0; i < s.hd; ++i) dev[i] += w * std::fabs(v[i] - o[i]);
    }
    const double d = kernel == Kernel::mma ? (kU + (s.hd + 8) * kE32) * f.a_max + kE32 * f.s_range + 4 * kE32
                                           : (s.hd + 8) * kE32 * f.a_max + kE32 * f.s_range + 4 * kE32;
    for (int i = 0; i < s.hd; ++i) {
      double rest = std::expm1(2 * d) * dev[i] + gamma * abs[i];
      if (kernel == Kernel::mma)
        rest += perr[i] / l + (codes ? (2 * kU + 4 * kE32) * abs[i] + 2 * kE32 * vmax : 0.0);
      const int64_t idx = (int64_t{z} * s.heads() + h) * s.hd + i;
      r.o[idx] = o[i];
      r.bound[idx] = rest + kU * (std::fabs(o[i]) + rest) + kSub16;
    }
  };
  std::vector<std::thread> pool;
  const int threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  const int items = s.batch * s.heads();
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int it = t; it < items; it += threads) one_head(it / s.heads(), it % s.heads());
    });
  for (std::thread& th : pool) th.join();
  return r;
}

// The device side of a group size.
struct Device {
  DeviceBuffer<unsigned char> k, v;
  DeviceBuffer<float> qkv, rope, part_o, part_ml;
  DeviceBuffer<uint16_t> bias, q_norm, k_norm, out;
  DeviceBuffer<unsigned> counters;
  DeviceBuffer<int32_t> pos;
  int max_splits;
  Device(const Setup& s, const HostCache& c, const Model& m, const std::vector<float>& rope_table)
      : k(c.k),
        v(c.v),
        qkv(s.batch * s.qkv_len()),
        rope(rope_table),
        part_o(size_t{1} * s.batch * s.heads() * attention_splits(kCachePositions) * s.hd),
        part_ml(size_t{1} * s.batch * s.heads() * attention_splits(kCachePositions) * 2),
        bias(m.bias),
        q_norm(m.q_norm),
        k_norm(m.k_norm),
        out(s.batch * s.q_dim()),
        counters(s.batch * kKvHeads),
        pos(1),
        max_splits(attention_splits(kCachePositions)) {
    CUDA_CHECK(cudaMemset(counters.p, 0, counters.n * sizeof(unsigned)));
  }
  AttentionArgs args(const Setup& s, const Model& m) const {
    AttentionArgs a;
    a.qkv = qkv.p;
    a.qkv_bias = m.bias.empty() ? nullptr : reinterpret_cast<const __half*>(bias.p);
    a.q_norm = m.q_norm.empty() ? nullptr : reinterpret_cast<const __half*>(q_norm.p);
    a.k_norm = m.k_norm.empty() ? nullptr : reinterpret_cast<const __half*>(k_norm.p);
    a.eps = kNormEps;
    a.rope = rope.p;
    a.rope_positions = kCachePositions;
    a.k_cache = reinterpret_cast<__half*>(k.p);
    a.v_cache = reinterpret_cast<__half*>(v.p);
    a.pos = pos.p;
    a.heads = s.heads();
    a.kv_heads = kKvHeads;
    a.head_dim = s.hd;
    a.max_splits = max_splits;
    a.part_o = part_o.p;
    a.part_ml = part_ml.p;
    a.counters = counters.p;
    a.out = reinterpret_cast<__half*>(out.p);
    return a;
  }
};

// The rows at pos the kernel stored: within store_tolerance of the new K and V. The host's
// copies take the device's, its values and its image (the reference attends what the kernel
// attended, and the next group's device cache starts from the same rows).
void check_new_rows(const Setup& s, const Model& m, const std::vector<float>& rope,
                    const std::vector<float>& qkv, Device& d, HostCache& c, int64_t pos,
                    const std::string& what) {
  const int eb = kvq::element_bytes(s.kv);
  for (int z = 0; z < s.batch; ++z)
    for (int kv = 0; kv < 2; ++kv) {
      const DeviceBuffer<unsigned char>& img = kv == 0 ? d.k : d.v;
      std::vector<unsigned char> row(s.kv_dim() * eb);
      std::vector<float> scales(kKvHeads, 1.f);
      const uint64_t base = z * s.seq_bytes();
      CUDA_CHECK(
          cudaMemcpy(row.data(), img.p + base + pos * s.kv_dim() * eb, row.size(), cudaMemcpyDeviceToHost));
      const uint64_t scales_at = base + kCachePositions * s.kv_dim() + pos * kKvHeads * 4;
      if (s.kv != KvScheme::fp16)
        CUDA_CHECK(cudaMemcpy(scales.data(), img.p + scales_at, 4 * kKvHeads, cudaMemcpyDeviceToHost));
      std::vector<unsigned char>& host_img = kv == 0 ? c.k : c.v;
      std::memcpy(host_img.data() + base + pos * s.kv_dim() * eb, row.data(), row.size());
      if (s.kv != KvScheme::fp16) std::memcpy(host_img.data() + scales_at, scales.data(), 4 * kKvHeads);
      for (int h = 0; h < kKvHeads; ++h) {
        const int64_t off = s.q_dim() + kv * s.kv_dim() + h * s.hd;
        const std::vector<double> x = head_vector(s, m, rope, qkv.data() + z * s.qkv_len(), off,
                                                  kv == 0 ? m.k_norm : std::vector<uint16_t>{}, kv == 0, pos);
        double amax = 0;
        for (double e : x) amax = std::max(amax, std::fabs(e));
        float* stored = (kv == 0 ? c.kd : c.vd).data() + (z * kCachePositions + pos) * s.kv_dim() + h * s.hd;
        for (int i = 0; i < s.hd; ++i) {
          const int64_t e = h * s.hd + i;
          float got;
          if (s.kv == KvScheme::fp16) {
            uint16_t bits;
            std::memcpy(&bits, row.data() + 2 * e, 2);
            got = f16_to_f32(bits);
          } else {
            got = kvq::dequantize(row[e], scales[h], s.kv);
          }
          ASSERT_LE(std::fabs(got - x[i]), store_tolerance(x[i], amax, scales[h], s.kv, s.hd))
              << what << ": sequence " << z << (kv == 0 ? " K" : " V") << " head " << h << " element " << i;
          stored[i] = got;
        }
      }
    }
}

// The kernel's output against the reference, element by element.
void check_output(const Setup& s, const Device& d, const Reference& r, const std::string& what) {
  const std::vector<uint16_t> out = d.out.download();
  double worst = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double got = f16_to_f32(out[i]), err = std::fabs(got - r.o[i]);
    worst = std::max(worst, err / r.bound[i]);
    if (!(err <= r.bound[i]) && bad++ < 5) {
      const int64_t head = i / s.hd;
      ADD_FAILURE() << what << ": sequence " << head / s.heads() << " head " << head % s.heads()
                    << " element " << i % s.hd << ": " << got << " against " << r.o[i] << " (bound "
                    << r.bound[i] << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << out.size() << " outputs outside the bound";
  fmt::print("{}: largest error {:.3f} of its bound\n", what, worst);
}

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { CUDA_CHECK(cudaStreamCreate(&s)); }  // ordered after the uploads and memsets
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

// Whether this GPU runs blocks of `warps` warps for head size `hd` and `kv` (12 needs ~200 KB
// of shared memory a block): blocks of 4 run everywhere the kernel does.
bool warps_fit(int hd, KvScheme kv, int warps) {
  AttentionArgs a;
  a.heads = a.kv_heads = 1;
  a.head_dim = hd;
  a.max_splits = 1;
  return warps == 4 || attention_mma_warps(a, kv) == warps;
}

// One (head size, scheme, extras, warps a block) over batches, group sizes and positions.
// attention() runs beside the 4-warp kernel only: it does not depend on the warps.
void run_cases(int hd, KvScheme kv, Extra extra, int warps, const std::vector<int>& batches,
               const std::vector<int>& groups, std::vector<int64_t> positions) {
  // Longest first: a launch stores row pos, which the shorter cases after it never read.
  std::sort(positions.rbegin(), positions.rend());
  const std::vector<float> rope = make_rope(hd);
  const Stream stream;
  for (int batch : batches) {
    Rng rng{
        static_cast<uint64_t>(hd * 1000 + static_cast<int>(kv) * 100 + static_cast<int>(extra) * 10 + batch)};
    Setup s{hd, 1, batch, kv, extra};
    HostCache cache = make_cache(s, rng);
    for (int G : groups) {
      s.G = G;
      const Model m = make_model(s, rng);
      Device d(s, cache, m, rope);
      const AttentionArgs a = d.args(s, m);
      const int grid = attention_mma_splits(a, batch, kv, warps);
      for (int64_t positions_attended : positions) {
        const int64_t pos = positions_attended - 1;
        const std::string what = fmt::format("hd {} {} kv {} warps {} batch {} group {} positions {}", hd,
                                             extra == Extra::bias   ? "bias"
                                             : extra == Extra::norm ? "norm"
                                                                    : "plain",
                                             to_string(kv), warps, batch, G, positions_attended);
        // The step's qkv: the new token's K and V, then the queries (needles need the keys).
        std::vector<float> qkv(s.batch * s.qkv_len());
        for (int z = 0; z < batch; ++z) {
          float* row = qkv.data() + z * s.qkv_len();
          for (int64_t i = s.q_dim(); i < s.qkv_len(); ++i) row[i] = static_cast<float>(rng.unit());
          for (int h = 0; h < s.heads(); ++h) {
            std::vector<double> t(hd);
            if (h % 2 == 1) {
              for (double& e : t) e = kSoftStd * rng.unit();
            } else {
              const int64_t options[] = {
                  pos, 0, pos - 1, pos / 2, pos / 3 + 17, static_cast<int64_t>(rng.next() % (pos + 1))};
              const int64_t j = std::clamp<int64_t>(options[(h / 2 + z) % 6], 0, pos);
              const int kvh = h / G;
              std::vector<double> key(hd);
              if (j == pos) {
                key = head_vector(s, m, rope, row, s.q_dim() + kvh * hd, m.k_norm, true, pos);
              } else {
                const float* kd = cache.kd.data() + (z * kCachePositions + j) * s.kv_dim() + kvh * hd;
                for (int i = 0; i < hd; ++i) key[i] = kd[i];
              }
              for (int i = 0; i < hd; ++i) t[i] = kNeedleGain * key[i];
              rotate(t, rope, kCachePositions, pos, hd, true);  // the query before RoPE
            }
            for (int i = 0; i < hd; ++i) {
              const int64_t e = int64_t{h} * hd + i;
              row[e] = static_cast<float>(t[i] - (m.bias.empty() ? 0.0 : f16_to_f32(m.bias[e])));
            }
          }
        }
        d.qkv.upload(qkv);
        const int32_t p32 = static_cast<int32_t>(pos);
        CUDA_CHECK(cudaMemcpy(d.pos.p, &p32, 4, cudaMemcpyHostToDevice));
        const std::vector<Kernel> kernels =
            warps == 4 ? std::vector<Kernel>{Kernel::current, Kernel::mma} : std::vector<Kernel>{Kernel::mma};
        for (Kernel k : kernels) {
          const std::string name = what + (k == Kernel::mma ? " attention_mma" : " attention");
          d.out.poison();
          if (k == Kernel::mma)
            attention_mma(a, stream.s, batch, kv, 0, warps);
          else
            attention(a, stream.s, batch, kv);
          CUDA_CHECK(cudaStreamSynchronize(stream.s));
          check_new_rows(s, m, rope, qkv, d, cache, pos, name);
          if (::testing::Test::HasFatalFailure()) return;
          const Reference r = reference(s, m, rope, qkv, cache, pos, k, grid, warps);
          check_output(s, d, r, name);
          const std::vector<unsigned> counters = d.counters.download();
          EXPECT_EQ(*std::max_element(counters.begin(), counters.end()), 0u)
              << name << ": a counter left set";
        }
      }
    }
  }
}

struct MmaCase {
  int hd;
  KvScheme kv;
  int warps;
};

class AttentionMma : public ::testing::TestWithParam<MmaCase> {
 protected:
  void SetUp() override {
    REQUIRE_GPU();
    if (!warps_fit(GetParam().hd, GetParam().kv, GetParam().warps))
      GTEST_SKIP() << "blocks of " << GetParam().warps << " warps do not fit this GPU";
  }
};

TEST_P(AttentionMma, OutputsWithinTheArithmeticsBoundOfExactAttention) {
  run_cases(GetParam().hd, GetParam().kv, Extra::none, GetParam().warps, {1, 3}, {1, 4, 8, 16},
            {1, 64, 65, 127, 128, 129, 5000, 70000});
}

// Fewer keys than a tile a warp of a 12-warp block (192): with 12 warps one block, whose warps
// past the keys' tiles hold none and merge as empty partials; with 4, one or two blocks.
TEST_P(AttentionMma, FewerKeysThanATileAWarp) {
  run_cases(GetParam().hd, GetParam().kv, Extra::none, GetParam().warps, {1, 3}, {1, 16}, {100, 150, 191});
}

// Fewer active blocks than the grid's: about half the grid holds positions, the rest return at
// once, and the merge counts the active ones only.
TEST_P(AttentionMma, FewerActiveBlocksThanTheGrid) {
  const MmaCase& p = GetParam();
  AttentionArgs a;
  a.heads = 4 * kKvHeads;
  a.kv_heads = kKvHeads;
  a.head_dim = p.hd;
  a.max_splits = attention_splits(kCachePositions);
  const int grid = attention_mma_splits(a, 1, p.kv, p.warps);
  ASSERT_GE(grid, 4);
  const int64_t positions = int64_t{grid / 2} * attention_mma_min_keys(p.warps) + 7;
  const int active = attention_mma_active_splits(positions, grid, p.warps);
  ASSERT_GT(active, 1);
  ASSERT_LT(active, grid);
  run_cases(p.hd, p.kv, Extra::none, p.warps, {1}, {4}, {positions});
}

INSTANTIATE_TEST_SUITE_P(HeadSizesSchemesAndWarps, AttentionMma,
                         ::testing::Values(MmaCase{64, KvScheme::fp16, 4}, MmaCase{128, KvScheme::fp16, 4},
                                           MmaCase{64, KvScheme::fp8, 4}, MmaCase{128, KvScheme::fp8, 4},
                                           MmaCase{64, KvScheme::int8, 4}, MmaCase{128, KvScheme::int8, 4},
                                           MmaCase{64, KvScheme::fp16, 12}, MmaCase{128, KvScheme::fp16, 12},
                                           MmaCase{64, KvScheme::fp8, 12}, MmaCase{128, KvScheme::fp8, 12},
                                           MmaCase{64, KvScheme::int8, 12}, MmaCase{128, KvScheme::int8, 12},
                                           // head sizes whose rows a warp's copies cover in other
                                           // shapes (a row of 2, 4, 6 or 12 pieces of 16 bytes)
                                           MmaCase{32, KvScheme::fp16, 12}, MmaCase{96, KvScheme::fp16, 12},
                                           MmaCase{32, KvScheme::fp8, 12}, MmaCase{96, KvScheme::fp8, 12},
                                           MmaCase{32, KvScheme::int8, 4}, MmaCase{96, KvScheme::int8, 4}),
                         [](const auto& info) {
                           return fmt::format("hd{}_{}_w{}", info.param.hd, to_string(info.param.kv),
                                              info.param.warps);
                         });

class AttentionMmaQwen : public ::testing::TestWithParam<int> {};

TEST_P(AttentionMmaQwen, Qwen2BiasesAndQwen3NormsAreApplied) {
  REQUIRE_GPU();
  const int warps = GetParam();
  for (Extra e : {Extra::bias, Extra::norm})
    for (KvScheme kv : {KvScheme::fp16, KvScheme::int8}) {
      if (warps_fit(128, kv, warps)) run_cases(128, kv, e, warps, {1, 3}, {4, 16}, {1, 129, 5000});
      if (warps_fit(64, kv, warps)) run_cases(64, kv, e, warps, {1}, {8}, {129, 5000});
    }
}

INSTANTIATE_TEST_SUITE_P(Warps, AttentionMmaQwen, ::testing::Values(4, 12),
                         [](const auto& info) { return fmt::format("w{}", info.param); });

// The default launch is the plan's choice of warps for this GPU, and its grid is the one
// attention_mma_splits() gives for those warps.
TEST(AttentionMmaWarps, TheDefaultIsTheChoiceForThisGpu) {
  REQUIRE_GPU();
  for (int hd : {32, 64, 96, 128})
    for (KvScheme kv : {KvScheme::fp16, KvScheme::fp8, KvScheme::int8}) {
      AttentionArgs a;
      a.heads = 32;
      a.kv_heads = 8;
      a.head_dim = hd;
      a.max_splits = attention_splits(131072);
      const int warps = attention_mma_warps(a, kv);
      EXPECT_TRUE(warps == 4 || warps == 12) << warps;
      EXPECT_EQ(attention_mma_splits(a, 1, kv), attention_mma_splits(a, 1, kv, warps)) << hd;
      EXPECT_EQ(attention_mma_splits(a, 3, kv), attention_mma_splits(a, 3, kv, warps)) << hd;
      if (warps == 4) EXPECT_THROW(attention_mma_splits(a, 1, kv, 12), db::Error) << hd;
    }
}

TEST(AttentionMmaExtras, RefusesAShapeItDoesNotTake) {
  REQUIRE_GPU();
  AttentionArgs a;
  a.heads = 6;
  a.kv_heads = 2;
  a.head_dim = 80;
  a.max_splits = 1;
  EXPECT_FALSE(attention_mma_takes(80, 6, 2));
  EXPECT_THROW(attention_mma(a, nullptr, 1, KvScheme::fp16), db::Error);
  a.head_dim = 64;
  a.heads = 34;  // 17 query heads a kv head
  EXPECT_THROW(attention_mma(a, nullptr, 1, KvScheme::fp16), db::Error);
  a.heads = 8;
  for (int warps : {1, 8, 16, -4})
    EXPECT_THROW(attention_mma_splits(a, 1, KvScheme::fp16, warps), db::Error) << warps;
}

}  // namespace
