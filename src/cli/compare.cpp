// The compare verb: reads BASE and NEW (or the files of --pair-by), compares them
// (compare.h), prints the warnings on stderr and the comparison on stdout, and returns the
// gate's exit code.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <utility>

#include "decodebench/commands.h"
#include "decodebench/compare_printers.h"
#include "decodebench/error.h"
#include "decodebench/input.h"
#include "decodebench/result.h"

namespace db {

int cmd_compare(const CompareSpec& spec) {
  // Unreadable or invalid input is bad input here (exit 2), never a failed comparison (1,
  // which means "regressed"): whatever reading throws becomes a db::UsageError. Error
  // entries (failed sweep instances) are skipped with a warning each, and counted: the gate
  // fails closed on them.
  int errors = 0;
  const auto read = [&errors](const std::string& path) {
    ResultsAndErrors r;
    try {
      r = read_results_and_errors(path);
    } catch (const UsageError&) {
      throw;
    } catch (const std::bad_alloc&) {
      throw UsageError(fmt::format("results {}: out of host memory reading it", path));
    } catch (const std::exception& e) {
      throw UsageError(e.what());
    }
    for (const std::string& w : r.warnings) warn_line(w);
    for (const ErrorEntry& e : r.errors)
      warn("{}: skipping an error entry ({}): {}", e.origin, error_entry_summary(e), printable(e.error, 500));
    errors = static_cast<int>(r.errors.size());
    return std::move(r.results);
  };
  const Metric metric = spec.metric == "energy" ? Metric::energy : Metric::tpot;
  Comparison c;
  if (!spec.pair_by.empty()) {
    std::vector<Result> all;
    int all_errors = 0;
    for (const std::string& f : spec.files) {
      std::vector<Result> rs = read(f);
      all_errors += errors;
      all.insert(all.end(), std::make_move_iterator(rs.begin()), std::make_move_iterator(rs.end()));
    }
    c = compare_by_field(all, spec.pair_by, spec.base_value, spec.threshold, kCompareAlpha, metric);
    c.base_errors = all_errors;
  } else {
    if (spec.files.size() != 2)
      usage_fail(
          "compare takes BASE and NEW (two files), or --pair-by FIELD with one or more files; got {} file{}",
          spec.files.size(), spec.files.size() == 1 ? "" : "s");
    const std::vector<Result> b = read(spec.files[0]);
    const int base_errors = errors;
    const std::vector<Result> n = read(spec.files[1]);
    c = compare_results(b, n, spec.threshold, kCompareAlpha, metric);
    c.base_errors = base_errors;
    c.new_errors = errors;
  }
  c.allow_missing = spec.allow_missing;
  for (const std::string& w : c.warnings) warn_line(w);
  std::fflush(stderr);
  std::cout << (spec.format == "json" ? format_comparison_json(c) : format_comparison_md(c)) << std::flush;
  return c.exit_code();
}

}  // namespace db
