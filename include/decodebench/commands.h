// The verbs. cli.cpp parses arguments into these specs; each function returns the process
// exit code or throws db::Error / db::UsageError (main turns those into one stderr line).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "decodebench/config.h"
#include "decodebench/run_spec.h"

namespace db {

int cmd_run(const RunSpec& spec);

// what: "" (everything), "presets", "archs", "kernels"
int cmd_list(const std::string& what);

// Device, driver, and the measured streaming-read bandwidth.
int cmd_info(int device);

struct GenWeightsSpec {
  std::string model;                 // preset or config path
  std::optional<Scheme> quant;
  std::optional<int> group_size;
  uint64_t seed = 0;
  std::string output;                // .safetensors path
};
int cmd_gen_weights(const GenWeightsSpec& spec);

struct QuantizeSpec {
  std::string input;                 // HF checkpoint: file, directory or index
  std::string model;                 // config; default: the config.json beside the input
  Scheme scheme = Scheme::int4;
  std::optional<int> group_size;
  std::string output;
};
int cmd_quantize(const QuantizeSpec& spec);

// Version string with the git commit ("0.1.0 (abc1234)").
std::string version_string();
std::string git_commit();
std::string build_type();

}  // namespace db
