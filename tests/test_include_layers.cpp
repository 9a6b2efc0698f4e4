// The include graph of the product sources follows the libraries' layers (docs/design.md,
// "Where things live"): the core (include/decodebench/, src/{model,io,measure,report,cpu}/),
// then kernels/, then src/cuda/, then src/run/ (a run assembled from its spec), then src/cli/;
// each file includes only its own layer or lower ones, and no header includes itself through
// others.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = DB_SOURCE_DIR;

// 0 core, 1 kernels, 2 cuda, 3 run, 4 cli; -1: not a product source.
int layer_of(const fs::path& rel) {
  const std::string top = rel.begin()->string();
  if (top == "include") return 0;
  if (top == "kernels") return 1;
  if (top != "src" || std::distance(rel.begin(), rel.end()) < 3) return -1;
  const std::string dir = std::next(rel.begin())->string();
  if (dir == "cuda") return 2;
  if (dir == "run") return 3;
  if (dir == "cli") return 4;
  return 0;  // model, io, measure, report, cpu
}

bool is_source(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".h" || e == ".cuh" || e == ".cu" || e == ".cpp";
}

// The product file a quoted include names, as the build's include paths find it (the
// including file's folder, include/, kernels/, src/cuda/, src/run/, src/cli/), relative to the root;
// empty for a system or generated header.
fs::path resolve(const std::string& name, const fs::path& from) {
  for (const fs::path& dir : {from.parent_path(), fs::path("include"), fs::path("kernels"),
                              fs::path("src/cuda"), fs::path("src/run"), fs::path("src/cli")})
    if (fs::exists(kRoot / dir / name)) return (dir / name).lexically_normal();
  return {};
}

std::map<fs::path, std::vector<fs::path>> include_graph() {
  std::map<fs::path, std::vector<fs::path>> g;
  const std::regex include(R"re(^\s*#\s*include\s*"([^"]+)")re");
  for (const char* top : {"include", "kernels", "src"})
    for (const auto& e : fs::recursive_directory_iterator(kRoot / top)) {
      if (!e.is_regular_file() || !is_source(e.path())) continue;
      const fs::path rel = fs::relative(e.path(), kRoot);
      std::ifstream in(e.path());
      std::vector<fs::path>& out = g[rel];
      for (std::string line; std::getline(in, line);) {
        std::smatch m;
        if (!std::regex_search(line, m, include)) continue;
        const fs::path to = resolve(m[1], rel);
        if (!to.empty()) out.push_back(to);
      }
    }
  return g;
}

// Every product file `from` includes, directly or through others.
std::set<fs::path> reachable(const std::map<fs::path, std::vector<fs::path>>& g, const fs::path& from) {
  std::set<fs::path> seen;
  std::vector<fs::path> todo{from};
  while (!todo.empty()) {
    const fs::path f = todo.back();
    todo.pop_back();
    const auto it = g.find(f);
    if (it == g.end()) continue;
    for (const fs::path& to : it->second)
      if (seen.insert(to).second) todo.push_back(to);
  }
  return seen;
}

}  // namespace

TEST(IncludeLayers, NoFileIncludesAHigherLayer) {
  const auto g = include_graph();
  ASSERT_GT(g.size(), 50u);  // the tree was found
  for (const auto& [from, tos] : g)
    for (const fs::path& to : tos) EXPECT_LE(layer_of(to), layer_of(from)) << from << " includes " << to;
}

TEST(IncludeLayers, NoHeaderIncludesItselfThroughOthers) {
  const auto g = include_graph();
  // Depth-first from every file; a file met again on the current path is a cycle.
  std::set<fs::path> done;
  std::vector<fs::path> path;
  std::function<void(const fs::path&)> visit = [&](const fs::path& f) {
    path.push_back(f);
    const auto it = g.find(f);
    if (it != g.end())
      for (const fs::path& to : it->second) {
        if (std::find(path.begin(), path.end(), to) != path.end()) {
          ADD_FAILURE() << "include cycle through " << to;
          continue;
        }
        if (!done.count(to)) visit(to);
      }
    path.pop_back();
    done.insert(f);
  };
  for (const auto& entry : g)
    if (!done.count(entry.first)) visit(entry.first);
}

// Within the core, the model (configs, shapes, the kernel table, the linear plan) sits below
// the weight readers and the run: a config is resolved from the command line's overrides and
// a weights file's recorded quantization that its callers read, never by reading a file or a
// RunSpec itself.
TEST(IncludeLayers, TheModelReadsNoWeightsFileAndKnowsNoRun) {
  const auto g = include_graph();
  const fs::path above[] = {"include/decodebench/run_spec.h",    "include/decodebench/weights.h",
                            "include/decodebench/safetensors.h", "include/decodebench/adapter.h",
                            "include/decodebench/backend.h",     "include/decodebench/commands.h"};
  ASSERT_TRUE(g.count("src/model/config.cpp"));
  for (const auto& [from, tos] : g) {
    if (*std::next(from.begin()) != "model" || *from.begin() != "src") continue;
    const std::set<fs::path> r = reachable(g, from);
    for (const fs::path& a : above) EXPECT_FALSE(r.count(a)) << from << " includes " << a;
  }
}
