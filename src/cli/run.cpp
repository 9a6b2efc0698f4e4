// The run verb: config -> weights -> backend -> Result (accounting, statistics, roofline,
// regime) -> summary on stdout and, with -o, the result file.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <iostream>
#include <memory>
#include <optional>

#include "decodebench/adapter.h"
#include "decodebench/backend.h"
#include "decodebench/commands.h"
#include "decodebench/error.h"
#include "decodebench/printers.h"
#include "decodebench/roofline.h"

namespace db {
namespace {

std::string now_rfc3339() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string tokens_hash(const std::vector<int32_t>& tokens) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the little-endian int32 ids
  for (int32_t t : tokens) {
    for (int b = 0; b < 4; ++b) {
      h ^= (static_cast<uint32_t>(t) >> (8 * b)) & 0xffu;
      h *= 0x100000001b3ull;
    }
  }
  return fmt::format("{:016x}", h);
}

}  // namespace

ModelConfig run_model_config(const RunSpec& spec) {
  return config_for_weights(load_model_config(spec.model), {spec.quant, spec.group_size, spec.lm_head},
                            spec.weights);
}

std::string weights_key(const RunSpec& spec, const ModelConfig& cfg) {
  return fmt::format(
      "{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}", spec.model, to_string(cfg.quant.scheme),
      cfg.quant.group_size, cfg.quant.zero_point, to_string(cfg.quant.lm_head), spec.weights, spec.seed,
      spec.adapter,
      spec.adapter.empty() ? "" : (spec.adapter_mode == AdapterMode::external ? "external" : "merged"));
}

void check_batch_supported(const Backend& backend, BackendKind kind, int64_t batch) {
  const int64_t most = backend.max_batch();
  if (batch > most)
    fail(
        "--batch {}: the {} backend decodes at most {} sequence{} per step; run "
        "--batch {}, or --backend cpu for the reference at any batch",
        batch, to_string(kind), most, most == 1 ? "" : "s", most);
}

Result run_one(const RunSpec& spec, WeightReuse* reuse) {
  const ModelConfig cfg = run_model_config(spec);
  const int64_t positions = spec.context + std::max(spec.tokens, spec.warmup);
  if (positions > cfg.max_position_embeddings)
    fail("--context {} + max(--tokens, --warmup) {} = {} positions exceed max_position_embeddings {} of {}",
         spec.context, std::max(spec.tokens, spec.warmup), positions, cfg.max_position_embeddings, cfg.name);
  if (spec.group_size && cfg.quant.scheme != Scheme::int4 && cfg.quant.lm_head != Scheme::int4)
    usage_fail("--group-size applies to int4 weights only (this run's weights are {}, lm_head {})",
               to_string(cfg.quant.scheme), to_string(cfg.quant.lm_head));
  const KernelInfo& kernel = resolve_kernel(spec.kernel, cfg.quant.scheme);
  if (!cfg.group_size_note.empty()) warn_line(cfg.group_size_note);

  // The backend first: "no GPU" must be said before minutes of weight loading.
  std::unique_ptr<Backend> backend =
      spec.backend == BackendKind::cpu ? make_cpu_backend() : make_cuda_backend(spec.device);
  check_batch_supported(*backend, spec.backend, spec.batch);
  // The adapter next: it is validated against the model before any weight is read. Its
  // synthetic values come from the run's --seed, as the model's do.
  // With `reuse`, a source of the same key (same config, file, seed and adapter) is shared.
  const std::string key = weights_key(spec, cfg);
  std::shared_ptr<Adapter> adapter_holder;
  std::shared_ptr<WeightSource> weights_holder;
  if (reuse && reuse->weights && reuse->key == key) {
    adapter_holder = reuse->adapter;
    weights_holder = reuse->weights;
    ++reuse->reused;
  } else {
    if (reuse) {  // free the previous source (and then its adapter) before loading the next
      reuse->weights.reset();
      reuse->adapter.reset();
      reuse->key.clear();
    }
    if (!spec.adapter.empty())
      adapter_holder =
          std::make_shared<Adapter>(load_adapter(spec.adapter, cfg, spec.seed, spec.adapter_mode));
    weights_holder = std::make_shared<WeightSource>(cfg, spec.weights, spec.seed, adapter_holder.get());
    if (reuse) {
      reuse->key = key;
      reuse->adapter = adapter_holder;
      reuse->weights = weights_holder;
    }
  }
  const Adapter* adapter = adapter_holder.get();
  const WeightSource& weights = *weights_holder;

  Progress progress(fmt::format("{} on {}", spec.model, spec.backend == BackendKind::cpu ? "cpu" : "cuda"),
                    spec.progress);
  // The energy counter and the idle power first, before any probe has warmed the device.
  EnergyMeasurement energy;
  std::unique_ptr<EnergySampler> sampler;
  if (!spec.energy) {
    energy.reason = "not measured: --energy off";
  } else if (std::unique_ptr<EnergySource> source = backend->energy_source(energy.reason)) {
    energy.source = source->name();
    energy.clocks_reason = source->clocks_unavailable();
    sampler = std::make_unique<EnergySampler>(std::move(source));
    energy.sample_period_s = sampler->period_s();
    progress.phase("idle power");
    energy.idle = sampler->idle();
    energy.idle_observed = sampler->observed();
    // The repetitions' windows aligned on the counter's updates where it is coarse and the
    // idle power resolved, to subtract over their idle heads and tails.
    const WindowPlan plan = plan_windows(
        energy.idle_observed, idle_power_w(*energy.idle, energy.idle_observed), sampler->period_s());
    energy.window_why = plan.why;
    sampler->plan(plan);
  }
  progress.phase("device, bandwidth and compute probes");
  const Environment env = backend->environment();
  const ComputePeak compute = backend->compute_peak(cfg.quant.scheme);
  progress.phase("load");
  DecoderSpec ds;
  ds.positions = positions;
  ds.batch = spec.batch;
  ds.graph = spec.graph;
  ds.weights_key = key;
  ds.kernel_fallback = spec.kernel == "auto";
  std::unique_ptr<Decoder> decoder = backend->decoder(weights, kernel, ds, reuse ? &reuse->backend : nullptr);
  // A backend that raised max_batch() must also have built a decoder of that many sequences:
  // otherwise the run would time batch 1 and record it as --batch B.
  if (decoder->batch() != spec.batch)
    fail("the {} backend's decoder runs {} sequence(s) a step, not the --batch {} asked",
         to_string(spec.backend), decoder->batch(), spec.batch);
  Protocol protocol;
  protocol.context = spec.context;
  protocol.tokens = spec.tokens;
  protocol.warmup = spec.warmup;
  protocol.repeat = spec.repeat;
  protocol.sync_per_token = spec.sync_per_token;
  protocol.check = spec.check;
  protocol.max_noise = spec.max_noise;
  protocol.max_time_s = spec.max_time_s;
  const Measurement m =
      measure_decode(*decoder, protocol, weights, backend->is_reference(), &progress, sampler.get());
  if (sampler) {
    energy.windows = m.energy;
    energy.observed = sampler->observed();
  }
  const DecoderFacts facts = decoder->facts();

  Result r;
  r.tool.version = version_string();
  r.tool.git_commit = git_commit();
  r.tool.build_type = build_type();
  r.tool.cuda_runtime = env.cuda_runtime;
  r.tool.cublas = facts.cublas;
  r.time = now_rfc3339();
  r.command = spec.command_line;
  r.device = env.device;
  r.device.peak_compute_TFLOPS = compute.TFLOPS;
  r.device.compute_probe = compute.TFLOPS > 0 ? compute.probe : "";
  r.device.end = backend->clock_state();

  RunConfig& rc = r.config;
  rc.model = spec.model;
  rc.arch = to_string(cfg.arch);
  rc.weights = spec.weights.empty() ? "synthetic" : spec.weights;
  rc.weights_format = weights.format();
  rc.seed = spec.seed;
  rc.scheme = to_string(cfg.quant.scheme);
  rc.group_size = cfg.quant.scheme == Scheme::int4 ? cfg.quant.group_size : 0;
  rc.group_size_note = cfg.group_size_note;
  rc.zero_point = cfg.quant.scheme == Scheme::int4 && cfg.quant.zero_point;
  rc.lm_head_scheme = to_string(cfg.quant.lm_head);
  rc.kernel = spec.backend == BackendKind::cpu ? "cpu.reference" : kernel.name;
  rc.graph = spec.backend == BackendKind::cuda && spec.graph;
  if (adapter) {
    rc.adapter = spec.adapter;
    rc.adapter_mode = adapter->mode == AdapterMode::external ? "external" : "merged";
    rc.adapter_rank = adapter->rank;
    rc.adapter_targets = adapter->target_names();
    rc.adapter_scale = adapter->scale;
  }
  rc.context = spec.context;
  rc.tokens = spec.tokens;
  rc.warmup = spec.warmup;
  rc.repeat = spec.repeat;
  rc.batch = spec.batch;
  rc.sync_per_token = spec.sync_per_token;
  rc.params = parameter_count(cfg);
  rc.max_noise = spec.max_noise;
  rc.max_time_s = spec.max_noise > 0 ? spec.max_time_s : 0;

  const AdapterShape adapter_shape = adapter ? adapter->shape() : AdapterShape{};
  const int64_t last = spec.context + spec.tokens - 1;
  r.bytes =
      account_bytes(cfg, adapter_shape, spec.backend == BackendKind::cpu ? KernelTraffic{} : kernel.traffic,
                    spec.context, last, spec.batch);
  r.flops = account_flops(cfg, adapter_shape, spec.context, last, spec.batch);
  r.timing.samples_ms = m.samples_ms;
  r.timing.tpot_ms = compute_stats(m.samples_ms);
  r.timing.tokens_per_s = r.timing.tpot_ms.median > 0 ? 1e3 / r.timing.tpot_ms.median : 0;
  r.timing.aggregate_tokens_per_s = static_cast<double>(spec.batch) * r.timing.tokens_per_s;
  r.timing.load_s = facts.load_s;
  r.timing.weights_reused = facts.weights_reused;
  r.timing.prefill_s = m.prefill_s;
  r.timing.prefill = facts.prefill;
  r.timing.prefill_tokens_per_s = m.prefill_s > 0 ? static_cast<double>(spec.context) / m.prefill_s : 0;
  r.timing.clock = m.clock;
  r.timing.repetition_medians_ms = m.repetition_medians_ms;
  r.timing.noise = repetition_noise(m.repetition_medians_ms);
  r.timing.repetitions = static_cast<int64_t>(m.repetition_medians_ms.size());
  r.timing.stop = m.stop;

  r.config.kernel_fallbacks = facts.kernel_fallbacks;
  r.config.kernel_shapes = facts.kernel_shapes;
  r.roofline = compute_roofline(r, facts.launches_per_step, facts.launch_overhead_us);
  r.memory = facts.memory;

  r.check.tokens = m.tokens;
  r.check.tokens_hash = tokens_hash(m.tokens);
  for (const std::vector<int32_t>& t : m.sequence_tokens)
    r.check.sequence_tokens_hashes.push_back(tokens_hash(t));
  r.check.logits_checked = m.logits_max_rel_err.has_value();
  r.check.logits_max_rel_err = m.logits_max_rel_err.value_or(0.0);
  r.check.reference = m.reference;
  r.energy = summarize_energy(energy, spec.tokens, spec.batch);
  r.timing.warnings = run_warnings(r);
  return r;
}

int cmd_run(const RunSpec& spec) {
  if (spec.runs > 1) {
    std::vector<Result> results;
    for (int i = 0; i < spec.runs; ++i) {
      results.push_back(run_in_process(spec));
      const Timing& t = results.back().timing;
      fmt::print(stderr, "decodebench: run {} of {} (a separate process): {:.3f} ms median ± {:.2f}%\n",
                 i + 1, spec.runs, t.tpot_ms.median, 100 * t.noise);
      std::fflush(stderr);
    }
    std::vector<double> medians, energies;
    for (const Result& r : results) {
      medians.push_back(r.timing.tpot_ms.median);
      if (r.energy.reason.empty() && r.energy.j_per_token.median)
        energies.push_back(*r.energy.j_per_token.median);
    }
    // The energy's spread across runs where every run measured it.
    const std::string energy =
        energies.size() == results.size()
            ? fmt::format("; {:.4g} J/token median of medians, {:.2f}% spread across runs",
                          compute_stats(energies).median, 100 * repetition_noise(energies))
            : "";
    std::ostream& table = spec.output == "-" ? std::cerr : std::cout;
    table << format_results(results, OutputFormat::md)
          << fmt::format(
                 "\n{} runs in separate processes: {:.3f} ms median of medians, {:.2f}% spread across "
                 "runs (relative stdev){}\n",
                 spec.runs, compute_stats(medians).median, 100 * repetition_noise(medians), energy)
          << std::flush;
    if (spec.output == "-")
      std::cout << format_results(results, spec.format) << std::flush;
    else if (!spec.output.empty())
      write_results_file(spec.output, results, spec.format);
    return 0;
  }
  const Result r = run_one(spec);
  // -o -: the result on stdout, and the summary on stderr so that stdout stays one document.
  if (spec.output == "-") {
    std::cerr << summary_text(r) << std::flush;
    std::cout << format_results({r}, spec.format) << std::flush;
  } else {
    std::cout << summary_text(r) << std::flush;
  }
  for (const std::string& w : r.timing.warnings) warn_line(w);
  if (!spec.output.empty() && spec.output != "-") write_results_file(spec.output, {r}, spec.format);
  return 0;
}

int cmd_info(int device) {
  // The energy counter first, at idle, before the bandwidth probe warms the device.
  std::string energy;
  {
    std::unique_ptr<Backend> backend = make_cuda_backend(device);
    if (std::unique_ptr<EnergySource> source = backend->energy_source(energy)) {
      const std::string name = source->name();
      EnergySampler sampler(std::move(source));
      const EnergyWindow idle = sampler.idle();
      energy = describe_counter(name, idle, sampler.observed());
    } else {
      energy = "n/a: " + energy;
    }
  }
  const DeviceInfo d = cuda_device_info(device, true);
  fmt::print("device        {} (cc {}, {} SMs)\n", d.name, d.compute_capability, d.sm_count);
  fmt::print("uuid          {}\n", d.uuid);
  fmt::print("memory        {:.1f} GiB, L2 {:.1f} MiB\n", d.memory_bytes / 1073741824.0,
             d.l2_bytes / 1048576.0);
  fmt::print("driver        {}, ECC {}\n", d.driver, d.ecc ? "on" : "off");
  fmt::print("bandwidth     {:.0f} GB/s theoretical, {:.0f} GB/s measured streaming read\n",
             d.theoretical_GBps, d.peak_read_GBps);
  if (d.start)
    fmt::print("clocks        SM {} MHz, memory {} MHz, {} C, power limit {:.0f} W\n", d.start->sm_clock_mhz,
               d.start->mem_clock_mhz, d.start->temperature_c, d.power_limit_w);
  fmt::print("energy        {}\n", energy);
  return 0;
}

}  // namespace db
