// Runs in separate processes (--runs N): each is this binary's own `run` verb, so that what
// moves between processes (clocks, placement, allocations) shows in the results, not only
// what moves between the repetitions of one process.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli.h"
#include "decodebench/commands.h"
#include "decodebench/error.h"
#include "decodebench/result.h"

extern char** environ;

namespace db {
namespace {

const char* on_off(bool b) {
  return b ? "on" : "off";
}

// A private temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "decodebench_run_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) fail("cannot make a temporary directory: {}", std::strerror(errno));
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const char* name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<std::string> run_arguments(const RunSpec& s) {
  std::vector<std::string> a = {"decodebench", "run", "--model", s.model};
  if (!s.weights.empty()) a.insert(a.end(), {"--weights", s.weights});
  a.insert(a.end(), {"--seed", std::to_string(s.seed)});
  if (s.quant) a.insert(a.end(), {"--quant", to_string(*s.quant)});
  if (s.group_size) a.insert(a.end(), {"--group-size", std::to_string(*s.group_size)});
  if (s.lm_head) a.insert(a.end(), {"--lm-head", to_string(*s.lm_head)});
  if (s.kv_cache != KvScheme::fp16) a.insert(a.end(), {"--kv-cache", to_string(s.kv_cache)});
  a.insert(a.end(), {"--kernel", s.kernel});
  const bool cuda = s.backend == BackendKind::cuda;  // --graph and --device are the CUDA backend's
  if (cuda) a.insert(a.end(), {"--graph", on_off(s.graph)});
  if (!s.adapter.empty())
    a.insert(a.end(), {"--adapter", s.adapter, "--adapter-mode",
                       s.adapter_mode == AdapterMode::external ? "external" : "merged"});
  a.insert(a.end(), {"--context", std::to_string(s.context), "--tokens", std::to_string(s.tokens), "--warmup",
                     std::to_string(s.warmup), "--repeat", std::to_string(s.repeat)});
  if (s.batch != 1) a.insert(a.end(), {"--batch", std::to_string(s.batch)});
  if (s.max_noise > 0)
    a.insert(a.end(), {"--max-noise", fmt::format("{}%", 100 * s.max_noise), "--max-time",
                       fmt::format("{}", s.max_time_s)});
  if (s.sync_per_token) a.push_back("--sync-per-token");
  if (s.check) a.push_back("--check");
  if (!s.energy) a.insert(a.end(), {"--energy", "off"});
  a.insert(a.end(), {"--backend", to_string(s.backend)});
  if (cuda) a.insert(a.end(), {"--device", std::to_string(s.device)});
  return a;
}

Result run_in_process(const RunSpec& spec) {
  TempDir dir;
  const std::string out = dir.file("result.json"), err = dir.file("stderr.txt");
  std::vector<std::string> args = run_arguments(spec);
  args.insert(args.end(), {"-o", out, "--format", "json", "--progress", "off"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // The child's stdout (its summary) is not ours to print; its stderr is read back below.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) fail("cannot start a run in a separate process: {}", std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) fail("waiting for a run in a separate process: {}", std::strerror(errno));

  // Its warnings are the run's: pass them on. Its error (one line) becomes ours.
  std::string last;
  std::istringstream lines(read_file(err));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("decodebench: warning: ", 0) == 0) std::fprintf(stderr, "%s\n", line.c_str());
    if (!line.empty()) last = line;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string prefix = "decodebench: ";
    if (last.rfind(prefix, 0) == 0) last = last.substr(prefix.size());
    fail("{}", last.empty() ? fmt::format("a run in a separate process ended with status {}", status) : last);
  }
  const std::vector<Result> r = read_results(out);
  if (r.size() != 1) fail("a run in a separate process wrote {} results, not one", r.size());
  return r.front();
}

}  // namespace db
