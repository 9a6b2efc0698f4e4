// A run assembled from its RunSpec (run.h): the config, the backend, the weights (shared with
// the previous run of a sweep where their key is equal), the decoder, the protocol, and the
// Result with its accounting, statistics, roofline and energy.
#include "run.h"

#include <algorithm>
#include <ctime>
#include <memory>
#include <utility>

#include "decodebench/adapter.h"
#include "decodebench/error.h"
#include "decodebench/progress.h"
#include "decodebench/protocol.h"
#include "decodebench/roofline.h"
#include "decodebench/stability.h"
#include "decodebench/stats.h"
#include "decodebench/version.h"

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

// The positions the KV cache holds: the context, then the longer of the timed tokens and the
// warm-up, within the model's max_position_embeddings.
int64_t run_positions(const RunSpec& spec, const ModelConfig& cfg) {
  const int64_t positions = spec.context + std::max(spec.tokens, spec.warmup);
  if (positions > cfg.max_position_embeddings)
    fail("--context {} + max(--tokens, --warmup) {} = {} positions exceed max_position_embeddings {} of {}",
         spec.context, std::max(spec.tokens, spec.warmup), positions, cfg.max_position_embeddings, cfg.name);
  return positions;
}

// ---- What the spec says to each part, derived here and nowhere else

// The decoder's: the KV cache's positions, the batch, the graph switch, the weights' identity
// (for BackendReuse), and whether --kernel auto lets a matrix the kernel cannot take run
// another kernel.
DecoderSpec decoder_spec(const RunSpec& spec, int64_t positions, const std::string& key) {
  DecoderSpec ds;
  ds.positions = positions;
  ds.batch = spec.batch;
  ds.graph = spec.graph;
  ds.weights_key = key;
  ds.kernel_fallback = spec.kernel == "auto";
  return ds;
}

// The protocol's: what to measure.
Protocol protocol_of(const RunSpec& spec) {
  Protocol p;
  p.context = spec.context;
  p.tokens = spec.tokens;
  p.warmup = spec.warmup;
  p.repeat = spec.repeat;
  p.sync_per_token = spec.sync_per_token;
  p.check = spec.check;
  p.max_noise = spec.max_noise;
  p.max_time_s = spec.max_time_s;
  return p;
}

// The result's config: what ran. The model, weights and seed as the spec names them; the
// scheme, kernel and adapter as they were resolved and loaded; the protocol `p` that measured
// it; and what the decoder says of its kernel.
RunConfig run_config(const RunSpec& spec, const Protocol& p, const ModelConfig& cfg, const KernelInfo& kernel,
                     const WeightSource& weights, const Adapter* adapter, const DecoderFacts& facts) {
  RunConfig rc;
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
  rc.kv_cache = to_string(cfg.kv_cache);
  rc.kernel = spec.backend == BackendKind::cpu ? "cpu.reference" : kernel.name;
  rc.kernel_fallbacks = facts.kernel_fallbacks;
  rc.kernel_shapes = facts.kernel_shapes;
  rc.batched_paths = facts.batched_paths;
  rc.graph = spec.backend == BackendKind::cuda && spec.graph;
  if (adapter) {
    rc.adapter = spec.adapter;
    rc.adapter_mode = adapter->mode == AdapterMode::external ? "external" : "merged";
    rc.adapter_rank = adapter->rank;
    rc.adapter_targets = adapter->target_names();
    rc.adapter_scale = adapter->scale;
  }
  rc.context = p.context;
  rc.tokens = p.tokens;
  rc.warmup = p.warmup;
  rc.repeat = p.repeat;
  rc.sync_per_token = p.sync_per_token;
  rc.max_noise = p.max_noise;
  rc.max_time_s = p.max_noise > 0 ? p.max_time_s : 0;
  rc.batch = spec.batch;
  rc.params = parameter_count(cfg);
  return rc;
}

// ---- The parts

// The weights of a run: its source and the adapter it carries. The adapter is validated
// against the model before any weight is read; its synthetic values come from the run's
// --seed, as the model's do. With `reuse`, a source of the same key (same config, file, seed
// and adapter) is shared, and one of another key is freed before the next loads.
struct RunWeights {
  std::shared_ptr<Adapter> adapter;
  std::shared_ptr<WeightSource> source;
};

RunWeights load_weights(const RunSpec& spec, const ModelConfig& cfg, const std::string& key,
                        WeightReuse* reuse) {
  if (reuse && reuse->weights && reuse->key == key) {
    ++reuse->reused;
    return {reuse->adapter, reuse->weights};
  }
  if (reuse) {  // free the previous source (and then its adapter) before loading the next
    reuse->weights.reset();
    reuse->adapter.reset();
    reuse->key.clear();
  }
  RunWeights w;
  if (!spec.adapter.empty())
    w.adapter = std::make_shared<Adapter>(load_adapter(spec.adapter, cfg, spec.seed, spec.adapter_mode));
  w.source = std::make_shared<WeightSource>(cfg, spec.weights, spec.seed, w.adapter.get());
  if (reuse) {
    reuse->key = key;
    reuse->adapter = w.adapter;
    reuse->weights = w.source;
  }
  return w;
}

// The energy counter and the idle power, read first, before any probe has warmed the device;
// the sampler then reads the counter around each repetition.
struct RunEnergy {
  EnergyMeasurement measurement;
  std::unique_ptr<EnergySampler> sampler;  // null: not measured (measurement.reason says why)
};

RunEnergy start_energy(const RunSpec& spec, Backend& backend, Progress& progress) {
  RunEnergy e;
  EnergyMeasurement& energy = e.measurement;
  if (!spec.energy) {
    energy.reason = "not measured: --energy off";
    return e;
  }
  std::unique_ptr<EnergySource> source = backend.energy_source(energy.reason);
  if (!source) return e;
  energy.source = source->name();
  energy.clocks_reason = source->clocks_unavailable();
  e.sampler = std::make_unique<EnergySampler>(std::move(source));
  energy.sample_period_s = e.sampler->period_s();
  progress.phase("idle power");
  energy.idle = e.sampler->idle();
  energy.idle_observed = e.sampler->observed();
  // The repetitions' windows aligned on the counter's updates where it is coarse and the
  // idle power resolved, to subtract over their idle heads and tails.
  const WindowPlan plan = plan_windows(energy.idle_observed, idle_power_w(*energy.idle, energy.idle_observed),
                                       e.sampler->period_s());
  energy.window_why = plan.why;
  e.sampler->plan(plan);
  return e;
}

ToolInfo tool_info(const Environment& env, const DecoderFacts& facts) {
  ToolInfo t;
  t.version = version_string();
  t.git_commit = git_commit();
  t.build_type = build_type();
  t.cuda_runtime = env.cuda_runtime;
  t.cublas = facts.cublas;
  return t;
}

Timing timing_of(const Measurement& m, const DecoderFacts& facts, int64_t context, int64_t batch) {
  Timing t;
  t.samples_ms = m.samples_ms;
  t.tpot_ms = compute_stats(m.samples_ms);
  t.tokens_per_s = t.tpot_ms.median > 0 ? 1e3 / t.tpot_ms.median : 0;
  t.aggregate_tokens_per_s = static_cast<double>(batch) * t.tokens_per_s;
  t.load_s = facts.load_s;
  t.weights_reused = facts.weights_reused;
  t.prefill_s = m.prefill_s;
  t.prefill = facts.prefill;
  t.prefill_attention = facts.prefill_attention;
  t.prefill_tokens_per_s = m.prefill_s > 0 ? static_cast<double>(context) / m.prefill_s : 0;
  t.clock = m.clock;
  t.repetition_medians_ms = m.repetition_medians_ms;
  t.noise = repetition_noise(m.repetition_medians_ms);
  t.repetitions = static_cast<int64_t>(m.repetition_medians_ms.size());
  t.stop = m.stop;
  return t;
}

Check check_of(const Measurement& m) {
  Check c;
  c.tokens = m.tokens;
  c.tokens_hash = tokens_hash(m.tokens);
  for (const std::vector<int32_t>& t : m.sequence_tokens) c.sequence_tokens_hashes.push_back(tokens_hash(t));
  c.logits_checked = m.logits_max_rel_err.has_value();
  c.logits_max_rel_err = m.logits_max_rel_err.value_or(0.0);
  c.reference = m.reference;
  return c;
}

}  // namespace

ModelConfig run_model_config(const RunSpec& spec) {
  return config_for_weights(load_model_config(spec.model),
                            {spec.quant, spec.group_size, spec.lm_head, spec.kv_cache}, spec.weights);
}

std::string weights_key(const RunSpec& spec, const ModelConfig& cfg) {
  return fmt::format(
      "{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}\x1f{}", spec.model, to_string(cfg.quant.scheme),
      cfg.quant.group_size, cfg.quant.zero_point, to_string(cfg.quant.lm_head), to_string(cfg.kv_cache),
      spec.weights, spec.seed, spec.adapter,
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
  // Everything the spec alone can refuse, before anything loads.
  const ModelConfig cfg = run_model_config(spec);
  const int64_t positions = run_positions(spec, cfg);
  if (spec.group_size && cfg.quant.scheme != Scheme::int4 && cfg.quant.lm_head != Scheme::int4)
    usage_fail("--group-size applies to int4 weights only (this run's weights are {}, lm_head {})",
               to_string(cfg.quant.scheme), to_string(cfg.quant.lm_head));
  const KernelInfo& kernel = resolve_kernel(spec.kernel, cfg.quant.scheme);
  if (!cfg.group_size_note.empty()) warn_line(cfg.group_size_note);

  // The backend next: "no GPU" must be said before minutes of weight loading.
  std::unique_ptr<Backend> backend =
      spec.backend == BackendKind::cpu ? make_cpu_backend() : make_cuda_backend(spec.device);
  check_batch_supported(*backend, spec.backend, spec.batch);
  const std::string key = weights_key(spec, cfg);
  const RunWeights weights = load_weights(spec, cfg, key, reuse);

  Progress progress(fmt::format("{} on {}", spec.model, to_string(spec.backend)), spec.progress);
  RunEnergy energy = start_energy(spec, *backend, progress);
  progress.phase("device, bandwidth and compute probes");
  const Environment env = backend->environment();
  const ComputePeak compute = backend->compute_peak(cfg.quant.scheme);
  progress.phase("load");
  std::unique_ptr<Decoder> decoder = backend->decoder(
      *weights.source, kernel, decoder_spec(spec, positions, key), reuse ? &reuse->backend : nullptr);
  // A backend that raised max_batch() must also have built a decoder of that many sequences:
  // otherwise the run would time batch 1 and record it as --batch B.
  if (decoder->batch() != spec.batch)
    fail("the {} backend's decoder runs {} sequence(s) a step, not the --batch {} asked",
         to_string(spec.backend), decoder->batch(), spec.batch);
  const Protocol protocol = protocol_of(spec);
  const Measurement m = measure_decode(*decoder, protocol, *weights.source, backend->is_reference(),
                                       &progress, energy.sampler.get());
  if (energy.sampler) {
    energy.measurement.windows = m.energy;
    energy.measurement.observed = energy.sampler->observed();
  }
  const DecoderFacts facts = decoder->facts();

  Result r;
  r.tool = tool_info(env, facts);
  r.time = now_rfc3339();
  r.command = spec.command_line;
  r.device = env.device;
  r.device.peak_compute_TFLOPS = compute.TFLOPS;
  r.device.compute_probe = compute.TFLOPS > 0 ? compute.probe : "";
  r.device.end = backend->clock_state();
  r.config = run_config(spec, protocol, cfg, kernel, *weights.source, weights.adapter.get(), facts);
  const AdapterShape adapter_shape = weights.adapter ? weights.adapter->shape() : AdapterShape{};
  const int64_t last = spec.context + spec.tokens - 1;
  r.bytes =
      account_bytes(cfg, adapter_shape, spec.backend == BackendKind::cpu ? KernelTraffic{} : kernel.traffic,
                    spec.context, last, spec.batch);
  r.flops = account_flops(cfg, adapter_shape, spec.context, last, spec.batch);
  r.timing = timing_of(m, facts, spec.context, spec.batch);
  r.roofline = compute_roofline(r, facts.launches_per_step, facts.launch_overhead_us);
  r.memory = facts.memory;
  r.check = check_of(m);
  r.energy = summarize_energy(energy.measurement, spec.tokens, spec.batch);
  r.timing.warnings = run_warnings(r);
  return r;
}

}  // namespace db
