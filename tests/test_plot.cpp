// scripts/plot.py on the committed H200 results: the roofline plot comes out as a PNG, and
// a file that is not JSON fails with exit 2, one stderr line and no PNG (nor its .tmp).
// matplotlib missing is a failure, not a skip: scripts/install_deps.sh installs it.
#include <gtest/gtest.h>
#include "temp_dir.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_helpers.h"

namespace {

namespace fs = std::filesystem;
using db_test::python;
using db_test::quote;
using db_test::run_script;
using db_test::slurp;

class Plot : public db_test::TempDirTest {};

const std::string kResults = std::string(DB_SOURCE_DIR) + "/results/h200/";

TEST(PlotDeps, MatplotlibImportable) {
  const std::string cmd = quote(python()) + " -c 'import matplotlib' >/dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << python() << " cannot import matplotlib: run scripts/install_deps.sh (python3-matplotlib)";
}

TEST_F(Plot, RooflineWritesPng) {
  const std::string out = path("r.png");
  const db_test::Outcome o = run_script(
      "plot.py", {"roofline", out, kResults + "8b-int4-graph-on.json", kResults + "8b-fp16-graph-on.json"});
  const std::string& err = o.err;
  ASSERT_EQ(o.code, 0) << "stderr: " << err;
  EXPECT_TRUE(err.empty()) << err;
  ASSERT_TRUE(fs::exists(out));
  EXPECT_GT(fs::file_size(out), 1000u);
  const std::string png = slurp(out);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << "not a PNG";
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

TEST_F(Plot, NotJsonExits2WithoutPng) {
  { std::ofstream(path("bad.json")) << "this is not JSON\n"; }
  const std::string out = path("r.png");
  const db_test::Outcome o =
      run_script("plot.py", {"roofline", out, kResults + "8b-int4-graph-on.json", path("bad.json")});
  const std::string& err = o.err;
  EXPECT_EQ(o.code, 2) << "stderr: " << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "stderr is not one line:\n" << err;
  EXPECT_NE(err.find("bad.json"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

}  // namespace
