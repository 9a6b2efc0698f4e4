// The command line (CLI11). `run` is the default verb: `decodebench --model 8b-int4` is
// `decodebench run --model 8b-int4`. Everything that can be checked before any work starts
// is checked here (option values, paths, the model config with its overrides, the kernel
// name against the scheme), so a typo costs nothing and never leaves a partial result.
//
// Exit codes: 2 when the command line itself is wrong (unknown option, bad value),
// 1 when something it names is wrong (unknown preset, missing file, bad config).
#include "cli.h"

#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>
#include <type_traits>

#include "decodebench/adapter.h"
#include "decodebench/commands.h"
#include "decodebench/compare.h"
#include "decodebench/config.h"
#include "decodebench/error.h"
#include "decodebench/kernel_registry.h"
#include "decodebench/model.h"
#include "decodebench/run_spec.h"
#include "decodebench/sweep.h"
#include "decodebench/version.h"

namespace db {
namespace {

namespace fs = std::filesystem;

constexpr const char* kVerbs[] = {"run",      "list",   "info",    "gen-weights",
                                  "quantize", "report", "compare", "sweep"};

const std::vector<std::string> kSchemeNames = {"fp16", "int8", "int4", "fp8"};
const std::vector<std::string> kKvSchemeNames = {"fp16", "fp8", "int8"};

bool is_verb(const std::string& s) {
  return std::find(std::begin(kVerbs), std::end(kVerbs), s) != std::end(kVerbs);
}

std::string one_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

void warn_if_not_release() {
  const std::string type = build_type();
  if (type != "Release")
    fmt::print(stderr, "decodebench: warning: this is a {} build; timings are not representative\n",
               type.empty() ? "unspecified-type" : type);
}

// An output file must be creatable before any work starts: its directory exists and is
// writable, and the path is not a directory or anything else but a regular file.
void check_output_path(const std::string& path) {
  const fs::path p = path;
  fs::path dir = p.parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (fs::is_directory(p, ec)) fail("-o {}: is a directory", path);
  // The output is renamed into place (or, jsonl, appended to): a FIFO or device there would
  // be replaced, or block the open.
  if (fs::exists(p, ec) && !fs::is_regular_file(p, ec)) fail("-o {}: exists and is not a regular file", path);
  if (!fs::exists(dir, ec)) fail("-o {}: directory {} does not exist", path, dir.string());
  if (!fs::is_directory(dir, ec)) fail("-o {}: {} is not a directory", path, dir.string());
  if (::access(dir.c_str(), W_OK) != 0) fail("-o {}: directory {} is not writable", path, dir.string());
}

std::optional<OutputFormat> format_from_extension(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".json") return OutputFormat::json;
  if (ext == ".jsonl") return OutputFormat::jsonl;
  if (ext == ".md") return OutputFormat::md;
  if (ext == ".csv") return OutputFormat::csv;
  return std::nullopt;
}

OutputFormat parse_format(const std::string& s) {
  if (s == "json") return OutputFormat::json;
  if (s == "jsonl") return OutputFormat::jsonl;
  if (s == "md") return OutputFormat::md;
  if (s == "csv") return OutputFormat::csv;
  usage_fail("--format {}: not a format (json, jsonl, md, csv)", s);
}

// Integers are parsed here rather than by CLI11, which (2.1) accepts "-1" for an unsigned
// option and wraps values that overflow: a whole-string, range-checked parse instead.
template <class T>
T parse_integer(const char* option, const std::string& text) {
  T v{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec == std::errc::result_out_of_range) usage_fail("{} {}: out of range", option, text);
  if (ec != std::errc() || ptr != end || text.empty())
    usage_fail("{} '{}': not {}integer", option, text, std::is_unsigned_v<T> ? "a non-negative " : "an ");
  return v;
}

// A count from the command line within [lo, hi]: the bounds keep every sum and product of
// counts (positions, timed steps) far from overflow (run_spec.h).
void check_count(const char* option, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo) {
    if (lo == 0) usage_fail("{} must be non-negative, got {}", option, v);
    usage_fail("{} must be at least {}, got {}", option, lo, v);
  }
  if (v > hi) usage_fail("{} {}: above the limit of {}", option, v, hi);
}

void check_timed_steps(int64_t tokens, int64_t repeat) {
  if (tokens > kMaxTimedSteps / repeat)
    usage_fail("--tokens {} x --repeat {}: more than {} timed steps in one run", tokens, repeat,
               kMaxTimedSteps);
}

CLI::Option* add_integer(CLI::App* app, const std::string& name, std::string& text, const std::string& help) {
  return app->add_option(name, text, help)->type_name(name == "--seed" ? "UINT" : "INT");
}

void check_exists(const std::string& path, const char* what) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("{} {}: no such file or directory", what, path);
}

// A synthetic adapter is parsed here with the loader's own parser, so that a typo fails
// before the model is built; a PEFT directory must exist.
void check_adapter(const std::string& adapter) {
  if (is_synthetic_adapter(adapter)) {
    parse_synthetic_adapter(adapter);
    return;
  }
  if (adapter.rfind("synthetic", 0) == 0)
    usage_fail("--adapter {}: expected synthetic:rank=R[,targets=q,k,v,o,gate,up,down]", adapter);
  check_exists(adapter, "adapter");
}

// A non-negative number of seconds, as typed ("60", "2.5").
double parse_seconds(const char* option, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(v) || v < 0)
    usage_fail("{} '{}': expected a non-negative number of seconds", option, text);
  return v;
}

// --progress as typed, else $DECODEBENCH_PROGRESS, else auto.
ProgressMode parse_progress(std::string text) {
  const char* origin = "--progress";
  if (text.empty()) {
    const char* env = std::getenv("DECODEBENCH_PROGRESS");
    if (!env || !*env) return ProgressMode::automatic;
    text = env;
    origin = "DECODEBENCH_PROGRESS";
  }
  if (text == "auto") return ProgressMode::automatic;
  if (text == "on") return ProgressMode::on;
  if (text == "off") return ProgressMode::off;
  usage_fail("{} '{}': expected auto, on or off", origin, text);
}

void check_group_size_applies(const ModelConfig& c, const char* verb) {
  if (c.quant.scheme != Scheme::int4 && c.quant.lm_head != Scheme::int4)
    usage_fail("{}--group-size applies to int4 weights only (this run's weights are {}, lm_head {})", verb,
               to_string(c.quant.scheme), to_string(c.quant.lm_head));
}

// With --weights and no --model, the config is the config.json that an HF checkpoint
// carries beside its weights, when there is one.
std::optional<std::string> config_beside(const std::string& weights) {
  std::error_code ec;
  const fs::path w = weights;
  const fs::path dir = fs::is_directory(w, ec) ? w : w.parent_path();
  const fs::path cfg = (dir.empty() ? fs::path(".") : dir) / "config.json";
  if (fs::is_regular_file(cfg, ec)) return fs::is_directory(w, ec) ? w.string() : cfg.string();
  return std::nullopt;
}

// Loads the model config with the scheme overrides, as the verb will.
ModelConfig resolve_config(const std::string& model, std::optional<Scheme> quant,
                           std::optional<int> group_size, std::optional<Scheme> lm_head) {
  return apply_overrides(load_model_config(model), {quant, group_size, lm_head, std::nullopt});
}

struct RunArgs {
  RunSpec spec;
  std::string quant, lm_head, graph = "on", adapter_mode = "merged", backend = "cuda", format;
  std::string kv_cache = "fp16";
  std::string group_size;
  std::string max_noise, max_time = "60", progress, runs = "1";
  std::string sync;  // sweep: --sync-per-token=on,off
  std::string energy = "on";
  // Integers as typed; the defaults are RunSpec's, printed by --help.
  std::string seed = std::to_string(spec.seed), context = std::to_string(spec.context),
              tokens = std::to_string(spec.tokens), warmup = std::to_string(spec.warmup),
              repeat = std::to_string(spec.repeat), device = std::to_string(spec.device),
              batch = std::to_string(spec.batch);
};

// On `run`, a value `sweep` would take as a list (or, for the counts, as a range): one line
// that points at `sweep`, where "not an integer" or "not in {on,off}" would say less. A count
// is a list or range only as sweep reads one (`expand_int_list`; anything it refuses is left
// to the integer's own check); where the option takes a path (--model), an existing path with a
// comma is a path.
CLI::Validator one_value(bool counts, bool path = false) {
  return CLI::Validator(
      [counts, path](std::string& v) -> std::string {
        const bool list = v.find(',') != std::string::npos;
        const bool range =
            counts && (v.find_first_of("*+") != std::string::npos || v.find('-', 1) != std::string::npos);
        if (!list && !range) return {};
        std::error_code ec;
        if (path && fs::exists(v, ec)) return {};
        if (counts) try {
            expand_int_list("", v);
          } catch (const UsageError&) {
            return {};
          }
        return fmt::format("'{}' is a {}: `run` takes one value, `decodebench sweep` takes lists{}", v,
                           list ? "list" : "range", counts ? " and ranges" : "");
      },
      "");
}

// The run options on `run`, or (sweep) on `sweep`, where --model, --quant, --group-size,
// --lm-head, --kv-cache, --kernel, --graph, --adapter-mode, --seed, --context, --tokens and
// --batch take lists, checked item by item afterwards.
void add_run_options(CLI::App* run, RunArgs& a, bool sweep) {
  RunSpec& s = a.spec;
  // Those options: on `run`, one value each.
  const auto listed = [sweep](CLI::Option* o, bool counts = false, bool path = false) {
    if (!sweep) o->check(one_value(counts, path));
    return o;
  };
  const auto member = [sweep, listed](CLI::Option* o, std::vector<std::string> names) {
    listed(o);
    if (!sweep) o->check(CLI::IsMember(names));
    return o;
  };
  listed(run->add_option("--model", s.model,
                         "Preset (`decodebench list presets`), config file, HF config.json or model dir"),
         false, true)
      ->capture_default_str();
  run->add_option(
      "--weights", s.weights,
      "safetensors file, sharded HF dir or decodebench file (default: synthetic weights from --seed)");
  listed(add_integer(run, "--seed", a.seed, "Seed of the synthetic weights"))->capture_default_str();
  member(run->add_option("--quant", a.quant, "Weight scheme (default: the config's)"), kSchemeNames);
  listed(add_integer(run, "--group-size", a.group_size, "int4 group size (default: the config's)"));
  member(run->add_option("--lm-head", a.lm_head, "lm_head scheme (default: the config's)"), kSchemeNames);
  member(
      run->add_option("--kv-cache", a.kv_cache,
                      "KV cache: fp16, or fp8 (E4M3) / int8 codes with a float scale per token and kv head"),
      kKvSchemeNames)
      ->capture_default_str();
  listed(run->add_option("--kernel", s.kernel, "GEMV kernel: auto or a name from `decodebench list kernels`"))
      ->capture_default_str();
  member(run->add_option("--graph", a.graph, "Replay one captured CUDA Graph per token, or launch eagerly"),
         {"on", "off"})
      ->capture_default_str();
  run->add_option("--adapter", s.adapter,
                  "LoRA: a PEFT directory, or synthetic:rank=R[,targets=q,k,v,o,gate,up,down]");
  member(run->add_option("--adapter-mode", a.adapter_mode,
                         "Merge the adapter into W, or apply A and B beside it"),
         {"merged", "external"})
      ->capture_default_str();
  listed(add_integer(run, "--context", a.context, "Start position (KV depth) of the timed tokens"), true)
      ->capture_default_str();
  listed(add_integer(run, "--tokens", a.tokens, "Timed tokens per repetition"), true)->capture_default_str();
  listed(add_integer(run, "--batch", a.batch,
                     "Sequences decoded in lockstep, each with its own KV cache: one token of each per step"),
         true)
      ->capture_default_str();
  add_integer(run, "--warmup", a.warmup, "Untimed steps before timing")->capture_default_str();
  add_integer(run, "-r,--repeat", a.repeat, "Repetitions (at least this many with --max-noise)")
      ->capture_default_str();
  run->add_option(
      "--max-noise", a.max_noise,
      "Add repetitions until their medians' relative stdev is at most PCT (1% = 1), or --max-time");
  run->add_option("--max-time", a.max_time, "Seconds of timed repetitions --max-noise may take")
      ->capture_default_str();
  add_integer(run, "--runs", a.runs, "Separate processes, each a run of its own (run-to-run variation)")
      ->capture_default_str();
  run->add_option(
         "--progress", a.progress,
         "Phases on stderr: auto (once a run takes 2 s), on or off (default: $DECODEBENCH_PROGRESS or auto)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  if (sweep)
    run->add_flag("--sync-per-token{on}", a.sync,
                  "Host waits for every token: on (the flag alone), off, or both as --sync-per-token=on,off");
  else
    run->add_flag("--sync-per-token", s.sync_per_token,
                  "Host waits for every token (as a detokenizing server does)");
  run->add_flag("--check", s.check, "Compare the logits against the reference");
  run->add_option("--energy", a.energy,
                  "Read the energy counter (NVML, RAPL) around each repetition and sample the clocks")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  run->add_option("--backend", a.backend, "cuda, or cpu (the float32 reference: slow, for checks)")
      ->check(CLI::IsMember({"cuda", "cpu"}))
      ->capture_default_str();
  add_integer(run, "--device", a.device, "CUDA device index")->capture_default_str();
  run->add_option("-o,--output", s.output, "Write the result to FILE (written whole or not at all)");
  run->add_option("--format", a.format, "Result file format (default: from -o's extension)")
      ->check(CLI::IsMember({"json", "jsonl", "md", "csv"}));
}

CLI::App* add_run(CLI::App& app, RunArgs& a) {
  CLI::App* run = app.add_subcommand("run", "Time batch=1 decoding of one model (the default verb)");
  add_run_options(run, a, false);
  return run;
}

CLI::App* add_sweep(CLI::App& app, RunArgs& a) {
  CLI::App* sw = app.add_subcommand(
      "sweep",
      "Run the cartesian product of the run options. --model, --quant, --group-size, --lm-head, --kv-cache, "
      "--kernel, --graph, --adapter-mode, --seed, --context, --tokens and --batch take comma lists (a,b,c); "
      "--context, "
      "--tokens and --batch "
      "also ranges A-B+S (A, A+S, ... <= B) and A-B*F (A, A*F, ... <= B); --sync-per-token=on,off. --runs N "
      "runs each instance N times in separate processes");
  add_run_options(sw, a, true);
  return sw;
}

RunSpec finish_run_spec(RunArgs& a, const CLI::App& run, const std::vector<std::string>& argv,
                        bool sweep = false) {
  RunSpec& s = a.spec;
  s.seed = parse_integer<uint64_t>("--seed", a.seed);
  s.context = parse_integer<int64_t>("--context", a.context);
  s.tokens = parse_integer<int64_t>("--tokens", a.tokens);
  s.warmup = parse_integer<int64_t>("--warmup", a.warmup);
  s.repeat = parse_integer<int64_t>("--repeat", a.repeat);
  s.batch = parse_integer<int64_t>("--batch", a.batch);
  s.device = parse_integer<int>("--device", a.device);
  check_count("--context", s.context, 0, kMaxContext);
  check_count("--tokens", s.tokens, 1, kMaxTokens);
  check_count("--warmup", s.warmup, 0, kMaxWarmup);
  check_count("--repeat", s.repeat, 1, kMaxRepeat);
  check_count("--batch", s.batch, 1, kMaxBatch);
  check_timed_steps(s.tokens, s.repeat);
  if (s.device < 0) usage_fail("--device must be non-negative, got {}", s.device);
  if (run.count("--max-noise")) {
    s.max_noise = parse_threshold(a.max_noise, "--max-noise");
    if (s.max_noise <= 0) usage_fail("--max-noise must be positive, got {}", a.max_noise);
    s.max_time_s = parse_seconds("--max-time", a.max_time);
    if (s.max_time_s > kMaxTimeS)
      usage_fail("--max-time {}: above the limit of {} seconds", a.max_time, kMaxTimeS);
  } else if (run.count("--max-time")) {
    usage_fail("--max-time needs --max-noise");
  }
  s.progress = parse_progress(a.progress);
  const int64_t runs = parse_integer<int64_t>("--runs", a.runs);
  check_count("--runs", runs, 1, kMaxRuns);
  s.runs = static_cast<int>(runs);
  if (run.count("--group-size")) {
    s.group_size = parse_integer<int>("--group-size", a.group_size);
    if (*s.group_size <= 0) usage_fail("--group-size must be positive, got {}", *s.group_size);
  }
  if (!a.quant.empty()) s.quant = parse_scheme(a.quant);
  if (!a.lm_head.empty()) s.lm_head = parse_scheme(a.lm_head);
  s.kv_cache = parse_kv_scheme(a.kv_cache);
  s.graph = a.graph == "on";
  s.energy = a.energy == "on";
  s.backend = a.backend == "cpu" ? BackendKind::cpu : BackendKind::cuda;
  s.adapter_mode = a.adapter_mode == "external" ? AdapterMode::external : AdapterMode::merged;
  if (run.count("--adapter-mode") && s.adapter.empty()) usage_fail("--adapter-mode needs --adapter");
  if (s.kernel.empty())
    usage_fail("--kernel: empty name (use auto or a name from `decodebench list kernels`)");

  if (!a.format.empty()) {
    s.format = parse_format(a.format);
  } else if (s.output == "-") {
    s.format = OutputFormat::json;  // -o -: the result on stdout, json unless --format says
  } else if (!s.output.empty()) {
    const std::optional<OutputFormat> f = format_from_extension(s.output);
    if (!f)
      usage_fail("-o {}: cannot tell the format from the extension: add --format json|jsonl|md|csv",
                 s.output);
    s.format = *f;
  }
  s.command_line = shell_join(argv);

  // Paths: everything the run will open must exist, and the result must be writable.
  if (!s.output.empty() && s.output != "-") check_output_path(s.output);

  // Options the CPU backend cannot apply are said so, never silently ignored: its float32
  // reference runs each step as it comes, with one way to multiply, on the host.
  if (s.backend == BackendKind::cpu) {
    const auto ignored = [&](const char* option, const char* why) {
      warn("{} has no effect on the CPU backend: {}", option, why);
    };
    if (run.count("--graph")) ignored("--graph", "its steps are not launched (the result records graph off)");
    if (s.kernel != "auto" && !sweep)
      ignored("--kernel", "it multiplies with its float32 reference (the result records cpu.reference)");
    if (run.count("--sync-per-token")) ignored("--sync-per-token", "every step already ends on the host");
    if (run.count("--device")) ignored("--device", "it runs on the host");
  }
  if (!s.adapter.empty()) check_adapter(s.adapter);
  if (!s.weights.empty()) {
    check_exists(s.weights, "weights");
    if (!run.count("--model"))
      if (std::optional<std::string> cfg = config_beside(s.weights)) s.model = *cfg;
  }

  if (sweep) return s;  // the config, scheme and kernel are checked per instance
  const ModelConfig c = resolve_config(s.model, s.quant, s.group_size, s.lm_head);
  if (s.group_size) check_group_size_applies(c, "");
  if (s.kernel != "auto") resolve_kernel(s.kernel, c.quant.scheme);
  return s;
}

// The sweep's lists, item by item, then the other options as run checks them. Whatever
// depends on an instance (config overrides, kernel of the instance's scheme, positions)
// is checked per instance by run_one, a failure becoming that instance's error entry; an
// unknown preset or kernel name fails the whole sweep before anything runs.
SweepSpec finish_sweep_spec(RunArgs& a, const CLI::App& sw, const std::vector<std::string>& argv) {
  SweepSpec sp;
  const auto one_of = [](const char* option, const std::string& item, const std::vector<std::string>& names) {
    if (std::find(names.begin(), names.end(), item) == names.end()) {
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      usage_fail("{} {}: not one of {}", option, item, list);
    }
  };
  std::vector<std::string> models = split_model_list(a.spec.model);
  if (!a.quant.empty()) {
    sp.quants.clear();
    for (const std::string& q : split_list("--quant", a.quant)) {
      one_of("--quant", q, kSchemeNames);
      sp.quants.push_back(parse_scheme(q));
    }
  }
  sp.kernels = split_list("--kernel", a.spec.kernel);
  for (const std::string& k : sp.kernels) {
    const auto& reg = kernel_registry();
    if (k != "auto" && std::none_of(reg.begin(), reg.end(), [&](const KernelInfo& i) { return i.name == k; }))
      usage_fail("--kernel {}: not a kernel (see `decodebench list kernels`)", k);
  }
  sp.graphs.clear();
  for (const std::string& g : split_list("--graph", a.graph)) {
    one_of("--graph", g, {"on", "off"});
    sp.graphs.push_back(g == "on");
  }
  sp.adapter_modes.clear();
  for (const std::string& m : split_list("--adapter-mode", a.adapter_mode)) {
    one_of("--adapter-mode", m, {"merged", "external"});
    sp.adapter_modes.push_back(m == "external" ? AdapterMode::external : AdapterMode::merged);
  }
  if (sw.count("--group-size")) {
    sp.group_sizes.clear();
    for (const std::string& g : split_list("--group-size", a.group_size)) {
      const int v = parse_integer<int>("--group-size", g);
      if (v <= 0) usage_fail("--group-size must be positive, got {}", v);
      sp.group_sizes.push_back(v);
    }
  }
  if (!a.lm_head.empty()) {
    sp.lm_heads.clear();
    for (const std::string& h : split_list("--lm-head", a.lm_head)) {
      one_of("--lm-head", h, kSchemeNames);
      sp.lm_heads.push_back(parse_scheme(h));
    }
  }
  sp.kv_caches.clear();
  for (const std::string& k : split_list("--kv-cache", a.kv_cache)) {
    one_of("--kv-cache", k, kKvSchemeNames);
    sp.kv_caches.push_back(parse_kv_scheme(k));
  }
  if (sw.count("--seed")) {
    sp.seeds.clear();
    for (const std::string& v : split_list("--seed", a.seed))
      sp.seeds.push_back(parse_integer<uint64_t>("--seed", v));
  }
  if (!a.sync.empty()) {
    sp.sync_per_token.clear();
    for (const std::string& v : split_list("--sync-per-token", a.sync)) {
      one_of("--sync-per-token", v, {"on", "off"});
      sp.sync_per_token.push_back(v == "on");
    }
  }
  sp.contexts = expand_int_list("--context", a.context);
  sp.tokens = expand_int_list("--tokens", a.tokens);
  sp.batches = expand_int_list("--batch", a.batch);
  for (int64_t c : sp.contexts) check_count("--context", c, 0, kMaxContext);
  for (int64_t t : sp.tokens) check_count("--tokens", t, 1, kMaxTokens);
  for (int64_t b : sp.batches) check_count("--batch", b, 1, kMaxBatch);

  // The rest as run does, with the list options set to single placeholder values.
  a.spec.model = models[0];
  a.spec.kernel = "auto";
  a.quant.clear();
  a.graph = "on";
  a.adapter_mode = "merged";
  a.context = "0";
  a.tokens = "1";
  a.batch = "1";
  a.seed = "0";
  a.group_size = "128";  // parsed only when given; each instance's own is checked by the run
  a.lm_head.clear();
  a.kv_cache = "fp16";
  sp.base = finish_run_spec(a, sw, argv, true);
  sp.base.group_size.reset();
  sp.runs = sp.base.runs;
  check_timed_steps(*std::max_element(sp.tokens.begin(), sp.tokens.end()), sp.base.repeat);
  sp.models = sw.count("--model") ? models : std::vector<std::string>{sp.base.model};
  check_sweep_size(sp);  // before any config is loaded: a list of a million models is refused at once
  for (const std::string& m : sp.models) load_model_config(m);  // an unknown preset or bad file: exit 1 now
  return sp;
}

std::string verbs_list() {
  std::string v;
  for (const char* verb : kVerbs) v += (v.empty() ? "" : ", ") + std::string(verb);
  return v;
}

}  // namespace

std::string shell_quote(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                                              "_@%+=:,./-") == std::string::npos)
    return word;
  std::string q = "'";
  for (char ch : word) {
    if (ch == '\'')
      q += "'\\''";
    else
      q += ch;
  }
  return q + "'";
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& w : argv) s += (s.empty() ? "" : " ") + shell_quote(w);
  return s;
}

// For an option nobody defined: the closest one the verb has, or the closest verb.
std::string suggestion(const CLI::ParseError& e, const CLI::App& verb) {
  const std::string what = e.what();
  const size_t colon = what.find(" not expected: ");
  if (colon == std::string::npos) return "";
  // The unexpected words; an option among them is the likely typo.
  std::istringstream words(what.substr(colon + 15));
  std::string word, w;
  while (words >> w)
    if (word.empty() || (w.rfind("-", 0) == 0 && word.rfind("-", 0) != 0)) word = w;
  if (word.empty()) return "";
  std::vector<std::string> names;
  if (word.rfind("-", 0) == 0) {
    for (const CLI::Option* o : verb.get_options()) {
      for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
      for (const std::string& n : o->get_snames()) names.push_back("-" + n);
    }
  } else {
    for (const char* v : kVerbs) names.push_back(v);
  }
  return did_you_mean(word, names);
}

int cli_main(int argc, char** argv) {
  const std::vector<std::string> original(argv, argv + argc);

  // `run` is the default verb: insert it unless the first argument is a verb or a
  // top-level flag.
  std::vector<std::string> args = original;
  if (args.empty()) args.emplace_back("decodebench");
  if (args.size() >= 2 && args[1] == "help") args[1] = "--help";
  const bool top_flag =
      args.size() >= 2 && (args[1] == "-h" || args[1] == "--help" || args[1] == "--version");
  if (args.size() == 1 || (!top_flag && args[1].rfind("-", 0) == 0)) {
    args.insert(args.begin() + 1, "run");
  } else if (!top_flag && !is_verb(args[1])) {
    usage_fail("unknown verb '{}'{} (verbs: {}; run is the default: decodebench --model 8b-int4 ...)",
               args[1], did_you_mean(args[1], std::vector<std::string>(std::begin(kVerbs), std::end(kVerbs))),
               verbs_list());
  }

  CLI::App app{
      "decodebench: how long one generated token takes at batch=1, next to the floor set by the bytes "
      "it must read.\nrun is the default verb: `decodebench --model 8b-int4 --graph on` runs it.",
      "decodebench"};
  app.set_version_flag("--version", "decodebench " + version_string());
  app.require_subcommand(1);
  app.get_formatter()->column_width(34);

  RunArgs run_args;
  CLI::App* run = add_run(app, run_args);
  RunArgs sweep_args;
  CLI::App* sweep = add_sweep(app, sweep_args);

  std::string list_what;
  CLI::App* list = app.add_subcommand("list", "List presets, architectures or kernels (default: all)");
  list->add_option("what", list_what, "presets, archs or kernels")
      ->check(CLI::IsMember({"presets", "archs", "kernels"}));

  std::string info_device = "0";
  CLI::App* info = app.add_subcommand("info", "Show the device and its measured streaming-read bandwidth");
  add_integer(info, "--device", info_device, "CUDA device index")->capture_default_str();

  GenWeightsSpec gen;
  std::string gen_quant, gen_group, gen_seed = "0";
  CLI::App* genw =
      app.add_subcommand("gen-weights", "Write a model's synthetic weights to a safetensors file");
  genw->add_option("--model", gen.model, "Preset, config file, HF config.json or model dir")->required();
  genw->add_option("--quant", gen_quant, "Weight scheme (default: the config's)")
      ->check(CLI::IsMember(kSchemeNames));
  add_integer(genw, "--group-size", gen_group, "int4 group size (default: the config's)");
  add_integer(genw, "--seed", gen_seed, "Seed of the synthetic weights")->capture_default_str();
  genw->add_option("-o,--output", gen.output, "Output .safetensors file")->required();

  QuantizeSpec quant;
  std::string quant_scheme = to_string(quant.scheme);
  std::string quant_group;
  CLI::App* quantize =
      app.add_subcommand("quantize", "Quantize an HF checkpoint (RTN) into a decodebench file");
  quantize->add_option("INPUT", quant.input, "HF checkpoint: .safetensors file, index or directory")
      ->required();
  quantize->add_option("--model", quant.model, "Config (default: the config.json beside INPUT)");
  quantize->add_option("--quant", quant_scheme, "Weight scheme")
      ->check(CLI::IsMember(kSchemeNames))
      ->capture_default_str();
  add_integer(quantize, "--group-size", quant_group, "int4 group size (default: the config's)");
  quantize->add_option("-o,--output", quant.output, "Output .safetensors file")->required();

  std::vector<std::string> report_files;
  std::string report_format = "md", report_output;
  CLI::App* report = app.add_subcommand("report", "Print result files (json, array or jsonl) as one table");
  report->add_option("FILES", report_files, "Result files")->required();
  report
      ->add_option("--format", report_format,
                   "md, csv, json, jsonl, or summary (each run as a run prints it)")
      ->check(CLI::IsMember({"md", "csv", "json", "jsonl", "summary"}))
      ->capture_default_str();
  report->add_option("-o,--output", report_output, "Write the table here instead of stdout");

  CompareSpec cmp;
  std::string compare_threshold = "3%";
  CLI::App* compare = app.add_subcommand(
      "compare",
      "Compare result files run by run: exit 1 when a run regressed significantly, 3 when the comparison is "
      "incomplete");
  compare->add_option("FILES", cmp.files, "BASE and NEW (json, array or jsonl); with --pair-by, one or more")
      ->required();
  compare->add_option("--threshold", compare_threshold, "Change that counts, in percent (3% = 3)")
      ->capture_default_str();
  compare
      ->add_option(
          "--metric", cmp.metric,
          "What to judge: tpot (each repetition's median step time) or energy (each repetition's J/step)")
      ->check(CLI::IsMember({"tpot", "energy"}))
      ->capture_default_str();
  compare->add_option("--format", cmp.format, "md or json")
      ->check(CLI::IsMember({"md", "json"}))
      ->capture_default_str();
  compare->add_flag("--allow-missing", cmp.allow_missing,
                    "BASE keys missing from NEW do not make the comparison incomplete");
  compare->add_option(
      "--pair-by", cmp.pair_by,
      "Pair the runs of all files that differ only in this key field (graph, kernel, model, ...)");
  compare->add_option("--base-value", cmp.base_value,
                      "With --pair-by: the field's value of the BASE side (default: the first run's)");

  std::vector<const char*> cargv;
  for (const std::string& a : args) cargv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(cargv.size()), cargv.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success))
      return app.exit(e);  // --help, --version
    std::string where;
    CLI::App* verb = &app;
    for (CLI::App* sub : app.get_subcommands()) {
      where = std::string(" ") + sub->get_name();
      verb = sub;
    }
    usage_fail("{}{} (see `decodebench{} --help`)", one_line(e.what()), suggestion(e, *verb), where);
  }

  if (run->parsed()) {
    const RunSpec spec = finish_run_spec(run_args, *run, original);
    warn_if_not_release();
    return cmd_run(spec);
  }
  if (sweep->parsed()) {
    const SweepSpec spec = finish_sweep_spec(sweep_args, *sweep, original);
    warn_if_not_release();
    return cmd_sweep(spec);
  }
  if (list->parsed()) return cmd_list(list_what);
  if (report->parsed()) {
    if (report_output == "-") report_output.clear();  // -o -: stdout, as without -o
    if (!report_output.empty()) check_output_path(report_output);
    return cmd_report(report_files, report_format, report_output);
  }
  if (compare->parsed()) {
    cmp.threshold = parse_threshold(compare_threshold);
    if (!cmp.base_value.empty() && cmp.pair_by.empty()) usage_fail("--base-value needs --pair-by");
    return cmd_compare(cmp);
  }
  if (info->parsed()) {
    const int device = parse_integer<int>("--device", info_device);
    if (device < 0) usage_fail("--device must be non-negative, got {}", device);
    warn_if_not_release();
    return cmd_info(device);
  }
  if (genw->parsed()) {
    gen.seed = parse_integer<uint64_t>("--seed", gen_seed);
    if (genw->count("--group-size")) {
      gen.group_size = parse_integer<int>("--group-size", gen_group);
      if (*gen.group_size <= 0) usage_fail("--group-size must be positive, got {}", *gen.group_size);
    }
    if (!gen_quant.empty()) gen.quant = parse_scheme(gen_quant);
    check_output_path(gen.output);
    const ModelConfig c = resolve_config(gen.model, gen.quant, gen.group_size, std::nullopt);
    if (gen.group_size) check_group_size_applies(c, "gen-weights: ");
    return cmd_gen_weights(gen);
  }
  if (quantize->parsed()) {
    quant.scheme = parse_scheme(quant_scheme);
    if (quantize->count("--group-size")) {
      quant.group_size = parse_integer<int>("--group-size", quant_group);
      if (*quant.group_size <= 0) usage_fail("--group-size must be positive, got {}", *quant.group_size);
    }
    check_exists(quant.input, "quantize: input");
    check_output_path(quant.output);
    std::error_code ec;
    if (fs::equivalent(quant.input, quant.output, ec)) usage_fail("quantize: -o must differ from INPUT");
    if (quant.model.empty()) {
      const std::optional<std::string> cfg = config_beside(quant.input);
      if (!cfg) fail("quantize: no config.json beside {}: pass --model", quant.input);
      quant.model = *cfg;
    }
    const ModelConfig c = resolve_config(quant.model, quant.scheme, quant.group_size, std::nullopt);
    if (quant.group_size) check_group_size_applies(c, "quantize: ");
    return cmd_quantize(quant);
  }
  usage_fail("no verb given (verbs: {})", verbs_list());
}

}  // namespace db
