// The sweep verb: the run options with lists (and, for --context and --tokens, ranges),
// expanded into the cartesian product of runs, each run like `decodebench run` would, a
// failing one recorded as an error entry (result.h ErrorEntry) and the sweep going on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "decodebench/config.h"
#include "decodebench/result.h"
#include "decodebench/run_spec.h"

namespace db {

// The most instances one sweep runs (and the most values one list may expand to): a sweep
// that large would run for days; a typo in a range ("0-1000000+1") must fail at once, not
// after minutes of expansion.
inline constexpr int64_t kMaxSweepInstances = 10000;

struct SweepSpec {
  RunSpec base;  // every option that is not a list; output and format are the sweep's
  std::vector<std::string> models{"8b-int4"};
  std::vector<std::optional<Scheme>> quants{std::nullopt};  // nullopt: the config's scheme
  std::vector<std::string> kernels{"auto"};
  std::vector<bool> graphs{true};
  std::vector<std::optional<int>> group_sizes{std::nullopt};  // nullopt: the config's
  std::vector<std::optional<Scheme>> lm_heads{std::nullopt};  // nullopt: the config's
  std::vector<KvScheme> kv_caches{KvScheme::fp16};
  std::vector<AdapterMode> adapter_modes{AdapterMode::merged};
  std::vector<bool> sync_per_token{false};
  std::vector<uint64_t> seeds{0};
  std::vector<int64_t> contexts{0};
  std::vector<int64_t> tokens{128};
  std::vector<int64_t> batches{1};
  int runs = 1;  // --runs: each instance this many times, each in a separate process
};

// "a,b,c" -> {a, b, c}. An empty item ("a,,b", "a,") is a db::UsageError naming `option`.
std::vector<std::string> split_list(const std::string& option, const std::string& text);

// --model's list: split_list, except that consecutive items whose joined text (commas
// restored) is an existing file or directory stay one item, the longest such run first: a
// config path with a comma in it is a path ("a,b/tiny.json,8b-int4" -> {a,b/tiny.json, 8b-int4}
// when a,b/tiny.json exists).
std::vector<std::string> split_model_list(const std::string& text);

// A comma list of items, each one of
//   N        the number
//   A-B+S    arithmetic: A, A+S, A+2S, ... <= B (S >= 1)
//   A-B*F    geometric: A, A*F, A*F^2, ... <= B (F >= 2); when A is 0: 0, then 1, F, F^2, ... <= B
// concatenated in the order written; a value already produced is dropped (first one kept).
// A > B, a bad number or step is a db::UsageError naming `option`. Values are >= 0. A list
// whose items produce more than kMaxSweepInstances values is refused before they are made;
// the expansion is linear in the values made.
std::vector<int64_t> expand_int_list(const std::string& option, const std::string& text);

// Refuses (db::UsageError) a sweep whose lists and --runs multiply to more than
// kMaxSweepInstances instances, naming every factor.
void check_sweep_size(const SweepSpec& spec);

// The instances in the fixed order: model outermost, then quant, group size, lm_head, KV
// cache, kernel, graph, adapter-mode, sync-per-token, seed, batch, context, tokens (innermost):
// the options that change the weights or their config (the weights_key, run.h) outside the
// others, so that instances sharing weights are neighbours. Each is `base` with those fields
// set and its command_line the equivalent `decodebench run ...`. Pure: nothing is loaded or
// checked.
std::vector<RunSpec> expand_sweep(const SweepSpec& spec);

// "model tiny-int4, quant int4, kernel auto, graph on, context 0, tokens 8" (quant,
// group-size, lm-head, a KV cache other than fp16, adapter-mode, sync per token and a batch
// other than 1 only when given): what was asked.
std::string instance_summary(const RunSpec& s);

// "model tiny-int4, int4 g64, kernel cpu.reference, graph off, context 0, tokens 8" (", KV
// cache fp8" before the kernel when the cache is not fp16, ", batch B" before the context
// when B is not 1): what ran.
std::string ran_summary(const Result& r);

// Runs every instance; progress on stderr, the md table of the entries on stdout, the file
// with -o. Returns 0 when every instance produced a result, 1 when any failed.
int cmd_sweep(const SweepSpec& spec);

}  // namespace db
