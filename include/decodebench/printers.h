// Printers of results: json (schema v1), jsonl, md and csv, and the human summary printed
// after every run. One field list (result_fields) drives the tabular printers, llama-bench
// style: md and csv pull the same dotted paths out of each result's JSON, so a field added
// to the list appears in both.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "decodebench/result.h"
#include "decodebench/run_spec.h"

namespace db {

// How md shows a column; csv always writes the raw JSON value at full precision.
enum class CellFormat {
  text,  // as is; "" shown as "-"
  integer,
  on_off,     // boolean as "on" / "off"
  gigabytes,  // a byte count shown in GB (1e9), 2 decimals
  ms,         // 3 decimals
  per_s,      // tokens per second, 1 decimal
  GBps,       // 1 decimal
  ratio,      // 0..1, 2 decimals
  percent,    // a fraction shown in percent, 2 decimals
  joules,     // 4 significant digits (J/step, J/token, tokens/J)
  watts,      // 1 decimal
};

struct ResultField {
  const char* path;    // dotted path into the result's JSON, e.g. "timing.tpot_ms.median"
  const char* header;  // md column header; the csv header is the path itself
  CellFormat format;
  // md shows the column only where its rows differ in it (a key field that usually does
  // not vary: group size, lm_head, sync per token, ...); csv always has it.
  bool when_differs = false;
  // md and csv have the column only when a row ran at a batch other than 1 (config.batch):
  // a table of batch-1 results is what it was before --batch.
  bool when_batched = false;
  // With when_differs: md shows the column also where a row's value is not this one, so a
  // lone run of an fp8 KV cache says so. nullptr: only where the rows differ.
  const char* usual = nullptr;
};

// The columns of the md and csv tables, in order.
const std::vector<ResultField>& result_fields();

// json: one result as an object, several as an array (2-space indent); jsonl: one compact
// object per line; md: GitHub table; csv: RFC 4180, header row of dotted paths. Every
// format ends with a newline.
std::string format_results(const std::vector<Result>& results, OutputFormat format);

// Writes format_results() to a temporary file of its own in path's directory and renames it
// onto path (output_file.h AtomicFile), so a reader never sees a partial file, even with
// another writer of the same path. Throws db::Error "cannot write <path>: <reason>", leaving
// no file behind.
void write_results_file(const std::string& path, const std::vector<Result>& results, OutputFormat format);

// One instance of a sweep: its result, or (result empty) its error entry.
struct SweepEntry {
  std::optional<Result> result;
  ErrorEntry error;
};

// A sweep's entries in instance order. Without error entries md, csv and jsonl are exactly
// format_results() of the results; json is always an array. Error entries: json/jsonl write
// the error object in the entry's place; md shows a row with the config cells it knows
// ("-" elsewhere) and, after the table, an "Errors" list with each message; csv gets a
// last column "error" (empty for results) holding the message.
std::string format_entries(const std::vector<SweepEntry>& entries, OutputFormat format);

// Writes text to path atomically (as write_results_file).
void write_text_file_atomically(const std::string& path, const std::string& text);

// A GitHub-table cell: '|' escaped, line breaks as spaces, "" shown as "-".
std::string md_escape(const std::string& s);

// The human summary of one run (a few aligned lines, newline-terminated), printed on stdout.
std::string summary_text(const Result& r);

}  // namespace db
