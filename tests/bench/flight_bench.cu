// How fast HBM streams for a given number of bytes in flight per SM (dev tool, not a test):
//   build-gpu/decodebench_flight_bench [--quick | --barriers | --rotate | --tiles]
// A batch=1 GEMV reads every weight once, so its speed is set by how many bytes each SM
// keeps in flight (Little's law: bandwidth = bytes in flight / latency, and the latency
// grows with the load) and by what interrupts the stream. This measures that directly,
// with nothing computed, in the three ways a kernel can hold bytes in flight:
// - regs:   threads load 16-byte words into registers, N a thread, and use them before
//           issuing the next N (the rows kernel's chain without its dot); optionally a
//           block barrier per group, as the rows kernel has.
// - ldgsts: each thread copies its words into its own shared-memory slots with cp.async,
//           D groups deep, and reads a group back once it has landed (no registers held).
// - bulk:   one thread per block issues bulk copies (TMA) of S bytes into a ring of slots
//           that consumer warps read and release (the warp-specialized kernels' structure).
// Each mode can also cross a grid-wide barrier every M bytes per block, as one persistent
// kernel spanning a layer's GEMVs would at each dependency: the register loads stop there
// (the next group's loads go out before the barrier, as PDL lets them now), the bulk ring's
// producer does not wait for it. And the rows kernel's configuration on a GEMV's bytes
// (qkv, o, gate/up, down of 8b-int4) launched back to back, to give each kernel's fixed cost.
// Each figure: one launch over a fresh part of a 2 GiB buffer (never in L2), the median of
// 9 after 3 warm-ups, GB/s of bytes read.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common.cuh"
#include "mbarrier.cuh"

using namespace db;
using namespace db::cuda;

namespace {

constexpr size_t kBufferBytes = size_t{2} << 30;
constexpr int64_t kUnit = 256 * 1024;  // every group, slot and barrier spacing divides it
constexpr int kMaxSlots = 64;

__device__ __forceinline__ uint32_t fold(uint4 v) {
  return v.x ^ v.y ^ v.z ^ v.w;
}

// Ties acc to the instruction stream: volatile asm keeps its place among the (volatile)
// loads, so no load after it is issued before the loads acc depends on have landed.
__device__ __forceinline__ void use(uint32_t& acc) {
  asm volatile("" : "+r"(acc));
}

// A grid-wide barrier among `threads` threads of every block (named barrier 1), for the
// generation `gen` (1, 2, ...): every block resident (the launcher checks one wave). The
// waiting thread polls the counter every `backoff` ns (0: back to back). Returns, in thread
// 0, the SM cycles from its arrival to its release.
__device__ __forceinline__ long long grid_barrier(unsigned* ctr, unsigned gen, int threads,
                                                  unsigned backoff) {
  const long long t0 = clock64();
  asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory");
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(ctr, 1u);
    const unsigned target = gen * gridDim.x;
    unsigned v = 0;
    for (;;) {
      asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(ctr) : "memory");
      if (v >= target) break;
      if (backoff) __nanosleep(backoff);
    }
  }
  asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory");
  return clock64() - t0;
}

// SM cycles per nanosecond, from clock64 against the global timer over ~2 ms.
__global__ void clock_kernel(double* ratio) {
  long long c0 = clock64(), t0 = 0, t1 = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  } while (t1 - t0 < 2000000);
  *ratio = static_cast<double>(clock64() - c0) / static_cast<double>(t1 - t0);
}

struct Args {
  const unsigned char* base;  // this launch's part of the buffer
  int64_t block_bytes;        // each block reads [blockIdx.x * block_bytes, + block_bytes)
  int64_t barrier_bytes;      // 0: none; else a grid barrier every so many bytes of a block
  unsigned* ctr;
  unsigned* sink;
  unsigned backoff;            // the grid barrier's polling interval, ns
  unsigned long long* waited;  // SM cycles thread 0 of each block spent in grid barriers, summed
  bool rotate;                 // regs: block b starts its range at group 5b (mod its groups) and wraps around
};

template <int N>
__global__ void regs_kernel(Args a, bool block_sync) {
  const int T = blockDim.x;
  const uint4* p = reinterpret_cast<const uint4*>(a.base + blockIdx.x * a.block_bytes);
  const int64_t step = int64_t{T} * N, groups = a.block_bytes / 16 / step;
  const int64_t barrier_groups = a.barrier_bytes / 16 / step;
  const int64_t first = a.rotate ? int64_t{blockIdx.x} * 5 % groups : 0;
  uint32_t acc = 0;
  unsigned gen = 0;
  long long w = 0;
  for (int64_t i = 0; i < groups; ++i) {
    const int64_t g = (i + first < groups ? i + first : i + first - groups) * step;
    uint4 v[N];
#pragma unroll
    for (int n = 0; n < N; ++n) v[n] = ld_stream(p + g + n * T + threadIdx.x);  // a warp: 512 B a load
    if (barrier_groups && i > 0 && i % barrier_groups == 0) w += grid_barrier(a.ctr, ++gen, T, a.backoff);
#pragma unroll
    for (int n = 0; n < N; ++n) acc ^= fold(v[n]);
    use(acc);
    if (block_sync) __syncthreads();
  }
  if (acc == 0x9e3779b9u) *a.sink = acc;  // keeps the loads; practically never taken
  if (threadIdx.x == 0 && w) atomicAdd(a.waited, static_cast<unsigned long long>(w));
}

template <int N, int D>
__global__ void ldgsts_kernel(Args a) {
  extern __shared__ uint4 slots[];  // [D][N][T]
  const int T = blockDim.x;
  const uint4* p = reinterpret_cast<const uint4*>(a.base + blockIdx.x * a.block_bytes);
  const int64_t step = int64_t{T} * N, groups = a.block_bytes / 16 / step;
  const int64_t barrier_groups = a.barrier_bytes / 16 / step;
  auto issue = [&](int64_t g) {
    uint4* s = slots + (g % D) * step;
#pragma unroll
    for (int n = 0; n < N; ++n) cp_async16(s + n * T + threadIdx.x, p + g * step + n * T + threadIdx.x);
  };
  for (int d = 0; d < D - 1; ++d) {
    if (d < groups) issue(d);
    cp_async_commit();
  }
  uint32_t acc = 0;
  unsigned gen = 0;
  long long w = 0;
  for (int64_t g = 0; g < groups; ++g) {
    if (g + D - 1 < groups) issue(g + D - 1);
    cp_async_commit();
    if (barrier_groups && g > 0 && g % barrier_groups == 0) w += grid_barrier(a.ctr, ++gen, T, a.backoff);
    asm volatile("cp.async.wait_group %0;" ::"n"(D - 1) : "memory");
    const uint4* s = slots + (g % D) * step;
#pragma unroll
    for (int n = 0; n < N; ++n) acc ^= fold(s[n * T + threadIdx.x]);  // this thread's own words
  }
  if (acc == 0x9e3779b9u) *a.sink = acc;
  if (threadIdx.x == 0 && w) atomicAdd(a.waited, static_cast<unsigned long long>(w));
}

// The skinny GEMM's loads (kernels/skinny.cu) against contiguous ones, nothing computed: a
// block of 4 warps owns 64 rows of `row_bytes` each (its split of them: sets split, split +
// splits, ...); a warp takes every 4th set of 64 bytes a row and, a set, loads for each of
// its 4 tiles of 16 rows the chunk c of rows g and g + 8 (lane g, c), 8 rows x 64 bytes a
// load (kFrag), or the same number of bytes as 512 contiguous ones a load (the rows GEMV's
// pattern and a pre-shuffled layout's). U sets a warp go out together.
template <bool kFrag, int U>
__global__ void tile_kernel(Args a, int row_bytes, int splits) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, c = lane % 4;
  const unsigned char* p = a.base + static_cast<int64_t>(blockIdx.x) * a.block_bytes;
  const int sets = row_bytes / 64;
  uint32_t acc = 0;
  for (int set = (blockIdx.y * 4 + warp) * U; set < sets; set += 4 * splits * U) {
    uint4 v[U][8];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int64_t off = kFrag ? static_cast<int64_t>(16 * (i / 2) + g + 8 * (i % 2)) * row_bytes +
                                        (set + u) * 64 + c * 16
                                  : static_cast<int64_t>(set + u) * 4096 + i * 512 + lane * 16;
        v[u][i] = ld_stream(reinterpret_cast<const uint4*>(p + off));
      }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int i = 0; i < 8; ++i) acc ^= fold(v[u][i]);
    use(acc);
  }
  if (acc == 0x9e3779b9u) *a.sink = acc;
}

// Nothing but `n` grid barriers: what one costs with no bytes moving.
__global__ void barrier_kernel(Args a, int n) {
  for (int i = 1; i <= n; ++i) grid_barrier(a.ctr, i, blockDim.x, a.backoff);
}

// --- bulk copies on mbarriers (sm_90: mbarrier.cuh)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
using db::hopper::bulk_copy;
using db::hopper::mbar_init;
using db::hopper::mbar_wait;
using db::hopper::smem_u32;
#endif

__global__ void bulk_kernel(Args a, int slot_bytes, int nslots) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ uint64_t full[kMaxSlots], empty[kMaxSlots];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int consumers = blockDim.x / kWarp - 1;  // the last warp produces
  if (threadIdx.x == 0) {
    for (int s = 0; s < nslots; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], consumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const unsigned char* src = a.base + blockIdx.x * a.block_bytes;
  const int64_t n = a.block_bytes / slot_bytes;
  if (warp == consumers) {
    if (lane == 0) {
      for (int64_t i = 0; i < n; ++i) {
        const int s = static_cast<int>(i % nslots);
        const unsigned use = static_cast<unsigned>(i / nslots);
        if (use > 0) mbar_wait(&empty[s], (use - 1) & 1);  // the consumers released its last use
        bulk_copy(ring + int64_t{s} * slot_bytes, src + i * slot_bytes, slot_bytes, &full[s]);
      }
    }
    return;  // no block-wide barrier follows
  }
  const int64_t barrier_slots = a.barrier_bytes / slot_bytes;
  uint32_t acc = 0;
  unsigned gen = 0;
  long long w = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int s = static_cast<int>(i % nslots);
    if (barrier_slots && i > 0 && i % barrier_slots == 0)
      w += grid_barrier(a.ctr, ++gen, consumers * kWarp, a.backoff);
    mbar_wait(&full[s], static_cast<unsigned>(i / nslots) & 1);
    const uint4* q = reinterpret_cast<const uint4*>(ring + int64_t{s} * slot_bytes);
    for (int j = threadIdx.x; j < slot_bytes / 16; j += consumers * kWarp) acc ^= fold(q[j]);
    __syncwarp();
    if (lane == 0)
      asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(&empty[s])) : "memory");
  }
  if (acc == 0x9e3779b9u) *a.sink = acc;
  if (threadIdx.x == 0 && w) atomicAdd(a.waited, static_cast<unsigned long long>(w));
#endif
}

// --- the host side

struct Bench {
  unsigned char* buf = nullptr;
  unsigned* ctr = nullptr;
  unsigned* sink = nullptr;
  unsigned long long* waited = nullptr;
  int sms = 0;
  double cycles_per_ns = 0;
  double median_waited = 0;  // the median launch's Args::waited, of the last gbps()
  size_t offset = 0;         // rotates through the buffer: no launch finds its bytes in L2
  cudaEvent_t ev[2];

  Bench() {
    CUDA_CHECK(cudaMalloc(&buf, kBufferBytes));
    CUDA_CHECK(cudaMemset(buf, 0x5a, kBufferBytes));
    CUDA_CHECK(cudaMalloc(&ctr, sizeof(unsigned)));
    CUDA_CHECK(cudaMalloc(&sink, sizeof(unsigned)));
    CUDA_CHECK(cudaMalloc(&waited, sizeof(unsigned long long)));
    double* ratio = nullptr;
    CUDA_CHECK(cudaMalloc(&ratio, sizeof(double)));
    clock_kernel<<<1, 1>>>(ratio);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(&cycles_per_ns, ratio, sizeof(double), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(ratio));
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    for (cudaEvent_t& e : ev) CUDA_CHECK(cudaEventCreate(&e));
  }

  unsigned backoff = 0;
  bool rotate = false;

  Args next(int64_t bytes, int64_t block_bytes, int64_t barrier_bytes) {
    if (offset + bytes > kBufferBytes) offset = 0;
    Args a{buf + offset, block_bytes, barrier_bytes, ctr, sink, backoff, waited, rotate};
    offset += (bytes + 4095) / 4096 * 4096;
    return a;
  }

  // Milliseconds of one launch `f(args)` over `bytes`: the median of 9 after 3 warm-ups; the
  // same launch's Args::waited goes to median_waited.
  template <class F>
  double median_ms(int64_t bytes, int64_t block_bytes, int64_t barrier_bytes, F&& f) {
    std::vector<std::pair<float, unsigned long long>> ms;
    for (int r = 0; r < 12; ++r) {
      const Args a = next(bytes, block_bytes, barrier_bytes);
      CUDA_CHECK(cudaMemsetAsync(ctr, 0, sizeof(unsigned)));
      CUDA_CHECK(cudaMemsetAsync(waited, 0, sizeof(unsigned long long)));
      CUDA_CHECK(cudaEventRecord(ev[0]));
      f(a);
      CUDA_CHECK_LAUNCH();
      CUDA_CHECK(cudaEventRecord(ev[1]));
      CUDA_CHECK(cudaEventSynchronize(ev[1]));
      float t = 0;
      CUDA_CHECK(cudaEventElapsedTime(&t, ev[0], ev[1]));
      unsigned long long w = 0;
      CUDA_CHECK(cudaMemcpy(&w, waited, sizeof(w), cudaMemcpyDeviceToHost));
      if (r >= 3) ms.emplace_back(t, w);
    }
    std::sort(ms.begin(), ms.end());
    median_waited = static_cast<double>(ms[ms.size() / 2].second);
    return ms[ms.size() / 2].first;
  }

  // GB/s over `bytes` of one launch `f(args)`, as median_ms times it.
  template <class F>
  double gbps(int64_t bytes, int64_t block_bytes, int64_t barrier_bytes, F&& f) {
    return static_cast<double>(bytes) / (median_ms(bytes, block_bytes, barrier_bytes, f) * 1e-3) / 1e9;
  }

  // The median launch's time in a grid barrier, per barrier and block, in us ("" if none).
  std::string wait_us(int grid, int64_t block_bytes, int64_t barrier_bytes) const {
    if (!barrier_bytes) return "";
    const int64_t barriers = (block_bytes - 1) / barrier_bytes;
    const double us = median_waited / cycles_per_ns / 1e3 / static_cast<double>(barriers * grid);
    char text[32];
    std::snprintf(text, sizeof text, "wait %.2f us", us);
    return text;
  }

  // Microseconds per launch of `count` back-to-back launches, each over its own `bytes`.
  template <class F>
  double us_each(int64_t bytes, int64_t block_bytes, int count, F&& f) {
    std::vector<float> ms;
    for (int r = 0; r < 7; ++r) {
      std::vector<Args> as;
      for (int i = 0; i < count; ++i) as.push_back(next(bytes, block_bytes, 0));
      CUDA_CHECK(cudaEventRecord(ev[0]));
      for (const Args& a : as) f(a);
      CUDA_CHECK_LAUNCH();
      CUDA_CHECK(cudaEventRecord(ev[1]));
      CUDA_CHECK(cudaEventSynchronize(ev[1]));
      float t = 0;
      CUDA_CHECK(cudaEventElapsedTime(&t, ev[0], ev[1]));
      if (r >= 2) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2] * 1e3 / count;
  }
};

int occupancy(const void* kernel, int threads, size_t smem) {
  int n = 0;
  if (smem > 48 * 1024)
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
  return n;
}

template <int N>
const void* regs_fn() {
  return reinterpret_cast<const void*>(&regs_kernel<N>);
}
const void* regs_for(int n) {
  switch (n) {
    case 1:
      return regs_fn<1>();
    case 2:
      return regs_fn<2>();
    case 4:
      return regs_fn<4>();
    case 8:
      return regs_fn<8>();
    case 16:
      return regs_fn<16>();
  }
  fail("no regs kernel for {} loads", n);
}
template <int N, int D>
const void* ldgsts_fn() {
  return reinterpret_cast<const void*>(&ldgsts_kernel<N, D>);
}
const void* ldgsts_for(int n, int d) {
  if (n == 1 && d == 2) return ldgsts_fn<1, 2>();
  if (n == 1 && d == 4) return ldgsts_fn<1, 4>();
  if (n == 1 && d == 8) return ldgsts_fn<1, 8>();
  if (n == 2 && d == 2) return ldgsts_fn<2, 2>();
  if (n == 2 && d == 4) return ldgsts_fn<2, 4>();
  if (n == 4 && d == 2) return ldgsts_fn<4, 2>();
  if (n == 4 && d == 4) return ldgsts_fn<4, 4>();
  fail("no ldgsts kernel for {} x {}", n, d);
}

void launch(const void* kernel, int grid, int threads, size_t smem, void** args) {
  CUDA_CHECK(cudaLaunchKernel(kernel, dim3(grid), dim3(threads), args, smem, nullptr));
}

// The launches Bench times: regs_kernel with `n` loads a thread, and bulk_kernel.
auto regs_launch(int n, int grid, int threads, bool sync) {
  const void* k = regs_for(n);
  return [=](Args a) {
    bool s = sync;
    void* args[] = {&a, &s};
    launch(k, grid, threads, 0, args);
  };
}
auto bulk_launch(int grid, int threads, size_t smem, int slot_bytes, int nslots) {
  return [=](Args a) {
    int slot = slot_bytes, ns = nslots;
    void* args[] = {&a, &slot, &ns};
    launch(reinterpret_cast<const void*>(&bulk_kernel), grid, threads, smem, args);
  };
}

// Bytes a block reads: `total` split over the grid, rounded down to whole units.
int64_t per_block(int64_t total, int grid, int64_t unit = kUnit) {
  return std::max<int64_t>(unit, total / grid / unit * unit);
}

}  // namespace

int run(int argc, char** argv) {
  // --quick: fewer shapes; --barriers: only the grid-barrier sections.
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const bool barriers_only = argc > 1 && std::strcmp(argv[1], "--barriers") == 0;
  // --rotate: only the rows kernel's configuration, with and without rotated starts.
  const bool rotate_only = argc > 1 && std::strcmp(argv[1], "--rotate") == 0;
  // --tiles: only the skinny GEMM's load pattern against contiguous loads.
  const bool tiles_only = argc > 1 && std::strcmp(argv[1], "--tiles") == 0;
  if (argc > 2 || (argc == 2 && !quick && !barriers_only && !rotate_only && !tiles_only))
    usage_fail("usage: decodebench_flight_bench [--quick | --barriers | --rotate | --tiles]");
  Bench b;
  int dev = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major < 9) fail("flight bench: the bulk-copy kernels need sm_90 or newer (this GPU is sm_{}x)", major);
  const int64_t kTotal = int64_t{1} << 30;
  std::printf("%d SMs; GB/s over ~1 GiB a launch unless said; KB/SM: bytes in flight per SM at most\n",
              b.sms);

  // The skinny GEMM's load pattern against contiguous loads on 8b-int4's gate/up and down,
  // 128 threads a block, blocks an SM held to bps by shared memory.
  if (tiles_only) {
    std::printf("\n# tiles: matrix rows row_bytes splits bps U pattern | GB/s\n");
    struct Shape {
      const char* name;
      int rows, row_bytes, splits;
    };
    for (const Shape& sh : {Shape{"gate/up", 28672, 2048, 1}, Shape{"down", 4096, 7168, 8}})
      for (int bps : {2, 4, 8})
        for (int U : {1, 2})
          for (int frag = 0; frag < 2; ++frag) {
            const void* k = frag ? (U == 1 ? reinterpret_cast<const void*>(&tile_kernel<true, 1>)
                                           : reinterpret_cast<const void*>(&tile_kernel<true, 2>))
                                 : (U == 1 ? reinterpret_cast<const void*>(&tile_kernel<false, 1>)
                                           : reinterpret_cast<const void*>(&tile_kernel<false, 2>));
            const size_t smem = size_t{216} * 1024 / bps;
            if (occupancy(k, 128, smem) != bps) fail("tiles: {} blocks an SM, not {}", occupancy(k, 128, smem), bps);
            const int64_t bb = int64_t{64} * sh.row_bytes;
            const dim3 grid(sh.rows / 64, sh.splits);
            const double gb = b.gbps(bb * grid.x, bb, 0, [&](Args a) {
              int rb = sh.row_bytes, sp = sh.splits;
              void* args[] = {&a, &rb, &sp};
              CUDA_CHECK(cudaLaunchKernel(k, grid, dim3(128), args, smem, nullptr));
            });
            std::printf("tiles %-8s %5d %4d %d %d %d %-10s | %6.0f\n", sh.name, sh.rows, sh.row_bytes, sh.splits,
                        bps, U, frag ? "8rowsx64B" : "contiguous", gb);
          }
    return 0;
  }

  // regs: T threads x bps blocks per SM, N loads a thread.
  std::printf("\n# regs: mode T bps N sync barrierKB/SM | KB/SM GB/s\n");
  for (int sync = 0; sync < (barriers_only || rotate_only ? 0 : 2); ++sync)
    for (int T : {128, 256, 512, 1024})
      for (int bps : {1, 2, 4, 8, 16})
        for (int N : {1, 2, 4, 8, 16}) {
          if (T * bps > 2048 || (quick && T != 128 && T != 512)) continue;
          const void* k = regs_for(N);
          if (occupancy(k, T, 0) < bps) continue;
          const int grid = b.sms * bps;
          const int64_t bb = per_block(kTotal, grid);
          const double g = b.gbps(bb * grid, bb, 0, regs_launch(N, grid, T, sync));
          std::printf("regs %4d %2d %2d %d - | %4d %6.0f\n", T, bps, N, sync, bps * T * N * 16 / 1024, g);
        }

  // ldgsts: T threads x bps blocks, N words a group, D groups deep.
  std::printf("\n# ldgsts: mode T bps N D | KB/SM GB/s\n");
  for (int T : {128, 256, 512, 1024})
    for (int bps : {1, 2, 4, 8})
      for (auto [N, D] : {std::pair{1, 2}, {1, 4}, {1, 8}, {2, 2}, {2, 4}, {4, 2}, {4, 4}}) {
        if (T * bps > 2048 || (quick && T != 256) || barriers_only || rotate_only) continue;
        const void* k = ldgsts_for(N, D);
        const size_t smem = size_t{16} * T * N * D;
        if (smem > 227 * 1024 || occupancy(k, T, smem) < bps) continue;
        const int grid = b.sms * bps;
        const int64_t bb = per_block(kTotal, grid);
        const double g = b.gbps(bb * grid, bb, 0, [&](Args a) {
          void* args[] = {&a};
          launch(k, grid, T, smem, args);
        });
        std::printf("ldgsts %4d %d %d %d | %4d %6.0f\n", T, bps, N, D, bps * T * N * (D - 1) * 16 / 1024, g);
      }

  // bulk: bps blocks of (consumers + 1) warps, slots of S bytes.
  std::printf("\n# bulk: mode slotKB slots consumers bps | KB/SM GB/s\n");
  const void* bk = reinterpret_cast<const void*>(&bulk_kernel);
  for (int bps : {1, 2})
    for (int consumers : {4, 8})
      for (int skb : {1, 2, 4, 8, 16, 32})
        for (int ring_kb : {16, 32, 64, 96, 128, 192}) {
          const int nslots = ring_kb / skb;
          if (nslots < 2 || nslots > kMaxSlots || (quick && consumers != 8) || barriers_only || rotate_only)
            continue;
          const size_t smem = size_t{1024} * ring_kb;
          const int threads = (consumers + 1) * kWarp;
          if (smem > 227 * 1024 || occupancy(bk, threads, smem) < bps) continue;
          const int grid = b.sms * bps;
          const int64_t bb = per_block(kTotal, grid);
          const double g = b.gbps(bb * grid, bb, 0, bulk_launch(grid, threads, smem, skb * 1024, nslots));
          std::printf("bulk %2d %2d %d %d | %4d %6.0f\n", skb, nslots, consumers, bps, bps * ring_kb, g);
        }

  // What a grid barrier costs alone, then with a barrier every M bytes per SM: how each mode
  // streams across dependencies.
  std::printf("\n# barrier alone: blocks/SM threads backoff_ns | us per barrier\n");
  for (unsigned backoff : {0u, 32u, 128u})
    if (!rotate_only)
      for (int bps : {1, 4}) {
        const int T = bps == 1 ? 512 : 128, grid = b.sms * bps, n = 2000;
        b.backoff = backoff;
        const double ms = b.median_ms(0, 0, 0, [&](Args a) {
          int nn = n;
          void* args[] = {&a, &nn};
          launch(reinterpret_cast<const void*>(&barrier_kernel), grid, T, 0, args);
        });
        std::printf("barrier alone %d %d %3u | %6.3f\n", bps, T, backoff, ms * 1e3 / n);
      }
  std::printf("\n# barriers: mode config barrierKB/SM backoff_ns | GB/s, time in a barrier per block\n");
  for (unsigned backoff : {0u, 32u, 128u})
    for (int64_t mkb : {0, 1024, 512, 256, 128}) {
      b.backoff = backoff;
      if ((backoff && !mkb) || rotate_only) continue;
      {  // regs as the rows kernel: 128 x 4, 8 loads, a block barrier per group
        const int T = 128, bps = 4, grid = b.sms * bps;
        const int64_t bb = per_block(kTotal, grid), m = mkb * 1024 / bps;
        const double g = b.gbps(bb * grid, bb, m, regs_launch(8, grid, T, true));
        std::printf("barrier regs T128x4 N8 sync %4lld %3u | %6.0f %s\n", static_cast<long long>(mkb),
                    backoff, g, b.wait_us(grid, bb, m).c_str());
      }
      {  // regs at 512 x 4, 4 loads: 128 KB in flight
        const int T = 512, bps = 4, grid = b.sms * bps;
        const int64_t bb = per_block(kTotal, grid), m = mkb * 1024 / bps;
        if (occupancy(regs_for(4), T, 0) >= bps) {
          const double g = b.gbps(bb * grid, bb, m, regs_launch(4, grid, T, false));
          std::printf("barrier regs T512x4 N4 %4lld %3u | %6.0f %s\n", static_cast<long long>(mkb), backoff,
                      g, b.wait_us(grid, bb, m).c_str());
        }
      }
      for (auto [skb, ring] :
           {std::pair{8, 192}, {16, 192}, {16, 128}, {16, 64}}) {  // bulk, 8 consumers, 1 block/SM
        const int grid = b.sms, threads = 9 * kWarp;
        const size_t smem = size_t{1024} * ring;
        const int64_t bb = per_block(kTotal, grid), m = mkb * 1024;
        const int ns = ring / skb;
        if (occupancy(bk, threads, smem) < 1) fail("a bulk block of {} bytes does not fit", smem);
        const double g = b.gbps(bb * grid, bb, m, bulk_launch(grid, threads, smem, skb * 1024, ns));
        std::printf("barrier bulk %dKBx%d %4lld %3u | %6.0f %s\n", skb, ns, static_cast<long long>(mkb),
                    backoff, g, b.wait_us(grid, bb, m).c_str());
      }
    }

  b.backoff = 0;
  if (barriers_only) return 0;
  if (rotate_only) {  // the rows kernel's configuration, each block's start rotated or not
    std::printf("\n# rotated: mode barrierKB/SM rotate | GB/s, time in a barrier per block\n");
    for (int64_t mkb : {0, 512, 128})
      for (int rot = 0; rot < 2; ++rot) {
        const int T = 128, bps = 4, grid = b.sms * bps;
        const int64_t bb = per_block(kTotal, grid), m = mkb * 1024 / bps;
        b.rotate = rot;
        const double g = b.gbps(bb * grid, bb, m, regs_launch(8, grid, T, true));
        std::printf("rotated regs T128x4 N8 sync %4lld %d | %6.0f %s\n", static_cast<long long>(mkb), rot, g,
                    b.wait_us(grid, bb, m).c_str());
      }
  }
  // The rows kernel's configuration (128 threads x 4 blocks, 8 loads, a block barrier per
  // group) on the bytes of 8b-int4's GEMVs, 32 launches back to back.
  std::printf("\n# per kernel: GEMV MB blocks groups rotate | us each, GB/s\n");
  for (int rot = 0; rot < (rotate_only ? 2 : 1); ++rot)
    for (auto [name, mb] : {std::pair{"qkv", 13.4}, {"o", 8.9}, {"gate/up", 62.4}, {"down", 31.2}}) {
      b.rotate = rot;
      // As balanced_grid (kernels/gemv.cu) splits a matrix's 16 KB groups over 4 x SMs slots.
      const int T = 128;
      const int64_t group = int64_t{T} * 8 * 16, groups = static_cast<int64_t>(mb * 1e6) / group;
      const int64_t per = (groups + 4 * b.sms - 1) / (4 * b.sms);
      const int grid = static_cast<int>((groups + per - 1) / per);
      const int64_t bb = per * group;
      const double us = b.us_each(bb * grid, bb, 32, regs_launch(8, grid, T, true));
      std::printf("kernel %-8s %5.1f MB %4d blocks x %lld groups %d | %6.2f %6.0f\n", name, bb * grid / 1e6,
                  grid, static_cast<long long>(per), rot, us, bb * grid / (us * 1e3));
    }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decodebench_flight_bench: %s\n", e.what());
    return 1;
  }
}
