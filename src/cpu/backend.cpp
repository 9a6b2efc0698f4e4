// The CPU backend: a Decoder over the float32 reference model, timed with the host clock.
// Correct and slow; it exists for checks and for CI, where there is no GPU.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <numeric>
#include <thread>

#include "decodebench/backend.h"
#include "decodebench/cpu_reference.h"
#include "decodebench/error.h"

namespace db {

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

// Steps run synchronously on the host, so a host timestamp after each one times it.
class HostClock final : public StepClock {
 public:
  const char* name() const override { return "host"; }
  void start(int64_t steps) override {
    marks_.clear();
    marks_.reserve(static_cast<size_t>(steps) + 1);
    marks_.push_back(Clock::now());
  }
  void mark() override { marks_.push_back(Clock::now()); }
  std::vector<double> stop() override {
    std::vector<double> ms;
    for (size_t i = 1; i < marks_.size(); ++i)
      ms.push_back(std::chrono::duration<double, std::milli>(marks_[i] - marks_[i - 1]).count());
    return ms;
  }

 private:
  std::vector<Clock::time_point> marks_;
};

class CpuDecoder final : public Decoder {
 public:
  CpuDecoder(const WeightSource& weights, int64_t positions) {
    const auto t0 = Clock::now();
    model_ = std::make_unique<CpuModel>(weights, positions);
    load_s_ = std::chrono::duration<double>(Clock::now() - t0).count();
  }

  void prefill(int64_t n) override {
    for (int64_t i = 0; i < n; ++i) model_->step(prompt_token(i, model_->config().vocab_size), i);
  }
  void restart(int64_t position, int32_t token) override {
    pos_ = position;
    token_ = token;
    generated_.clear();
  }
  void step() override {
    logits_ = &model_->step(token_, pos_++);
    token_ = CpuModel::argmax(*logits_);
    generated_.push_back(token_);
  }
  void synchronize() override {}
  int32_t read_token() override { return token_; }
  std::vector<int32_t> tokens(int64_t n) override {
    return {generated_.begin(),
            generated_.begin() + std::min<int64_t>(n, static_cast<int64_t>(generated_.size()))};
  }
  std::vector<float> logits() override { return logits_ ? *logits_ : std::vector<float>{}; }
  StepClock& clock() override { return clock_; }
  DecoderFacts facts() override {
    DecoderFacts f;
    f.load_s = load_s_;
    f.memory.weights_bytes = model_->weight_bytes();
    f.memory.kv_cache_bytes = model_->kv_cache_bytes();
    f.memory.total_bytes = f.memory.weights_bytes + f.memory.kv_cache_bytes;
    return f;
  }

 private:
  std::unique_ptr<CpuModel> model_;
  double load_s_ = 0;
  int64_t pos_ = 0;
  int32_t token_ = 0;
  std::vector<int32_t> generated_;
  const std::vector<float>* logits_ = nullptr;
  HostClock clock_;
};

class CpuBackend final : public Backend {
 public:
  Environment environment() override {
    Environment e;
    DeviceInfo& d = e.device;
    d.backend = "cpu";
    d.name = cpu_model_name();
    d.cpu_threads = CpuModel::default_threads();
    d.peak_read_GBps = measure_host_read_GBps(d.cpu_threads);
    return e;
  }
  // The reference has one way to multiply (dequantize, then dot in float32) whatever the
  // kernel, and makes its float32 model per run: nothing is kept in `reuse`.
  std::unique_ptr<Decoder> decoder(const WeightSource& weights, const KernelInfo&, const DecoderSpec& spec,
                                   BackendReuse*) override {
    return std::make_unique<CpuDecoder>(weights, spec.positions);
  }
  std::optional<ClockState> clock_state() override { return std::nullopt; }
  bool is_reference() const override { return true; }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace db
