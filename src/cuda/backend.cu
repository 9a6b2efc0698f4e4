// The CUDA backend: device discovery and checks, its environment, and the Decoder over an
// Engine with its clock (CUDA events between steps).
#include <cublas_v2.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common.cuh"
#include "decodebench/backend.h"
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

std::string cublas_version() {
  cublasHandle_t h;
  int v = 0;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return "";
  cublasGetVersion(h, &v);
  cublasDestroy(h);
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
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

// CUDA events recorded in the stream between steps: each interval is GPU time, and recording
// them does not make the host wait. The events are made once and reused by every repetition.
class EventClock final : public StepClock {
 public:
  explicit EventClock(cudaStream_t stream) : stream_(stream) {}
  ~EventClock() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  const char* name() const override { return "cuda-events"; }
  void start(int64_t steps) override {
    while (events_.size() < static_cast<size_t>(steps) + 1) {
      cudaEvent_t e;
      CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    marks_ = 0;
    CUDA_CHECK(cudaEventRecord(events_[0], stream_));
  }
  void mark() override { CUDA_CHECK(cudaEventRecord(events_[++marks_], stream_)); }
  std::vector<double> stop() override {
    std::vector<double> ms(marks_);
    for (size_t i = 0; i < marks_; ++i) {
      float t = 0;
      CUDA_CHECK(cudaEventElapsedTime(&t, events_[i], events_[i + 1]));
      ms[i] = t;
    }
    return ms;
  }

 private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  size_t marks_ = 0;
};

class CudaDecoder final : public Decoder {
 public:
  // `kv`: the run's KV cache scheme (reused weights carry the config of the run that loaded them).
  CudaDecoder(std::shared_ptr<const DeviceWeights> weights, const KernelInfo& kernel, const DecoderSpec& spec,
              KvScheme kv, bool weights_reused, Clock::time_point load_start)
      : engine_(std::move(weights), kernel, spec.positions, spec.kernel_fallback, spec.batch, kv),
        graph_(spec.graph),
        cublas_(runs_cublas(kernel.impl)),
        weights_reused_(weights_reused),
        clock_(engine_.stream()) {
    load_s_ = std::chrono::duration<double>(Clock::now() - load_start).count();
  }

  int64_t batch() const override { return engine_.batch(); }
  // The prompt in chunks through GEMMs and causal attention (Engine::prefill), a sequence at
  // a time into its own cache.
  void prefill(int64_t n) override {
    const int64_t vocab = engine_.config().vocab_size;
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (int64_t s = 0; s < engine_.batch(); ++s) {
      for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = prompt_token(s, i, vocab);
      engine_.prefill(tokens, 0, s);
    }
  }
  void restart(int64_t position, const std::vector<int32_t>& tokens) override {
    engine_.set_first_position(position);
    engine_.set_inputs(position, tokens);
  }
  void step() override {
    if (graph_)
      engine_.launch_graph();
    else
      engine_.enqueue_step();
  }
  void synchronize() override { engine_.synchronize(); }
  std::vector<int32_t> read_tokens() override { return engine_.next_tokens(); }
  std::vector<int32_t> tokens(int64_t s, int64_t n) override { return engine_.tokens(s, n); }
  std::vector<float> logits(int64_t s) override { return engine_.logits(s); }
  StepClock& clock() override { return clock_; }

  DecoderFacts facts() override {
    DecoderFacts f;
    f.load_s = load_s_;
    f.weights_reused = weights_reused_;
    f.memory = engine_.memory();
    f.launches_per_step = engine_.launches_per_step();
    f.launch_overhead_us = measure_launch_us(graph_);
    if (cublas_) f.cublas = cublas_version();
    f.kernel_fallbacks = engine_.linear_plan().fallbacks();
    f.kernel_shapes = engine_.skinny_shapes();
    f.batched_paths = engine_.linear_plan().batched_path_lines();
    f.prefill = "batched";
    f.prefill_attention = engine_.prefill_attention_kernel();
    return f;
  }

 private:
  Engine engine_;
  bool graph_;
  bool cublas_;  // the kernel calls cuBLAS: its version goes in the result
  bool weights_reused_;
  double load_s_ = 0;
  EventClock clock_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) { check_device(device); }

  Environment environment() override {
    Environment e;
    int rt = 0;
    CUDA_CHECK(cudaRuntimeGetVersion(&rt));
    e.cuda_runtime = version_of(rt);
    e.device = describe_device(device_, true);
    return e;
  }

  // load_s is what the decoder took: loading the weights (unless reused) and the engine's setup.
  std::unique_ptr<Decoder> decoder(const WeightSource& weights, const KernelInfo& kernel,
                                   const DecoderSpec& spec, BackendReuse* reuse) override {
    const auto load0 = Clock::now();
    bool reused = false;
    auto w = device_weights(spec, weights, kernel, reuse, reused);
    return std::make_unique<CudaDecoder>(std::move(w), kernel, spec, weights.config().kv_cache, reused,
                                         load0);
  }

  // The compute floor's throughput (device.peak_compute_TFLOPS): a cuBLAS GEMM at the math a
  // step runs on, fp16 A and B with fp32 accumulation (CUBLAS_COMPUTE_32F), 8192 x 8192 x 8192
  // or smaller where free memory is short, the fastest of ten timed passes (measure_gemm_peak,
  // kernels/probe.cu). int8 and int4 weights are dequantized to fp16 before the mma, so every
  // scheme measures the same fp16 GEMM; it runs once per device and process, and later calls
  // (every run of a sweep) return that first result.
  ComputePeak compute_peak(Scheme) override {
    CUDA_CHECK(cudaSetDevice(device_));
    return measure_gemm_peak();
  }
  // The most sequences the engine decodes in lockstep; --batch above it is refused by the run
  // before anything loads.
  int64_t max_batch() const override { return Engine::kMaxBatch; }

  // NVML's total energy counter and the clocks (nvml.h).
  std::unique_ptr<EnergySource> energy_source(std::string& why) override {
    char bus[32] = {};
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device_));
    return make_nvml_energy_source(bus, why);
  }

  std::optional<ClockState> clock_state() override {
    char bus[32] = {};
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device_));
    if (auto nvml = Nvml::open(bus)) return nvml->snapshot();
    return std::nullopt;
  }

 private:
  // The run's device weights: the ones a previous run left in `reuse` when they were made for
  // the same weights (weights_key), device and layout (the kernel's: weight_layout), else
  // loaded. Only one set is resident at a time: the kept one is freed before loading another
  // (the previous run's engine is gone by now), so the free-memory checks see that memory.
  std::shared_ptr<const DeviceWeights> device_weights(const DecoderSpec& spec, const WeightSource& ws,
                                                      const KernelInfo& kernel, BackendReuse* reuse,
                                                      bool& reused) {
    const std::string key = fmt::format(
        "cuda\x1f{}\x1f"
        "device {}\x1f"
        "layout {}",
        spec.weights_key, device_, weight_layout(ws.config(), kernel, spec.batch).name());
    if (reuse && reuse->state && reuse->key == key) {
      ++reuse->reused;
      reused = true;
      return std::static_pointer_cast<const DeviceWeights>(reuse->state);  // the "cuda" key: ours
    }
    if (reuse) {
      reuse->state.reset();
      reuse->key.clear();
    }
    std::shared_ptr<const DeviceWeights> w =
        load_device_weights(ws, kernel, spec.positions, spec.kernel_fallback, spec.batch);
    if (reuse) {
      reuse->key = key;
      reuse->state = w;
    }
    return w;
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
