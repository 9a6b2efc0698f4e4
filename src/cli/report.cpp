// The report verb: result files in, one table out (the printers of printers.h).
#include <fmt/format.h>

#include <iostream>

#include "decodebench/commands.h"
#include "decodebench/error.h"
#include "decodebench/input.h"
#include "decodebench/printers.h"

namespace db {

int cmd_report(const std::vector<std::string>& files, const std::string& format, const std::string& output) {
  std::vector<Result> all;
  size_t skipped = 0;
  for (const std::string& f : files) {
    ResultsAndErrors r = read_results_and_errors(f);
    for (const std::string& w : r.warnings) warn_line(w);
    for (const ErrorEntry& e : r.errors)  // failed sweep instances
      warn("{}: skipping an error entry ({}): {}", e.origin, error_entry_summary(e), printable(e.error, 500));
    skipped += r.errors.size();
    all.insert(all.end(), r.results.begin(), r.results.end());
  }
  // Nothing to report is a failure, not an empty table (or an empty -o file) and exit 0.
  if (all.empty())
    fail("report: no results in {} ({} error entr{} skipped)",
         files.size() == 1 ? files[0] : "the files given", skipped, skipped == 1 ? "y" : "ies");
  if (format == "summary") {  // each result as `decodebench run` prints it
    std::string text;
    for (size_t i = 0; i < all.size(); ++i) text += (i ? "\n" : "") + summary_text(all[i]);
    if (output.empty())
      std::cout << text << std::flush;
    else
      write_text_file_atomically(output, text);
    return 0;
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
