// The result of one run, schema "decodebench/result/v1". One C++ type, one JSON writer and
// reader (compare reads files back); the md and csv printers use the same field list.
// Every field is documented in the README ("Result schema").
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "decodebench/accounting.h"

namespace db {

inline constexpr const char* kResultSchema = "decodebench/result/v1";

struct ToolInfo {
  std::string name = "decodebench";
  std::string version;
  std::string git_commit;
  std::string build_type;    // CMAKE_BUILD_TYPE; anything but Release is warned about
  std::string cuda_runtime;  // "13.0", or "" without CUDA
  std::string cublas;        // "13.0.2", or ""
};

struct ClockState {  // an NVML snapshot
  int sm_clock_mhz = 0;
  int mem_clock_mhz = 0;
  int temperature_c = 0;
  double power_w = 0;
  uint64_t throttle_reasons = 0;      // NVML bit mask
  std::vector<std::string> throttle;  // the set bits, named
};

struct DeviceInfo {
  std::string backend;  // "cuda" | "cpu"
  std::string name;     // GPU name, or the CPU model
  std::string uuid;
  std::string compute_capability;  // "9.0"
  int sm_count = 0;
  uint64_t memory_bytes = 0;
  uint64_t l2_bytes = 0;
  std::string driver;
  bool ecc = false;
  double power_limit_w = 0;
  std::optional<ClockState> start;  // absent where NVML is unavailable (CPU backend)
  std::optional<ClockState> end;
  double theoretical_GBps = 0;  // from memory clock x bus width
  double peak_read_GBps = 0;    // measured in this process (streaming read)
  int cpu_threads = 0;          // cpu backend
  // Matrix-multiply throughput measured in this process, the compute floor's denominator;
  // 0 where the backend does not measure it (compute_probe says what ran)
  double peak_compute_TFLOPS = 0;
  std::string compute_probe;  // what measured peak_compute_TFLOPS; "" when not measured
};

struct RunConfig {
  std::string model;    // as given: preset name or path
  std::string arch;     // "llama" | "qwen3"
  std::string weights;  // "synthetic" or the weights path
  // what the weights file is: "synthetic", "hf", "decodebench", "gptq", "gptq_v2", "awq";
  // "" in a result from before the field
  std::string weights_format;
  uint64_t seed = 0;
  std::string scheme;           // "fp16" | "int8" | "int4"
  int group_size = 0;           // int4 only, else 0
  std::string group_size_note;  // why group_size is not the config's own; "" when it is
  bool zero_point = false;      // int4 only
  std::string lm_head_scheme;
  // --kv-cache: how the KV cache stores K and V, "fp16" | "fp8" | "int8"; "fp16" in a result
  // from before the field, which ran with an fp16 cache
  std::string kv_cache = "fp16";
  std::string kernel;  // resolved kernel name, e.g. "int4.gemv"
  // --kernel auto: the matrices the kernel cannot take and what ran them instead, one line each
  std::vector<std::string> kernel_fallbacks;
  // --batch > 1: the shape the skinny GEMM runs for each kind of matrix, chosen by timing at
  // load, one line each ("gate_up [28672 x 4096]: m4u1b1, 34.3 us (default m4u1b2 34.9 us)")
  std::vector<std::string> kernel_shapes;
  // --batch > 1 on the GPU: the path each kind of matrix takes, one line each, in step order
  // ("gate_up [28672 x 4096]: skinny-gemm"; LinearPlan::batched_path_lines)
  std::vector<std::string> batched_paths;
  bool graph = false;
  std::string adapter = "none";  // "none", a path or "synthetic:rank=..."
  std::string adapter_mode;      // "merged" | "external" | "" without an adapter
  int64_t adapter_rank = 0;
  std::vector<std::string> adapter_targets;
  double adapter_scale = 0;
  int64_t context = 0;
  int64_t tokens = 0;
  int64_t warmup = 0;
  int64_t repeat = 0;
  bool sync_per_token = false;
  int64_t params = 0;     // parameter count of the model
  double max_noise = 0;   // --max-noise as a fraction; 0: a fixed --repeat
  double max_time_s = 0;  // --max-time with --max-noise
  int64_t batch = 1;      // --batch: sequences decoded in lockstep, one token each per step
};

struct TpotStats {
  double mean = 0, median = 0, p10 = 0, p90 = 0, p99 = 0, min = 0, max = 0, stdev = 0;
  int64_t n = 0;
};

struct Timing {
  TpotStats tpot_ms;
  std::vector<double> samples_ms;     // every timed step, repetition by repetition
  double tokens_per_s = 0;            // 1000 / median: one sequence's
  double aggregate_tokens_per_s = 0;  // batch x 1000 / median: every sequence's together
  double load_s = 0;            // weights generated or loaded, repacked, uploaded (when not reused), buffers
  bool weights_reused = false;  // the backend's weights were kept from the previous run of a sweep
  double prefill_s = 0;         // untimed: reaching --context
  std::string prefill;  // how: "batched" (chunks through GEMMs, cuda) | "steps" (a decode step a token)
  double prefill_tokens_per_s = 0;  // --context / prefill_s, 0 without a context
  std::string
      prefill_attention;  // batched: its causal attention kernel, "wgmma" | "mma" | "plain"; else empty
  std::string clock;      // "cuda-events" | "host"
  std::vector<double> repetition_medians_ms;  // each repetition's median step time
  double noise = 0;                           // relative stdev of the repetition medians
  int64_t repetitions = 0;                    // timed repetitions run
  std::string stop;                           // "repeat" | "noise-target" | "time-limit"
  std::vector<std::string> warnings;          // "noisy: ...", "throttled: ...", "clocks fell: ..."
};

struct Roofline {
  double floor_tpot_ms = 0;   // the larger of the bandwidth and compute floors
  double achieved_GBps = 0;   // bytes.per_token.total / median TPOT
  double efficiency = 0;      // floor / median TPOT, 0..1
  std::string regime;         // "bandwidth-bound" | "compute-bound" | "overhead-bound" | "kernel-bound"
  std::string regime_reason;  // the rule that fired, with the numbers
  double bandwidth_floor_tpot_ms = 0;  // bytes.per_token.total / device.peak_read_GBps
  double compute_floor_tpot_ms = 0;    // flops.total / device.peak_compute_TFLOPS; 0: not measured
  double achieved_TFLOPS = 0;          // flops.total / median TPOT
  double arithmetic_intensity = 0;     // flops.total / bytes.per_token.total, FLOP per byte
};

struct MemoryUse {
  uint64_t weights_bytes = 0;
  uint64_t kv_cache_bytes = 0;
  uint64_t scratch_bytes = 0;
  uint64_t total_bytes = 0;
};

// Median and spread of a per-repetition figure over a run's repetitions; empty (null in the
// file) where the figure was not measured: energy.reason or energy.clocks_reason says why.
struct RepetitionSpread {
  std::optional<double> median, min, max;
  std::optional<double> spread;  // relative stdev, as timing.noise
};

// What a run's timed repetitions cost in energy, read from an energy counter around each
// repetition (docs/method.md "Energy"), and the clocks sampled while they ran. An empty
// figure is null in the file: never 0, never an estimate.
struct Energy {
  std::string source;                            // what counted the energy; "" when nothing did
  std::string reason = "not measured";           // why the energy figures are null; "" when measured
  std::string clocks_reason = "not sampled";     // why the clock figures are null; "" when sampled
  std::optional<double> sample_period_ms;        // the sampler's target
  int64_t samples = 0;                           // the sampler's polls during the timed repetitions
  std::optional<double> counter_update_ms;       // observed: the median time between changes
  std::optional<double> resolution;              // the largest repetition's error over its energy
  std::optional<double> idle_power_w;            // before the run; subtracted over aligned heads and tails
  std::optional<double> idle_s;                  // how long idle was measured
  std::string window = "unaligned";              // "aligned": every window on the counter's updates
  std::string window_reason = "not measured";    // why the windows are not all aligned; "" when they are
  std::optional<double> detect_ms;               // aligned: the longest an end's update could go unseen
  std::vector<double> repetition_s;              // each repetition's steps, host clock
  std::vector<double> repetition_j;              // their energy; [] when null
  std::vector<double> repetition_tail_s;         // aligned: the idle tail in its window; 0 unaligned
  std::vector<double> repetition_idle_j;         // the idle energy subtracted from its window's
  std::vector<double> repetition_sm_clock_mhz;   // the mean of the SM clock's samples in it
  std::vector<double> repetition_mem_clock_mhz;  // the mean of the memory clock's samples
  RepetitionSpread j_per_step;                   // repetition_j / config.tokens
  RepetitionSpread j_per_token;                  // j_per_step / config.batch
  RepetitionSpread power_w;                      // repetition_j / repetition_s
  RepetitionSpread sm_clock_mhz;                 // of repetition_sm_clock_mhz
  RepetitionSpread mem_clock_mhz;                // of repetition_mem_clock_mhz
  std::optional<double> tokens_per_j;            // 1 / j_per_token.median
};

struct Check {
  std::string tokens_hash;        // FNV-1a 64 of the generated token ids (sequence 0's), hex
  std::vector<int32_t> tokens;    // the first repetition's generated ids (sequence 0's)
  bool logits_checked = false;    // --check
  double logits_max_rel_err = 0;  // max |a-b| / max|b| over steps, against the reference
  std::string reference;          // what the logits were compared with
  // tokens_hash of each sequence's tokens, sequence 0's first (batch 1: [tokens_hash])
  std::vector<std::string> sequence_tokens_hashes;
};

struct Result {
  std::string schema = kResultSchema;
  ToolInfo tool;
  std::string time;     // RFC 3339, UTC
  std::string command;  // the command line, shell-quoted
  DeviceInfo device;
  RunConfig config;
  ByteAccount bytes;
  StepFlops flops;
  Timing timing;
  Roofline roofline;
  MemoryUse memory;
  Check check;
  Energy energy;
};

void to_json(nlohmann::json& j, const Result& r);
// Throws db::Error naming the missing or mistyped field ("result: missing field timing.tpot_ms.median").
void from_json(const nlohmann::json& j, Result& r);

std::string result_to_json_text(const Result& r, int indent = 2);
Result result_from_json_text(const std::string& text, const std::string& origin);

// The batched GEMM's shape for each kind of matrix, "gate_up m4u1b2", from
// config.kernel_shapes ("gate_up [28672 x 4096]: m4u1b2, 34.8 us (default ...)"); an entry of
// another form is kept up to its first comma. Empty at batch 1.
std::vector<std::string> kernel_shape_choices(const RunConfig& c);

// config.batched_paths grouped by path, in the order the paths first appear: "skinny-gemm (qkv,
// o_proj, gate_up, down_proj), cublas (lm_head)"; an entry of another form counts whole as its
// own path. Empty at batch 1.
std::string batched_path_groups(const RunConfig& c);

// A failed sweep instance, as the sweep writes it in place of its result:
//   {"schema": "decodebench/result/v1", "error": "<message>", "config": {...}}
// where config holds the instance's config fields that were known (model, weights, seed,
// scheme, kernel, graph, adapter, adapter_mode, context, tokens, ...). An object is an error
// entry when it has a string "error" and no "timing".
struct ErrorEntry {
  std::string error;
  std::string config_json = "{}";  // the "config" object, compact JSON text
  std::string origin;              // where it was read ("file[2]", "file:3"); "" when made here
};

// The entry as JSON text (indent < 0: one compact line).
std::string error_entry_json_text(const ErrorEntry& e, int indent = 2);
// "model tiny-fp16, kernel int4.gemv, context 0, tokens 8": the config, short.
std::string error_entry_summary(const ErrorEntry& e);

// Reads a file holding one result, a JSON array of results, or JSONL. Strict: an error
// entry of a sweep is a db::Error naming it (use read_results_and_errors to skip them).
// Warnings (a torn last line skipped) go to stderr.
std::vector<Result> read_results(const std::string& path);

struct ResultsAndErrors {
  std::vector<Result> results;        // in file order
  std::vector<ErrorEntry> errors;     // in file order
  std::vector<std::string> warnings;  // for the caller to print (warn_line): a torn last line skipped
};
// As read_results, but error entries are returned apart instead of failing (compare and
// report skip them with a warning). Anything else that is not a valid result still throws.
// The file must be a regular file of at most kMaxResultsFileBytes (input.h); every JSON
// document in it is parsed by parse_json_document. In JSONL, a last line without a newline
// that is not valid JSON (a write cut short) is skipped with a warning; a bad line anywhere
// else refuses the file, naming FILE:LINE.
ResultsAndErrors read_results_and_errors(const std::string& path);
// The same on a file's text; `path` names it in messages.
ResultsAndErrors parse_results_text(const std::string& text, const std::string& path);

}  // namespace db
