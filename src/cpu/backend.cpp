// The CPU backend: the float32 reference decode loop with host-clock timing. Correct and
// slow; it exists for checks and for CI, where there is no GPU.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <numeric>
#include <thread>

#include "decodebench/backend.h"
#include "decodebench/cpu_reference.h"
#include "decodebench/error.h"
#include "decodebench/synth.h"

namespace db {

int32_t prompt_token(int64_t index, int64_t vocab) {
  return static_cast<int32_t>(synth::mix64(0x70726f6d7074ull ^ static_cast<uint64_t>(index)) %
                              static_cast<uint64_t>(vocab));
}

double measure_host_read_GBps(int threads) {
  // 256 MiB of floats: far past any CPU cache; the best of three passes.
  const size_t n = (256u << 20) / sizeof(float);
  std::vector<float> buf(n, 1.0f);
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    std::vector<double> partial(static_cast<size_t>(threads), 0.0);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t b = n * t / threads, e = n * (t + 1) / threads;
        partial[t] = std::accumulate(buf.begin() + b, buf.begin() + e, 0.0);
      });
    }
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (std::accumulate(partial.begin(), partial.end(), 0.0) != static_cast<double>(n))
      fail("host bandwidth probe: bad sum");
    best = std::max(best, static_cast<double>(n * sizeof(float)) / s / 1e9);
  }
  return best;
}

namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

class CpuBackend final : public Backend {
 public:
  BackendRun run(const RunSpec& spec, const WeightSource& weights, const KernelInfo& kernel,
                 BackendReuse* reuse) override {
    (void)kernel;  // the reference has one way to multiply: dequantize, then dot in float32
    (void)reuse;   // the float32 model is made per run (its load_s says how long that takes)
    BackendRun out;
    out.clock = "host";
    const ModelConfig& c = weights.config();
    const int64_t positions = spec.context + std::max(spec.tokens, spec.warmup);

    auto t0 = Clock::now();
    CpuModel model(weights, positions);
    out.load_s = ms_since(t0) / 1e3;

    t0 = Clock::now();
    for (int64_t i = 0; i < spec.context; ++i) model.step(prompt_token(i, c.vocab_size), i);
    out.prefill_s = ms_since(t0) / 1e3;

    const int32_t first = prompt_token(spec.context, c.vocab_size);
    int32_t token = first;
    for (int64_t i = 0; i < spec.warmup; ++i) token = CpuModel::argmax(model.step(token, spec.context + i));

    for (int64_t r = 0; r < spec.repeat; ++r) {
      token = first;
      std::vector<int32_t> tokens;
      for (int64_t i = 0; i < spec.tokens; ++i) {
        const auto s0 = Clock::now();
        token = CpuModel::argmax(model.step(token, spec.context + i));
        out.samples_ms.push_back(ms_since(s0));
        tokens.push_back(token);
      }
      // Every repetition restarts at --context from the same token: the same tokens, or the
      // step is not a function of its inputs (as the CUDA backend checks too).
      if (r == 0)
        out.tokens = tokens;
      else if (tokens != out.tokens)
        fail(
            "repetition {} generated different tokens than repetition 0: the decode step is not "
            "deterministic",
            r);
    }
    if (spec.check) {
      out.logits_max_rel_err = 0.0;
      out.reference = "the cpu backend is the float32 reference itself";
    }

    DeviceInfo& d = out.device;
    d.backend = "cpu";
    d.name = cpu_model_name();
    d.cpu_threads = model.threads();
    d.peak_read_GBps = measure_host_read_GBps(model.threads());
    out.memory.weights_bytes = model.weight_bytes();
    out.memory.kv_cache_bytes = model.kv_cache_bytes();
    out.memory.total_bytes = out.memory.weights_bytes + out.memory.kv_cache_bytes;
    return out;
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace db
