// The command line, run as the built binary: bad input ends with exactly one line on stderr
// that names the problem and the right exit code (2: the command line is wrong, 1: what it
// names is wrong), before any backend work. Only cases that fail before a backend is
// needed are run here, so these tests need no GPU.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

namespace {

using db_test::expect_one_line_error;
using db_test::Outcome;
using db_test::run;

}  // namespace

TEST(Cli, UnknownPreset) {
  expect_one_line_error(run({"--model", "8b-int5"}), 1, "unknown model '8b-int5': not a preset");
}

TEST(Cli, MissingConfigFile) {
  expect_one_line_error(run({"--model", "/no/such/dir/config.json"}), 1, "no such file");
}

TEST(Cli, BadQuantValue) {
  expect_one_line_error(run({"--model", "tiny", "--quant", "int3"}), 2, "--quant");
}

// --kv-cache takes fp16, fp8 or int8: anything else is one line naming them; on `run` a list
// points at sweep.
TEST(Cli, KvCacheTakesOneOfItsSchemes) {
  expect_one_line_error(run({"--model", "tiny", "--kv-cache", "int4"}), 2, "{fp16,fp8,int8}");
  expect_one_line_error(run({"--model", "tiny", "--kv-cache", ""}), 2, "{fp16,fp8,int8}");
  expect_one_line_error(run({"--model", "tiny", "--kv-cache", "FP8"}), 2, "{fp16,fp8,int8}");
  expect_one_line_error(run({"--model", "tiny", "--kv-cache", "fp8,int8"}), 2,
                        "--kv-cache: 'fp8,int8' is a list");
  expect_one_line_error(run({"sweep", "--model", "tiny", "--kv-cache", "fp8,e5m2", "--backend", "cpu"}), 2,
                        "--kv-cache e5m2: not one of fp16, fp8, int8");
}

// Each scheme runs on the CPU backend and is recorded in the result's config and command;
// without the option the cache is fp16 and the command does not name it.
TEST(Cli, KvCacheIsRecordedInTheResult) {
  for (const char* scheme : {"fp16", "fp8", "int8"}) {
    const Outcome o = run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "2", "--warmup", "0",
                           "--repeat", "1", "--kv-cache", scheme, "-o", "-"});
    ASSERT_EQ(o.code, 0) << o.err;
    const auto doc = nlohmann::json::parse(o.out);
    EXPECT_EQ(doc.at("config").at("kv_cache"), scheme);
    EXPECT_NE(doc.at("command").get<std::string>().find(std::string("--kv-cache ") + scheme),
              std::string::npos);
  }
  const Outcome plain = run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "2", "--warmup", "0",
                             "--repeat", "1", "-o", "-"});
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(nlohmann::json::parse(plain.out).at("config").at("kv_cache"), "fp16");
}

TEST(Cli, NegativeTokens) {
  expect_one_line_error(run({"--model", "tiny", "--tokens", "-5"}), 2, "--tokens must be at least 1");
}

TEST(Cli, IntegersAreCheckedWhole) {
  expect_one_line_error(run({"--model", "tiny", "--seed", "-1"}), 2,
                        "--seed '-1': not a non-negative integer");
  expect_one_line_error(run({"--model", "tiny", "--context", "99999999999999999999"}), 2, "--context");
  expect_one_line_error(run({"--model", "tiny", "--repeat", "3x"}), 2, "--repeat '3x'");
  expect_one_line_error(run({"--model", "tiny", "--group-size", "0"}), 2, "--group-size must be positive");
}

TEST(Cli, BatchIsAPositiveIntegerUpToTheLimit) {
  expect_one_line_error(run({"--model", "tiny", "--backend", "cpu", "--batch", "0"}), 2,
                        "--batch must be at least 1, got 0");
  expect_one_line_error(run({"--model", "tiny", "--backend", "cpu", "--batch", "-2"}), 2,
                        "--batch must be at least 1, got -2");
  expect_one_line_error(run({"--model", "tiny", "--backend", "cpu", "--batch", "2x"}), 2,
                        "--batch '2x': not an integer");
  expect_one_line_error(run({"--model", "tiny", "--backend", "cpu", "--batch", "4097"}), 2,
                        "--batch 4097: above the limit of 4096");
  expect_one_line_error(run({"sweep", "--model", "tiny", "--backend", "cpu", "--batch", "1,0"}), 2,
                        "--batch must be at least 1, got 0");
  expect_one_line_error(run({"sweep", "--model", "tiny", "--backend", "cpu", "--batch", "1-8*1"}), 2,
                        "--batch '1-8*1'");
}

// What `sweep` takes as a list or a range, `run` refuses in one line that points at `sweep`.
TEST(Cli, RunPointsListsAndRangesAtSweep) {
  expect_one_line_error(
      run({"--model", "tiny", "--backend", "cpu", "--batch", "1-16*2"}), 2,
      "--batch: '1-16*2' is a range: `run` takes one value, `decodebench sweep` takes lists and ranges");
  expect_one_line_error(run({"--model", "tiny", "--backend", "cpu", "--context", "0,64"}), 2,
                        "--context: '0,64' is a list");
  expect_one_line_error(run({"--model", "tiny", "--tokens", "8-64+8"}), 2, "--tokens: '8-64+8' is a range");
  expect_one_line_error(
      run({"--model", "tiny", "--graph", "on,off"}), 2,
      "--graph: 'on,off' is a list: `run` takes one value, `decodebench sweep` takes lists");
  expect_one_line_error(run({"run", "--model", "tiny,tiny-int4"}), 2, "--model: 'tiny,tiny-int4' is a list");
  expect_one_line_error(run({"--model", "tiny", "--quant", "int8,int4"}), 2,
                        "--quant: 'int8,int4' is a list");
  // A negative count is a bad value, not a range; so is what sweep would not read as one.
  expect_one_line_error(run({"--model", "tiny", "--backend", "cpu", "--batch", "-2"}), 2,
                        "--batch must be at least 1, got -2");
  const Outcome bad = run({"--model", "tiny", "--backend", "cpu", "--batch", "2-1*2"});
  expect_one_line_error(bad, 2, "'2-1*2'");
  EXPECT_EQ(bad.err.find("range"), std::string::npos) << bad.err;
}

TEST(Cli, GraphMaybe) {
  expect_one_line_error(run({"--model", "tiny", "--graph", "maybe"}), 2, "--graph");
}

TEST(Cli, UnknownOption) {
  expect_one_line_error(run({"--model", "tiny", "--bogus"}), 2, "--bogus");
}

TEST(Cli, BadFormat) {
  expect_one_line_error(run({"--model", "tiny", "--format", "xml"}), 2, "--format");
}

TEST(Cli, FormatCannotBeInferred) {
  expect_one_line_error(run({"--model", "tiny", "-o", "/tmp/result.txt"}), 2, "cannot tell the format");
}

TEST(Cli, OutputIntoMissingDirectory) {
  expect_one_line_error(run({"--model", "tiny", "-o", "/no/such/dir/result.json"}), 1,
                        "directory /no/such/dir does not exist");
}

TEST(Cli, UnsupportedHfArchitecture) {
  expect_one_line_error(run({"--model", std::string(DB_TEST_DATA) + "/configs/gemma2_2b.json"}), 1,
                        "architecture Gemma2ForCausalLM is not supported");
}

TEST(Cli, GroupSizeThatDoesNotDivide) {
  expect_one_line_error(run({"--model", "8b", "--quant", "int4", "--group-size", "100"}), 1,
                        "group_size 100 does not divide hidden_size 4096");
}

TEST(Cli, KernelOfAnotherScheme) {
  expect_one_line_error(run({"--model", "8b-int4", "--kernel", "fp16.cublas"}), 2, "fp16.cublas");
}

TEST(Cli, AdapterModeWithoutAdapter) {
  expect_one_line_error(run({"--model", "tiny", "--adapter-mode", "external"}), 2,
                        "--adapter-mode needs --adapter");
}

TEST(Cli, UnknownVerb) {
  expect_one_line_error(run({"benchmark"}), 2, "unknown verb 'benchmark'");
}

TEST(Cli, ListWorksFromAnotherDirectory) {
  const Outcome o = run({"list"}, "/");
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("8b-int4"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("qwen3"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("int4.gemv"), std::string::npos) << o.out;
  const Outcome p = run({"list", "presets"}, "/");
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("70b-int4"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("8.03B"), std::string::npos) << p.out;
  expect_one_line_error(run({"list", "models"}), 2, "models");
}

TEST(Cli, VersionCarriesTheGitCommit) {
  const Outcome o = run({"--version"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_TRUE(std::regex_match(
      o.out, std::regex(R"(decodebench \d+\.\d+\.\d+ \(([0-9a-f]{7,40}(-dirty)?|unknown)\)\n)")))
      << o.out;
}

TEST(Cli, HelpShowsTheRealDefaults) {
  const Outcome o = run({"run", "--help"});
  EXPECT_EQ(o.code, 0) << o.err;
  for (const char* line : {"--tokens", "--warmup", "--repeat", "--graph", "--model"})
    EXPECT_NE(o.out.find(line), std::string::npos) << line;
  // The defaults are printed (CLI11 writes "=128" or "[128]" depending on its version).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(o.out, m, std::regex(R"(--tokens INT[ =\[]*128)"))) << o.out;
  ASSERT_TRUE(std::regex_search(o.out, m, std::regex(R"(--model TEXT[ =\[]*8b-int4)"))) << o.out;
}

// A typo gets one line with the name it most likely meant.
TEST(Cli, TyposOfOptionsPresetsAndVerbsSuggestTheClosestName) {
  expect_one_line_error(run({"--modle", "tiny", "--backend", "cpu"}), 2, "(did you mean --model?)");
  expect_one_line_error(run({"sweep", "--tokns", "4"}), 2, "(did you mean --tokens?)");
  expect_one_line_error(run({"compare", "a.json", "b.json", "--treshold", "3"}), 2,
                        "(did you mean --threshold?)");
  expect_one_line_error(run({"--model", "8b-in4", "--backend", "cpu"}), 1, "(did you mean 8b-int4?)");
  expect_one_line_error(run({"swep", "--model", "tiny"}), 2, "(did you mean sweep?)");
  // Nothing close: no suggestion.
  const Outcome far = run({"--frobnicate", "--backend", "cpu"});
  EXPECT_EQ(far.code, 2);
  EXPECT_EQ(far.err.find("did you mean"), std::string::npos) << far.err;
}

// Options the CPU backend cannot apply are warned about, never silently dropped; -o - puts
// the result on stdout (the summary moves to stderr).
TEST(Cli, CpuBackendWarnsAboutOptionsItIgnoresAndDashOIsStdout) {
  const Outcome o = run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "2", "--repeat", "1",
                         "--graph", "off", "--kernel", "int4.gemv", "-o", "-"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("decodebench: warning: --graph has no effect on the CPU backend"), std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("decodebench: warning: --kernel has no effect on the CPU backend"), std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("TPOT "), std::string::npos) << "the summary goes to stderr with -o -";
  const auto doc = nlohmann::json::parse(o.out);  // stdout is one JSON result
  EXPECT_EQ(doc.at("config").at("kernel"), "cpu.reference");
  EXPECT_EQ(doc.at("config").at("graph"), false);
  const Outcome csv = run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "2", "--repeat", "1", "-o",
                           "-", "--format", "csv"});
  ASSERT_EQ(csv.code, 0) << csv.err;
  EXPECT_EQ(csv.out.rfind("config.model,", 0), 0u) << csv.out;
}
