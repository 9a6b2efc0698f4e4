// End to end on the CPU backend, through the built binary: a run writes a result that reads
// back, the committed HF checkpoint runs through --weights, a file written by gen-weights or
// quantize generates exactly the tokens of the weights it was made from, and bad input
// fails with one stderr line and leaves no result file (or temp file) behind.
#include <gtest/gtest.h>
#include "temp_dir.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "decodebench/result.h"

namespace {

namespace fs = std::filesystem;
using db_test::expect_one_line_error;
using db_test::Outcome;

const std::string kTinyLlama = "tests/data/hf/tiny-llama";  // relative to the source dir

// Runs the binary from the source directory, so the committed test data is found by the
// relative paths a user would type.
Outcome run(const std::vector<std::string>& args) {
  return db_test::run(args, DB_SOURCE_DIR);
}

class E2e : public db_test::TempDirTest {
 protected:
  // Files in the temp directory, by name.
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    return names;
  }

  // A cpu run that must succeed and write `name` as a JSON result; returns that result.
  db::Result run_ok(std::vector<std::string> args, const std::string& name) {
    args.insert(args.end(), {"--backend", "cpu", "-o", path(name)});
    const Outcome o = run(args);
    EXPECT_EQ(o.code, 0) << "stderr: " << o.err;
    EXPECT_TRUE(db_test::only_measurement_warnings(o.err)) << o.err;
    if (o.code != 0) return {};
    const std::vector<db::Result> r = db::read_results(path(name));
    EXPECT_EQ(r.size(), 1u);
    return r.empty() ? db::Result{} : r[0];
  }

  // A run that must fail with one stderr line naming `phrase` and leave nothing in the
  // temp directory beyond `keep` (the inputs the test wrote).
  void expect_clean_failure(const std::vector<std::string>& args, int code, const std::string& phrase,
                            const std::vector<std::string>& keep) {
    expect_one_line_error(run(args), code, phrase);
    std::vector<std::string> left = listing();
    std::sort(left.begin(), left.end());
    std::vector<std::string> expected = keep;
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(left, expected) << "a failed run left files behind";
  }
};

TEST_F(E2e, CpuRunWritesAResultThatReadsBack) {
  const Outcome o = run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "8", "--warmup", "1",
                         "--repeat", "2", "-o", path("out.json")});
  ASSERT_EQ(o.code, 0) << "stderr: " << o.err;
  EXPECT_TRUE(db_test::only_measurement_warnings(o.err)) << o.err;
  EXPECT_FALSE(o.out.empty()) << "no summary on stdout";
  EXPECT_EQ(listing(), std::vector<std::string>{"out.json"}) << "a temp file was left behind";

  const std::vector<db::Result> results = db::read_results(path("out.json"));
  ASSERT_EQ(results.size(), 1u);
  const db::Result& r = results[0];
  EXPECT_EQ(r.schema, "decodebench/result/v1");
  EXPECT_EQ(r.config.model, "tiny-int4");
  EXPECT_EQ(r.config.scheme, "int4");
  EXPECT_EQ(r.device.backend, "cpu");
  EXPECT_EQ(r.timing.samples_ms.size(), 16u);  // --tokens 8 x --repeat 2
  EXPECT_EQ(r.timing.tpot_ms.n, 16);
  EXPECT_GT(r.bytes.per_token.total, 0u);
  EXPECT_EQ(r.check.tokens.size(), 8u);
  EXPECT_EQ(r.check.tokens_hash.size(), 16u);
}

// The prefill's figures: the CPU backend takes a decode step a token and says so; the rate
// is the context over the time; the summary prints them.
TEST_F(E2e, AContextReportsHowAndHowFastItWasReached) {
  const Outcome o = run({"--model", "tiny-int4", "--backend", "cpu", "--context", "24", "--tokens", "4",
                         "--warmup", "1", "--repeat", "1", "-o", path("out.json")});
  ASSERT_EQ(o.code, 0) << "stderr: " << o.err;
  const db::Result r = db::read_results(path("out.json")).at(0);
  EXPECT_EQ(r.timing.prefill, "steps");
  ASSERT_GT(r.timing.prefill_s, 0.0);
  EXPECT_DOUBLE_EQ(r.timing.prefill_tokens_per_s, 24 / r.timing.prefill_s);
  EXPECT_NE(o.out.find("prefill   24 tokens in "), std::string::npos) << o.out;
  const Outcome none = run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "4", "--warmup", "1",
                            "--repeat", "1", "-o", path("none.json")});
  ASSERT_EQ(none.code, 0) << "stderr: " << none.err;
  EXPECT_EQ(db::read_results(path("none.json")).at(0).timing.prefill_tokens_per_s, 0.0);
  EXPECT_EQ(none.out.find("prefill "), std::string::npos) << none.out;
}

// `run` refuses a comma list of models (sweep takes those), but a config path with a comma
// in it is a path. Only --model takes paths: on --kernel the same existing path is a list.
TEST_F(E2e, RunTakesAModelPathWithAComma) {
  fs::create_directories(path("a,b"));
  fs::copy_file(fs::path(DB_SOURCE_DIR) / "configs" / "tiny.json", path("a,b/tiny.json"));
  const db::Result r = run_ok(
      {"--model", path("a,b/tiny.json"), "--tokens", "2", "--warmup", "0", "--repeat", "1"}, "out.json");
  EXPECT_EQ(r.config.scheme, "fp16");
  const Outcome kernel = run({"--model", "tiny", "--kernel", path("a,b"), "--backend", "cpu"});
  EXPECT_EQ(kernel.code, 2);
  EXPECT_NE(kernel.err.find("is a list: `run` takes one value"), std::string::npos) << kernel.err;
}

TEST_F(E2e, HfCheckpointRunsThroughWeights) {
  const db::Result r =
      run_ok({"--model", kTinyLlama, "--weights", kTinyLlama, "--tokens", "4", "--repeat", "1"}, "hf.json");
  EXPECT_EQ(r.config.weights, kTinyLlama);
  EXPECT_EQ(r.check.tokens.size(), 4u);
}

// A file written by gen-weights holds exactly the synthetic model of the same seed: both
// generate the same tokens, for each scheme.
TEST_F(E2e, GenWeightsFileAndSyntheticGeneratorAgree) {
  for (const std::string scheme : {"int4", "int8", "fp16"}) {
    SCOPED_TRACE(scheme);
    const std::string model = "tiny-" + scheme, file = path("w-" + scheme + ".safetensors");
    const Outcome g = run({"gen-weights", "--model", model, "--seed", "3", "-o", file});
    ASSERT_EQ(g.code, 0) << "stderr: " << g.err;
    const db::Result from_file = run_ok(
        {"--model", model, "--weights", file, "--tokens", "8", "--repeat", "1"}, "file-" + scheme + ".json");
    const db::Result synthetic = run_ok({"--model", model, "--seed", "3", "--tokens", "8", "--repeat", "1"},
                                        "synth-" + scheme + ".json");
    EXPECT_EQ(from_file.check.tokens.size(), 8u);
    EXPECT_EQ(from_file.check.tokens_hash, synthetic.check.tokens_hash);
    EXPECT_EQ(from_file.check.tokens, synthetic.check.tokens);
    EXPECT_EQ(from_file.bytes.per_token.total, synthetic.bytes.per_token.total);
  }
  // The comparison means something only if the tokens depend on the weights.
  const db::Result other =
      run_ok({"--model", "tiny-int4", "--seed", "4", "--tokens", "8", "--repeat", "1"}, "synth-seed4.json");
  const db::Result seed3 = db::read_results(path("synth-int4.json")).at(0);
  EXPECT_NE(other.check.tokens, seed3.check.tokens) << "seeds 3 and 4 generate the same tokens";
}

// quantize writes what quantize-on-load computes: the same tokens either way.
TEST_F(E2e, QuantizedFileMatchesQuantizeOnLoad) {
  const std::string file = path("q.safetensors");
  const Outcome q = run({"quantize", kTinyLlama, "--quant", "int8", "-o", file});
  ASSERT_EQ(q.code, 0) << "stderr: " << q.err;
  const db::Result from_file =
      run_ok({"--model", kTinyLlama, "--weights", file, "--quant", "int8", "--tokens", "8", "--repeat", "1"},
             "file.json");
  const db::Result on_load = run_ok(
      {"--model", kTinyLlama, "--weights", kTinyLlama, "--quant", "int8", "--tokens", "8", "--repeat", "1"},
      "on-load.json");
  EXPECT_EQ(from_file.config.scheme, "int8");
  EXPECT_EQ(from_file.check.tokens.size(), 8u);
  EXPECT_EQ(from_file.check.tokens_hash, on_load.check.tokens_hash);
  EXPECT_EQ(from_file.check.tokens, on_load.check.tokens);
}

TEST_F(E2e, TruncatedWeightsFileFailsCleanly) {
  const std::string file = path("w.safetensors");
  ASSERT_EQ(run({"gen-weights", "--model", "tiny-int4", "-o", file}).code, 0);
  const uintmax_t size = fs::file_size(file);
  fs::resize_file(file, size / 2);  // the header is intact, the data ends early
  expect_clean_failure(
      {"--model", "tiny-int4", "--weights", file, "--backend", "cpu", "-o", path("out.json")}, 1, file,
      {"w.safetensors"});
  fs::resize_file(file, 5);  // not even the 8-byte header length
  expect_clean_failure(
      {"--model", "tiny-int4", "--weights", file, "--backend", "cpu", "-o", path("out.json")}, 1, file,
      {"w.safetensors"});
}

TEST_F(E2e, WeightsFileOfAnotherSchemeFailsCleanly) {
  const std::string file = path("w.safetensors");
  ASSERT_EQ(run({"gen-weights", "--model", "tiny-int4", "-o", file}).code, 0);
  expect_clean_failure(
      {"--model", "tiny-int8", "--weights", file, "--backend", "cpu", "-o", path("out.json")}, 1,
      "holds int4 weights but the run asks for int8", {"w.safetensors"});
}

TEST_F(E2e, WeightsFileWithAZeroPointPastFourBitsFailsCleanly) {
  const std::string file = path("w.safetensors");
  ASSERT_EQ(run({"gen-weights", "--model", "tiny-int4", "-o", file}).code, 0);
  // Set the first zero point of one matrix to 16: the header says where its bytes are.
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_len = 0;
  f.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  const nlohmann::json h = nlohmann::json::parse(header);
  std::string name;
  for (const auto& [key, value] : h.items())
    if (key.size() > 6 && key.compare(key.size() - 6, 6, ".zeros") == 0) name = key;
  ASSERT_FALSE(name.empty()) << "gen-weights wrote no zero points";
  f.seekp(static_cast<std::streamoff>(8 + header_len + h[name]["data_offsets"][0].get<uint64_t>()));
  f.put(16);
  f.close();
  expect_clean_failure(
      {"--model", "tiny-int4", "--weights", file, "--backend", "cpu", "-o", path("out.json")}, 1,
      "holds the zero point 16 at element 0; int4 zero points are 0..15", {"w.safetensors"});
}

TEST_F(E2e, WeightsFileWithAWrongShapeFailsCleanly) {
  // The tiny fp16 model's weights under a config whose MLP is twice as wide.
  const std::string file = path("w.safetensors"), config = path("wide.json");
  ASSERT_EQ(run({"gen-weights", "--model", "tiny-fp16", "-o", file}).code, 0);
  std::ofstream(config) << R"({"extends": "tiny-fp16", "intermediate_size": 512})";
  expect_clean_failure({"--model", config, "--weights", file, "--backend", "cpu", "-o", path("out.json")}, 1,
                       "has shape [256, 128], expected [512, 128]", {"w.safetensors", "wide.json"});
}

TEST_F(E2e, OutputIntoAMissingDirectoryFailsCleanly) {
  expect_clean_failure(
      {"--model", "tiny-int4", "--backend", "cpu", "--tokens", "2", "-o", path("missing/out.json")}, 1,
      "does not exist", {});
}

}  // namespace

// report --format summary prints a stored result as the run printed it.
TEST_F(E2e, ReportPrintsAStoredResultAsTheRunDid) {
  const Outcome o = run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "4", "--warmup", "1",
                         "--repeat", "2", "-o", path("r.json")});
  ASSERT_EQ(o.code, 0) << o.err;
  const Outcome s = run({"report", path("r.json"), "--format", "summary"});
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_EQ(s.out, o.out);
}
