// What the compare tests build: samples drawn from a normal distribution the same on every
// standard library, and results with every field set, timed by those samples and with their
// energy measured.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "decodebench/energy.h"
#include "decodebench/result.h"
#include "decodebench/stats.h"

namespace db_test {

// n samples of N(mean, sd): Box-Muller on mt19937_64's raw output, which the standard
// fixes (std::normal_distribution's sequence differs between standard libraries).
inline std::vector<double> normal_samples(size_t n, double mean, double sd, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto uniform = [&]() { return (static_cast<double>(rng() >> 11) + 1) * 0x1p-53; };  // (0, 1]
  std::vector<double> v(n);
  for (double& x : v)
    x = mean + sd * std::sqrt(-2 * std::log(uniform())) * std::cos(2 * 3.14159265358979323846 * uniform());
  return v;
}

// A result with every field set (as a run writes it), timed by `samples`.
inline db::Result full_result(const std::string& model, const std::vector<double>& samples,
                              const std::string& device = "NVIDIA H200", double peak_GBps = 4100) {
  db::Result r;
  r.tool.version = "0.1.0";
  r.tool.git_commit = "abc1234";
  r.tool.build_type = "Release";
  r.tool.cuda_runtime = "13.0";
  r.tool.cublas = "13.0.2";
  r.time = "2025-01-02T03:04:05Z";
  r.command = "decodebench --model " + model;
  r.device.backend = "cuda";
  r.device.name = device;
  r.device.uuid = "GPU-1234";
  r.device.compute_capability = "9.0";
  r.device.sm_count = 132;
  r.device.memory_bytes = 150'000'000'000ull;
  r.device.l2_bytes = 62'914'560;
  r.device.driver = "580.65";
  r.device.ecc = true;
  r.device.power_limit_w = 700;
  db::ClockState clock;
  clock.sm_clock_mhz = 1980;
  clock.mem_clock_mhz = 3201;
  clock.temperature_c = 40;
  clock.power_w = 120.5;
  r.device.start = clock;
  r.device.end = clock;
  r.device.theoretical_GBps = 4800;
  r.device.peak_read_GBps = peak_GBps;
  r.device.cpu_threads = 16;
  r.config.model = model;
  r.config.arch = "llama";
  r.config.weights = "synthetic";
  r.config.seed = 7;
  r.config.scheme = "int4";
  r.config.group_size = 128;
  r.config.zero_point = true;
  r.config.lm_head_scheme = "fp16";
  r.config.kernel = "int4.gemv";
  r.config.graph = true;
  r.config.context = 512;
  r.config.tokens = 40;
  r.config.warmup = 16;
  r.config.repeat = 5;
  r.config.params = 8'030'261'248;
  r.bytes.position_first = 512;
  r.bytes.position_last = 551;
  r.bytes.per_token.linear_weights = 3'758'096'384;
  r.bytes.per_token.total = 5'170'216'960;
  r.bytes.stored.total = 5'670'183'000;
  r.timing.samples_ms = samples;
  r.timing.tpot_ms = db::compute_stats(samples);
  r.timing.tokens_per_s = 1000 / r.timing.tpot_ms.median;
  r.timing.load_s = 2.5;
  r.timing.prefill_s = 0.25;
  r.timing.clock = "cuda-events";
  r.roofline.floor_tpot_ms = 5'170'216'960 / (peak_GBps * 1e9) * 1e3;
  r.roofline.achieved_GBps = 5'170'216'960 / (r.timing.tpot_ms.median * 1e-3) / 1e9;
  r.roofline.efficiency = r.roofline.floor_tpot_ms / r.timing.tpot_ms.median;
  r.roofline.regime = "bandwidth-bound";
  r.roofline.regime_reason = "efficiency >= 0.75";
  r.memory.weights_bytes = 5'670'183'000;
  r.memory.kv_cache_bytes = 1'073'741'824;
  r.memory.scratch_bytes = 2'097'152;
  r.memory.total_bytes = 6'746'021'976;
  r.check.tokens_hash = "cbf29ce484222325";
  r.check.tokens = {1, 2, 3};
  r.check.reference = "";
  return r;
}

// `r` with its energy measured: five repetitions of J/step drawn around `j_per_step`.
inline db::Result with_energy(db::Result r, double j_per_step, uint64_t seed, double sd = 0.003) {
  const std::vector<double> per_step = normal_samples(5, j_per_step, sd * j_per_step, seed);
  db::Energy& e = r.energy;
  e.source = "nvml total energy counter";
  e.reason = "";
  e.repetition_j.clear();
  e.repetition_s.clear();
  for (double j : per_step) {
    e.repetition_j.push_back(j * static_cast<double>(r.config.tokens));
    e.repetition_s.push_back(0.04);
  }
  e.j_per_step = db::repetition_spread(per_step);
  return r;
}

inline db::Result energy_run(double tpot, double j_per_step, uint64_t seed) {
  return with_energy(full_result("a", normal_samples(200, tpot, 0.003, seed)), j_per_step, seed + 100);
}

}  // namespace db_test
