// The KV cache's schemes on the GPU (--kv-cache fp16, fp8, int8; decodebench/kv_quant.h).
// First the decode attention kernels alone, against attention computed in double from the
// cache they read and write: every kernel (the fast one, the plain one and its merge, the
// wide merge, the batched grid), the presets' head shapes and odd ones, a context of one
// split, of several, and of more than 64 (the wide merge), at batch 1 and 3. Then the engine
// against the CPU reference, which quantizes as the GPU does, graph and eager, steps and the
// prefill.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attention.cuh"
#include "decodebench/cpu_reference.h"
#include "decodebench/half.h"
#include "decodebench/kv_quant.h"
#include "decodebench/quant.h"
#include "decodebench/rope.h"
#include "engine.cuh"
#include "gpu_common.cuh"
#include "gpu_engine_trace.cuh"

using namespace db;
using namespace db::cuda;
using dbtest::DeviceBuffer;
using dbtest::tiny;
using dbtest::Trace;

namespace {

constexpr KvScheme kSchemes[] = {KvScheme::fp16, KvScheme::fp8, KvScheme::int8};

// ------------------------------------------------------------------ the kernels alone

// One sequence's cache of one layer on the host, in the device's layout: the bytes the
// kernels read, and the value each element stands for.
struct HostCache {
  KvScheme kv;
  int64_t positions, kv_heads, hd, batch;
  std::vector<uint8_t> bytes;  // [batch] sequences of kvq::sequence_bytes

  HostCache(KvScheme s, int64_t p, int64_t kvh, int64_t d, int64_t b)
      : kv(s), positions(p), kv_heads(kvh), hd(d), batch(b), bytes(static_cast<size_t>(b * stride()), 0xff) {}
  int64_t stride() const { return static_cast<int64_t>(kvq::sequence_bytes(kv, positions, kv_heads, hd)); }
  int64_t kv_dim() const { return kv_heads * hd; }
  uint8_t* seq(int64_t z) { return bytes.data() + z * stride(); }
  const uint8_t* seq(int64_t z) const { return bytes.data() + z * stride(); }
  float scale(int64_t z, int64_t t, int64_t h) const {
    float s;
    std::memcpy(&s, seq(z) + positions * kv_dim() + 4 * (t * kv_heads + h), 4);
    return s;
  }
  uint8_t code(int64_t z, int64_t t, int64_t h, int64_t i) const { return seq(z)[t * kv_dim() + h * hd + i]; }
  float value(int64_t z, int64_t t, int64_t h, int64_t i) const {
    if (kv == KvScheme::fp16) {
      uint16_t u;
      std::memcpy(&u, seq(z) + 2 * (t * kv_dim() + h * hd + i), 2);
      return f16_to_f32(u);
    }
    return kvq::dequantize(code(z, t, h, i), scale(z, t, h), kv);
  }
  // Stores v (hd values) as the scheme does (the CPU reference's store, kv_quant.h).
  void set(int64_t z, int64_t t, int64_t h, const float* v) {
    if (kv == KvScheme::fp16) {
      for (int64_t i = 0; i < hd; ++i) {
        const uint16_t u = f32_to_f16(v[i]);
        std::memcpy(seq(z) + 2 * (t * kv_dim() + h * hd + i), &u, 2);
      }
      return;
    }
    float amax = 0.f;
    for (int64_t i = 0; i < hd; ++i) amax = std::fmax(amax, std::fabs(v[i]));
    const float s = kvq::scale_of(amax, kv);
    for (int64_t i = 0; i < hd; ++i) seq(z)[t * kv_dim() + h * hd + i] = kvq::quantize(v[i], s, kv);
    std::memcpy(seq(z) + positions * kv_dim() + 4 * (t * kv_heads + h), &s, 4);
  }
  // Whether row t (its elements and scales) of sequence z is byte for byte `o`'s.
  bool same_row(const HostCache& o, int64_t z, int64_t t) const {
    const int64_t e = kvq::element_bytes(kv);
    if (std::memcmp(seq(z) + e * t * kv_dim(), o.seq(z) + e * t * kv_dim(), e * kv_dim()) != 0) return false;
    if (kv == KvScheme::fp16) return true;
    return std::memcmp(seq(z) + positions * kv_dim() + 4 * t * kv_heads,
                       o.seq(z) + positions * kv_dim() + 4 * t * kv_heads, 4 * kv_heads) == 0;
  }
};

struct Shape {
  Arch arch;
  int hd, heads, kv_heads;
};
struct Context {
  int64_t positions, pos;  // the cache's rows, and the position attended from
};
struct KernelCase {
  KvScheme kv;
  Shape shape;
  Context context;
  int batch;
};

// The largest distance of `got`'s code from the nearest code to y = x / scale, in units of
// y: 0 where the GPU chose the nearest code, and only a near tie (float against double
// arithmetic before it) may make it positive.
double code_excess(uint8_t got, double x, float scale, KvScheme kv) {
  const double y = x / scale;
  const uint8_t nearest = kvq::quantize(static_cast<float>(x), scale, kv);
  const double value_got = kvq::dequantize(got, 1.f, kv), value_near = kvq::dequantize(nearest, 1.f, kv);
  return std::fabs(value_got - y) - std::fabs(value_near - y);
}

// What the kernel computes, in double: the queries and the new K and V of sequence z from
// its QKV output (bias, qwen3's norms, RoPE from the device's own table), then attention over
// the cache as the kernel left it (the new row included, as written).
struct Reference {
  std::vector<double> q;         // [heads, hd], times 1/sqrt(hd)
  std::vector<double> k_new, v;  // [kv_heads, hd]
};

Reference reference_vectors(const KernelCase& p, const std::vector<float>& qkv,
                            const std::vector<uint16_t>& bias, const std::vector<uint16_t>& q_norm,
                            const std::vector<uint16_t>& k_norm, const std::vector<float>& rope, float eps,
                            int64_t z) {
  const Shape& sh = p.shape;
  const int64_t hd = sh.hd, q_dim = int64_t{sh.heads} * hd, kv_dim = int64_t{sh.kv_heads} * hd,
                width = q_dim + 2 * kv_dim, half = hd / 2, pos = p.context.pos;
  const float* cosp = rope.data() + pos * half;
  const float* sinp = rope.data() + (p.context.positions + pos) * half;
  auto input = [&](int64_t i) {
    return double{qkv[z * width + i]} + (bias.empty() ? 0.0 : double{f16_to_f32(bias[i])});
  };
  auto norm_rope = [&](int64_t base, const std::vector<uint16_t>& w) {
    std::vector<double> x(hd), out(hd);
    for (int64_t i = 0; i < hd; ++i) x[i] = input(base + i);
    if (!w.empty()) {
      double ss = 0;
      for (double e : x) ss += e * e;
      const double inv = 1.0 / std::sqrt(ss / hd + eps);
      for (int64_t i = 0; i < hd; ++i) x[i] *= inv * f16_to_f32(w[i]);
    }
    for (int64_t i = 0; i < half; ++i) {
      out[i] = x[i] * cosp[i] - x[i + half] * sinp[i];
      out[i + half] = x[i + half] * cosp[i] + x[i] * sinp[i];
    }
    return out;
  };
  Reference r;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (int64_t h = 0; h < sh.heads; ++h)
    for (double e : norm_rope(h * hd, q_norm)) r.q.push_back(e * scale);
  for (int64_t h = 0; h < sh.kv_heads; ++h) {
    for (double e : norm_rope(q_dim + h * hd, k_norm)) r.k_new.push_back(e);
    for (int64_t i = 0; i < hd; ++i) r.v.push_back(input(q_dim + kv_dim + h * hd + i));
  }
  return r;
}

class KvAttention : public ::testing::TestWithParam<KernelCase> {};

// The kernels' output against attention in double over the values of the cache they read;
// the new token's K and V written as the scheme quantizes them (each code the nearest to its
// value but at a float-against-double tie); every other row of the cache untouched.
TEST_P(KvAttention, MatchesDoublePrecisionOverTheCacheItReads) {
  REQUIRE_GPU();
  const KernelCase p = GetParam();
  const Shape& sh = p.shape;
  const int64_t hd = sh.hd, P = p.context.positions, pos = p.context.pos, B = p.batch;
  const int64_t q_dim = int64_t{sh.heads} * hd, kv_dim = int64_t{sh.kv_heads} * hd,
                width = q_dim + 2 * kv_dim;
  const int G = sh.heads / sh.kv_heads;
  const float eps = 1e-6f;
  const std::string what =
      fmt::format("{} {} hd {} heads {}/{} positions {} pos {} batch {}", to_string(p.kv), to_string(sh.arch),
                  hd, sh.heads, sh.kv_heads, P, pos, B);

  // Inputs: the QKV outputs of every sequence, the model's bias or norms, and a cache whose
  // rows below pos hold vectors of magnitudes 2^-2 .. 2^1 (some all zero: scale 1), the rows
  // from pos on 0xff (NaN in fp16 and fp8 codes, NaN scales): a read past pos shows.
  std::mt19937 rng(static_cast<unsigned>(hd * 131 + sh.heads * 7 + P + pos + B));
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ud(-2.f, 1.f), wd(0.5f, 1.5f);
  std::vector<float> qkv(static_cast<size_t>(B * width));
  for (float& x : qkv) x = nd(rng);
  std::vector<uint16_t> bias, q_norm, k_norm;
  if (sh.arch == Arch::qwen2)
    for (int64_t i = 0; i < width; ++i) bias.push_back(f32_to_f16(0.5f * nd(rng)));
  if (sh.arch == Arch::qwen3)
    for (int64_t i = 0; i < hd; ++i) {
      q_norm.push_back(f32_to_f16(wd(rng)));
      k_norm.push_back(f32_to_f16(wd(rng)));
    }
  ModelConfig rc = tiny(Scheme::fp16);
  rc.head_dim = hd;
  const std::vector<float> rope = rope_table(rc, P);
  // The positions a kernel could drop at a boundary (the first, the splits' first and last,
  // the last cached one, the new one) score alike with the first query head of each group,
  // above the random ones (their scores' spread is at most 2): at 9000 positions each still
  // weighs a few percent of the whole, so that one missed moves the output by far more than
  // the bound. The new token's K takes its query's direction before RoPE, so after it too:
  // k = a q (llama, qwen2: scoring 8, as the cached ones), or the q-normed query over
  // k_norm's weights, which k_norm turns back into q's direction (qwen3: scoring about
  // sqrt(head_dim), 9.8 to 16 here, and the cached ones as much).
  constexpr double kPlanted = 8;
  std::vector<double> planted_score;  // [B, kv_heads]
  std::vector<Reference> refs;
  for (int64_t z = 0; z < B; ++z) {
    Reference r = reference_vectors(p, qkv, bias, q_norm, k_norm, rope, eps, z);
    if (sh.arch == Arch::qwen3)
      for (int64_t h = 0; h < sh.kv_heads; ++h) {
        const float* x = &qkv[z * width + h * G * hd];
        double ss = 0;
        for (int64_t i = 0; i < hd; ++i) ss += double{x[i]} * x[i];
        const double inv = 1.0 / std::sqrt(ss / hd + eps);
        for (int64_t i = 0; i < hd; ++i)
          qkv[z * width + q_dim + h * hd + i] =
              static_cast<float>(x[i] * inv * f16_to_f32(q_norm[i]) / f16_to_f32(k_norm[i]));
      }
    else
      for (int64_t h = 0; h < sh.kv_heads; ++h) {
        const int64_t h0 = h * G;
        double qq = 0;
        for (int64_t i = 0; i < hd; ++i) qq += r.q[h0 * hd + i] * r.q[h0 * hd + i];
        const double a = kPlanted / (std::sqrt(static_cast<double>(hd)) * qq);
        for (int64_t i = 0; i < hd; ++i) {
          const double bq = bias.empty() ? 0 : f16_to_f32(bias[h0 * hd + i]);
          const double bk = bias.empty() ? 0 : f16_to_f32(bias[q_dim + h * hd + i]);
          qkv[z * width + q_dim + h * hd + i] =
              static_cast<float>(a * (qkv[z * width + h0 * hd + i] + bq) - bk);
        }
      }
    refs.push_back(reference_vectors(p, qkv, bias, q_norm, k_norm, rope, eps, z));
    for (int64_t h = 0; h < sh.kv_heads; ++h) {
      double s_new = 0;
      for (int64_t i = 0; i < hd; ++i) s_new += refs.back().q[h * G * hd + i] * refs.back().k_new[h * hd + i];
      planted_score.push_back(std::max(kPlanted, s_new));
    }
  }
  const int64_t planted[] = {0, 1, 127, 128, 129, 255, 256, 8191, 8192, 8960, pos - 1};
  HostCache k(p.kv, P, sh.kv_heads, hd, B), v(p.kv, P, sh.kv_heads, hd, B);
  std::vector<float> vec(static_cast<size_t>(hd));
  for (int64_t z = 0; z < B; ++z)
    for (int64_t t = 0; t < pos; ++t)
      for (int64_t h = 0; h < sh.kv_heads; ++h)
        for (HostCache* c : {&k, &v}) {
          const float m = std::exp2(ud(rng));
          const bool zero = (t * 7 + h + z) % 97 == 5;
          for (float& x : vec) x = zero ? 0.f : m * nd(rng);
          if (c == &k && std::find(std::begin(planted), std::end(planted), t) != std::end(planted)) {
            const double* q = refs[z].q.data() + h * G * hd;
            double qq = 0;
            for (int64_t i = 0; i < hd; ++i) qq += q[i] * q[i];
            const double score = planted_score[z * sh.kv_heads + h];
            for (int64_t i = 0; i < hd; ++i) vec[i] = static_cast<float>(score / qq * q[i]);
          }
          c->set(z, t, h, vec.data());
        }

  const int splits = attention_splits(P);
  DeviceBuffer<float> d_qkv(qkv), d_rope(rope), part_o(static_cast<size_t>(B * sh.heads * splits * hd)),
      part_ml(static_cast<size_t>(B * sh.heads * splits * 2));
  DeviceBuffer<uint16_t> d_bias(bias), d_qn(q_norm), d_kn(k_norm), out(static_cast<size_t>(B * q_dim));
  DeviceBuffer<uint8_t> d_k(k.bytes), d_v(v.bytes);
  DeviceBuffer<int32_t> d_pos(std::vector<int32_t>{static_cast<int32_t>(pos)});
  DeviceBuffer<unsigned> counters(std::vector<unsigned>(static_cast<size_t>(B * sh.kv_heads), 0u));
  out.poison();
  AttentionArgs a;
  a.qkv = d_qkv.p;
  a.qkv_bias = bias.empty() ? nullptr : reinterpret_cast<const __half*>(d_bias.p);
  a.q_norm = q_norm.empty() ? nullptr : reinterpret_cast<const __half*>(d_qn.p);
  a.k_norm = k_norm.empty() ? nullptr : reinterpret_cast<const __half*>(d_kn.p);
  a.eps = eps;
  a.rope = d_rope.p;
  a.rope_positions = P;
  a.k_cache = reinterpret_cast<__half*>(d_k.p);
  a.v_cache = reinterpret_cast<__half*>(d_v.p);
  a.pos = d_pos.p;
  a.heads = sh.heads;
  a.kv_heads = sh.kv_heads;
  a.head_dim = sh.hd;
  a.max_splits = splits;
  a.part_o = part_o.p;
  a.part_ml = part_ml.p;
  a.counters = counters.p;
  a.out = reinterpret_cast<__half*>(out.p);
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  attention(a, stream, static_cast<int>(B), p.kv);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamDestroy(stream));
  HostCache k_got = k, v_got = v;
  k_got.bytes = d_k.download();
  v_got.bytes = d_v.download();
  const std::vector<uint16_t> o = out.download();
  EXPECT_EQ(counters.download(), std::vector<unsigned>(static_cast<size_t>(B * sh.kv_heads), 0u)) << what;

  int failures = 0;
  auto fail_once = [&](const std::string& msg) {
    if (failures++ < 8) ADD_FAILURE() << what << ": " << msg;
  };
  const double u = std::ldexp(1.0, -24);
  for (int64_t z = 0; z < B; ++z) {
    // The rows the kernel must leave alone.
    for (int64_t t = 0; t < P; ++t)
      if (t != pos && (!k_got.same_row(k, z, t) || !v_got.same_row(v, z, t)))
        fail_once(fmt::format("sequence {} row {} of the cache changed", z, t));
    // The new row: the scheme's store of the K and V the reference computes.
    const Reference& r = refs[z];
    for (int64_t h = 0; h < sh.kv_heads; ++h)
      for (int which = 0; which < 2; ++which) {
        const HostCache& c = which == 0 ? k_got : v_got;
        const double* x = (which == 0 ? r.k_new.data() : r.v.data()) + h * hd;
        double amax = 0;
        for (int64_t i = 0; i < hd; ++i) amax = std::max(amax, std::fabs(x[i]));
        const char* name = which == 0 ? "K" : "V";
        if (p.kv == KvScheme::fp16) {
          // fp16(x) of the float x: within half an fp16 ulp of x, plus the float arithmetic.
          for (int64_t i = 0; i < hd; ++i) {
            const double got = c.value(z, pos, h, i);
            if (!(std::fabs(got - x[i]) <=
                  std::ldexp(std::fabs(x[i]), -11) + std::ldexp(1.0, -25) + 1e-5 * amax))
              fail_once(fmt::format("sequence {} new {} head {} [{}]: {} for {}", z, name, h, i, got, x[i]));
          }
          continue;
        }
        // The scale from the float vector's amax, within the float arithmetic of the double one's;
        // each code the nearest to x / scale, or off by one at a tie within that arithmetic.
        const float s = c.scale(z, pos, h), want = kvq::scale_of(static_cast<float>(amax), p.kv);
        if (!(std::fabs(s - want) <= 1e-5 * want))
          fail_once(fmt::format("sequence {} new {} head {}: scale {} for {}", z, name, h, s, want));
        for (int64_t i = 0; i < hd; ++i) {
          const double excess = code_excess(c.code(z, pos, h, i), x[i], s, p.kv);
          if (!(excess <= 1e-4 * (std::fabs(x[i] / s) + 1)))
            fail_once(fmt::format("sequence {} new {} head {} [{}]: code {:#x} for {} (scale {})", z, name, h,
                                  i, c.code(z, pos, h, i), x[i] / s, s));
        }
      }
    // Attention over the cache as it now is. The kernel against this, in float:
    //  - q is a few float operations from the inputs (norm, RoPE, 1/sqrt(hd)) and a score a
    //    float dot product of hd terms (fp8, int8: then times the row's scale), so a score is
    //    off by at most (hd + 16) u sum_i |q_i K'_ti| (u = 2^-24);
    //  - a softmax weight exp(s_t - m) takes that error from its argument, twice (s_t, m),
    //    and (4 + |s_t - m|) u from expf and the subtraction; the merge's exp(m_s - M) as
    //    much again: relative 2 D, D the largest of those over the positions; numerator and
    //    denominator both: 4 D;
    //  - P V and the sums of the weights: float sums of at most 128 terms in a split, then
    //    over the splits, each term rounded once more (fp8, int8: the V scale times the
    //    weight): (2 (128 + splits) + 8) u of sum_t p_t |V'_t| <= max |V'|;
    //  - the output rounded to fp16: 2^-11 |o| <= 2^-11 max |V'|.
    // So |o - o_ref| <= max |V'| (2^-11 + 4 D + (2 (128 + splits) + 8) u), element by element.
    const int64_t n = pos + 1;
    std::vector<float> kd(static_cast<size_t>(n * kv_dim)), vd(static_cast<size_t>(n * kv_dim));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < sh.kv_heads; ++h)
        for (int64_t i = 0; i < hd; ++i) {
          kd[t * kv_dim + h * hd + i] = k_got.value(z, t, h, i);
          vd[t * kv_dim + h * hd + i] = v_got.value(z, t, h, i);
        }
    std::vector<double> s(static_cast<size_t>(n)), mag(static_cast<size_t>(n)), acc(static_cast<size_t>(hd));
    for (int64_t h = 0; h < sh.heads; ++h) {
      const int64_t kvh = h / G;
      const double* q = r.q.data() + h * hd;
      double m = -INFINITY, vmax = 0;
      for (int64_t t = 0; t < n; ++t) {
        const float* kt = &kd[t * kv_dim + kvh * hd];
        const float* vt = &vd[t * kv_dim + kvh * hd];
        double d = 0, dm = 0;
        for (int64_t i = 0; i < hd; ++i) {
          d += q[i] * kt[i];
          dm += std::fabs(q[i] * kt[i]);
          vmax = std::max(vmax, double{std::fabs(vt[i])});
        }
        s[t] = d;
        mag[t] = dm;
        m = std::max(m, d);
      }
      double D = 0, l = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t t = 0; t < n; ++t) {
        D = std::max(D, (2 * (hd + 16) * mag[t] + 4 + std::fabs(s[t] - m)) * u);
        const double w = std::exp(s[t] - m);
        const float* vt = &vd[t * kv_dim + kvh * hd];
        l += w;
        for (int64_t i = 0; i < hd; ++i) acc[i] += w * vt[i];
      }
      const double bound = vmax * (std::ldexp(1.0, -11) + 4 * D + (2.0 * (128 + splits) + 8) * u);
      for (int64_t i = 0; i < hd; ++i) {
        const double want = acc[i] / l, got = f16_to_f32(o[z * q_dim + h * hd + i]);
        if (!(std::fabs(got - want) <= bound))
          fail_once(
              fmt::format("sequence {} head {} [{}]: {} for {} (bound {:.3g})", z, h, i, got, want, bound));
      }
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

std::vector<KernelCase> kernel_cases() {
  // The presets' shapes (tiny, 1b, 4b and 8b, 70b, qwen2 0.5b, 1.5b and 7b) and odd ones of
  // either kernel: the fast one takes head_dim 32, 64, 96, 128 with up to 8 query heads per kv
  // head, the plain one every other multiple of 8 up to 256 and any group.
  const Shape shapes[] = {
      {Arch::llama, 32, 4, 2},   {Arch::llama, 64, 32, 8}, {Arch::qwen3, 128, 32, 8},
      {Arch::llama, 128, 64, 8}, {Arch::qwen2, 64, 14, 2}, {Arch::qwen2, 128, 12, 2},
      {Arch::qwen2, 128, 28, 4}, {Arch::llama, 96, 4, 1},  {Arch::qwen3, 96, 6, 2},
      {Arch::llama, 24, 4, 2},   {Arch::llama, 80, 6, 2},  {Arch::qwen2, 80, 6, 2},
      {Arch::llama, 160, 2, 2},  {Arch::qwen3, 256, 4, 2}, {Arch::llama, 64, 16, 1},
      {Arch::llama, 8, 4, 4},
  };
  // One split; several (the last block's merge, or the plain kernel's merge kernel); a cache
  // of more than 64 splits at a short position (the wide instantiation) and at a long one
  // (the wide merge over 71 splits).
  const Context contexts[] = {{64, 37}, {400, 300}, {9000, 100}, {9100, 9000}};
  std::vector<KernelCase> v;
  for (KvScheme kv : kSchemes)
    for (const Shape& sh : shapes)
      for (const Context& c : contexts)
        for (int batch : {1, 3}) v.push_back({kv, sh, c, batch});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Kernels, KvAttention, ::testing::ValuesIn(kernel_cases()), [](const auto& info) {
  const KernelCase& p = info.param;
  return fmt::format("{}_{}_hd{}_h{}_kv{}_p{}_pos{}_b{}", to_string(p.kv), to_string(p.shape.arch),
                     p.shape.hd, p.shape.heads, p.shape.kv_heads, p.context.positions, p.context.pos,
                     p.batch);
});

// ------------------------------------------------------------------ the engine

// Each sequence's prompt token i (decoder.h).
std::vector<int32_t> tokens_at(int64_t batch, int64_t i, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(batch));
  for (int64_t s = 0; s < batch; ++s) t[static_cast<size_t>(s)] = prompt_token(s, i, vocab);
  return t;
}

// The reference of B sequences: `context` prompt tokens, then `steps` steps fed `inputs`
// ([step][sequence]), or, where `inputs` is empty, fed prompt token `context` then its own
// greedy tokens. One trace a sequence: the logits and argmax of every step.
std::vector<Trace> cpu_run(const WeightSource& ws, int64_t batch, int64_t context, int64_t steps,
                           const std::vector<std::vector<int32_t>>& inputs = {}) {
  const int64_t vocab = ws.config().vocab_size;
  CpuModel m(ws, context + steps, 0, batch);
  for (int64_t i = 0; i < context; ++i) m.step_batch(tokens_at(batch, i, vocab), i);
  std::vector<int32_t> in = tokens_at(batch, context, vocab);
  std::vector<Trace> t(static_cast<size_t>(batch));
  for (int64_t i = 0; i < steps; ++i) {
    if (!inputs.empty()) in = inputs[static_cast<size_t>(i)];
    m.step_batch(in, context + i);
    for (int64_t s = 0; s < batch; ++s) {
      Trace& ts = t[static_cast<size_t>(s)];
      ts.logits.push_back(m.logits(s));
      ts.tokens.push_back(CpuModel::argmax(ts.logits.back()));
      in[static_cast<size_t>(s)] = ts.tokens.back();
    }
  }
  return t;
}

// The inputs of the steps the reference ran free: prompt token `context`, then its tokens.
std::vector<std::vector<int32_t>> inputs_of(const std::vector<Trace>& ref, int64_t context, int64_t vocab) {
  std::vector<std::vector<int32_t>> in = {tokens_at(static_cast<int64_t>(ref.size()), context, vocab)};
  for (size_t i = 0; i + 1 < ref[0].tokens.size(); ++i) {
    std::vector<int32_t> step;
    for (const Trace& t : ref) step.push_back(t.tokens[i]);
    in.push_back(step);
  }
  return in;
}

// The engine's logits fed the same inputs ([sequence][step]): its context by the batched
// prefill (a sequence at a time) or by eager steps, then a step an input, by graph replay or
// eagerly.
std::vector<std::vector<std::vector<float>>> engine_run(Engine& e, int64_t context,
                                                        const std::vector<std::vector<int32_t>>& inputs,
                                                        bool prefill, bool graph) {
  const int64_t vocab = e.config().vocab_size, B = e.batch();
  e.set_first_position(0);
  if (prefill) {
    for (int64_t s = 0; s < B; ++s) {
      std::vector<int32_t> p;
      for (int64_t i = 0; i < context; ++i) p.push_back(prompt_token(s, i, vocab));
      // Chunks of 64 rows (4096 for a long context): a chunk's attention reads the earlier
      // chunks' rows from the cache.
      e.prefill(p, context > 1000 ? 0 : 64, s);
    }
  } else {
    for (int64_t i = 0; i < context; ++i) {
      e.set_inputs(i, tokens_at(B, i, vocab));
      e.enqueue_step();
    }
  }
  e.set_first_position(context);
  std::vector<std::vector<std::vector<float>>> out(static_cast<size_t>(B));
  for (size_t i = 0; i < inputs.size(); ++i) {
    e.set_inputs(context + static_cast<int64_t>(i), inputs[i]);
    if (graph)
      e.launch_graph();
    else
      e.enqueue_step();
    for (int64_t s = 0; s < B; ++s) out[static_cast<size_t>(s)].push_back(e.logits(s));
  }
  return out;
}

// The bound of the engine against the reference under a quantized cache. Both quantize the
// same K and V vectors, computed in different arithmetic (within the engine's bound,
// kLogitsBound): a value near the midpoint of two codes may get the other one, moved by one
// step where the reference's rounding moved it by at most half a step. The reference's own
// logits with the scheme differ from its logits with an fp16 cache by e_q, the effect of
// rounding every element of every cached vector; to first order the logits are linear in
// the cache's values, and the codes that differ are a few elements moved at most twice as far,
// in either direction: their effect stays within 2 e_q. This is not a worst case (every code
// one step off would be, and far looser): it holds the engine to the scheme's own precision.
double quantized_bound(double e_q) {
  return dbtest::kLogitsBound + 2 * e_q;
}

// Logits within `bound` step by step, and the same argmax except where the reference's top
// two are within the bound (a tie at this precision).
void expect_logits(const std::vector<std::vector<float>>& gpu, const Trace& ref, double bound,
                   const std::string& what) {
  ASSERT_EQ(gpu.size(), ref.logits.size()) << what;
  for (size_t i = 0; i < ref.logits.size(); ++i) {
    const std::vector<float>& r = ref.logits[i];
    ASSERT_LE(db_test::max_rel_err(gpu[i], r), bound) << what << " step " << i;
    const int32_t want = CpuModel::argmax(r), got = CpuModel::argmax(gpu[i]);
    if (got == want) continue;
    double mx = 0;
    for (float x : r) mx = std::max(mx, double{std::fabs(x)});
    EXPECT_LE(r[want] - r[got], 2 * bound * mx)
        << what << " step " << i << ": argmax " << got << " for " << want;
  }
}

// Every (position, kv head) vector of sequence s's K and V caches in layer l, positions
// below `n`, as the scheme stores one: its largest code stands for the largest value (448 or
// 127: the scale is amax over it), or every code is 0 under scale 1 (an all-zero vector).
void expect_quantized_vectors(const Engine& e, int64_t l, int64_t s, int64_t positions, int64_t n,
                              const std::string& what) {
  const ModelConfig& c = e.config();
  const KvScheme kv = c.kv_cache;
  if (kv == KvScheme::fp16) return;
  const int64_t kvh = c.num_key_value_heads, hd = c.head_dim;
  const uint64_t stride = kvq::sequence_bytes(kv, positions, kvh, hd);
  const float top = kv == KvScheme::int8 ? static_cast<float>(quant::kInt8Max) : quant::kFp8Max;
  for (const __half* cache : {e.device_layers()[l].k_cache, e.device_layers()[l].v_cache}) {
    std::vector<uint8_t> b(static_cast<size_t>(stride));
    CUDA_CHECK(cudaMemcpy(b.data(), reinterpret_cast<const uint8_t*>(cache) + s * stride, stride,
                          cudaMemcpyDeviceToHost));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < kvh; ++h) {
        float scale;
        std::memcpy(&scale, b.data() + positions * kvh * hd + 4 * (t * kvh + h), 4);
        float vmax = 0;
        for (int64_t i = 0; i < hd; ++i)
          vmax = std::max(
              vmax, std::fabs(kvq::dequantize(b[static_cast<size_t>((t * kvh + h) * hd + i)], 1.f, kv)));
        ASSERT_TRUE(vmax == top || (vmax == 0 && scale == 1.f))
            << what << ": layer " << l << " sequence " << s << " position " << t << " kv head " << h
            << ": largest code " << vmax << ", scale " << scale;
      }
  }
}

struct EngineCase {
  KvScheme kv;
  const char* preset;
  Shape shape;  // hd 0: the preset's
  int64_t positions, context;
  int batch;
  bool prefill;
};

class KvEngine : public ::testing::TestWithParam<EngineCase> {};

// Teacher-forced with the reference's greedy tokens: every sequence's logits within the
// scheme's bound of the reference, which quantizes the same vectors; graph replay and eager
// steps the same bits; and the cache holding the scheme's vectors where the steps wrote.
TEST_P(KvEngine, WithinTheSchemesBoundOfTheReference) {
  REQUIRE_GPU();
  const EngineCase p = GetParam();
  ModelConfig c = tiny(Scheme::fp16, p.preset);
  if (p.shape.hd) {
    c.arch = p.shape.arch;
    c.head_dim = p.shape.hd;
    c.num_attention_heads = p.shape.heads;
    c.num_key_value_heads = p.shape.kv_heads;
  }
  c.max_position_embeddings = std::max<int64_t>(c.max_position_embeddings, p.positions);
  c.kv_cache = p.kv;
  validate(c, "test");
  ModelConfig c16 = c;
  c16.kv_cache = KvScheme::fp16;
  const WeightSource ws(c, "", 13), ws16(c16, "", 13);
  const int64_t steps = 8, B = p.batch, vocab = c.vocab_size;
  const std::string what = fmt::format("{} {} hd {} context {}{} batch {}", to_string(p.kv), p.preset,
                                       c.head_dim, p.context, p.prefill ? " (prefill)" : "", B);
  const std::vector<Trace> ref = cpu_run(ws, B, p.context, steps);
  const std::vector<std::vector<int32_t>> inputs = inputs_of(ref, p.context, vocab);
  const std::vector<Trace> ref16 = p.kv == KvScheme::fp16 ? ref : cpu_run(ws16, B, p.context, steps, inputs);
  Engine g(ws, resolve_kernel("auto", Scheme::fp16), p.positions, false, B);
  Engine n(ws, resolve_kernel("auto", Scheme::fp16), p.positions, false, B);
  ASSERT_EQ(g.config().kv_cache, p.kv);
  const auto graph = engine_run(g, p.context, inputs, p.prefill, true);
  const auto eager = engine_run(n, p.context, inputs, p.prefill, false);
  for (int64_t s = 0; s < B; ++s) {
    double e_q = 0;
    for (int64_t i = 0; i < steps; ++i)
      e_q = std::max(e_q, db_test::max_rel_err(ref[s].logits[i], ref16[s].logits[i]));
    const std::string seq = fmt::format("{} sequence {} (e_q {:.3g})", what, s, e_q);
    expect_logits(graph[s], ref[s], quantized_bound(e_q), seq);
    for (int64_t i = 0; i < steps; ++i)
      ASSERT_EQ(graph[s][i], eager[s][i]) << seq << " step " << i << ": graph, eager";
  }
  for (int64_t l : {int64_t{0}, c.num_hidden_layers - 1})
    for (int64_t s : {int64_t{0}, B - 1})
      expect_quantized_vectors(g, l, s, p.positions, p.context + steps, what);
}

std::vector<EngineCase> engine_cases() {
  const Shape preset{Arch::llama, 0, 0, 0};
  // The tiny presets (the fast kernel, llama and qwen2's biases), qwen3's norms on the fast
  // kernel, and the plain kernel: head_dim 80, 256, a group of 16.
  const std::pair<const char*, Shape> shapes[] = {{"tiny", preset},
                                                  {"tiny-qwen2", preset},
                                                  {"tiny", {Arch::qwen3, 96, 6, 2}},
                                                  {"tiny", {Arch::llama, 80, 6, 2}},
                                                  {"tiny", {Arch::qwen3, 256, 4, 2}},
                                                  {"tiny", {Arch::llama, 64, 16, 1}}};
  std::vector<EngineCase> v;
  for (KvScheme kv : kSchemes)
    for (const auto& [name, sh] : shapes)
      for (int batch : {1, 3}) {
        v.push_back({kv, name, sh, 16, 0, batch, false});      // one split
        v.push_back({kv, name, sh, 200, 150, batch, false});   // two splits, the context by steps
        v.push_back({kv, name, sh, 200, 150, batch, true});    // the same by the prefill
        v.push_back({kv, name, sh, 9000, 100, batch, false});  // over 64 splits: the wide kernels
      }
  // A context of more than 64 splits (8300 positions, 65 splits) through the prefill: the wide
  // merge over all of them.
  for (KvScheme kv : kSchemes) v.push_back({kv, "tiny", preset, 8400, 8300, 1, true});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Engine, KvEngine, ::testing::ValuesIn(engine_cases()), [](const auto& info) {
  const EngineCase& p = info.param;
  std::string preset = p.preset;
  std::replace(preset.begin(), preset.end(), '-', '_');
  const std::string shape = p.shape.hd ? fmt::format("_{}_hd{}_h{}_kv{}", to_string(p.shape.arch), p.shape.hd,
                                                     p.shape.heads, p.shape.kv_heads)
                                       : "";
  return fmt::format("{}_{}{}_p{}_ctx{}_b{}{}", to_string(p.kv), preset, shape, p.positions, p.context,
                     p.batch, p.prefill ? "_prefill" : "");
});

// The prefill against the decode steps on the GPU, under each scheme: the two paths quantize
// vectors that differ by their arithmetic (GEMM against GEMV sums, within 1e-2 of the largest
// element, as gpu_test_prefill.cu's bound), so an element's value differs by that plus at most
// one step of its code (int8: the scale; fp8: 2^-3 of the value, or 2^-9 of the scale among
// the subnormals); for every head size of both prefill attention kernels.
TEST(KvPrefill, CacheWithinOneStepOfTheStepPaths) {
  REQUIRE_GPU();
  const Shape shapes[] = {{Arch::llama, 32, 4, 2},  {Arch::llama, 64, 16, 1},  {Arch::llama, 80, 6, 2},
                          {Arch::qwen3, 96, 4, 1},  {Arch::qwen2, 128, 12, 2}, {Arch::llama, 24, 4, 2},
                          {Arch::llama, 160, 2, 2}, {Arch::qwen3, 256, 4, 2}};
  for (KvScheme kv : {KvScheme::fp8, KvScheme::int8})
    for (const Shape& sh : shapes) {
      ModelConfig c = tiny(Scheme::fp16);
      c.arch = sh.arch;
      c.head_dim = sh.hd;
      c.num_attention_heads = sh.heads;
      c.num_key_value_heads = sh.kv_heads;
      c.kv_cache = kv;
      validate(c, "test");
      const WeightSource ws(c, "", 17);
      const int64_t context = 200, positions = 208, vocab = c.vocab_size;
      const std::string what = fmt::format("{} {} hd {}", to_string(kv), to_string(sh.arch), sh.hd);
      Engine steps(ws, resolve_kernel("auto", Scheme::fp16), positions),
          pre(ws, resolve_kernel("auto", Scheme::fp16), positions);
      steps.set_first_position(0);
      for (int64_t i = 0; i < context; ++i) {
        steps.set_inputs(i, {prompt_token(i, vocab)});
        steps.enqueue_step();
      }
      std::vector<int32_t> prompt;
      for (int64_t i = 0; i < context; ++i) prompt.push_back(prompt_token(i, vocab));
      pre.prefill(prompt, 64);
      steps.synchronize();
      for (int64_t l : {int64_t{0}, c.num_hidden_layers - 1})
        for (int which = 0; which < 2; ++which) {
          HostCache a(kv, positions, sh.kv_heads, sh.hd, 1), b = a;
          const DeviceLayer& ls = steps.device_layers()[l];
          const DeviceLayer& lp = pre.device_layers()[l];
          CUDA_CHECK(cudaMemcpy(a.bytes.data(), which ? ls.v_cache : ls.k_cache, a.bytes.size(),
                                cudaMemcpyDeviceToHost));
          CUDA_CHECK(cudaMemcpy(b.bytes.data(), which ? lp.v_cache : lp.k_cache, b.bytes.size(),
                                cudaMemcpyDeviceToHost));
          double amax = 0;  // the layer's largest element, as gpu_test_prefill.cu's bound is relative to
          for (int64_t t = 0; t < context; ++t)
            for (int64_t h = 0; h < sh.kv_heads; ++h)
              for (int64_t i = 0; i < sh.hd; ++i)
                amax = std::max(amax, double{std::fabs(a.value(0, t, h, i))});
          int failures = 0;
          for (int64_t t = 0; t < context; ++t)
            for (int64_t h = 0; h < sh.kv_heads; ++h) {
              for (int64_t i = 0; i < sh.hd; ++i) {
                const double x = a.value(0, t, h, i), y = b.value(0, t, h, i);
                const double step = kv == KvScheme::int8
                                        ? std::max(a.scale(0, t, h), b.scale(0, t, h))
                                        : std::max({std::ldexp(std::max(std::fabs(x), std::fabs(y)), -3),
                                                    std::ldexp(double{a.scale(0, t, h)}, -9),
                                                    std::ldexp(double{b.scale(0, t, h)}, -9)});
                if (!(std::fabs(x - y) <= 1e-2 * amax + step) && failures++ < 5)
                  ADD_FAILURE() << what << (which ? " V" : " K") << " layer " << l << " position " << t
                                << " head " << h << " [" << i << "]: " << y << " (prefill) for " << x;
              }
            }
          EXPECT_EQ(failures, 0) << what << " layer " << l;
        }
    }
}

// The engine's memory plan holds the scheme's cache: codes and scales, each sequence's
// padded to 16 bytes (kv_quant.h), K and V of every layer; and the engine allocates what the
// plan says.
TEST(KvEngineMemory, ThePlanCountsTheSchemesCache) {
  REQUIRE_GPU();
  for (KvScheme kv : kSchemes)
    for (int64_t batch : {1, 3}) {
      ModelConfig c = tiny(Scheme::int4);
      c.kv_cache = kv;
      const WeightSource ws(c, "", 3);
      const KernelInfo k = resolve_kernel("auto", Scheme::int4);
      const int64_t positions = 21;
      const MemoryUse m = Engine::plan(c, k, positions, 0, batch);
      EXPECT_EQ(m.kv_cache_bytes, 2 * c.num_hidden_layers * batch *
                                      kvq::sequence_bytes(kv, positions, c.num_key_value_heads, c.head_dim))
          << to_string(kv);
      Engine e(ws, k, positions, false, batch);
      EXPECT_EQ(e.memory().kv_cache_bytes, m.kv_cache_bytes) << to_string(kv);
    }
}

// Weights loaded under one scheme serve an engine of another (shared weights carry the
// config of the run that loaded them): the engine runs the scheme it is given.
TEST(KvEngineReuse, AnEngineRunsItsOwnSchemeOverSharedWeights) {
  REQUIRE_GPU();
  const ModelConfig c = tiny(Scheme::int4);
  const WeightSource ws(c, "", 3);
  const KernelInfo k = resolve_kernel("auto", Scheme::int4);
  auto w = load_device_weights(ws, k, 40);
  ModelConfig c8 = c;
  c8.kv_cache = KvScheme::int8;
  const WeightSource ws8(c8, "", 3);
  Engine e(w, k, 40, false, 1, KvScheme::int8);
  EXPECT_EQ(e.config().kv_cache, KvScheme::int8);
  const int64_t steps = 8;
  const std::vector<Trace> ref = cpu_run(ws8, 1, 20, steps);
  const auto got = engine_run(e, 20, inputs_of(ref, 20, c.vocab_size), false, true);
  const std::vector<Trace> ref16 = cpu_run(ws, 1, 20, steps, inputs_of(ref, 20, c.vocab_size));
  double e_q = 0;
  for (int64_t i = 0; i < steps; ++i)
    e_q = std::max(e_q, db_test::max_rel_err(ref[0].logits[i], ref16[0].logits[i]));
  expect_logits(got[0], ref[0], quantized_bound(e_q), "int8 over weights loaded for fp16");
  expect_quantized_vectors(e, 0, 0, 40, 20 + steps, "int8 over weights loaded for fp16");
}

}  // namespace
