// Hostile input never crashes, hangs or exhausts memory: every reproducer of the
// mutation campaign, as the user met it (the built binary, one stderr line, the exit code
// of bad input) or, where the property is about a file's bytes, through the library.
// Inputs that used to hang now fail at once; a regression would hang, and ctest's timeout
// fails it. No test asserts on a duration.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "decodebench/adapter.h"
#include "decodebench/commands.h"
#include "decodebench/error.h"
#include "decodebench/host_memory.h"
#include "decodebench/input.h"
#include "decodebench/output_file.h"
#include "decodebench/result.h"
#include "decodebench/safetensors.h"
#include "decodebench/sweep.h"
#include "temp_dir.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using db_test::expect_one_line_error;
using db_test::Outcome;
using db_test::run;
using db_test::slurp;

const std::string kHf = std::string(DB_TEST_DATA) + "/hf";

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string nested(const std::string& open, const std::string& close, int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += open;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

// The message of the db::Error `f` throws; a failure when it throws nothing or another type.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const db::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a db::Error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no error";
  return "";
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

// Starts the binary with `args`, stdout and stderr to files; returns its pid.
pid_t spawn(const std::vector<std::string>& args, const std::string& out, const std::string& err) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> all = {DB_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, DB_BINARY, &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

// The binary as run_command's program, started by sh after `limits` (ulimit, trap).
std::string with_limits(const std::string& limits) {
  return "sh -c " + db_test::quote(limits + "; exec \"$0\" \"$@\"") + " " + db_test::quote(DB_BINARY);
}

int wait_code(pid_t pid) {
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A result of the tiny model on the CPU backend, as text (`extra` options appended).
class Hostile : public db_test::TempDirTest {
 protected:
  std::string cpu_result(const std::string& name, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--model",  "tiny", "--backend", "cpu", "--tokens", "2",
                                     "--repeat", "1",    "--warmup",  "0",   "-o",       path(name)};
    args.insert(args.end(), extra.begin(), extra.end());
    const Outcome o = run(args);
    EXPECT_EQ(o.code, 0) << o.err;
    return slurp(path(name));
  }
  // A PEFT adapter directory: the test adapter of tiny-llama with adapter_config.json replaced.
  std::string adapter_dir(const std::string& name, const std::string& config) {
    const std::string d = path(name);
    fs::create_directories(d);
    fs::copy_file(kHf + "/tiny-llama-lora/adapter_model.safetensors", d + "/adapter_model.safetensors");
    write(d + "/adapter_config.json", config);
    return d;
  }
  std::string lora_config_with(const std::string& field, const std::string& value) {
    std::string text = slurp(kHf + "/tiny-llama-lora/adapter_config.json");
    const size_t brace = text.rfind('}');
    return text.substr(0, brace) + ", \"" + field + "\": " + value + "\n}";
  }
  Outcome run_adapter(const std::string& adapter) {
    return run({"--model", kHf + "/tiny-llama", "--backend", "cpu", "--tokens", "2", "--repeat", "1",
                "--warmup", "0", "--adapter", adapter});
  }
};

// ---------------------------------------------------------------- nesting: a depth limit

TEST_F(Hostile, DeeplyNestedConfigIsRefusedNotAStackOverflow) {
  write(path("deep.json"), "{\"extends\": \"tiny\", \"head_dim\": " + nested("[", "]", 50000) + "}");
  expect_one_line_error(run({"--model", path("deep.json"), "--backend", "cpu"}), 1,
                        "JSON nested deeper than 64 levels (in field head_dim[0]");
  write(path("deep-obj.json"), nested("{\"a\": ", "}", 50000));  // not even valid at the end: depth first
  expect_one_line_error(run({"--model", path("deep-obj.json"), "--backend", "cpu"}), 1,
                        "nested deeper than 64");
}

TEST_F(Hostile, DeeplyNestedAdapterConfigIsRefused) {
  const std::string d = adapter_dir("deep", lora_config_with("eva_config", nested("[", "]", 50000)));
  expect_one_line_error(run_adapter(d), 1, "nested deeper than 64 levels (in field eva_config[0]");
}

TEST_F(Hostile, DeeplyNestedResultLineIsRefusedByReportAndCompare) {
  std::string line = cpu_result("r.jsonl");
  const std::string good = line;
  const size_t at = line.find("\"context\":0");
  ASSERT_NE(at, std::string::npos);
  line.replace(at, 11, "\"context\":" + nested("[", "]", 50000));
  write(path("deep.jsonl"), line);
  expect_one_line_error(run({"report", path("deep.jsonl")}), 1, "nested deeper than 64 levels");
  expect_one_line_error(run({"compare", path("deep.jsonl"), path("r.jsonl")}), 2,
                        "nested deeper than 64 levels");
  write(path("deep2.jsonl"), good + line);  // the second line: named by its number
  expect_one_line_error(run({"report", path("deep2.jsonl")}), 1, "deep2.jsonl:2: JSON nested deeper");
}

// A chain of one-line configs, c0.json extending c1.json ... and the last extending tiny:
// `files` files, `files` + 1 configs with the preset.
void extends_chain(const std::string& dir, int files) {
  for (int i = 0; i < files; ++i)
    write(
        dir + "/c" + std::to_string(i) + ".json",
        i + 1 < files ? "{\"extends\": \"c" + std::to_string(i + 1) + ".json\"}" : "{\"extends\": \"tiny\"}");
}

TEST_F(Hostile, AnExtendsChainAboveTheLimitIsRefusedNamingTheLimitAndTheChain) {
  // 30,000 configs deep overflowed the stack; the chain is refused at its 65th config.
  extends_chain(dir_.string(), 30000);
  const Outcome o = run({"--model", path("c0.json"), "--backend", "cpu", "--tokens", "1"});
  expect_one_line_error(o, 1,
                        "config " + path("c0.json") + ": extends chain longer than 64 configs (the limit): ");
  EXPECT_CONTAINS(o.err, path("c0.json") + " -> " + path("c1.json") + " -> " + path("c2.json") +
                             " -> ... (60 more) -> " + path("c63.json") + " -> " + path("c64.json") + "\n");
}

TEST_F(Hostile, AnExtendsChainAtTheLimitLoads) {
  extends_chain(dir_.string(), 63);  // 63 files and the preset: 64 configs
  const Outcome at = run(
      {"--model", path("c0.json"), "--backend", "cpu", "--tokens", "1", "--repeat", "1", "--warmup", "0"});
  EXPECT_EQ(at.code, 0) << at.err;
  extends_chain(dir_.string(), 64);
  expect_one_line_error(run({"--model", path("c0.json"), "--backend", "cpu"}), 1,
                        "extends chain longer than 64 configs");
}

// ---------------------------------------------------------------- target_modules: RE2

TEST_F(Hostile, LongTargetModulesPatternsAreRefusedBeforeCompiling) {
  const std::string x =
      adapter_dir("x", lora_config_with("target_modules", "\"" + std::string(100000, 'x') + "\""));
  expect_one_line_error(run_adapter(x), 1, "target_modules is a regular expression of 100000 bytes");
  const std::string p =
      adapter_dir("p", lora_config_with("target_modules", "\"" + nested("(", ")", 200000) + "\""));
  expect_one_line_error(run_adapter(p), 1, "above the limit of 4096");
}

TEST_F(Hostile, NestedPatternWithinTheLengthLimitCompilesOrIsRefused) {
  // 2000 groups deep: std::regex's recursive compiler overflowed far less; RE2 refuses it.
  const std::string d =
      adapter_dir("n", lora_config_with("target_modules", "\"" + nested("(", ")", 2000) + "\""));
  const Outcome o = run_adapter(d);
  expect_one_line_error(o, 1, "target_modules");
}

TEST_F(Hostile, BacktrackingPatternFinishesAndKeepsFullMatchSemantics) {
  // std::regex ran for minutes; RE2 is linear. (.*)* matches everything, but not an 'x' at
  // the end of a module name: nothing is selected.
  const std::string bt =
      adapter_dir("bt", lora_config_with("target_modules", R"("(.*)*(.*)*(.*)*(.*)*(.*)*x")"));
  expect_one_line_error(run_adapter(bt), 1, "selects no linear of the model");
  // Full match, as PEFT's re.fullmatch: "q_proj" alone matches no full module name ...
  const std::string part = adapter_dir("part", lora_config_with("target_modules", R"("q_proj")"));
  expect_one_line_error(run_adapter(part), 1, "selects no linear of the model");
  // ... and a pattern for every linear of every layer loads the adapter.
  const std::string all = adapter_dir(
      "all",
      lora_config_with("target_modules", R"("model\\.layers\\.[0-9]+\\.(self_attn|mlp)\\.[a-z]+_proj")"));
  const Outcome o = run_adapter(all);
  EXPECT_EQ(o.code, 0) << o.err;
}

// ---------------------------------------------------------------- checked arithmetic, bounds

TEST_F(Hostile, AdapterRanksPastTheBoundsAreUsageErrors) {
  for (const char* rank : {"9223372036854775807", "99999999999999999999", "4294967296", "1000000", "-1", "0"})
    expect_one_line_error(
        run({"--model", "tiny", "--backend", "cpu", "--adapter", std::string("synthetic:rank=") + rank}), 2,
        std::string("rank must be a positive integer, got '") + rank + "'");
}

TEST_F(Hostile, AdapterRankAboveTheMatrixItAdaptsIsRefused) {
  expect_one_line_error(
      run({"--model", "tiny", "--backend", "cpu", "--tokens", "1", "--adapter", "synthetic:rank=65536"}), 1,
      "rank 65536 is above min(out_features, in_features)");
  const std::string d = adapter_dir("r", lora_config_with("r", "1000000"));
  expect_one_line_error(run_adapter(d), 1, "\"r\" must be a positive integer, got 1000000 (at most 65536)");
}

TEST_F(Hostile, AdapterHostMemoryIsCheckedBeforeItIsAllocated) {
  if (kAsan) GTEST_SKIP() << "an ASan binary cannot start under an address-space limit";
  // 70b's q and o at rank 8192: 86 GB of float A and B, refused under a 4 GB limit before
  // any of it is allocated.
  const Outcome o = db_test::run_command(with_limits("ulimit -v 4194304"),
                                         {"--model", "70b", "--backend", "cpu", "--tokens", "1", "--adapter",
                                          "synthetic:rank=8192,targets=q,o"});
  expect_one_line_error(o, 1,
                        "not enough host memory for --adapter synthetic:rank=8192,targets=q,o: need 85.90 GB "
                        "(A and B 85.90 (rank 8192, 2 linears x 80 layers, float))");
  EXPECT_CONTAINS(o.err, "address-space limit");
}

TEST_F(Hostile, CountsPastTheirBoundsAreUsageErrorsNotOverflow) {
  expect_one_line_error(
      run({"--model", "tiny", "--backend", "cpu", "--tokens", "9223372036854775807", "--context", "8"}), 2,
      "--tokens 9223372036854775807: above the limit of 1048576");
  expect_one_line_error(run({"--model", "tiny", "--backend", "cpu", "--warmup", "9223372036854775807"}), 2,
                        "--warmup 9223372036854775807: above the limit");
  expect_one_line_error(run({"--model", "tiny", "--backend", "cpu", "--context", "16777217"}), 2,
                        "--context 16777217: above the limit of 16777216");
  expect_one_line_error(run({"--model", "tiny", "--backend", "cpu", "--repeat", "10001"}), 2,
                        "--repeat 10001");
  expect_one_line_error(run({"--model", "tiny", "--backend", "cpu", "--tokens", "1048576", "--repeat", "5"}),
                        2, "more than 4194304 timed steps");
  // The largest counts allowed cannot wrap: the positions check sees the true sum.
  expect_one_line_error(run({"--model", "tiny", "--backend", "cpu", "--tokens", "1048576", "--repeat", "1",
                             "--context", "16777216"}),
                        1, "= 17825792 positions exceed max_position_embeddings 2048");
}

TEST_F(Hostile, ConfigSizesAboveAnyRealModelAreRefused) {
  write(path("hd.json"), R"({"extends": "tiny", "head_dim": 16777216})");
  expect_one_line_error(run({"--model", path("hd.json"), "--backend", "cpu"}), 1,
                        "head_dim 16777216 is above the limit 1024");
  write(path("vocab.json"), R"({"extends": "tiny", "vocab_size": 1073741824})");
  expect_one_line_error(run({"--model", path("vocab.json"), "--backend", "cpu"}), 1, "vocab_size 1073741824");
}

// An HF config of tiny's shape with `layers` layers and a GPTQ quantization_config that
// leaves `skip` (a JSON array) unquantized.
std::string gptq_config(int64_t layers, const std::string& skip) {
  return R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 128, "num_hidden_layers": )" +
         std::to_string(layers) +
         R"(, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 256, "vocab_size": 512, )"
         R"("max_position_embeddings": 256, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "quantization_config": )"
         R"({"quant_method": "gptq", "bits": 4, "group_size": 64, "modules_to_not_convert": )" +
         skip + "}}";
}

TEST_F(Hostile, ALayerCountAboveTheLimitIsRefusedBeforeTheQuantizationConfigIsRead) {
  // The layers were iterated per entry of modules_to_not_convert before they were bounded:
  // 10^9 of them never returned.
  write(path("c.json"), gptq_config(1000000000, R"(["lm_head"])"));
  expect_one_line_error(run({"--model", path("c.json"), "--backend", "cpu", "--tokens", "1"}), 1,
                        "num_hidden_layers 1000000000 is above the limit 1024");
}

TEST_F(Hostile, ModulesToNotConvertIsMatchedInLinearTime) {
  // 200,000 entries x 1024 layers x 7 linears was 1.4 x 10^9 module names formatted and
  // searched; each entry now costs its own length. The last entry names a linear of the
  // last layer.
  std::string skip = "[";
  for (int i = 0; i < 200000; ++i) skip += "\"vision_tower.blocks." + std::to_string(i) + ".attn\", ";
  skip += "\"layers.1023.mlp.up\"]";
  write(path("c.json"), gptq_config(1024, skip));
  expect_one_line_error(run({"--model", path("c.json"), "--backend", "cpu", "--tokens", "1"}), 1,
                        "modules_to_not_convert leaves 'layers.1023.mlp.up' unquantized "
                        "(model.layers.1023.mlp.up_proj among them)");
}

TEST_F(Hostile, RunsAndMaxTimeHaveUpperBounds) {
  // --runs 2147483647 started processes one after another for hours.
  expect_one_line_error(run({"--model", "tiny", "--backend", "cpu", "--runs", "2147483647"}), 2,
                        "--runs 2147483647: above the limit of 10000");
  expect_one_line_error(run({"--model", "tiny", "--backend", "cpu", "--runs", "99999999999999999999"}), 2,
                        "--runs 99999999999999999999: out of range");
  expect_one_line_error(run({"--model", "tiny", "--backend", "cpu", "--runs", "0"}), 2,
                        "--runs must be at least 1, got 0");
  expect_one_line_error(
      run({"--model", "tiny", "--backend", "cpu", "--max-noise", "1", "--max-time", "1e300"}), 2,
      "--max-time 1e300: above the limit of 86400 seconds");
  expect_one_line_error(run({"sweep", "--model", "tiny", "--backend", "cpu", "--runs", "1000000"}), 2,
                        "--runs 1000000: above the limit of 10000");
}

// ---------------------------------------------------------------- non-regular inputs

TEST_F(Hostile, FifosAndDevicesAreRefusedAtOnce) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  expect_one_line_error(run({"report", path("fifo")}), 1, "is a FIFO (named pipe), not a regular file");
  expect_one_line_error(run({"compare", path("fifo"), path("fifo")}), 2, "is a FIFO");
  expect_one_line_error(run({"report", "/dev/zero"}), 1, "results /dev/zero: is a character device");
  expect_one_line_error(run({"--model", path("fifo"), "--backend", "cpu"}), 1, "is a FIFO");
  expect_one_line_error(run({"--model", "tiny", "--weights", path("fifo"), "--backend", "cpu"}), 1,
                        "is not a regular file");
  fs::create_directories(path("shards"));
  ASSERT_EQ(::mkfifo(path("shards/model.safetensors.index.json").c_str(), 0600), 0);
  expect_one_line_error(run({"--model", "tiny", "--weights", path("shards"), "--backend", "cpu"}), 1,
                        "is a FIFO");
}

TEST_F(Hostile, AdapterFilesThatAreFifosAreRefusedAtOnce) {
  const std::string weights = adapter_dir("w", slurp(kHf + "/tiny-llama-lora/adapter_config.json"));
  fs::remove(weights + "/adapter_model.safetensors");
  ASSERT_EQ(::mkfifo((weights + "/adapter_model.safetensors").c_str(), 0600), 0);
  expect_one_line_error(run_adapter(weights), 1, "is not a regular file");
  const std::string config = adapter_dir("c", "");
  fs::remove(config + "/adapter_config.json");
  ASSERT_EQ(::mkfifo((config + "/adapter_config.json").c_str(), 0600), 0);
  expect_one_line_error(run_adapter(config), 1, "adapter_config.json: is a FIFO");
}

TEST_F(Hostile, AResultsFileAboveTheSizeBoundIsRefusedUnread) {
  { std::ofstream(path("huge.json")); }
  fs::resize_file(path("huge.json"), db::kMaxResultsFileBytes + 1);  // sparse: nothing is written
  expect_one_line_error(run({"report", path("huge.json")}), 1, "larger than the 1073741824-byte limit");
}

// ---------------------------------------------------------------- numbers, types, NUL bytes

TEST_F(Hostile, NumbersOutOfRangeNameTheFileAndTheField) {
  write(path("c.json"), R"({"extends": "tiny", "rope_theta": 1e400})");
  expect_one_line_error(run({"--model", path("c.json"), "--backend", "cpu"}), 1,
                        "field rope_theta: the number 1e400 is out of range");
  const std::string d = adapter_dir("a", lora_config_with("lora_alpha", "1e400"));
  expect_one_line_error(run_adapter(d), 1, "field lora_alpha: the number 1e400 is out of range");
  const std::string d2 = adapter_dir("a2", lora_config_with("lora_alpha", "1e300"));
  expect_one_line_error(run_adapter(d2), 1, "\"lora_alpha\" must be a number within");

  std::string line = cpu_result("r.jsonl");
  line.replace(line.find("\"context\":0"), 11, "\"context\":1e400");
  write(path("bad.jsonl"), line);
  expect_one_line_error(run({"report", path("bad.jsonl")}), 1, "field config.context: the number 1e400");
  // compare: bad input is 2, never 1 (which says "regressed").
  expect_one_line_error(run({"compare", path("bad.jsonl"), path("r.jsonl")}), 2, "field config.context");
  expect_one_line_error(run({"compare", path("r.jsonl"), path("bad.jsonl")}), 2, "field config.context");
}

TEST_F(Hostile, WeightsMetadataOfTheWrongTypeNamesTheFileAndTheKey) {
  ASSERT_EQ(
      run({"gen-weights", "--model", kHf + "/tiny-llama", "--quant", "int4", "-o", path("w.safetensors")})
          .code,
      0);
  std::string bytes = slurp(path("w.safetensors"));
  const size_t at = bytes.find("\"group_size\":\"");
  ASSERT_NE(at, std::string::npos);
  const size_t end = bytes.find('"', at + 14);
  bytes.replace(at + 14, end - (at + 14), std::string(end - (at + 14), 'a'));  // same length: "aaa"
  write(path("bad.safetensors"), bytes);
  expect_one_line_error(
      run({"--model", kHf + "/tiny-llama", "--weights", path("bad.safetensors"), "--backend", "cpu"}), 1,
      "__metadata__ group_size is 'aaa', expected an integer");
}

TEST_F(Hostile, TextAfterANulByteIsNotIgnored) {
  write(path("c.json"), std::string("{\"extends\":\"tiny\"}\0garbage", 26));
  expect_one_line_error(run({"--model", path("c.json"), "--backend", "cpu"}), 1, "a NUL byte at byte 18");
  const std::string json = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  const std::string header = json + std::string("\0junk", 5);
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>(header.size() >> (8 * i));
  write(path("nul.safetensors"), len + header + "z");
  EXPECT_CONTAINS(error_of([&] { db::SafetensorsFile f(path("nul.safetensors")); }), "a NUL byte at byte");
}

// ---------------------------------------------------------------- one line per message

TEST_F(Hostile, NewlinesFromFilesNeverSplitAMessage) {
  const std::string entry =
      R"({"schema": "decodebench/result/v1", "error": "boom\nsecond line", "config": {"model": "ti\nny"}})";
  write(path("e.jsonl"), cpu_result("r.jsonl") + entry + "\n");
  const Outcome o = run({"report", path("e.jsonl")});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  EXPECT_CONTAINS(o.err, "boom\\x0asecond line");
  EXPECT_CONTAINS(o.err, "model ti\\x0any");
  write(path("c.json"), R"({"extends": "tiny", "architecture": "lla\nma"})");
  expect_one_line_error(run({"--model", path("c.json"), "--backend", "cpu"}), 1, "architecture 'lla\\x0ama'");
}

// ---------------------------------------------------------------- sweeps: bounded, linear

TEST_F(Hostile, AbsurdSweepsAreRefusedBeforeAnythingIsExpanded) {
  expect_one_line_error(run({"sweep", "--model", "tiny", "--backend", "cpu", "--context", "0-1000000+1"}), 2,
                        "--context '0-1000000+1': 1000001 values, more than the 10000 a sweep may run");
  expect_one_line_error(
      run({"sweep", "--model", "tiny", "--backend", "cpu", "--context", "0-9223372036854775807+1"}), 2,
      "9223372036854775808 values");
  expect_one_line_error(
      run({"sweep", "--model", "tiny", "--backend", "cpu", "--context", "0-999+1", "--tokens", "1-11+1"}), 2,
      "1000 contexts x 11 tokens x 1 runs (--runs) is more than the 10000 instances");
  // Every factor is named, --runs among them.
  expect_one_line_error(
      run({"sweep", "--model", "tiny,tiny-int4", "--backend", "cpu", "--seed", "1,2,3", "--lm-head",
           "fp16,int8", "--runs", "1000"}),
      2,
      "sweep: 2 models x 1 quants x 1 group sizes x 2 lm-heads x 1 KV caches x 1 kernels x 1 graphs x 1 "
      "adapter modes x 1 sync-per-token x 3 seeds x 1 batches x 1 contexts x 1 tokens x 1000 "
      "runs (--runs) is more than the 10000 instances a sweep may run");
  // Duplicates are dropped in linear time: 10,000 copies of one value are one value.
  std::string same = "5";
  for (int i = 1; i < 10000; ++i) same += ",5";
  EXPECT_EQ(db::expand_int_list("--context", same), std::vector<int64_t>{5});
  EXPECT_EQ(db::expand_int_list("--context", "0-9999+1").size(), 10000u);
}

// ---------------------------------------------------------------- jsonl: whole lines only

TEST_F(Hostile, ATornLastLineIsSkippedWithAWarningAndAMiddleOneRefused) {
  const std::string line = cpu_result("r.jsonl");
  const std::string half = line.substr(0, line.size() / 2);
  write(path("torn.jsonl"), line + line + half);
  const Outcome o = run({"report", path("torn.jsonl"), "--format", "csv"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 3) << o.out;  // header and two rows
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  EXPECT_CONTAINS(o.err, "torn.jsonl:3: skipping a torn last line");
  write(path("mid.jsonl"), line + half + "\n" + line);
  expect_one_line_error(run({"report", path("mid.jsonl")}), 1, "mid.jsonl:2: invalid JSON");
}

TEST_F(Hostile, ASweepAppendingToATornFileRemovesTheTornLineFirst) {
  const std::string line = cpu_result("r.jsonl");
  write(path("s.jsonl"), line + line.substr(0, 100));
  const Outcome s = run({"sweep", "--model", "tiny", "--backend", "cpu", "--tokens", "200", "--repeat", "1",
                         "--warmup", "0", "-o", path("s.jsonl")});
  EXPECT_EQ(s.code, 0) << s.err;
  EXPECT_CONTAINS(s.err, "removed a torn last line (100 bytes");
  const db::ResultsAndErrors r = db::read_results_and_errors(path("s.jsonl"));
  EXPECT_EQ(r.results.size(), 2u);
  EXPECT_TRUE(r.warnings.empty());
  const std::string text = slurp(path("s.jsonl"));
  EXPECT_GT(text.size() - line.size(), 4096u);  // the sweep's line: longer than a stdio buffer
  EXPECT_EQ(text.back(), '\n');
  // A last line that is whole JSON but lacks its newline only gets one.
  write(path("nonl.jsonl"), line + line.substr(0, line.size() - 1));
  { db::JsonlAppender a(path("nonl.jsonl")); }
  EXPECT_EQ(slurp(path("nonl.jsonl")), line + line);
  // A file that is nothing but text without a newline is not taken for a torn line.
  write(path("notes.jsonl"), "some notes");
  EXPECT_CONTAINS(error_of([&] { db::JsonlAppender a(path("notes.jsonl")); }), "holds no complete line");
  EXPECT_EQ(slurp(path("notes.jsonl")), "some notes");
}

// Under a file-size limit a write stops part way (EFBIG); what it wrote is cut back.
TEST_F(Hostile, AFailedAppendLeavesTheFileAsItWas) {
  write(path("a.jsonl"), "{\"a\": 1}\n");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{1000, 1000};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    try {
      db::JsonlAppender a(path("a.jsonl"));
      a.append("{\"b\": \"" + std::string(4000, 'x') + "\"}");
    } catch (const db::Error&) {
      _exit(3);
    }
    _exit(0);
  }
  EXPECT_EQ(wait_code(pid), 3);
  EXPECT_EQ(slurp(path("a.jsonl")), "{\"a\": 1}\n");
}

TEST_F(Hostile, AFullDiskLeavesNoOutputFileAndKeepsTheOldOne) {
  const std::string result = cpu_result("r.json");
  write(path("old.md"), "old\n");
  // `ulimit -f` plays the full disk; SIGXFSZ ignored so that write(2) returns EFBIG.
  const Outcome o = db_test::run_command(with_limits("trap '' XFSZ; ulimit -f 1"),
                                         {"report", path("r.json"), path("r.json"), path("r.json"),
                                          path("r.json"), "--format", "json", "-o", path("old.md")});
  expect_one_line_error(o, 1, "cannot write " + path("old.md") + ": File too large");
  EXPECT_EQ(slurp(path("old.md")), "old\n");
  const auto entries = std::distance(fs::directory_iterator(dir_), fs::directory_iterator());
  EXPECT_EQ(entries, 2);  // r.json and old.md: no temporary file left
}

TEST_F(Hostile, AJsonlSweepOnAFullDiskLeavesNoFile) {
  // The first line is longer than the limit: it was an empty X.jsonl left behind.
  const Outcome o = db_test::run_command(with_limits("trap '' XFSZ; ulimit -f 1"),
                                         {"sweep", "--model", "tiny", "--backend", "cpu", "--tokens", "1",
                                          "--repeat", "1", "--warmup", "0", "-o", path("X.jsonl")});
  expect_one_line_error(o, 1, "cannot write " + path("X.jsonl") + ": File too large");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 0);
}

// A jsonl file that did not exist comes into being with its first line, whole, and only then.
TEST_F(Hostile, AJsonlFileIsCreatedByItsFirstLine) {
  {
    db::JsonlAppender a(path("new.jsonl"));
    EXPECT_FALSE(fs::exists(path("new.jsonl")));
    a.append(R"({"a": 1})");
    EXPECT_EQ(slurp(path("new.jsonl")), "{\"a\": 1}\n");
    a.append(R"({"b": 2})");
  }
  EXPECT_EQ(slurp(path("new.jsonl")), "{\"a\": 1}\n{\"b\": 2}\n");
  { db::JsonlAppender unused(path("none.jsonl")); }
  EXPECT_FALSE(fs::exists(path("none.jsonl")));
  // Another writer creates the file between the open and the first line: appended to, not replaced.
  db::JsonlAppender late(path("raced.jsonl"));
  write(path("raced.jsonl"), "{\"first\": 0}\n");
  late.append(R"({"second": 1})");
  EXPECT_EQ(slurp(path("raced.jsonl")), "{\"first\": 0}\n{\"second\": 1}\n");
  EXPECT_CONTAINS(error_of([&] { db::JsonlAppender a(path("no/such/dir.jsonl")); }),
                  "cannot write " + path("no/such/dir.jsonl") + ": No such file or directory");
}

TEST_F(Hostile, AnInterruptedJsonlSweepKeepsEveryFinishedLineWhole) {
  const pid_t pid = spawn({"sweep", "--model", "tiny", "--backend", "cpu", "--tokens", "1-60+1", "--repeat",
                           "1", "--warmup", "0", "-o", path("s.jsonl")},
                          path("out"), path("err"));
  // Interrupt once two lines are there (or the sweep ended on its own).
  for (int i = 0; i < 6000; ++i) {
    const std::string t = slurp(path("s.jsonl"));
    if (std::count(t.begin(), t.end(), '\n') >= 2) break;
    if (waitpid(pid, nullptr, WNOHANG) == pid) break;
    ::usleep(10000);
  }
  ::kill(pid, SIGINT);
  waitpid(pid, nullptr, 0);
  const db::ResultsAndErrors r = db::read_results_and_errors(path("s.jsonl"));
  EXPECT_GE(r.results.size(), 2u);
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(slurp(path("s.jsonl")).back(), '\n');
}

// ---------------------------------------------------------------- lenient safetensors

class Header : public Hostile {
 protected:
  std::string file(const std::string& json, const std::string& data, int64_t len_delta = 0) {
    std::string len(8, '\0');
    const uint64_t n = json.size() + len_delta;
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>(n >> (8 * i));
    write(path("t.safetensors"), len + json + data);
    return error_of([&] { db::SafetensorsFile f(path("t.safetensors")); });
  }
};

TEST_F(Header, TheReferenceImplementationsRulesHold) {
  const std::string two =
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})";
  EXPECT_CONTAINS(file(two + "xyz", "abcd"), "header: invalid JSON");          // junk after the JSON
  EXPECT_CONTAINS(file(two + "  ", "abcd", -1), "the tensors end at byte 4");  // one byte short
  const std::string hole =
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})";
  EXPECT_CONTAINS(file(hole, "abcde"), "leave bytes [2, 3) of the data section unused");
  const std::string overlap =
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})";
  EXPECT_CONTAINS(file(overlap, "abc"), "overlap");
  EXPECT_CONTAINS(file(two, "abcdef"), "which holds 6 bytes");  // bytes after the last tensor
}

TEST_F(Hostile, ExtraTensorsAreAcceptedWithOneWarning) {
  ASSERT_EQ(run({"gen-weights", "--model", "tiny", "-o", path("w.safetensors")}).code, 0);
  const db::SafetensorsFile f(path("w.safetensors"));
  db::SafetensorsWriter w(path("x.safetensors"));
  for (const auto& [k, v] : f.metadata()) w.set_metadata(k, v);
  for (const std::string& name : f.names()) {
    const db::TensorInfo& t = f.get(name);
    w.add(name, t.dtype, t.shape, t.data);
  }
  const uint8_t extra[4] = {1, 2, 3, 4};
  w.add("model.layers.0.self_attn.rotary_emb.inv_freq", db::DType::u8, {4}, extra);
  w.finish();
  const Outcome o = run({"--model", "tiny", "--weights", path("x.safetensors"), "--backend", "cpu",
                         "--tokens", "1", "--repeat", "1", "--warmup", "0"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  EXPECT_CONTAINS(o.err,
                  "1 tensor that model tiny does not use, ignored (the first: "
                  "model.layers.0.self_attn.rotary_emb.inv_freq)");
}

// ---------------------------------------------------------------- outputs

TEST_F(Hostile, AReportOfOnlyErrorEntriesFailsAndWritesNothing) {
  write(path("e.jsonl"),
        R"({"schema": "decodebench/result/v1", "error": "boom", "config": {"model": "tiny"}})"
        "\n");
  const Outcome o = run({"report", path("e.jsonl"), "--format", "jsonl", "-o", path("out.json")});
  EXPECT_EQ(o.code, 1);
  EXPECT_CONTAINS(o.err, "report: no results in " + path("e.jsonl") + " (1 error entry skipped)");
  EXPECT_FALSE(fs::exists(path("out.json")));
}

TEST_F(Hostile, TwoWritersOfOnePathLeaveOneWholeFile) {
  for (int trial = 0; trial < 5; ++trial) {
    const pid_t a =
        spawn({"gen-weights", "--model", "tiny", "-o", path("w.safetensors")}, path("a.out"), path("a.err"));
    const pid_t b = spawn({"gen-weights", "--model", "tiny-int8", "-o", path("w.safetensors")}, path("b.out"),
                          path("b.err"));
    EXPECT_EQ(wait_code(a), 0) << slurp(path("a.err"));
    EXPECT_EQ(wait_code(b), 0) << slurp(path("b.err"));
    const db::SafetensorsFile f(path("w.safetensors"));  // whole: every check of the reader passes
    const std::string q = f.metadata().at("quant");
    EXPECT_TRUE(q == "fp16" || q == "int8") << q;
  }
  const std::string r = cpu_result("r.json");
  for (int trial = 0; trial < 5; ++trial) {
    const pid_t a = spawn({"report", path("r.json"), "--format", "json", "-o", path("same.json")},
                          path("a.out"), path("a.err"));
    const pid_t b =
        spawn({"report", path("r.json"), path("r.json"), "--format", "json", "-o", path("same.json")},
              path("b.out"), path("b.err"));
    EXPECT_EQ(wait_code(a), 0) << slurp(path("a.err"));
    EXPECT_EQ(wait_code(b), 0) << slurp(path("b.err"));
    const size_t n = db::read_results(path("same.json")).size();
    EXPECT_TRUE(n == 1 || n == 2) << n;
  }
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST_F(Hostile, OutputPathsThatCannotBeWrittenFailInOneLineAndLeaveNothing) {
  const std::string r = path("r.json");
  cpu_result("r.json");
  expect_one_line_error(run({"report", r, "-o", dir_.string()}), 1, "is a directory");
  expect_one_line_error(run({"report", r, "-o", r + "/under.json"}), 1, "is not a directory");
  expect_one_line_error(run({"report", r, "-o", path("no/such/out.json")}), 1, "does not exist");
  expect_one_line_error(run({"report", r, "-o", path(std::string(300, 'n') + ".json")}), 1,
                        "File name too long");
  expect_one_line_error(run({"report", r, "-o", "/dev/null"}), 1,
                        "-o /dev/null: exists and is not a regular file");
  ASSERT_EQ(::mkfifo(path("fifo.jsonl").c_str(), 0600), 0);
  expect_one_line_error(run({"sweep", "--model", "tiny", "--backend", "cpu", "-o", path("fifo.jsonl")}), 1,
                        "exists and is not a regular file");
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directories(path("ro"));
    fs::permissions(path("ro"), fs::perms::owner_read | fs::perms::owner_exec);
    expect_one_line_error(run({"report", r, "-o", path("ro/out.json")}), 1, "is not writable");
  }
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir_)) entries += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(entries, 1u);  // r.json only
}

// The peak resident memory of the binary run with `args`, in bytes (its exit code must be 0).
uint64_t peak_rss(const std::vector<std::string>& args, const std::string& out, const std::string& err) {
  const pid_t pid = spawn(args, out, err);
  int status = 0;
  rusage usage{};
  EXPECT_EQ(::wait4(pid, &status, 0, &usage), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(err);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;
}

TEST_F(Hostile, GenWeightsHoldsABlockOfRowsNotATensor) {
  if (kAsan) GTEST_SKIP() << "ASan's quarantine and shadow memory count in the resident set";
  // Its largest tensor, the tied embedding [131072, 1024] in fp16, is 268 MB in the file; it
  // was held as float (537 MB), as fp16 and in a buffer of its own (1.07 GB in all). A block
  // of rows with its quantized form is 100 MB, whatever the model. Measured above the same
  // command on the tiny model: the binary's own resident set at start (its shared libraries,
  // cuBLAS's among them: ~220 MB on a CUDA build, more with a GPU driver loaded) is not the
  // tensor's.
  write(path("c.json"),
        R"({"extends": "tiny", "vocab_size": 131072, "hidden_size": 1024, "tie_word_embeddings": true})");
  const uint64_t tensor = 131072ull * 1024 * 2;
  const uint64_t base =
      peak_rss({"gen-weights", "--model", "tiny", "-o", path("t.safetensors")}, path("out"), path("err"));
  const uint64_t rss = peak_rss({"gen-weights", "--model", path("c.json"), "-o", path("w.safetensors")},
                                path("out"), path("err"));
  EXPECT_LT(rss, base + tensor / 2) << "peak resident memory " << rss << " bytes, " << base
                                    << " for the tiny model";
  const db::SafetensorsFile f(path("w.safetensors"));
  EXPECT_EQ(f.get("model.embed_tokens.weight").nbytes, tensor);
}

TEST_F(Hostile, AWeightsFileTooLargeForTheDiskFailsBeforeAnyTensorIsMade) {
  // 5.4 x 10^13 parameters in fp16: 108 TB, more than any disk has free. It was found out
  // after the disk had filled.
  write(path("huge.json"),
        R"({"extends": "tiny", "hidden_size": 65536, "num_hidden_layers": 1024, "num_attention_heads": 64,)"
        R"( "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 262144})");
  const Outcome o = run({"gen-weights", "--model", path("huge.json"), "-o", path("w.safetensors")});
  expect_one_line_error(
      o, 1, "cannot write " + path("w.safetensors") + ": No space left on device: it needs 108027.42 GB, ");
  EXPECT_CONTAINS(o.err, "free on the filesystem of " + dir_.string());
  // Above the file-size limit: said with both figures.
  const Outcome f = db_test::run_command(with_limits("trap '' XFSZ; ulimit -f 100"),
                                         {"gen-weights", "--model", "tiny", "-o", path("w.safetensors")});
  expect_one_line_error(f, 1,
                        "File too large: it needs 855.54 KB, above the file-size limit (ulimit -f) of ");
  const Outcome q =
      db_test::run_command(with_limits("trap '' XFSZ; ulimit -f 100"),
                           {"quantize", kHf + "/tiny-llama", "--quant", "int8", "-o", path("q.safetensors")});
  expect_one_line_error(q, 1, "above the file-size limit (ulimit -f)");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);  // huge.json
}

TEST_F(Hostile, GenWeightsAndQuantizeCheckTheirHostMemoryPlan) {
  if (kAsan) GTEST_SKIP() << "an ASan binary cannot start under an address-space limit";
  // int4 in groups of 2 keeps 1.5 bytes of scales and zeros a weight until the matrix's
  // weights are out: the largest lm_head's are 103 GB, refused under a 4 GB limit.
  write(path("g2.json"),
        R"({"extends": "tiny", "vocab_size": 1048576, "hidden_size": 65536, "head_dim": 128,)"
        R"( "num_hidden_layers": 1, "quant": {"scheme": "fp16", "lm_head": "int4", "group_size": 2}})");
  const Outcome o =
      db_test::run_command(with_limits("ulimit -v 4194304"),
                           {"gen-weights", "--model", path("g2.json"), "-o", path("w.safetensors")});
  expect_one_line_error(o, 1, "not enough host memory for gen-weights of " + path("g2.json") + ": need 103.");
  EXPECT_CONTAINS(o.err, "scales and zeros of one matrix 103.08), ");
  EXPECT_CONTAINS(o.err, "available (address-space limit (ulimit -v))");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);  // g2.json
}

// ---------------------------------------------------------------- the library's own contract

TEST(ParseJsonDocument, NamesTheFieldOfEveryKindOfError) {
  EXPECT_CONTAINS(error_of([] { db::parse_json_document(R"({"a": {"b": [1, 2, 1e999]}})", "doc"); }),
                  "doc: field a.b[2]: the number 1e999 is out of range");
  EXPECT_CONTAINS(error_of([] { db::parse_json_document(R"({"a": [{"b": tru}]})", "doc"); }),
                  "(in field a[0].b)");
  EXPECT_CONTAINS(error_of([] { db::parse_json_document(R"({"a": 1} {"b": 2})", "doc"); }),
                  "doc: invalid JSON");
  EXPECT_CONTAINS(error_of([] { db::parse_json_document(R"({"a": 1, "a": 2})", "doc", true); }),
                  "field a appears twice");
  EXPECT_EQ(db::parse_json_document(R"({"a": 1, "a": 2})", "doc")["a"], 2);  // as Python's json
  EXPECT_EQ(db::parse_json_document(nested("[", "]", 64), "doc").size(), 1u);
  EXPECT_CONTAINS(error_of([] { db::parse_json_document(nested("[", "]", 65), "doc"); }), "deeper than 64");
}

// Writing a model holds a block of rows and one matrix's scales and zeros, never the model:
// 70b-int4 (40 GB; its largest tensor, the embedding, 2.1 GB as float) is written holding at
// most 2^24 floats of rows with their fp16 form and an MLP matrix's scales and zeros.
TEST(WeightsFilePlan, IsABlockAndOneMatrixsScalesNotTheModel) {
  const db::ModelConfig c = db::load_model_config("70b-int4");
  const db::HostPlan p = db::weights_file_plan(c, "gen-weights of 70b-int4");
  ASSERT_EQ(p.parts.size(), 2u);
  EXPECT_LE(p.parts[0].bytes, (uint64_t{1} << 24) * 6);  // 2^24 floats and their fp16 form
  // The most scales and zeros: an MLP matrix's, 8192 x 28672 weights in groups of 128, 3 bytes a group.
  EXPECT_EQ(p.parts[1].bytes, 8192ull * (28672 / 128) * 3);
  EXPECT_LT(p.total(), 128ull << 20);
  // A plan above any memory names itself and each part.
  const std::string e = error_of([] {
    db::require_host_memory({"the test", {{"one", UINT64_MAX / 2, " (half)"}, {"two", UINT64_MAX / 2, ""}}});
  });
  EXPECT_CONTAINS(e,
                  "not enough host memory for the test: need 18446744073.71 GB (one 9223372036.85 (half), "
                  "two 9223372036.85), ");
}

}  // namespace
