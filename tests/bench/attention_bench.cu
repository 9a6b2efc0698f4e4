// Decode attention of one layer timed alone on a cold L2 (lab tool, not a test):
//   build-gpu/decodebench_attention_bench [--reps N] [--sweep] [--only 8b|1b] [--positions N]
//                                         [--layers N] [--warps 0|4|12] [--kv fp16|fp8|int8]
//                                         [--shape HEADS,KV_HEADS,HEAD_DIM] [--splits N]
// 8b's shape (32 query heads, 8 kv heads, head_dim 128) and 1b's (32, 8, 64), the step at
// the last of 1024, 4096, 8192, 16384, 32768 and 131000 positions (the engine switches kernels
// at kAttentionMmaMinPositions, 8192): attention() (attention.cu, fp16 cache)
// and attention_mma() (attention_mma.cu) on fp16, fp8 and int8 caches, with its default grid
// and, with --sweep, half and twice as many blocks a kv head, with --splits N also N; its
// blocks of `--warps` warps (4 or 12; default 0, the GPU's choice, attention_mma_warps()).
// --kv keeps one cache scheme; --shape replaces 8b's and 1b's shapes by one (named "shape"),
// e.g. 4,1,128 lays one kv head's rows end to end: 8b's per-head work on a contiguous cache. Each figure is the median of
// `reps` launches (default 15), each after a 512 MB memset that evicts L2 (a real step's KV
// comes from HBM: 32 layers' caches exceed L2), timed by two events around the launch alone
// (so it includes the ~2 us of a launch that a graph's PDL hides in the step). One JSON line
// a figure:
//   {"model", "kernel", "kv", "positions", "warps", "splits", "us", "kv_bytes", "gbps", "of_read",
//    "us_train", "of_read_train"}
// warps: attention_mma()'s warps a block (null for attention()).
// us_train: the same kernel launched back to back over `--layers` layers' caches (default 4,
// each its own allocation, together past L2), `reps` rounds between two events, divided by the
// launches: no memset's dirty lines to write back, launches queued as a step's are.
// kv_bytes: the K and V rows attended (codes and scales for the 8-bit schemes); of_read: gbps
// over the read bandwidth measured in the same process (probe.cuh).
// Correctness is the gpu tests' job (tests/gpu_test_attention_mma.cu).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attention.cuh"
#include "attention_layer.cuh"
#include "attention_mma.cuh"
#include "common.cuh"
#include "decodebench/kv_quant.h"
#include "pdl.cuh"
#include "probe.cuh"

using namespace db;
using namespace db::cuda;
using namespace db::cuda::lab;

namespace {

constexpr size_t kFlushBytes = size_t{512} << 20;  // >> the H200's L2

// The microseconds a launch of f(stream, layer) over `layers` layers back to back, `reps`
// rounds (after one round of warm-up) between two events.
template <class F>
double train_us(cudaStream_t s, int layers, int reps, F&& f) {
  Events ev;
  for (int l = 0; l < layers; ++l) f(s, l);
  CUDA_CHECK(cudaEventRecord(ev.a, s));
  for (int r = 0; r < reps; ++r)
    for (int l = 0; l < layers; ++l) f(s, l);
  CUDA_CHECK(cudaEventRecord(ev.b, s));
  CUDA_CHECK(cudaEventSynchronize(ev.b));
  return 1e3 * ev.ms() / (double{1} * reps * layers);
}

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
  int reps = 15, layers = 4, warps = 0;
  bool sweep = false;
  int extra_splits = 0;
  std::string only, only_kv;
  std::vector<Shape> shapes = {{"8b", 32, 8, 128}, {"1b", 32, 8, 64}};
  std::vector<int64_t> positions_list = {1024, 4096, 8192, 16384, 32768, 131000};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--sweep") {
      sweep = true;
    } else if (arg == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (arg == "--layers" && i + 1 < argc) {
      layers = std::clamp(std::atoi(argv[++i]), 1, 64);
    } else if (arg == "--positions" && i + 1 < argc) {
      positions_list = {std::max<int64_t>(1, std::atoll(argv[++i]))};
    } else if (arg == "--warps" && i + 1 < argc &&
               (std::strcmp(argv[i + 1], "0") == 0 || std::strcmp(argv[i + 1], "4") == 0 ||
                std::strcmp(argv[i + 1], "12") == 0)) {
      warps = std::atoi(argv[++i]);
    } else if (arg == "--kv" && i + 1 < argc) {
      only_kv = argv[++i];
    } else if (arg == "--splits" && i + 1 < argc) {
      extra_splits = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--shape" && i + 1 < argc &&
               std::sscanf(argv[i + 1], "%d,%d,%d", &shapes[0].heads, &shapes[0].kv_heads, &shapes[0].head_dim) ==
                   3 &&
               shapes[0].kv_heads > 0 && shapes[0].heads % shapes[0].kv_heads == 0) {
      ++i;
      shapes[0].name = "shape";
      shapes.resize(1);
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--reps N] [--sweep] [--only 8b|1b] [--positions N] [--layers N] [--warps 0|4|12] "
          "[--kv fp16|fp8|int8] [--shape HEADS,KV_HEADS,HEAD_DIM] [--splits N]\n",
          argv[0]);
      return 2;
    }
  }
  try {
    const double read_gbps = measure_read_GBps(size_t{1} << 30);
    fmt::print("{{\"read_gbps\": {:.1f}, \"sms\": {}}}\n", read_gbps, sm_count());
    void* flush = alloc(kFlushBytes);
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (const Shape& sh : shapes) {
      if (!only.empty() && only != sh.name) continue;
      for (int64_t positions : positions_list) {
        for (KvScheme kv : {KvScheme::fp16, KvScheme::fp8, KvScheme::int8}) {
          if (!only_kv.empty() && only_kv != to_string(kv)) continue;
          std::vector<std::unique_ptr<Layer>> ls;
          for (int l = 0; l < layers; ++l) ls.push_back(std::make_unique<Layer>(sh, positions, kv));
          Layer& layer = *ls[0];
          const uint64_t bytes = 2 * kvq::sequence_bytes(kv, positions, sh.kv_heads, sh.head_dim);
          const auto line = [&](const char* kernel, int block_warps, int splits, double us, double us_train) {
            const double gbps = bytes / (us * 1e3), gbps_train = bytes / (us_train * 1e3);
            fmt::print(
                "{{\"model\": \"{}\", \"kernel\": \"{}\", \"kv\": \"{}\", \"positions\": {}, \"warps\": {}, "
                "\"splits\": {}, \"us\": {:.2f}, \"kv_bytes\": {}, \"gbps\": {:.1f}, \"of_read\": {:.3f}, "
                "\"us_train\": {:.2f}, \"of_read_train\": {:.3f}}}\n",
                sh.name, kernel, to_string(kv), positions,
                block_warps > 0 ? std::to_string(block_warps) : std::string("null"), splits, us, bytes, gbps,
                gbps / read_gbps, us_train, gbps_train / read_gbps);
            std::fflush(stdout);
          };
          line("attention", 0, layer.a.max_splits,
               cold_us(s, flush, reps, [&](cudaStream_t st) { attention(layer.a, st, 1, kv); }),
               train_us(s, layers, reps, [&](cudaStream_t st, int l) { attention(ls[l]->a, st, 1, kv); }));
          const int w = warps > 0 ? warps : attention_mma_warps(layer.a, kv);
          const int def = attention_mma_splits(layer.a, 1, kv, w);
          std::vector<int> grids = {def};
          if (sweep)
            for (int g : {def / 2, def * 2})
              if (g >= 1 && g <= std::min(layer.a.max_splits, kAttentionMmaMaxSplits) && g != def)
                grids.push_back(g);
          if (extra_splits > 0 && extra_splits <= std::min(layer.a.max_splits, kAttentionMmaMaxSplits) &&
              extra_splits != def)
            grids.push_back(extra_splits);
          for (int g : grids)
            line("attention_mma", w, g,
                 cold_us(s, flush, reps, [&](cudaStream_t st) { attention_mma(layer.a, st, 1, kv, g, w); }),
                 train_us(s, layers, reps,
                          [&](cudaStream_t st, int l) { attention_mma(ls[l]->a, st, 1, kv, g, w); }));
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
