// A run assembled from its RunSpec, below the command line (which parses and prints) where a
// test can call it: config -> backend -> weights -> decoder -> protocol -> Result. The one
// place that turns a spec into what each part takes: the config's overrides, the decoder's
// DecoderSpec, the protocol, and the result's config.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "decodebench/backend.h"
#include "decodebench/config.h"
#include "decodebench/result.h"
#include "decodebench/run_spec.h"

namespace db {

struct Adapter;
class WeightSource;

// What consecutive runs can share (the sweep): the WeightSource (config, file mapping and
// tensor validation) and the LoRA adapter, kept for the weights_key (model, scheme, group
// size, lm_head, KV cache scheme, weights path, seed, adapter, adapter mode) of the last run, and what the
// backend keeps (the CUDA backend: the device weights, for that key, the device and the
// kernel's weight layout). The rest of the backend (CUDA Engine with its KV cache, buffers
// and graph; the CPU model) is built per run.
struct WeightReuse {
  std::string key;
  std::shared_ptr<Adapter> adapter;
  std::shared_ptr<WeightSource> weights;
  int64_t reused = 0;    // runs that found their WeightSource here
  BackendReuse backend;  // its `reused`: runs that found their device weights there
};

// The config a run of `spec` runs: its model (load_model_config) with its overrides and the
// quantization its weights file records (config_for_weights, weights.h).
ModelConfig run_model_config(const RunSpec& spec);

// The identity of a run's weights apart from the backend: model, scheme, group size, zero
// point, lm_head, weights path, seed, adapter and its mode; and the KV cache scheme, which the
// source's config carries to every part built from it (the decoder, --check's reference).
// Runs of equal keys have equal weights and configs whatever their positions, kernel or
// graph switch.
std::string weights_key(const RunSpec& spec, const ModelConfig& cfg);

// Refuses (db::Error, one line) a --batch above backend.max_batch(), before any weight loads.
void check_batch_supported(const Backend& backend, BackendKind kind, int64_t batch);

// One run: config -> backend -> weights -> decoder -> protocol -> Result. Throws db::Error /
// db::UsageError on anything wrong with the spec (config, kernel for its scheme, positions,
// ...) before anything loads where it can. Progress and warnings go to stderr. `reuse`: null,
// or the sharing state of a sequence of runs.
Result run_one(const RunSpec& spec, WeightReuse* reuse = nullptr);

}  // namespace db
