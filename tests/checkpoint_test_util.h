// What the tests of published checkpoints (tests/test_int4_checkpoint.cpp,
// tests/test_fp8_checkpoint.cpp) share: the integers scripts/checkpoint_writer.py draws, the
// one-line error checks, the decode comparisons against the dequantized checkpoint and
// against transformers, the CLI's result, and the scripts' byte-for-byte regeneration.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "decodebench/cpu_reference.h"
#include "decodebench/error.h"
#include "decodebench/model.h"
#include "decodebench/result.h"
#include "decodebench/weights.h"
#include "reference_trace.h"

namespace db_test {

// The scripts' generator R(tag, i): the splitmix64 finalizer of fnv1a64(tag) + seed +
// (i + 1) * golden.
inline uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char b : s) h = (h ^ b) * 0x100000001B3ull;
  return h;
}
inline uint64_t rand_at(uint64_t seed, const std::string& tag, uint64_t i) {
  uint64_t z = fnv1a64(tag) + seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The run's config for the checkpoint in `dir`, as the CLI makes it.
inline db::ModelConfig config_of(const std::string& dir, const db::QuantOverrides& asked = {}) {
  return db::config_for_weights(db::load_model_config(dir), asked, dir);
}

// The message of the db::Error that f throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const db::Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline void expect_one_line(const std::string& e, const std::string& phrase) {
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_NE(e.find(phrase), std::string::npos) << "expected '" << phrase << "' in: " << e;
}

// A parameterized test's name: the parameter's `dir`, '-' made '_'.
template <class P>
std::string dir_test_name(const ::testing::TestParamInfo<P>& i) {
  std::string n = i.param.dir;
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

// The CPU reference on `ws` and on `ref`, over one prompt then greedy steps: the same logits
// in every bit and the same tokens, and logits that move from position 0 (the comparison is
// not of a constant).
inline void expect_same_cpu_decode(const db::WeightSource& ws, const db::WeightSource& ref,
                                   const std::string& label) {
  const std::vector<int32_t> prompt = {1, 17, 250, 3, 99, 411, 7, 42};
  constexpr int64_t kSteps = 24;
  const Trace a = cpu_trace(ws, prompt, kSteps);
  const Trace b = cpu_trace(ref, prompt, kSteps);
  ASSERT_EQ(a.logits.size(), size_t{kSteps});
  ASSERT_EQ(b.logits.size(), size_t{kSteps});
  double moved = 0;
  for (size_t pos = 0; pos < a.logits.size(); ++pos) {
    ASSERT_EQ(a.logits[pos].size(), b.logits[pos].size());
    for (size_t i = 0; i < a.logits[pos].size(); ++i) {
      ASSERT_EQ(db::float_bits(a.logits[pos][i]), db::float_bits(b.logits[pos][i]))
          << label << " position " << pos << " logit " << i;
      moved = std::max(moved, double(std::fabs(a.logits[pos][i] - a.logits[0][i])));
    }
    ASSERT_EQ(a.tokens[pos], b.tokens[pos]) << label << " position " << pos;
  }
  EXPECT_GT(moved, 1e-3) << label;
}

// The CPU reference on `ws`, teacher-forced with transformers' sequence in `golden`
// (scripts/make_goldens.py): its float32 logits within 1e-4 of the largest (only the
// summation order differs), and its argmax transformers' next token wherever transformers'
// own top-2 gap is wider than that.
inline void expect_transformers_logits(const db::WeightSource& ws, const std::string& golden,
                                       const std::string& label) {
  const Golden g = read_golden(golden);
  const int64_t steps = static_cast<int64_t>(g.tokens.size()) - 1;
  db::CpuModel m(ws, steps, 1);
  for (int64_t pos = 0; pos < steps; ++pos) {
    const std::vector<float>& l = m.step(g.tokens[static_cast<size_t>(pos)], pos);
    const float* want = g.at(pos);
    double d = 0, mx = 0;
    for (int64_t i = 0; i < g.vocab; ++i) {
      d = std::max(d, double(std::fabs(l[static_cast<size_t>(i)] - want[i])));
      mx = std::max(mx, double(std::fabs(want[i])));
    }
    ASSERT_LE(d, 1e-4 * mx) << label << " position " << pos;
    if (pos < g.prompt - 1) continue;
    std::vector<float> sorted(want, want + g.vocab);
    std::nth_element(sorted.begin(), sorted.begin() + 1, sorted.end(), std::greater<float>());
    if (sorted[0] - sorted[1] > 1e-4 * mx)
      EXPECT_EQ(db::CpuModel::argmax(l), g.tokens[static_cast<size_t>(pos + 1)])
          << label << " position " << pos;
  }
}

// The results of a short CPU run of the CLI on the checkpoint in `weights` (none if it failed);
// its stderr in `err`.
inline std::vector<db::Result> cli_results(const std::string& weights, const std::string& tag,
                                           std::string* err) {
  const std::string out = (std::filesystem::temp_directory_path() /
                           ("decodebench_" + tag + "_" + std::to_string(::getpid()) + ".json"))
                              .string();
  const Outcome o = run({"--weights", weights, "--backend", "cpu", "--tokens", "4", "--warmup", "1",
                         "--repeat", "1", "-o", out});
  *err = o.err;
  EXPECT_EQ(o.code, 0) << o.err;
  if (o.code != 0) return {};
  std::vector<db::Result> r = db::read_results(out);
  std::filesystem::remove(out);
  return r;
}

// The CLI refuses `--quant quant` on the checkpoint in `weights` in one line.
inline void expect_cli_refuses_quant(const std::string& weights, const std::string& quant) {
  const Outcome bad = run({"--weights", weights, "--backend", "cpu", "--quant", quant, "--tokens", "4"});
  EXPECT_NE(bad.code, 0);
  ASSERT_FALSE(bad.err.empty());
  EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  EXPECT_NE(bad.err.find("--quant " + quant + " contradicts it"), std::string::npos) << bad.err;
}

// scripts/`script` run into `out` writes every committed file under `data` (but
// transformers' golden.safetensors, scripts/make_goldens.py's) byte for byte: `files` of them.
inline void expect_script_regenerates(const std::string& script, const std::string& data,
                                      const std::string& out, int files) {
  const Outcome o = run_script(script, {out});
  ASSERT_EQ(o.code, 0) << o.err;
  int seen = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(data)) {
    if (!e.is_regular_file() || e.path().filename() == "golden.safetensors") continue;
    const std::string rel = std::filesystem::relative(e.path(), data).string();
    EXPECT_EQ(slurp(out + "/" + rel), slurp(e.path().string())) << rel;
    ++seen;
  }
  EXPECT_EQ(seen, files);
}

}  // namespace db_test
