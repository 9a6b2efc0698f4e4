// Everything the run verb takes from the command line, parsed and validated by the CLI.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "decodebench/accounting.h"
#include "decodebench/config.h"
#include "decodebench/progress.h"

namespace db {

enum class BackendKind { cuda, cpu };

// Bounds on the counts of a run, checked where the command line is parsed (docs/
// input-safety.md): every position and step count computed from them (context +
// max(tokens, warmup), tokens x repeat) stays far inside 64 bits, and one result holds at
// most kMaxTimedSteps samples (adaptive repetitions included: they stop at kMaxRepeat
// repetitions or kMaxTimedSteps steps). Every count a command line gives has a bound here.
inline constexpr int64_t kMaxContext = kMaxPositions;  // = the largest max_position_embeddings
inline constexpr int64_t kMaxTokens = int64_t{1} << 20;
inline constexpr int64_t kMaxWarmup = int64_t{1} << 20;
inline constexpr int64_t kMaxRepeat = 10000;
inline constexpr int64_t kMaxTimedSteps = int64_t{1} << 22;  // tokens x repeat
inline constexpr int64_t kMaxBatch = 4096;                   // --batch: sequences in lockstep
inline constexpr int64_t kMaxRuns = 10000;  // --runs: processes, one after another (a sweep's most instances)
inline constexpr double kMaxTimeS = 86400;  // --max-time: a day of adaptive repetitions
enum class OutputFormat { json, jsonl, md, csv };

struct RunSpec {
  std::string model = "8b-int4";
  std::string weights;  // empty: synthetic from `seed`
  uint64_t seed = 0;
  std::optional<Scheme> quant;  // overrides the config's scheme
  std::optional<int> group_size;
  std::optional<Scheme> lm_head;       // overrides the lm_head scheme
  KvScheme kv_cache = KvScheme::fp16;  // --kv-cache: how the KV cache stores K and V
  std::string kernel = "auto";
  bool graph = true;
  std::string adapter;  // empty: none
  AdapterMode adapter_mode = AdapterMode::merged;
  int64_t context = 0;
  int64_t tokens = 128;
  int64_t warmup = 16;
  int64_t repeat = 5;
  int64_t batch = 1;  // --batch: sequences decoded in lockstep, one token each per step
  bool sync_per_token = false;
  bool check = false;
  bool energy = true;     // --energy: read the energy counter around each repetition
  double max_noise = 0;   // --max-noise, a fraction; 0: exactly --repeat repetitions
  double max_time_s = 0;  // --max-time: the adaptive repetitions' time budget
  ProgressMode progress = ProgressMode::automatic;
  int runs = 1;  // --runs: separate processes, each a run of its own
  BackendKind backend = BackendKind::cuda;
  int device = 0;
  std::string output;  // empty: summary on stdout only
  OutputFormat format = OutputFormat::json;
  std::string command_line;  // for the result's "command" field
};

inline const char* to_string(BackendKind b) {
  switch (b) {
    case BackendKind::cuda:
      return "cuda";
    case BackendKind::cpu:
      return "cpu";
  }
  return "?";
}

inline const char* to_string(OutputFormat f) {
  switch (f) {
    case OutputFormat::json:
      return "json";
    case OutputFormat::jsonl:
      return "jsonl";
    case OutputFormat::md:
      return "md";
    case OutputFormat::csv:
      return "csv";
  }
  return "?";
}

}  // namespace db
