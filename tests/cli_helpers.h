// Running the built decodebench binary from a test: capture its exit code, stdout and
// stderr, and check the one-line error contract (docs/design.md "Bad input"). Shared by the
// command-line tests (test_cli.cpp) and the end-to-end tests (test_e2e.cpp); run_script
// does the same for the repository's Python scripts (test_plot.cpp, test_trace_step.cpp).
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace db_test {

struct Outcome {
  int code = -1;
  std::string out, err;
};

inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs the command `program` (already quoted) with `args` in directory `cwd`, capturing
// stdout and stderr.
inline Outcome run_command(const std::string& program, const std::vector<std::string>& args,
                           const std::string& cwd = "/") {
  char tmpl[] = "/tmp/decodebench_cli_test_XXXXXX";
  const char* dir = mkdtemp(tmpl);
  EXPECT_NE(dir, nullptr);
  const std::string out = std::string(dir) + "/out", err = std::string(dir) + "/err";
  // Progress lines off unless a test asks for them (--progress): a slow machine would
  // otherwise add them to the stderr the tests read.
  std::string cmd = "cd " + quote(cwd) + " && DECODEBENCH_PROGRESS=off exec " + program;
  for (const std::string& a : args) cmd += " " + quote(a);
  cmd += " >" + quote(out) + " 2>" + quote(err) + " </dev/null";
  const int status = std::system(cmd.c_str());
  Outcome o;
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  o.out = slurp(out);
  o.err = slurp(err);
  std::error_code ec;  // a leftover temporary directory is not the test's failure
  std::filesystem::remove_all(dir, ec);
  return o;
}

// Runs the decodebench binary with `args` in directory `cwd`, capturing stdout and stderr.
inline Outcome run(const std::vector<std::string>& args, const std::string& cwd = "/") {
  return run_command(quote(DB_BINARY), args, cwd);
}

// The interpreter for the repository's scripts: Debian's (where python3-matplotlib
// installs), python3 on PATH otherwise.
inline std::string python() {
  return std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

// Runs `python scripts/SCRIPT args...`, capturing stdout and stderr.
inline Outcome run_script(const std::string& script, const std::vector<std::string>& args) {
  return run_command(quote(python()) + " " + quote(std::string(DB_SOURCE_DIR) + "/scripts/" + script), args);
}

// Whether stderr holds nothing but the warnings a measurement earns from the machine it ran
// on (timing.warnings: noisy, throttled, clocks fell), which a busy test machine may cause.
inline bool only_measurement_warnings(const std::string& err) {
  std::istringstream in(err);
  std::string line;
  while (std::getline(in, line)) {
    bool ok = false;
    for (const char* kind : {"noisy: ", "throttled: ", "clocks fell: "})
      ok = ok || line.rfind(std::string("decodebench: warning: ") + kind, 0) == 0;
    if (!ok) return false;
  }
  return true;
}

// Exit `code` and exactly one line on stderr, "decodebench: ..." containing `phrase`.
inline void expect_one_line_error(const Outcome& o, int code, const std::string& phrase) {
  EXPECT_EQ(o.code, code) << "stderr: " << o.err;
  ASSERT_FALSE(o.err.empty());
  EXPECT_EQ(o.err.back(), '\n') << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << "stderr is not one line:\n" << o.err;
  EXPECT_EQ(o.err.rfind("decodebench: ", 0), 0u) << o.err;
  EXPECT_NE(o.err.find(phrase), std::string::npos) << "expected '" << phrase << "' in: " << o.err;
}

}  // namespace db_test
