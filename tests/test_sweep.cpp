// The sweep verb: list and range expansion and the instance order (pure functions), then
// end to end on the CPU backend with tiny models: error entries, output formats, the
// progress lines, compare on a file with error entries, and scripts/ci_regression.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "decodebench/error.h"
#include "decodebench/printers.h"
#include "decodebench/result.h"
#include "decodebench/stats.h"
#include "decodebench/sweep.h"

namespace {

namespace fs = std::filesystem;
using db_test::Outcome;

Outcome run(const std::vector<std::string>& args) {
  return db_test::run(args, DB_SOURCE_DIR);
}

std::vector<int64_t> ints(std::initializer_list<int64_t> v) {
  return v;
}

TEST(SweepExpand, PlainListsAndRanges) {
  EXPECT_EQ(db::expand_int_list("--context", "0"), ints({0}));
  EXPECT_EQ(db::expand_int_list("--context", "512,0,128"), ints({512, 0, 128}));
  EXPECT_EQ(db::expand_int_list("--context", "0-4096*2"),
            ints({0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}));
  EXPECT_EQ(db::expand_int_list("--context", "1-1000*10"), ints({1, 10, 100, 1000}));
  EXPECT_EQ(db::expand_int_list("--context", "3-50*4"), ints({3, 12, 48}));
  EXPECT_EQ(db::expand_int_list("--tokens", "0-10+5"), ints({0, 5, 10}));
  EXPECT_EQ(db::expand_int_list("--tokens", "1-10+4"), ints({1, 5, 9}));
  EXPECT_EQ(db::expand_int_list("--tokens", "7-7+3"), ints({7}));
  // Concatenated in order; a value already produced is dropped.
  EXPECT_EQ(db::expand_int_list("--tokens", "128,0-8+4,128,8"), ints({128, 0, 4, 8}));
}

TEST(SweepExpand, BadItemsAreUsageErrors) {
  for (const char* bad : {"", "1,,2", "1,", "a", "-3", "8-4+1", "0-8*1", "0-8+0", "1-8", "1-8/2", "1-x+2",
                          "99999999999999999999"}) {
    EXPECT_THROW(db::expand_int_list("--context", bad), db::UsageError) << bad;
  }
  try {
    db::expand_int_list("--context", "8-4+1");
  } catch (const db::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--context"), std::string::npos) << e.what();
  }
}

TEST(SweepExpand, SplitList) {
  EXPECT_EQ(db::split_list("--model", "a"), std::vector<std::string>({"a"}));
  EXPECT_EQ(db::split_list("--model", "a,b,c"), std::vector<std::string>({"a", "b", "c"}));
  EXPECT_THROW(db::split_list("--model", "a,,b"), db::UsageError);
}

// The lists of group size, lm_head, seed and sync-per-token sit between quant and kernel,
// and between adapter-mode and context, in the documented order.
TEST(SweepExpand, GroupSizeLmHeadSeedAndSyncListsExpandInOrder) {
  db::SweepSpec sp;
  sp.models = {"m"};
  sp.group_sizes = {32, std::nullopt};
  sp.lm_heads = {db::Scheme::int8, db::Scheme::fp16};
  sp.sync_per_token = {true, false};
  sp.seeds = {7, 8};
  const std::vector<db::RunSpec> v = db::expand_sweep(sp);
  ASSERT_EQ(v.size(), 16u);
  size_t i = 0;
  for (int g = 0; g < 2; ++g)
    for (db::Scheme h : {db::Scheme::int8, db::Scheme::fp16})
      for (bool sync : {true, false})
        for (uint64_t seed : {7, 8}) {
          const db::RunSpec& s = v[i++];
          EXPECT_EQ(s.group_size.has_value(), g == 0);
          EXPECT_EQ(s.lm_head, h);
          EXPECT_EQ(s.sync_per_token, sync);
          EXPECT_EQ(s.seed, seed);
        }
  EXPECT_NE(v[0].command_line.find("--seed 7 --group-size 32 --lm-head int8"), std::string::npos)
      << v[0].command_line;
  EXPECT_NE(v[0].command_line.find("--sync-per-token"), std::string::npos);
}

// The batch sits between seed and context; a batch of 1 leaves the command as it was.
TEST(SweepExpand, BatchesExpandBetweenSeedAndContext) {
  db::SweepSpec sp;
  sp.models = {"m"};
  sp.base.backend = db::BackendKind::cpu;
  sp.seeds = {7, 8};
  sp.batches = db::expand_int_list("--batch", "1-4*2");
  sp.contexts = {0, 16};
  const std::vector<db::RunSpec> v = db::expand_sweep(sp);
  ASSERT_EQ(v.size(), 12u);
  size_t i = 0;
  for (uint64_t seed : {7, 8})
    for (int64_t b : {1, 2, 4})
      for (int64_t c : {0, 16}) {
        const db::RunSpec& s = v[i++];
        EXPECT_EQ(s.seed, seed);
        EXPECT_EQ(s.batch, b);
        EXPECT_EQ(s.context, c);
        EXPECT_EQ(s.command_line.find("--batch") != std::string::npos, b != 1) << s.command_line;
      }
  EXPECT_EQ(
      v[0].command_line,
      "decodebench run --model m --seed 7 --kernel auto --context 0 --tokens 128 --warmup 16 --repeat 5 "
      "--backend cpu");
  EXPECT_EQ(
      v[2].command_line,
      "decodebench run --model m --seed 7 --kernel auto --context 0 --tokens 128 --warmup 16 --repeat 5 "
      "--batch 2 --backend cpu");
  EXPECT_EQ(db::instance_summary(v[2]), "model m, kernel auto, graph on, batch 2, context 0, tokens 128");
  EXPECT_EQ(db::instance_summary(v[0]), "model m, kernel auto, graph on, context 0, tokens 128");
}

// The KV cache sits between lm_head and kernel; an fp16 cache leaves the command as it was.
TEST(SweepExpand, KvCachesExpandBetweenLmHeadAndKernel) {
  db::SweepSpec sp;
  sp.models = {"m"};
  sp.base.backend = db::BackendKind::cpu;
  sp.lm_heads = {db::Scheme::int8, db::Scheme::fp16};
  sp.kv_caches = {db::KvScheme::fp16, db::KvScheme::fp8, db::KvScheme::int8};
  sp.kernels = {"auto", "k"};
  const std::vector<db::RunSpec> v = db::expand_sweep(sp);
  ASSERT_EQ(v.size(), 12u);
  size_t i = 0;
  for (db::Scheme h : {db::Scheme::int8, db::Scheme::fp16})
    for (db::KvScheme kv : {db::KvScheme::fp16, db::KvScheme::fp8, db::KvScheme::int8})
      for (const char* k : {"auto", "k"}) {
        const db::RunSpec& s = v[i++];
        EXPECT_EQ(s.lm_head, h);
        EXPECT_EQ(s.kv_cache, kv);
        EXPECT_EQ(s.kernel, k);
        EXPECT_EQ(s.command_line.find("--kv-cache") != std::string::npos, kv != db::KvScheme::fp16)
            << s.command_line;
      }
  EXPECT_EQ(v[2].command_line,
            "decodebench run --model m --seed 0 --lm-head int8 --kv-cache fp8 --kernel auto --context 0 "
            "--tokens 128 --warmup 16 --repeat 5 --backend cpu");
  EXPECT_EQ(db::instance_summary(v[2]),
            "model m, lm-head int8, kv-cache fp8, kernel auto, graph on, context 0, tokens 128");
  EXPECT_EQ(db::instance_summary(v[0]),
            "model m, lm-head int8, kernel auto, graph on, context 0, tokens 128");
  sp.kv_caches.assign(10001, db::KvScheme::fp8);
  EXPECT_THROW(db::check_sweep_size(sp), db::UsageError);
}

TEST(SweepExpand, CartesianProductInTheDocumentedOrder) {
  db::SweepSpec sp;
  sp.base.backend = db::BackendKind::cpu;
  sp.base.adapter = "synthetic:rank=2";
  sp.models = {"m1", "m2"};
  sp.quants = {db::Scheme::int4, std::nullopt};
  sp.kernels = {"auto", "k"};
  sp.graphs = {true, false};
  sp.adapter_modes = {db::AdapterMode::merged, db::AdapterMode::external};
  sp.contexts = {0, 16};
  sp.tokens = {1, 2};
  const std::vector<db::RunSpec> v = db::expand_sweep(sp);
  ASSERT_EQ(v.size(), 128u);
  size_t i = 0;
  for (const char* m : {"m1", "m2"})
    for (int q = 0; q < 2; ++q)
      for (const char* k : {"auto", "k"})
        for (bool g : {true, false})
          for (auto mode : {db::AdapterMode::merged, db::AdapterMode::external})
            for (int64_t c : {0, 16})
              for (int64_t t : {1, 2}) {
                const db::RunSpec& s = v[i++];
                EXPECT_EQ(s.model, m);
                EXPECT_EQ(s.quant.has_value(), q == 0);
                EXPECT_EQ(s.kernel, k);
                EXPECT_EQ(s.graph, g);
                EXPECT_EQ(s.adapter_mode, mode);
                EXPECT_EQ(s.context, c);
                EXPECT_EQ(s.tokens, t);
                EXPECT_EQ(s.backend, db::BackendKind::cpu);
              }
  EXPECT_EQ(
      v[0].command_line,
      "decodebench run --model m1 --seed 0 --quant int4 --kernel auto --adapter synthetic:rank=2 "
      "--adapter-mode "
      "merged --context 0 --tokens 1 --warmup 16 --repeat 5 --backend cpu");  // no --graph, --device: CUDA's
  EXPECT_EQ(db::instance_summary(v[0]),
            "model m1, quant int4, kernel auto, graph on, adapter-mode merged, context 0, tokens 1");
}

class Sweep : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "decodebench_sweep_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // tiny-int4 and tiny-fp16 with --kernel int4.gemv: the fp16 instances fail.
  Outcome sweep_with_failure(const std::string& out, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"sweep",    "--model",   "tiny-int4,tiny-fp16",
                                     "--kernel", "int4.gemv", "--tokens",
                                     "2,3",      "--warmup",  "0",
                                     "--repeat", "2",         "--backend",
                                     "cpu",      "-o",        path(out)};
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  }

  fs::path dir_;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l))
    if (!l.empty()) out.push_back(l);
  return out;
}

// A --model config path with a comma in it is one model; items around it stay a list.
TEST_F(Sweep, AModelPathWithACommaIsOneModel) {
  fs::create_directories(path("a,b"));
  fs::copy_file(fs::path(DB_SOURCE_DIR) / "configs" / "tiny.json", path("a,b/tiny.json"));
  const std::string p = path("a,b/tiny.json");
  EXPECT_EQ(db::split_model_list("tiny," + p + ",tiny-int4"),
            std::vector<std::string>({"tiny", p, "tiny-int4"}));
  EXPECT_EQ(db::split_model_list(p), std::vector<std::string>({p}));
  EXPECT_EQ(db::split_model_list("x,y"), std::vector<std::string>({"x", "y"}));  // nothing exists
  const Outcome o = run({"sweep", "--model", p + ",tiny-int4", "--tokens", "2", "--warmup", "0", "--repeat",
                         "1", "--backend", "cpu", "-o", path("s.jsonl")});
  ASSERT_EQ(o.code, 0) << o.err;
  const std::vector<db::Result> r = db::read_results(path("s.jsonl"));
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].config.model, p);
  EXPECT_EQ(r[1].config.model, "tiny-int4");
}

TEST_F(Sweep, AFailingInstanceBecomesAnErrorEntryAndTheSweepGoesOn) {
  const Outcome o = sweep_with_failure("s.json");
  EXPECT_EQ(o.code, 1) << o.err;  // some instance failed
  const db::ResultsAndErrors r = db::read_results_and_errors(path("s.json"));
  ASSERT_EQ(r.results.size(), 2u);
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.results[0].config.model, "tiny-int4");
  EXPECT_EQ(r.results[0].config.tokens, 2);
  EXPECT_EQ(r.results[1].config.tokens, 3);
  EXPECT_NE(r.results[0].command.find("decodebench run --model tiny-int4"), std::string::npos);
  EXPECT_NE(r.errors[0].error.find("not a kernel for fp16"), std::string::npos) << r.errors[0].error;
  EXPECT_NE(r.errors[0].config_json.find("\"model\":\"tiny-fp16\""), std::string::npos)
      << r.errors[0].config_json;
  EXPECT_NE(r.errors[0].config_json.find("\"kernel\":\"int4.gemv\""), std::string::npos);
  // The strict reader refuses error entries, naming them.
  try {
    db::read_results(path("s.json"));
    ADD_FAILURE() << "read_results accepted an error entry";
  } catch (const db::Error& e) {
    EXPECT_NE(std::string(e.what()).find("error entry"), std::string::npos) << e.what();
  }
  // The raw JSON: an array, an error entry has schema, error and config.
  const std::string text = db_test::slurp(path("s.json"));
  EXPECT_EQ(text.rfind("[\n", 0), 0u);
  EXPECT_NE(text.find("\"error\": \"--kernel int4.gemv"), std::string::npos);
  EXPECT_NE(o.err.find("2 of 4 instances failed"), std::string::npos) << o.err;
}

TEST_F(Sweep, ProgressLinesOnStderr) {
  const Outcome o = sweep_with_failure("s.json");
  // A result's line says what ran (the CPU backend runs its reference, graph off, whatever
  // was asked), with the median, the noise, the energy (or that there is none: this machine's
  // RAPL may not be readable) and a warning's kind; an error's, what was asked.
  const std::regex ok(
      R"(\[[12]/4\] model tiny-int4, int4 g64, lm_head fp16, kernel cpu\.reference, graph off, context 0, )"
      R"(tokens [23] \.\.\. [0-9]+\.[0-9]{3} ms ± [0-9]+\.[0-9]{2}%, ([0-9.e+-]+ J/token|energy n/a))"
      R"(( \(warning: [a-z ]+\))? )"
      R"(\(elapsed [0-9]+\.[0-9]s, ~[0-9]+\.[0-9]s left\))");
  const std::regex bad(
      R"(\[[34]/4\] model tiny-fp16, kernel int4\.gemv, graph on, context 0, tokens [23] \.\.\. )"
      R"(error: --kernel int4\.gemv: .* \(elapsed [0-9]+\.[0-9]s, ~[0-9]+\.[0-9]s left\))");
  const std::vector<std::string> l = lines_of(o.err);
  ASSERT_GE(l.size(), 4u) << o.err;
  EXPECT_TRUE(std::regex_match(l[0], ok)) << l[0];
  EXPECT_TRUE(std::regex_match(l[1], ok)) << l[1];
  EXPECT_TRUE(std::regex_match(l[2], bad)) << l[2];
  EXPECT_TRUE(std::regex_match(l[3], bad)) << l[3];
  EXPECT_EQ(l[0].rfind("[1/4]", 0), 0u);
  EXPECT_EQ(l[3].rfind("[4/4]", 0), 0u);
  EXPECT_NE(l[3].find("~0.0s left"), std::string::npos) << l[3];
}

TEST_F(Sweep, JsonlHasOneLinePerInstanceAndAppends) {
  ASSERT_EQ(sweep_with_failure("s.jsonl").code, 1);
  std::vector<std::string> l = lines_of(db_test::slurp(path("s.jsonl")));
  ASSERT_EQ(l.size(), 4u);
  EXPECT_NE(l[0].find("\"timing\""), std::string::npos);
  EXPECT_NE(l[2].find("\"error\""), std::string::npos);
  const db::ResultsAndErrors r = db::read_results_and_errors(path("s.jsonl"));
  EXPECT_EQ(r.results.size(), 2u);
  EXPECT_EQ(r.errors.size(), 2u);
  EXPECT_FALSE(fs::exists(path("s.jsonl.tmp")));
  // A second sweep to the same path appends.
  ASSERT_EQ(sweep_with_failure("s.jsonl").code, 1);
  EXPECT_EQ(lines_of(db_test::slurp(path("s.jsonl"))).size(), 8u);
}

TEST_F(Sweep, MdAndCsvShowErrorEntries) {
  ASSERT_EQ(sweep_with_failure("s.md").code, 1);
  const std::string md = db_test::slurp(path("s.md"));
  const std::vector<std::string> l = lines_of(md);
  ASSERT_GE(l.size(), 9u) << md;
  EXPECT_EQ(l[0].rfind("| model", 0), 0u);
  EXPECT_NE(l[4].find("tiny-fp16"), std::string::npos) << md;  // an error row, config cells only
  EXPECT_EQ(l[6], "Errors:");
  EXPECT_EQ(l[7].rfind("- row 3 (model tiny-fp16, scheme fp16, kernel int4.gemv", 0), 0u) << l[7];
  EXPECT_NE(l[7].find("not a kernel for fp16"), std::string::npos);

  ASSERT_EQ(sweep_with_failure("s.csv").code, 1);
  const std::vector<std::string> c = lines_of(db_test::slurp(path("s.csv")));
  ASSERT_EQ(c.size(), 5u);
  EXPECT_EQ(c[0].rfind("config.model,", 0), 0u);
  EXPECT_NE(c[0].find(",error"), std::string::npos);
  EXPECT_EQ(c[1].back(), ',');  // a result: empty error cell
  EXPECT_EQ(c[3].rfind("tiny-fp16,fp16,", 0), 0u) << c[3];
  EXPECT_NE(c[3].find(",int4.gemv,"), std::string::npos) << c[3];
  EXPECT_NE(c[3].find("not a kernel for fp16"), std::string::npos);
}

TEST_F(Sweep, WithoutErrorsMdAndCsvAreTheReportTables) {
  const Outcome o = run({"sweep", "--model", "tiny-int4", "--context", "0-2+2", "--tokens", "2", "--warmup",
                         "0", "--repeat", "1", "--backend", "cpu", "-o", path("s.csv")});
  ASSERT_EQ(o.code, 0) << o.err;
  const std::vector<std::string> c = lines_of(db_test::slurp(path("s.csv")));
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].find(",error"), std::string::npos);
  EXPECT_NE(o.err.find("reused a WeightSource"), std::string::npos) << o.err;
  // The same results as report prints them.
  const Outcome j = run({"sweep", "--model", "tiny-int4", "--tokens", "2", "--warmup", "0", "--repeat", "1",
                         "--backend", "cpu", "-o", path("s.json")});
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_EQ(db::read_results(path("s.json")).size(), 1u);
  EXPECT_EQ(db_test::slurp(path("s.json")).rfind("[\n", 0), 0u);  // json: always an array
}

TEST_F(Sweep, AReusedWeightSourceGivesTheTokensOfAStandaloneRun) {
  const Outcome o = run({"sweep", "--model", "tiny-int4", "--adapter", "synthetic:rank=2", "--tokens", "2,5",
                         "--warmup", "0", "--repeat", "1", "--backend", "cpu", "-o", path("s.json")});
  ASSERT_EQ(o.code, 0) << o.err;
  // The cpu backend keeps no weights of its own between instances.
  EXPECT_NE(o.err.find("1 of 2 instances reused a WeightSource, 0 reused device weights"), std::string::npos)
      << o.err;
  const Outcome r = run({"run", "--model", "tiny-int4", "--adapter", "synthetic:rank=2", "--tokens", "5",
                         "--warmup", "0", "--repeat", "1", "--backend", "cpu", "-o", path("r.json")});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<db::Result> s = db::read_results(path("s.json"));
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[1].check.tokens_hash, db::read_results(path("r.json"))[0].check.tokens_hash);
  EXPECT_FALSE(s[1].timing.weights_reused);
}

TEST_F(Sweep, BadListsFailBeforeAnythingRuns) {
  db_test::expect_one_line_error(
      run({"sweep", "--model", "tiny-int4", "--tokens", "8-2+1", "--backend", "cpu"}), 2, "--tokens '8-2+1'");
  db_test::expect_one_line_error(
      run({"sweep", "--model", "tiny-int4", "--graph", "on,maybe", "--backend", "cpu"}), 2, "--graph maybe");
  db_test::expect_one_line_error(
      run({"sweep", "--model", "tiny-int4", "--kernel", "int4.nope", "--backend", "cpu"}), 2,
      "--kernel int4.nope");
  db_test::expect_one_line_error(run({"sweep", "--model", "tiny-int4,no-such-preset", "--backend", "cpu"}), 1,
                                 "no-such-preset");
}

// compare skips error entries with a warning, and fails closed on them: a failed instance
// measured nothing, so the comparison is incomplete (exit 3).
TEST_F(Sweep, CompareSkipsErrorEntriesWithAWarningAndFailsClosed) {
  ASSERT_EQ(sweep_with_failure("s.json").code, 1);
  const Outcome o = run({"compare", path("s.json"), path("s.json")});
  EXPECT_EQ(o.code, 3) << o.err;
  EXPECT_NE(o.err.find("skipping an error entry (model tiny-fp16"), std::string::npos) << o.err;
  EXPECT_NE(o.out.find("2 matched: "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("error entries: 2 in BASE, 2 in NEW"), std::string::npos) << o.out;
  const Outcome r = run({"report", path("s.json")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("skipping an error entry"), std::string::npos) << r.err;
  EXPECT_EQ(lines_of(r.out).size(), 4u) << r.out;  // header, rule, two results
}

TEST_F(Sweep, CiRegressionScript) {
  const std::string build = fs::path(DB_BINARY).parent_path().string();
  const std::string script = std::string(DB_SOURCE_DIR) + "/scripts/ci_regression.sh";
  const std::vector<std::string> matrix = {
      "--model", "tiny-int4,tiny-int8", "--tokens", "4", "--warmup", "1", "--repeat",
      "5",       "--backend",           "cpu"};
  std::vector<std::string> args = {"sweep"};
  args.insert(args.end(), matrix.begin(), matrix.end());
  args.insert(args.end(), {"-o", path("baseline.json")});
  ASSERT_EQ(run(args).code, 0);
  // The baseline made steady, so that comparing it with itself does not depend on how busy
  // this machine was while the sweep ran (a noisy run is unstable: never judged).
  {
    std::vector<db::Result> steady = db::read_results(path("baseline.json"));
    for (db::Result& r : steady) {
      r.timing.repetition_medians_ms = {1.0, 1.01, 0.99, 1.0, 1.02};
      r.timing.samples_ms.assign(20, 1.0);
      r.timing.tpot_ms = db::compute_stats(r.timing.samples_ms);
      r.timing.noise = db::repetition_noise(r.timing.repetition_medians_ms);
      r.timing.warnings.clear();
    }
    db::write_results_file(path("baseline.json"), steady, db::OutputFormat::json);
  }

  const auto script_cmd = [&](const std::string& env) {
    std::string cmd = "cd " + db_test::quote(DB_SOURCE_DIR) + " && " + env + " " + db_test::quote(script) +
                      " " + db_test::quote(path("baseline.json")) + " " + db_test::quote(build);
    for (const std::string& a : matrix) cmd += " " + db_test::quote(a);
    return cmd + " >" + db_test::quote(path("out.txt")) + " 2>" + db_test::quote(path("err.txt"));
  };
  // The baseline against itself: every run "same", exit 0.
  int status = std::system(script_cmd("DB_CI_NEW=" + db_test::quote(path("baseline.json"))).c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << db_test::slurp(path("err.txt"));
  EXPECT_NE(db_test::slurp(path("out.txt")).find("2 matched: 0 regressed, 0 improved, 2 same"),
            std::string::npos)
      << db_test::slurp(path("out.txt"));

  // A real sweep: compare's exit code (0, 1 on a timing regression or 3 on an unstable run
  // of a busy machine: not asserted), the new results written where DB_CI_OUT says, the
  // table printed.
  status = std::system(script_cmd("DB_CI_OUT=" + db_test::quote(path("new.json"))).c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_TRUE(WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1 || WEXITSTATUS(status) == 3)
      << db_test::slurp(path("err.txt"));
  EXPECT_EQ(db::read_results(path("new.json")).size(), 2u);
  EXPECT_NE(db_test::slurp(path("out.txt")).find("2 matched"), std::string::npos)
      << db_test::slurp(path("out.txt"));

  // A missing baseline is bad input.
  status = std::system(("cd " + db_test::quote(DB_SOURCE_DIR) + " && " + db_test::quote(script) +
                        " /nonexistent.json " + db_test::quote(build) + " >/dev/null 2>&1")
                           .c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
}

}  // namespace

// The new lists from the command line, and --runs: each instance in separate processes.
TEST_F(Sweep, ListsOfGroupSizeLmHeadSeedAndSyncAndRunsFromTheCommandLine) {
  const Outcome o = run({"sweep",     "--model",
                         "tiny-int4", "--group-size",
                         "32,64",     "--lm-head",
                         "fp16,int8", "--seed",
                         "1,2",       "--sync-per-token=on,off",
                         "--tokens",  "2",
                         "--warmup",  "0",
                         "--repeat",  "1",
                         "--backend", "cpu",
                         "-o",        path("lists.jsonl")});
  ASSERT_EQ(o.code, 0) << o.err;
  const std::vector<db::Result> r = db::read_results(path("lists.jsonl"));
  ASSERT_EQ(r.size(), 16u);
  EXPECT_EQ(r[0].config.group_size, 32);
  EXPECT_EQ(r[0].config.lm_head_scheme, "fp16");
  EXPECT_EQ(r[0].config.seed, 1u);
  EXPECT_TRUE(r[0].config.sync_per_token);
  EXPECT_EQ(r[15].config.group_size, 64);
  EXPECT_EQ(r[15].config.lm_head_scheme, "int8");
  EXPECT_EQ(r[15].config.seed, 2u);
  EXPECT_FALSE(r[15].config.sync_per_token);
  db_test::expect_one_line_error(
      run({"sweep", "--model", "tiny", "--sync-per-token=maybe", "--backend", "cpu"}), 2,
      "--sync-per-token maybe: not one of on, off");

  const Outcome twice = run({"sweep", "--model", "tiny-int4", "--tokens", "2", "--warmup", "0", "--repeat",
                             "2", "--runs", "2", "--backend", "cpu", "-o", path("runs.jsonl")});
  ASSERT_EQ(twice.code, 0) << twice.err;
  EXPECT_EQ(db::read_results(path("runs.jsonl")).size(), 2u);
  EXPECT_NE(twice.err.find("[2/2 run 2/2]"), std::string::npos) << twice.err;
}

// A sweep over --batch on the CPU backend: each result is its batch's, batch 1's as before
// (no batch column, no --batch in its command), and sequence 0 of every batch decodes what
// batch 1 decodes.
TEST_F(Sweep, BatchesFromTheCommandLine) {
  const Outcome o = run({"sweep", "--model", "tiny-int4", "--batch", "1,3", "--context", "2", "--tokens", "3",
                         "--warmup", "0", "--repeat", "1", "--backend", "cpu", "-o", path("b.jsonl")});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("[2/2] model tiny-int4, int4 g64, lm_head fp16, kernel cpu.reference, graph off, "
                       "batch 3, context 2"),
            std::string::npos)
      << o.err;
  EXPECT_EQ(o.err.find("batch 1"), std::string::npos) << o.err;
  EXPECT_NE(o.out.find("| batch |"), std::string::npos) << o.out;
  const std::vector<db::Result> r = db::read_results(path("b.jsonl"));
  ASSERT_EQ(r.size(), 2u);
  const db::Result &one = r[0], &three = r[1];
  EXPECT_EQ(one.config.batch, 1);
  EXPECT_EQ(one.command.find("--batch"), std::string::npos) << one.command;
  EXPECT_EQ(one.bytes.per_token.activations, 0u);
  EXPECT_EQ(one.check.sequence_tokens_hashes, std::vector<std::string>{one.check.tokens_hash});
  EXPECT_EQ(three.config.batch, 3);
  EXPECT_NE(three.command.find(" --batch 3 "), std::string::npos) << three.command;
  EXPECT_EQ(three.check.tokens, one.check.tokens) << "sequence 0 decodes what batch 1 decodes";
  ASSERT_EQ(three.check.sequence_tokens_hashes.size(), 3u);
  EXPECT_EQ(three.check.sequence_tokens_hashes[0], one.check.tokens_hash);
  // The step's figures at batch 3 (tests/test_accounting.cpp has them by hand).
  const db::ModelConfig c = db::load_model_config("tiny-int4");
  EXPECT_EQ(three.bytes.per_token.total, db::account_bytes(c, {}, {}, 2, 4, 3).per_token.total);
  EXPECT_EQ(three.flops.total, db::account_flops(c, {}, 2, 4, 3).total);
  EXPECT_DOUBLE_EQ(three.timing.aggregate_tokens_per_s, 3 * three.timing.tokens_per_s);
  EXPECT_EQ(three.timing.samples_ms.size(), 3u) << "one sample per step";
  // Both floors measured on the host; the floor is the larger.
  EXPECT_GT(three.device.peak_compute_TFLOPS, 0);
  EXPECT_FALSE(three.device.compute_probe.empty());
  const db::Roofline& f = three.roofline;
  EXPECT_GT(f.compute_floor_tpot_ms, 0);
  EXPECT_DOUBLE_EQ(f.floor_tpot_ms, std::max(f.bandwidth_floor_tpot_ms, f.compute_floor_tpot_ms));
  EXPECT_DOUBLE_EQ(f.arithmetic_intensity,
                   static_cast<double>(three.flops.total) / static_cast<double>(three.bytes.per_token.total));

  // compare matches each batch with its own, and --pair-by batch pairs them.
  const Outcome same = run({"compare", path("b.jsonl"), path("b.jsonl")});
  EXPECT_NE(same.out.find("2 matched"), std::string::npos) << same.out;
  EXPECT_NE(same.out.find("| batch |"), std::string::npos) << same.out;
  const Outcome pair = run({"compare", path("b.jsonl"), "--pair-by", "batch"});
  EXPECT_NE(pair.out.find("batch 1 -> 3"), std::string::npos) << pair.out;
  // report of batch-1 results only: the table it always printed.
  const Outcome rep = run({"report", path("b.jsonl")});
  ASSERT_EQ(rep.code, 0) << rep.err;
  EXPECT_NE(rep.out.find("| all tok/s |"), std::string::npos) << rep.out;
  const Outcome old = run({"report", "results/h200/8b-int4-graph-on.json", "--format", "csv"});
  ASSERT_EQ(old.code, 0) << old.err;
  EXPECT_EQ(old.out.find("batch"), std::string::npos) << old.out;
}

// A sweep over the KV cache on the CPU backend: each result is its scheme's, named in the
// progress line, and each scheme's instances share their own WeightSource (whose config
// carries the scheme), never another scheme's.
TEST_F(Sweep, KvCachesFromTheCommandLine) {
  const Outcome o =
      run({"sweep", "--model", "tiny-int4", "--kv-cache", "fp16,fp8,int8", "--context", "2", "--tokens",
           "2,3", "--warmup", "0", "--repeat", "1", "--backend", "cpu", "-o", path("kv.jsonl")});
  ASSERT_EQ(o.code, 0) << o.err;
  const std::vector<db::Result> r = db::read_results(path("kv.jsonl"));
  ASSERT_EQ(r.size(), 6u);
  const char* expected[] = {"fp16", "fp16", "fp8", "fp8", "int8", "int8"};
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(r[i].config.kv_cache, expected[i]) << i;
    EXPECT_EQ(r[i].command.find("--kv-cache") != std::string::npos, i >= 2) << r[i].command;
  }
  EXPECT_NE(o.err.find("[3/6] model tiny-int4, int4 g64, lm_head fp16, KV cache fp8, kernel cpu.reference"),
            std::string::npos)
      << o.err;
  EXPECT_NE(o.err.find("3 of 6 instances reused a WeightSource"), std::string::npos) << o.err;
  // compare pairs the schemes against fp16 with --pair-by.
  const Outcome pair = run({"compare", path("kv.jsonl"), "--pair-by", "kv_cache"});
  EXPECT_NE(pair.out.find("kv_cache fp16 -> fp8"), std::string::npos) << pair.out;
  EXPECT_NE(pair.out.find("kv_cache fp16 -> int8"), std::string::npos) << pair.out;
}
