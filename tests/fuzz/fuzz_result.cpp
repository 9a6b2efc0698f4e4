// libFuzzer target: a result file's text (one object, an array, or JSONL, as report and
// compare read them). Whatever is accepted must print in every format, compare against
// itself, and survive a round trip: written and read again, it writes the same text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "decodebench/compare_printers.h"
#include "decodebench/error.h"
#include "decodebench/printers.h"
#include "decodebench/result.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const db::ResultsAndErrors r = db::parse_results_text(text, "fuzz.jsonl");
    std::vector<db::SweepEntry> entries;
    for (const db::Result& x : r.results) {
      const std::string once = db::result_to_json_text(x, -1);
      const std::string twice = db::result_to_json_text(db::result_from_json_text(once, "round trip"), -1);
      if (once != twice) std::abort();  // the writer and the reader disagree
      (void)db::summary_text(x);
      entries.push_back({x, {}});
    }
    for (const db::ErrorEntry& e : r.errors) {
      (void)db::error_entry_summary(e);
      entries.push_back({std::nullopt, e});
    }
    for (db::OutputFormat f :
         {db::OutputFormat::json, db::OutputFormat::jsonl, db::OutputFormat::md, db::OutputFormat::csv}) {
      (void)db::format_results(r.results, f);
      (void)db::format_entries(entries, f);
    }
    const db::Comparison cmp = db::compare_results(r.results, r.results, 0.03);
    (void)db::format_comparison_md(cmp);
    (void)db::format_comparison_json(cmp);
  } catch (const db::Error&) {
  }
  return 0;
}
