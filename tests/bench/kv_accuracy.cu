// What the fp8 and int8 KV caches cost in accuracy against fp16's, on the GPU engine (lab
// tool, not a test; built with -DDECODEBENCH_DEV=ON):
//   build/decodebench_kv_accuracy --model 8b-int4 [--weights PATH] [--contexts 1024,8192,32768,131000]
//                                 [--steps 64] [--kernel auto] [--seed 0] [--tokens FILE]
// For each context C the prompt (the backends' synthetic prompt tokens, or the ids of
// --tokens, whitespace-separated, repeated to length) goes through the batched prefill into
// an fp16, an fp8 and an int8 cache, each its own engine over the same weights. Then:
//   - fp16 decodes --steps greedy tokens from prompt token C, free-running: its tokens and
//     logits are the reference;
//   - fp8 and int8 are fed fp16's inputs (teacher forcing), so each step computes the same
//     thing, and their logits are compared with fp16's step by step: error = |x - x16| /
//     max |x16| over the vocabulary (as --check's); `logits_max_rel_err` is the largest over
//     every step and logit, `logits_mean_rel_err` the mean;
//   - fp8 and int8 decode free-running from prompt token C: `first_divergence` is the number
//     of steps before their first token that differs from fp16's (--steps if none), and
//     `token_agreement` the fraction of steps with fp16's token.
// One JSON object on stdout. With synthetic weights the logits are a random model's: the
// errors say what the quantized cache does to the arithmetic, not to a language model's
// answers; a real checkpoint (--model its HF directory) says that.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "decodebench/config.h"
#include "decodebench/decoder.h"
#include "decodebench/error.h"
#include "decodebench/kernel_registry.h"
#include "decodebench/weights.h"
#include "engine.cuh"

using namespace db;
using namespace db::cuda;

namespace {

constexpr KvScheme kQuantized[] = {KvScheme::fp8, KvScheme::int8};

std::vector<int32_t> read_token_file(const std::string& path, int64_t vocab) {
  std::ifstream f(path);
  if (!f) fail("--tokens {}: cannot be read", path);
  std::vector<int32_t> ids;
  std::string word;
  while (f >> word) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || v < 0 || v >= vocab)
      fail("--tokens {}: \"{}\" is not a token id of this model (0 to {})", path, word, vocab - 1);
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) fail("--tokens {}: no token ids", path);
  return ids;
}

struct Run {
  std::vector<std::vector<float>> logits;  // a step each
  std::vector<int32_t> tokens;
  double prefill_s = 0;
};

// The prompt's first `context` tokens through the batched prefill, timed.
void prefill(Engine& e, const std::vector<int32_t>& prompt, int64_t context, Run& r) {
  const auto t0 = std::chrono::steady_clock::now();
  e.prefill(std::vector<int32_t>(prompt.begin(), prompt.begin() + context));
  r.prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// `inputs` fed from position `context` on (teacher forcing), each step's logits kept.
void forced(Engine& e, int64_t context, const std::vector<int32_t>& inputs, Run& r) {
  e.set_first_position(context);
  r.logits.clear();
  for (size_t i = 0; i < inputs.size(); ++i) {
    e.set_inputs(context + static_cast<int64_t>(i), {inputs[i]});
    e.launch_graph();
    r.logits.push_back(e.logits(0));
  }
}

// Greedy from `first` at position `context` for `steps` steps: the tokens, and each step's
// logits where `keep_logits`.
void free_running(Engine& e, int64_t context, int32_t first, int64_t steps, bool keep_logits, Run& r) {
  e.set_first_position(context);
  e.set_inputs(context, {first});
  for (int64_t i = 0; i < steps; ++i) {
    e.launch_graph();
    if (keep_logits) r.logits.push_back(e.logits(0));
  }
  r.tokens = e.tokens(0, steps);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The fp8 and int8 KV caches' logits and greedy tokens against fp16's (lab tool)"};
  std::string model = "8b-int4", weights_path, kernel_name = "auto", tokens_path;
  std::vector<int64_t> contexts = {1024, 8192, 32768, 131000};
  int64_t steps = 64;
  uint64_t seed = 0;
  app.add_option("--model", model, "a preset, a decodebench config, an HF config.json or an HF model directory");
  app.add_option("--weights", weights_path, "a weights file or directory (default: the --model directory, else synthetic)");
  app.add_option("--contexts", contexts, "prompt lengths")->delimiter(',');
  app.add_option("--steps", steps, "decode steps after each prompt")->check(CLI::Range(int64_t{1}, int64_t{100000}));
  app.add_option("--kernel", kernel_name, "the linears' kernel (as --kernel of a run)");
  app.add_option("--seed", seed, "synthetic weights' seed");
  app.add_option("--tokens", tokens_path, "a file of whitespace-separated token ids for the prompt");
  CLI11_PARSE(app, argc, argv);
  try {
    ModelConfig c = load_model_config(model);
    if (weights_path.empty() && c.source == "hf")  // an HF directory, or its config.json
      weights_path = std::filesystem::is_directory(model) ? model : std::filesystem::path(model).parent_path().string();
    c = config_for_weights(c, {}, weights_path);
    c.kv_cache = KvScheme::fp16;
    for (int64_t ctx : contexts)
      if (ctx < 1 || ctx + steps > c.max_position_embeddings)
        fail("--contexts {}: a context from 1 to {} (max_position_embeddings {} less --steps {})", ctx,
             c.max_position_embeddings - steps, c.max_position_embeddings, steps);
    const int64_t longest = *std::max_element(contexts.begin(), contexts.end()) + steps + 1;
    const WeightSource ws(c, weights_path, seed);
    const KernelInfo& kernel = resolve_kernel(kernel_name, c.quant.scheme);
    std::vector<int32_t> prompt;
    if (tokens_path.empty()) {
      for (int64_t i = 0; i < longest; ++i) prompt.push_back(prompt_token(i, c.vocab_size));
    } else {
      const std::vector<int32_t> ids = read_token_file(tokens_path, c.vocab_size);
      for (int64_t i = 0; i < longest; ++i) prompt.push_back(ids[static_cast<size_t>(i) % ids.size()]);
    }
    // Loaded once, for the largest engine (fp16's cache at the longest context); each engine
    // after it is made and freed in turn.
    const auto w = load_device_weights(ws, kernel, longest, true);

    nlohmann::json out;
    out["model"] = c.name;
    out["weights"] = ws.describe();
    out["kernel"] = kernel.name;
    out["steps"] = steps;
    out["prompt"] = tokens_path.empty() ? "synthetic (prompt_token)" : tokens_path;
    out["max_position_embeddings"] = c.max_position_embeddings;
    for (int64_t ctx : contexts) {
      nlohmann::json row;
      row["context"] = ctx;
      Run ref;
      {
        Engine e(w, kernel, ctx + steps, true, 1, KvScheme::fp16);
        prefill(e, prompt, ctx, ref);
        free_running(e, ctx, prompt[static_cast<size_t>(ctx)], steps, true, ref);
      }
      row["fp16"] = {{"prefill_s", ref.prefill_s}};
      std::vector<int32_t> inputs = {prompt[static_cast<size_t>(ctx)]};
      inputs.insert(inputs.end(), ref.tokens.begin(), ref.tokens.end() - 1);
      for (KvScheme kv : kQuantized) {
        Run q;
        Engine e(w, kernel, ctx + steps, true, 1, kv);
        prefill(e, prompt, ctx, q);
        forced(e, ctx, inputs, q);
        double max_err = 0, sum_err = 0;
        int64_t n = 0;
        for (int64_t i = 0; i < steps; ++i) {
          const std::vector<float>& a = q.logits[static_cast<size_t>(i)];
          const std::vector<float>& b = ref.logits[static_cast<size_t>(i)];
          double mx = 0;
          for (float x : b) mx = std::max(mx, double{std::fabs(x)});
          for (size_t j = 0; j < b.size(); ++j) {
            const double err = std::fabs(double{a[j]} - b[j]) / mx;
            max_err = std::max(max_err, err);
            sum_err += err;
            ++n;
          }
        }
        free_running(e, ctx, prompt[static_cast<size_t>(ctx)], steps, false, q);
        int64_t first = steps, same = 0;
        for (int64_t i = 0; i < steps; ++i) {
          if (q.tokens[static_cast<size_t>(i)] == ref.tokens[static_cast<size_t>(i)])
            ++same;
          else
            first = std::min(first, i);
        }
        row[to_string(kv)] = {{"prefill_s", q.prefill_s},
                              {"logits_max_rel_err", max_err},
                              {"logits_mean_rel_err", sum_err / static_cast<double>(n)},
                              {"first_divergence", first},
                              {"token_agreement", static_cast<double>(same) / static_cast<double>(steps)}};
      }
      out["contexts"].push_back(row);
      std::fprintf(stderr, "context %lld done\n", static_cast<long long>(ctx));
    }
    std::printf("%s\n", out.dump(2).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decodebench_kv_accuracy: %s\n", e.what());
    return 1;
  }
  return 0;
}
