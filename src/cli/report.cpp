// The report verb: result files in, one table out (the printers of printers.h).
#include <fmt/format.h>

#include <iostream>

#include "decodebench/commands.h"
#include "decodebench/error.h"
#include "decodebench/printers.h"

namespace db {

int cmd_report(const std::vector<std::string>& files, const std::string& format, const std::string& output) {
  std::vector<Result> all;
  for (const std::string& f : files) {
    ResultsAndErrors r = read_results_and_errors(f);
    for (const ErrorEntry& e : r.errors)  // failed sweep instances
      fmt::print(stderr, "decodebench: warning: {}: skipping an error entry ({}): {}\n", e.origin,
                 error_entry_summary(e), e.error);
    all.insert(all.end(), r.results.begin(), r.results.end());
  }
  const OutputFormat fmt = format == "csv"     ? OutputFormat::csv
                           : format == "json"  ? OutputFormat::json
                           : format == "jsonl" ? OutputFormat::jsonl
                                               : OutputFormat::md;
  if (output.empty())
    std::cout << format_results(all, fmt) << std::flush;
  else
    write_results_file(output, all, fmt);
  return 0;
}

}  // namespace db
