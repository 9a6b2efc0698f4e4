// A backend: the environment of a run (the device, its measured bandwidth and clocks) and a
// Decoder for one run's weights (decoder.h). The protocol, the statistics and the Result
// are the same for every backend (src/measure/, src/run/run.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "decodebench/decoder.h"
#include "decodebench/energy.h"
#include "decodebench/kernel_registry.h"
#include "decodebench/result.h"
#include "decodebench/weights.h"

namespace db {

// What a backend records of the machine as a run starts.
struct Environment {
  DeviceInfo device;         // with the measured read bandwidth and the clocks at the start
  std::string cuda_runtime;  // version, empty on the cpu backend
};

// What a decoder is built for, apart from its weights and kernel.
struct DecoderSpec {
  int64_t positions = 0;    // KV cache capacity: context + max(tokens, warmup)
  int64_t batch = 1;        // sequences decoded in lockstep, each with its own KV cache (--batch)
  bool graph = false;       // replay one captured CUDA graph per step (cuda)
  std::string weights_key;  // weights_key() of the run, for BackendReuse
  // --kernel auto: a matrix the kernel cannot take runs a kernel that can (cuda), recorded in
  // DecoderFacts::kernel_fallbacks; a named kernel that cannot take one is refused.
  bool kernel_fallback = false;
};

// What a backend may keep between the runs of a sequence (the sweep) so that the next run
// need not repeat the work: the CUDA backend keeps its device weights here. Opaque to all but
// the backend that fills it (builds without CUDA compile it as it is); `key` says what `state`
// was built for, and a backend releases a state of another key before it builds its own.
struct BackendReuse {
  std::string key;                    // in the backend's own terms, prefixed with its name
  std::shared_ptr<const void> state;  // null: nothing kept
  int64_t reused = 0;                 // runs that found their state here
};

// A measured matrix-multiply throughput: the compute floor's denominator.
struct ComputePeak {
  double TFLOPS = 0;  // 0: not measured
  std::string probe;  // what ran, for device.compute_probe
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Environment environment() = 0;
  // The throughput of the math a step of `scheme` weights runs on, measured in this process
  // (device.peak_compute_TFLOPS); the default measures nothing.
  virtual ComputePeak compute_peak(Scheme) { return {}; }
  // The most sequences a decoder of this backend decodes in lockstep (DecoderSpec::batch).
  virtual int64_t max_batch() const { return 1; }
  // `reuse`: null, or the state kept for a sequence of runs (see BackendReuse).
  virtual std::unique_ptr<Decoder> decoder(const WeightSource& weights, const KernelInfo& kernel,
                                           const DecoderSpec& spec, BackendReuse* reuse) = 0;
  // The counter a run's energy is read from (energy.h), or null with why not in `why`.
  virtual std::unique_ptr<EnergySource> energy_source(std::string& why) {
    why = "this backend has no energy counter";
    return nullptr;
  }
  // The clocks and throttle state now (at the run's end), where the backend can read them.
  virtual std::optional<ClockState> clock_state() = 0;
  // The decoder is the CPU float32 reference itself (--check has nothing to compare).
  virtual bool is_reference() const { return false; }
};

std::unique_ptr<Backend> make_cpu_backend();
// Throws db::Error when the binary has no CUDA backend or no usable GPU.
std::unique_ptr<Backend> make_cuda_backend(int device);

// Device description + measured read bandwidth for `info` (throws like make_cuda_backend).
DeviceInfo cuda_device_info(int device, bool measure_bandwidth);

// Host streaming-read bandwidth (GB/s) measured over a buffer several times the caches.
double measure_host_read_GBps(int threads);

// Host float32 multiply-add throughput (TFLOPS): a register-blocked matrix-multiply loop on
// `threads` threads, the best of several passes.
double measure_host_TFLOPS(int threads);

}  // namespace db
