// The CPU backend: a Decoder over the float32 reference model, timed with the host clock.
// Correct and slow; it exists for checks and for CI, where there is no GPU.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <thread>

#include "decodebench/backend.h"
#include "decodebench/cpu_reference.h"
#include "decodebench/error.h"

namespace db {

namespace {

// The best of three passes of `work` on `threads` threads: `work(t)` returns thread t's
// partial result, `check` sees every pass's partials, and the rate is `amount` per second.
template <class Work, class Check>
double best_rate(int threads, double amount, Work work, Check check) {
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    std::vector<double> partial(static_cast<size_t>(threads), 0.0);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { partial[t] = work(t); });
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    check(partial);
    best = std::max(best, amount / s);
  }
  return best;
}

}  // namespace

double measure_host_read_GBps(int threads) {
  // 256 MiB of floats: far past any CPU cache; the best of three passes.
  const size_t n = (256u << 20) / sizeof(float);
  std::vector<float> buf(n, 1.0f);
  const auto read = [&](int t) {
    const size_t b = n * t / threads, e = n * (t + 1) / threads;
    return std::accumulate(buf.begin() + b, buf.begin() + e, 0.0);
  };
  const auto check = [&](const std::vector<double>& partial) {
    if (std::accumulate(partial.begin(), partial.end(), 0.0) != static_cast<double>(n))
      fail("host bandwidth probe: bad sum");
  };
  return best_rate(threads, static_cast<double>(n * sizeof(float)) / 1e9, read, check);
}

double measure_host_TFLOPS(int threads) {
  // C [4, 8] += A [K, 4]^T B [K, 8]: 32 accumulators the compiler keeps in vector registers,
  // 8 independent chains of adds per column group; A and B (9 KB) stay in L1, so the loop
  // measures arithmetic, not memory.
  constexpr int M = 4, N = 8, K = 256;
  constexpr int64_t kReps = 8000;
  const auto multiply = [](int) {
    std::vector<float> a(M * K), b(N * K);
    for (size_t i = 0; i < a.size(); ++i) a[i] = 1e-3f * static_cast<float>(static_cast<int>(i % 7) - 3);
    for (size_t i = 0; i < b.size(); ++i) b[i] = 1e-3f * static_cast<float>(static_cast<int>(i % 5) - 2);
    float c[M][N] = {};
    for (int64_t rep = 0; rep < kReps; ++rep)
      for (int k = 0; k < K; ++k)
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) c[i][j] += a[k * M + i] * b[k * N + j];
    double sum = 0;
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) sum += c[i][j];
    return sum;
  };
  const auto check = [](const std::vector<double>& partial) {
    for (double p : partial)
      if (!std::isfinite(p)) fail("host compute probe: a non-finite sum");
  };
  return best_rate(threads, 2.0 * M * N * K * static_cast<double>(kReps) * threads / 1e12, multiply, check);
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

// Runs the reference at the decoder's batch: one CpuModel of B sequences, each step
// decoding every sequence's token and taking its argmax as the sequence's next input.
class CpuDecoder final : public Decoder {
 public:
  CpuDecoder(const WeightSource& weights, int64_t positions, int64_t batch) {
    const auto t0 = Clock::now();
    model_ = std::make_unique<CpuModel>(weights, positions, 0, batch);
    load_s_ = std::chrono::duration<double>(Clock::now() - t0).count();
    tokens_.assign(static_cast<size_t>(batch), 0);
    generated_.resize(static_cast<size_t>(batch));
  }

  void prefill(int64_t n) override {
    const int64_t vocab = model_->config().vocab_size;
    std::vector<int32_t> prompt(tokens_.size());
    for (int64_t i = 0; i < n; ++i) {
      for (size_t s = 0; s < prompt.size(); ++s) prompt[s] = prompt_token(static_cast<int64_t>(s), i, vocab);
      model_->step_batch(prompt, i);
    }
  }
  int64_t batch() const override { return model_->batch(); }
  void restart(int64_t position, const std::vector<int32_t>& tokens) override {
    if (tokens.size() != tokens_.size())
      fail("cpu decoder: {} restart tokens for a batch of {}", tokens.size(), tokens_.size());
    pos_ = position;
    tokens_ = tokens;
    for (std::vector<int32_t>& g : generated_) g.clear();
  }
  void step() override {
    stepped_ = true;
    model_->step_batch(tokens_, pos_++);
    for (size_t s = 0; s < tokens_.size(); ++s) {
      tokens_[s] = CpuModel::argmax(model_->logits(static_cast<int64_t>(s)));
      generated_[s].push_back(tokens_[s]);
    }
  }
  void synchronize() override {}
  std::vector<int32_t> read_tokens() override { return tokens_; }
  std::vector<int32_t> tokens(int64_t s, int64_t n) override {
    const std::vector<int32_t>& g = generated_.at(static_cast<size_t>(s));
    return {g.begin(), g.begin() + std::min<int64_t>(n, static_cast<int64_t>(g.size()))};
  }
  std::vector<float> logits(int64_t s) override {
    return stepped_ ? model_->logits(s) : std::vector<float>{};
  }
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
  std::vector<int32_t> tokens_;                  // [batch] each sequence's next input
  std::vector<std::vector<int32_t>> generated_;  // [batch] the tokens since the restart
  bool stepped_ = false;
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
    d.power_limit_w = rapl_power_limit_w(kPowercapRoot).value_or(0);
    return e;
  }
  // The reference dequantizes every scheme to float32 and multiplies there.
  ComputePeak compute_peak(Scheme) override {
    const int threads = CpuModel::default_threads();
    return {measure_host_TFLOPS(threads),
            fmt::format("float32 multiply-add loop, 4x8 register tile, {} threads", threads)};
  }
  int64_t max_batch() const override { return std::numeric_limits<int64_t>::max(); }
  // The reference has one way to multiply (dequantize, then dot in float32) whatever the
  // kernel, and makes its float32 model per run: nothing is kept in `reuse`.
  std::unique_ptr<Decoder> decoder(const WeightSource& weights, const KernelInfo&, const DecoderSpec& spec,
                                   BackendReuse*) override {
    return std::make_unique<CpuDecoder>(weights, spec.positions, spec.batch);
  }
  // RAPL, where the kernel exposes it and lets this user read it.
  std::unique_ptr<EnergySource> energy_source(std::string& why) override {
    return make_rapl_source(kPowercapRoot, why);
  }
  std::optional<ClockState> clock_state() override { return std::nullopt; }
  bool is_reference() const override { return true; }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace db
