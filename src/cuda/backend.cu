// The CUDA backend: device discovery and checks, the timed decode loop, --check.
#include <cublas_v2.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common.cuh"
#include "decodebench/backend.h"
#include "decodebench/cpu_reference.h"
#include "engine.cuh"
#include "nvml.h"
#include "probe.cuh"

#ifndef DB_CUDA_ARCHITECTURES
#define DB_CUDA_ARCHITECTURES "unknown"
#endif

namespace db {
namespace cuda {
namespace {

__global__ void arch_probe_kernel() {}

// No device, no driver, or a device this build has no code for: one clear error each.
void check_device(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    fail(
        "no CUDA GPU found (cudaGetDeviceCount: {}): this machine has no usable NVIDIA GPU and driver; "
        "run with --backend cpu for the CPU reference backend",
        e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
  if (device < 0 || device >= count) fail("--device {}: this machine has {} CUDA device(s)", device, count);
  CUDA_CHECK(cudaSetDevice(device));
  cudaFuncAttributes attr;
  if (cudaFuncGetAttributes(&attr, arch_probe_kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    fail(
        "GPU {} (compute capability {}.{}) is not among this build's CUDA architectures ({}): rebuild with "
        "-DCMAKE_CUDA_ARCHITECTURES={}{}",
        p.name, p.major, p.minor, DB_CUDA_ARCHITECTURES, p.major, p.minor);
  }
}

std::string version_of(int v) {
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

}  // namespace

DeviceInfo describe_device(int device, bool measure_bandwidth) {
  check_device(device);
  cudaDeviceProp p;
  CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceInfo d;
  d.backend = "cuda";
  d.name = p.name;
  d.compute_capability = fmt::format("{}.{}", p.major, p.minor);
  d.sm_count = p.multiProcessorCount;
  d.memory_bytes = p.totalGlobalMem;
  d.l2_bytes = static_cast<uint64_t>(p.l2CacheSize);
  char bus[32] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device));
  if (auto nvml = Nvml::open(bus)) {
    nvml->describe(d);
    d.start = nvml->snapshot();
  }
  if (measure_bandwidth) {
    // Many times the L2 (50 MB on H100/H200) and at most a quarter of what is free.
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const size_t bytes = std::min<size_t>(size_t{2} << 30, free_b / 4);
    d.peak_read_GBps = measure_read_GBps(bytes);
  }
  return d;
}

namespace {

using Clock = std::chrono::steady_clock;

struct Events {
  std::vector<cudaEvent_t> ev;
  explicit Events(size_t n) : ev(n) {
    for (auto& e : ev) CUDA_CHECK(cudaEventCreate(&e));
  }
  ~Events() {
    for (auto& e : ev) cudaEventDestroy(e);
  }
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) { check_device(device); }

  BackendRun run(const RunSpec& spec, const WeightSource& weights, const KernelInfo& kernel,
                 BackendReuse* reuse) override {
    BackendRun out;
    out.clock = "cuda-events";
    int rt = 0;
    CUDA_CHECK(cudaRuntimeGetVersion(&rt));
    out.cuda_runtime = version_of(rt);
    out.device = describe_device(device_, true);
    const ModelConfig& c = weights.config();
    const int64_t positions = spec.context + std::max(spec.tokens, spec.warmup);

    // load_s is what this run spent: loading the weights (unless reused) and the engine's setup.
    const auto load0 = Clock::now();
    Engine e(device_weights(spec, weights, kernel, positions, reuse, out.weights_reused), kernel, positions);
    out.load_s = std::chrono::duration<double>(Clock::now() - load0).count();
    out.memory = e.memory();
    out.launches_per_step = e.launches_per_step();
    if (kernel.name.find("cublas") != std::string::npos) {
      cublasHandle_t h;
      int v = 0;
      if (cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) {
        cublasGetVersion(h, &v);
        cublasDestroy(h);
        out.cublas = fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
      }
    }

    // Untimed prefill: the prompt, one token per step, eagerly (same kernels as the graph).
    auto t0 = Clock::now();
    e.set_first_position(0);
    for (int64_t i = 0; i < spec.context; ++i) {
      e.set_input(i, prompt_token(i, c.vocab_size));
      e.enqueue_step();
    }
    e.synchronize();
    out.prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
    e.set_first_position(spec.context);

    auto step = [&] {
      if (spec.graph)
        e.launch_graph();
      else
        e.enqueue_step();
    };
    const int32_t first = prompt_token(spec.context, c.vocab_size);
    e.set_input(spec.context, first);
    for (int64_t i = 0; i < spec.warmup; ++i) step();
    e.synchronize();

    // Timed: all steps of a repetition enqueued back to back, an event between steps.
    Events ev(static_cast<size_t>(spec.tokens) + 1);
    int32_t host_token = 0;
    for (int64_t r = 0; r < spec.repeat; ++r) {
      e.set_input(spec.context, first);
      CUDA_CHECK(cudaEventRecord(ev.ev[0], e.stream()));
      for (int64_t i = 0; i < spec.tokens; ++i) {
        step();
        CUDA_CHECK(cudaEventRecord(ev.ev[i + 1], e.stream()));
        if (spec.sync_per_token) host_token = e.next_token();  // a serving loop reads each token
      }
      e.synchronize();
      for (int64_t i = 0; i < spec.tokens; ++i) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, ev.ev[i], ev.ev[i + 1]));
        out.samples_ms.push_back(ms);
      }
      const std::vector<int32_t> toks = e.tokens(spec.tokens);
      if (spec.sync_per_token && host_token != toks.back())
        fail("the token read back per step ({}) differs from the recorded one ({})", host_token, toks.back());
      if (r == 0)
        out.tokens = toks;
      else if (toks != out.tokens)
        fail(
            "repetition {} generated different tokens than repetition 0: the decode step is not "
            "deterministic",
            r);
    }
    out.launch_overhead_us = measure_launch_us(spec.graph);

    if (spec.check) check_logits(spec, weights, e, out);

    char bus[32] = {};
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device_));
    if (auto nvml = Nvml::open(bus)) out.device.end = nvml->snapshot();
    return out;
  }

 private:
  // The run's device weights: the ones a previous run left in `reuse` when they were made for
  // the same weights (weights_key), device and layout (the kernel's: weight_layout), else
  // loaded. Only one set is resident at a time: the kept one is freed before loading another
  // (the previous run's engine is gone by now), so the free-memory checks see that memory.
  std::shared_ptr<const DeviceWeights> device_weights(const RunSpec& spec, const WeightSource& ws,
                                                      const KernelInfo& kernel, int64_t positions,
                                                      BackendReuse* reuse, bool& reused) {
    const std::string key = fmt::format(
        "cuda\x1f{}\x1f"
        "device {}\x1f"
        "layout {}",
        weights_key(spec, ws.config()), device_, weight_layout(ws.config(), kernel).name());
    if (reuse && reuse->state && reuse->key == key) {
      ++reuse->reused;
      reused = true;
      return std::static_pointer_cast<const DeviceWeights>(reuse->state);  // the "cuda" key: ours
    }
    if (reuse) {
      reuse->state.reset();
      reuse->key.clear();
    }
    std::shared_ptr<const DeviceWeights> w = load_device_weights(ws, kernel, positions);
    if (reuse) {
      reuse->key = key;
      reuse->state = w;
    }
    return w;
  }

  // Replays the first steps after the prefill with the CPU float32 reference on the same
  // weights, feeding both the GPU's tokens, and reports max |gpu - cpu| / max |cpu|.
  void check_logits(const RunSpec& spec, const WeightSource& weights, Engine& e, BackendRun& out) {
    const ModelConfig& c = weights.config();
    const int64_t steps = std::min<int64_t>(spec.tokens, 4);
    CpuModel cpu(weights, spec.context + steps);
    for (int64_t i = 0; i < spec.context; ++i) cpu.step(prompt_token(i, c.vocab_size), i);
    int32_t token = prompt_token(spec.context, c.vocab_size);
    e.set_input(spec.context, token);
    double worst = 0;
    for (int64_t i = 0; i < steps; ++i) {
      e.enqueue_step();
      const std::vector<float> g = e.logits();
      const std::vector<float>& r = cpu.step(token, spec.context + i);
      double diff = 0, ref = 0;
      for (size_t k = 0; k < r.size(); ++k) {
        diff = std::max(diff, static_cast<double>(std::fabs(g[k] - r[k])));
        ref = std::max(ref, static_cast<double>(std::fabs(r[k])));
      }
      worst = std::max(worst, ref > 0 ? diff / ref : diff);
      token = e.next_token();
    }
    out.logits_max_rel_err = worst;
    out.reference =
        fmt::format("cpu float32 reference on the same quantized weights, {} steps from position {}", steps,
                    spec.context);
  }

  int device_;
};

}  // namespace
}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<cuda::CudaBackend>(device);
}

DeviceInfo cuda_device_info(int device, bool measure_bandwidth) {
  return cuda::describe_device(device, measure_bandwidth);
}

}  // namespace db
