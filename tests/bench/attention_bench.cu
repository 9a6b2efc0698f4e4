// Decode attention of one layer timed alone on a cold L2 (lab tool, not a test):
//   build-gpu/decodebench_attention_bench [--reps N] [--sweep] [--only 8b|1b] [--positions N]
// 8b's shape (32 query heads, 8 kv heads, head_dim 128) and 1b's (32, 8, 64), the step at
// the last of 1024, 4096, 32768 and 131000 positions: attention() (attention.cu, fp16 cache)
// and attention_mma() (attention_mma.cu) on fp16, fp8 and int8 caches, with its default grid
// and, with --sweep, half and twice as many blocks a kv head. Each figure is the median of
// `reps` launches (default 15), each after a 512 MB memset that evicts L2 (a real step's KV
// comes from HBM: 32 layers' caches exceed L2), timed by two events around the launch alone
// (so it includes the ~2 us of a launch that a graph's PDL hides in the step). One JSON line
// a figure:
//   {"model", "kernel", "kv", "positions", "splits", "us", "kv_bytes", "gbps", "of_read"}
// kv_bytes: the K and V rows attended (codes and scales for the 8-bit schemes); of_read: gbps
// over the read bandwidth measured in the same process (probe.cuh).
// Correctness is the gpu tests' job (tests/gpu_test_attention_mma.cu).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "attention.cuh"
#include "attention_mma.cuh"
#include "common.cuh"
#include "decodebench/kv_quant.h"
#include "pdl.cuh"
#include "probe.cuh"

using namespace db;
using namespace db::cuda;

namespace {

constexpr size_t kFlushBytes = size_t{512} << 20;  // >> the H200's L2

struct Shape {
  const char* name;
  int heads, kv_heads, head_dim;
};

// Deterministic values: fp16 in [-1, 1), or 8-bit codes (finite E4M3 / int8) with scale 1/64.
__device__ __forceinline__ uint32_t hash(uint64_t i) {
  uint64_t z = i * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  return static_cast<uint32_t>(z ^ (z >> 31));
}

__global__ void fill_cache(unsigned char* c, int64_t positions, int64_t kv_dim, int kv_heads, int kv,
                           uint64_t seed) {
  const int64_t n = positions * kv_dim;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t h = hash(seed + i);
    if (kv == 0)
      reinterpret_cast<__half*>(c)[i] = __float2half_rn((h & 0xffff) / 32768.f - 1.f);
    else
      c[i] = static_cast<unsigned char>(h & 0x77);  // E4M3 without NaN; int8 0..119
  }
  if (kv != 0)
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < positions * kv_heads;
         i += int64_t{gridDim.x} * blockDim.x)
      reinterpret_cast<float*>(c + n)[i] = 1.f / 64;
}

__global__ void fill_floats(float* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    p[i] = (hash(seed + i) & 0xffff) / 32768.f - 1.f;
}

// rope_table's layout: [positions, hd/2] cos, then sin.
__global__ void fill_rope(float* r, int64_t positions, int hd) {
  const int h = hd / 2;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < positions * h;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float a = static_cast<float>(i / h) * powf(500000.f, -2.f * static_cast<float>(i % h) / hd);
    r[i] = cosf(a);
    r[positions * h + i] = sinf(a);
  }
}

void* alloc(size_t bytes) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
  return p;
}

struct Layer {
  AttentionArgs a;
  std::vector<void*> owned;
  Layer(const Shape& sh, int64_t positions, KvScheme kv) {
    const int64_t kv_dim = int64_t{sh.kv_heads} * sh.head_dim, q_dim = int64_t{sh.heads} * sh.head_dim;
    const uint64_t cache = kvq::sequence_bytes(kv, positions, sh.kv_heads, sh.head_dim);
    auto take = [&](size_t bytes) {
      owned.push_back(alloc(bytes));
      return owned.back();
    };
    a.k_cache = static_cast<__half*>(take(cache));
    a.v_cache = static_cast<__half*>(take(cache));
    const int kind = kv == KvScheme::fp16 ? 0 : 1;
    fill_cache<<<1024, 256>>>(reinterpret_cast<unsigned char*>(a.k_cache), positions, kv_dim, sh.kv_heads,
                              kind, 1);
    fill_cache<<<1024, 256>>>(reinterpret_cast<unsigned char*>(a.v_cache), positions, kv_dim, sh.kv_heads,
                              kind, 2);
    CUDA_CHECK_LAUNCH();
    float* qkv = static_cast<float*>(take(4 * (q_dim + 2 * kv_dim)));
    fill_floats<<<64, 256>>>(qkv, q_dim + 2 * kv_dim, 3);
    float* rope = static_cast<float*>(take(4ull * positions * sh.head_dim));
    fill_rope<<<1024, 256>>>(rope, positions, sh.head_dim);
    CUDA_CHECK_LAUNCH();
    a.qkv = qkv;
    a.rope = rope;
    a.rope_positions = positions;
    a.heads = sh.heads;
    a.kv_heads = sh.kv_heads;
    a.head_dim = sh.head_dim;
    a.max_splits = attention_splits(positions);
    a.part_o = static_cast<float*>(take(4ull * sh.heads * a.max_splits * sh.head_dim));
    a.part_ml = static_cast<float*>(take(4ull * sh.heads * a.max_splits * 2));
    a.counters = static_cast<unsigned*>(take(4 * sh.kv_heads));
    CUDA_CHECK(cudaMemset(a.counters, 0, 4 * sh.kv_heads));
    a.out = static_cast<__half*>(take(2 * q_dim));
    int32_t* pos = static_cast<int32_t*>(take(4));
    const int32_t last = static_cast<int32_t>(positions - 1);
    CUDA_CHECK(cudaMemcpy(pos, &last, 4, cudaMemcpyHostToDevice));
    a.pos = pos;
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  ~Layer() {
    for (void* p : owned) cudaFree(p);
  }
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;
};

// The median microseconds of `reps` launches of f(stream), each after an L2-evicting memset.
template <class F>
double cold_us(cudaStream_t s, void* flush, int reps, F&& f) {
  Events ev;
  std::vector<double> v;
  for (int r = 0; r < reps + 2; ++r) {
    CUDA_CHECK(cudaMemsetAsync(flush, r & 0xff, kFlushBytes, s));
    CUDA_CHECK(cudaEventRecord(ev.a, s));
    f(s);
    CUDA_CHECK(cudaEventRecord(ev.b, s));
    CUDA_CHECK(cudaEventSynchronize(ev.b));
    if (r >= 2) v.push_back(1e3 * ev.ms());
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15;
  bool sweep = false;
  std::string only;
  std::vector<int64_t> positions_list = {1024, 4096, 32768, 131000};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--sweep") {
      sweep = true;
    } else if (arg == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (arg == "--positions" && i + 1 < argc) {
      positions_list = {std::max<int64_t>(1, std::atoll(argv[++i]))};
    } else {
      std::fprintf(stderr, "usage: %s [--reps N] [--sweep] [--only 8b|1b] [--positions N]\n", argv[0]);
      return 2;
    }
  }
  try {
    const double read_gbps = measure_read_GBps(size_t{1} << 30);
    fmt::print("{{\"read_gbps\": {:.1f}, \"sms\": {}}}\n", read_gbps, sm_count());
    void* flush = alloc(kFlushBytes);
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const Shape shapes[] = {{"8b", 32, 8, 128}, {"1b", 32, 8, 64}};
    for (const Shape& sh : shapes) {
      if (!only.empty() && only != sh.name) continue;
      for (int64_t positions : positions_list) {
        for (KvScheme kv : {KvScheme::fp16, KvScheme::fp8, KvScheme::int8}) {
          Layer layer(sh, positions, kv);
          const uint64_t bytes = 2 * kvq::sequence_bytes(kv, positions, sh.kv_heads, sh.head_dim);
          const auto line = [&](const char* kernel, int splits, double us) {
            const double gbps = bytes / (us * 1e3);
            fmt::print(
                "{{\"model\": \"{}\", \"kernel\": \"{}\", \"kv\": \"{}\", \"positions\": {}, \"splits\": {}, "
                "\"us\": {:.2f}, \"kv_bytes\": {}, \"gbps\": {:.1f}, \"of_read\": {:.3f}}}\n",
                sh.name, kernel, to_string(kv), positions, splits, us, bytes, gbps, gbps / read_gbps);
            std::fflush(stdout);
          };
          line("attention", layer.a.max_splits,
               cold_us(s, flush, reps, [&](cudaStream_t st) { attention(layer.a, st, 1, kv); }));
          const int def = attention_mma_splits(layer.a, 1, kv);
          std::vector<int> grids = {def};
          if (sweep)
            for (int g : {def / 2, def * 2})
              if (g >= 1 && g <= std::min(layer.a.max_splits, kAttentionMmaMaxSplits) && g != def)
                grids.push_back(g);
          for (int g : grids)
            line("attention_mma", g,
                 cold_us(s, flush, reps, [&](cudaStream_t st) { attention_mma(layer.a, st, 1, kv, g); }));
        }
      }
    }
    CUDA_CHECK(cudaStreamDestroy(s));
    CUDA_CHECK(cudaFree(flush));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
