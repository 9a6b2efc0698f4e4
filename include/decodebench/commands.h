// The verbs. cli.cpp parses arguments into these specs; each function returns the process
// exit code or throws db::Error / db::UsageError (main turns those into one stderr line).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "decodebench/config.h"
#include "decodebench/host_memory.h"
#include "decodebench/run_spec.h"

namespace db {

struct Result;

// run_one (src/run/run.h), the summary on stdout, and the result file with -o. With spec.runs > 1, that
// many runs, each in a separate process (run_in_process): a table of them on stdout, all of
// them in the result file.
int cmd_run(const RunSpec& spec);

// The `decodebench run` arguments (argv, from "decodebench") that run `spec` (not -o, not
// --runs).
std::vector<std::string> run_arguments(const RunSpec& spec);

// Runs `spec` as a `decodebench run` child process of this binary and returns its result;
// passes its warnings on to stderr, and throws db::Error with its error line when it fails.
Result run_in_process(const RunSpec& spec);

// what: "" (everything), "presets", "archs", "kernels"
int cmd_list(const std::string& what);

// Device, driver, and the measured streaming-read bandwidth.
int cmd_info(int device);

struct GenWeightsSpec {
  std::string model;  // preset or config path
  std::optional<Scheme> quant;
  std::optional<int> group_size;
  uint64_t seed = 0;
  std::string output;  // .safetensors path
};
int cmd_gen_weights(const GenWeightsSpec& spec);

struct QuantizeSpec {
  std::string input;  // HF checkpoint: file, directory or index
  std::string model;  // config; default: the config.json beside the input
  Scheme scheme = Scheme::int4;
  std::optional<int> group_size;
  std::string output;
};
int cmd_quantize(const QuantizeSpec& spec);

// What gen-weights and quantize hold in host memory writing a model of `c`, which they check
// before writing (host_memory.h): they stream each matrix a block of rows at a time, so it
// is a block with its quantized form and the scales and zeros of one matrix, not the model.
HostPlan weights_file_plan(const ModelConfig& c, const std::string& what);

// Reads result files (one object, an array or JSONL each) and prints them as one table in
// `format` (md, csv, json, jsonl), to stdout or atomically to `output`.
int cmd_report(const std::vector<std::string>& files, const std::string& format, const std::string& output);

// Compares result files (compare.h): BASE and NEW matched by config key, or with pair_by the
// runs of all files paired across one key field. Prints the table as `format` (md, json) on
// stdout, warnings on stderr. Returns Comparison::exit_code(): 1 when a matched run
// regressed past the threshold significantly, 3 when the comparison is incomplete (fails
// closed), else 0; an unreadable or invalid file throws db::UsageError (exit 2).
struct CompareSpec {
  std::vector<std::string> files;
  double threshold = 0.03;  // a fraction
  std::string format = "md";
  bool allow_missing = false;
  std::string pair_by, base_value;
  std::string metric = "tpot";  // --metric: tpot | energy
};
int cmd_compare(const CompareSpec& spec);

}  // namespace db
