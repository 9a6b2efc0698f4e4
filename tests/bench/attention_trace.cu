// The timeline of one tensor-core decode attention launch (lab tool, not a test):
//   build-gpu/decodebench_attention_trace [--positions N] [--kv fp16|fp8|int8] [--splits N]
//                                         [--warps 4|12]
// 8b's shape (32 query heads, 8 kv heads, head_dim 128) at the last of `positions` (default
// 32768). This file compiles kernels/attention_mma.cu itself with DB_ATTENTION_MMA_TRACE, so
// that thread 0 of each block records the global timer (ns) at its phases: 0 its start, 1 its
// pdl_wait returned, 2 its queries ready, 3 its tiles done, 4 its partial counted, 5 (the last
// block of a kv head) the merge done; and warp 0's tile count and the block's SM. Blocks of
// `--warps` warps (default: the GPU's choice, attention_mma_warps()). Four layers' launches
// run first (the caches of one step, as attention_bench's us_train), then an L2-evicting
// memset and the traced launch. One JSON line: each phase's min / median / max over the blocks,
// in us from the earliest start, the blocks an SM, and the launch's event time.
#define DB_ATTENTION_MMA_TRACE 1
#include "attention_mma.cu"  // the kernel with its trace points, in this program only

#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "attention_layer.cuh"

using namespace db;
using namespace db::cuda;
using namespace db::cuda::lab;

namespace {

struct Stats {
  double min = 0, median = 0, max = 0;
};

Stats stats(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2], v.back()};
}

std::string json(const char* name, const Stats& s) {
  return fmt::format("\"{}\": [{:.2f}, {:.2f}, {:.2f}]", name, s.min, s.median, s.max);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t positions = 32768;
  int splits = 0, warps = 0;
  KvScheme kv = KvScheme::fp16;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--positions" && i + 1 < argc) {
      positions = std::max<int64_t>(1, std::atoll(argv[++i]));
    } else if (arg == "--splits" && i + 1 < argc) {
      splits = std::max(0, std::atoi(argv[++i]));
    } else if (arg == "--warps" && i + 1 < argc &&
               (std::string(argv[i + 1]) == "4" || std::string(argv[i + 1]) == "12")) {
      warps = std::atoi(argv[++i]);
    } else if (arg == "--kv" && i + 1 < argc) {
      const std::string k = argv[++i];
      kv = k == "fp8" ? KvScheme::fp8 : k == "int8" ? KvScheme::int8 : KvScheme::fp16;
    } else {
      std::fprintf(stderr, "usage: %s [--positions N] [--kv fp16|fp8|int8] [--splits N] [--warps 4|12]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    const Shape sh{"8b", 32, 8, 128};
    constexpr int kLayers = 4;
    std::vector<std::unique_ptr<Layer>> ls;
    for (int l = 0; l < kLayers; ++l) ls.push_back(std::make_unique<Layer>(sh, positions, kv));
    if (warps == 0) warps = attention_mma_warps(ls[0]->a, kv);
    const int grid = splits > 0 ? splits : attention_mma_splits(ls[0]->a, 1, kv, warps);
    const int blocks = grid * sh.kv_heads;
    unsigned long long* buf = static_cast<unsigned long long*>(alloc(8ull * 8 * blocks));
    void* flush = alloc(size_t{512} << 20);
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int r = 0; r < 3; ++r)
      for (int l = 0; l < kLayers; ++l) attention_mma(ls[l]->a, s, 1, kv, grid, warps);
    CUDA_CHECK(cudaMemsetAsync(buf, 0, 8ull * 8 * blocks, s));
    CUDA_CHECK(cudaMemcpyToSymbolAsync(g_attention_trace, &buf, sizeof(buf), 0, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemsetAsync(flush, 1, size_t{512} << 20, s));
    Events ev;
    CUDA_CHECK(cudaEventRecord(ev.a, s));
    attention_mma(ls[0]->a, s, 1, kv, grid, warps);
    CUDA_CHECK(cudaEventRecord(ev.b, s));
    CUDA_CHECK(cudaEventSynchronize(ev.b));
    std::vector<unsigned long long> t(8ull * blocks);
    CUDA_CHECK(cudaMemcpy(t.data(), buf, 8 * t.size(), cudaMemcpyDeviceToHost));

    unsigned long long t0 = ~0ull;
    for (int b = 0; b < blocks; ++b) t0 = std::min(t0, t[8 * b]);
    std::vector<double> phase[6], tiles, loop;
    std::map<unsigned long long, int> per_sm;
    for (int b = 0; b < blocks; ++b) {
      per_sm[t[8 * b + 7]] += 1;
      for (int p = 0; p < 6; ++p)
        if (t[8 * b + p] != 0) phase[p].push_back((t[8 * b + p] - t0) * 1e-3);
      if (t[8 * b + 3] != 0) {
        tiles.push_back(static_cast<double>(t[8 * b + 6]));
        loop.push_back((t[8 * b + 3] - t[8 * b + 2]) * 1e-3);
      }
    }
    std::vector<double> sm_blocks;
    for (const auto& [sm, n] : per_sm) sm_blocks.push_back(n);
    fmt::print(
        "{{\"warps\": {}, \"positions\": {}, \"kv\": \"{}\", \"splits\": {}, \"event_us\": {:.2f}, "
        "{}, {}, {}, {}, {}, {}, {}, {}, {}, \"sms\": {}}}\n",
        warps, positions, to_string(kv), grid, 1e3 * ev.ms(), json("start", stats(phase[0])),
        json("waited", stats(phase[1])), json("queries", stats(phase[2])),
        json("tiles_done", stats(phase[3])), json("counted", stats(phase[4])),
        json("merged", stats(phase[5])), json("loop_us", stats(loop)), json("warp0_tiles", stats(tiles)),
        json("blocks_an_sm", stats(sm_blocks)), per_sm.size());
    CUDA_CHECK(cudaStreamDestroy(s));
    CUDA_CHECK(cudaFree(flush));
    CUDA_CHECK(cudaFree(buf));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_trace: %s\n", e.what());
    return 1;
  }
  return 0;
}
