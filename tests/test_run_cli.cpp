// The run verb through the binary: --max-noise and --max-time, the noise beside the median,
// progress lines, the energy line, --runs, and an int4 group replaced.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "cli_helpers.h"
#include "decodebench/protocol.h"
#include "decodebench/result.h"
#include "decodebench/stats.h"
#include "temp_dir.h"

namespace {

class MeasureCli : public db_test::TempDirTest {};

TEST_F(MeasureCli, MaxNoiseRecordsWhyTheRepetitionsStopped) {
  const std::string out = path("r.json");
  const auto o = db_test::run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "2", "--warmup", "0",
                               "-r", "2", "--max-noise", "50%", "--max-time", "5", "-o", out});
  ASSERT_EQ(o.code, 0) << o.err;
  const db::Result r = db::read_results(out).at(0);
  EXPECT_DOUBLE_EQ(r.config.max_noise, 0.5);
  EXPECT_DOUBLE_EQ(r.config.max_time_s, 5);
  EXPECT_TRUE(r.timing.stop == db::kStopNoise || r.timing.stop == db::kStopTime) << r.timing.stop;
  EXPECT_GE(r.timing.repetitions, 2);
  EXPECT_EQ(static_cast<size_t>(r.timing.repetitions), r.timing.repetition_medians_ms.size());
  EXPECT_EQ(r.timing.samples_ms.size(), 2 * r.timing.repetition_medians_ms.size());
  EXPECT_DOUBLE_EQ(r.timing.noise, db::repetition_noise(r.timing.repetition_medians_ms));
  if (r.timing.stop == db::kStopNoise) EXPECT_LE(r.timing.noise, 0.5);
}

// An int4 group that does not fit the config's matrices: the run says which it used and why,
// on stderr and in the result.
TEST_F(MeasureCli, AnInt4GroupThatDoesNotFitIsReplacedAndSaidSo) {
  const std::string cfg = path("c.json"), out = path("r.json");
  std::ofstream(cfg) << R"({"extends": "tiny", "hidden_size": 96})";
  const auto o = db_test::run({"--model", cfg, "--quant", "int4", "--backend", "cpu", "--tokens", "2",
                               "--warmup", "0", "-r", "1", "-o", out});
  ASSERT_EQ(o.code, 0) << o.err;
  const std::string note = "int4 group size 32 instead of 64: 64 does not divide hidden_size 96";
  EXPECT_NE(o.err.find("decodebench: warning: " + note + "\n"), std::string::npos) << o.err;
  const db::Result r = db::read_results(out).at(0);
  EXPECT_EQ(r.config.group_size, 32);
  EXPECT_EQ(r.config.group_size_note, note);
}

TEST_F(MeasureCli, AFixedRunStopsAtRepeatAndPrintsItsNoiseBesideTheMedian) {
  const std::string out = path("r.json");
  const auto o =
      db_test::run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "2", "--repeat", "3", "-o", out});
  ASSERT_EQ(o.code, 0) << o.err;
  const db::Result r = db::read_results(out).at(0);
  EXPECT_EQ(r.timing.stop, db::kStopRepeat);
  EXPECT_EQ(r.timing.repetitions, 3);
  EXPECT_EQ(r.config.max_noise, 0);
  EXPECT_NE(o.out.find(" ms median ± "), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("in 3 repetitions"), std::string::npos) << o.out;
}

TEST_F(MeasureCli, MaxTimeWithoutMaxNoiseAndABadProgressAreRefused) {
  db_test::expect_one_line_error(db_test::run({"--model", "tiny", "--backend", "cpu", "--max-time", "5"}), 2,
                                 "--max-time needs --max-noise");
  db_test::expect_one_line_error(db_test::run({"--model", "tiny", "--backend", "cpu", "--max-noise", "-1"}),
                                 2, "--max-noise");
  db_test::expect_one_line_error(db_test::run({"--model", "tiny", "--backend", "cpu", "--progress", "loud"}),
                                 2, "--progress");
}

TEST_F(MeasureCli, ProgressOnShowsThePhasesOneLineEachWhenStderrIsNotATerminal) {
  const auto o = db_test::run({"--model", "tiny-int4", "--backend", "cpu", "--context", "4", "--tokens", "2",
                               "--repeat", "2", "--progress", "on"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("decodebench: tiny-int4 on cpu: warm-up (16 steps)"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("decodebench: tiny-int4 on cpu: timed (2 repetitions of 2 steps)"), std::string::npos)
      << o.err;
  EXPECT_EQ(o.err.find('\r'), std::string::npos) << "no carriage returns off a terminal";
}

// Every run has an energy line and an energy object, measured or null with why, whether or
// not this machine's RAPL is readable; --energy off says so, and a bad value is refused.
TEST_F(MeasureCli, EveryRunReportsItsEnergyOrWhyNot) {
  const std::string out = path("r.json");
  const auto o =
      db_test::run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "4", "--repeat", "2", "-o", out});
  ASSERT_EQ(o.code, 0) << o.err;
  const size_t at = o.out.find("\nenergy    ");
  ASSERT_NE(at, std::string::npos) << o.out;
  const db::Result r = db::read_results(out).at(0);
  if (r.energy.reason.empty()) {
    EXPECT_EQ(r.energy.repetition_j.size(), 2u);
    EXPECT_NE(o.out.find(" J/token median", at), std::string::npos) << o.out;
  } else {
    EXPECT_TRUE(r.energy.repetition_j.empty());
    EXPECT_FALSE(r.energy.j_per_token.median.has_value());
    EXPECT_EQ(o.out.substr(at + 11, 5 + r.energy.reason.size()), "n/a: " + r.energy.reason) << o.out;
  }
  EXPECT_EQ(r.energy.clocks_reason.empty(), false) << "the cpu backend samples no clocks";

  const auto off = db_test::run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "4", "--repeat", "2",
                                 "--energy", "off", "-o", out});
  ASSERT_EQ(off.code, 0) << off.err;
  EXPECT_NE(off.out.find("\nenergy    n/a: not measured: --energy off\n"), std::string::npos) << off.out;
  EXPECT_EQ(db::read_results(out).at(0).energy.reason, "not measured: --energy off");
  // --runs passes it to every process.
  const auto runs = db_test::run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "2", "--repeat",
                                  "2", "--energy", "off", "--runs", "2", "-o", out});
  ASSERT_EQ(runs.code, 0) << runs.err;
  for (const db::Result& x : db::read_results(out)) {
    EXPECT_EQ(x.energy.reason, "not measured: --energy off");
    EXPECT_NE(x.command.find(" --energy off"), std::string::npos) << x.command;
  }
  db_test::expect_one_line_error(db_test::run({"--model", "tiny", "--backend", "cpu", "--energy", "maybe"}),
                                 2, "--energy");
}

// --runs N: N separate processes, each a run of its own, all in the result file.
TEST_F(MeasureCli, RunsMeasuresInSeparateProcesses) {
  const std::string out = path("runs.jsonl");
  const auto o = db_test::run({"--model", "tiny-int4", "--backend", "cpu", "--tokens", "2", "--warmup", "0",
                               "--repeat", "2", "--runs", "2", "-o", out});
  ASSERT_EQ(o.code, 0) << o.err;
  const std::vector<db::Result> r = db::read_results(out);
  ASSERT_EQ(r.size(), 2u);
  for (const db::Result& x : r) {
    EXPECT_EQ(x.config.model, "tiny-int4");
    EXPECT_EQ(x.timing.repetitions, 2);
    EXPECT_NE(x.command.find("decodebench run --model tiny-int4 "), std::string::npos) << x.command;
  }
  EXPECT_NE(o.out.find("2 runs in separate processes: "), std::string::npos) << o.out;
  db_test::expect_one_line_error(db_test::run({"--model", "tiny", "--backend", "cpu", "--runs", "0"}), 2,
                                 "--runs must be at least 1");
  // A run that fails in its process fails the parent with the child's line.
  db_test::expect_one_line_error(
      db_test::run({"--model", "tiny", "--backend", "cpu", "--context", "5000", "--runs", "2"}), 1,
      "max_position_embeddings");
}

}  // namespace
